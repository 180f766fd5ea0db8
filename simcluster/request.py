"""Requests: the wait handles that nonblocking calls return.

A ``Request`` is created PENDING by the engine and moves once to DONE (with a
value or an error) or to CANCELLED. Awaiting a pending request yields the
request itself to the engine, which parks the rank on it; the engine resumes
the rank at the virtual time the request completes.

Rule 1: only the engine completes a request (``complete``); users only look.
Rule 2: a request is awaited only from the coroutine of the rank that owns it;
an ``asyncio.gather`` of simcluster calls inside a rank is refused with a clear
error, because asyncio would drive those coroutines, not the simulator.
Rule 3: ``wait()``, ``wait_all``, ``wait_any`` and ``wait_some`` check their
arguments at the call and return a coroutine that strict runs note
(``engine.awaits``): a wait that is never awaited fails its rank, naming the call.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    from .engine.task import Task
    from .trace import Trace

T = TypeVar("T")

from .engine import waits as _waits
from .engine.waits import CANCELLED as CANCELLED
from .engine.waits import DONE as DONE
from .engine.waits import PENDING as PENDING
from .engine.waits import test_all as test_all
from .engine.waits import test_any as test_any
from .engine.waits import wait_all as wait_all
from .engine.waits import wait_any as wait_any
from .engine.waits import wait_some as wait_some
_STATE_NAMES = ("pending", "done", "cancelled")

SPIN_LIMIT = 1_000_000
"""test()/iprobe() calls in a row, without awaiting, after which a rank is stopped."""


class Status(NamedTuple):
    """What a receive or probe learned about its message (immutable; a NamedTuple for speed)."""

    source: int
    tag: int
    nbytes: int


make_status: Final = partial(tuple.__new__, Status)
"""``make_status((source, tag, nbytes))``: a Status without the NamedTuple's Python-level ``__new__``
(one per received message; ``tests/test_hot_path.py`` pins the field order)."""


class Checks(Protocol):
    """The run's checks on how ranks use their requests (``engine.checks.RunChecks``).

    ``engine.assembly`` installs them on the kernel (``Waker.checks``); none
    of them runs on the way of a request that is awaited from its own rank.
    """

    def spin(self, req: Request[Any]) -> None:
        """Count a fruitless ``test()`` of ``req``; fail after ``SPIN_LIMIT`` in a row."""

    def check_awaiter(self, req: Request[Any]) -> None:
        """Raise the error for ``req`` awaited outside its rank's own coroutine."""

    def check_hazard(self, req: Request[Any], guard: Any) -> None:
        """Strict isend: check that the send's buffers did not change before the wait."""

    def check_calls(self) -> None:
        """After a rank's step in a strict run: fail its rank if a noted call can no longer be awaited."""

    def outside(self, rank: object, op: str | tuple[Any, ...], verb: str = "called") -> RuntimeError:
        """The error for a simcluster call made or awaited outside its rank's own coroutine."""
        raise NotImplementedError

    def track(self, req: Request[Any]) -> None:
        """Strict runs: track a nonblocking request for the leak report until it is waited for."""

    def untrack(self, req: Request[Any]) -> None:
        """Stop tracking ``req`` for the leak report: it was waited for."""

    def tracked_requests(self) -> list[Request[Any]]:
        """The nonblocking requests not yet waited for."""
        raise NotImplementedError


class Waker:
    """What a request needs of the kernel that completes it: the kernel's declared seam to requests.

    ``engine.kernel.Kernel`` is the one implementation. A native base class
    rather than a ``typing.Protocol``: compiled, a request's reads of the
    clock and its call to hand its waiter back are direct, as they would be
    on the kernel itself.
    """

    now: float  # the current virtual time
    current: Task | None  # the task being stepped right now
    strict: bool  # checks="strict": waits note their coroutines (``engine.awaits``)
    trace: Trace | None  # run(trace=...): waits on nonblocking requests record spans
    checks: Checks  # installed by ``engine.assembly``
    calls: list[Any]  # strict: the calls not yet awaited (``engine.awaits.Note``); a wait notes its own

    def resume_waiter(self, task: Task) -> None:
        """Hand back ``task``, parked on a request that just completed."""
        raise NotImplementedError

    def wake(self, task: Task) -> None:
        """Schedule ``task`` to resume now: the request it was parked on was cancelled."""
        raise NotImplementedError

    def cancel(self, req: Request[Any]) -> bool:
        """Take a pending request out of the queue it waits in; return whether it was there."""
        raise NotImplementedError


