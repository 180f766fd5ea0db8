"""The tcp transport: ranks in several OS processes, envelopes as frames over TCP streams.

Owns the byte streams between hosting processes and nothing else: who talks
to whom, the secret proven at connect, and the exchange that ends each round
(``exchange``: every frame queued since the last one, then a mark, to each
other process, read back with ``wire.FrameDecoder``). It knows nothing of
virtual time or matching; the hosting loop (``simcluster.hosting.host``) decides
when envelopes are delivered. asyncio makes the connections; the rounds then
read and write the sockets themselves, with ``poll``.

Each pair of processes shares one stream (the lower process index connects
to the higher one), so envelopes between two processes keep their order
(Rule 1 of ``transports.base``). Envelopes whose receiver lives in this
process are handed over at once, as the memory transport does.

Rule 1: no bytes are trusted before the handshake: the acceptor sends a
random nonce and the connector must answer ``HMAC-SHA256(secret, nonce)``
(then proves itself back the same way). A connection that fails is logged on
the ``simcluster.transports`` logger and closed; the run goes on.
Rule 2: frames are parsed only by ``wire`` (sans-I/O), with a size cap;
nothing read off a socket is ever unpickled here.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import logging
import os
import secrets
import select
from time import perf_counter  # bound now: a rank's time.* reads virtual time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from . import wire
from .base import Deliver, Envelope, Transport, TransportError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "MARK_CTX",
    "STREAM_LIMIT",
    "Link",
    "TcpTransport",
    "accept_handshake",
    "connect_handshake",
    "open_link",
]

log: Final = logging.getLogger("simcluster.transports")

DEFAULT_CONNECT_TIMEOUT: Final = 30.0
"""Seconds a process waits for a peer to connect (or to answer) before giving up."""

_MAGIC: Final = b"SIMCLUS1"  # protocol name and version, first bytes on every stream
_NONCE: Final = 32
_DIGEST: Final = 32
_READ: Final = 1 << 20  # bytes asked of the stream per read
_CHUNK: Final = 1 << 16  # bytes asked of a socket per read in the rounds (no mmap per read)
_IOV_MAX: Final = 512  # frames written per system call, at most
_SPIN: Final = 2e-4  # seconds an exchange polls without blocking before it blocks in poll
_POLL_MS: Final = 5  # the longest an exchange blocks before letting the event loop run

MARK_CTX: Final = -2
"""The ``ctx`` of the frame that ends a process's part of a round (``TcpTransport.exchange``)."""
STREAM_LIMIT: Final = 1 << 22
"""Bytes asyncio buffers from a stream before it stops reading (the StreamReader limit)."""

SECRET_FIX: Final = ("only processes started by this run, or started with the same "
                     "SIMCLUSTER_SECRET, may connect")


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


# ---- the handshake ----


async def accept_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           secret: bytes, timeout: float) -> None:
    """Make the process that connected to us prove the run's secret, then prove it back.

    Raises:
        TransportError: the peer answered wrong, spoke another protocol, or
            did not answer within ``timeout`` seconds.
    """
    peer = writer.get_extra_info("peername")
    nonce = secrets.token_bytes(_NONCE)
    writer.write(_MAGIC + nonce)
    try:
        answer = await asyncio.wait_for(reader.readexactly(len(_MAGIC) + _DIGEST + _NONCE), timeout)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError) as exc:
        raise TransportError(None, "accept", f"connection from {peer} did not complete the "
                             f"handshake ({type(exc).__name__})", SECRET_FIX, peer=peer) from None
    magic, mac, theirs = answer[:8], answer[8:8 + _DIGEST], answer[8 + _DIGEST:]
    if magic != _MAGIC or not hmac.compare_digest(mac, _mac(secret, b"connect", nonce)):
        raise TransportError(None, "accept", f"connection from {peer} did not prove the run's "
                             "secret", SECRET_FIX, peer=peer)
    writer.write(_mac(secret, b"accept", theirs))
    await writer.drain()


async def connect_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            secret: bytes, timeout: float, peer: object) -> None:
    """Prove the run's secret to the process we connected to, and make it prove it back.

    Raises:
        TransportError: the listener spoke another protocol, did not know the
            secret, or did not answer within ``timeout`` seconds.
    """
    try:
        hello = await asyncio.wait_for(reader.readexactly(len(_MAGIC) + _NONCE), timeout)
        if hello[:8] != _MAGIC:
            raise TransportError(None, "connect", f"{peer} does not speak simcluster's protocol",
                                 "check the address and port", peer=peer)
        mine = secrets.token_bytes(_NONCE)
        writer.write(_MAGIC + _mac(secret, b"connect", hello[8:]) + mine)
        proof = await asyncio.wait_for(reader.readexactly(_DIGEST), timeout)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError) as exc:
        raise TransportError(None, "connect", f"{peer} refused the handshake "
                             f"({type(exc).__name__})", SECRET_FIX, peer=peer) from None
    if not hmac.compare_digest(proof, _mac(secret, b"accept", mine)):
        raise TransportError(None, "connect", f"{peer} did not prove the run's secret",
                             SECRET_FIX, peer=peer)


