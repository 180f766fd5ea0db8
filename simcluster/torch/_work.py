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
Rule 3: timeouts are virtual, as gloo's are real: an operation of a group made
with a timeout of its own (``init_process_group(timeout=)``, ``new_group(timeout=)``,
``barrier(timeout=)``) that has not completed that much virtual time after it
started raises gloo's timeout error at that virtual time, and its group then
fails every later operation on this rank, as gloo's closed pairs do (and, the
group's communicator revoked, the other members' operations on it raise gloo's
"Connection closed by peer"); ``wait(timeout)`` raises gloo's "Operation timed
out!" and leaves the operation running. Under torch's default
timeout (30 minutes) an operation that can never complete is simcluster's
deadlock report instead, which names the lines of every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.futures import Future

from simcluster.engine import sync as _sync
from simcluster.engine.kernel import Kernel
from simcluster.errors import ProcessFailedError, RevokedError
from simcluster.request import Request, wait_any
from simcluster.torch import _gpu, _profiler

Finish = Callable[[Any], None]

GLOO_TIMEOUT = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:{line}] "
                "Timed out waiting {ms}ms for {what} operation to complete")
"""gloo's error when an operation's timeout passes: a receive (line 78) or a send (129) waits on."""
GLOO_CLOSED = "Application timeout caused pair closure"
"""gloo's error for an operation on a group whose earlier operation timed out on this rank."""
GLOO_WAIT_TIMEOUT = "Operation timed out!"
"""gloo's error when ``Work.wait(timeout)`` passes before the operation completes."""
_RECEIVING = frozenset({"barrier", "recv", "monitored_barrier"})
"""Operations whose timed-out wait is a receive in gloo; the others time out on a send."""


def timeout_error(op: str, seconds: float) -> RuntimeError:
    """gloo's timeout error for ``op`` after ``seconds``."""
    receiving = op in _RECEIVING
    return RuntimeError(GLOO_TIMEOUT.format(line=78 if receiving else 129, ms=milliseconds(seconds),
                                            what="recv" if receiving else "send"))


def milliseconds(seconds: float) -> int:
    """A timeout as gloo prints it: whole milliseconds."""
    return int(round(seconds * 1000))


def seconds_of(timeout: timedelta | None) -> float | None:
    """A ``timedelta`` timeout in seconds; None for none (None, or torch's 0 "no timeout")."""
    if timeout is None:
        return None
    value = timeout.total_seconds()
    return value if value > 0 else None


class Expiry:
    """Where an operation's virtual timeout stands: its deadline and what its group does then.

    ``group`` is told (``timed_out()``) when the deadline passes, so it fails
    what comes next as gloo's closed pairs do.
    """

    __slots__ = ("deadline", "seconds", "group")

    def __init__(self, deadline: float, seconds: float, group: Any) -> None:
        self.deadline = deadline
        self.seconds = seconds
        self.group = group


def wait_until(req: Request[Any], deadline: float) -> tuple[bool, Any]:
    """Block this rank until ``req`` completes or virtual time reaches ``deadline``.

    Returns (True, value) when ``req`` completed first (at the same instant it
    wins), (False, None) when the deadline came first, ``req`` still pending.
    """
    kernel = cast(Kernel, req.kernel)  # every request's kernel (request.Waker) is the Kernel
    if not req.done():
        remaining = deadline - kernel.now
        if remaining <= 0:
            return False, None
        timer = kernel.post_sleep(remaining, "timeout")
        index, value = _sync.block(wait_any([req, timer]))
        if index == 1:
            return False, None
        return True, value
    return True, _sync.block(req)


