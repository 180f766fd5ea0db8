"""Meetings: requests that complete once every member of a group has arrived (analytic collectives).

Under ``fidelity="analytic"`` a collective sends no message: each member
deposits its arguments in a meeting (``CollContext.meet``), and when the last
one arrives the collective's cost model resolves every member's result and
the virtual time at which all of them complete (``collectives.analytic``).
``MPI.Comm.Connect``/``Accept`` meet the same way. A crash or a revoke ends
the meetings of the communicators it touches (``engine.failures``:
``drop``). The ULFM ``agree`` and ``shrink`` meet in ``engine.failures``,
whose meetings also hear of members that crashed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .kernel import finish_each
from ..request import Request

if TYPE_CHECKING:
    from .kernel import Kernel


class Meetings:
    """The open meetings of a run, by key; the engine holds one (``Engine.meetings``)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        # key -> (values, arrival times, requests, [members arrived]), each indexed by member
        self.open: dict[Any, tuple[list[Any], list[float], list[Any], list[int]]] = {}

    def meet(self, key: Any, size: int, rank: int, value: Any, op: str,
             resolve: Callable[[list[Any], list[float]], tuple[list[Any], float]]) -> Request[Any]:
        """Join a meeting of ``size`` members as member ``rank``; return a request for its result.

        Each member deposits ``value`` at its current time. When the last one
        arrives, ``resolve(values, times)`` returns every member's result and
        the virtual time at which all of them complete; each member's request
        then completes at that time with its result.
        """
        kernel = self.kernel
        req: Request[Any] = Request(kernel, kernel.current, op)
        meeting = self.open.get(key)
        if meeting is None:
            meeting = self.open[key] = ([None] * size, [0.0] * size, [None] * size, [0])
        values, times, reqs, count = meeting
        values[rank], times[rank], reqs[rank] = value, kernel.now, req
        count[0] += 1
        if count[0] == size:
            del self.open[key]
            results, done_at = resolve(values, times)
            # one event completes every member (an event per member cost 1/3 of an
            # analytic collective), in this run's seeded order
            kernel.schedule(max(done_at, kernel.now), finish_each, kernel.order(list(zip(reqs, results))))
        return req

    def drop(self, contexts: set[int]) -> list[Request[Any]]:
        """End the meetings of the communicators ``contexts``: return their members' requests."""
        dropped: list[Request[Any]] = []
        for key in [k for k in self.open if k[0] in contexts]:
            dropped.extend(r for r in self.open.pop(key)[2] if r is not None)
        return dropped
