"""Work: torch.distributed's handle on an operation, over a simcluster request.

Every backend call starts a simcluster operation at once (a nonblocking
collective or point-to-point request) and returns a ``Work`` that owns it.
``wait()`` blocks the rank (``engine.sync.block``: the rank hands the baton back to
the engine until the request completes), then ``finish`` copies the result
into the caller's output tensors.

Rule 1: a Work completes only through Python. torch's C++ waits inside
``backward()`` (DistributedDataParallel's reducer) on the *future* a Work hands
out, and a C++ wait cannot give the baton back to the engine; so
``get_future()`` blocks first and hands out a future that is already complete.
Rule 2: ``finish`` runs exactly once, in the rank that owns the request, the
first time ``wait()``, ``is_completed()`` (true) or ``get_future()`` sees it done.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future

from simcluster.engine import sync as _sync
from simcluster.errors import ProcessFailedError
from simcluster.request import Request

Finish = Callable[[Any], None]


def _peer_closed(exc: ProcessFailedError) -> RuntimeError:
    """What gloo raises when a peer's process dies: a RuntimeError saying the connection closed."""
    ranks = ", ".join(str(r) for r in exc.failed)
    return RuntimeError(f"Connection closed by peer [rank {ranks}]. This is typically caused by a "
                        f"remote worker crashing (simcluster: {exc.problem}, the run's fault plan). "
                        "Check the logs of the remote worker before reporting an error.")


class SimclusterWork(dist.Work):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """The Work a ``"simcluster"`` process group returns for every operation.

    Completes when its simcluster request does; ``wait()`` blocks this rank
    (in virtual time) until then. ``result()`` gives the output tensors.
    """

    def __init__(self, req: Request[Any] | None, outputs: list[torch.Tensor],
                 finish: Finish | None = None, op: str = "") -> None:
        super().__init__()
        self._req = req
        self._outputs = outputs
        self._finish = finish
        self._op = op
        self._done = req is None
        self._source: int = -1

    def __del__(self) -> None:
        # torch's own code drops collective handles it never waits for (DDP under Join drops
        # the all_reduce telling the others it has not joined yet). An in-place result lands
        # when the operation completes, as gloo's does, so such a handle is no leak; a dropped
        # send or receive is still reported, as the script's own.
        req = self._req
        if req is not None and self._finish is None and self._op not in ("send", "recv"):
            req.kernel.untrack(req)

    def _complete(self, value: Any) -> None:
        self._done = True
        self._req = None
        finish, self._finish = self._finish, None
        if finish is not None:
            finish(value)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block this rank until the operation completes; return True.

        Raises:
            SimclusterError: the operation failed (a mismatch, a truncated
                receive, ...); the same error ends the run if not caught.
        """
        req = self._req
        if req is not None:
            try:
                value = _sync.block(req)
            except ProcessFailedError as exc:
                raise _peer_closed(exc) from exc
            if req.status is not None:
                self._source = req.status.source
            self._complete(value)
        return True

    def is_completed(self) -> bool:
        """Return whether the operation has completed at this rank's virtual time; never blocks."""
        req = self._req
        if req is not None and req.test():
            if req.status is not None:
                self._source = req.status.source
            try:
                value = req.result()
            except ProcessFailedError as exc:
                raise _peer_closed(exc) from exc
            self._complete(value)
        return self._done

    def is_success(self) -> bool:
        """Return whether the operation completed (errors raise at ``wait``)."""
        return self.is_completed()

    def exception(self) -> None:
        """Return None: a failed operation raises at ``wait()`` instead."""
        return None

    def result(self) -> list[torch.Tensor]:
        """Return the output tensors (waiting first)."""
        self.wait()
        return self._outputs

    def get_future(self) -> Future[list[torch.Tensor]]:
        """Wait for the operation, then return a future already holding the output tensors.

        Blocks first (Rule 1): the future torch's C++ later waits on is complete.
        """
        self.wait()
        fut: Future[list[torch.Tensor]] = Future()
        fut.set_result(self._outputs)
        return fut

    def _source_rank(self) -> int:
        """Return the group rank a receive from any source took its message from."""
        self.wait()
        return self._source

    def source_rank(self) -> int:
        """Return the group rank a receive from any source took its message from."""
        return self._source_rank()

    def synchronize(self) -> None:
        """Nothing to do on the CPU: ``wait()`` already made the outputs ready."""

    def __repr__(self) -> str:
        state = "completed" if self._done else "pending"
        return f"<SimclusterWork {self._op} {state}>"


_sync.measured_calls(SimclusterWork)  # wait() and the rest: calls into simcluster (measured compute)
