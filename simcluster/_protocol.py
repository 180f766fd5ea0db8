"""The point-to-point protocol: posting sends and receives, charging the ports, delivery, matching.

A send is packed by the codec (``transports.wire``) and becomes an
``Envelope``. Up to ``eager_limit`` bytes it travels at once with its data
(EAGER); a larger one sends a request to send (RTS), and its data follows
once a receive has matched it and the receiver's clear to send (CTS) is back
(DATA, booked when the receive matches: Rule 5). A synchronous send's eager message is
acknowledged (ACK) when it is matched.

Rule 3: messages between one pair of ranks enter one FIFO channel whose
arrival times never decrease, so they are matched in send order whatever the
tie-breaking does (MPI's non-overtaking rule).
Rule 4: a latency model with port state (``Ports.ordered``) is charged for the
messages of one virtual instant together, once no event is left at that
instant (``_end_instant``): each send port takes its messages in posting order
(a rank's own, then each helper's by ``Task.serial``), each receive port in
the order they reach it (wire time, then source rank, then posting order);
then each pair's messages enter their channel in posting order. So virtual
times do not depend on the order the seed runs simultaneous events in; only
what the program leaves open (ANY_SOURCE, wait_any, polling) does.
Rule 5: a request to send reaches its receiver after the model's lookahead
(``LatencyModel.lookahead``, the least delay of any message: alpha under
AlphaBeta), so that no message, not even the handshake of a large one,
affects another rank sooner; it is matched from then on. Its data are then
charged as if posted at ``max(send posted, receive posted)``, with no cost
for the handshake: the clear to send carries when the receive was posted.

A message reaching its receiver is matched in the endpoint table
(``matching.Endpoints``): one match queue per (context, rank), so delivery
never goes through a ``Comm``.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from simcluster.transports import wire
from simcluster.transports.base import ACK, CTS, DATA, EAGER, RTS, Envelope, Transport, retimed
from simcluster.transports.wire import INLINE, PACKED_NONE

from . import _frames
from . import _schedule
from . import arrays as _arrays
from ._kernel import Kernel, Task, _finish_request
from ._ports import NativePorts
from .errors import TruncationError
from .matching import ANY_SOURCE, ANY_TAG, Endpoints
from .payload import describe
from .request import Request, Status, _format_op

if TYPE_CHECKING:
    from ._settings import EngineSettings
    from .comm import Comm, Group
    from .latency import LatencyModel, Ports
    from .trace import Trace

# Final aliases: compiled, each is a static rather than a lookup in a module's dict per message
_tuple_new: Final = tuple.__new__
_Envelope: Final = Envelope


_Status: Final = Status


def _new_envelope(fields: list[Any] | tuple[Any, ...]) -> Envelope:
    """``make_envelope(fields)`` without its ``functools.partial`` (about 30 ns a message)."""
    env: Envelope = _tuple_new(_Envelope, fields)
    return env


class Booking:
    """A message posted at this instant, waiting to be charged to the ports (Rule 4).

    The ``Envelope`` fields it will leave with, then the serial of the task
    that posted it (``Task.serial``), which orders a rank's own messages
    before its helpers'. ``time`` is when it was posted until the charge
    turns it into its arrival (the send side's wire time in a hosting
    process, whose receivers charge the other side).
    """

    __slots__ = ("kind", "ctx", "src", "dst", "tag", "msg_id", "nbytes", "time", "header",
                 "buffers", "sync", "meta", "serial")

    def __init__(self, kind: int, ctx: int, src: int, dst: int, tag: int, msg_id: int, nbytes: int,
                 time: float, header: Any, buffers: Any, sync: bool, meta: bytes,
                 serial: int) -> None:
        # header and buffers as the payload codec gives them: an in-process run's numbers
        # travel as themselves (wire.INLINE), not as bytes and a tuple of buffers
        self.kind = kind
        self.ctx = ctx
        self.src = src
        self.dst = dst
        self.tag = tag
        self.msg_id = msg_id
        self.nbytes = nbytes
        self.time = time
        self.header = header
        self.buffers = buffers
        self.sync = sync
        self.meta = meta
        self.serial = serial

    def envelope(self) -> Envelope:
        """The envelope this message leaves with."""
        env: Envelope = _tuple_new(_Envelope, (
            self.kind, self.ctx, self.src, self.dst, self.tag, self.msg_id, self.nbytes,
            self.time, self.header, self.buffers, self.sync, self.meta))
        return env

    def __repr__(self) -> str:
        return (f"Booking(kind={self.kind}, src={self.src}, dst={self.dst}, msg_id={self.msg_id}, "
                f"nbytes={self.nbytes}, time={self.time!r}, serial={self.serial})")


def _by_source(b: Booking) -> tuple[int, int]:
    """Posting order on the send ports: by source, the rank's own messages before its helpers'."""
    return (b.src, b.serial)


def _by_source_and_id(b: Booking) -> tuple[int, int, int]:
    """``_by_source``, then by message id (rendezvous transfers)."""
    return (b.src, b.serial, b.msg_id)


def _by_arrival(b: Booking) -> tuple[float, int, int, int]:
    """The receive ports' order: by wire time, then in posting order."""
    return (b.time, b.src, b.serial, b.msg_id)


