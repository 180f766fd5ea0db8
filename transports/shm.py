"""The shm transport: the tcp transport's streams for control, shared memory for big arrays.

Ranks live in several processes of one machine. Envelopes travel as frames
over loopback streams (see ``transports.tcp``), except that every array
buffer of at least ``threshold`` bytes goes through a
``multiprocessing.shared_memory`` segment: the sender creates the segment and
copies the bytes in (one copy in), the frame carries only its name, and the
receiver copies the bytes out into its own array and unlinks the segment
(one copy out). Nothing is pickled.

Frame layout on an shm link: buffer 0 is a small msgpack list of
``[index, segment name, nbytes]`` for the buffers that went through shared
memory (their slots in the frame are empty); the other buffers follow inline.

Rule 1: every segment is named ``simcluster_<run id>_<process>_<n>``, so the
coordinator can unlink whatever a crashed process left behind (``cleanup``),
and a receiver refuses to open a segment of another run.
Rule 2: segments are never left to ``multiprocessing``'s resource tracker:
whoever is last to touch one (the receiver, or ``cleanup``) unlinks it.
"""

from __future__ import annotations

import mmap
import os
import sys
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Final

import numpy as np

from . import wire
from .base import Envelope, TransportError
from .tcp import DEFAULT_CONNECT_TIMEOUT, TcpTransport

__all__ = ["DEFAULT_THRESHOLD", "PREFIX", "ShmTransport", "cleanup", "leftovers"]

PREFIX: Final = "simcluster_"
"""Every segment name starts with this, then the run id."""

DEFAULT_THRESHOLD: Final = 1 << 16
"""Array buffers from this many bytes on go through shared memory; smaller ones inline."""

_SHM_DIR: Final = "/dev/shm"
_NO_SEGMENTS: Final = wire.pack([]).header
_TRACKED: Final = sys.version_info < (3, 13)  # track=False exists from 3.13 on


def _segment(name: str, size: int = 0) -> shared_memory.SharedMemory:
    """Create (``size`` > 0) or open segment ``name``, keeping the resource tracker out of it."""
    create = size > 0
    if _TRACKED:
        shm = shared_memory.SharedMemory(name, create=create, size=size)
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
        return shm
    return shared_memory.SharedMemory(name, create=create, size=size,  # type: ignore[call-arg]
                                      track=False)


def _unlink(name: str) -> None:
    import _posixshmem  # type: ignore[import-not-found]  # what SharedMemory.unlink calls

    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def leftovers(run_id: str = "") -> list[str]:
    """Return the names of simcluster segments in /dev/shm (of one run, if ``run_id``)."""
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:  # no /dev/shm on this system: nothing to list
        return []
    return sorted(n for n in names if n.startswith(PREFIX + run_id))


def cleanup(run_id: str) -> int:
    """Unlink every segment run ``run_id`` left behind; return how many there were.

    The coordinator calls this when a run ends, however it ends, so a process
    killed between creating a segment and its receiver unlinking it leaks nothing.
    """
    names = leftovers(f"{run_id}_") if run_id else []
    for name in names:
        _unlink(name)
    return len(names)


