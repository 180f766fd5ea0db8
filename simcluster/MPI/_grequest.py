"""Generalized requests: ``Grequest.Start(query_fn, free_fn, cancel_fn)`` and ``Complete``.

A generalized request is one the program completes itself: ``Start`` returns
it pending, ``Complete()`` (or ``complete(obj)``, whose ``obj`` the lowercase
``test``/``wait`` return) marks it done, and the usual ``Test``/``Wait``/
``Waitall``... then complete it, calling ``query_fn(status, *args, **kwargs)``
to fill the status and ``free_fn(*args, **kwargs)`` once it is done with.
``Cancel()`` calls ``cancel_fn(completed, *args, **kwargs)``.

An exception a callback raises is printed to ``sys.stderr`` (with its
traceback) and raised by the call as an ``MPI.Exception``: of the callback's
own error class when it raised an ``MPI.Exception``, else ``ERR_OTHER``.

Rule 1: a rank waits for a generalized request only after it was completed:
nothing can complete it while the rank that holds it is blocked, so waiting
for a pending one is an ``ERR_REQUEST`` error, where MPI would hang.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from ._constants import ERR_OTHER, ERR_REQUEST
from ._errors import Exception as MPIException
from ._errors import error
from ._requests import Request
from ._status import Status


class _Generalized:
    """The operation behind a Grequest: its callbacks and whether ``Complete`` was called."""

    __slots__ = ("query", "free", "cancel", "args", "kwargs", "completed", "value", "freed")

    def __init__(self, query: Callable[..., Any] | None, free: Callable[..., Any] | None,
                 cancel: Callable[..., Any] | None, args: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> None:
        self.query, self.free, self.cancel = query, free, cancel
        self.args, self.kwargs = tuple(args), dict(kwargs)
        self.completed = False
        self.value: Any = None
        self.freed = False

    def done(self) -> bool:
        return self.completed


def _current_rank() -> int | None:
    from ._state import current

    try:
        return current().world.rank
    except RuntimeError:
        return None


class Grequest(Request):
    """A generalized request (mpi4py's ``MPI.Grequest``)."""

    __slots__ = ()

    _family = "Grequest"

    @classmethod
    def Start(cls, query_fn: Callable[..., Any] | None = None,
              free_fn: Callable[..., Any] | None = None,
              cancel_fn: Callable[..., Any] | None = None,
              args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None
              ) -> Grequest:
        """Return a new pending generalized request; ``Complete()`` it when its work is done."""
        gen = _Generalized(query_fn, free_fn, cancel_fn, args or (), kwargs or {})
        rank = _current_rank()
        # _of makes an instance of cls; its annotations name only the simcluster requests it holds
        req = cls._of(gen, -1 if rank is None else rank, lambda: "Grequest.Start()")  # type: ignore[arg-type]
        return cast(Grequest, req)

    def _gen(self, call: str) -> _Generalized:
        gen = self._req
        if not isinstance(gen, _Generalized):
            raise error(ERR_REQUEST, self._rank, f"Grequest.{call}", "the request is "
                        "REQUEST_NULL (already completed or freed)", "start a new one with "
                        "Grequest.Start()")
        return gen

    def Complete(self) -> None:
        """Mark the request complete: ``Test``/``Wait`` now finish it."""
        self.complete(None)

    def complete(self, obj: Any = None) -> None:
        """Mark the request complete with ``obj``, the value the lowercase ``test``/``wait`` return."""
        gen = self._gen("Complete()")
        if gen.completed:
            raise error(ERR_REQUEST, self._rank, "Grequest.Complete()", "the request was "
                        "completed already", "call Complete once per request")
        gen.completed, gen.value = True, obj

    # ---- what Request's calls ask of an operation ----

    def _done(self) -> bool:
        gen = self._req
        return not isinstance(gen, _Generalized) or gen.completed

    def _test(self, name: str = "Test") -> bool:
        return self._done()

    def _complete(self, status: Status | None) -> Any:
        gen = self._req
        if not isinstance(gen, _Generalized):
            return super()._complete(status)
        if not gen.completed:
            raise error(ERR_REQUEST, self._rank, "Grequest.Wait()", "the generalized request "
                        "was not completed, and nothing can complete it while this rank waits",
                        "call Complete() (or complete(obj)) before waiting")
        self._retire()
        try:
            self._query(gen, status if status is not None else Status())
        finally:
            self._release(gen)
        return gen.value

    def Get_status(self, status: Status | None = None) -> bool:
        """Return whether the request was completed, without finishing it (fills ``status``)."""
        gen = self._req
        if not isinstance(gen, _Generalized):
            return super().Get_status(status)
        if not gen.completed:
            return False
        self._query(gen, status if status is not None else Status())
        return True

    def Cancel(self) -> None:
        """Call ``cancel_fn(completed)``; the request still has to be completed and waited for."""
        gen = self._req
        if isinstance(gen, _Generalized) and gen.cancel is not None:
            _call(gen.cancel, (gen.completed, *gen.args), gen.kwargs, self._rank, "Cancel()")

    def Free(self) -> None:
        """Drop the handle, calling ``free_fn`` (once the request is complete, as MPI does)."""
        gen = self._req
        self._retire()
        if isinstance(gen, _Generalized):
            self._release(gen)

    free = Free

    def _query(self, gen: _Generalized, status: Status) -> None:
        status._clear()
        if gen.query is not None:
            _call(gen.query, (status, *gen.args), gen.kwargs, self._rank, "Wait()")

    def _release(self, gen: _Generalized) -> None:
        if gen.free is not None and not gen.freed:
            gen.freed = True
            _call(gen.free, gen.args, gen.kwargs, self._rank, "Wait()")


def _call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], rank: int,
          call: str) -> None:
    """Run a callback; what it raises is printed and raised again as an ``MPI.Exception``."""
    try:
        fn(*args, **kwargs)
    except MPIException as exc:
        traceback.print_exc(file=sys.stderr)
        raise error(exc.Get_error_class(), rank, f"Grequest.{call}", f"the callback "
                    f"{getattr(fn, '__name__', fn)!s} raised {exc!r}", "see its traceback above"
                    ) from None
    except Exception as exc:  # noqa: BLE001 - any other error of user code becomes ERR_OTHER
        traceback.print_exc(file=sys.stderr)
        raise error(ERR_OTHER, rank, f"Grequest.{call}", f"the callback "
                    f"{getattr(fn, '__name__', fn)!s} raised {type(exc).__name__}: {exc}",
                    "see its traceback above") from None
