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
instant (``Delivery.book``, from ``P2P.end_instant``): each send port takes its messages in posting order
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
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import numpy as np

from simcluster.transports import wire
from simcluster.transports.base import ACK, CTS, DATA, EAGER, RTS, Envelope, Transport, retimed
from simcluster.transports.wire import INLINE, PACKED_NONE

from . import frames as _frames
from . import schedule as _schedule
from .. import arrays as _arrays
from .kernel import Kernel, Layer, Task, finish_request
from .ports import NativePorts
from .rendezvous import Handshakes
from ..errors import TruncationError
from ..matching import ANY_SOURCE, ANY_TAG, EndpointRow, Endpoints
from ..payload import describe
from ..request import Request, Status, format_op

if TYPE_CHECKING:
    from ..errors import SimclusterError
    from .coll_check import CallCheck
    from .records import Record, Revocation
    from .settings import EngineSettings
    from ..matching import MatchQueue
    from ..latency import Ports

R = TypeVar("R", bound=Request[Any])

# Final aliases: compiled, each is a static rather than a lookup in a module's dict per message
_tuple_new: Final = tuple.__new__
_Envelope: Final = Envelope


_Status: Final = Status
_NONE_HEADER: Final = PACKED_NONE.header  # post_send sends every None with this very header object


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
    process, whose receivers charge the other side). Built with keywords
    only (a native class: compiled, that costs what positions would).
    """

    __slots__ = ("kind", "ctx", "src", "dst", "tag", "msg_id", "nbytes", "time", "header",
                 "buffers", "sync", "meta", "serial")

    def __init__(self, *, kind: int, ctx: int, src: Any, dst: Any, tag: int, msg_id: Any, nbytes: int,
                 time: float, header: Any, buffers: Any, sync: bool, serial: int,
                 meta: bytes = b"") -> None:
        # header and buffers as the payload codec gives them: an in-process run's numbers
        # travel as themselves (wire.INLINE), not as bytes and a tuple of buffers.
        # src, dst and msg_id (ints) are kept as the objects they came as: compiled, an int
        # field is stored unboxed, and the envelope would box each again, a new object per
        # field and message once ranks and ids pass 256
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


def by_source(b: Booking) -> tuple[int, int]:
    """Posting order on the send ports: by source, the rank's own messages before its helpers'."""
    return (b.src, b.serial)


def by_source_and_id(b: Booking) -> tuple[int, int, int]:
    """``by_source``, then by message id (rendezvous transfers)."""
    return (b.src, b.serial, b.msg_id)


def by_arrival(b: Booking) -> tuple[float, int, int, int]:
    """The receive ports' order: by wire time, then in posting order."""
    return (b.time, b.src, b.serial, b.msg_id)


def _new_status(fields: tuple[int, int, int]) -> Status:
    """``request.make_status(fields)``, the same way."""
    status: Status = _tuple_new(_Status, fields)
    return status


_NDARRAY: Final = np.ndarray
_Deque: Final = deque
_inline_nbytes: Final = wire.inline_nbytes


class _RecvRequest(Request[Any]):
    """A receive: also remembers what it asked for.

    ``_op`` holds only the call's name (``recv``, ``irecv``, ...); ``op``
    formats the whole call from the fields, so an idle receive costs no string.
    """

    __slots__ = ("comm", "src", "tag", "buf", "posted")

    @property
    def op(self) -> str:
        return format_op((self._op, self.buf, self.src, self.tag))

    def peer(self) -> int | None:
        """The world rank this receive waits on (None for ANY_SOURCE), worked out when asked."""
        src = self.src
        return None if src == ANY_SOURCE else self.comm.group.world_ranks[src]

    def __init__(self, kernel: Kernel, task: Task, op: str,
                 comm: Member, src: int, tag: int, buf: Any, nonblocking: bool) -> None:
        # Every slot set once, here: one receive is built per message.
        self.kernel = kernel
        self.task = task
        self._state = 0
        self._value = None
        self._error = None
        self._waiter = None
        self._op = op
        self.status = None
        self._guard = None
        self._retrieved = False
        self.nonblocking = nonblocking
        self.comm = comm
        self.src = src
        self.tag = tag
        self.buf = buf
        self.posted: float = kernel.now  # a rendezvous transfer starts no earlier (Rule 5)


