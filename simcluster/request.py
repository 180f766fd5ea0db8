"""Requests: the wait handles that nonblocking calls return.

A ``Request`` is created PENDING by the engine and moves once to DONE (with a
value or an error) or to CANCELLED. Awaiting a pending request yields the
request itself to the engine, which parks the rank on it; the engine resumes
the rank at the virtual time the request completes.

Rule 1: only the engine completes a request (``_finish``); users only look.
Rule 2: a request is awaited only from the coroutine of the rank that owns it;
an ``asyncio.gather`` of simcluster calls inside a rank is refused with a clear
error, because asyncio would drive those coroutines, not the simulator.
Rule 3: ``wait()``, ``wait_all``, ``wait_any`` and ``wait_some`` check their
arguments at the call and return a coroutine that strict runs note
(``_awaits``): a wait that is never awaited fails its rank, naming the call.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar

if TYPE_CHECKING:
    from ._kernel import Kernel, Task

T = TypeVar("T")

PENDING = 0
DONE = 1
CANCELLED = 2
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


class Request(Generic[T]):
    """A handle on a nonblocking operation; ``await req`` waits for it.

    ``await req`` (or ``await req.wait()``) returns the payload for receives and
    ``None`` for sends. ``req.test()`` never blocks and is true once the
    operation has completed at the caller's current virtual time.
    """

    __slots__ = (
        "_engine", "_task", "_state", "_value", "_error", "_waiter",
        "_op", "status", "_guard", "_retrieved", "_peer", "_nb", "__weakref__",
    )

    def __init__(self, engine: Kernel, task: Task | None, op: str | tuple[Any, ...],
                 peer: int | None = None) -> None:
        self._engine = engine
        self._task = task
        self._state = PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        self._waiter: Task | None = None
        self._op = op  # a str, or a tuple formatted only when someone reads .op
        self.status: Status | None = None
        self._guard: Any = None  # buffer-hazard check, set by strict isend
        self._retrieved = False
        self._peer = peer  # world rank this request waits on, for the wait-for graph
        self._nb = False  # made by a nonblocking call: waiting on it shows in traces

    @property
    def op(self) -> str:
        """The call that made this request, as ``send(dst=1, tag=0)``."""
        op = self._op
        return op if isinstance(op, str) else _format_op(op)

    # ---- engine side ----

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        """Complete at the engine's current virtual time and wake the waiter."""
        if self._state != PENDING:
            return
        self._state = DONE
        self._value = value
        self._error = error
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self._engine.resume_waiter(waiter)

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
            self._engine.spin(self)
            return False
        self._take_result()
        return True

    def cancel(self) -> bool:
        """Cancel a receive that has not been matched yet; return whether it was.

        A cancelled request is done; awaiting it returns ``None`` and its
        ``status`` stays ``None``. Sends and matched receives cannot be cancelled.
        """
        if self._state != PENDING:
            return False
        if not self._engine.cancel(self):
            return False
        self._state = CANCELLED
        self._retrieved = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self._engine.wake(waiter)
        return True

    def wait(self) -> Coroutine[Any, Any, T]:
        """Wait until the operation completes and return its result (``await req.wait()``)."""
        coro = self._wait()
        engine = self._engine
        if engine.strict:
            from . import _awaits

            _awaits.note(engine, coro, "Request.wait")
        return coro

    async def _wait(self) -> T:
        return await self

    def __await__(self) -> Generator[Any, None, T]:
        # The request is its own await iterator (__next__ below): a generator per await
        # would cost about 250 bytes per blocked rank, and its allocation per message.
        if self._state == PENDING:
            engine = self._engine
            if engine.current is not self._task or self._task is None:
                engine.check_awaiter(self)  # raises: awaited outside its rank's coroutine
            if self._nb and engine.trace is not None:
                return self._traced_wait()
        return self  # type: ignore[return-value]

    def __next__(self) -> Request[T]:
        """One step of ``await``: hand this request to the engine while pending, else finish."""
        if self._state == PENDING:
            return self  # yielded to the engine, which parks the rank until we complete
        if self._guard is None and self._error is None:  # _take_result, inline
            self._retrieved = True
            raise StopIteration(self._value)
        raise StopIteration(self._take_result())

    def _traced_wait(self) -> Generator[Any, None, T]:
        """``await`` that records the wait in the trace (a nonblocking request, traced run)."""
        engine = self._engine
        start = engine.now
        yield self
        assert self._task is not None
        engine.trace.span(self._task.rank, "wait", start, engine.now, op=self.op)  # type: ignore[union-attr]
        return self._take_result()

    def _take_result(self) -> T:
        self._retrieved = True
        if self._guard is not None:
            guard, self._guard = self._guard, None
            self._engine.check_hazard(self, guard)
        if self._error is not None:  # raised again on every later wait or test
            raise self._error
        value: T = self._value
        return value

    def __repr__(self) -> str:
        return f"<Request {self.op} {_STATE_NAMES[self._state]}>"


def _format_op(op: tuple[Any, ...]) -> str:
    """Format the tuple a point-to-point call stores.

    (name, dst): a collective's send; (name, dst, tag): a send; (name, buf, src, tag): a receive.
    """
    from .payload import describe

    if len(op) == 2:
        return f"{op[0]}(dst={op[1]!r})"
    if len(op) == 3:
        return f"{op[0]}(dst={op[1]!r}, tag={op[2]!r})"
    bufs = "" if op[1] is None else f"buf={describe(op[1])}, "
    return f"{op[0]}({bufs}src={op[2]!r}, tag={op[3]!r})"