def closed_by(exc: RevokedError) -> RuntimeError:
    """What gloo raises on a group whose operation timed out on another rank: that rank closed it."""
    return RuntimeError(f"Connection closed by peer [rank {exc.by}]. This is typically caused by a "
                        "remote worker crashing (simcluster: an operation of this group timed out "
                        f"there at virtual time {exc.time:.9g} s). Check the logs of the remote "
                        "worker before reporting an error.")


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
                 finish: Finish | None = None, op: str = "", expiry: Expiry | None = None,
                 error: BaseException | None = None) -> None:
        super().__init__()
        self._req = req
        self._outputs = outputs
        self._finish = finish
        self._op = op
        self._done = req is None and error is None
        self._source: int = -1
        self._expiry = expiry if req is not None else None
        self._error = error  # raised by wait(): the operation failed (a timeout, a closed group)
        self.spans: list[Any] = []  # the profiler's spans of this operation, ended when it is done
        self.args: tuple[Any, ...] = ()  # the backend call's arguments (compute="gpu:...": its tensors)

    def __del__(self) -> None:
        # torch's own code drops collective handles it never waits for (DDP under Join drops
        # the all_reduce telling the others it has not joined yet). An in-place result lands
        # when the operation completes, as gloo's does, so such a handle is no leak; a dropped
        # send or receive is still reported, as the script's own.
        req = self._req
        if req is not None and self._finish is None and self._op not in ("send", "recv"):
            req.kernel.checks.untrack(req)

    def _complete(self, value: Any) -> None:
        self._done = True
        self._req = None
        finish = self._finish
        if finish is not None:
            self._finish = None
            finish(value)
        if self.spans:
            self.end_spans()

    def end_spans(self) -> None:
        """End the operation's profiler spans (once it completed or failed)."""
        spans, self.spans = self.spans, []
        for span in spans:
            _profiler.close_span(span)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block this rank until the operation completes; return True.

        Under ``compute="gpu:..."``, torch's own wait of a synchronous tensor collective enqueues
        it on the rank's communication stream instead, and any other wait first waits for every
        collective so enqueued (``_gpu``, Rule 3).

        Raises:
            SimclusterError: the operation failed (a mismatch, a truncated
                receive, ...); the same error ends the run if not caught.
        """
        if self._error is not None:
            raise self._error
        req = self._req
        if req is None:
            return True
        rank = _sync.current()
        meter = None if rank is None else rank.meter
        streams = None if meter is None else meter.streams  # _gpu.streams(), inline: every call
        if streams is not None:
            if timeout is None and _gpu.synchronous():
                streams.enqueue(self, *self._tensors())
                return True
            streams.drain()  # may have completed this one, or failed it: _block looks again
            return self._block(timeout)
        if timeout is not None or self._expiry is not None:
            return self._block(timeout)
        try:  # _block's common case, inline: no timeout
            value = _sync.block(req, rank)
        except ProcessFailedError as exc:
            raise _peer_closed(exc) from exc
        except RevokedError as exc:
            raise closed_by(exc) from exc
        self._take_result(req, value)
        return True

    def _tensors(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The operation's (input, output) tensors: its outputs, and the other tensors of its call."""
        outputs = self._outputs
        inputs: list[torch.Tensor] = []
        for arg in self.args:
            items = arg if isinstance(arg, (list, tuple)) else [arg]
            for item in items:
                for tensor in (item if isinstance(item, (list, tuple)) else [item]):
                    if isinstance(tensor, torch.Tensor) and not any(tensor is o for o in outputs):
                        inputs.append(tensor)
        return inputs, outputs

    def _block(self, timeout: timedelta | None = None) -> bool:
        """``wait()`` itself: block until the operation completes, then write its results."""
        if self._error is not None:
            raise self._error
        req = self._req
        if req is not None:
            expiry, limit = self._expiry, seconds_of(timeout)
            try:
                if expiry is None and limit is None:
                    value = _sync.block(req)
                else:
                    value = self._wait_until(req, expiry, limit)
            except ProcessFailedError as exc:
                raise _peer_closed(exc) from exc
            except RevokedError as exc:
                raise closed_by(exc) from exc
            self._take_result(req, value)
        return True

    def _take_result(self, req: Request[Any], value: Any) -> None:
        """The request completed with ``value`` and was waited for: write the results."""
        status = req.status
        if status is not None:
            self._source = status.source
        self._complete(value)
        req.kernel.checks.untrack(req)  # waited: the leak check lets go of it, and of its tensors

    def _wait_until(self, req: Request[Any], expiry: Expiry | None, limit: float | None) -> Any:
        """Block until ``req`` completes, or raise gloo's error when a timeout passes first (Rule 3)."""
        now = req.kernel.now
        waited = now + limit if limit is not None else None
        deadline = expiry.deadline if expiry is not None else None
        if deadline is None or (waited is not None and waited < deadline):
            assert waited is not None
            done, value = wait_until(req, waited)
            if not done:  # the caller stops waiting; the operation goes on (gloo's wait(timeout))
                raise RuntimeError(GLOO_WAIT_TIMEOUT)
            return value
        done, value = wait_until(req, deadline)
        if not done:  # the operation is given up, as gloo's is: no leak report for it
            assert expiry is not None
            req.kernel.checks.untrack(req)
            self._req = None
            self._error = timeout_error(self._op, expiry.seconds)
            self.end_spans()
            if expiry.group is not None:
                expiry.group.timed_out()
            raise self._error
        return value

    def is_completed(self) -> bool:
        """Return whether the operation has completed at this rank's virtual time; never blocks."""
        if self._error is not None:
            return True
        req = self._req
        if req is not None and req.test():
            if req.status is not None:
                self._source = req.status.source
            try:
                value = req.result()
            except ProcessFailedError as exc:
                raise _peer_closed(exc) from exc
            except RevokedError as exc:
                raise closed_by(exc) from exc
            self._complete(value)
        return self._done

    def is_success(self) -> bool:
        """Return whether the operation completed without an error (errors raise at ``wait``)."""
        return self.is_completed() and self._error is None

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
