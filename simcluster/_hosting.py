"""Hosting a block of ranks in one OS process, stepped in lockstep by the coordinator.

A run on the shm or tcp transport has one coordinator (the caller's process,
``_coordinator``) and ``procs`` hosting processes. Process ``p`` hosts the
world ranks ``[p*per, (p+1)*per)`` as coroutines of its own ``HostedEngine``
(an ``Engine`` that knows which ranks are local); envelopes to other
processes leave through the transport, and envelopes from them are handed to
the engine only when the coordinator says so.

Time advances in rounds (conservative synchronisation). The coordinator sends
``STEP(T, counts, firsts)``: ``counts[q]`` is how many envelopes process ``q``
has sent to this one so far. The process waits until exactly those have
arrived, delivers the new ones sorted by source rank, runs every local event
at time ``<= T`` (all of them are at ``T``), flushes its streams and reports
``REPORT(sent per process, earliest time among them, next local event time,
unfinished ranks, failure, firsts)``. The coordinator's next ``T`` is the earliest of
every process's next event and every envelope still in flight; envelopes are
stamped at or after their sender's ``T``, so nothing arrives in a process's
past. When no process has an event and nothing is in flight, the run is over,
or deadlocked if a rank is unfinished.

Collective verification across processes. A member entering a collective is
compared at the call with the first member of its communicator that entered
the same call (``comm.Comm._collective``), but only among members this process
knows of. Each REPORT carries ``firsts``: the signatures of calls that a member
here entered first (``comm._record``). The coordinator compares those of one
round across processes (``comm.merge_firsts``: a difference ends the run with
the same CollectiveMismatchError a member compared at its call raises) and
hands each call's first signature to the other processes with their next STEP,
before they deliver anything or run a step, so a member that enters later is
compared at its call. Envelopes sent in a round are delivered no earlier than
the next STEP: no message of a call whose members differ meets another's.

Rule 1: a process delivers exactly the envelopes the coordinator counted, in
source-rank order, so a run's schedule does not depend on which socket the
OS served first: the same seed and ``procs`` give the same run.
Rule 2: each process keeps only its own ranks' port timers. Once a round's
events are done, the sender charges the send port (``Ports.send_side``) of
every message its ranks posted in the round, in posting order, and stamps the
envelope; at its next STEP the receiver charges its receive port
(``Ports.recv_side``) for every message sent to it in earlier rounds, local
ones included, in the memory transport's order (instant, wire time, source rank,
posting order), and tells a rendezvous sender when the data landed (an ACK).
Envelopes of the current instant wait for a STEP at a later time (unless they
arrive at once), so those of one instant are charged together even when a
synchronous send's ACK woke their sender in a later round.
Rendezvous transfers are charged only in a STEP that closes their instant
(``close``: the coordinator sends one when nothing is left at that time and a
process reported ``held`` transfers), so all of one instant's are charged
together, in whichever round their CTS came. So times equal the memory
transport's, whatever the seed, for programs that leave no order open.

The control channel is a stream of frames like any link (``transports.tcp``):
each control message is an Envelope whose ``tag`` is the opcode and whose
payload is packed with ``transports.wire``; nothing on it is pickled.

The end of a run. After FINISH every rank has finished and nothing is in
flight, so a peer link that closes from then on is no error: each process
closes its links as soon as it is done. A local hosting process ends when
the coordinator closes the control link after RESULTS. A node process (one
per host, ``nnodes > 1``) ends on FINAL, the whole run's result: it answers
BYE, and node 0 closes the control links only once every node has said BYE
(or gone away), so no node ever sees the close before the result. A control
link that closes before FINAL or STOP means node 0 went away, and the node
says so (``Host.ended``); it never blames an error that does not exist.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from simcluster.transports import wire
from simcluster.transports.base import ACK, DATA, EAGER, RTS, Envelope, TransportError
from simcluster.transports.tcp import Link, TcpTransport, open_link

from . import _remote
from . import arrays as _arrays
from .comm import Group, take_first
from .engine import BLOCKED as _PARKED
from .engine import (Engine, Task, _by_source, _by_source_and_id, _finish_request, _info, _new_tuple,
                     _serial)
from .latency import Ports
from .request import Request
from .trace import Trace

if TYPE_CHECKING:
    from .latency import LatencyModel

# ---- the control protocol: opcodes travel in Envelope.tag ----

# coordinator -> hosting process
START: Final = 1  # {"table": [[host, port], ...]}: connect to your peers
STEP: Final = 2  # time=T, payload counts: deliver, run everything at T, REPORT
DESCRIBE: Final = 3  # the run is deadlocked: answer BLOCKED
FINISH: Final = 4  # every rank finished: answer RESULTS
STOP: Final = 5  # the run is over (failed elsewhere): close everything and exit
TIMEOUT: Final = 6  # the run timed out: answer LINES
FINAL: Final = 7  # multi-node: the whole run's result, for node processes to return; answer BYE
# hosting process -> coordinator
HELLO: Final = 10  # {"pid", "addr", "digest"}
READY: Final = 11  # peers connected, ranks started
REPORT: Final = 12  # the end of a STEP
BLOCKED: Final = 13  # {"tasks": [...], "helpers": [...]}
RESULTS: Final = 14  # {"values", "times", "stats", "leaks", "trace"}
ERROR: Final = 15  # {"exc": encoded exception, "transport": bool}
LINES: Final = 16  # timeout report lines
BYE: Final = 17  # FINAL arrived: the coordinator may close the control link now

OP_NAMES: Final = {
    START: "START", STEP: "STEP", DESCRIBE: "DESCRIBE", FINISH: "FINISH", STOP: "STOP",
    TIMEOUT: "TIMEOUT", FINAL: "FINAL", HELLO: "HELLO", READY: "READY", REPORT: "REPORT",
    BLOCKED: "BLOCKED", RESULTS: "RESULTS", ERROR: "ERROR", LINES: "LINES", BYE: "BYE",
}


def control(op: int, proc: int, payload: object = None, time: float = 0.0,
            dumps: Callable[[object], bytes] | None = None) -> Envelope:
    """Build a control message as an envelope (its payload packed by ``wire``)."""
    packed = wire.pack(payload, copy=False, dumps=dumps, arrays=_arrays.STAGED)
    return Envelope(EAGER, 0, proc, -1, op, 0, 0, float(time), packed.header, packed.buffers)


def payload_of(envelope: Envelope, loads: Callable[[bytes], object] | None = None) -> Any:
    """Return the payload of a control message."""
    return wire.unpack(envelope.header, envelope.buffers, loads=loads, arrays=_arrays.STAGED)


def split(world_size: int, procs: int) -> tuple[int, int]:
    """Return ``(processes used, ranks per process)``: contiguous blocks of ``ceil(W/procs)``.

    Fewer processes are used when the last ones would be empty (7 ranks on 4
    processes: 2, 2, 2, 1; 5 ranks on 4: 2, 2, 1 on 3 processes).
    """
    per = -(-world_size // procs)
    return -(-world_size // per), per


@dataclass
class RunSpec:
    """Everything a hosting process needs besides the rank function (picklable)."""

    world_size: int
    procs: int
    per: int
    transport: TcpTransport
    latency: LatencyModel
    seed: int = 0
    eager_limit: int = 65536
    strict: bool = True
    trace: bool = False
    algorithms: dict[str, str] = field(default_factory=dict)
    serializer: str = "msgpack"
    name: str = "main"
    schedule: str = "batch"  # run(schedule=...): "batch" or "shuffle" (each process's own batches)

    def digest(self) -> str:
        """A text all nodes of a multi-node run must agree on."""
        return (f"{self.name} world_size={self.world_size} procs={self.procs} "
                f"transport={self.transport.name} latency={self.latency.describe()} "
                f"seed={self.seed} eager_limit={self.eager_limit} strict={self.strict} "
                f"trace={self.trace} algorithms={sorted(self.algorithms.items())} "
                f"serializer={self.serializer} schedule={self.schedule}")


# ---- the engine of one hosting process ----


class _SplitPorts(Ports):
    """The run's ports as one process sees them: whole charges for local receivers,
    the send side only for remote ones (their process charges the receive side)."""

    __slots__ = ("inner", "zero", "ordered", "_lo", "_hi")

    def __init__(self, inner: Ports, lo: int, hi: int) -> None:
        self.inner = inner
        self.zero = inner.zero
        self.ordered = bool(getattr(inner, "ordered", True))
        self._lo = lo
        self._hi = hi

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        if self._lo <= dst < self._hi:
            return self.inner.transfer(src, dst, nbytes, t)
        return self.inner.send_side(src, dst, nbytes, t)


class _HostTrace(Trace):
    """A trace that also keeps receives of messages sent from other processes."""

    def __init__(self, world_size: int) -> None:
        super().__init__(world_size)
        self.receipts: list[list[Any]] = []

    def received(self, src: int, msg_id: int, now: float) -> None:
        if (src, msg_id) in self._open:
            super().received(src, msg_id, now)
        else:
            self.receipts.append([src, msg_id, now])


class HostedEngine(Engine):
    """An engine that hosts world ranks ``[lo, hi)`` and exchanges the rest through its transport.

    The memory path is untouched: this subclass only overrides what differs
    when a peer lives in another process (delivery, rendezvous completion,
    communicators not yet created here) and adds ``phase``, the bounded
    variant of ``Engine._run_until_quiescent`` that one STEP runs.
    """

    def __init__(self, world_size: int, transport: TcpTransport, ports: Ports, lo: int, hi: int,
                 per: int | None = None, **keywords: Any) -> None:
        self.lo = lo
        self.hi = hi
        # which world ranks are hosted here, and how many per process (comm.Group.here, .procs)
        self.hosted = (lo, hi, per or hi - lo)
        self.coll_firsts: list[list[Any]] = []  # first signatures seen here, for the next REPORT
        self.coll_pending: dict[int, list[list[Any]]] = {}  # for communicators not made here yet
        self._inner_ports = ports
        super().__init__(world_size, transport, _SplitPorts(ports, lo, hi), **keywords)
        self.transport: TcpTransport = transport
        self._orphans: dict[int, list[Envelope]] = {}  # envelopes for communicators not made here yet
        self._data_waits: dict[tuple[int, int], Request[Any]] = {}  # rendezvous sends awaiting landing
        self._sent_at = 0.0  # the time of the coordinator's previous round
        self._closing = False  # this STEP closes an instant: charge its rendezvous transfers
        # envelopes charged on their send side, waiting for their receive side (_land):
        # (instant they were charged at, 1 for rendezvous data else 0, envelope)
        self._landing: list[tuple[float, int, Envelope]] = []

    # ---- delivery of envelopes from other processes ----

    def _deliver(self, env: Envelope) -> None:
        src = env.src
        if self.lo <= src < self.hi:
            Engine._deliver(self, env)
            return
        kind = env.kind
        if self._book_later and (kind == EAGER or kind == RTS or kind == DATA):
            # sent in the previous round: its receive side is charged with the others (_land)
            self._landing.append((self._sent_at, int(kind == DATA), env))
            return
        if kind == EAGER or kind == DATA:
            if not self._zero_latency:  # Rule 2: the receive port is charged here
                arrive = self._inner_ports.recv_side(src, env.dst, env.nbytes, env.time)
                if kind == DATA:  # the sender's request completes when the data has landed
                    self.transport.send(Envelope(ACK, env.ctx, env.dst, src, env.tag, env.msg_id,
                                                 0, arrive))
                env = env._replace(time=arrive)
        elif kind == ACK:
            req = self._data_waits.pop((env.dst, env.msg_id), None)
            if req is not None:
                self._push(env.time, _finish_request, req)
                return
        Engine._deliver(self, env)

    def _clear_to_send(self, env: Envelope) -> None:
        sender, receiver = env.dst, env.src
        if self._book_later:  # charged when the instant closes (_book)
            req, buffers, header = self._rdv_sends.pop((sender, env.msg_id))
            if self.lo <= receiver < self.hi:
                self._rdv_landing[(sender, env.msg_id)] = req  # Engine._data_arrived completes it
            else:
                self._data_waits[(sender, env.msg_id)] = req  # the receiver's ACK completes it
            self._rdv_bookings.append([DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                       env.nbytes, env.time, header, buffers, False, b"", _serial(req)])
            return
        if self.lo <= receiver < self.hi:
            Engine._clear_to_send(self, env)
            return
        req, buffers, header = self._rdv_sends.pop((sender, env.msg_id))
        nbytes = env.nbytes
        match_time = env.time
        wire_time = match_time if self._zero_latency else self.ports.transfer(
            sender, receiver, nbytes, match_time)[1]
        self.transport.send(Envelope(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                     nbytes, wire_time, header, buffers))
        if self._zero_latency:  # arrives at once; the transport copied the buffers in send()
            self._push(match_time, _finish_request, req)
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
                items.sort(key=_by_source)  # stable: each source's messages in posting order
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
        for fields in items:  # in posting order: receivers keep each source's order (_land)
            if fields[0] != RTS:
                fields[7] = send_side(fields[2], fields[3], fields[6], fields[7])[1]
            fields.pop()  # the task's serial
            env = _new_tuple(Envelope, fields)
            if lo <= fields[3] < hi:
                self._landing.append((now, phase, env))
            else:
                self.transport.send(env)
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
        for _, _, env in ready:
            kind = env.kind
            if kind != RTS:
                arrive = arrivals[id(env)]
                if kind == DATA and not lo <= env.src < hi:
                    self.transport.send(Envelope(ACK, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                                 0, arrive))
                env = env._replace(time=arrive)
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

    def post_recv(self, comm: Any, buf: Any, src: int, tag: int, **keywords: Any) -> Any:
        if self._orphans:
            self._adopt(comm._ctx)
        return super().post_recv(comm, buf, src, tag, **keywords)

    def iprobe(self, comm: Any, src: int, tag: int) -> Any:
        if self._orphans:
            self._adopt(comm._ctx)
        return super().iprobe(comm, src, tag)

    def leaks(self) -> list[str]:
        lines = super().leaks()
        for envs in self._orphans.values():
            for env in envs:
                lines.append(f"rank {env.dst}: a message from world rank {env.src} (tag={env.tag}, "
                             f"{env.nbytes} bytes) on a communicator this rank never created was "
                             "never received")
        return lines

    # ---- one round ----

    def _run_until(self, limit: float) -> None:
        """Pop every event at time ``<= limit`` (the bounded twin of the main loop)."""
        self._run_events(limit, -1)  # a negative budget never runs out

    async def phase(self, now: float, counts: list[int], firsts: list[list[Any]],
                    payloads: list[list[Any]], sent: float = 0.0, close: bool = False) -> dict[str, Any]:
        """Run one STEP at virtual time ``now`` and return the REPORT payload.

        Completes when every local event at ``now`` has run (including those
        the delivered envelopes caused) and the streams are flushed. ``firsts``:
        first signatures of collective calls that members elsewhere entered;
        ``payloads``: those of calls this process reported with broadcast
        placeholders only, where another process saw an array. ``sent``: the
        time of the coordinator's previous round, when the envelopes delivered
        now were sent; ``close``: the instant ``now`` is over, so charge its
        rendezvous transfers (Rule 2).
        """
        self.now = now
        self._sent_at = sent
        for record in firsts:  # before any step: a member entering now is compared with them
            group = self.groups.get(record[0])
            if group is None:
                self.coll_pending.setdefault(record[0], []).append(record)
            else:
                take_first(group, record)
        for record in payloads:
            take_first(self.groups[record[0]], record, reported=True)
        await self.transport.receive(counts)
        self._land()
        self._closing = close
        try:
            self._run_until(now)
            while self._foreign and self._failure is None:  # a rank awaits real I/O: time waits
                if self._ready or self._due:
                    self._run_until(now)
                    continue
                self._wake_future = asyncio.get_running_loop().create_future()
                try:
                    await self._wake_future
                finally:
                    self._wake_future = None
                self._run_until(now)
        finally:
            self._closing = False
        await self.transport.flush()
        sent, earliest = self.transport.take_counts()
        failure = None
        if self._failure is not None:
            task, exc = self._failure
            failure = {"rank": task.rank, "exc": _remote.encode_exception(exc)}
        seen = list(self.coll_firsts)
        self.coll_firsts.clear()  # the communicators hold this very list
        return {"sent": sent, "min": earliest, "unfinished": self._unfinished,
                "next": self._next_time() if failure is None else None,
                "failure": failure, "firsts": seen, "held": bool(self._rdv_bookings)}

    def blocked_split(self) -> dict[str, list[Any]]:
        """The BLOCKED payload: blocked ranks, then blocked helpers, as ``deadlock_error`` reads them."""
        def entries(tasks: list[Task]) -> list[Any]:
            out = []
            for task in tasks:
                if task.state == _PARKED:
                    line, peers = self._describe(task)
                    out.append([task.rank, line, peers, _info(task)])
            return out
        return {"tasks": entries(self.tasks), "helpers": entries(list(self._helpers.values()))}

    def timeout_lines(self) -> list[str]:
        """The per-rank lines of the timeout report."""
        return self._timeout_report().splitlines()[1:-1]


# ---- serving one block of ranks ----


class _Stopped(Exception):
    """The coordinator said STOP (``error`` is why, for node processes), or went away."""

    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__()
        self.error = error


Load = Callable[[], tuple[RunSpec, Any, Any, Any]]
"""Returns (spec, rank function, args, kwargs); called once the control link is up."""


class Host:
    """One hosting process's side of the run: control link, transport, engine."""

    def __init__(self, transport: TcpTransport, proc: int, secret: bytes, run_id: str) -> None:
        self.proc = proc
        self.secret = secret
        self.run_id = run_id
        self.transport = transport
        self.spec: RunSpec | None = None
        self.lo = self.hi = 0
        self.ctrl: Link | None = None
        self.queue: asyncio.Queue[Envelope | None] = asyncio.Queue()
        self.main: asyncio.Task[Any] | None = None
        self.inner: asyncio.Task[Any] | None = None  # the hosting work (``_serve``), cancellable
        self.engine: HostedEngine | None = None
        self.tasks: list[Task] = []
        self.failed: BaseException | None = None
        self.stop_error: BaseException | None = None
        self.finishing = False  # FINISH came: peers may close their links from now on
        self.ended: str | None = None
        """How the control link ended: "final" (the result came), "stop" (STOP came), or
        "lost" (it closed, or broke, before either)."""
        self.dumps: Callable[[object], bytes] | None = None
        self.loads: Callable[[bytes], object] | None = None

    def _configure(self, spec: RunSpec) -> None:
        self.spec = spec
        self.lo = self.proc * spec.per
        self.hi = min(spec.world_size, self.lo + spec.per)
        if spec.serializer == "pickle":
            self.dumps, self.loads = pickle.dumps, pickle.loads

    def send(self, op: int, payload: object = None, time: float = 0.0) -> None:
        if self.ctrl is not None and not self.ctrl.closing:
            self.ctrl.send(control(op, self.proc, payload, time, self.dumps))

    def link_failed(self, exc: BaseException) -> None:
        """A peer link broke: tell the coordinator, then stop (after FINISH: nothing to do)."""
        if self.finishing:  # every rank is done and nothing is in flight: the peer is done too
            return
        if self.failed is None:
            self.failed = exc
            self.send(ERROR, {"exc": _remote.encode_exception(exc), "transport": True})
            self._interrupt()

    def _interrupt(self) -> None:
        """Stop the hosting work wherever it waits (``serve`` then says why)."""
        if self.inner is not None and not self.inner.done():
            self.inner.cancel()

    async def _pump_control(self) -> None:
        assert self.ctrl is not None

        def got(env: Envelope) -> None:
            if env.tag == STOP:
                payload = payload_of(env)
                if isinstance(payload, dict) and isinstance(payload.get("exc"), dict):
                    self.stop_error = _remote.decode_exception(payload["exc"], "coordinator")
                self.ended = "stop"
                raise _Stopped()
            if env.tag == FINAL:
                self.ended = "final"
            self.queue.put_nowait(env)

        try:
            await self.ctrl.pump(got)
        except asyncio.CancelledError:
            raise
        except BaseException:
            pass
        if self.ended is None:
            self.ended = "lost"
        self.queue.put_nowait(None)  # after every message that came before the close
        if self.ended != "final":  # with FINAL queued, the hosting work ends by itself
            self._interrupt()

    async def _next(self) -> Envelope:
        env = await self.queue.get()
        if env is None:
            raise _Stopped()
        return env

    async def serve(self, address: tuple[str, int], load: Load,
                    listen_host: str | None = None) -> Any:
        """Connect, host the ranks until the coordinator is done with us; return FINAL's payload.

        Returns None when the run did not finish here: the coordinator stopped
        it (its error, if it sent one, is in ``stop_error``), this process
        failed (``failed``), or the control link closed first (``ended``).
        """
        self.main = main = asyncio.current_task()
        assert main is not None
        tp = self.transport
        try:
            self.ctrl = await open_link(address[0], address[1], self.secret, peer="coordinator",
                                        max_frame=tp.max_frame, timeout=tp.connect_timeout)
            pump = asyncio.ensure_future(self._pump_control())
            self.inner = asyncio.ensure_future(self._serve(load, listen_host))
            try:
                return await self.inner
            except asyncio.CancelledError:
                if main.cancelling():  # serve itself was cancelled, not just the hosting work
                    raise
                if self.failed is not None and self.ended is None:
                    await self._linger()  # a broken peer link: the coordinator's STOP says why
                return None
            finally:
                pump.cancel()
        except (asyncio.CancelledError, _Stopped):
            return None
        finally:
            if self.engine is not None:
                self.engine.close()
            tp.close()
            if self.ctrl is not None:
                self.ctrl.close()

    async def _serve(self, load: Load, listen_host: str | None) -> Any:
        tp = self.transport
        try:
            spec, fn, args, kwargs = load()
            self._configure(spec)
            tp.bind(self.proc, spec.per, spec.procs, self.secret, self.run_id, self.link_failed)
            if listen_host is not None:
                tp.host = listen_host
            addr = await tp.listen()
            self.send(HELLO, {"pid": os.getpid(), "addr": list(addr), "digest": spec.digest()})
            start = await self._next()
            table = [(str(h), int(p)) for h, p in payload_of(start)["table"]]
            await tp.connect(table)
            self._start(fn, args, kwargs)
            self.send(READY)
            return await self._loop()
        except (asyncio.CancelledError, _Stopped):
            raise
        except Exception as exc:
            if self.failed is None:  # (a broken link has reported itself already)
                self.failed = exc
                self.send(ERROR, {"exc": _remote.encode_exception(exc),
                                  "transport": isinstance(exc, TransportError)})
            await self._linger()
            return None

    async def _linger(self) -> None:
        """Give the coordinator a moment to read our last words and answer STOP."""
        try:
            await asyncio.wait_for(self._until_stopped(), 2.0)
        except (asyncio.TimeoutError, _Stopped, OSError):
            pass

    async def _until_stopped(self) -> None:
        assert self.ctrl is not None
        await self.ctrl.drain()
        while True:
            await self._next()  # raises _Stopped at STOP, or when the control link closes

    def _start(self, fn: Any, args: Any, kwargs: Any) -> None:
        from .runner import _model_rng

        spec = self.spec
        assert spec is not None
        w = spec.world_size
        engine = self.engine = HostedEngine(
            w, self.transport, spec.latency.bind(w, _model_rng(spec.seed)), self.lo, self.hi, spec.per,
            seed=spec.seed, eager_limit=spec.eager_limit, strict=spec.strict, model=spec.latency,
            schedule=spec.schedule)
        engine.algorithms = dict(spec.algorithms)
        engine._dumps = self.dumps
        engine._loads = self.loads
        if spec.trace:
            engine.trace = _HostTrace(w)
        tasks: list[Any] = [None] * w
        world = Group(engine, 0, list(range(w)), "world", tasks)
        for rank in range(self.lo, self.hi):
            task = tasks[rank] = Task(rank, None)  # type: ignore[arg-type]
            self.tasks.append(task)
        for task in self.tasks:
            engine.start_rank(task, world.member(task.rank), fn, args, kwargs)

    async def _loop(self) -> Any:
        engine = self.engine
        assert engine is not None
        while True:
            env = await self._next()
            op = env.tag
            if op == STEP:
                step = payload_of(env)
                report = await engine.phase(env.time, step["counts"], step["firsts"], step["payloads"],
                                            step.get("sent", 0.0), step.get("close", False))
                self.send(REPORT, report, engine.now)
            elif op == DESCRIBE:
                self.send(BLOCKED, engine.blocked_split(), engine.now)
            elif op == TIMEOUT:
                self.send(LINES, engine.timeout_lines(), engine.now)
            elif op == FINISH:
                self.finishing = True
                self.send(RESULTS, self._results())
                assert self.ctrl is not None
                await self.ctrl.drain()
            elif op == FINAL:
                final = payload_of(env, self.loads)
                self.send(BYE)  # the coordinator closes the control links once all have said it
                assert self.ctrl is not None
                try:
                    await asyncio.wait_for(self.ctrl.drain(), 2.0)
                except (asyncio.TimeoutError, OSError):
                    pass  # the result is here; the coordinator's own wait is bounded too
                return final

    def _results(self) -> dict[str, Any]:
        engine = self.engine
        assert engine is not None
        lo, hi = self.lo, self.hi
        values = [_remote.lower_result(task.result) for task in self.tasks]
        for task, value in zip(self.tasks, values):
            try:
                wire.pack(value, copy=False, dumps=self.dumps, arrays=_arrays.STAGED)
            except wire.Unsendable as exc:
                problem = TypeError(
                    f"rank {task.rank}: run: the return value cannot be sent back from its hosting "
                    f"process ({exc.problem}); return a dict/list/array instead, or run(..., "
                    'serializer="pickle")')
                values = []
                return {"unsendable": {"rank": task.rank,
                                       "exc": _remote.encode_exception(problem)}}
        trace = None
        if isinstance(engine.trace, _HostTrace):
            t = engine.trace
            trace = {
                "spans": [[s.rank, s.name, s.start, s.end, _plain_args(s.args)] for s in t.spans],
                "messages": [[m.id, m.src, m.dst, m.tag, m.nbytes, m.sent, m.recv, m.comm]
                             for m in t.messages],
                "receipts": t.receipts,
            }
        return {
            "values": values,
            "times": [task.time for task in self.tasks],
            "stats": [engine.msgs_sent[lo:hi], engine.bytes_sent[lo:hi],
                      engine.msgs_recv[lo:hi], engine.bytes_recv[lo:hi]],
            "leaks": engine.leaks() if self.spec is not None and self.spec.strict else [],
            "trace": trace,
        }


def _landing_order(item: tuple[float, int, Envelope]) -> tuple[float, int, float, int]:
    """The order a receive port takes envelopes in (``HostedEngine._land``; sorts are stable)."""
    env = item[2]
    return item[0], item[1], env.time, env.src


def _posting_order(item: tuple[float, int, Envelope]) -> tuple[float, int, int]:
    """The order envelopes enter their channels in: each source's in the order it sent them."""
    return item[0], item[1], item[2].src


def _plain_args(args: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in args.items():
        try:
            wire.pack(value, copy=False)
        except wire.Unsendable:
            value = repr(value)
        out[str(key)] = value
    return out


def child_main(address: tuple[str, int], secret: bytes, proc: int, run_id: str,
               transport: TcpTransport, blob: bytes) -> None:
    """Entry point of a local hosting process (a ``multiprocessing`` target).

    ``blob`` holds the run spec, the rank function and its arguments
    (``_remote.dumps``); it is unpickled after the control link is up, so an
    import error there reaches the caller as a clear error, not a silent exit.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when we stop
    host = Host(transport, proc, secret, run_id)
    asyncio.run(host.serve(address, lambda: _remote.loads(blob)))
