"""run() and launch(): start a world of ranks, drive it, return a RunResult.

``launch`` is the one implementation (it needs a running asyncio loop);
``run`` is ``asyncio.run(launch(...))`` for synchronous callers. Both check
their keywords up front (``_config.configure``: a bad one is a
``UsageError``), build the world (``_config.build_world``: the engine, the
world communicator, one task per rank; on shm and tcp the hosting processes
of ``hosting.coordinator`` build theirs), drive it, and turn whatever stopped the
run into one clear exception: ``RankError`` (a rank raised),
``DeadlockError``, ``RunTimeoutError``. ``RunResult`` and ``Stats`` live in
``_result`` and are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from time import perf_counter as _perf_counter  # bound now: a rank's time.* reads virtual time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .engine import gc as _gc
from ._config import Checks as Checks
from ._config import Fidelity as Fidelity
from ._config import Serializer as Serializer
from ._config import TransportName as TransportName
from ._config import RunConfig, World, build_world, check_names, configure
from ._result import RunResult as RunResult
from ._result import Stats as Stats
from .engine.assembly import Engine
from .errors import RankError, SimclusterError, SimclusterWarning
from .trace import format_seconds

__all__ = ["RunResult", "Stats", "launch", "run"]


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
        UsageError: a bad keyword (UsageTypeError: one of the wrong type).
    """
    __tracebackhide__ = True  # pytest: show the caller's line, then the report (see run)
    try:
        check_names("launch", keywords)
        result = await _launch(fn, world_size, **keywords)
    except SimclusterError as exc:
        raise exc.with_traceback(None)  # noqa: B904 - the same error, without our frames
    _warn_leaks(result)
    return result


class _Stood:
    """Where a run stood: read when Ctrl-C stops it, for the one line ``run`` raises."""

    def __init__(self) -> None:
        self.engine: Engine | None = None  # the memory transport's engine, read directly
        self.finished, self.world_size, self.now = 0, 0, 0.0  # else the hosts' last progress tick

    def note(self, finished: int, world_size: int, now: float) -> None:
        self.finished, self.world_size, self.now = finished, world_size, now

    def line(self) -> str:
        engine = self.engine
        if engine is not None:
            self.note(engine.world_size - engine.kernel.unfinished, engine.world_size, engine.now)
        if not self.world_size:
            return "simcluster: interrupted before the ranks started"
        return (f"simcluster: interrupted at virtual time {format_seconds(self.now)}, with "
                f"{self.finished} of {self.world_size} ranks finished")


async def _launch(fn: Callable[..., Any], world_size: int, *,
                  _progress: Callable[[int, int, float], None] | None = None,
                  _stood: _Stood | None = None, **keywords: Any) -> RunResult:
    # _progress (private, for the command line): called as
    # _progress(finished, world_size, now) about ten times a wall second, with the
    # engine's count of events as a fourth argument when the ranks are in this process.
    config = configure(fn, world_size, **keywords)
    if config.shares:  # an MPI job with processes that host no rank: process 0 hands the outcome on
        from .hosting import mpi_job as _mpi_job
        return await _mpi_job.shared(config.shares, lambda: _run(fn, config, _progress, _stood))  # type: ignore[no-any-return]
    return await _run(fn, config, _progress, _stood)


