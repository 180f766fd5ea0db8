"""The engine of one hosting process: world ranks ``[lo, hi)`` local, the rest behind the transport.

``HostedEngine`` overrides only what differs from the in-process engine:
where envelopes go, when the receive side of a port is charged (at the
coordinator's STEP, in the memory transport's order) and how a STEP's events
run. The protocol it follows is described in ``_hosting``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from simcluster.transports.base import ACK, DATA, EAGER, RTS, Envelope, retimed
from simcluster.transports.tcp import TcpTransport

from . import _control, _remote
from ._coll_check import CallCheck, HostedCallCheck, SignatureRecord
from ._diagnostics import Diagnostics, collective_info
from ._kernel import BLOCKED as _PARKED
from ._kernel import Task, _finish_request
from ._protocol import Booking, _by_source_and_id, _serial, sort_by_source, pack_time, transfer_start, unpack_time
from .engine import Engine
from ._hosted_views import SplitPorts as _SplitPorts
from ._settings import EngineSettings
from .latency import Ports
from .trace import Trace
from .request import Request


# ---- the engine of one hosting process ----


class HostedEngine(Engine):
    """An engine that hosts world ranks ``[lo, hi)`` and exchanges the rest through its transport.

    The memory path is untouched: this subclass only overrides what differs
    when a peer lives in another process (delivery, rendezvous completion,
    communicators not yet created here) and adds ``phase``, the bounded
    variant of ``Engine._run_until_quiescent`` that one STEP runs.
    """

    def __init__(self, world_size: int, transport: TcpTransport, ports: Ports, lo: int, hi: int,
                 per: int | None, settings: EngineSettings, trace: Trace | None = None) -> None:
        self.lo = lo
        self.hi = hi
        self.per = per or hi - lo  # world ranks per process
        self.coll_firsts: list[SignatureRecord] = []  # first signatures seen here, for the next REPORT
        self.coll_pending: dict[int, list[SignatureRecord]] = {}  # for communicators not made here yet
        self._inner_ports = ports
        super().__init__(world_size, transport, _SplitPorts(ports, lo, hi), settings, trace)
        self.transport: TcpTransport = transport
        self._orphans: dict[int, list[Envelope]] = {}  # envelopes for communicators not made here yet
        self._data_waits: dict[tuple[int, int], Request[Any]] = {}  # rendezvous sends awaiting landing
        self._closing = False  # this STEP closes an instant, or is a window: charge rendezvous transfers
        # envelopes charged on their send side, waiting for their receive side (_land):
        # (instant they were charged at, 1 for rendezvous data else 0, envelope)
        self._landing: list[tuple[float, int, Envelope]] = []

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

    # ---- delivery of envelopes from other processes ----

    def _deliver(self, env: Envelope) -> None:
        src = env.src
        if self.lo <= src < self.hi:
            Engine._deliver(self, env)
            return
        kind = env.kind
        if self._book_later and (kind == EAGER or kind == RTS or kind == DATA):
            # sent by _book in an earlier round, at the instant its meta says: its receive side
            # is charged with the others (_land)
            self._landing.append((unpack_time(env.meta), int(kind == DATA), env))
            return
        if kind == EAGER or kind == DATA:
            if not self._zero_latency:  # Rule 2: the receive port is charged here
                arrive = self._inner_ports.recv_side(src, env.dst, env.nbytes, env.time)
                if kind == DATA:  # the sender's request completes when the data has landed
                    self.transport.send(Envelope(ACK, env.ctx, env.dst, src, env.tag, env.msg_id,
                                                 0, arrive))
                env = retimed(env, arrive)
        elif kind == ACK:
            req = self._data_waits.pop((env.dst, env.msg_id), None)
            if req is not None:
                self.schedule(env.time, _finish_request, req)
                return
        Engine._deliver(self, env)

    def _clear_to_send(self, env: Envelope) -> None:
        sender, receiver = env.dst, env.src
        if self._book_later:  # charged when the instant closes (_book)
            req, buffers, header, posted = self._rdv_sends.pop((sender, env.msg_id))
            start = transfer_start(posted, env)
            if self.lo <= receiver < self.hi:
                self._rdv_landing[(sender, env.msg_id)] = req  # Engine._data_arrived completes it
            else:
                self._data_waits[(sender, env.msg_id)] = req  # the receiver's ACK completes it
            self._rdv_bookings.append(Booking(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                              env.nbytes, start, header, buffers, False, b"",
                                              _serial(req)))
            return
        if self.lo <= receiver < self.hi:
            Engine._clear_to_send(self, env)
            return
        req, buffers, header, posted = self._rdv_sends.pop((sender, env.msg_id))
        nbytes = env.nbytes
        match_time = transfer_start(posted, env)
        wire_time = env.time if self._zero_latency else max(env.time, self.ports.transfer(
            sender, receiver, nbytes, match_time)[1])
        self.transport.send(Envelope(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                     nbytes, wire_time, header, buffers))
        if self._zero_latency:  # arrives at once; the transport copied the buffers in send()
            self.schedule(env.time, _finish_request, req)
        else:
            self._data_waits[(sender, env.msg_id)] = req

    def _data_arrived(self, env: Envelope) -> None:
        if self.lo <= env.src < self.hi:
            Engine._data_arrived(self, env)
            return
        req = self._rdv_recvs.pop((env.src, env.msg_id))
        self._complete_recv(req, env, copy=False)  # the transport's buffers are ours already

    # ---- charging ports across processes (Rule 2) ----

    def _book(self) -> bool:
        """Charge the send side of the messages this round posted; False when there are none.

        Called by the loop once no event is left at ``now``, as on the memory
        transport, but only the send side is charged here: envelopes to other
        processes leave now, those to local ranks wait with them for their
        receive side at the next STEP (``_land``). Rendezvous transfers wait
        for a STEP that closes the instant.
        """
        items = self._bookings
        phase = 0
        if items:
            self._bookings = []
            if len(items) > 1:
                sort_by_source(items, self.world_size)  # stable: each source's messages in posting order
        else:
            items = self._rdv_bookings
            if not items or not self._closing:
                return False
            self._rdv_bookings = []
            phase = 1
            if len(items) > 1:
                items.sort(key=_by_source_and_id)
        send_side = self._inner_ports.send_side
        now = self.now
        lo, hi = self.lo, self.hi
        instant = pack_time(now)
        for b in items:  # in posting order: receivers keep each source's order (_land)
            if b.kind != RTS:
                b.time = send_side(b.src, b.dst, b.nbytes, b.time)[1]
            if lo <= b.dst < hi:
                self._landing.append((now, phase, b.envelope()))
            else:
                b.meta = instant  # the receiver charges its side in the order of instants
                self.transport.send(b.envelope())
        return True

    def _land(self) -> None:
        """Charge the receive side of the envelopes sent to this process before this STEP.

        Those charged at an earlier instant than ``now``, and those that arrive
        at ``now`` (nothing to wait for); the others of this instant wait for a
        STEP at a later time, so that all of one instant's are charged together
        whichever round sent them (a synchronous send's ACK, a CTS, may wake a
        sender in a later round at the same time), with those behind them on
        their channels. Each receive port takes them in the memory transport's
        order (``Engine._charge``): by instant, eager before rendezvous data,
        then by wire time and source rank, then in the order the source sent
        them (its posting order: stable sorts keep it); then they enter their
        channels in each source's posting order (an ACK tells a remote
        rendezvous sender that its data landed).
        """
        landing = self._landing
        if not landing:
            return
        now = self.now
        landing.sort(key=_posting_order)
        ready: list[tuple[float, int, Envelope]] = []
        held: list[tuple[float, int, Envelope]] = []
        waiting: set[tuple[int, int]] = set()  # channels with an envelope held: the rest wait too
        for item in landing:
            env = item[2]
            pair = (env.src, env.dst)
            if (item[0] < now or env.time <= now) and pair not in waiting:
                ready.append(item)
            else:
                held.append(item)
                waiting.add(pair)
        self._landing = held
        if not ready:
            return
        recv_side = self._inner_ports.recv_side
        arrivals = {}
        for item in sorted(ready, key=_landing_order):
            env = item[2]
            if env.kind != RTS:
                arrivals[id(env)] = recv_side(env.src, env.dst, env.nbytes, env.time)
        lo, hi = self.lo, self.hi
        for instant, _, env in ready:
            kind = env.kind
            if kind != RTS:
                arrive = arrivals[id(env)]
                if kind == DATA and arrive < instant:  # never before its match (_protocol Rule 5)
                    arrive = instant
                if kind == DATA and not lo <= env.src < hi:
                    self.transport.send(Envelope(ACK, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                                 0, arrive))
                env = retimed(env, arrive)
            Engine._deliver(self, env)

    def _next_time(self) -> float | None:
        """The earliest local event, or envelope waiting for its receive side (held rendezvous
        transfers are the coordinator's to close: ``held`` in the REPORT).

        An envelope due by ``now`` that waits behind a later one on its channel
        (an RTS behind eager messages) lands with that one: it does not count.
        """
        if self._ready or self._due or self._bookings:
            t: float | None = self.now
        else:
            t = self._times[0] if self._times else None
        now = self.now
        waiting: set[tuple[int, int]] = set()
        for _, _, env in sorted(self._landing, key=_posting_order):
            pair = (env.src, env.dst)
            if env.time > now:
                waiting.add(pair)
            elif pair in waiting:
                continue
            if t is None or env.time < t:
                t = env.time
        return t

    # ---- communicators another process made first ----

    def _arrived(self, env: Envelope) -> None:
        ctx = env.ctx
        if ctx in self._orphans or ctx not in self.groups:
            self._orphans.setdefault(ctx, []).append(env)
            return
        Engine._arrived(self, env)

    def _adopt(self, ctx: int) -> None:
        """Match the envelopes that reached a communicator before this process made it."""
        envs = self._orphans.get(ctx)
        if envs is not None and ctx in self.groups:
            del self._orphans[ctx]
            for env in envs:
                Engine._arrived(self, env)

    def post_recv(self, comm: Any, buf: Any, src: int, tag: int, op: str, nonblocking: bool) -> Any:
        if self._orphans:
            self._adopt(comm._ctx)
        return super().post_recv(comm, buf, src, tag, op=op, nonblocking=nonblocking)

    def iprobe(self, comm: Any, src: int, tag: int) -> Any:
        if self._orphans:
            self._adopt(comm._ctx)
        return super().iprobe(comm, src, tag)

    def make_reports(self) -> Diagnostics:
        return _HostedDiagnostics(self)

    def orphan_envelopes(self) -> list[Envelope]:
        """Envelopes for communicators this process never created (the leak report names them)."""
        return [env for envs in self._orphans.values() for env in envs]

    # ---- one round ----

    def _run_until(self, limit: float) -> None:
        """Pop every event at time ``<= limit`` (the bounded twin of the main loop)."""
        self._run_events(limit, -1)  # a negative budget never runs out

    async def phase(self, now: float, counts: list[int], firsts: list[SignatureRecord],
                    payloads: list[SignatureRecord], close: bool = False,
                    until: float | None = None) -> _control.Report:
        """Run one STEP at virtual time ``now`` (``_control.Step``'s fields) and return its Report.

        Completes when every local event up to ``until`` (``now`` in
        lockstep) has run, including those the delivered envelopes caused,
        and the streams are flushed. ``firsts``: first signatures of
        collective calls that members elsewhere entered; ``payloads``: those
        of calls this process reported with broadcast placeholders only, where
        another process saw an array; ``close``: the instant ``now`` is over,
        so charge its rendezvous transfers (Rule 2). In a window (``until``
        given) no other process can add to an instant here, so each instant's
        rendezvous transfers are charged as it ends, as in one process.
        """
        self.now = now
        limit = now if until is None else until
        for record in firsts:  # before any step: a member entering now is compared with them
            group = self.groups.get(record.ctx)
            if group is None:
                self.coll_pending.setdefault(record.ctx, []).append(record)
            else:
                _hosted_check(group.check).take_first(record)
        for record in payloads:
            _hosted_check(self.groups[record.ctx].check).take_first(record, reported=True)
        await self.transport.receive(counts)
        self._land()
        self._closing = close or until is not None
        try:
            self._run_until(limit)
            while self._foreign and self._failure is None:  # a rank awaits real I/O: time waits
                if self._ready or self._due:
                    self._run_until(limit)
                    continue
                self._wake_future = asyncio.get_running_loop().create_future()
                try:
                    await self._wake_future
                finally:
                    self._wake_future = None
                self._run_until(limit)
        finally:
            self._closing = False
        await self.transport.flush()
        counts_sent, earliest = self.transport.take_counts()
        failure = None
        if self._failure is not None:
            task, exc = self._failure
            failure = _control.Failure(task.rank, _remote.encode_exception(exc))
        seen = list(self.coll_firsts)
        self.coll_firsts.clear()  # the communicators hold this very list
        return _control.Report(self.now, counts_sent, earliest, self._unfinished,
                               self._next_time() if failure is None else None,
                               failure, seen, bool(self._rdv_bookings), self._open())

    def _open(self) -> int:
        """Rendezvous and synchronous sends from here to other processes that have not finished.

        Their handshakes (a clear to send, an acknowledgement) reach the other
        side with no delay, so the coordinator runs no window while any is
        under way. Counted only where windows can happen (a lookahead).
        """
        if self._rts_delay <= 0:
            return 0
        lo, hi = self.lo, self.hi
        count = len(self._data_waits)
        for entry in self._rdv_sends.values():
            peer = entry[0]._peer
            if peer is not None and not lo <= peer < hi:
                count += 1
        for req in self._sync_sends.values():
            peer = req._peer
            if peer is not None and not lo <= peer < hi:
                count += 1
        return count

    def blocked_split(self) -> _control.Blocked:
        """The BLOCKED message: blocked ranks, then blocked helpers, as ``deadlock_error`` reads them."""
        diagnostics = self.diagnostics
        return _control.Blocked(self.now, diagnostics.blocked_entries(self.tasks),
                                diagnostics.blocked_entries(self.helper_tasks()))

    def timeout_lines(self) -> list[str]:
        """The per-rank lines of the timeout report."""
        return self.diagnostics.timeout_lines()


class _HostedDiagnostics(Diagnostics):
    """The reports of one hosting process: its leaks include messages for communicators never made here."""

    def __init__(self, engine: HostedEngine) -> None:
        super().__init__(engine)
        self.hosted = engine

    def leaks(self) -> list[str]:
        lines = super().leaks()
        for env in self.hosted.orphan_envelopes():
            lines.append(f"rank {env.dst}: a message from world rank {env.src} (tag={env.tag}, "
                         f"{env.nbytes} bytes) on a communicator this rank never created was "
                         "never received")
        return lines


def _hosted_check(check: CallCheck) -> HostedCallCheck:
    assert isinstance(check, HostedCallCheck)  # call_check made every communicator's here
    return check


def _landing_order(item: tuple[float, int, Envelope]) -> tuple[float, int, float, int]:
    """The order a receive port takes envelopes in (``HostedEngine._land``; sorts are stable)."""
    env = item[2]
    return item[0], item[1], env.time, env.src


def _posting_order(item: tuple[float, int, Envelope]) -> tuple[float, int, int]:
    """The order envelopes enter their channels in: each source's in the order it sent them."""
    return item[0], item[1], item[2].src


