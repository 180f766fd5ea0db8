"""Compute on a modelled GPU: ``compute="gpu:h100_sxm"`` (``spawn``, ``simcluster torchrun --compute``).

Each rank runs its code under a ``RankClock``, a ``GpuClock`` (simcluster.predict.compute) of its
own: every aten op the rank's code runs, on real or fake tensors, adds its predicted seconds. The
rank's ``Meter`` (engine.sync, measured compute) reads that clock instead of a wall or CPU clock,
so the predicted time is charged where measured compute is charged: at the entry of each call
into the torch backend, ``Work.wait()`` and the clocks of ``time``, and when the rank ends, as a
virtual sleep traced as a span ``compute`` on the rank's compute stream.

Rule 1: ops that run inside simcluster (a collective's copies and reductions) are the network's,
not the compute stream's: the clock skips them (the meter is stopped, ``depth`` > 0), so what a
rank is charged is exactly ``seconds``.
Rule 2: a collective started with ``async_op=True`` progresses in virtual time while the charge
of the compute after it elapses, and ``wait()`` blocks only until it completes: a step of an async
collective and independent compute takes max(compute, communication), not the sum.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..engine import sync as _sync
from ..predict.compute import GpuClock


class RankClock(GpuClock):
    """One rank's ``GpuClock``: counts the ops of the rank's own code only (Rule 1)."""

    def __init__(self, device: Any, meter: _sync.Meter) -> None:
        super().__init__(device, keep_ops=False)
        self.meter = meter

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if self.meter.depth:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def reading(self) -> float:
        """The meter's clock: the predicted seconds so far."""
        return self.seconds


def attach(rank: _sync.SyncRank | None) -> RankClock | None:
    """Make the rank's ``RankClock`` and set its meter to read it (None: not a ``gpu:`` run).

    Call on the rank's own thread, with its clock stopped; enter the returned mode around the
    rank's code (``clocked``) or for the rest of the thread (``__enter__``).
    """
    meter = None if rank is None else rank.meter
    if meter is None or meter.compute.device is None:
        return None
    clock = RankClock(meter.compute.device, meter)
    meter.clock = clock.reading
    meter.since = 0.0
    return clock


def clocked(clock: RankClock | None) -> contextlib.AbstractContextManager[Any]:
    """``with clocked(attach(rank)):`` the rank's code, timed (nothing when ``clock`` is None)."""
    return contextlib.nullcontext() if clock is None else clock
