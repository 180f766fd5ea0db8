"""File views and the I/O time model of MPI-IO (``MPI.File``, see ``_file``).

A *view* is what ``File.Set_view(disp, etype, filetype, datarep)`` sets: the
file, from byte ``disp``, is the filetype laid again and again (tile ``k`` at
``disp + k * extent(filetype)``), and a rank sees only the bytes the
filetype's elements cover, in typemap order. Offsets and file pointers count
etypes of that visible stream. ``View.runs(start, n)`` turns ``n`` visible
bytes from visible byte ``start`` into runs of file bytes ``(offset, length)``
in stream order, which is how MPICH's ROMIO flattens a filetype: so the bytes
land where MPICH puts them.

``FileSystem`` is the time model: each request costs ``latency`` plus its
bytes over ``bandwidth``; a collective request costs, on every rank, the
latency plus all the ranks' bytes over the bandwidth (they share the file
system), after the synchronisation the collective itself costs.

``Register_datarep`` keeps each rank's data representations (MPI's are per
process); a view may use one without conversion functions.

Rule 1: bytes in the file are the bytes in memory, as MPICH writes them:
"native", its alias "internal", and registered representations that convert
nothing; "external32" and conversion functions are refused.
Rule 2: no virtual time here: ``_file`` charges what ``FileSystem.time`` says.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _typemap
from ._constants import ERR_DUP_DATAREP, ERR_UNSUPPORTED_DATAREP
from ._datatypes import Datatype, _by_id
from ._errors import error
from ._state import current

DATAREPS = ("native", "internal")
"""The data representations a view may use, besides registered ones without conversion functions."""


@dataclass(frozen=True, slots=True)
class FileSystem:
    """A file system every rank reaches: ``latency`` seconds per request, ``bandwidth`` bytes/s.

    The default (100 microseconds, 1 GB/s) is one client of a parallel file system.
    A latency model or platform that has a ``file_system`` attribute (a ``FileSystem``)
    sets it for a run; ``latency.Zero`` makes I/O free, like messages.
    """

    latency: float = 100e-6
    bandwidth: float = 1e9

    def __post_init__(self) -> None:
        if not (self.latency >= 0 and math.isfinite(self.latency)):
            raise ValueError(f"FileSystem(latency={self.latency!r}): latency must be seconds >= 0")
        if not self.bandwidth > 0:
            raise ValueError(f"FileSystem(bandwidth={self.bandwidth!r}): bandwidth must be bytes "
                             "per second > 0")

    def time(self, nbytes: int) -> float:
        """Seconds one request of ``nbytes`` bytes takes (for a collective: all ranks' bytes)."""
        return self.latency + nbytes / self.bandwidth


DEFAULT = FileSystem()
FREE = FileSystem(0.0, math.inf)


def file_system_of(model: Any) -> FileSystem:
    """The file system of a run whose latency model is ``model``."""
    from ..latency import Zero
    found = getattr(model, "file_system", None)
    if isinstance(found, FileSystem):
        return found
    return FREE if isinstance(model, Zero) else DEFAULT


class View:
    """A file view: displacement, etype, filetype and the visible bytes of one filetype tile."""

    __slots__ = ("disp", "etype", "filetype", "datarep", "esize", "tsize", "textent", "bytes",
                 "contiguous")

    def __init__(self, disp: int, etype: Datatype, filetype: Datatype, datarep: str) -> None:
        self.disp, self.etype, self.filetype, self.datarep = disp, etype, filetype, datarep
        self.esize = etype.Get_size()
        self.tsize = filetype.Get_size()
        self.textent = filetype.Get_extent()[1]
        self.bytes = _visible(filetype)
        self.contiguous = (self.textent == self.tsize and
                           bool(np.array_equal(self.bytes, np.arange(self.tsize))))

    def positions(self, start: int, n: int) -> NDArray[np.int64]:
        """File offsets of ``n`` visible bytes from visible byte ``start``."""
        s = np.arange(start, start + n, dtype=np.int64)
        tile, within = np.divmod(s, max(self.tsize, 1))
        return self.disp + tile * self.textent + self.bytes[within]

    def runs(self, start: int, n: int) -> list[tuple[int, int]]:
        """Runs ``(file offset, length)`` of ``n`` visible bytes from visible byte ``start``."""
        if n <= 0:
            return []
        if self.contiguous:
            return [(self.disp + start, n)]
        pos = self.positions(start, n)
        breaks = np.flatnonzero(np.diff(pos) != 1) + 1
        edges = [0, *breaks.tolist(), n]
        return [(int(pos[a]), b - a) for a, b in zip(edges[:-1], edges[1:])]

    def byte_offset(self, offset: int) -> int:
        """The file byte of etype ``offset`` of the view (``File.Get_byte_offset``)."""
        return int(self.positions(offset * self.esize, 1)[0]) if self.tsize else self.disp

    def end_offset(self, file_size: int) -> int:
        """The etype offset of the end of a file of ``file_size`` bytes (``SEEK_END``)."""
        if self.tsize == 0 or file_size <= self.disp:
            return 0
        span = file_size - self.disp
        tiles, rest = divmod(span, self.textent) if self.textent > 0 else (0, span)
        visible = tiles * self.tsize + int(np.count_nonzero(self.bytes < rest))
        return -(-visible // self.esize) if self.esize else 0


def _visible(filetype: Datatype) -> NDArray[np.int64]:
    """The byte offsets one filetype item covers, in typemap order."""
    lay = filetype._layout
    if filetype._predefined:
        return np.arange(filetype.Get_size(), dtype=np.int64)
    positions = _typemap.byte_positions(lay.typemap(), lay.leaf, _by_id)
    return positions.astype(np.int64)


# ---- data representations ----

Conversion = tuple[Any, Any, Callable[[Datatype], int]]
_registered: weakref.WeakKeyDictionary[Any, dict[str, Conversion]] = weakref.WeakKeyDictionary()
_outside: dict[str, Conversion] = {}


def _table() -> dict[str, Conversion]:
    """The calling rank's registered data representations (MPI's are per process)."""
    try:
        rank = current()
    except RuntimeError:
        return _outside
    return _registered.setdefault(rank, {})


def Register_datarep(datarep: str, read_fn: Any, write_fn: Any,
                     extent_fn: Callable[[Datatype], int]) -> None:
    """Register data representation ``datarep`` (``ERR_DUP_DATAREP`` if the name is taken).

    A view may use one whose ``read_fn`` and ``write_fn`` are None (no conversion) and
    whose ``extent_fn`` gives the native extents; conversion functions are not simulated.
    """
    table = _table()
    if datarep in DATAREPS or datarep == "external32" or datarep in table:
        raise error(ERR_DUP_DATAREP, _rank(), f"Register_datarep({datarep!r})", "a data "
                    "representation of that name exists already", "register each name once")
    table[datarep] = (read_fn, write_fn, extent_fn)


def check_datarep(datarep: str, types: tuple[Datatype, ...], rank: int, call: str) -> None:
    """Raise ERR_UNSUPPORTED_DATAREP unless a view of ``types`` can use ``datarep``."""
    if datarep in DATAREPS:
        return
    found = _table().get(datarep)
    if found is None:
        problem = f"data representation {datarep!r} is not simulated"
    elif found[0] is not None or found[1] is not None:
        problem = f"the conversion functions of data representation {datarep!r} are not simulated"
    elif any(found[2](dt) != dt.Get_extent()[1] for dt in types):
        problem = f"data representation {datarep!r} gives extents other than native ones"
    else:
        return
    raise error(ERR_UNSUPPORTED_DATAREP, rank, call, problem, 'use "native"')


def type_extent(datarep: str, datatype: Datatype) -> int:
    """The extent of ``datatype`` in a file of ``datarep`` (``File.Get_type_extent``)."""
    found = _table().get(datarep)
    return int(found[2](datatype)) if found is not None else int(datatype.Get_extent()[1])


def _rank() -> int | None:
    try:
        return current().world.rank
    except RuntimeError:
        return None
