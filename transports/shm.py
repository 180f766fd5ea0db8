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
the process that made one unlinks it when its transport closes, and
``cleanup`` unlinks what a crashed process left.
Rule 3: a segment is lent to one message at a time. The receiver maps it
(once per segment: the pages stay mapped for the next message) and hands the
engine an array over it; when the last array over it is freed, the receiver
sends the name back with its next flush (a frame the engine never sees), and
the owner lends it again. A receiver that keeps the array (a receive without
a buffer) keeps the segment: the owner makes another.
"""

from __future__ import annotations

import mmap
import os
import sys
import weakref
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Final

import numpy as np

from . import wire
from .base import ACK, Envelope, TransportError, rebuffered
from .tcp import DEFAULT_CONNECT_TIMEOUT, TcpTransport

__all__ = ["DEFAULT_THRESHOLD", "PREFIX", "ShmTransport", "cleanup", "leftovers"]

PREFIX: Final = "simcluster_"
"""Every segment name starts with this, then the run id."""

DEFAULT_THRESHOLD: Final = 1 << 16
"""Array buffers from this many bytes on go through shared memory; smaller ones inline."""

_SHM_DIR: Final = "/dev/shm"
_NO_SEGMENTS: Final = wire.pack([]).header
_TRACKED: Final = sys.version_info < (3, 13)  # track=False exists from 3.13 on
# a receiver's frame giving segments back to their owner (never delivered to an engine)
_RELEASE_CTX: Final = -1
_RELEASE: Final = b"shm:release"


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

    __slots__ = ("threshold", "_run_id", "_count", "_free", "_lent", "_maps", "_releases")

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
        # the pool (Rule 3): this process's own segments, idle by capacity, or lent to a receiver
        self._free: dict[int, list[shared_memory.SharedMemory]] = {}
        self._lent: dict[str, shared_memory.SharedMemory] = {}
        self._maps: dict[str, mmap.mmap] = {}  # other processes' segments, mapped once each
        self._releases: dict[int, list[str]] = {}  # per owner process: segments to give back

    def __getstate__(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "max_frame": self.max_frame,
                "connect_timeout": self.connect_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def bind(self, proc: int, per: int, procs: int, secret: bytes, run_id: str) -> None:
        super().bind(proc, per, procs, secret, run_id)
        self._run_id = run_id

    def _outgoing(self, envelope: Envelope, proc: int) -> Envelope:
        """Copy big buffers into pooled segments (one copy in); the frame names them."""
        buffers = envelope.buffers
        threshold = self.threshold
        if not any(_nbytes(b) >= threshold for b in buffers):
            return rebuffered(envelope, (_NO_SEGMENTS, *buffers))
        refs: list[list[object]] = []
        out: list[object] = []
        for index, buf in enumerate(buffers):
            view = _bytes_of(buf)
            if view.nbytes < threshold:
                out.append(view)
                continue
            shm = self._borrow(envelope, view.nbytes)
            target = shm.buf
            assert target is not None
            target[:view.nbytes] = view
            refs.append([index, shm.name, view.nbytes])
            out.append(b"")
        return rebuffered(envelope, (wire.pack(refs).header, *out))

    def _borrow(self, envelope: Envelope, nbytes: int) -> shared_memory.SharedMemory:
        """An idle segment of this process that holds ``nbytes``, made if there is none."""
        capacity = 1 << (nbytes - 1).bit_length()  # powers of two: a few sizes serve every message
        idle = self._free.get(capacity)
        if idle:
            shm = idle.pop()
        else:
            self._count += 1
            name = f"{PREFIX}{self._run_id}_{self._proc}_{self._count}"
            try:
                shm = _segment(name, capacity)
            except OSError as exc:
                raise TransportError(envelope.src, "send", f"cannot create a shared-memory "
                                     f"segment of {capacity} bytes ({exc})",
                                     "free space in /dev/shm, or use transport='tcp'",
                                     peer=envelope.dst) from None
        self._lent[shm.name] = shm
        return shm

    def _incoming(self, envelope: Envelope) -> Envelope | None:
        """Replace segment references by arrays over the mapped segments; take back released ones."""
        buffers = envelope.buffers
        if envelope.ctx == _RELEASE_CTX and envelope.meta == _RELEASE:
            self._returned(envelope)
            return None
        if not buffers:
            raise self._bad(envelope, "the frame has no segment list")
        if buffers[0] == _NO_SEGMENTS:  # most messages: everything inline
            return rebuffered(envelope, buffers[1:])
        refs = wire.unpack(buffers[0])
        rest = list(buffers[1:])
        if type(refs) is not list:
            raise self._bad(envelope, "the segment list is not a list")
        own = f"{PREFIX}{self._run_id}_"
        owner = envelope.src // self._per
        for ref in refs:
            if not (type(ref) is list and len(ref) == 3 and type(ref[0]) is int
                    and 0 <= ref[0] < len(rest) and type(ref[1]) is str
                    and ref[1].startswith(own) and type(ref[2]) is int and ref[2] > 0):
                raise self._bad(envelope, f"bad segment reference {ref!r:.80}")
            index, name, nbytes = ref
            rest[index] = self._take(envelope, owner, name, nbytes)
        return rebuffered(envelope, tuple(rest))

    def _take(self, envelope: Envelope, owner: int, name: str, nbytes: int) -> Any:
        """An array over the first ``nbytes`` of segment ``name`` (mapped once, then reused).

        The copy out is the engine's (into the receive buffer), or none at all
        for a receive without a buffer. Once the last array over it is freed,
        the segment goes back to its owner's pool (``flush`` sends the names).
        """
        mapping = self._maps.get(name)
        if mapping is None or len(mapping) < nbytes:
            mapping = self._maps[name] = self._map(envelope, name, nbytes)
        array = np.frombuffer(mapping, np.uint8, nbytes)
        weakref.finalize(array, self._releases.setdefault(owner, []).append, name)
        return array

    def _map(self, envelope: Envelope, name: str, nbytes: int) -> mmap.mmap:
        import _posixshmem  # what SharedMemory opens with

        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        except OSError as exc:
            raise self._bad(envelope, f"segment {name} cannot be opened ({exc})") from None
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise self._bad(envelope, f"segment {name} holds {size} bytes, not {nbytes}")
            return mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def _returned(self, envelope: Envelope) -> None:
        """A receiver is done with some of our segments: they are idle again."""
        names = wire.unpack(envelope.header)
        for name in names if type(names) is list else ():
            shm = self._lent.pop(name, None) if type(name) is str else None
            if shm is not None:
                self._free.setdefault(shm.size, []).append(shm)

    async def flush(self) -> None:
        """Give released segments back to their owners, with this round's exchange."""
        releases = self._releases
        for owner in sorted(releases):
            names = releases[owner]
            if names and self._out:
                self._post(owner, Envelope(ACK, _RELEASE_CTX, self._proc, owner, 0, 0, 0, 0.0,
                                           wire.pack(names).header, (), False, _RELEASE))
            names.clear()

    def close(self) -> None:
        """Close the links and unlink this process's segments (Rule 2; mappings die with their arrays)."""
        super().close()
        owned = [shm for idle in self._free.values() for shm in idle] + list(self._lent.values())
        self._free.clear()
        self._lent.clear()
        self._maps.clear()
        for shm in owned:
            _unlink(shm.name)
            try:
                shm.close()
            except BufferError:  # a send is still copying out of it; the mapping dies with it
                pass

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
