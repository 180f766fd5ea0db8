"""run() and launch(): start a world of ranks, drive it, return a RunResult.

``launch`` is the one implementation (it needs a running asyncio loop);
``run`` is ``asyncio.run(launch(...))`` for synchronous callers. Both check
their keywords up front, build the transport, the latency ports and the
engine, start one task per rank, and turn whatever stopped the run into one
clear exception: ``RankError`` (a rank raised), ``DeadlockError``,
``RunTimeoutError``.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import time as _time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from simcluster.transports.base import Transport
from simcluster.transports.memory import MemoryTransport
from simcluster.transports.shm import ShmTransport
from simcluster.transports.tcp import TcpTransport

from . import _schedule, _sync
from . import latency as _latency
from .collectives import check_algorithms
from .comm import Group
from .engine import Engine, Task
from .errors import RankError, SimclusterError, SimclusterWarning
from .trace import Trace

TransportName = Literal["memory", "shm", "tcp"]
Checks = Literal["strict", "off"]
Fidelity = Literal["message", "analytic"]
Serializer = Literal["msgpack", "pickle"]


@dataclass(frozen=True, slots=True)
class Stats:
    """Message counts and bytes, per world rank and in total.

    Bytes are the sizes the latency model charged: arrays count ``nbytes``,
    other objects their encoded length, ``None`` counts 0.
    """

    messages_sent: tuple[int, ...]
    bytes_sent: tuple[int, ...]
    messages_received: tuple[int, ...]
    bytes_received: tuple[int, ...]

    @property
    def total_messages(self) -> int:
        """Messages sent by every rank together."""
        return sum(self.messages_sent)

    @property
    def total_bytes(self) -> int:
        """Bytes sent by every rank together."""
        return sum(self.bytes_sent)


class RunResult(Sequence[Any]):
    """The per-rank return values of a run, with its times and counts.

    Attributes:
        elapsed: virtual makespan in seconds (the latest rank's final time).
        times: each rank's final virtual time.
        stats: message and byte counts (``Stats``).
        wall: wall-clock seconds the run took.
        trace: recorded events when tracing, else None.
        leaks: lines describing unreceived messages and unwaited requests.
    """

    __slots__ = ("_values", "elapsed", "times", "stats", "wall", "trace", "leaks")

    def __init__(self, values: list[Any], times: list[float], stats: Stats, wall: float,
                 trace: Any = None, leaks: list[str] | None = None) -> None:
        self._values = values
        self.times = times
        self.elapsed = max(times) if times else 0.0
        self.stats = stats
        self.wall = wall
        self.trace = trace
        self.leaks = leaks or []

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self._values[index]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunResult):
            return self._values == other._values
        if isinstance(other, (list, tuple)):
            return self._values == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = self._values if len(self._values) <= 8 else [*self._values[:8], "..."]
        return f"RunResult({shown!r}, elapsed={self.elapsed:.9g})"


_TRANSPORTS: dict[str, Callable[[], Transport]] = {
    "memory": MemoryTransport, "shm": ShmTransport, "tcp": TcpTransport,
}


def _make_transport(transport: str | Transport) -> Transport:
    if isinstance(transport, Transport):
        return transport
    factory = _TRANSPORTS.get(transport) if isinstance(transport, str) else None
    if factory is None:
        valid = ", ".join(sorted(_TRANSPORTS))
        raise ValueError(f"run(transport={transport!r}): unknown transport; valid: {valid}, "
                         "or a simcluster.transports.base.Transport object")
    return factory()


def _check_fn(fn: object) -> None:
    if inspect.iscoroutine(fn):
        fn.close()
        raise TypeError("run(main(...)): expected an async function, got a coroutine object; "
                        "pass main, not main(...)")
    if not callable(fn):
        raise TypeError(f"run({fn!r}): expected a function taking comm first (async def, or a "
                        f"plain def for a synchronous rank); got {type(fn).__name__}")


def _check_keywords(world_size: int, eager_limit: int, checks: str, timeout: float | None,
                    procs: int | None, transport: object, seed: object = 0) -> int:
    """Check the keywords every run takes; return the seed as an int (None means 0).

    A run must be reproducible, so ``seed=None`` is the default seed, not a fresh
    random one; ``sc.testing.explore`` is the way to try many schedules.
    """
    import numbers

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"run(world_size={world_size!r}): world_size must be an int >= 1; "
                         "pass the number of virtual ranks")
    if isinstance(eager_limit, bool) or not isinstance(eager_limit, int) or eager_limit < 0:
        raise ValueError(f"run(eager_limit={eager_limit!r}): eager_limit must be an int >= 0 (bytes)")
    if checks not in ("strict", "off"):
        raise ValueError(f"run(checks={checks!r}): checks must be 'strict' or 'off'")
    if timeout is not None:
        bad = (f"run(timeout={timeout!r}): timeout must be a positive number of seconds; pass a "
               "number such as timeout=5, or None for no limit")
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
            raise TypeError(bad)
        if not timeout > 0:
            raise ValueError(bad)
    if procs not in (None, 1) and (transport == "memory" or isinstance(transport, MemoryTransport)):
        raise ValueError(f"run(procs={procs!r}): the memory transport hosts every rank in this "
                         "process; use procs=1, or transport='shm'/'tcp' for several processes")
    if procs is not None and (isinstance(procs, bool) or not isinstance(procs, int) or procs < 1):
        raise ValueError(f"run(procs={procs!r}): procs must be an int >= 1 (OS processes)")
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"run(seed={seed!r}): seed must be an int; pass an integer such as seed=1, "
                        "or leave it out for the default (0)")
    return int(seed)


def _check_nodes(serializer: str, nnodes: int, node_rank: int, procs: int | None,
                 multiprocess: bool) -> None:
    if serializer not in ("msgpack", "pickle"):
        raise ValueError(f"run(serializer={serializer!r}): serializer must be 'msgpack' or 'pickle'")
    if isinstance(nnodes, bool) or not isinstance(nnodes, int) or nnodes < 1:
        raise ValueError(f"run(nnodes={nnodes!r}): nnodes must be an int >= 1")
    if nnodes > 1 and not multiprocess:
        raise ValueError(f"run(nnodes={nnodes}): several nodes need transport='tcp'")
    if nnodes > 1 and procs is not None:
        raise ValueError(f"run(procs={procs!r}, nnodes={nnodes}): with several nodes each node "
                         "process hosts its own block of ranks; leave procs out")
    if isinstance(node_rank, bool) or not isinstance(node_rank, int) or not 0 <= node_rank < nnodes:
        raise ValueError(f"run(node_rank={node_rank!r}): node_rank must be in range({nnodes})")


def _check_names(call: str, keywords: Mapping[str, Any]) -> None:
    valid = [name for name in inspect.signature(_launch).parameters
             if name not in ("fn", "world_size") and not name.startswith("_")]
    for name in keywords:
        if name not in valid and name != "_progress":
            raise TypeError(f"{call}() got an unexpected keyword argument {name!r}; valid: "
                            f"{', '.join(valid)}")


def _check_fidelity(fidelity: object) -> None:
    if fidelity not in ("message", "analytic"):
        raise ValueError(f"run(fidelity={fidelity!r}): unknown fidelity; valid: 'analytic' (each "
                         "collective resolves in one step from its algorithm's cost formula), "
                         "'message' (every message simulated)")


def _warn_leaks(result: RunResult) -> None:
    leaks = result.leaks
    if leaks:
        shown = "\n  ".join(leaks[:20]) + ("\n  ..." if len(leaks) > 20 else "")
        warnings.warn(f"run finished with {len(leaks)} leak(s):\n  {shown}\n"
                      "receive every message and wait or test every request",
                      SimclusterWarning, stacklevel=3)


async def launch(fn: Callable[..., Any], world_size: int, **keywords: Any) -> RunResult:
    """Run ``fn(comm, *args, **kwargs)`` on ``world_size`` virtual ranks inside a running loop.

    Returns the per-rank results as a ``RunResult``. Takes the same keywords
    as ``run``; docs/run.md describes each.

    Raises:
        RankError: a rank raised; ``__cause__`` is its exception.
        DeadlockError: every rank blocked with nothing in flight.
        RunTimeoutError: ``timeout`` wall seconds passed.
    """
    __tracebackhide__ = True  # pytest: show the caller's line, then the report (see run)
    _check_names("launch", keywords)
    try:
        result = await _launch(fn, world_size, **keywords)
    except (SimclusterError, TypeError, ValueError) as exc:
        if not _for_the_user(exc):
            raise
        raise exc.with_traceback(None)  # noqa: B904 - the same error, without our frames
    _warn_leaks(result)
    return result


async def _launch(
    fn: Callable[..., Any],
    world_size: int,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    transport: TransportName | Transport = "memory",
    procs: int | None = None,
    latency: _latency.LatencyModel | None = None,
    seed: int = 0,
    schedule: str | Sequence[int] = "batch",
    eager_limit: int = 65536,
    trace: bool | str | os.PathLike[str] | None = None,
    checks: Checks = "strict",
    algorithms: Mapping[str, str] | None = None,
    timeout: float | None = None,
    compute: str | None = None,
    fidelity: Fidelity = "message",
    serializer: Serializer = "msgpack",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    _progress: Callable[[int, int, float], None] | None = None,
) -> RunResult:
    # _progress (private, for the command line): called as
    # _progress(finished, world_size, now) about ten times a wall second.
    _check_fn(fn)
    seed = _check_keywords(world_size, eager_limit, checks, timeout, procs, transport, seed)
    if trace is not None and not isinstance(trace, (bool, str, os.PathLike)):
        raise TypeError(f"run(trace={trace!r}): trace must be True, False, or a path to write "
                        "Chrome-trace JSON to")
    _check_fidelity(fidelity)
    forced = check_algorithms(algorithms or {})
    model = _latency.Zero() if latency is None else latency
    if not isinstance(model, _latency.LatencyModel):
        raise TypeError(f"run(latency={latency!r}): expected a simcluster.latency model such as "
                        "sc.latency.AlphaBeta(1e-6, 1e-9)")
    kwargs = dict(kwargs or {})
    compute_factor = _sync.parse_compute(compute)
    wall_start = _time.perf_counter()
    tp = _make_transport(transport)
    multiprocess = isinstance(tp, TcpTransport)  # ShmTransport is one too
    _check_nodes(serializer, nnodes, node_rank, procs, multiprocess)
    _schedule.check(schedule, tp.name if multiprocess else None)
    if multiprocess and fidelity == "analytic":
        raise ValueError(f"run(transport={transport!r}, fidelity='analytic'): analytic collectives "
                         "meet inside one process; use transport='memory', or fidelity='message'")
    if isinstance(tp, TcpTransport):  # shm and tcp: ranks hosted by several processes (_coordinator)
        if compute_factor:
            raise ValueError(f"run(compute={compute!r}, transport={transport!r}): compute= is "
                             "measured on the memory transport only; leave it out, or use "
                             "transport='memory'")
        from . import _coordinator

        result: RunResult = await _coordinator.launch(
            fn, world_size, tp, procs=procs, args=args, kwargs=kwargs, latency=model, seed=seed,
            eager_limit=eager_limit, trace=trace, checks=checks, algorithms=forced,
            timeout=timeout, serializer=serializer, nnodes=nnodes, node_rank=node_rank,
            master_addr=master_addr, master_port=master_port, progress=_progress,
            schedule=schedule)
        return result
    engine = Engine(world_size, tp, model.bind(world_size, _model_rng(seed)), seed=seed,
                    eager_limit=eager_limit, strict=checks == "strict", timeout=timeout, model=model,
                    schedule=schedule)
    engine.algorithms = forced
    engine.compute = compute_factor
    engine.fidelity = fidelity
    if serializer == "pickle":
        import pickle

        engine._dumps = pickle.dumps
        engine._loads = pickle.loads
    if trace:
        engine.trace = Trace(world_size)
    tasks: list[Task] = []
    world = Group(engine, 0, list(range(world_size)), "world", tasks)
    collecting = gc.isenabled()
    gc.disable()  # like Engine.run: a large world is millions of young objects; collecting them
    try:          # while building it cost half the time of a 2^18-rank run
        for rank in range(world_size):
            task = Task(rank, None)  # type: ignore[arg-type]
            tasks.append(task)
        for rank, task in enumerate(tasks):
            engine.start_rank(task, world.member(rank), fn, args, kwargs)
        if _progress is None:
            await engine.run()
        else:
            await _with_progress(engine, _progress)
        failure = engine.failure
        if failure is not None:
            task, exc = failure
            if not isinstance(exc, Exception):
                raise exc
            raise RankError(task.rank, exc) from exc
    finally:
        if collecting:
            gc.enable()
        engine.close()
        if engine.trace is not None and isinstance(trace, (str, os.PathLike)):
            engine.trace.save(trace)  # also after a failure, when a trace helps most
    leaks = engine.leaks() if checks == "strict" else []
    stats = Stats(tuple(engine.msgs_sent), tuple(engine.bytes_sent),
                  tuple(engine.msgs_recv), tuple(engine.bytes_recv))
    return RunResult([t.result for t in tasks], [t.time for t in tasks], stats,
                     _time.perf_counter() - wall_start, engine.trace, leaks)


def run(fn: Callable[..., Any], world_size: int, **keywords: Any) -> RunResult:
    """Run ``fn(comm, *args, **kwargs)`` on ``world_size`` virtual ranks; block until done.

    Keywords (docs/run.md has the table): ``args``, ``kwargs``, ``transport``, ``procs``,
    ``latency``, ``seed``, ``eager_limit``, ``trace``, ``checks``,
    ``algorithms``, ``timeout``; ``schedule="shuffle"`` to order simultaneous
    events by a full seeded permutation (``"batch"``, the default, rotates
    them), or a list of choices from ``sc.testing.explore`` to replay;
    ``fidelity="analytic"`` to resolve each collective in one step (memory
    transport); ``serializer="pickle"`` to pickle what msgpack cannot carry (only with peers you trust: unpickling runs their
    code); for tcp on several hosts, ``nnodes``, ``node_rank``,
    ``master_addr`` and ``master_port`` (default: ``MASTER_ADDR`` and
    ``MASTER_PORT`` from the environment), as torchrun takes them. From code
    already inside an event loop, use ``await sc.launch(...)`` instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run(): called from a running event loop; use `await sc.launch(...)` there")
    __tracebackhide__ = True  # pytest: show the caller's line, then the report
    _check_names("run", keywords)
    try:
        result = asyncio.run(_launch(fn, world_size, **keywords))
    except (SimclusterError, TypeError, ValueError) as exc:
        if not _for_the_user(exc):
            raise
        # the report (a deadlock's blocked calls, a rank's error with its own traceback as
        # __cause__) says what happened; our frames and asyncio's would add 60 lines above it
        raise exc.with_traceback(None)  # noqa: B904 - the same error, without our frames
    _warn_leaks(result)
    return result


def _for_the_user(exc: BaseException) -> bool:
    """True for what a run reports about the program or its keywords, not a bug of simcluster."""
    return isinstance(exc, SimclusterError) or str(exc).startswith(("run(", "run:"))


async def _with_progress(engine: Engine, report: Callable[[int, int, float], None]) -> None:
    """Run the engine while a side task reports progress every 0.1 wall seconds.

    The side task gets a turn whenever the engine lets the asyncio loop
    breathe (every few thousand events), so the simulator loop itself is
    untouched and a run without ``_progress`` pays nothing.
    """
    async def tick() -> None:
        while True:
            await asyncio.sleep(0.1)
            report(engine.world_size - engine._unfinished, engine.world_size, engine.now)

    ticker = asyncio.ensure_future(tick())
    try:
        await engine.run()
    finally:
        ticker.cancel()
        try:
            await ticker
        except asyncio.CancelledError:
            pass


def _model_rng(seed: int) -> Any:
    import random

    return random.Random(f"latency:{seed}")
