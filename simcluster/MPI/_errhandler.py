"""Error handlers: ``ERRORS_RETURN``, ``ERRORS_ARE_FATAL``, ``ERRORS_ABORT`` and ``Comm.Create_errhandler``.

Each communicator has an error handler (``Get_errhandler``/``Set_errhandler``;
``COMM_WORLD`` and ``COMM_SELF`` start with ``ERRORS_RETURN``, as mpi4py sets
them, and a new communicator inherits its parent's). ``Call_errhandler(code)``
runs it as MPI does: ``ERRORS_RETURN`` returns, ``ERRORS_ARE_FATAL`` and
``ERRORS_ABORT`` end the run with the error code (``Comm.Abort``), and a
handler from ``Create_errhandler(fn)`` calls ``fn(comm, code)``.

Errors the facade detects itself are raised as ``MPI.Exception`` whatever the
handler (mpi4py's ``ERRORS_RETURN`` plus an exception), so a script sees the
same error under every handler.

``Get_errhandler`` returns a new handle each time; freeing it makes that
handle ``ERRHANDLER_NULL`` and leaves the communicator's handler alone, and
freeing a predefined handler is a no-op. As in mpi4py, a rank holds at most
32 live user handlers per kind of object.

Rule 1: handles compare by what they stand for; ``ERRHANDLER_NULL`` is falsy.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ._constants import ERR_ERRHANDLER
from ._errors import error
from ._limits import UserSlots, _Holder
from ._rc import rc_option

_ids = itertools.count(16)

_SLOTS = UserSlots("user-defined error handlers for communicators", 32,
                   "Free() error handlers you no longer use")


class Errhandler:
    """An error handler (mpi4py's ``MPI.Errhandler``)."""

    __slots__ = ("_id", "_name", "_fn", "_owner", "__weakref__")

    _id: int
    _name: str
    _fn: Callable[[Any, int], Any] | None
    _owner: _Holder | None  # the slot-holder of a user handler (None otherwise)

    def __new__(cls, errhandler: Errhandler | None = None) -> Errhandler:
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"MPI.Errhandler({errhandler!r}): expected an MPI.Errhandler, got "
                            f"{type(errhandler).__name__}")
        self = object.__new__(cls)
        source = ERRHANDLER_NULL if errhandler is None else errhandler
        self._id, self._name, self._fn, self._owner = source._id, source._name, source._fn, None
        return self

    @classmethod
    def _make(cls, name: str, fn: Callable[[Any, int], Any] | None = None) -> Errhandler:
        self = object.__new__(cls)
        self._id, self._name, self._fn, self._owner = next(_ids), name, fn, None
        return self

    @classmethod
    def _user(cls, kind: str, fn: Callable[[Any, int], Any]) -> Errhandler:
        if not callable(fn):
            raise TypeError(f"{kind}.Create_errhandler({fn!r}): pass a function fn({kind.lower()}, "
                            "errorcode)")
        self = cls._make(f"user handler {getattr(fn, '__name__', 'fn')} for {kind}", fn)
        self._owner = _SLOTS.take(f"{kind}.Create_errhandler()")
        return self

    def Free(self) -> None:
        """Free this handle: it becomes ``ERRHANDLER_NULL`` (a predefined handler stays as it is)."""
        if self._id == ERRHANDLER_NULL._id:
            raise error(ERR_ERRHANDLER, None, "Errhandler.Free()", "ERRHANDLER_NULL cannot be freed",
                        "free handlers from Create_errhandler() or Get_errhandler()")
        if any(self is p for p in _PREDEFINED):
            return
        if self._owner is not None:
            _SLOTS.give_back(self._owner)
        self._id, self._name, self._fn, self._owner = (ERRHANDLER_NULL._id, ERRHANDLER_NULL._name,
                                                       None, None)

    def free(self) -> None:
        """Free this handle when it is not null (never raises)."""
        if self:
            self.Free()

    # ---- what communicators use ----

    def _check_settable(self, call: str, rank: int | None) -> None:
        if not self:
            raise error(ERR_ERRHANDLER, rank, call, "ERRHANDLER_NULL is not an error handler",
                        "pass MPI.ERRORS_RETURN, MPI.ERRORS_ARE_FATAL, MPI.ERRORS_ABORT or one "
                        "from Comm.Create_errhandler()")

    def _invoke(self, obj: Any, errorcode: int) -> None:
        """Run the handler for ``errorcode`` on ``obj`` (a communicator)."""
        if self._fn is not None:
            self._fn(obj, errorcode)
        elif self._id in (ERRORS_ARE_FATAL._id, ERRORS_ABORT._id):
            obj.Abort(errorcode)

    # ---- object model ----

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Errhandler) and other._id == self._id

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __bool__(self) -> bool:
        return self._id != ERRHANDLER_NULL._id

    def __repr__(self) -> str:
        return f"<MPI.Errhandler {self._name}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        for name, const in _NAMES.items():
            if self is const:
                return name
        for name, const in _NAMES.items():
            if self == const:
                return (type(self), (const,))
        raise ValueError(f"cannot pickle {self!r}: a user error handler belongs to the rank that "
                         "made it; call Create_errhandler() on every rank")


def default() -> Errhandler:
    """The handler a communicator has until ``Set_errhandler``: ``mpi4py.rc.errors``'s
    (``ERRORS_RETURN`` for ``"exception"``, mpi4py's default; MPI's ``ERRORS_ARE_FATAL`` for
    ``"default"`` and ``"fatal"``; ``ERRORS_ABORT`` for ``"abort"``)."""
    errors = rc_option("errors")
    if errors == "abort":
        return ERRORS_ABORT
    return ERRORS_RETURN if errors == "exception" else ERRORS_ARE_FATAL


ERRHANDLER_NULL = Errhandler._make("MPI_ERRHANDLER_NULL")
ERRORS_RETURN = Errhandler._make("MPI_ERRORS_RETURN")
ERRORS_ARE_FATAL = Errhandler._make("MPI_ERRORS_ARE_FATAL")
ERRORS_ABORT = Errhandler._make("MPI_ERRORS_ABORT")

_NAMES = {"ERRHANDLER_NULL": ERRHANDLER_NULL, "ERRORS_RETURN": ERRORS_RETURN,
          "ERRORS_ARE_FATAL": ERRORS_ARE_FATAL, "ERRORS_ABORT": ERRORS_ABORT}
_PREDEFINED = (ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT)