class Request(Generic[T]):
    """A handle on a nonblocking operation; ``await req`` waits for it.

    ``await req`` (or ``await req.wait()``) returns the payload for receives and
    ``None`` for sends. ``req.test()`` never blocks and is true once the
    operation has completed at the caller's current virtual time.

    The engine's side, which a user's code has no need of: ``kernel`` (the
    simulator that completes it), ``task`` (the rank's task that made it),
    ``nonblocking`` (made by a nonblocking call: a wait on it shows in traces),
    and the methods ``complete``, ``set_waiter``, ``guard_buffers`` and ``annotate``.
    """

    __slots__ = (
        "kernel", "task", "_state", "_value", "_error", "_waiter",
        "_op", "status", "_guard", "_retrieved", "_peer", "nonblocking", "__weakref__",
    )

    def __init__(self, engine: Waker, task: Task | None, op: str | tuple[Any, ...],
                 peer: int | None = None) -> None:
        self.kernel = engine
        self.task = task
        self._state = PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        self._waiter: Task | None = None
        self._op = op  # a str, or a tuple formatted only when someone reads .op
        self.status: Status | None = None
        self._guard: Any = None  # buffer-hazard check, set by strict isend
        self._retrieved = False
        self._peer = peer  # world rank this request waits on, for the wait-for graph
        self.nonblocking = False

    def peer(self) -> int | None:
        """The world rank this request waits on, for the deadlock report's wait-for graph."""
        return self._peer

    @property
    def owner(self) -> int | None:
        """The world rank that made this request (None for one made outside any rank)."""
        task = self.task
        return None if task is None else task.rank

    @property
    def retrieved(self) -> bool:
        """Whether the request was waited for, or tested true (its result taken)."""
        return self._retrieved

    @property
    def op(self) -> str:
        """The call that made this request, as ``send(dst=1, tag=0)``."""
        op = self._op
        return op if isinstance(op, str) else format_op(op)

    def annotate(self, note: str) -> None:
        """Add ``note`` to the call ``op`` shows (the engine's call: a rendezvous send says so)."""
        self._op = f"{self.op} {note}"

    # ---- engine side ----

    def complete(self, value: Any = None, error: BaseException | None = None) -> None:
        """Complete at the engine's current virtual time and wake the waiter (the engine's call)."""
        if self._state != PENDING:
            return
        self._state = DONE
        self._value = value
        self._error = error
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self.kernel.resume_waiter(waiter)

    def set_waiter(self, task: Task | None) -> None:
        """Park ``task`` on this pending request (None: forget the one parked); the engine's call."""
        self._waiter = task

    def guard_buffers(self, guard: Any) -> None:
        """Keep ``(buffers, checksums, line)`` to check when the request is waited for (strict isend)."""
        self._guard = guard

    # ---- user side ----

    def done(self) -> bool:
        """Return whether the request has completed (or was cancelled)."""
        return self._state != PENDING

    @property
    def cancelled(self) -> bool:
        """True when ``cancel()`` took effect."""
        return self._state == CANCELLED

    def test(self) -> bool:
        """Return True once complete at the current virtual time; never blocks.

        A true result counts as waiting: the buffer-hazard check runs and the
        request is no longer reported as never completed.

        Raises:
            SimclusterError: when called a million times in a row without the
                rank awaiting anything (virtual time cannot advance).
        """
        if self._state == PENDING:
            self.kernel.checks.spin(self)
            return False
        self.result()
        return True

    def cancel(self) -> bool:
        """Cancel a receive that has not been matched yet; return whether it was.

        A cancelled request is done; awaiting it returns ``None`` and its
        ``status`` stays ``None``. Sends and matched receives cannot be cancelled.
        """
        if self._state != PENDING:
            return False
        if not self.kernel.cancel(self):
            return False
        self._state = CANCELLED
        self._retrieved = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self.kernel.wake(waiter)
        return True

    def wait(self) -> Coroutine[Any, Any, T]:
        """Wait until the operation completes and return its result (``await req.wait()``)."""
        coro = _waits.wait_one(self)
        engine = self.kernel
        if engine.strict:
            from .engine import awaits as _awaits

            _awaits.note(engine, coro, "Request.wait")
        return coro

    def __await__(self) -> Generator[Any, None, T]:
        # A generator, not an iterator whose __next__ raises StopIteration(value): compiled,
        # it returns its value through am_send without an exception, whereas a compiled
        # raise builds a traceback entry (a code object and a frame) every time.
        if self._state == PENDING:
            engine = self.kernel
            if engine.current is not self.task or self.task is None:
                engine.checks.check_awaiter(self)  # raises: awaited outside its rank's coroutine
            if self.nonblocking and engine.trace is not None:  # a nonblocking request, traced run
                start = engine.now
                while self._state == PENDING:
                    yield self  # to the engine, which parks the rank until we complete
                assert self.task is not None
                engine.trace.span(self.task.rank, "wait", start, engine.now, op=self.op)
            while self._state == PENDING:
                yield self
        if self._guard is None and self._error is None:  # result(), inline
            self._retrieved = True
            value: T = self._value
            return value
        return self.result()

    def result(self) -> T:
        """Return the result of a completed request, or raise its error; it counts as waiting.

        Raises:
            RuntimeError: the request is still pending.
        """
        if self._state == PENDING:
            raise RuntimeError(f"{self.op}.result(): the request is still pending; await it first")
        self._retrieved = True
        if self._guard is not None:
            guard, self._guard = self._guard, None
            self.kernel.checks.check_hazard(self, guard)
        if self._error is not None:  # raised again on every later wait or test
            raise self._error
        value: T = self._value
        return value

    def __repr__(self) -> str:
        return f"<Request {self.op} {_STATE_NAMES[self._state]}>"


def format_op(op: tuple[Any, ...]) -> str:
    """Format the tuple a point-to-point call stores.

    (name, dst): a collective's send; (name, dst, tag): a send; (name, buf, src, tag): a receive.
    """
    from .payload import describe

    if len(op) == 2:
        return f"{op[0]}(dst={op[1]!r})"
    if len(op) == 3:
        return f"{op[0]}(dst={op[1]!r}, tag={op[2]!r})"
    bufs = "" if op[1] is None else f"buf={describe(op[1])}, "
    # by value, not by the sentinels' reprs: the compiled engine passes them on as plain ints
    src = "ANY_SOURCE" if op[2] == -1 else repr(op[2])
    tag = "ANY_TAG" if op[3] == -1 else repr(op[3])
    return f"{op[0]}({bufs}src={src}, tag={tag})"


class _Done:
    """An awaitable that is already complete: awaiting it returns None at once."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]  # an empty iterator: await returns None


COMPLETED: Final = _Done()
"""Returned where an operation may finish at once (a send, a free reduction) instead of a coroutine."""
