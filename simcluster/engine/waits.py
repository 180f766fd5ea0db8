"""The coroutines behind ``Request.wait()``, ``wait_all``, ``wait_any`` and ``wait_some``.

They live apart from ``request`` because that module is compiled in the
fast build, and a compiled coroutine cannot be inspected: a strict run
checks that each wait coroutine a rank made was awaited (``engine.awaits``), which
needs the state of a Python coroutine. This module always runs interpreted
and imports no module that is compiled; the request states live here so
that ``request`` can import them, and ``request`` re-exports the public
functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from . import awaits as _awaits

if TYPE_CHECKING:
    from .task import Task

T = TypeVar("T")

PENDING: Final = 0  # Final: the compiled modules that import these inline them
DONE: Final = 1
CANCELLED: Final = 2


class Waitable(Protocol):
    """What the waits use of a request (``request.Request``): declared here, so that this module
    imports nothing that imports it (``request`` re-exports the waits)."""

    @property
    def kernel(self) -> Any:
        """The kernel that completes it (``request.Waker``)."""

    @property
    def task(self) -> Task | None:
        """The rank's task that made it."""

    @property
    def retrieved(self) -> bool:
        """Whether its result was taken."""

    def done(self) -> bool: ...

    def test(self) -> bool: ...

    def result(self) -> Any: ...

    def set_waiter(self, task: Task | None) -> None: ...

    def __await__(self) -> Generator[Any, None, Any]: ...


class WaitAny:
    """Yielded to the engine to park a rank on several requests at once."""

    __slots__ = ("requests",)

    def __init__(self, requests: Sequence[Waitable]) -> None:
        self.requests = requests

    def __await__(self) -> Generator[Any, None, None]:
        yield self


def _trace_wait(requests: Sequence[Waitable], name: str, start: float) -> None:
    """Record a span for a wait on several requests that took virtual time."""
    engine = requests[0].kernel
    task = requests[0].task
    if engine.trace is not None and task is not None and engine.now > start:
        engine.trace.span(task.rank, name, start, engine.now, requests=len(requests))


def _unwait(requests: Sequence[Waitable]) -> None:
    """Forget the rank parked on several requests, so the ones still pending cannot wake it later."""
    for r in requests:
        r.set_waiter(None)


async def wait_one(request: Awaitable[T]) -> T:
    return await request


async def _wait_all(reqs: list[Waitable]) -> list[Any]:
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


async def _wait_any(reqs: list[Waitable]) -> tuple[int, Any]:
    start = reqs[0].kernel.now
    while True:
        for i, r in enumerate(reqs):
            if r.done():
                _trace_wait(reqs, "wait_any", start)
                return i, r.result()
        await WaitAny(reqs)
        _unwait(reqs)


async def _wait_some(reqs: list[Waitable]) -> list[tuple[int, Any]]:
    active = [r for r in reqs if not r.retrieved]
    if not active:
        return []
    start = active[0].kernel.now
    while all(not r.done() for r in active):
        await WaitAny(active)
        _unwait(active)
    _trace_wait(active, "wait_some", start)
    return [(i, r.result()) for i, r in enumerate(reqs)
            if r.done() and not r.retrieved]


def _as_list(requests: Iterable[Waitable]) -> list[Waitable]:
    reqs = list(requests)
    for r in reqs:
        if not hasattr(r, "set_waiter"):  # a Request (request imports this module)
            raise TypeError(f"wait/test: expected Request objects, got {type(r).__name__}; "
                            "pass the values returned by isend/irecv/i<collective>")
    return reqs


def _noted(name: str, coro: Coroutine[Any, Any, T], reqs: list[Waitable]) -> Coroutine[Any, Any, T]:
    """Return ``coro``; in strict runs, note it so that one never awaited fails its rank."""
    if reqs and reqs[0].kernel.strict:
        count = f"{len(reqs)} request{'s' if len(reqs) != 1 else ''}"
        _awaits.note(reqs[0].kernel, coro, name, (("", count),))
    return coro


def wait_all(requests: Iterable[Waitable]) -> Coroutine[Any, Any, list[Any]]:
    """Wait for every request; return their results in order (``await sc.wait_all(reqs)``).

    Completes at the latest completion time among them. If one fails, its
    error is raised after all have completed.

    Raises:
        TypeError: an item is not a ``Request`` (at the call).
    """
    reqs = _as_list(requests)
    return _noted("wait_all", _wait_all(reqs), reqs)


def wait_any(requests: Iterable[Waitable]) -> Coroutine[Any, Any, tuple[int, Any]]:
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


def wait_some(requests: Iterable[Waitable]) -> Coroutine[Any, Any, list[tuple[int, Any]]]:
    """Wait until at least one request completes; return every completed ``(index, result)``.

    ``await sc.wait_some(reqs)``; requests already retrieved are skipped, and
    with none left it returns ``[]`` at once.
    """
    reqs = _as_list(requests)
    return _noted("wait_some", _wait_some(reqs), reqs)


def test_all(requests: Iterable[Waitable]) -> bool:
    """Return True if every request has completed; never blocks."""
    reqs = _as_list(requests)
    if any(not r.done() for r in reqs):  # like MPI_Testall: nothing completes unless all do
        if reqs:
            reqs[0].kernel.checks.spin(reqs[0])
        return False
    return all([r.test() for r in reqs])


def test_any(requests: Iterable[Waitable]) -> tuple[int, Any] | None:
    """Return ``(index, result)`` of the first completed request, or None; never blocks."""
    reqs = _as_list(requests)
    for i, r in enumerate(reqs):
        if r.test():
            return i, r.result()
    return None


# pytest would collect these as tests when a test module imports them by name.
test_all.__test__ = False  # type: ignore[attr-defined]
test_any.__test__ = False  # type: ignore[attr-defined]