def _new_status(fields: tuple[int, int, int]) -> Status:
    """``request.make_status(fields)``, the same way."""
    status: Status = _tuple_new(_Status, fields)
    return status
_Deque: Final = deque
_NDARRAY: Final = np.ndarray
_inline_nbytes: Final = wire.inline_nbytes


class _RecvRequest(Request[Any]):
    """A receive: also remembers what it asked for.

    ``_op`` holds only the call's name (``recv``, ``irecv``, ...); ``op``
    formats the whole call from the fields, so an idle receive costs no string.
    """

    __slots__ = ("comm", "src", "tag", "buf", "posted")

    @property
    def op(self) -> str:
        return _format_op((self._op, self.buf, self.src, self.tag))

    def peer(self) -> int | None:
        """The world rank this receive waits on (None for ANY_SOURCE), worked out when asked."""
        src = self.src
        return None if src == ANY_SOURCE else self.comm._group.world_ranks[src]

    def __init__(self, engine: P2P, task: Task, op: str,
                 comm: Comm, src: int, tag: int, buf: Any, nonblocking: bool) -> None:
        # Every slot set once, here: one receive is built per message.
        self._engine = engine
        self._task = task
        self._state = 0
        self._value = None
        self._error = None
        self._waiter = None
        self._op = op
        self.status = None
        self._guard = None
        self._retrieved = False
        self._nb = nonblocking
        self.comm = comm
        self.src = src
        self.tag = tag
        self.buf = buf
        self.posted: float = engine.now  # a rendezvous transfer starts no earlier (Rule 5)


