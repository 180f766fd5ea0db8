"""The engine of one hosting process: world ranks ``[lo, hi)`` local, the rest behind the transport.

``HostedDelivery`` is the protocol's delivery strategy here: where
envelopes go, and when the receive side of a port is charged (at the
coordinator's STEP, in the memory transport's order). ``HostedEngine`` is
the engine made with it, plus ``phase``, which runs one STEP. The protocol
they follow is described in ``hosting.host``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from simcluster.transports.base import ACK, DATA, EAGER, RTS, Envelope, retimed
from simcluster.transports.tcp import TcpTransport

from . import control as _control, remote as _remote
from ..engine.coll_check import CallCheck, HostedCallCheck, SignatureRecord
from ..engine import running as _running
from ..engine.kernel import finish_request
from ..engine.protocol import (Booking, Delivery, by_source_and_id, pack_time, serial_of,
                               sort_by_source, transfer_start, unpack_time)
from ..engine.assembly import Engine
from ..engine.records import FlowRecord, Record
from .views import SplitPorts as _SplitPorts
from ..engine.settings import EngineSettings
from ..latency import Ports
from ..trace import Trace

if TYPE_CHECKING:
    from ..engine.failures import Failures
    from ..engine.flows import Flows
    from ..faults import Crash


class Landing(NamedTuple):
    """An envelope charged on its send side, waiting for its receive side (``HostedDelivery.land``)."""

    instant: float  # the instant it was charged at
    phase: int  # 1 for rendezvous data, else 0
    env: Envelope


class HostedDelivery(Delivery):
    """Delivery in a process hosting world ranks ``[lo, hi)``; the others are behind the transport.

    Charges the send side of a port where a message is posted and its
    receive side where it lands (``land``, at the next STEP), so that each
    port takes its messages in the memory transport's order; a rendezvous
    send to another process completes when the receiver acknowledges its data.
    """

    def __init__(self, lo: int, hi: int, ports: Ports) -> None:
        self.lo = lo
        self.hi = hi
        self.inner_ports = ports  # the whole model's ports (the protocol's see only this side)
        self.closing = False  # this STEP closes an instant, or is a window: charge rendezvous transfers
        self.landing: list[Landing] = []  # envelopes waiting for their receive side (land)

    def bind(self, p2p: Any) -> None:
        super().bind(p2p)
        platform = self.inner_ports.platform  # a platform whose links flows share
        self.flows: Flows | None = None
        if platform is not None:
            from ..engine.flows import Flows as _Flows  # only runs on such a platform load it

            # every process shares every flow alike (a replica): each hears of the others' flows
            # (records, Report.faults) before they join their links, a lookahead after they start
            self.flows = _Flows(self.kernel, platform, self._flow_ended, show=self.lo == 0)
            self.flow_records: list[FlowRecord] = []  # this process's, for the other processes
            self.flow_mine: list[tuple[FlowRecord, Booking]] = []  # this process's, to start next round
            self.flow_held: dict[tuple[int, int, int], Envelope] = {}  # from elsewhere, until their flow ends

    def send(self, env: Envelope) -> None:
        self.p2p.transport.send(env)

    # ---- envelopes from this process and from the others ----

    def deliver(self, env: Envelope) -> None:
        src = env.src
        if not self.lo <= src < self.hi:
            p2p = self.p2p
            kind = env.kind
            if self.flows is not None and (kind == EAGER or kind == RTS or kind == DATA):
                self.flow_held[(kind, src, env.msg_id)] = env  # reaches its rank when its flow ends
                return
            if p2p.book_later and (kind == EAGER or kind == RTS or kind == DATA):
                # sent by book in an earlier round, at the instant its meta says: its receive side
                # is charged with the others (land)
                self.landing.append(Landing(unpack_time(env.meta), int(kind == DATA), env))
                return
            if kind == EAGER or kind == DATA:
                if not p2p.zero_latency:  # Rule 2: the receive port is charged here
                    arrive = self.inner_ports.recv_side(src, env.dst, env.nbytes, env.time)
                    if kind == DATA:  # the sender's request completes when the data has landed
                        p2p.transport.send(Envelope(ACK, env.ctx, env.dst, src, env.tag, env.msg_id,
                                                    0, arrive))
                    env = retimed(env, arrive)
        self.enter(env)

    def clear_to_send(self, env: Envelope) -> None:
        """A receiver matched a request to send from here: send its data."""
        p2p = self.p2p
        sender, receiver = env.dst, env.src
        key = (sender, env.msg_id)
        # the send completes when its data land here (data_arrived), or when the receiver's
        # process acknowledges them (Delivery.enter, _flow_ended)
        hs = p2p.handshakes.start(key)
        if hs is None:  # its sender crashed, or the send failed (engine.failures)
            return
        req, buffers, header = hs.send, hs.buffers, hs.header
        start = transfer_start(hs.posted, env)
        here = self.lo <= receiver < self.hi
        if p2p.book_later:  # charged when the instant closes (book)
            p2p.book_transfer(Booking(kind=DATA, ctx=env.ctx, src=sender, dst=receiver, tag=env.tag,
                                      msg_id=env.msg_id, nbytes=env.nbytes, time=start, header=header,
                                      buffers=buffers, sync=False, serial=serial_of(req)))
            return
        nbytes = env.nbytes
        arrive = env.time if p2p.zero_latency else max(env.time, p2p.arrival(
            sender, receiver, nbytes, start))
        p2p.transport.send(Envelope(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                    nbytes, arrive, header, buffers))
        if not here and p2p.zero_latency:  # arrives at once; the transport copied the buffers in send()
            p2p.handshakes.acknowledge(key)
            self.kernel.schedule(env.time, finish_request, req)

    def data_arrived(self, env: Envelope) -> None:
        p2p = self.p2p
        hs = p2p.handshakes.land((env.src, env.msg_id))
        if hs is None:
            return
        recv = hs.recv  # None: the receive failed meanwhile (engine.failures)
        if self.lo <= env.src < self.hi:  # the sender's arrays: copy out, then the send completes
            if recv is not None:
                p2p.complete_recv(recv, env, True, -1)
            hs.send.complete()
        elif recv is not None:  # the transport's buffers are ours already
            p2p.complete_recv(recv, env, False, -1)

    # ---- charging ports across processes (Rule 2) ----

    def book(self) -> bool:
        """Charge the send side of the messages this round posted; False when there are none.

        Called by the loop once no event is left at ``now``, as on the memory
        transport, but only the send side is charged here: envelopes to other
        processes leave now, those to local ranks wait with them for their
        receive side at the next STEP (``land``). Rendezvous transfers wait
        for a STEP that closes the instant. On a platform with sharing the
        flows take the place of the ports (``_book_flows``).
        """
        batch = self._batch()
        if batch is None:
            return False
        items, phase = batch
        if self.flows is not None:
            self._book_flows(items, phase)
            return True
        p2p = self.p2p
        send_side = self.inner_ports.send_side
        now = self.kernel.now
        lo, hi = self.lo, self.hi
        instant = pack_time(now)
        for b in items:  # in posting order: receivers keep each source's order (land)
            if b.kind != RTS:
                b.time = send_side(b.src, b.dst, b.nbytes, b.time)[1]
            if lo <= b.dst < hi:
                self.landing.append(Landing(now, phase, b.envelope()))
            else:
                b.meta = instant  # the receiver charges its side in the order of instants
                p2p.transport.send(b.envelope())
        return True

    def _batch(self) -> tuple[list[Booking], int] | None:
        """What ``book`` charges now, in posting order, and its phase: the messages this round
        posted (0), else, once the instant closes, its rendezvous transfers (1); None: nothing."""
        p2p = self.p2p
        items = p2p.take_bookings()
        if items:
            if len(items) > 1:
                sort_by_source(items, p2p.world_size)  # stable: each source's messages in posting order
            return items, 0
        if not self.closing:
            return None
        items = p2p.take_transfers()
        if not items:
            return None
        if len(items) > 1:
            items.sort(key=by_source_and_id)
        return items, 1

    # ---- flows that share a platform's links (engine.flows) ----

    def _book_flows(self, items: list[Booking], phase: int) -> None:
        """``book`` with flows: each message becomes a record that every process (this one too)
        starts its flow from at its next run, in one order (``start_flows``); the envelope goes to
        its receiver's process now, and waits there for its flow to end."""
        p2p = self.p2p
        flows = self.flows
        assert flows is not None
        now = self.kernel.now
        instant = pack_time(now)
        lo, hi = self.lo, self.hi
        for b in items:
            record = FlowRecord(due=flows.joins(b, now), instant=now, phase=phase,
                                seq=len(self.flow_records), kind=b.kind, src=b.src, dst=b.dst,
                                msg_id=b.msg_id, nbytes=b.nbytes, time=b.time)
            self.flow_records.append(record)
            self.flow_mine.append((record, b))
            if not lo <= b.dst < hi:
                b.meta = instant
                p2p.transport.send(b.envelope())

    def take_flow_records(self) -> list[FlowRecord]:
        """The flow records of this run, for the other processes (``Report.faults``)."""
        records = self.flow_records if self.flows is not None else []
        self.flow_records = []
        return records

    def start_flows(self, records: list[FlowRecord]) -> None:
        """Start the flows of the last round's records, this process's and the others', in the order
        every process starts them in: by instant, eager messages and requests to send before
        rendezvous data, by source, then in the order their process posted them."""
        flows = self.flows
        if flows is None or not (records or self.flow_mine):
            return
        mine = {id(record): booking for record, booking in self.flow_mine}
        every = records + [record for record, _ in self.flow_mine]
        self.flow_mine = []
        every.sort(key=FlowRecord.order)
        for record in every:
            booking = mine.get(id(record))
            if booking is None:  # another process's message: its bytes reach here, if ever, by itself
                booking = Booking(kind=record.kind, ctx=0, src=record.src, dst=record.dst, tag=0,
                                  msg_id=record.msg_id, nbytes=record.nbytes, time=record.time,
                                  header=b"", buffers=(), sync=False, serial=0)
            flows.start(booking, record.instant)
        flows.settle()

    def _flow_ended(self, env: Envelope) -> None:
        """A flow ended (its channel's earlier ones too): its message reaches a rank here, or the
        rendezvous send here of data to another process completes."""
        lo, hi = self.lo, self.hi
        kind, src, now = env.kind, env.src, self.kernel.now
        if lo <= env.dst < hi:
            if not lo <= src < hi:
                env = retimed(self.flow_held.pop((kind, src, env.msg_id)), now)
            self.enter(env)
        elif kind == DATA and lo <= src < hi:
            req = self.p2p.handshakes.acknowledge((src, env.msg_id))
            if req is not None:
                self.kernel.schedule(now, finish_request, req)

    def land(self) -> None:
        """Charge the receive side of the envelopes sent to this process before this STEP.

        Those charged at an earlier instant than ``now``, and those that arrive
        at ``now`` (nothing to wait for); the others of this instant wait for a
        STEP at a later time, so that all of one instant's are charged together
        whichever round sent them (a synchronous send's ACK, a CTS, may wake a
        sender in a later round at the same time), with those behind them on
        their channels. Each receive port takes them in the memory transport's
        order (``LocalDelivery.charge``): by instant, eager before rendezvous
        data, then by wire time and source rank, then in the order the source
        sent them (its posting order: stable sorts keep it); then they enter
        their channels in each source's posting order (an ACK tells a remote
        rendezvous sender that its data landed).
        """
        landing = self.landing
        if not landing:
            return
        now = self.kernel.now
        landing.sort(key=_posting_order)
        ready: list[Landing] = []
        held: list[Landing] = []
        waiting: set[tuple[int, int]] = set()  # channels with an envelope held: the rest wait too
        for item in landing:
            env = item.env
            pair = (env.src, env.dst)
            if (item.instant < now or env.time <= now) and pair not in waiting:
                ready.append(item)
            else:
                held.append(item)
                waiting.add(pair)
        self.landing = held
        if not ready:
            return
        recv_side = self.inner_ports.recv_side
        arrivals = {}
        for item in sorted(ready, key=_landing_order):
            env = item.env
            if env.kind != RTS:
                arrivals[id(env)] = recv_side(env.src, env.dst, env.nbytes, env.time)
        lo, hi = self.lo, self.hi
        transport = self.p2p.transport
        for instant, _, env in ready:
            kind = env.kind
            if kind != RTS:
                arrive = arrivals[id(env)]
                if kind == DATA and arrive < instant:  # never before its match (_protocol Rule 5)
                    arrive = instant
                if kind == DATA and not lo <= env.src < hi:
                    transport.send(Envelope(ACK, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                            0, arrive))
                env = retimed(env, arrive)
            self.enter(env)

    def next_time(self) -> float | None:
        """The earliest local event, or envelope waiting for its receive side (held rendezvous
        transfers are the coordinator's to close: ``held`` in the REPORT).

        An envelope due by ``now`` that waits behind a later one on its channel
        (an RTS behind eager messages) lands with that one: it does not count.
        """
        kernel = self.kernel
        now = kernel.now
        t = now if kernel.runnable() or self.p2p.bookings else kernel.next_later()
        waiting: set[tuple[int, int]] = set()
        for _, _, env in sorted(self.landing, key=_posting_order):
            pair = (env.src, env.dst)
            if env.time > now:
                waiting.add(pair)
            elif pair in waiting:
                continue
            if t is None or env.time < t:
                t = env.time
        return t

    def open_handshakes(self) -> int:
        """Rendezvous and synchronous sends from here to other processes that have not finished.

        Their handshakes (a clear to send, an acknowledgement) reach the other
        side with no delay, so the coordinator runs no window while any is
        under way. Counted only where windows can happen (a lookahead).
        """
        p2p = self.p2p
        if p2p.rts_delay <= 0:
            return 0
        return p2p.handshakes.open_to_others(self.lo, self.hi)


