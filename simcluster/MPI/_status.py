"""Status: what a receive, probe or wait learned about a message.

Filled in place by the calls that take ``status=``, as in mpi4py. A status
is MPICH's ``MPI_Status``: five C ints (``count_lo``,
``count_hi_and_cancelled``, ``MPI_SOURCE``, ``MPI_TAG``, ``MPI_ERROR``), which
``tomemory()`` exposes as a writable ``memoryview`` and ``py2f()`` copies into
a list (``MPI.F_SOURCE``/``F_TAG``/``F_ERROR`` index it). ``count`` is in
bytes; ``Get_count(datatype)`` divides by the datatype's size and says
``UNDEFINED`` when the bytes are not whole items. A receive from
``PROC_NULL`` reports ``source=PROC_NULL``, ``tag=ANY_TAG`` and no bytes.

Rule 1: the five ints are the only state, so ``tomemory()`` writes show in
the attributes and the other way round.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from ._constants import ANY_SOURCE, ANY_TAG, ERR_COUNT, ERR_TYPE, PROC_NULL, SUCCESS, UNDEFINED
from ._datatypes import BYTE, Datatype
from ._errors import error

_LO, _HI, _SOURCE, _TAG, _ERROR = range(5)  # MPICH's MPI_Status fields, in order
_MASK32 = 0xFFFFFFFF


def _cint(value: Any, what: str) -> int:
    """``value`` as a C int, or the TypeError/OverflowError mpi4py raises."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"Status.{what}: an integer is required, got {type(value).__name__}")
    v: int = value.__index__()
    if not -2**31 <= v < 2**31:
        raise OverflowError(f"Status.{what}: {v} does not fit a C int")
    return v


def _signed(v: int) -> int:
    return v - 2**32 if v >= 2**31 else v