# ---- one stream between two processes ----


class Link:
    """One authenticated stream to another process, carrying frames both ways.

    ``send`` never blocks (asyncio buffers what the socket cannot take yet);
    ``pump`` is the driver loop around ``wire.FrameDecoder`` (STYLE.md §1).
    """

    __slots__ = ("reader", "writer", "peer", "decoder", "closing", "_max_frame")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 peer: object, max_frame: int) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self._max_frame = max_frame
        self.decoder = wire.FrameDecoder(max_frame=max_frame, peer=peer)
        self.closing = False

    def send(self, envelope: Envelope) -> None:
        """Queue ``envelope`` on the stream; raises TransportError if it cannot be encoded.

        The frame is joined into one bytes object (one copy), so the caller's
        array buffers are free again when this returns, whatever asyncio keeps.
        A link that is lost or closed drops the frame, as asyncio would (after
        logging "socket.send() raised exception." from the fifth on: a screen
        of them when a run is interrupted); ``pump`` reports the loss.
        """
        writer = self.writer
        if writer.transport.is_closing():
            return
        writer.write(b"".join(wire.encode_frame(envelope)))

    async def drain(self) -> None:
        """Wait until asyncio's write buffer is below its limit (empty for peer links)."""
        await self.writer.drain()

    async def pump(self, deliver: Callable[[Envelope], None]) -> None:
        """Feed everything the peer sends to the decoder; hand out envelopes until EOF.

        Raises:
            TransportError: a malformed, oversized or truncated frame, or the
                peer hung up while the run still needed it.
        """
        reader, decoder = self.reader, self.decoder
        try:
            while data := await reader.read(_READ):
                for envelope in decoder.feed(data):
                    deliver(envelope)
        except (ConnectionError, OSError) as exc:
            if self.closing:
                return
            raise TransportError(None, "recv", f"lost the connection to peer {self.peer!r} "
                                 f"({type(exc).__name__}: {exc})",
                                 "look for that process's own error; it may have crashed",
                                 peer=self.peer) from None
        decoder.feed_eof()
        if not self.closing:
            raise TransportError(None, "recv", f"peer {self.peer!r} closed its connection",
                                 "look for that process's own error; it may have crashed",
                                 peer=self.peer)

    async def first(self) -> Envelope:
        """Read exactly one frame (the peer introducing itself), leaving what follows unread.

        Raises:
            TransportError: the frame is malformed or oversized, or the peer hung up.
        """
        try:
            head = await self.reader.readexactly(8)
            rest = int.from_bytes(head[:4], "big")
            got = self.decoder.feed(head)  # checks the declared length against the cap
            if rest > 4:
                got = self.decoder.feed(await self.reader.readexactly(rest - 4))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise TransportError(None, "accept", f"peer {self.peer!r} hung up before introducing "
                                 f"itself ({type(exc).__name__})", SECRET_FIX,
                                 peer=self.peer) from None
        if len(got) != 1:
            raise TransportError(None, "accept", f"peer {self.peer!r} did not introduce itself",
                                 SECRET_FIX, peer=self.peer)
        return got[0]

    def rename(self, peer: object) -> None:
        """Name the peer in errors from now on (called at a frame boundary, after ``first``)."""
        self.peer = peer
        self.decoder = wire.FrameDecoder(max_frame=self.decoder_cap, peer=peer)

    @property
    def decoder_cap(self) -> int:
        return self._max_frame

    def close(self) -> None:
        """Close the stream; EOF from the other side is expected from now on."""
        self.closing = True
        try:
            self.writer.close()
        except (OSError, RuntimeError):  # the loop is closing, or the socket is gone
            pass

    def __repr__(self) -> str:
        return f"<Link peer={self.peer!r}{' closing' if self.closing else ''}>"


