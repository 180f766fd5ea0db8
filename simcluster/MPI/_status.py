"""Status: what a receive, probe or wait learned about a message.

Filled in place by the calls that take ``status=``, as in mpi4py. ``count`` is
in bytes; ``Get_count(datatype)`` divides by the datatype's size and says
``UNDEFINED`` when the bytes are not whole items. A receive from
``PROC_NULL`` reports ``source=PROC_NULL``, ``tag=ANY_TAG`` and no bytes.
"""

from __future__ import annotations

from typing import Any

from ._constants import ANY_SOURCE, ANY_TAG, PROC_NULL, SUCCESS, UNDEFINED
from ._datatypes import BYTE, Datatype


class Status:
    """Source, tag, error, byte count and cancellation of a completed operation."""

    __slots__ = ("source", "tag", "error", "_nbytes", "cancelled")

    def __init__(self, status: Status | None = None) -> None:
        if status is None:
            self.source, self.tag, self.error, self._nbytes, self.cancelled = (
                ANY_SOURCE, ANY_TAG, SUCCESS, 0, False)
        else:
            self.source, self.tag, self.error = status.source, status.tag, status.error
            self._nbytes, self.cancelled = status._nbytes, status.cancelled

    def _set(self, source: int, tag: int, nbytes: int, cancelled: bool = False) -> None:
        self.source, self.tag, self._nbytes, self.cancelled = source, tag, nbytes, cancelled
        self.error = SUCCESS

    def _clear(self) -> None:
        """An empty status: what a completed send or an inactive request reports."""
        self._set(ANY_SOURCE, ANY_TAG, 0)

    def _null(self) -> None:
        """What a receive from PROC_NULL reports."""
        self._set(PROC_NULL, ANY_TAG, 0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Status) and (self.source, self.tag, self.error, self._nbytes,
                                              self.cancelled) == (other.source, other.tag,
                                                                  other.error, other._nbytes,
                                                                  other.cancelled)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"<MPI.Status source={self.source} tag={self.tag} count={self._nbytes}"
                f"{' cancelled' if self.cancelled else ''}>")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Status, (), self.__getstate__())

    def __getstate__(self) -> dict[str, int]:
        return {"source": self.source, "tag": self.tag, "error": self.error, "count": self._nbytes,
                "cancelled": int(self.cancelled)}

    def __setstate__(self, state: dict[str, int]) -> None:
        self._set(state["source"], state["tag"], state["count"], bool(state["cancelled"]))
        self.error = state["error"]

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
        size = datatype.Get_size()
        if size == 0:
            return 0 if self._nbytes == 0 else UNDEFINED
        return self._nbytes // size if self._nbytes % size == 0 else UNDEFINED

    def Get_elements(self, datatype: Datatype) -> int:
        """Return the number of basic elements of ``datatype``'s base type the message holds."""
        size = datatype._base.Get_size()
        if size == 0:
            return 0
        return self._nbytes // size if self._nbytes % size == 0 else UNDEFINED

    def Set_elements(self, datatype: Datatype, count: int) -> None:
        """Set the byte count to ``count`` items of ``datatype``."""
        self._nbytes = count * datatype.Get_size()

    def Is_cancelled(self) -> bool:
        """Return whether the operation was cancelled."""
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        """Set the cancelled flag."""
        self.cancelled = bool(flag)

    @property
    def count(self) -> int:
        """The message's size in bytes."""
        return self._nbytes

    @count.setter
    def count(self, value: int) -> None:
        self._nbytes = int(value)