class P2P(Kernel):
    """The kernel plus point-to-point messages: what ``Comm`` posts its sends and receives to."""

    def __init__(self, world_size: int, transport: Transport, ports: Ports,
                 settings: EngineSettings, trace: Trace | None = None) -> None:
        model = settings.model
        self.transport = transport
        self.ports = ports
        # a built-in model's compiled ports: called natively, not as a Python object
        self._native_ports: NativePorts | None = ports if isinstance(ports, NativePorts) else None
        self._zero_latency = bool(getattr(ports, "zero", False))
        # Rule 4: a model with port state charges each instant's messages together (_book)
        self._book_later = not self._zero_latency and bool(getattr(ports, "ordered", True))
        self._bookings: list[Booking] = []  # eager messages and RTS posted now
        self._rdv_bookings: list[Booking] = []  # rendezvous data cleared to send now
        self.latency_model = model  # what ``ports`` were bound from; collectives read reduce_time
        self.free_reductions = model is None or model.free_reductions
        self.eager_limit = settings.eager_limit
        # Rule 5: how long a request to send takes to reach its receiver (the model's lookahead)
        self._rts_delay = 0.0 if model is None else float(model.lookahead())
        # run(serializer="pickle"): what msgpack cannot carry is pickled (wire.EXT_PICKLE)
        self._dumps: Callable[[object], bytes] | None = settings.dumps
        self._loads: Callable[[bytes], object] | None = settings.loads
        # arrays of other libraries (torch, CuPy) travel as objects where the transport hands
        # objects over, so a CuPy array stays on its device; byte transports stage them to host
        self._arrays = _arrays.IN_PROCESS if transport.in_process else _arrays.STAGED
        # envelopes are handed over as objects: floats and ints travel as themselves (wire.INLINE),
        # and the engine delivers envelopes itself (_send_envelope)
        self._in_process = transport.in_process
        self._msg_id = 0  # the last message's id (ids count from 1)
        self.groups: dict[int, Group] = {}  # the communicators, by context (comm.Group registers)
        self.endpoints = Endpoints()
        self._rows = self.endpoints.rows
        # messages in flight, by source: None, one Envelope, or {dst: Envelope | deque[Envelope]}
        self._inflight: list[Any] = [None] * world_size
        # rendezvous sends waiting for their clear to send: request, buffers, header, posting time
        self._rdv_sends: dict[tuple[int, int], tuple[Request[Any], Any, bytes, float]] = {}
        self._rdv_recvs: dict[tuple[int, int], _RecvRequest] = {}
        self._rdv_landing: dict[tuple[int, int], Request[Any]] = {}  # rendezvous sends whose data is on its way
        self._sync_sends: dict[tuple[int, int], Request[Any]] = {}
        self.last_nbytes = 0
        self.msgs_sent = [0] * world_size
        self.bytes_sent = [0] * world_size
        self.msgs_recv = [0] * world_size
        self.bytes_recv = [0] * world_size
        self._arrive_key = self._arrive  # bound once: an event per message names it
        self._noisy = False  # the latency model draws from one RNG per message (explore's footprints)
        super().__init__(world_size, settings, trace)
        transport.open(world_size, self._deliver)

    def _use_schedule(self, schedule: object, model: LatencyModel | None) -> None:
        super()._use_schedule(schedule, model)
        chooser = self._chooser
        if chooser is not None and chooser.footprints:
            self._noisy = not self._book_later and _schedule.draws_noise(model)

    def _owner(self, fn: Callable[[Any], None], arg: Any) -> set[int] | None:
        if fn == self._arrive:
            return {arg.dst}
        if fn == self._data_arrived:
            return {arg.src, arg.dst}
        return super()._owner(fn, arg)

    def _instant_open(self) -> bool:
        return bool(self._bookings or self._rdv_bookings)

    def _end_instant(self) -> bool:
        """Charge the instant's messages (Rule 4); return whether that made events at ``now``."""
        if not (self._bookings or self._rdv_bookings) or not self._book():
            return False
        return bool(self._due or self._bookings or self._rdv_bookings)

    def close(self) -> None:
        """Cancel every unfinished rank and release the transport."""
        try:
            super().close()
        finally:
            self.transport.close()

    # ---- posting ----

    def post_send(self, comm: Comm, obj: object, dst: int, tag: int, sync: bool,
                  op: str | tuple[Any, ...], nonblocking: bool,
                  need_request: bool = False) -> Request[None] | None:
        """Start a send from ``comm``'s rank.

        Returns its request, or None for a blocking standard send that
        completed at once (eager), which needs no request at all, unless
        ``need_request``.
        """
        task = self.current
        src_w: int = comm._world_rank
        if task is None or task.rank != src_w:
            raise self.outside(comm.rank, op)
        # in process, a float, a bool or a 64-bit int travels as itself: no Packed, no tuple
        nbytes = _inline_nbytes(obj) if self._in_process else -1
        packed = PACKED_NONE
        if nbytes < 0:
            if obj is not None:
                try:
                    packed = wire.pack(obj, copy=False, arrays=self._arrays)
                except wire.Unsendable as exc:
                    packed = self._pack_opaque(comm, obj, op, exc)
            header: bytes = packed.header
            buffers: Any = packed.buffers
            nbytes = packed.nbytes
            arrays = bool(buffers)
        else:
            header = INLINE
            buffers = obj  # immutable: nothing to copy
            arrays = False
        dst_w = comm._group.world_ranks[dst]
        ctx: int = comm._ctx
        self._msg_id += 1
        msg_id = self._msg_id
        self.msgs_sent[src_w] += 1
        self.bytes_sent[src_w] += nbytes
        self.last_nbytes = nbytes  # for the caller's trace span
        if self.trace is not None:
            name = comm._group.name if ctx % 2 == 0 else _collective_name(comm, task)
            self.trace.sent(msg_id, src_w, dst_w, tag, nbytes, self.now, name)
        eager = nbytes <= self.eager_limit
        req: Request[None] | None = None
        if nonblocking or sync or not eager or need_request:
            req = Request(self, task, op, dst_w)
            req._nb = nonblocking
            if self.strict and nonblocking:
                if arrays:
                    held = [obj] if packed.single_array else list(buffers)
                    req._guard = (held, [checksum(a) for a in held], _frames.user_line())
                self._track(req)
        if eager:
            if arrays:
                buffers = tuple(np.array(b, copy=True, order="K") if type(b) is _NDARRAY
                                else b.copy() for b in buffers)  # ObjectBuffer: its own library
            now = self.now
            if self._book_later:  # charged with the rest of this instant (Rule 4)
                self._bookings.append(Booking(EAGER, ctx, src_w, dst_w, tag, msg_id, nbytes, now,
                                              header, buffers, sync, b"", task.serial))
                env = None
            else:
                arrive = now if self._zero_latency else self._arrival(src_w, dst_w, nbytes, now)
                env = _new_envelope((EAGER, ctx, src_w, dst_w, tag, msg_id, nbytes, arrive,
                                     header, buffers, sync, b""))
            if sync:
                self._sync_sends[(src_w, msg_id)] = req  # type: ignore[assignment]
            elif req is not None:
                req._state = 1  # DONE at once; nobody can be waiting yet
        else:
            assert req is not None
            reaches = self.now + self._rts_delay  # Rule 5
            if self._book_later:  # on its channel behind this instant's eager messages
                self._bookings.append(Booking(RTS, ctx, src_w, dst_w, tag, msg_id, nbytes, reaches,
                                              b"", (), sync, b"", task.serial))
                env = None
            else:
                env = Envelope(RTS, ctx, src_w, dst_w, tag, msg_id, nbytes, reaches, b"", (), sync)
            req._op = f"{req.op} [rendezvous: {nbytes} bytes > eager_limit {self.eager_limit}]"
            self._rdv_sends[(src_w, msg_id)] = (req, buffers, header, self.now)
        if env is not None:
            self._send_envelope(env)
        return req

    def unfinished_sends(self) -> list[Request[Any]]:
        """Rendezvous sends waiting for their clear to send, and synchronous sends not yet matched."""
        return [entry[0] for entry in self._rdv_sends.values()] + list(self._sync_sends.values())

    def _send_envelope(self, env: Envelope) -> None:
        """Hand an eager message or a request to send to the transport (in process: to ``_deliver``)."""
        if self._in_process:
            self._deliver(env)  # a native call, where the transport's send would be a Python one
        else:
            self.transport.send(env)

    def _pack_opaque(self, comm: Comm, obj: object, op: str | tuple[Any, ...],
                     exc: wire.Unsendable) -> wire.Packed:
        """Pack what msgpack refused with pickle, in serializer="pickle" runs; else explain."""
        if self._dumps is not None:
            try:
                return wire.pack(obj, copy=False, dumps=self._dumps, arrays=self._arrays)
            except wire.Unsendable as again:
                exc = again
        name = op if isinstance(op, str) else op[0]
        raise TypeError(f"rank {comm.rank}: {name}(obj={type(obj).__name__}): {exc}") from None

    def post_recv(self, comm: Comm, buf: Any, src: int, tag: int, op: str,
                  nonblocking: bool) -> Request[Any]:
        """Post a receive on ``comm``'s rank; it completes when a message is matched and has arrived."""
        task = self.current
        if task is None or task.rank != comm._world_rank:
            raise self.outside(comm.rank, (op, buf, src, tag))
        req = _RecvRequest(self, task, op, comm, src, tag, buf, nonblocking)
        if nonblocking and self.strict:
            self._track(req)
        mq = comm._mq
        env = mq.take_unexpected(src, tag) if mq._unexpected else None
        if env is None:
            mq.post(src, tag, req)
        else:
            self._matched(req, env)
        return req

    def iprobe(self, comm: Comm, src: int, tag: int) -> Status | None:
        """Return the status of a message a receive for (src, tag) would take now, if any."""
        env = comm._mq.peek_unexpected(src, tag)
        if env is None:
            return None
        return Status(comm._group.local_rank(env.src), env.tag, env.nbytes)

    def post_probe(self, comm: Comm, src: int, tag: int, op: str) -> Request[Status]:
        """Return a request that completes with a Status once a fitting message arrives."""
        peer = None if src == ANY_SOURCE else comm._group.world_ranks[src]
        req: Request[Status] = Request(self, self.current, op, peer)
        status = self.iprobe(comm, src, tag)
        if status is not None:
            req._finish(status)
        else:
            mq = comm._mq
            if mq.probes is None:
                mq.probes = []
            mq.probes.append((src, tag, req))
        return req

    # ---- charging an instant's messages (Rule 4) ----

    def _book(self) -> bool:
        """Charge and send the messages of the instant that just ended; False when there are none.

        The loop calls it once no event is left at ``now``. Eager messages and
        RTS envelopes go first; the rendezvous transfers cleared to send at
        ``now`` follow once those have settled (an RTS delivered here may be
        matched at once). Each send port takes its messages in posting order
        and each receive port in the order they reach it (``_charge``),
        whatever order the instant's events ran in; then each source's
        messages are delivered in posting order, so channels stay FIFO.
        """
        items = self._bookings
        if items:
            self._bookings = []
            if len(items) == 1:  # the common case in chains of dependent steps: one message
                b = items[0]
                if b.kind != RTS:
                    b.time = self._arrival(b.src, b.dst, b.nbytes, b.time)
                self._send_envelope(b.envelope())
                return True
            if len(items) * 4 >= self.world_size and self._book_round(items):
                return True
            self._charge(items, _by_source)
            for b in items:
                self._send_envelope(b.envelope())
            return True
        items = self._rdv_bookings
        if not items:
            return False
        self._rdv_bookings = []
        self._charge(items, _by_source_and_id)
        send = self.transport.send
        now = self.now
        for b in items:
            if b.time < now:  # charged from before the match: never lands before it (Rule 5)
                b.time = now
            send(b.envelope())
        return True

    def _book_round(self, items: list[Booking]) -> bool:
        """``_book`` for a collective's round, in one pass; False (nothing done) unless it is one.

        A round is an instant in which each rank sends at most one message and
        receives at most one: no two messages share a port, so each is charged
        on its own (``transfer``), and the envelopes leave in source order, as
        ``_charge`` and ``_book`` would send them. At a million ranks every
        pass over a round's bookings misses the cache; this makes one.
        """
        world_size = self.world_size
        by_source: list[Booking | None] = [None] * world_size
        receiving = [False] * world_size
        for b in items:
            src = b.src
            dst = b.dst
            if by_source[src] is not None or receiving[dst]:
                return False
            by_source[src] = b
            receiving[dst] = True
        for booked in by_source:
            if booked is not None:
                if booked.kind != RTS:
                    booked.time = self._arrival(booked.src, booked.dst, booked.nbytes, booked.time)
                self._send_envelope(booked.envelope())
        return True

    def _arrival(self, src: int, dst: int, nbytes: int, t: float) -> float:
        """Charge one message to the ports; return when it arrives (``ports.transfer(...)[1]``)."""
        native = self._native_ports
        if native is not None:
            return native.arrival(src, dst, nbytes, t)
        arrive: float = self.ports.transfer(src, dst, nbytes, t)[1]
        return arrive

    def _charge(self, items: list[Booking], posting: Callable[[Booking], Any]) -> None:
        """Turn each item's time (when it was posted) into its arrival; sort ``items`` by ``posting``.

        Send sides first, in posting order (``posting`` sorts by source and
        task serial, then by message id; a stable sort keeps the order items
        were added in), then receive sides by ``(wire, source, serial, message
        id)``. One item, or one per receive port: one ``transfer`` each, which
        equals the two halves bit for bit.
        """
        if len(items) == 1:
            b = items[0]
            if b.kind != RTS:
                b.time = self._arrival(b.src, b.dst, b.nbytes, b.time)
            return
        if posting is _by_source:
            sort_by_source(items, self.world_size)
        else:
            items.sort(key=posting)
        if len({b.dst for b in items}) == len(items):  # one message per receive port
            for b in items:
                if b.kind != RTS:
                    b.time = self._arrival(b.src, b.dst, b.nbytes, b.time)
            return
        send_side = self.ports.send_side
        for b in items:
            if b.kind != RTS:
                b.time = send_side(b.src, b.dst, b.nbytes, b.time)[1]
        recv_side = self.ports.recv_side
        for b in sorted(items, key=_by_arrival):
            if b.kind != RTS:
                b.time = recv_side(b.src, b.dst, b.nbytes, b.time)

    # ---- delivery ----

    def _deliver(self, env: Envelope) -> None:
        """Take an envelope from the transport (the transport's ``deliver`` callback)."""
        touched = self._touched
        if touched is not None:  # exploring: both ends' queues and ports are touched (the RNG too: -1)
            touched.add(env.src)
            touched.add(env.dst)
            if self._noisy:
                touched.add(-1)
        kind = env.kind
        if kind == EAGER or kind == RTS:
            # one channel per (src, dst): arrival times never decrease along it, so its
            # messages are matched in send order. What a source has in flight sits in its
            # slot: the envelope itself while it is the only one (a collective's round),
            # else a dict by destination of envelopes, or deques once a channel holds two
            src = env.src
            t = env.time
            inflight = self._inflight
            slot = inflight[src]
            if slot is None:
                if t <= self.now:  # arrives now, nothing ahead of it: match it at once
                    self._arrived(env)
                    return
                inflight[src] = env
                self.schedule(t, self._arrive_key, env)
                return
            if type(slot) is not dict:  # a second message in flight from src
                slot = inflight[src] = {slot.dst: slot}
            dst = env.dst
            chan = slot.get(dst)
            if chan is None:
                if t <= self.now:
                    self._arrived(env)
                    return
                slot[dst] = env
            elif isinstance(chan, _Deque):
                if chan[-1].time > t:
                    t = chan[-1].time
                    env = retimed(env, t)
                chan.append(env)
            else:  # a second message on this channel: now a queue
                if chan.time > t:
                    t = chan.time
                    env = retimed(env, t)
                slot[dst] = _Deque((chan, env))
            self.schedule(t, self._arrive_key, env)
        elif kind == CTS:
            self._clear_to_send(env)
        elif kind == DATA:
            self.schedule(env.time, self._data_arrived, env)
        elif kind == ACK:
            req = self._sync_sends.pop((env.dst, env.msg_id))
            self.schedule(env.time, _finish_request, req)

    def _arrive(self, env: Envelope) -> None:
        """A message's arrival time came: match the head of its channel (``env``, or one sent before it)."""
        src = env.src
        inflight = self._inflight
        slot = inflight[src]
        if type(slot) is not dict:  # the only message in flight from src: env itself
            inflight[src] = None
            self._arrived(slot)
            return
        dst = env.dst
        chan = slot[dst]
        if isinstance(chan, _Deque):
            head = chan.popleft()
            if len(chan) == 1:
                slot[dst] = chan[0]
        else:
            head = chan
            del slot[dst]
            if not slot:
                inflight[src] = None
        self._arrived(head)

    def _arrived(self, env: Envelope) -> None:
        """Match an envelope that has reached its receiver, or queue it as unexpected."""
        row = self._rows[env.ctx]
        local = row.local
        if local is None:
            dst, src = env.dst, env.src
        else:
            dst, src = local[env.dst], local[env.src]
        mq = row.queues[dst] or row.queue(dst)
        req = mq.take_posted(src, env.tag)
        if req is not None:
            if env.kind == EAGER and not env.sync:  # _matched, inline
                self._complete_recv(req, env, copy=False, source=src)
            else:
                self._matched(req, env)
            return
        mq.add_unexpected(src, env.tag, env)
        if mq.probes:
            for i, (psrc, ptag, preq) in enumerate(mq.probes):
                if (psrc == ANY_SOURCE or psrc == src) and (ptag == ANY_TAG or ptag == env.tag):
                    del mq.probes[i]
                    preq._finish(Status(src, env.tag, env.nbytes))
                    break

    def _matched(self, req: _RecvRequest, env: Envelope) -> None:
        """A receive met its message at ``now``: complete it, or start the rendezvous."""
        if env.kind == EAGER:
            self._complete_recv(req, env, copy=False)
            if env.sync:
                self.transport.send(Envelope(ACK, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                             0, self.now))
        else:  # RTS: ask the sender for the data, saying when the receive was posted (Rule 5)
            self._rdv_recvs[(env.src, env.msg_id)] = req
            self.transport.send(Envelope(CTS, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                         env.nbytes, self.now, b"", (), False, pack_time(req.posted)))

    def _clear_to_send(self, env: Envelope) -> None:
        sender, receiver = env.dst, env.src
        req, buffers, header, posted = self._rdv_sends.pop((sender, env.msg_id))
        nbytes = env.nbytes
        match_time = transfer_start(posted, env)
        # the send completes when its data has been copied out at the receiver (_data_arrived):
        # the DATA envelope references the sender's own arrays
        self._rdv_landing[(sender, env.msg_id)] = req
        if self._book_later:  # charged with this instant's other transfers (Rule 4)
            self._rdv_bookings.append(Booking(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                              nbytes, match_time, header, buffers, False, b"",
                                              _serial(req)))
            return
        arrive = env.time if self._zero_latency else max(env.time, self._arrival(
            sender, receiver, nbytes, match_time))
        self.transport.send(Envelope(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                     nbytes, arrive, header, buffers))

    def _data_arrived(self, env: Envelope) -> None:
        key = (env.src, env.msg_id)
        self._complete_recv(self._rdv_recvs.pop(key), env, copy=True)
        self._rdv_landing.pop(key)._finish()

    def _complete_recv(self, req: _RecvRequest, env: Envelope, *, copy: bool, source: int = -1) -> None:
        """Hand a matched receive its message; ``source``: the sender's rank in the receive's comm, if known."""
        if source < 0:
            local = req.comm._group._local
            source = env.src if local is None else local[env.src]
        if env.ctx & 1 == 0:  # a user's comm; a collective's own receives (odd contexts) have no reader
            req.status = _new_status((source, env.tag, env.nbytes))
        self.msgs_recv[env.dst] += 1
        self.bytes_recv[env.dst] += env.nbytes
        if self.trace is not None:
            self.trace.received(env.src, env.msg_id, self.now)
        buf = req.buf
        try:
            if buf is None:
                value = wire.unpack(env.header, env.buffers, copy=copy, loads=self._loads,
                                    arrays=self._arrays)
            else:
                _fill(buf, wire.unpack(env.header, env.buffers, copy=False, loads=self._loads,
                                       arrays=_arrays.HOST), req, source)
                value = buf
        except Exception as exc:
            req._finish(None, exc)
            return
        req._finish(value)  # may run the receiver right here: outside the try

    def cancel(self, req: Request[Any]) -> bool:
        """Take a pending receive or probe out of its queue; return whether it was there."""
        if isinstance(req, _RecvRequest):
            return req.comm._mq.unpost(req.src, req.tag, req)
        for _, _, mq in self.endpoints.queues():
            probes = mq.probes or []
            for i, item in enumerate(probes):
                if item[2] is req:
                    del probes[i]
                    return True
        return False