class Roster(Protocol):
    """A communicator as the engine's parts read it (``comm.Group``): their declared seam."""

    name: str
    world_ranks: list[int]
    local: dict[int, int] | None  # world rank -> rank in it; None where they are equal
    check: CallCheck

    def local_rank(self, world_rank: int) -> int: ...


class Member(Protocol):
    """A rank's handle on a communicator as the protocol reads it (``comm.Comm``): its declared seam."""

    @property
    def rank(self) -> int: ...

    @property
    def world_rank(self) -> int: ...

    @property
    def ctx(self) -> int: ...

    @property
    def match_queue(self) -> MatchQueue: ...

    @property
    def group(self) -> Roster: ...


class Faults(Protocol):
    """Crashes and revocations as the protocol and ``Comm`` ask about them (``engine.failures.Failures``):
    their declared seam. Each call returns the error a call completes with at once, or None."""

    revoked: dict[int, Revocation]  # user context -> who revoked it, when
    failed: dict[int, float]  # world rank -> virtual time it crashed
    calls: dict[tuple[int, str], int]  # (world rank, kind of call) -> calls made

    def posting(self, comm: Member, op: Any, peer: int, send: bool) -> SimclusterError | None: ...

    def unmatched(self, comm: Member, src: int, op: Any) -> SimclusterError | None: ...

    def lost_handshake(self, req: Any, src: int) -> SimclusterError | None: ...

    def sent(self, req: Request[Any], ctx: int, dst: int, key: tuple[int, int]) -> None: ...

    def lost(self, dst: int) -> bool: ...

    def entering(self, comm: Member, call: str) -> None: ...

    def revoked_for(self, ctx: int, world_rank: int) -> Revocation | None: ...

    def take_records(self) -> list[Record]: ...

    def failed_in(self, group: Roster) -> list[int]: ...

    def ack_failed(self, comm: Member, count: int | None) -> int: ...

    def excused(self, ctx: int, src: int, dst: int) -> bool: ...


class Posting(Protocol):
    """The protocol as its delivery strategy and the channels use it (``P2P``): the delivery's
    side of their seam, as ``Delivery`` is the protocol's.

    What a delivery reads to charge and route a message, the handshakes
    under way that it moves (a rendezvous transfer, a synchronous send's
    acknowledgement: ``engine.rendezvous``), and the calls it makes: it
    takes the instant's bookings and adds rendezvous transfers through
    methods, and never assigns an attribute of the protocol
    (``tests/test_structure.py`` checks both).
    """

    @property
    def kernel(self) -> Kernel: ...

    @property
    def world_size(self) -> int: ...

    @property
    def transport(self) -> Transport: ...

    @property
    def ports(self) -> Ports: ...

    @property
    def native_ports(self) -> NativePorts | None: ...

    @property
    def in_process(self) -> bool: ...

    @property
    def zero_latency(self) -> bool: ...

    @property
    def book_later(self) -> bool: ...

    @property
    def noisy(self) -> bool: ...

    @property
    def rts_delay(self) -> float: ...

    @property
    def bookings(self) -> list[Booking]: ...  # read only: ``take_bookings`` hands them over

    @property
    def handshakes(self) -> Handshakes: ...  # moved only through its transitions

    def take_bookings(self) -> list[Booking]: ...

    def take_transfers(self) -> list[Booking]: ...

    def book_transfer(self, booking: Booking) -> None: ...

    def arrival(self, src: int, dst: int, nbytes: int, t: float) -> float: ...

    def arrived(self, env: Envelope) -> None: ...

    def complete_recv(self, req: _RecvRequest, env: Envelope, copy: bool, source: int) -> None: ...