class _Done:
    """An awaitable that is already complete: awaiting it returns None at once."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]  # an empty iterator: await returns None


COMPLETED: Final = _Done()
"""Returned where an operation may finish at once (a send, a free reduction) instead of a coroutine."""


class _WaitAny:
    """Yielded to the engine to park a rank on several requests at once."""

    __slots__ = ("requests",)

    def __init__(self, requests: Sequence[Request[Any]]) -> None:
        self.requests = requests

    def __await__(self) -> Generator[Any, None, None]:
        yield self


def _as_list(requests: Iterable[Request[Any]]) -> list[Request[Any]]:
    reqs = list(requests)
    for r in reqs:
        if not isinstance(r, Request):
            raise TypeError(f"wait/test: expected Request objects, got {type(r).__name__}; "
                            "pass the values returned by isend/irecv/i<collective>")
    return reqs


def _trace_wait(requests: Sequence[Request[Any]], name: str, start: float) -> None:
    """Record a span for a wait on several requests that took virtual time."""
    engine = requests[0]._engine
    task = requests[0]._task
    if engine.trace is not None and task is not None and engine.now > start:
        engine.trace.span(task.rank, name, start, engine.now, requests=len(requests))


def _unwait(requests: Sequence[Request[Any]]) -> None:
    """Forget the rank parked on several requests, so the ones still pending cannot wake it later."""
    for r in requests:
        r._waiter = None


def _noted(name: str, coro: Coroutine[Any, Any, T], reqs: list[Request[Any]]) -> Coroutine[Any, Any, T]:
    """Return ``coro``; in strict runs, note it so that one never awaited fails its rank."""
    if reqs and reqs[0]._engine.strict:
        from . import _awaits

        count = f"{len(reqs)} request{'s' if len(reqs) != 1 else ''}"
        _awaits.note(reqs[0]._engine, coro, name, (("", count),))
    return coro


def wait_all(requests: Iterable[Request[Any]]) -> Coroutine[Any, Any, list[Any]]:
    """Wait for every request; return their results in order (``await sc.wait_all(reqs)``).

    Completes at the latest completion time among them. If one fails, its
    error is raised after all have completed.

    Raises:
        TypeError: an item is not a ``Request`` (at the call).
    """
    reqs = _as_list(requests)
    return _noted("wait_all", _wait_all(reqs), reqs)


async def _wait_all(reqs: list[Request[Any]]) -> list[Any]:
    results: list[Any] = []
    first_error: BaseException | None = None
    for r in reqs:
        try:
            results.append(await r)
        except Exception as exc:  # every request must still be waited
            results.append(None)
            if first_error is None:
                first_error = exc
    if first_error is not None:
        raise first_error
    return results


def wait_any(requests: Iterable[Request[Any]]) -> Coroutine[Any, Any, tuple[int, Any]]:
    """Wait until one request completes; return ``(index, result)`` (``await sc.wait_any(reqs)``).

    Among requests already complete, the lowest index wins.

    Raises:
        ValueError: the list is empty (at the call).
        TypeError: an item is not a ``Request`` (at the call).
    """
    reqs = _as_list(requests)
    if not reqs:
        raise ValueError("wait_any([]): no requests to wait for; pass at least one request")
    return _noted("wait_any", _wait_any(reqs), reqs)


async def _wait_any(reqs: list[Request[Any]]) -> tuple[int, Any]:
    start = reqs[0]._engine.now
    while True:
        for i, r in enumerate(reqs):
            if r._state != PENDING:
                _trace_wait(reqs, "wait_any", start)
                return i, r._take_result()
        await _WaitAny(reqs)
        _unwait(reqs)


def wait_some(requests: Iterable[Request[Any]]) -> Coroutine[Any, Any, list[tuple[int, Any]]]:
    """Wait until at least one request completes; return every completed ``(index, result)``.

    ``await sc.wait_some(reqs)``; requests already retrieved are skipped, and
    with none left it returns ``[]`` at once.
    """
    reqs = _as_list(requests)
    return _noted("wait_some", _wait_some(reqs), reqs)


async def _wait_some(reqs: list[Request[Any]]) -> list[tuple[int, Any]]:
    active = [r for r in reqs if not r._retrieved]
    if not active:
        return []
    start = active[0]._engine.now
    while all(r._state == PENDING for r in active):
        await _WaitAny(active)
        _unwait(active)
    _trace_wait(active, "wait_some", start)
    return [(i, r._take_result()) for i, r in enumerate(reqs)
            if r._state != PENDING and not r._retrieved]


def test_all(requests: Iterable[Request[Any]]) -> bool:
    """Return True if every request has completed; never blocks."""
    reqs = _as_list(requests)
    if any(r._state == PENDING for r in reqs):  # like MPI_Testall: nothing completes unless all do
        if reqs:
            reqs[0]._engine.spin(reqs[0])
        return False
    return all([r.test() for r in reqs])


def test_any(requests: Iterable[Request[Any]]) -> tuple[int, Any] | None:
    """Return ``(index, result)`` of the first completed request, or None; never blocks."""
    reqs = _as_list(requests)
    for i, r in enumerate(reqs):
        if r.test():
            return i, r._value
    return None


# pytest would collect these as tests when a test module imports them by name.
test_all.__test__ = False  # type: ignore[attr-defined]
test_any.__test__ = False  # type: ignore[attr-defined]
