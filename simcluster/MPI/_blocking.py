"""Blocking calls from a synchronous rank, and the simcluster errors they turn into MPI errors.

Every MPI call that waits goes through :func:`block`, which runs a simcluster
awaitable on the rank's own stack (``engine.sync.block``): the rank switches to the
engine where it would wait, so virtual time, deadlock reports (with the user's
own line), traces and checks are the engine's.

A receive that fails the way MPI fails (a message larger than the buffer, a
message of another type) comes back from simcluster as ``TruncationError`` or
``TypeError``; :func:`receive_error` rewrites it as the MPI error of the call
the user made (``Recv(buf=..., source=..., tag=...)``), keeping simcluster's
description of the problem.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from ..engine import sync as _sync
from ..errors import ProcessFailedError, RevokedError, TruncationError
from ._constants import ERR_TRUNCATE, ERR_TYPE
from ._errors import _Raised, error, ulfm_error

T = TypeVar("T")


class _Ready:
    """An awaitable that completes at once (what a poll waits for when it is already there)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


READY = _Ready()


def block(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` to completion from the calling synchronous rank and return its value.

    A call a crash or a revocation cut short raises ULFM's MPI error (``ulfm_error``).
    """
    try:
        return _sync.block(awaitable)
    except (ProcessFailedError, RevokedError) as exc:
        raise ulfm_error(exc) from None


def block_receive(awaitable: Awaitable[T], rank: int, call: Callable[[], str]) -> T:
    """``block`` for a receive: simcluster's truncation and type errors become MPI errors of ``call()``."""
    try:
        return _sync.block(awaitable)
    except (TruncationError, TypeError, ProcessFailedError, RevokedError) as exc:
        converted = receive_error(exc, rank, call)
        if converted is None:
            raise
        raise converted from None


def poll(check: Callable[[], T], wait: Callable[[], Awaitable[Any]], op: Callable[[], str]) -> T:
    """Run a check that never blocks (a request's test, an iprobe) from a synchronous rank.

    A check that finds nothing costs the rank the run's ``poll_cost`` of
    virtual time (``engine.sync.poll_wait``), so a polling loop advances the clock
    until what it polls for arrives; ``wait()`` waits for that thing, for a run
    where nothing but polls is left (a deadlock is then reported as one).
    """
    found = check()
    if not found:
        rank = _sync.current()
        if rank is not None:
            _sync.poll_wait(rank, wait, op())
    return found


def receive_error(exc: BaseException, rank: int, call: Callable[[], str]) -> _Raised | None:
    """Return the MPI error for a failed receive, or None when ``exc`` is not a receive failure."""
    if isinstance(exc, _Raised):
        return None
    if isinstance(exc, (ProcessFailedError, RevokedError)):
        return ulfm_error(exc)
    text = str(exc)
    if isinstance(exc, TruncationError):
        problem = _problem(text, exc.op)
        return error(ERR_TRUNCATE, rank, call(), problem,
                     "pass a larger buffer, or size it with Probe() and Status.Get_count() first")
    if isinstance(exc, TypeError) and " but buf has dtype " in text:
        problem = text.split(": ", 2)[-1].split("; ")[0]
        problem = problem.replace(" but buf has dtype ", " but the buffer holds ")
        return error(ERR_TYPE, rank, call(), problem,
                     "receive with the datatype the sender used (MPI type matching)")
    return None


def _problem(text: str, op: object) -> str:
    """Return the 'what happened' part of a simcluster error message."""
    head = f": {op}: "
    start = text.find(head)
    body = text[start + len(head):] if start >= 0 else text
    return body.rsplit("; ", 1)[0]