async def _run(fn: Callable[..., Any], config: RunConfig,
               _progress: Callable[[int, int, float], None] | None,
               stood: _Stood | None = None) -> RunResult:
    wall_start = _perf_counter()
    if stood is not None:  # Ctrl-C before the ranks start: virtual time 0, none finished
        stood.note(0, config.world_size, 0.0)
    if config.multiprocess:  # shm and tcp: ranks hosted by several processes (_coordinator)
        from .hosting import coordinator as _coordinator

        if stood is None:
            return await _coordinator.launch(fn, config, _progress)
        noted = stood  # noted above until the hosts' first tick

        def progress(finished: int, world_size: int, now: float) -> None:
            noted.note(finished, world_size, now)
            if _progress is not None:
                _progress(finished, world_size, now)

        return await _coordinator.launch(fn, config, progress)
    trace = config.trace
    world: World | None = None
    # like Engine.run: collecting while a large world is built cost half the time of a 2^18-rank run
    with _gc.paused():
        try:
            world = build_world(config, fn)
            engine = world.engine
            if stood is not None:
                stood.engine = engine
            with _ctrl_c_reaches_ranks(engine):
                if _progress is None:
                    await engine.run()
                else:
                    await _with_progress(engine, _progress)
            failure = engine.kernel.failure
            if failure is not None:
                task, exc = failure
                if not isinstance(exc, Exception):
                    raise exc
                error = RankError(task.rank, exc)
                if engine.p2p.failures is not None:  # what the fault plan crashed, for the report
                    error.crashed = dict(engine.p2p.failures.failed)
                raise error from exc
        finally:
            if world is not None:
                world.engine.close()
                if config.compute is not None:  # record=FILE: also after a failure, to debug by replay
                    config.compute.save(config.world_size)
                if world.engine.kernel.trace is not None and config.faults is not None:
                    config.faults.mark(world.engine.kernel.trace, world.engine.now)
                if world.engine.kernel.trace is not None and isinstance(trace, (str, os.PathLike)):
                    world.engine.kernel.trace.save(trace)  # also after a failure, when a trace helps most
    tasks = world.tasks
    leaks = engine.diagnostics.leaks() if config.strict else []
    p2p = engine.p2p
    stats = Stats(tuple(p2p.msgs_sent), tuple(p2p.bytes_sent), tuple(p2p.msgs_recv), tuple(p2p.bytes_recv))
    failures = p2p.failures
    return RunResult([t.result for t in tasks], [t.time for t in tasks], stats,
                     _perf_counter() - wall_start, engine.kernel.trace, leaks,
                     crashed=None if failures is None else failures.failed,
                     calls=failures.calls if failures is not None and config.faults is not None
                     and config.faults.count_calls else None)


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

    A bad keyword raises ``UsageError`` (a ``ValueError``), or
    ``UsageTypeError`` (also a ``TypeError``) for one of the wrong type,
    before anything runs.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run(): called from a running event loop; use `await sc.launch(...)` there")
    __tracebackhide__ = True  # pytest: show the caller's line, then the report
    stood = _Stood()
    try:
        check_names("run", keywords)
        result = asyncio.run(_launch(fn, world_size, _stood=stood, **keywords))
    except KeyboardInterrupt:
        # Ctrl-C: asyncio cancelled the run (the ranks, the hosting processes) and raises this;
        # one line on where the run stood says more than asyncio's two tracebacks. A rank the
        # Ctrl-C cut between making a call's coroutine and awaiting it leaves that coroutine to
        # warn when it is collected, at the latest as the process ends: noise after an interrupt
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
        raise KeyboardInterrupt(stood.line()).with_traceback(None) from None
    except SimclusterError as exc:
        # the report (a deadlock's blocked calls, a rank's error with its own traceback as
        # __cause__, a bad keyword) says what happened; our frames and asyncio's would add 60
        # lines above it
        raise exc.with_traceback(None)  # noqa: B904 - the same error, without our frames
    _warn_leaks(result)
    return result


@contextlib.contextmanager
def _ctrl_c_reaches_ranks(engine: Engine) -> Iterator[None]:
    """While ``engine`` runs: a Ctrl-C that lands in a rank's own code stops the run there.

    ``asyncio.run`` answers Ctrl-C by cancelling the run, which takes effect
    when the engine next lets the event loop turn; a rank that computes
    without calling simcluster (``while True: pass``) never lets it, so the
    Ctrl-C would wait for it. Here a Ctrl-C that finds a rank running in this
    thread raises ``KeyboardInterrupt`` in it, as Python does in a plain
    program (``run`` reports it in one line); otherwise asyncio's handling
    stands. A rank on a thread of its own (``engine.sync.ThreadRank``) is left
    to asyncio's. Nothing changes outside the main thread.
    """
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield
        return
    kernel = engine.kernel

    def interrupt(signum: int, frame: Any) -> None:
        task = kernel.current
        if task is not None and getattr(task.coro, "thread_ident", None) is None:
            raise KeyboardInterrupt
        previous(signum, frame)

    signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is interrupt:
            signal.signal(signal.SIGINT, previous)


async def _with_progress(engine: Engine, report: Callable[..., None]) -> None:
    """Run the engine while a thread reports progress every 0.1 wall seconds.

    ``report(finished, world_size, now, events)``: ``events`` is the engine's
    count of events run so far (brought up to date each time the engine lets
    the event loop turn, every few thousand events).

    The thread only reads counters the engine keeps anyway, so the simulator
    loop is untouched, a run without ``_progress`` pays nothing, and the
    report goes on while a rank computes between calls for long. It stops
    (joined) before this returns: nothing is reported after the run.
    """
    stop = threading.Event()
    kernel = engine.kernel
    world_size = engine.world_size

    def tick() -> None:
        while not stop.wait(0.1):
            try:
                report(world_size - kernel.unfinished, world_size, engine.now, kernel.events)
            except (OSError, ValueError):  # the terminal went away: stop showing
                return

    thread = threading.Thread(target=tick, name="simcluster-progress", daemon=True)
    thread.start()
    try:
        await engine.run()
    finally:
        stop.set()
        thread.join()
