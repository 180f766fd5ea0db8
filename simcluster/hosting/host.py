"""Hosting a block of ranks in one OS process, in rounds with the other hosting processes.

A run on the shm, tcp or mpi transport has ``procs`` hosting processes and
one coordinator (``hosting.coordinator``: in the caller's process for a local run,
beside process 0 for a multi-node or MPI run). Process ``p`` hosts the world
ranks ``[p*per, (p+1)*per)`` as coroutines of its own ``HostedEngine`` (an
``Engine`` that knows which ranks are local); envelopes to other processes
wait in the transport until the round ends, and envelopes from them are
handed to the engine only when the rounds' counts say so.

Time advances in rounds (conservative synchronisation), and the processes
run them among themselves: the coordinator starts them (GO) and hears only
how they ended (DONE). Each round every process works out the same plan
from the same data (``hosting.rounds.Rounds.plan``): the round's time ``T``, the
last event time it runs (``until``: ``T`` itself in lockstep) and which
processes run. A process that runs delivers the envelopes counted for it,
sorted by source rank, runs every local event at time ``<= until``, and
makes its ``Report(sent per process, earliest time among them, next local
event time, unfinished ranks, failure, firsts, held, open)``. Then every
process sends every other one the round's envelopes followed by a mark
carrying its report (none where it did not run), all in one exchange
(``TcpTransport.exchange``; MPI collectives on the mpi transport), and
applies the reports (``Rounds.absorb``). The next ``T`` is the earliest of
every process's next event and every envelope still in flight; envelopes
are stamped at or after their sender's ``until`` (Rule 3), so nothing
arrives in a process's past. When no process has an event and nothing is in
flight, the run is over, or deadlocked if a rank is unfinished; a failure
ends it at once. Each process then sends DONE, with the same verdict, and
the coordinator takes it from there (RESULTS, the deadlock report, STOP).

Collective verification across processes. A member entering a collective is
compared at the call with the first member of its communicator that entered
the same call (``comm.Comm._collective``), but only among members this process
knows of. Each report carries ``firsts``: the signatures of calls that a member
here entered first (``comm._record``). Every process compares those of one
round across processes (``comm.merge_firsts``: a difference ends the run with
the same CollectiveMismatchError a member compared at its call raises) and
hands each call's first signature to its own engine in its next run, before
it delivers anything or runs a step, so a member that enters later is
compared at its call. Envelopes sent in a round are delivered no earlier than
the next round: no message of a call whose members differ meets another's.

Rule 1: a process delivers exactly the envelopes the reports counted, in
source-rank order, so a run's schedule does not depend on which socket the
OS served first: the same seed and ``procs`` give the same run.
Rule 2: each process keeps only its own ranks' port timers. Once a round's
events are done, the sender charges the send port (``Ports.send_side``) of
every message its ranks posted in the round, in posting order, and stamps the
envelope; in its next run the receiver charges its receive port
(``Ports.recv_side``) for every message sent to it in earlier rounds, local
ones included, in the memory transport's order (instant, wire time, source rank,
posting order), and tells a rendezvous sender when the data landed (an ACK).
Envelopes of the current instant wait for a round at a later time (unless they
arrive at once), so those of one instant are charged together even when a
synchronous send's ACK woke their sender in a later round.
Rendezvous transfers are charged only in a round that closes their instant
(``close``: the plan makes one when nothing is left at that time and a
process reported ``held`` transfers), so all of one instant's are charged
together, in whichever round their CTS came. So times equal the memory
transport's, whatever the seed, for programs that leave no order open.
Rule 3: windows. With a latency model whose ``lookahead()`` L is positive,
nothing a rank does reaches another rank sooner than L: a message lands at
least L after it was posted, and a large one's request to send too
(``engine.protocol`` Rule 5). So a round from ``T`` may run every event before
``T + L`` (``until``, a few roundings short of it) in each process on its own,
and exchange the envelopes only at its end, in one round instead of one per
instant. Three handshakes reach the other side at once: a clear to send, the
acknowledgement of a synchronous send, and that of rendezvous data landing.
Each sender reports how many such exchanges it has under way with other
processes (``open``), and while any is, rounds are single instants as above;
one that starts inside a window cannot answer before ``T + L``. In a window,
no other process can add to an instant, so each instant's rendezvous
transfers are charged as it ends (as in one process), and every envelope
carries the instant it was charged at (``meta``), which orders the
receiver's side. Failures and collective mismatches found in one round are
ranked by virtual time, then rank, so the first one the memory transport
would meet is the one reported.

The control channel is a stream of frames like any link (``transports.tcp``):
each control message is one of the typed messages of ``hosting.control`` (``Go``,
``Done``, ...), carried by an Envelope whose ``tag`` is its opcode and whose
payload is its plain-list encoding, packed with ``transports.wire``; nothing
on it is pickled. Both sides build and read the typed messages only. The
run's configuration (``_config.RunConfig``) reaches a local hosting process
with the rank function, over multiprocessing's launch pipe, and both sides
build their ranks with ``_config.build_world``.

Faults (``engine.failures``). A fault plan's crashes, and ULFM's
revocations and agreements, change what ranks in other processes see, but
never sooner than one hop (the lookahead L, or the next instant when it is
0) after their cause. Each process reports them as records (``Report.faults``);
every other process runs in the next round, which comes no later than the
earliest record's due time, and applies them before anything runs there. So
windows stay as they are under a fault plan, and the times equal one
process's.

Rule 4: never a hang in a round. An exchange waits in short slices and lets
the event loop run between them, so STOP ends it and TIMEOUT is answered
(``Host._answer_timeout``); a peer that dies closes its stream, which ends
the exchange with a TransportError that the coordinator turns into the
lost process's own error. It polls without blocking for a fraction of a
millisecond first: the other side is usually a few microseconds from its
mark, and being woken by the kernel costs tens of microseconds.

The end of a run. After DONE every rank has finished and nothing is in
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
from time import monotonic as _monotonic  # bound now: a rank's time.* reads virtual time
from collections import deque
from collections.abc import Callable
from typing import Any

from simcluster.transports import wire
from simcluster.transports.base import EAGER, Envelope, TransportError
from simcluster.transports.tcp import Link, TcpTransport, open_link

from .local_link import LocalLink

from . import control as C
from ..engine import gc as _gc
from . import remote as _remote
from .. import arrays as _arrays
from .._config import RunConfig, build_world
from .hosted_engine import HostedEngine
from .views import HostTrace as _HostTrace
from .rounds import Rounds
from ..engine.assembly import Task

_TICK = 0.1  # wall seconds between progress ticks to the coordinator
_BREATHE = 0.02  # wall seconds between turns of the event loop during rounds

# ---- serving one block of ranks ----


class _Stopped(Exception):
    """The coordinator said STOP (``error`` is why, for node processes), or went away."""

    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__()
        self.error = error


Load = Callable[[], tuple[RunConfig, Any]]
"""Returns (the run's configuration, the rank function); called once the control link is up."""


class Host:
    """One hosting process's side of the run: control link, transport, engine."""

    def __init__(self, transport: TcpTransport, proc: int, secret: bytes, run_id: str) -> None:
        self.proc = proc
        self.secret = secret
        self.run_id = run_id
        self.transport = transport
        self.config: RunConfig | None = None
        self.lo = self.hi = 0
        self.ctrl: Link | LocalLink | None = None
        self.queue: asyncio.Queue[Envelope | None] = asyncio.Queue()
        self.early: deque[Envelope | None] = deque()  # taken from ``queue`` during the rounds
        self.main: asyncio.Task[Any] | None = None
        self.inner: asyncio.Task[C.FinalResult | None] | None = None  # ``_serve``, cancellable
        self.engine: HostedEngine | None = None
        self.tasks: list[Task] = []
        self.failed: BaseException | None = None
        self.interrupted = False  # the hosting work was cancelled by ``_interrupt``, not serve's
        self.stop_error: BaseException | None = None
        self.ended: str | None = None
        """How the control link ended: "final" (the result came), "stop" (STOP came), or
        "lost" (it closed, or broke, before either)."""
        self.dumps: Callable[[object], bytes] | None = None
        self.loads: Callable[[bytes], object] | None = None

    def _configure(self, config: RunConfig) -> None:
        self.config = config
        self.lo, self.hi = config.block(self.proc)
        if config.serializer == "pickle":
            self.dumps, self.loads = pickle.dumps, pickle.loads

    def send(self, message: C.Message) -> None:
        if self.ctrl is not None and not self.ctrl.closing:
            self.ctrl.send(C.envelope(message, self.proc, self.dumps))

    def _interrupt(self) -> None:
        """Stop the hosting work wherever it waits (``serve`` then says why)."""
        if self.inner is not None and not self.inner.done():
            self.interrupted = True
            self.inner.cancel()

    async def _pump_control(self) -> None:
        assert self.ctrl is not None

        def got(env: Envelope) -> None:
            if env.tag == C.STOP:
                try:
                    stop = C.read(env)
                except TransportError:  # stop all the same, without a reason
                    stop = C.Stop()
                if isinstance(stop, C.Stop) and stop.exc is not None:
                    self.stop_error = _remote.decode_exception(stop.exc, "coordinator")
                self.ended = "stop"
                raise _Stopped()
            if env.tag == C.FINAL:
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

    async def _next(self) -> C.Message:
        env = self.early.popleft() if self.early else await self.queue.get()
        if env is None:
            raise _Stopped()
        return C.read(env, self.loads)

    async def serve(self, address: tuple[str, int], load: Load,
                    listen_host: str | None = None,
                    local: LocalLink | None = None) -> C.FinalResult | None:
        """Connect, host the ranks until the coordinator is done with us; return FINAL's result.

        ``local``: the coordinator runs in this process; talk to it over this
        in-process link instead of connecting to ``address``.
        Returns None when the run did not finish here: the coordinator stopped
        it (its error, if it sent one, is in ``stop_error``), this process
        failed (``failed``), or the control link closed first (``ended``).
        """
        self.main = main = asyncio.current_task()
        assert main is not None
        tp = self.transport
        try:
            self.ctrl = local if local is not None else await open_link(
                address[0], address[1], self.secret, peer="coordinator", max_frame=tp.max_frame,
                timeout=tp.connect_timeout)
            pump = asyncio.ensure_future(self._pump_control())
            self.inner = asyncio.ensure_future(self._serve(load, listen_host))
            try:
                return await self.inner
            except asyncio.CancelledError:
                cancelling = getattr(main, "cancelling", None)  # Python 3.11+
                if not self.interrupted or (cancelling is not None and cancelling()):
                    raise  # serve itself was cancelled, not just the hosting work
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

    async def _serve(self, load: Load, listen_host: str | None) -> C.FinalResult | None:
        tp = self.transport
        try:
            config, fn = load()
            self._configure(config)
            tp.bind(self.proc, config.per, config.nprocs, self.secret, self.run_id)
            if listen_host is not None:
                tp.host = listen_host
            host, port = await tp.listen()
            self.send(C.Hello(os.getpid(), (str(host), int(port)), config.digest()))
            start = await self._next()
            if not isinstance(start, C.Start):
                raise _unexpected(start, C.START)
            await tp.connect(start.table)
            with _gc.paused():  # as Engine.run does: a block of ranks is millions of live objects
                self._start(fn)
                self.send(C.Ready())
                go = await self._next()  # every process is connected: the rounds may start
                if not isinstance(go, C.Go):
                    raise _unexpected(go, C.GO)
                await self._rounds()
                return await self._loop()
        except (asyncio.CancelledError, _Stopped):
            raise
        except Exception as exc:
            if self.failed is None:  # (a broken link has reported itself already)
                self.failed = exc
                self.send(C.Error(_remote.encode_exception(exc),
                                  transport=isinstance(exc, TransportError)))
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

    def _start(self, fn: Any) -> None:
        config = self.config
        assert config is not None
        world = build_world(config, fn, transport=self.transport, block=(self.lo, self.hi))
        assert isinstance(world.engine, HostedEngine)
        self.engine = world.engine
        self.tasks = world.tasks

    async def _rounds(self) -> None:
        """Run rounds with the other hosting processes until the run ends; tell the coordinator how
        (``hosting.rounds``: every process decides alike from every process's report)."""
        engine, config, tp = self.engine, self.config, self.transport
        assert engine is not None and config is not None
        me = self.proc
        blocks = [config.block(p) for p in range(config.nprocs)]
        rounds = Rounds(me, [hi - lo for lo, hi in blocks], float(config.latency.lookahead()))
        idle = Envelope(EAGER, 0, me, -1, 0, 0, 0, 0.0)
        shown = breathed = _monotonic()
        while True:
            plan = rounds.plan()
            report: C.Report | None = None
            if plan.runs[me]:
                firsts, payloads = rounds.take_collective()
                report = await engine.phase(plan.now, rounds.counts[me], firsts, payloads,
                                            plan.close, plan.until, rounds.take_faults())
            marks = await tp.exchange(idle if report is None else C.envelope(report, me),
                                      self._answer_timeout)
            reports = [report if p == me else _report_of(mark) for p, mark in enumerate(marks)]
            outcome = rounds.absorb(reports)
            if outcome is not None:
                self.send(C.Done(outcome.time, rounds.rounds, rounds.windows, rounds.unfinished,
                                 outcome.deadlock, outcome.rank, outcome.proc, outcome.exc,
                                 [[rank, t] for rank, t in sorted(rounds.crashed.items())]))
                return
            wall = _monotonic()
            if wall - breathed >= _BREATHE:
                # Rounds may never suspend while the peers keep up; a turn of the event loop
                # lets the control link's pump see a coordinator that stopped us or died.
                breathed = wall
                await asyncio.sleep(0)
            if me == 0 and wall - shown >= _TICK:  # for a progress display
                shown = wall
                self.send(C.Tick(config.world_size - sum(rounds.unfinished), rounds.time))

    def _answer_timeout(self) -> None:
        """Between rounds: answer the coordinator's TIMEOUT (a rank elsewhere may loop)."""
        while not self.queue.empty():
            env = self.queue.get_nowait()
            if env is None or env.tag != C.TIMEOUT:
                self.early.append(env)
                continue
            engine = self.engine
            assert engine is not None
            self.send(C.Lines(engine.now, engine.timeout_lines()))

    async def _loop(self) -> C.FinalResult:
        engine = self.engine
        assert engine is not None
        while True:
            message = await self._next()
            if isinstance(message, C.Describe):
                self.send(engine.blocked_split())
            elif isinstance(message, C.Timeout):
                self.send(C.Lines(engine.now, engine.timeout_lines()))
            elif isinstance(message, C.Finish):
                self.send(self._results())
                assert self.ctrl is not None
                await self.ctrl.drain()
            elif isinstance(message, C.FinalResult):
                self.send(C.Bye())  # the coordinator closes the control links once all have said it
                assert self.ctrl is not None
                try:
                    await asyncio.wait_for(self.ctrl.drain(), 2.0)
                except (asyncio.TimeoutError, OSError):
                    pass  # the result is here; the coordinator's own wait is bounded too
                return message
            else:
                raise _unexpected(message, C.FINISH)

    def _results(self) -> C.Results:
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
                return C.Results([], [], [], [], None,
                                 C.Failure(task.rank, _remote.encode_exception(problem)))
        trace = None
        if isinstance(engine.kernel.trace, _HostTrace):
            t = engine.kernel.trace
            trace = C.TraceParts(
                [[s.rank, s.name, s.start, s.end, _plain_args(s.args)] for s in t.spans],
                [[m.id, m.src, m.dst, m.tag, m.nbytes, m.sent, m.recv, m.comm] for m in t.messages],
                t.receipts, [[c.name, c.time, c.value] for c in t.counters])
        failures = engine.p2p.failures
        crashed: list[list[Any]] = []
        calls: list[list[Any]] = []
        if failures is not None:
            crashed = [[rank, t] for rank, t in sorted(failures.failed.items()) if lo <= rank < hi]
            plan = self.config.faults if self.config is not None else None
            if plan is not None and plan.count_calls:
                calls = [[rank, kind, n] for (rank, kind), n in sorted(failures.calls.items())]
        return C.Results(
            values,
            [task.time for task in self.tasks],
            [engine.p2p.msgs_sent[lo:hi], engine.p2p.bytes_sent[lo:hi],
             engine.p2p.msgs_recv[lo:hi], engine.p2p.bytes_recv[lo:hi]],
            engine.diagnostics.leaks() if self.config is not None and self.config.strict else [],
            trace, None, crashed, calls)


def _report_of(mark: Envelope) -> C.Report | None:
    """The report a process's round mark carries (None: it did not run in that round)."""
    if mark.tag == 0:
        return None
    report = C.read(mark)
    if not isinstance(report, C.Report):
        raise TransportError(None, "run", f"process {mark.src} ended a round with {report.name}",
                             "every process must run the same simcluster version",
                             peer=f"process {mark.src}")
    return report


def _plain_args(args: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in args.items():
        try:
            wire.pack(value, copy=False)
        except wire.Unsendable:
            value = repr(value)
        out[str(key)] = value
    return out


def _unexpected(message: C.Message, wanted: int) -> TransportError:
    return TransportError(None, "run", f"the coordinator sent {message.name} where "
                          f"{C.OP_NAMES[wanted]} was due", "every process must run the same "
                          "simcluster version", peer="coordinator")


def child_main(address: tuple[str, int], secret: bytes, proc: int, run_id: str,
               transport: TcpTransport, blob: bytes) -> None:
    """Entry point of a local hosting process (a ``multiprocessing`` target).

    ``blob`` holds the run's configuration (with the rank function's
    arguments) and the rank function (``hosting.remote.dumps``); it is unpickled
    after the control link is up, so an import error there reaches the caller
    as a clear error, not a silent exit.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when we stop
    if hasattr(signal, "pthread_sigmask"):  # started with SIGINT held (coordinator._ctrl_c_held)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # what is pending is dropped
    host = Host(transport, proc, secret, run_id)
    asyncio.run(host.serve(address, lambda: _remote.loads(blob)))
