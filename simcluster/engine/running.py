"""A run under asyncio: the kernel's events, turns for the asyncio loop, foreign futures, the timeout.

The kernel runs the events due (``Kernel.advance``); this drives it from
the asyncio loop that ``simcluster.run`` runs in. Every ``BREATHE_EVERY``
events the loop gets a turn (real I/O, the wall-clock deadline); while some
rank awaits a foreign future (an asyncio one) and nothing else is due, the
run waits for it, since virtual time must not jump past it. With a timeout, a
watchdog (``engine.watchdog``) interrupts a rank that never yields. What
stopped the run is reported by the engine's reports (``Kernel.reports``):
the timeout report, or the deadlock report when no event is left while some
rank is unfinished.
"""

from __future__ import annotations

import asyncio
from time import monotonic as _monotonic  # bound now: a rank's time.* reads virtual time
from typing import TYPE_CHECKING

from . import gc as _gc, watchdog as _watchdog
from ..errors import RunTimeoutError

if TYPE_CHECKING:
    from .kernel import Kernel
    from .task import Task


async def run(kernel: Kernel) -> None:
    """Run every rank to completion, or raise what stopped the run.

    Python's cyclic garbage collector is paused while the simulation runs
    (``engine.gc.paused``): a large world keeps millions of live objects.

    Raises:
        RunTimeoutError: the run's wall-clock timeout passed.
        DeadlockError: no event is left while some rank is unfinished.
    """
    with _gc.paused():
        await _run(kernel)


async def _run(kernel: Kernel) -> None:
    if kernel.timeout is None:
        await _simulate(kernel, None)
        return
    deadline = _monotonic() + kernel.timeout
    watchdog = _watchdog.Watchdog(kernel, deadline)  # for a rank that never yields
    try:
        await _simulate(kernel, deadline)
        return
    except _watchdog.Overtime as exc:
        overtime = exc
    finally:
        watchdog.stop()
    failure = kernel.failure
    if failure is not None and failure[1] is overtime:  # it landed in a rank's step
        spinning: tuple[Task, str] | None = (failure[0], _watchdog.spinning_line(overtime))
    else:
        spinning = None
    raise RunTimeoutError(None, "run", kernel.reports.timeout_report(spinning), "") from None


async def _simulate(kernel: Kernel, deadline: float | None) -> None:
    """Run events, breathing to asyncio, until every rank finished or something stopped the run."""
    while True:
        kernel.advance()
        failure = kernel.failure
        if failure is not None:
            if isinstance(failure[1], _watchdog.Overtime):
                raise failure[1]  # the timeout interrupted a rank: _run reports it
            return
        if deadline is not None and _monotonic() > deadline:
            raise RunTimeoutError(None, "run", kernel.reports.timeout_report(), "")
        if kernel.foreign and not kernel.runnable():
            loop = asyncio.get_running_loop()
            kernel.wake_future = future = loop.create_future()
            remaining = None if deadline is None else max(0.0, deadline - _monotonic())
            try:
                await asyncio.wait_for(asyncio.shield(future), remaining)
            except asyncio.TimeoutError:
                raise RunTimeoutError(None, "run", kernel.reports.timeout_report(), "") from None
            finally:
                kernel.wake_future = None
            continue
        if kernel.runnable() or kernel.layer.instant_open() or kernel.next_later() is not None:
            await asyncio.sleep(0)  # let the event loop breathe on long runs
            continue
        break
    if kernel.unfinished:
        raise kernel.reports.deadlock()


async def run_until(kernel: Kernel, limit: float) -> None:
    """Run every event at a time ``<= limit``: a hosting process's STEP.

    The bounded twin of ``run``, driven from outside (``hosting.host``, which
    sets the kernel's ``now`` to where the coordinator says the world stands);
    while a rank awaits a foreign future, time waits for it.
    """
    kernel.advance(limit, -1)  # a negative budget never runs out
    while kernel.foreign and kernel.failure is None:  # a rank awaits real I/O: time waits
        if kernel.runnable():
            kernel.advance(limit, -1)
            continue
        kernel.wake_future = future = asyncio.get_running_loop().create_future()
        try:
            await future
        finally:
            kernel.wake_future = None
        kernel.advance(limit, -1)