async def open_link(host: str, port: int, secret: bytes, *, peer: object, max_frame: int,
                    timeout: float) -> Link:
    """Connect to ``host:port``, prove the secret and return the link.

    Retries refused connections until ``timeout`` (the listener may still be starting).

    Raises:
        TransportError: nobody accepted within ``timeout`` seconds, or the
            handshake failed.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=STREAM_LIMIT),
                max(0.01, deadline - loop.time()))
            break
        except (OSError, asyncio.TimeoutError) as exc:
            if loop.time() >= deadline:
                raise TransportError(
                    None, "connect", f"could not connect to {peer} at {host}:{port} within "
                    f"{timeout:g}s ({type(exc).__name__}: {exc})",
                    "check that the peer was started with the same address and port, or raise "
                    "connect_timeout", peer=peer) from None
            await asyncio.sleep(0.05)
    try:
        await connect_handshake(reader, writer, secret, max(0.01, deadline - loop.time()), peer)
    except BaseException:
        writer.close()
        raise
    return Link(reader, writer, peer, max_frame)


# ---- the transport ----



class TcpTransport(Transport):
    """Envelopes between processes as length-prefixed msgpack frames over TCP.

    Made in the calling process as a description (picklable, nothing open);
    each hosting process gets a copy and calls ``bind``, ``listen``,
    ``connect`` and then serves the engine through ``open``/``send``/``close``.

    Args:
        host: address hosting processes listen on; ``127.0.0.1`` unless told
            otherwise (other hosts need a reachable address).
        max_frame: cap on one frame's declared length, in bytes; larger frames
            end the run with a TransportError naming the peer.
        connect_timeout: seconds to wait for a peer to connect and answer.
    """

    __slots__ = (
        "host", "max_frame", "connect_timeout", "_proc", "_per", "_secret", "_deliver",
        "_links", "_inbox", "_marks", "_taken", "_sent", "_min_sent", "_server", "_out", "_fds",
        "_procs_of", "_poller", "_world_size", "_closed",
    )

    name = "tcp"
    multiprocess: Final = True
    """Hosted in several processes by ``simcluster.hosting.host`` (the memory transport is not)."""

    def __init__(self, host: str = "127.0.0.1", *, max_frame: int = wire.DEFAULT_MAX_FRAME,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        if not isinstance(max_frame, int) or max_frame < 1024:
            raise ValueError(f"{type(self).__name__}(max_frame={max_frame!r}): max_frame must be "
                             "an int >= 1024 (bytes)")
        if not connect_timeout > 0:
            raise ValueError(f"{type(self).__name__}(connect_timeout={connect_timeout!r}): "
                             "connect_timeout must be a positive number of seconds")
        self.host = host
        self.max_frame = max_frame
        self.connect_timeout = float(connect_timeout)
        self._proc = -1
        self._per = 1
        self._secret = b""
        self._deliver: Deliver | None = None
        self._links: dict[int, Link] = {}
        self._inbox: list[deque[Envelope]] = []  # per process: envelopes for ``receive``
        self._marks: list[deque[Envelope]] = []  # per process: round marks (``exchange``)
        self._taken: list[int] = []
        self._sent: list[int] = []
        self._min_sent: float | None = None
        self._server: asyncio.AbstractServer | None = None
        self._out: list[list[bytes]] = []  # per process: frames for the next exchange
        self._fds: dict[int, int] = {}  # process -> its socket, once connected
        self._procs_of: dict[int, int] = {}
        self._poller: Any = None
        self._world_size = 0
        self._closed = False

    def __getstate__(self) -> dict[str, Any]:
        return {"host": self.host, "max_frame": self.max_frame,
                "connect_timeout": self.connect_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["host"], max_frame=state["max_frame"],  # type: ignore[misc]
                      connect_timeout=state["connect_timeout"])

    def __repr__(self) -> str:
        where = "unbound" if self._proc < 0 else f"process {self._proc}, {len(self._links)} links"
        return f"<{type(self).__name__} host={self.host!r} {where}>"

    # ---- the engine's side (Transport) ----

    def open(self, world_size: int, deliver: Deliver) -> None:
        self._world_size = world_size
        self._deliver = deliver

    def send(self, envelope: Envelope) -> None:
        proc = envelope.dst // self._per
        if proc == self._proc:
            deliver = self._deliver
            if deliver is None:
                raise TransportError(envelope.src, "send", f"the {self.name} transport is closed",
                                     "open it before sending", peer=envelope.dst)
            deliver(envelope)
            return
        if self._closed or not self._out:
            raise TransportError(envelope.src, "send", f"no connection to process {proc} "
                                 f"(rank {envelope.dst})", "the run has ended or that process "
                                 "was lost", peer=proc)
        self._post(proc, self._outgoing(envelope, proc))
        self._sent[proc] += 1
        if self._min_sent is None or envelope.time < self._min_sent:
            self._min_sent = envelope.time

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._deliver = None
        for link in self._links.values():
            link.close()
        if self._server is not None:
            self._server.close()

    # ---- the hosting loop's side ----

    def bind(self, proc: int, per: int, procs: int, secret: bytes, run_id: str) -> None:
        """Make this copy the transport of process ``proc`` of ``procs``.

        Process ``p`` hosts world ranks ``[p*per, (p+1)*per)``.
        """
        self._proc = proc
        self._per = per
        self._secret = secret
        self._inbox = [deque() for _ in range(procs)]
        self._marks = [deque() for _ in range(procs)]
        self._taken = [0] * procs
        self._sent = [0] * procs

    async def listen(self) -> tuple[str, int]:
        """Start accepting peers on ``host`` (any free port); return the address to give them."""
        self._server = await asyncio.start_server(self._accepted, self.host, 0,
                                                  limit=STREAM_LIMIT)
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def connect(self, table: list[tuple[str, int]]) -> None:
        """Connect to every higher process in ``table``, wait for every lower one, and get ready
        for the rounds (``exchange``).

        Raises:
            TransportError: a peer did not connect or answer within ``connect_timeout``.
        """
        for proc in range(self._proc + 1, len(table)):
            host, port = table[proc]
            link = await open_link(host, port, self._secret, peer=f"process {proc}",
                                   max_frame=self.max_frame, timeout=self.connect_timeout)
            link.send(Envelope(0, 0, self._proc, proc, 0, 0, 0, 0.0))  # who I am
            self._links[proc] = link
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        while len(self._links) < len(table) - 1 or any(
                link.writer.transport.get_write_buffer_size() for link in self._links.values()):
            if loop.time() > deadline:
                missing = [p for p in range(self._proc) if p not in self._links]
                raise TransportError(
                    None, "connect", f"process {self._proc}: processes {missing} never connected "
                    f"within {self.connect_timeout:g}s", "look for their own errors, or raise "
                    "connect_timeout", peer=missing[0] if missing else None)
            await asyncio.sleep(0.005)
        self._out = [[] for _ in range(len(table))]
        self._poller = select.poll()
        for proc, link in sorted(self._links.items()):
            # From here on the socket is ours: asyncio neither reads it nor writes to it again
            # (nothing else is sent before every process is connected, which the caller waits for).
            stream: Any = link.writer.transport  # a read-write transport under the StreamWriter
            stream.pause_reading()
            fd = link.writer.get_extra_info("socket").fileno()
            self._fds[proc] = fd
            self._procs_of[fd] = proc
            self._poller.register(fd, select.POLLIN)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            await accept_handshake(reader, writer, self._secret, self.connect_timeout)
            link = Link(reader, writer, f"{peer}", self.max_frame)
            first = await asyncio.wait_for(link.first(), self.connect_timeout)
            proc = first.src
            if not 0 <= proc < self._proc or proc in self._links:
                raise TransportError(None, "accept", f"connection from {peer} claims to be "
                                     f"process {proc}", SECRET_FIX, peer=peer)
            link.rename(f"process {proc}")
            self._links[proc] = link
        except (TransportError, asyncio.TimeoutError, OSError) as exc:
            log.warning("simcluster: refused a connection from %s: %s", peer, exc)
            writer.close()

    async def exchange(self, mark: Envelope, idle: Callable[[], None] | None = None
                       ) -> list[Envelope]:
        """End a round: send every frame queued since the last one, then ``mark``, to each other
        process; return each process's ``mark`` of this round, in process order (ours included).

        The envelopes that came before a process's mark wait in its inbox for
        ``receive``. Waits in ``poll`` a few milliseconds at a time, letting
        the event loop run (and calling ``idle``) in between.

        Raises:
            TransportError: a peer hung up, or sent a malformed frame.
        """
        frame = b"".join(wire.encode_frame(mark._replace(ctx=MARK_CTX)))
        writing: dict[int, deque[memoryview]] = {}
        for proc, fd in self._fds.items():
            chunks = self._out[proc]
            chunks.append(frame)
            self._out[proc] = []
            writing[fd] = deque(memoryview(chunk) for chunk in chunks)
        marks, poller = self._marks, self._poller
        for fd in list(writing):
            self._write(fd, writing)
        spin_until = perf_counter() + _SPIN
        missing = [proc for proc in self._fds if not marks[proc]]
        while writing or missing:
            # a peer is often a few microseconds from its mark: asking again at once beats being
            # woken by the kernel (tens of microseconds) while it is soon; then block, briefly
            spinning = perf_counter() < spin_until
            events = poller.poll(0 if spinning else _POLL_MS)
            if not events:
                if not spinning:
                    await asyncio.sleep(0)
                    if idle is not None:
                        idle()
                continue
            for fd, event in events:
                if event & select.POLLOUT:
                    self._write(fd, writing)
                if event & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    self._read(fd)
            missing = [proc for proc in missing if not marks[proc]]
        return [mark if proc == self._proc else marks[proc].popleft()
                for proc in range(len(marks))]

    def _write(self, fd: int, writing: dict[int, deque[memoryview]]) -> None:
        chunks = writing[fd]
        try:
            while chunks:  # one system call for many frames: one wake-up of the peer
                done = os.writev(fd, list(itertools.islice(chunks, _IOV_MAX)))
                while chunks and done >= len(chunks[0]):
                    done -= len(chunks.popleft())
                if done:
                    chunks[0] = chunks[0][done:]
                    break
        except BlockingIOError:
            pass
        except OSError as exc:
            raise self._lost(fd, exc) from None
        if chunks:
            self._poller.modify(fd, select.POLLIN | select.POLLOUT)
        else:
            del writing[fd]
            self._poller.modify(fd, select.POLLIN)

    def _read(self, fd: int) -> None:
        proc = self._procs_of[fd]
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            raise self._lost(fd, exc) from None
        link = self._links[proc]
        if not data:
            link.decoder.feed_eof()  # in the middle of a frame: says so
            raise TransportError(None, "recv", f"peer {link.peer!r} closed its connection",
                                 "look for that process's own error; it may have crashed",
                                 peer=link.peer)
        for envelope in link.decoder.feed(data):
            self._arrived(proc, envelope)

    def _arrived(self, proc: int, envelope: Envelope) -> None:
        if envelope.ctx == MARK_CTX:
            self._marks[proc].append(envelope)
            return
        incoming = self._incoming(envelope)
        if incoming is not None:  # None: the transport's own frame, handled by _incoming
            self._inbox[proc].append(incoming)

    def _lost(self, fd: int, exc: OSError) -> TransportError:
        peer = self._links[self._procs_of[fd]].peer
        return TransportError(None, "recv", f"lost the connection to peer {peer!r} "
                              f"({type(exc).__name__}: {exc})",
                              "look for that process's own error; it may have crashed", peer=peer)

    async def receive(self, counts: list[int]) -> None:
        """Deliver, in a canonical order, the envelopes other processes sent us so far.

        ``counts[p]`` is how many envelopes process ``p`` has sent to this one
        in total (every process's reports say it); all of them came with the
        rounds' exchanges. The new ones go to the engine sorted by source rank
        (each source's own order kept), so the batch does not depend on
        which process the OS served first.
        """
        inbox, taken = self._inbox, self._taken
        batch: list[Envelope] = []
        for p, count in enumerate(counts):
            if len(inbox[p]) < count - taken[p]:
                raise TransportError(None, "recv", f"process {p} reported {count - taken[p]} new "
                                     f"envelopes but {len(inbox[p])} came", "every process must "
                                     "run the same simcluster version", peer=f"process {p}")
            for _ in range(count - taken[p]):
                batch.append(inbox[p].popleft())
            taken[p] = count
        if len(batch) > 1:
            batch.sort(key=_by_src)
        deliver = self._deliver
        assert deliver is not None
        for envelope in batch:
            deliver(envelope)

    def take_counts(self) -> tuple[list[int], float | None]:
        """Return (envelopes sent to each process, earliest envelope time) since the last call."""
        sent, earliest = self._sent, self._min_sent
        self._sent = [0] * len(sent)
        self._min_sent = None
        return sent, earliest

    async def flush(self) -> None:
        """The end of a process's part of a round, before its report (shm gives segments back)."""

    # ---- hooks for subclasses (shm moves big buffers another way) ----

    def _post(self, proc: int, envelope: Envelope) -> None:
        """Queue ``envelope`` for process ``proc`` until the round's exchange.

        The frame is joined into one bytes object (one copy), so the caller's
        array buffers are free again when this returns.
        """
        self._out[proc].append(b"".join(wire.encode_frame(envelope)))

    def _outgoing(self, envelope: Envelope, proc: int) -> Envelope:
        return envelope

    def _incoming(self, envelope: Envelope) -> Envelope | None:
        """The envelope for the engine, or None for a frame the transport keeps to itself."""
        return envelope


def _by_src(envelope: Envelope) -> int:
    return envelope.src