class Channels:
    """The FIFO channels between ranks of this process (Rule 3): envelopes on their way to a match.

    One channel per (source, destination): arrival times never decrease
    along it, so its messages are matched in send order. What a source has in
    flight sits in its slot: the envelope itself while it is the only one (a
    collective's round), else a dict by destination of envelopes, or deques
    once a channel holds two.
    """

    def __init__(self, p2p: P2P) -> None:
        self.p2p = p2p
        self.kernel = p2p.kernel
        self._inflight: list[Any] = [None] * p2p.world_size
        self.arrive_key = self.arrive  # bound once: an event per message names it

    def grow(self, world_size: int) -> None:
        """Room for the channels of ranks added during the run (``P2P.grow``)."""
        self._inflight.extend([None] * (world_size - len(self._inflight)))

    def owner(self, fn: Callable[[Any], None], arg: Any) -> set[int] | None:
        """The ranks an arrival on a channel touches: its receiver (None: not a channel's event)."""
        # by equality: a compiled method is a new bound object at each access
        return {arg.dst} if fn == self.arrive else None

    def enter(self, env: Envelope) -> None:
        """Put an eager message or a request to send on its channel; match it now if it is due."""
        src = env.src
        t = env.time
        inflight = self._inflight
        slot = inflight[src]
        kernel = self.kernel
        if slot is None:
            if t <= kernel.now:  # arrives now, nothing ahead of it: match it at once
                self.p2p.arrived(env)
                return
            inflight[src] = env
            kernel.schedule(t, self.arrive_key, env)
            return
        if type(slot) is not dict:  # a second message in flight from src
            slot = inflight[src] = {slot.dst: slot}
        dst = env.dst
        chan = slot.get(dst)
        if chan is None:
            if t <= kernel.now:
                self.p2p.arrived(env)
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
        kernel.schedule(t, self.arrive_key, env)

    def arrive(self, env: Envelope) -> None:
        """A message's arrival time came: match the head of its channel (``env``, or one sent before it)."""
        src = env.src
        inflight = self._inflight
        slot = inflight[src]
        if type(slot) is not dict:  # the only message in flight from src: env itself
            inflight[src] = None
            self.p2p.arrived(slot)
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
        self.p2p.arrived(head)


class Delivery(ABC):
    """How envelopes travel and what their ports are charged: the protocol's strategy (its seam).

    ``engine.delivery.LocalDelivery`` moves them between ranks of one process;
    ``hosting.hosted_engine.HostedDelivery``, in a process hosting world ranks
    ``[lo, hi)``, also to and from the other processes. ``P2P`` posts and
    matches; the strategy it is made with carries what lies between: the
    charge of an instant's messages (``book``, Rule 4), the rendezvous
    transfer after a clear to send (Rule 5). Both put what reaches their own
    ranks on the same FIFO ``Channels`` (Rule 3), through ``enter``.
    """

    p2p: P2P  # the protocol this strategy delivers for (``bind``)
    kernel: Kernel  # the kernel it runs on
    channels: Channels  # the channels to this process's ranks

    def bind(self, p2p: P2P) -> None:
        """Deliver for ``p2p`` (its ``__init__`` calls this once)."""
        self.p2p = p2p
        self.kernel = p2p.kernel
        self.channels = Channels(p2p)
        self.data_key = self.data_arrived  # bound once: an event per rendezvous transfer names it

    def grow(self, world_size: int) -> None:
        """Room for the channels of ranks added during the run (``P2P.grow``)."""
        self.channels.grow(world_size)

    def owner(self, fn: Callable[[Any], None], arg: Any) -> set[int] | None:
        """The ranks one of this strategy's events touches (None: not its event)."""
        # by equality: a compiled method is a new bound object at each access
        return {arg.src, arg.dst} if fn == self.data_arrived else self.channels.owner(fn, arg)

    def enter(self, env: Envelope) -> None:
        """An envelope charged on both sides: on to its channel, or to its handshake's step."""
        kind = env.kind
        if kind == EAGER or kind == RTS:
            self.channels.enter(env)
        elif kind == CTS:
            self.clear_to_send(env)
        elif kind == DATA:
            self.kernel.schedule(env.time, self.data_key, env)
        elif kind == ACK:
            req = self.p2p.handshakes.acknowledge((env.dst, env.msg_id))
            if req is not None:  # None: its sender crashed (engine.failures)
                self.kernel.schedule(env.time, finish_request, req)

    @abstractmethod
    def send(self, env: Envelope) -> None:
        """Send an eager message or a request to send, already charged."""

    @abstractmethod
    def deliver(self, env: Envelope) -> None:
        """Take an envelope from the transport (the transport's ``deliver`` callback)."""

    @abstractmethod
    def book(self) -> bool:
        """Charge and send the messages of the instant that just ended; False when there are none."""

    @abstractmethod
    def clear_to_send(self, env: Envelope) -> None:
        """A receiver matched a request to send from here: send its data."""

    @abstractmethod
    def data_arrived(self, env: Envelope) -> None:
        """A rendezvous transfer's data reached its receiver here: complete the receive."""