_TIME = struct.Struct("<d")


def pack_time(t: float) -> bytes:
    """A virtual time as 8 bytes, for an envelope's ``meta``: when a receive was posted (a clear
    to send, Rule 5), or the instant a message was charged at (``_hosted_engine``)."""
    return _TIME.pack(t)


def unpack_time(meta: bytes) -> float:
    """The virtual time ``pack_time`` packed."""
    t: float = _TIME.unpack(meta)[0]
    return t


def transfer_start(posted: float, cts: Envelope) -> float:
    """When a rendezvous transfer starts: the later of its send's and its receive's posting (Rule 5)."""
    received: float = _TIME.unpack(cts.meta)[0]
    return posted if posted > received else received


def _collective_name(comm: Comm, task: Task) -> str:
    """Name a traced collective message after its call: ``world:all_reduce#3(ring)``."""
    coll = task.collective
    if coll is None:
        return f"{comm._group.name}:collective"
    algorithm = f"({coll.algorithm})" if coll.algorithm else ""
    return f"{comm._group.name}:{coll.call.partition('(')[0]}#{coll.seq}{algorithm}"


# orders of booked messages (Engine._book): Envelope fields, then the posting task's serial,
# [kind, ctx, src, dst, tag, msg_id, nbytes, time, header, buffers, sync, meta, serial]
def sort_by_source(items: list[Booking], world_size: int) -> None:
    """``items.sort(key=_by_source)``, without a key per message when the instant is a round.

    In a round of a collective most ranks send one message each, booked in the
    order the seed ran them. Each booking then goes to its source's slot in a
    list of ``world_size``, read back in order: no key tuples, no comparisons.
    A source that booked twice (or a small instant) takes the stable sort.
    """
    if len(items) * 4 >= world_size:
        slots: list[Booking | None] = [None] * world_size
        for b in items:
            src = b.src
            if slots[src] is not None:
                break
            slots[src] = b
        else:
            items[:] = [b for b in slots if b is not None]
            return
    items.sort(key=_by_source)


