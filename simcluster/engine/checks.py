"""The run's checks on how ranks use their requests and calls, installed on the kernel by ``engine.assembly``.

A request asks them only off its common way: a ``test()`` that finds it
pending (``spin``), an await from outside the rank that owns it
(``check_awaiter``), a strict isend's wait (``check_hazard``). The kernel asks
them after a step of a strict run that noted unawaited calls
(``check_calls``, ``engine.awaits``); the protocol and the nonblocking
collectives hand them strict runs' nonblocking requests for the leak report
(``track``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import awaits as _awaits
from ..errors import SimclusterError
from ..request import SPIN_LIMIT, Request, format_op

if TYPE_CHECKING:
    from .kernel import Kernel


class RunChecks:
    """The ``request.Checks`` of a run, on its kernel (``Kernel.checks``)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.tracked: dict[int, Request[Any]] = {}  # strict: nonblocking requests, for leaks

    def spin(self, req: Request[Any]) -> None:
        """Count a fruitless ``test()`` of ``req``; fail after ``SPIN_LIMIT`` in a row without awaiting."""
        task = self.kernel.current
        if task is None:
            return
        task.spins += 1
        if task.spins > SPIN_LIMIT:
            raise SimclusterError(
                task.rank, f"{req.op}.test()",
                f"polled {SPIN_LIMIT} times without awaiting, so virtual time cannot advance",
                "await the request, or await comm.sleep(dt) between tests")

    def check_awaiter(self, req: Request[Any]) -> None:
        """Raise the error for ``req`` awaited outside its rank's own coroutine (else nothing)."""
        task = req.task
        if self.kernel.current is not task or task is None:
            raise self.outside("?" if task is None else task.rank, req.op, "awaited")

    def outside(self, rank: object, op: str | tuple[Any, ...], verb: str = "called") -> RuntimeError:
        """The error for a simcluster call made or awaited outside its rank's own coroutine."""
        call = op if isinstance(op, str) else format_op(op)
        current = self.kernel.current
        who = "outside any rank" if current is None else f"by rank {current.rank}"
        return RuntimeError(
            f"rank {rank}: {call}: {verb} {who}, not from the rank's own coroutine "
            f"(asyncio.gather/create_task run coroutines outside the simulator); {_awaits.advice(call)}")

    def check_hazard(self, req: Request[Any], guard: Any) -> None:
        """Strict isend: check that the send's buffers did not change before the wait (the reports')."""
        self.kernel.reports.check_hazard(req, guard)

    def check_calls(self) -> None:
        """After a rank's step in a strict run: fail its rank if a noted call can no longer be awaited."""
        _awaits.check(self.kernel)

    def track(self, req: Request[Any]) -> None:
        """Strict runs: track a nonblocking request for the leak report until it is waited for."""
        self.tracked[id(req)] = req

    def untrack(self, req: Request[Any]) -> None:
        """Stop tracking ``req`` for the leak report: it was waited for."""
        self.tracked.pop(id(req), None)

    def tracked_requests(self) -> list[Request[Any]]:
        """Strict runs: the nonblocking requests not yet waited for, for the leak report."""
        return list(self.tracked.values())