class P2P(Layer):
    """Point-to-point messages: what ``Comm`` posts its sends and receives to.

    Holds the kernel it runs on, the endpoint table, the ports and the
    delivery strategy; it is the kernel's ``Layer``. It owns the handshakes
    under way (``handshakes``, ``engine.rendezvous``): the strategy and the
    failure model move them only through their transitions.
    """

    def __init__(self, kernel: Kernel, transport: Transport, ports: Ports, settings: EngineSettings,
                 delivery: Delivery) -> None:
        model = settings.model
        self.kernel = kernel
        self.world_size = world_size = kernel.world_size
        self.transport = transport
        self.ports = ports
        # a built-in model's compiled ports: called natively, not as a Python object
        self.native_ports: NativePorts | None = ports if isinstance(ports, NativePorts) else None
        self.zero_latency = bool(ports.zero)
        # Rule 4: a model with port state charges each instant's messages together (book)
        self.book_later = not self.zero_latency and bool(ports.ordered)
        self.bookings: list[Booking] = []  # eager messages and RTS posted now
        self.rdv_bookings: list[Booking] = []  # rendezvous data cleared to send now
        self.latency_model = model  # what ``ports`` were bound from; collectives read reduce_time
        self.free_reductions = model is None or model.free_reductions
        self.eager_limit = settings.eager_limit
        # Rule 5: how long a request to send takes to reach its receiver (the model's lookahead)
        self.rts_delay = 0.0 if model is None else float(model.lookahead())
        # run(serializer="pickle"): what msgpack cannot carry is pickled (wire.EXT_PICKLE)
        self.dumps: Callable[[object], bytes] | None = settings.dumps
        self.loads: Callable[[bytes], object] | None = settings.loads
        # arrays of other libraries (torch, CuPy) travel as objects where the transport hands
        # objects over, so a CuPy array stays on its device; byte transports stage them to host
        self.arrays = _arrays.IN_PROCESS if transport.in_process else _arrays.STAGED
        # envelopes are handed over as objects: floats and ints travel as themselves (wire.INLINE),
        # and the delivery hands them over itself (LocalDelivery.send)
        self.in_process = transport.in_process
        self._msg_id = 0  # the last message's id (ids count from 1)
        self.groups: dict[int, Roster] = {}  # the communicators, by context (register)
        self.endpoints = Endpoints()
        self._rows = self.endpoints.rows
        # envelopes for communicators not made here yet (another process made them first)
        self._orphans: dict[int, list[Envelope]] = {}
        # rendezvous and synchronous sends waiting for their receiver, and the receives they
        # matched: the one home of their state (engine.rendezvous)
        self.handshakes = Handshakes()
        # crashes and ULFM's calls (a fault plan's crashes, or a first revoke/agree/shrink); None: no check
        self.failures: Faults | None = None
        self.last_nbytes = 0
        self.msgs_sent = [0] * world_size
        self.bytes_sent = [0] * world_size
        self.msgs_recv = [0] * world_size
        self.bytes_recv = [0] * world_size
        chooser = kernel.chooser
        # the latency model draws from one RNG per message (explore's footprints)
        self.noisy = (chooser is not None and chooser.footprints and not self.book_later
                      and _schedule.draws_noise(model))
        self.delivery = delivery
        delivery.bind(self)
        transport.open(world_size, delivery.deliver)

    def grow(self, world_size: int) -> None:
        """Take in the ranks added during the run up to ``world_size`` (``Engine.add_ranks``)."""
        more = world_size - self.world_size
        self.ports.grow(world_size)  # first: it refuses what does not fit, before anything changed
        self.world_size = world_size
        self.delivery.grow(world_size)
        for counts in (self.msgs_sent, self.bytes_sent, self.msgs_recv, self.bytes_recv):
            counts.extend([0] * more)

    # ---- the kernel's instant hooks (Layer) ----

    def owner(self, fn: Callable[[Any], None], arg: Any) -> set[int] | None:
        return self.delivery.owner(fn, arg)

    def instant_open(self) -> bool:
        return bool(self.bookings or self.rdv_bookings)

    def end_instant(self) -> bool:
        """Charge the instant's messages (Rule 4); return whether that made events at ``now``."""
        if not (self.bookings or self.rdv_bookings) or not self.delivery.book():
            return False
        return bool(self.kernel.runnable() or self.bookings or self.rdv_bookings)

    def close(self) -> None:
        """Release the transport."""
        self.transport.close()

    # ---- what the delivery strategy takes and adds (Posting) ----

    def take_bookings(self) -> list[Booking]:
        """The eager messages and requests to send posted at this instant, in posting order, handed
        over to be charged (none left here; an empty list when there are none)."""
        items = self.bookings
        if items:
            self.bookings = []
        return items

    def take_transfers(self) -> list[Booking]:
        """The rendezvous transfers cleared to send at this instant, handed over like ``take_bookings``."""
        items = self.rdv_bookings
        if items:
            self.rdv_bookings = []
        return items

    def book_transfer(self, booking: Booking) -> None:
        """A rendezvous transfer cleared to send now: charged with the instant's others (Rule 4)."""
        self.rdv_bookings.append(booking)

    # ---- communicators ----

    def register(self, group: Roster, ctx: int, size: int, local: dict[int, int] | None) -> EndpointRow:
        """Add a communicator's row of match queues; match what reached it before it was made here."""
        row = self.endpoints.add(ctx, size, local)
        self.groups[ctx] = group
        for env in self._orphans.pop(ctx, ()):
            self.arrived(env)
        return row

    def orphan_envelopes(self) -> list[Envelope]:
        """Envelopes for communicators this process never created (the leak report names them)."""
        return [env for envs in self._orphans.values() for env in envs]

    # ---- posting ----

    def post_send(self, comm: Member, obj: object, dst: int, tag: int, sync: bool,
                  op: str | tuple[Any, ...], nonblocking: bool,
                  need_request: bool = False) -> Request[None] | None:
        """Start a send from ``comm``'s rank.

        Returns its request, or None for a blocking standard send that
        completed at once (eager), which needs no request at all, unless
        ``need_request``. ``op`` is the call as ``request.format_op`` reads
        it, or a collective's send by its name alone: its call ``(op, dst)``
        is then built only where it is kept or shown (a request, a failure).
        """
        kernel = self.kernel
        task = kernel.current
        member: Any = comm  # its world rank read as the int object it is (no unboxing, no boxing again)
        src_obj: Any = member.world_rank
        src_w: int = src_obj
        if task is None or task.rank != src_w:
            raise kernel.checks.outside(comm.rank, (op, dst) if type(op) is str else op)
        failures = self.failures
        if failures is not None:
            if type(op) is str:
                op = (op, dst)
            failed = failures.posting(comm, op, comm.group.world_ranks[dst], True)
            if failed is not None:
                return self._failed(Request(kernel, task, op, comm.group.world_ranks[dst]), failed, nonblocking)
        # in process, a float, a bool or a 64-bit int travels as itself: no Packed, no tuple
        nbytes = _inline_nbytes(obj) if self.in_process else -1
        packed = PACKED_NONE
        if nbytes < 0:
            if obj is not None:
                try:
                    packed = wire.pack(obj, copy=False, arrays=self.arrays)
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
        group = comm.group
        world_ranks: list[Any] = group.world_ranks
        dst_w: Any = world_ranks[dst]  # the int object: it goes into the envelope as it is
        ctx: int = comm.ctx
        self._msg_id += 1
        msg_id: Any = self._msg_id  # boxed once, for the envelope and the tables
        self.msgs_sent[src_w] += 1
        self.bytes_sent[src_w] += nbytes
        self.last_nbytes = nbytes  # for the caller's trace span
        now = kernel.now
        trace = kernel.trace
        if trace is not None:
            name = group.name if ctx % 2 == 0 else _collective_name(comm, task)
            trace.sent(msg_id, src_w, dst_w, tag, nbytes, now, name)
        eager = nbytes <= self.eager_limit
        req: Request[None] | None = None
        if nonblocking or sync or not eager or need_request:
            req = Request(kernel, task, (op, dst) if type(op) is str else op, dst_w)
            req.nonblocking = nonblocking
            if kernel.strict and nonblocking:
                if arrays:
                    held = [obj] if packed.single_array else list(buffers)
                    req.guard_buffers((held, [checksum(a) for a in held], _frames.user_line()))
                kernel.checks.track(req)
        if eager:
            if arrays:
                if len(buffers) == 1 and type(buffers[0]) is _NDARRAY:  # one array: no generator
                    buffers = (np.array(buffers[0], copy=True, order="K"),)
                else:
                    buffers = tuple(np.array(b, copy=True, order="K") if type(b) is _NDARRAY
                                    else b.copy() for b in buffers)  # ObjectBuffer: its own library
            if self.book_later:  # charged with the rest of this instant (Rule 4)
                self.bookings.append(Booking(kind=EAGER, ctx=ctx, src=src_obj, dst=dst_w, tag=tag,
                                             msg_id=msg_id, nbytes=nbytes, time=now, header=header,
                                             buffers=buffers, sync=sync, serial=task.serial))
                env = None
            else:
                arrive = now if self.zero_latency else self.arrival(src_w, dst_w, nbytes, now)
                env = _new_envelope((EAGER, ctx, src_obj, dst_w, tag, msg_id, nbytes, arrive,
                                     header, buffers, sync, b""))
            if sync:  # completes when its receive matches it (ACK)
                self.handshakes.request((src_w, msg_id), req, dst_w, ctx, tag, nbytes, False,
                                        None, None, now)
            elif req is not None:
                req.complete()  # at once: nobody can be waiting yet
        else:
            assert req is not None
            reaches = now + self.rts_delay  # Rule 5
            if self.book_later:  # on its channel behind this instant's eager messages
                self.bookings.append(Booking(kind=RTS, ctx=ctx, src=src_w, dst=dst_w, tag=tag,
                                             msg_id=msg_id, nbytes=nbytes, time=reaches, header=b"",
                                             buffers=(), sync=sync, serial=task.serial))
                env = None
            else:
                env = Envelope(RTS, ctx, src_w, dst_w, tag, msg_id, nbytes, reaches, b"", (), sync)
            req.annotate(f"[rendezvous: {nbytes} bytes > eager_limit {self.eager_limit}]")
            self.handshakes.request((src_w, msg_id), req, dst_w, ctx, tag, nbytes, True,
                                    buffers, header, now)
        if failures is not None and (sync or not eager):
            assert req is not None
            failures.sent(req, ctx, dst_w, (src_w, msg_id))
        if env is not None:
            self.delivery.send(env)
        return req

    def _failed(self, req: R, error: BaseException, nonblocking: bool) -> R:
        """``req``, completed at once with ``error`` (engine.failures): a call that cannot complete."""
        req.nonblocking = nonblocking
        if nonblocking and self.kernel.strict:
            self.kernel.checks.track(req)
        req.complete(None, error)
        return req

    def unfinished_sends(self) -> list[Request[Any]]:
        """Rendezvous sends waiting for their clear to send, and synchronous sends not yet matched."""
        return self.handshakes.waiting_sends()

    def _pack_opaque(self, comm: Member, obj: object, op: str | tuple[Any, ...],
                     exc: wire.Unsendable) -> wire.Packed:
        """Pack what msgpack refused with pickle, in serializer="pickle" runs; else explain."""
        if self.dumps is not None:
            try:
                return wire.pack(obj, copy=False, dumps=self.dumps, arrays=self.arrays)
            except wire.Unsendable as again:
                exc = again
        name = op if isinstance(op, str) else op[0]
        raise TypeError(f"rank {comm.rank}: {name}(obj={type(obj).__name__}): {exc}") from None

    def post_recv(self, comm: Member, buf: Any, src: int, tag: int, op: str,
                  nonblocking: bool) -> Request[Any]:
        """Post a receive on ``comm``'s rank; it completes when a message is matched and has arrived."""
        kernel = self.kernel
        task = kernel.current
        if task is None or task.rank != comm.world_rank:
            raise kernel.checks.outside(comm.rank, (op, buf, src, tag))
        failures = self.failures
        failed = None if failures is None else failures.posting(comm, (op, buf, src, tag), -1, False)
        mq = comm.match_queue
        env = mq.take_unexpected(src, tag) if mq.unexpected and failed is None else None
        if env is None and failures is not None and failed is None:
            failed = failures.unmatched(comm, src, (op, buf, src, tag))
        req = _RecvRequest(kernel, task, op, comm, src, tag, buf, nonblocking)
        if failed is not None:
            return self._failed(req, failed, nonblocking)
        if nonblocking and kernel.strict:
            kernel.checks.track(req)
        if env is None:
            mq.post(src, tag, req)
        else:
            self.matched(req, env)
        return req

    def iprobe(self, comm: Member, src: int, tag: int) -> Status | None:
        """Return the status of a message a receive for (src, tag) would take now, if any."""
        env = comm.match_queue.peek_unexpected(src, tag)
        if env is None:
            return None
        return Status(comm.group.local_rank(env.src), env.tag, env.nbytes)

    def post_probe(self, comm: Member, src: int, tag: int, op: str) -> Request[Status]:
        """Return a request that completes with a Status once a fitting message arrives."""
        peer = None if src == ANY_SOURCE else comm.group.world_ranks[src]
        failures = self.failures
        req: Request[Status] = Request(self.kernel, self.kernel.current, op, peer)
        status = self.iprobe(comm, src, tag)
        if failures is not None and status is None:
            failed = failures.posting(comm, op, -1, False) or failures.unmatched(comm, src, op)
            if failed is not None:
                return self._failed(req, failed, False)
        if status is not None:
            req.complete(status)
        else:
            mq = comm.match_queue
            if mq.probes is None:
                mq.probes = []
            mq.probes.append((src, tag, req))
        return req

    # ---- charging the ports ----

    def arrival(self, src: int, dst: int, nbytes: int, t: float) -> float:
        """Charge one message to the ports; return when it arrives (``ports.transfer(...)[1]``)."""
        native = self.native_ports
        if native is not None:
            return native.arrival(src, dst, nbytes, t)
        arrive: float = self.ports.transfer(src, dst, nbytes, t)[1]
        return arrive

    # ---- matching, once a message has reached its receiver ----

    def arrived(self, env: Envelope) -> None:
        """Match an envelope that has reached its receiver, or queue it as unexpected."""
        failures = self.failures
        if failures is not None and failures.lost(env.dst):
            return
        row = self._rows.get(env.ctx)
        if row is None:  # a communicator another process made first: matched once made here
            self._orphans.setdefault(env.ctx, []).append(env)
            return
        local = row.local
        if local is None:
            dst, src = env.dst, env.src
        else:
            dst, src = local[env.dst], local[env.src]
        mq = row.queues[dst] or row.queue(dst)
        req = mq.take_posted(src, env.tag)
        if req is not None:
            if env.kind == EAGER and not env.sync:  # matched, inline
                self.complete_recv(req, env, False, src)
            else:
                self.matched(req, env)
            return
        mq.add_unexpected(src, env.tag, env)
        if mq.probes:
            for i, (psrc, ptag, preq) in enumerate(mq.probes):
                if (psrc == ANY_SOURCE or psrc == src) and (ptag == ANY_TAG or ptag == env.tag):
                    del mq.probes[i]
                    preq.complete(Status(src, env.tag, env.nbytes))
                    break

    def matched(self, req: _RecvRequest, env: Envelope) -> None:
        """A receive met its message at ``now``: complete it, or start the rendezvous."""
        now = self.kernel.now
        if env.kind == EAGER:
            self.complete_recv(req, env, False, -1)
            if env.sync:
                self.transport.send(Envelope(ACK, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                             0, now))
        else:  # RTS: ask the sender for the data, saying when the receive was posted (Rule 5)
            failures = self.failures
            if failures is not None:
                lost = failures.lost_handshake(req, env.src)
                if lost is not None:  # the sender's crash is known: its data will never come
                    req.complete(None, lost)
                    return
            self.handshakes.clear((env.src, env.msg_id), req, env.dst, env.ctx, env.tag, env.nbytes)
            self.transport.send(Envelope(CTS, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                         env.nbytes, now, b"", (), False, pack_time(req.posted)))

    def complete_recv(self, req: _RecvRequest, env: Envelope, copy: bool, source: int) -> None:
        """Hand a matched receive its message; ``source``: the sender's rank in the receive's comm, or -1."""
        if source < 0:
            local = req.comm.group.local
            source = env.src if local is None else local[env.src]
        if env.ctx & 1 == 0:  # a user's comm; a collective's own receives (odd contexts) have no reader
            req.status = _new_status((source, env.tag, env.nbytes))
        self.msgs_recv[env.dst] += 1
        self.bytes_recv[env.dst] += env.nbytes
        trace = self.kernel.trace
        if trace is not None:
            trace.received(env.src, env.msg_id, self.kernel.now)
        buf = req.buf
        header = env.header
        if buf is None and (header is INLINE or header is _NONE_HEADER):
            # nothing to decode: a scalar that travelled as itself, or None (what a barrier sends)
            req.complete(env.buffers if header is INLINE else None)
            return
        try:
            if buf is None:
                value = wire.unpack(header, env.buffers, copy=copy, loads=self.loads,
                                    arrays=self.arrays)
            else:
                _fill(buf, wire.unpack(header, env.buffers, copy=False, loads=self.loads,
                                       arrays=_arrays.HOST), req, source)
                value = buf
        except Exception as exc:
            req.complete(None, exc)
            return
        req.complete(value)  # may run the receiver right here: outside the try

    def cancel(self, req: Request[Any]) -> bool:
        """Take a pending receive or probe out of its queue; return whether it was there."""
        if isinstance(req, _RecvRequest):
            return req.comm.match_queue.unpost(req.src, req.tag, req)
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
    to send, Rule 5), or the instant a message was charged at (``hosting.hosted_engine``)."""
    return _TIME.pack(t)


def unpack_time(meta: bytes) -> float:
    """The virtual time ``pack_time`` packed."""
    t: float = _TIME.unpack(meta)[0]
    return t


def transfer_start(posted: float, cts: Envelope) -> float:
    """When a rendezvous transfer starts: the later of its send's and its receive's posting (Rule 5)."""
    received: float = _TIME.unpack(cts.meta)[0]
    return posted if posted > received else received


def _collective_name(comm: Member, task: Task) -> str:
    """Name a traced collective message after its call: ``world:all_reduce#3(ring)``."""
    coll = task.collective
    if coll is None:
        return f"{comm.group.name}:collective"
    algorithm = f"({coll.algorithm})" if coll.algorithm else ""
    return f"{comm.group.name}:{coll.call.partition('(')[0]}#{coll.seq}{algorithm}"


# orders of booked messages (``Delivery.book``): Envelope fields, then the posting task's serial,
# [kind, ctx, src, dst, tag, msg_id, nbytes, time, header, buffers, sync, meta, serial]
def sort_by_source(items: list[Booking], world_size: int) -> None:
    """``items.sort(key=by_source)``, without a key per message when the instant is a round.

    In a round of a collective most ranks send one message each, booked in the
    order the seed ran them. Each booking then goes to its source's slot in a
    list of ``world_size``, read back in order: no key tuples, no comparisons.
    A source that booked twice (or a small instant) takes the stable sort.
    """
    if len(items) * 4 >= world_size:
        slots: list[Booking | None] = [None] * world_size
        for b in items:
            src: int = b.src
            if slots[src] is not None:
                break
            slots[src] = b
        else:
            items[:] = [b for b in slots if b is not None]
            return
    items.sort(key=by_source)


def serial_of(req: Request[Any]) -> int:
    """The serial of the task that posted a send (``Task.serial``)."""
    task = req.task
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