def _serial(req: Request[Any]) -> int:
    """The serial of the task that posted a send (``Task.serial``)."""
    task = req._task
    return 0 if task is None else task.serial


def _fill(buf: Any, value: Any, req: _RecvRequest, source: int) -> None:
    """Copy a received array into the user's buffer, or explain why it cannot be."""
    if not (isinstance(value, np.ndarray) and isinstance(buf, np.ndarray)):
        _fill_any(buf, value, req, source)
        return
    rank = req.comm.rank
    if value.dtype != buf.dtype:
        raise TypeError(
            f"rank {rank}: {req.op}: message from rank {source} has dtype {value.dtype} but buf "
            f"has dtype {buf.dtype}; receive into a {value.dtype} buffer, or without buf")
    if value.nbytes > buf.nbytes:
        raise TruncationError(
            rank, req.op, f"message from rank {source} is {value.nbytes} bytes but buf holds {buf.nbytes}",
            "pass a larger buf, or size it with probe() first")
    if value.shape == buf.shape:
        np.copyto(buf, value)
    elif buf.flags.c_contiguous:  # a shorter message fills the front, as in MPI
        buf.reshape(-1)[: value.size] = value.reshape(-1)
    else:
        buf.flat[: value.size] = value.reshape(-1)


def _fill_any(buf: Any, value: Any, req: _RecvRequest, source: int) -> None:
    """``_fill`` where either side is another library's array: dtypes by name, copies by ``arrays``."""
    rank = req.comm.rank
    if not _arrays.is_array(value):
        raise TypeError(
            f"rank {rank}: {req.op}: message from rank {source} is a {type(value).__name__}, "
            f"not an array, so it cannot fill buf={describe(buf)}; call recv() without buf")
    have, want = _arrays.dtype_name(value), _arrays.dtype_name(buf)
    if have != want:
        raise TypeError(
            f"rank {rank}: {req.op}: message from rank {source} has dtype {have} but buf "
            f"has dtype {want}; receive into a {have} buffer, or without buf")
    size, room = _arrays.nbytes(value), _arrays.nbytes(buf)
    if size > room:
        raise TruncationError(
            rank, req.op, f"message from rank {source} is {size} bytes but buf holds {room}",
            "pass a larger buf, or size it with probe() first")
    if tuple(value.shape) == tuple(buf.shape):
        _arrays.copy_into(buf, value)  # device to device, or staged through host across libraries
    else:  # a shorter message fills the front, as in MPI
        _arrays.fill_front(buf, value)


def checksum(a: Any) -> int:
    if isinstance(a, np.ndarray):
        return zlib.crc32(np.ascontiguousarray(a).data.cast("B"))
    return _arrays.checksum(a.array if type(a) is wire.ObjectBuffer else a)  # on a's own device
