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
from simcluster.transports.base import EAGER, Envelope, TransportError
from simcluster.transports.tcp import Link, TcpTransport, open_link

from . import _remote
from . import arrays as _arrays
from ._hosted_engine import HostedEngine, _HostTrace
from .comm import Group
from .engine import Task

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