class ShmTransport(TcpTransport):
    """Envelopes between processes of one machine: arrays through shared memory.

    Args:
        threshold: array buffers of at least this many bytes go through a
            shared-memory segment; smaller ones travel inline in the frame.
        max_frame: cap on one frame's declared length, in bytes.
        connect_timeout: seconds to wait for a peer to connect and answer.
    """

    __slots__ = ("threshold", "_run_id", "_count")

    name = "shm"

    def __init__(self, *, threshold: int = DEFAULT_THRESHOLD,
                 max_frame: int = wire.DEFAULT_MAX_FRAME,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        super().__init__("127.0.0.1", max_frame=max_frame, connect_timeout=connect_timeout)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"ShmTransport(threshold={threshold!r}): threshold must be an int "
                             ">= 1 (bytes)")
        self.threshold = threshold
        self._run_id = ""
        self._count = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "max_frame": self.max_frame,
                "connect_timeout": self.connect_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def bind(self, proc: int, per: int, procs: int, secret: bytes, run_id: str,
             on_error: Any) -> None:
        super().bind(proc, per, procs, secret, run_id, on_error)
        self._run_id = run_id

    def _outgoing(self, envelope: Envelope, proc: int) -> Envelope:
        """Move big buffers into fresh segments (one copy in); the frame names them."""
        buffers = envelope.buffers
        threshold = self.threshold
        if not any(_nbytes(b) >= threshold for b in buffers):
            return envelope._replace(buffers=(_NO_SEGMENTS, *buffers))
        refs: list[list[object]] = []
        out: list[object] = []
        for index, buf in enumerate(buffers):
            view = _bytes_of(buf)
            if view.nbytes < threshold:
                out.append(view)
                continue
            self._count += 1
            name = f"{PREFIX}{self._run_id}_{self._proc}_{self._count}"
            try:
                shm = _segment(name, view.nbytes)
            except OSError as exc:
                raise TransportError(envelope.src, "send", f"cannot create a shared-memory "
                                     f"segment of {view.nbytes} bytes ({exc})",
                                     "free space in /dev/shm, or use transport='tcp'",
                                     peer=envelope.dst) from None
            try:
                target = shm.buf
                assert target is not None
                target[:view.nbytes] = view
            finally:
                shm.close()
            refs.append([index, name, view.nbytes])
            out.append(b"")
        return envelope._replace(buffers=(wire.pack(refs).header, *out))

    def _incoming(self, envelope: Envelope) -> Envelope:
        """Replace segment references by arrays over the mapped segments (names unlinked)."""
        buffers = envelope.buffers
        if not buffers:
            raise self._bad(envelope, "the frame has no segment list")
        refs = wire.unpack(buffers[0])
        rest = list(buffers[1:])
        if type(refs) is not list:
            raise self._bad(envelope, "the segment list is not a list")
        own = f"{PREFIX}{self._run_id}_"
        for ref in refs:
            if not (type(ref) is list and len(ref) == 3 and type(ref[0]) is int
                    and 0 <= ref[0] < len(rest) and type(ref[1]) is str
                    and ref[1].startswith(own) and type(ref[2]) is int and ref[2] > 0):
                raise self._bad(envelope, f"bad segment reference {ref!r:.80}")
            index, name, nbytes = ref
            rest[index] = self._take(envelope, name, nbytes)
        return envelope._replace(buffers=tuple(rest))

    def _take(self, envelope: Envelope, name: str, nbytes: int) -> Any:
        """Map segment ``name`` and unlink it at once; the array lives in the mapping.

        The copy out is the engine's (into the receive buffer), or none at all
        for a receive without a buffer; the memory goes back to the system when
        the last array over it is freed, and no name is left in /dev/shm.
        """
        import _posixshmem  # what SharedMemory opens with

        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        except OSError as exc:
            raise self._bad(envelope, f"segment {name} cannot be opened ({exc})") from None
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise self._bad(envelope, f"segment {name} holds {size} bytes, not {nbytes}")
            mapping = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
            _unlink(name)
        return np.frombuffer(mapping, np.uint8, nbytes)

    def _bad(self, envelope: Envelope, problem: str) -> TransportError:
        peer = f"process {envelope.src // self._per}"
        return TransportError(None, "recv", f"from peer {peer!r}: {problem}",
                              "both ends must run the shm transport of the same simcluster "
                              "version", peer=peer)


def _nbytes(buf: object) -> int:
    if isinstance(buf, np.ndarray):
        return int(buf.nbytes)
    return memoryview(buf).nbytes  # type: ignore[arg-type]


def _bytes_of(buf: object) -> memoryview:
    """Return the bytes of a contiguous buffer as a flat unsigned-byte view."""
    if isinstance(buf, np.ndarray):
        if buf.nbytes == 0:
            return memoryview(b"")
        return buf.ravel(order="K").view(np.uint8).data
    view = memoryview(buf)  # type: ignore[arg-type]
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