class HostedEngine(Engine):
    """The engine of a process hosting world ranks ``[lo, hi)``: made with ``HostedDelivery``.

    Adds ``phase``, the bounded run of one STEP, and makes each
    communicator's collective verification one whose signatures also travel
    to the other processes.
    """

    def __init__(self, world_size: int, transport: TcpTransport, ports: Ports, lo: int, hi: int,
                 per: int | None, settings: EngineSettings, trace: Trace | None = None) -> None:
        self.lo = lo
        self.hi = hi
        self.per = per or hi - lo  # world ranks per process
        self.coll_firsts: list[SignatureRecord] = []  # first signatures seen here, for the next REPORT
        self.coll_pending: dict[int, list[SignatureRecord]] = {}  # for communicators not made here yet
        self.delivery = HostedDelivery(lo, hi, ports)
        self.transport = transport
        super().__init__(world_size, transport, _SplitPorts(ports, lo, hi), settings, trace,
                         self.delivery)

    def call_check(self, ctx: int, world_ranks: list[int]) -> CallCheck:
        """The collective verification of a new communicator, whose members may live elsewhere."""
        lo, hi, per = self.lo, self.hi, self.per
        procs = sorted({w // per for w in world_ranks})
        check = HostedCallCheck(ctx, sum(1 for w in world_ranks if lo <= w < hi),
                                procs if len(procs) < -(-self.world_size // per) else None,
                                self.coll_firsts)
        for record in self.coll_pending.pop(ctx, ()):  # another process's members entered first
            check.take_first(record)
        return check

    def new_failures(self, crashes: list[Crash]) -> Failures:
        """The ``Failures`` of the ranks here: their planned crashes, and an outbox for the records
        the other processes apply (``Report.faults``)."""
        from ..engine.failures import Failures as _Failures

        lo, hi = self.lo, self.hi
        return _Failures(self.kernel, self.p2p, [c for c in crashes if lo <= c.rank < hi], [],
                         meetings=self.meetings)

    # ---- one round ----

    async def phase(self, now: float, counts: list[int], firsts: list[SignatureRecord],
                    payloads: list[SignatureRecord], close: bool = False,
                    until: float | None = None,
                    faults: list[Record] | None = None) -> _control.Report:
        """Run one STEP at virtual time ``now`` (``hosting.control.Step``'s fields) and return its Report.

        Completes when every local event up to ``until`` (``now`` in
        lockstep) has run, including those the delivered envelopes caused,
        and the streams are flushed. ``firsts``: first signatures of
        collective calls that members elsewhere entered; ``payloads``: those
        of calls this process reported with broadcast placeholders only, where
        another process saw an array; ``close``: the instant ``now`` is over,
        so charge its rendezvous transfers (Rule 2); ``faults``: the other
        processes' fault records (``engine.failures``). In a window (``until``
        given) no other process can add to an instant here, so each instant's
        rendezvous transfers are charged as it ends, as in one process.
        """
        kernel, delivery, groups = self.kernel, self.delivery, self.p2p.groups
        kernel.now = now
        for record in firsts:  # before any step: a member entering now is compared with them
            group = groups.get(record.ctx)
            if group is None:
                self.coll_pending.setdefault(record.ctx, []).append(record)
            else:
                _hosted_check(group.check).take_first(record)
        for record in payloads:
            _hosted_check(groups[record.ctx].check).take_first(record, reported=True)
        flows = [record for record in faults if isinstance(record, FlowRecord)] if faults else []
        if len(flows) < len(faults or ()):
            self.failures().apply([record for record in faults or () if not isinstance(record, FlowRecord)])
        await self.transport.receive(counts)
        delivery.start_flows(flows)
        delivery.land()
        delivery.closing = close or until is not None
        try:
            await _running.run_until(kernel, now if until is None else until)
        finally:
            delivery.closing = False
        await self.transport.flush()
        counts_sent, earliest = self.transport.take_counts()
        failure = None
        if kernel.failure is not None:
            task, exc = kernel.failure
            failure = _control.Failure(task.rank, _remote.encode_exception(exc))
        seen = list(self.coll_firsts)
        self.coll_firsts.clear()  # the communicators hold this very list
        failures = self.p2p.failures
        told: list[Record] = [] if failures is None else failures.take_records()
        told += delivery.take_flow_records()
        return _control.Report(kernel.now, counts_sent, earliest, kernel.unfinished,
                               delivery.next_time() if failure is None else None,
                               failure, seen, bool(self.p2p.rdv_bookings), delivery.open_handshakes(),
                               told)

    def blocked_split(self) -> _control.Blocked:
        """The BLOCKED message: blocked ranks, then blocked helpers, as ``deadlock_error`` reads them,
        and the first lines about the handshakes under way here, with their count."""
        diagnostics = self.diagnostics
        handshakes = self.handshake_lines()
        return _control.Blocked(self.kernel.now, diagnostics.blocked_entries(self.kernel.tasks),
                                diagnostics.blocked_entries(self.kernel.helper_tasks()),
                                handshakes[:_control.HANDSHAKES_LISTED], len(handshakes))

    def timeout_lines(self) -> list[str]:
        """The per-rank lines of the timeout report."""
        return self.diagnostics.timeout_lines()


def _hosted_check(check: CallCheck) -> HostedCallCheck:
    assert isinstance(check, HostedCallCheck)  # call_check made every communicator's here
    return check


def _landing_order(item: Landing) -> tuple[float, int, float, int]:
    """The order a receive port takes envelopes in (``HostedDelivery.land``; sorts are stable)."""
    env = item.env
    return item.instant, item.phase, env.time, env.src


def _posting_order(item: Landing) -> tuple[float, int, int]:
    """The order envelopes enter their channels in: each source's in the order it sent them."""
    return item.instant, item.phase, item.env.src