class Status:
    """Source, tag, error, byte count and cancellation of a completed operation."""

    __slots__ = ("_mem", "__weakref__")

    _mem: array[int]

    def __init__(self, status: Status | None = None) -> None:
        if status is None:
            self._mem = array("i", (0, 0, ANY_SOURCE, ANY_TAG, SUCCESS))
        elif isinstance(status, Status):
            self._mem = array("i", status._mem)
        else:
            raise TypeError(f"MPI.Status({status!r}): expected an MPI.Status to copy, got "
                            f"{type(status).__name__}")

    # ---- filled by the calls (package-internal) ----

    def _set(self, source: int, tag: int, nbytes: int, cancelled: bool = False) -> None:
        mem = self._mem
        mem[_SOURCE], mem[_TAG], mem[_ERROR] = source, tag, SUCCESS
        self._store(nbytes, cancelled)

    def _clear(self) -> None:
        """An empty status: what a completed send or an inactive request reports."""
        self._set(ANY_SOURCE, ANY_TAG, 0)

    def _null(self) -> None:
        """What a receive from PROC_NULL reports."""
        self._set(PROC_NULL, ANY_TAG, 0)

    @property
    def _nbytes(self) -> int:
        mem = self._mem
        return (mem[_LO] & _MASK32) | ((mem[_HI] & _MASK32) >> 1) << 32

    def _store(self, nbytes: int, cancelled: bool) -> None:
        self._mem[_LO] = _signed(nbytes & _MASK32)
        self._mem[_HI] = _signed((((nbytes >> 32) << 1) | int(cancelled)) & _MASK32)

    # ---- object model ----

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self._mem == other._mem

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"<MPI.Status source={self.source} tag={self.tag} count={self._nbytes}"
                f"{' cancelled' if self.cancelled else ''}"
                f"{'' if self.error == SUCCESS else f' error={self.error}'}>")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (), self.__getstate__())

    def __getstate__(self) -> dict[str, int]:
        return {"source": self.source, "tag": self.tag, "error": self.error, "count": self._nbytes,
                "cancelled": self.cancelled}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._mem = array("i", (0, 0, ANY_SOURCE, ANY_TAG, SUCCESS))
        self._set(state["source"], state["tag"], state["count"], bool(state["cancelled"]))
        self._mem[_ERROR] = state["error"]

    # ---- fields ----

    @property
    def source(self) -> int:
        """The rank the message came from."""
        return self._mem[_SOURCE]

    @source.setter
    def source(self, value: int) -> None:
        self._mem[_SOURCE] = _cint(value, "source")

    @property
    def tag(self) -> int:
        """The message's tag."""
        return self._mem[_TAG]

    @tag.setter
    def tag(self, value: int) -> None:
        self._mem[_TAG] = _cint(value, "tag")

    @property
    def error(self) -> int:
        """The error code (``SUCCESS`` unless set)."""
        return self._mem[_ERROR]

    @error.setter
    def error(self, value: int) -> None:
        self._mem[_ERROR] = _cint(value, "error")

    @property
    def count(self) -> int:
        """The message's size in bytes."""
        return self._nbytes

    @count.setter
    def count(self, value: int) -> None:
        self.Set_elements(BYTE, value)

    @property
    def cancelled(self) -> bool:
        """Whether the operation was cancelled."""
        return bool(self._mem[_HI] & 1)

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        self._store(self._nbytes, bool(value))

    def Get_source(self) -> int:
        """Return the rank the message came from."""
        return self.source

    def Set_source(self, source: int) -> None:
        """Set the source."""
        self.source = source

    def Get_tag(self) -> int:
        """Return the message's tag."""
        return self.tag

    def Set_tag(self, tag: int) -> None:
        """Set the tag."""
        self.tag = tag

    def Get_error(self) -> int:
        """Return the error code (``SUCCESS``)."""
        return self.error

    def Set_error(self, error: int) -> None:
        """Set the error code."""
        self.error = error

    def Get_count(self, datatype: Datatype = BYTE) -> int:
        """Return the number of ``datatype`` items the message holds (``UNDEFINED`` if not whole)."""
        _check_type(datatype, "Get_count")
        size = datatype.Get_size()
        nbytes = self._nbytes
        if size == 0:
            return 0 if nbytes == 0 else UNDEFINED
        return nbytes // size if nbytes % size == 0 else UNDEFINED

    def Get_elements(self, datatype: Datatype) -> int:
        """Return the number of basic elements of ``datatype``'s base type the message holds."""
        _check_type(datatype, "Get_elements")
        size = datatype._base.Get_size()
        if size == 0:
            return 0
        return self._nbytes // size if self._nbytes % size == 0 else UNDEFINED

    def Set_elements(self, datatype: Datatype, count: int) -> None:
        """Set the byte count to ``count`` items of ``datatype``.

        Raises:
            MPI.Exception: ``ERR_COUNT`` for a negative count.
        """
        _check_type(datatype, "Set_elements")
        if isinstance(count, bool) or not hasattr(count, "__index__"):
            raise TypeError(f"Status.Set_elements(count={count!r}): an integer is required")
        n = count.__index__()
        if n < 0:
            raise error(ERR_COUNT, None, f"Status.Set_elements(count={n})",
                        "the count must not be negative", "pass 0 or more items")
        self._store(n * datatype.Get_size(), self.cancelled)

    def Is_cancelled(self) -> bool:
        """Return whether the operation was cancelled."""
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        """Set the cancelled flag."""
        self.cancelled = bool(flag)

    # ---- memory and Fortran ----

    def tomemory(self) -> memoryview:
        """Return the status's five C ints as a writable memoryview (format ``'i'``)."""
        return memoryview(self._mem)

    def py2f(self) -> list[int]:
        """Return the Fortran status: a list of ``MPI.F_STATUS_SIZE`` ints."""
        return list(self._mem)

    @classmethod
    def f2py(cls, arg: Sequence[int]) -> Status:
        """Return a new status from a Fortran status (``py2f()``'s list)."""
        status = cls()
        for i in range(len(status._mem)):
            status._mem[i] = _cint(arg[i], "f2py()")
        return status


def _check_type(datatype: Any, call: str) -> None:
    if isinstance(datatype, Datatype) and not datatype:
        raise error(ERR_TYPE, None, f"Status.{call}(DATATYPE_NULL)", "DATATYPE_NULL is no datatype",
                    "pass the datatype the message was sent with, e.g. MPI.BYTE")
