"""Datatypes: the predefined MPI types as numpy dtypes, and simple derived types.

A predefined ``Datatype`` is a numpy dtype with MPI's name and size
(``DOUBLE`` is ``float64``, ``DOUBLE_INT`` the aligned struct ``(float64,
int32)`` that ``MAXLOC`` reduces). A derived type (``Create_contiguous``,
``Create_vector``, ``Create_indexed``, ``Create_subarray``, ...) is a
predefined *base* plus the positions, in base elements, that one item covers
inside its extent; sending ``count`` items gathers those positions (item ``k``
starts ``k * extent`` bytes into the buffer) into a packed array of the base
dtype, and receiving scatters them back. So every message on the wire is a
plain numpy array, and counts and virtual times are the packed bytes.

Rule 1: a buffer is always reinterpreted through ``base.np_dtype``; only the
positions depend on the derived type.
Rule 2: derived types must be committed before use and never after ``Free``;
predefined types cannot be freed (``ERR_TYPE``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from ._constants import (
    COMBINER_CONTIGUOUS, COMBINER_DUP, COMBINER_INDEXED, COMBINER_INDEXED_BLOCK, COMBINER_NAMED,
    COMBINER_RESIZED, COMBINER_SUBARRAY, COMBINER_VECTOR, COMBINER_HVECTOR, COMBINER_HINDEXED, ORDER_C,
    ORDER_F, TYPECLASS_COMPLEX, TYPECLASS_INTEGER, TYPECLASS_LOGICAL, TYPECLASS_REAL, ERR_ARG, ERR_TYPE,
)
from ._errors import error

_ids = itertools.count(1)


class Datatype:
    """An MPI datatype: ``Get_size()``, ``Get_extent()``, derived-type constructors, ``Commit()``."""

    __slots__ = ("_id", "_name", "_np", "_base", "_index", "_lb", "_extent", "_size", "_combiner",
                 "_committed", "_freed", "_predefined")

    _id: int
    _name: str
    _np: np.dtype[Any] | None  # predefined: the numpy dtype (None: DATATYPE_NULL / not in numpy)
    _base: Datatype  # the predefined type the elements have (self for predefined)
    _index: NDArray[np.intp] | None  # derived: base-element positions of one item (None: [0])
    _lb: int
    _extent: int  # bytes between consecutive items
    _size: int  # bytes of data in one item (MPI's size)
    _combiner: int
    _committed: bool
    _freed: bool
    _predefined: bool

    def __new__(cls, datatype: Datatype | None = None) -> Datatype:
        self = object.__new__(cls)
        if datatype is None:
            datatype = DATATYPE_NULL
        for slot in Datatype.__slots__:
            object.__setattr__(self, slot, getattr(datatype, slot))
        return self

    @classmethod
    def _make(cls, name: str, np_dtype: Any, size: int | None = None) -> Datatype:
        self = object.__new__(cls)
        dt = None if np_dtype is None else np.dtype(np_dtype)
        self._id = next(_ids)
        self._name = name
        self._np = dt
        self._base = self
        self._index = None
        self._lb = 0
        self._extent = 0 if dt is None else dt.itemsize
        self._size = (0 if dt is None else dt.itemsize) if size is None else size
        self._combiner = COMBINER_NAMED
        self._committed = True
        self._freed = False
        self._predefined = True
        return self

    def _derive(self, index: NDArray[np.intp], extent: int, combiner: int, lb: int = 0) -> Datatype:
        """Return a new uncommitted type of ``self``'s base with one item at ``index``."""
        self._check_usable("derive a type from")
        new = object.__new__(Datatype)
        new._id = next(_ids)
        new._name = ""
        new._np = None
        new._base = self._base
        new._index = np.asarray(index, dtype=np.intp)
        new._lb = lb
        new._extent = extent
        new._size = len(new._index) * self._base._size
        new._combiner = combiner
        new._committed = False
        new._freed = False
        new._predefined = False
        return new

    # ---- facts ----

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Datatype) and other._id == self._id

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._id

    def __bool__(self) -> bool:
        return self._id != DATATYPE_NULL._id and not self._freed

    def __repr__(self) -> str:
        if self._predefined:
            return f"<MPI.Datatype {self._name}>"
        state = "freed" if self._freed else "committed" if self._committed else "uncommitted"
        return f"<MPI.Datatype of {self._base._name} size={self._size} extent={self._extent} {state}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._predefined:
            return (_predefined, (self._name,))
        raise TypeError(f"cannot pickle derived datatype {self!r}; send the data, not the type")

    def Get_size(self) -> int:
        """Return the bytes of data one item holds."""
        return self._size

    def Get_extent(self) -> tuple[int, int]:
        """Return ``(lb, extent)``: an item's lower bound and the bytes from one item to the next."""
        return (self._lb, self._extent)

    def Get_true_extent(self) -> tuple[int, int]:
        """Return ``(true_lb, true_extent)``: the span the data itself covers."""
        if self._index is None:
            return (0, self._extent)
        step = self._base._extent
        if not len(self._index):
            return (0, 0)
        lo, hi = int(self._index.min()) * step, (int(self._index.max()) + 1) * step
        return (lo, hi - lo)

    size = property(Get_size, doc="Bytes of data one item holds.")
    extent = property(lambda self: self._extent, doc="Bytes from one item to the next.")
    lb = property(lambda self: self._lb, doc="Lower bound of an item.")
    ub = property(lambda self: self._lb + self._extent, doc="Upper bound of an item.")
    true_extent = property(lambda self: self.Get_true_extent()[1], doc="Span the data covers.")
    true_lb = property(lambda self: self.Get_true_extent()[0], doc="Where the data starts.")
    true_ub = property(lambda self: sum(self.Get_true_extent()), doc="Where the data ends.")
    combiner = property(lambda self: self._combiner, doc="How the type was made (COMBINER_*).")
    is_named = property(lambda self: self._predefined, doc="True for predefined types.")
    is_predefined = property(lambda self: self._predefined, doc="True for predefined types.")

    def Get_name(self) -> str:
        """Return the type's name (``MPI_DOUBLE``; ``""`` for derived types until named)."""
        return self._name

    def Set_name(self, name: str) -> None:
        """Name the type."""
        self._name = str(name)

    name = property(Get_name, Set_name, doc="The type's name.")

    @property
    def typechar(self) -> str:
        """numpy's type character of a predefined type (``"d"`` for DOUBLE), else ``""``."""
        return "" if self._np is None or not self._predefined else self._np.char

    @property
    def typestr(self) -> str:
        """numpy's type string of a predefined type (``"<f8"`` for DOUBLE), else ``""``."""
        return "" if self._np is None or not self._predefined else self._np.str

    def tocode(self) -> str:
        """Return the predefined type's numpy type character."""
        if not self.typechar:
            raise ValueError(f"{self!r}.tocode(): only predefined types have a type code")
        return self.typechar

    @classmethod
    def fromcode(cls, code: str) -> Datatype:
        """Return the predefined type of a numpy type code (``"d"``, ``"i4"``, ...)."""
        try:
            return _typedict[code]
        except KeyError:
            raise ValueError(f"Datatype.fromcode({code!r}): unknown type code; valid: "
                             f"{', '.join(sorted(_typedict))}") from None

    # ---- life cycle ----

    def Commit(self) -> Datatype:
        """Commit the type so that it can be used in communication; return it."""
        self._check_usable("Commit")
        self._committed = True
        return self

    def Free(self) -> None:
        """Free a derived type (predefined types cannot be freed)."""
        if self._predefined:
            raise error(ERR_TYPE, None, f"{self._name}.Free()", "a predefined datatype cannot be freed",
                        "free only the types you created")
        self._freed = True

    free = Free

    def Dup(self) -> Datatype:
        """Return a copy of the type (committed when this one is)."""
        self._check_usable("Dup")
        if self._predefined:
            new = self._derive(np.zeros(1, dtype=np.intp), self._extent, COMBINER_DUP)
        else:
            new = self._derive(self._index, self._extent, COMBINER_DUP, self._lb)  # type: ignore[arg-type]
        new._committed = self._committed
        return new

    Create_dup = Dup

    def _check_usable(self, what: str) -> None:
        if self._freed:
            raise error(ERR_TYPE, None, f"Datatype.{what}()", "the datatype was freed",
                        "create it again, or keep it until the last call that uses it")
        if self._base._np is None:
            raise error(ERR_TYPE, None, f"Datatype.{what}()",
                        f"{self._name or 'this datatype'} is not available (DATATYPE_NULL, or a "
                        "type numpy has no dtype for)", "use another datatype")

    # ---- derived types ----

    def _item(self) -> tuple[NDArray[np.intp], int]:
        """Return one item's base-element positions and its extent in base elements."""
        step = self._base._extent
        if self._extent % step:
            raise NotImplementedError(f"{self!r}: an extent that is not a multiple of the base "
                                      "type's is not simulated; resize to a multiple")
        index = np.zeros(1, dtype=np.intp) if self._index is None else self._index
        return index, self._extent // step

    def _blocks(self, starts: Sequence[int], lengths: Sequence[int], unit: int) -> NDArray[np.intp]:
        """Positions of blocks of items starting at ``starts`` (in ``unit`` base elements)."""
        index, ext = self._item()
        parts = [((s * unit + j * ext) + index) for s, n in zip(starts, lengths) for j in range(n)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)

    def _new(self, starts: Sequence[int], lengths: Sequence[int], unit: int, combiner: int) -> Datatype:
        index, ext = self._item()
        ends = [s * unit + n * ext for s, n in zip(starts, lengths) if n]
        begins = [s * unit for s, n in zip(starts, lengths) if n]
        lb = min(begins, default=0)
        ub = max(ends, default=0)
        step = self._base._extent
        return self._derive(self._blocks(starts, lengths, unit), (ub - lb) * step, combiner, lb * step)

    def Create_contiguous(self, count: int) -> Datatype:
        """Return a type of ``count`` consecutive items of this type."""
        _check_count("Create_contiguous", count)
        return self._new([0], [count], 1, COMBINER_CONTIGUOUS)

    def Create_vector(self, count: int, blocklength: int, stride: int) -> Datatype:
        """Return ``count`` blocks of ``blocklength`` items, block starts ``stride`` items apart."""
        _check_count("Create_vector", count)
        _check_count("Create_vector", blocklength)
        _, ext = self._item()
        return self._new([i * stride * ext for i in range(count)], [blocklength] * count, 1,
                         COMBINER_VECTOR)

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> Datatype:
        """Like ``Create_vector`` with ``stride`` in bytes (a multiple of the base type's size)."""
        unit = self._byte_unit("Create_hvector", [stride])
        return self._new([i * stride // unit for i in range(count)], [blocklength] * count, 1,
                         COMBINER_HVECTOR)

    def Create_indexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        """Return blocks of ``blocklengths[i]`` items at ``displacements[i]`` items."""
        _, ext = self._item()
        if len(blocklengths) != len(displacements):
            raise ValueError("Create_indexed(): blocklengths and displacements must have the same length")
        return self._new([d * ext for d in displacements], list(blocklengths), 1, COMBINER_INDEXED)

    def Create_hindexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        """Like ``Create_indexed`` with displacements in bytes (multiples of the base type's size)."""
        unit = self._byte_unit("Create_hindexed", displacements)
        return self._new([d // unit for d in displacements], list(blocklengths), 1, COMBINER_HINDEXED)

    def Create_indexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        """Return blocks of ``blocklength`` items at ``displacements[i]`` items."""
        _, ext = self._item()
        return self._new([d * ext for d in displacements], [blocklength] * len(displacements), 1,
                         COMBINER_INDEXED_BLOCK)

    def Create_subarray(self, sizes: Sequence[int], subsizes: Sequence[int], starts: Sequence[int],
                        order: int = ORDER_C) -> Datatype:
        """Return the ``subsizes`` block at ``starts`` of an array of ``sizes`` items."""
        if not len(sizes) == len(subsizes) == len(starts) or any(
                not 0 <= st <= st + sub <= size for size, sub, st in zip(sizes, subsizes, starts)):
            raise error(ERR_ARG, None, f"Create_subarray(sizes={list(sizes)}, subsizes={list(subsizes)}, "
                        f"starts={list(starts)})", "the block does not fit inside the array",
                        "pass starts and subsizes with 0 <= start and start + subsize <= size")
        index, ext = self._item()
        grids = np.meshgrid(*[np.arange(st, st + sub) for st, sub in zip(starts, subsizes)],
                            indexing="ij")
        flat_order: Literal["C", "F"] = "F" if order == ORDER_F else "C"
        cells = np.ravel_multi_index([g.ravel(order=flat_order) for g in grids], tuple(sizes),
                                     order=flat_order)
        positions = (cells[:, None] * ext + index[None, :]).ravel()
        total = int(np.prod(sizes)) * ext * self._base._extent
        return self._derive(positions, total, COMBINER_SUBARRAY)

    def Create_resized(self, lb: int, extent: int) -> Datatype:
        """Return this type with lower bound ``lb`` and ``extent`` bytes (multiples of the base size)."""
        self._byte_unit("Create_resized", [lb, extent])
        index, _ = self._item()
        return self._derive(index, extent, COMBINER_RESIZED, lb)

    Resized = Create_resized

    def _byte_unit(self, call: str, values: Sequence[int]) -> int:
        unit = self._base._extent
        if any(v % unit for v in values):
            raise NotImplementedError(f"Datatype.{call}(): byte offsets that are not multiples of "
                                      f"{self._base._name}'s {unit} bytes are not simulated; use "
                                      "multiples of the base type's size")
        return unit

    # ---- what buffers use ----

    def _usable(self, rank: int | None, op: str) -> None:
        """Raise ERR_TYPE unless this type can be used in a communication call."""
        if self._freed or self._base._np is None or not self._committed:
            problem = ("the datatype was freed" if self._freed else
                       "the datatype is not committed" if not self._committed else
                       f"{self._name or 'this datatype'} has no numpy dtype here")
            fix = "call Commit() on it first" if not self._committed and not self._freed else \
                "use a committed, predefined or derived datatype"
            raise error(ERR_TYPE, rank, op, problem, fix)

    def _positions(self, count: int) -> NDArray[np.intp] | None:
        """Base-element positions of ``count`` items (None: contiguous, no gather needed)."""
        if self._index is None:
            return None
        index, ext = self._item()
        if ext == len(index) and np.array_equal(index, np.arange(ext)):
            return None  # contiguous after all (Create_contiguous, Dup)
        return (np.arange(count, dtype=np.intp)[:, None] * ext + index[None, :]).ravel()

    def _elements(self) -> int:
        """Base elements one item holds."""
        return 1 if self._index is None else len(self._index)

    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> Datatype:
        """Return the predefined type of ``typeclass`` (TYPECLASS_*) with ``size`` bytes."""
        for dt in _MATCH.get(typeclass, ()):
            if dt._size == size:
                return dt
        raise error(ERR_ARG, None, f"Datatype.Match_size({typeclass}, {size})",
                    "no predefined type of that class has that size", "pass a size of 1, 2, 4, 8 or 16")


def _check_count(call: str, count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"Datatype.{call}(count={count!r}): counts must be ints >= 0")


def _predefined(name: str) -> Datatype:
    dt: Datatype = globals()[name]
    return dt


def _pair(value: str) -> np.dtype[Any]:
    return np.dtype([("v", value), ("i", "i4")], align=True)


# ---- the predefined types: (mpi4py name, MPI name, numpy dtype, MPI size if not the dtype's) ----

_TABLE: Final[list[tuple[str, str, Any, int | None]]] = [
    ("DATATYPE_NULL", "MPI_DATATYPE_NULL", None, None),
    ("PACKED", "MPI_PACKED", "u1", None),
    ("BYTE", "MPI_BYTE", "u1", None),
    ("AINT", "MPI_AINT", "p", None),
    ("OFFSET", "MPI_OFFSET", "i8", None),
    ("COUNT", "MPI_COUNT", "i8", None),
    ("CHAR", "MPI_CHAR", "S1", None),
    ("WCHAR", "MPI_WCHAR", "U1", None),
    ("SIGNED_CHAR", "MPI_SIGNED_CHAR", "b", None),
    ("SHORT", "MPI_SHORT", "h", None),
    ("INT", "MPI_INT", "i", None),
    ("LONG", "MPI_LONG", "l", None),
    ("LONG_LONG", "MPI_LONG_LONG_INT", "q", None),
    ("UNSIGNED_CHAR", "MPI_UNSIGNED_CHAR", "B", None),
    ("UNSIGNED_SHORT", "MPI_UNSIGNED_SHORT", "H", None),
    ("UNSIGNED", "MPI_UNSIGNED", "I", None),
    ("UNSIGNED_LONG", "MPI_UNSIGNED_LONG", "L", None),
    ("UNSIGNED_LONG_LONG", "MPI_UNSIGNED_LONG_LONG", "Q", None),
    ("FLOAT", "MPI_FLOAT", "f", None),
    ("DOUBLE", "MPI_DOUBLE", "d", None),
    ("LONG_DOUBLE", "MPI_LONG_DOUBLE", "g", None),
    ("C_BOOL", "MPI_C_BOOL", "?", None),
    ("INT8_T", "MPI_INT8_T", "i1", None),
    ("INT16_T", "MPI_INT16_T", "i2", None),
    ("INT32_T", "MPI_INT32_T", "i4", None),
    ("INT64_T", "MPI_INT64_T", "i8", None),
    ("UINT8_T", "MPI_UINT8_T", "u1", None),
    ("UINT16_T", "MPI_UINT16_T", "u2", None),
    ("UINT32_T", "MPI_UINT32_T", "u4", None),
    ("UINT64_T", "MPI_UINT64_T", "u8", None),
    ("FLOAT16_T", "MPIX_C_FLOAT16", "e", None),
    ("BFLOAT16_T", "MPI_DATATYPE_NULL", None, None),
    ("C_COMPLEX", "MPI_C_COMPLEX", "F", None),
    ("C_DOUBLE_COMPLEX", "MPI_C_DOUBLE_COMPLEX", "D", None),
    ("C_LONG_DOUBLE_COMPLEX", "MPI_C_LONG_DOUBLE_COMPLEX", "G", None),
    ("CXX_BOOL", "MPI_CXX_BOOL", "?", None),
    ("CXX_FLOAT_COMPLEX", "MPI_CXX_FLOAT_COMPLEX", "F", None),
    ("CXX_DOUBLE_COMPLEX", "MPI_CXX_DOUBLE_COMPLEX", "D", None),
    ("CXX_LONG_DOUBLE_COMPLEX", "MPI_CXX_LONG_DOUBLE_COMPLEX", "G", None),
    ("SHORT_INT", "MPI_SHORT_INT", _pair("i2"), 6),
    ("TWOINT", "MPI_2INT", _pair("i4"), 8),
    ("LONG_INT", "MPI_LONG_INT", _pair("i8"), 12),
    ("FLOAT_INT", "MPI_FLOAT_INT", _pair("f4"), 8),
    ("DOUBLE_INT", "MPI_DOUBLE_INT", _pair("f8"), 12),
    ("LONG_DOUBLE_INT", "MPI_LONG_DOUBLE_INT", _pair("g"), 20),
    ("CHARACTER", "MPI_CHARACTER", "S1", None),
    ("LOGICAL", "MPI_LOGICAL", "i4", None),
    ("INTEGER", "MPI_INTEGER", "i4", None),
    ("REAL", "MPI_REAL", "f4", None),
    ("DOUBLE_PRECISION", "MPI_DOUBLE_PRECISION", "f8", None),
    ("COMPLEX", "MPI_COMPLEX", "c8", None),
    ("DOUBLE_COMPLEX", "MPI_DOUBLE_COMPLEX", "c16", None),
    ("LOGICAL1", "MPI_DATATYPE_NULL", None, None),
    ("LOGICAL2", "MPI_DATATYPE_NULL", None, None),
    ("LOGICAL4", "MPI_DATATYPE_NULL", None, None),
    ("LOGICAL8", "MPI_DATATYPE_NULL", None, None),
    ("LOGICAL16", "MPI_DATATYPE_NULL", None, None),
    ("INTEGER1", "MPI_INTEGER1", "i1", None),
    ("INTEGER2", "MPI_INTEGER2", "i2", None),
    ("INTEGER4", "MPI_INTEGER4", "i4", None),
    ("INTEGER8", "MPI_INTEGER8", "i8", None),
    ("INTEGER16", "MPI_DATATYPE_NULL", None, None),
    ("REAL2", "MPI_DATATYPE_NULL", None, None),
    ("REAL4", "MPI_REAL4", "f4", None),
    ("REAL8", "MPI_REAL8", "f8", None),
    ("REAL16", "MPI_REAL16", "g", None),
    ("COMPLEX4", "MPI_DATATYPE_NULL", None, None),
    ("COMPLEX8", "MPI_COMPLEX8", "c8", None),
    ("COMPLEX16", "MPI_COMPLEX16", "c16", None),
    ("COMPLEX32", "MPI_COMPLEX32", "G", None),
]
_ALIASES: Final[dict[str, str]] = {
    "INT_INT": "TWOINT", "UNSIGNED_INT": "UNSIGNED", "SIGNED_SHORT": "SHORT", "SIGNED_INT": "INT",
    "SIGNED_LONG": "LONG", "SIGNED_LONG_LONG": "LONG_LONG", "BOOL": "C_BOOL", "SINT8_T": "INT8_T",
    "SINT16_T": "INT16_T", "SINT32_T": "INT32_T", "SINT64_T": "INT64_T", "FLOAT32_T": "FLOAT",
    "FLOAT64_T": "DOUBLE", "C_FLOAT_COMPLEX": "C_COMPLEX", "F_BOOL": "LOGICAL", "F_INT": "INTEGER",
    "F_FLOAT": "REAL", "F_DOUBLE": "DOUBLE_PRECISION", "F_COMPLEX": "COMPLEX",
    "F_FLOAT_COMPLEX": "COMPLEX", "F_DOUBLE_COMPLEX": "DOUBLE_COMPLEX",
}

_by_name: dict[str, Datatype] = {}
for _key, _mpi_name, _np_dtype, _size in _TABLE:
    _by_name[_key] = Datatype._make(_mpi_name, _np_dtype, _size)
for _alias, _target in _ALIASES.items():
    _by_name[_alias] = _by_name[_target]
_null = _by_name["DATATYPE_NULL"]
for _key in ("BFLOAT16_T", "LOGICAL1", "LOGICAL2", "LOGICAL4", "LOGICAL8", "LOGICAL16", "INTEGER16",
             "REAL2", "COMPLEX4"):
    _by_name[_key] = _null  # not in this MPI (MPICH reports DATATYPE_NULL for them too)
DATATYPE_NULL: Final[Datatype] = _null
PACKED: Final[Datatype] = _by_name["PACKED"]
BYTE: Final[Datatype] = _by_name["BYTE"]
AINT: Final[Datatype] = _by_name["AINT"]
OFFSET: Final[Datatype] = _by_name["OFFSET"]
COUNT: Final[Datatype] = _by_name["COUNT"]
CHAR: Final[Datatype] = _by_name["CHAR"]
WCHAR: Final[Datatype] = _by_name["WCHAR"]
SIGNED_CHAR: Final[Datatype] = _by_name["SIGNED_CHAR"]
SHORT: Final[Datatype] = _by_name["SHORT"]
INT: Final[Datatype] = _by_name["INT"]
LONG: Final[Datatype] = _by_name["LONG"]
LONG_LONG: Final[Datatype] = _by_name["LONG_LONG"]
UNSIGNED_CHAR: Final[Datatype] = _by_name["UNSIGNED_CHAR"]
UNSIGNED_SHORT: Final[Datatype] = _by_name["UNSIGNED_SHORT"]
UNSIGNED: Final[Datatype] = _by_name["UNSIGNED"]
UNSIGNED_LONG: Final[Datatype] = _by_name["UNSIGNED_LONG"]
UNSIGNED_LONG_LONG: Final[Datatype] = _by_name["UNSIGNED_LONG_LONG"]
FLOAT: Final[Datatype] = _by_name["FLOAT"]
DOUBLE: Final[Datatype] = _by_name["DOUBLE"]
LONG_DOUBLE: Final[Datatype] = _by_name["LONG_DOUBLE"]
C_BOOL: Final[Datatype] = _by_name["C_BOOL"]
INT8_T: Final[Datatype] = _by_name["INT8_T"]
INT16_T: Final[Datatype] = _by_name["INT16_T"]
INT32_T: Final[Datatype] = _by_name["INT32_T"]
INT64_T: Final[Datatype] = _by_name["INT64_T"]
UINT8_T: Final[Datatype] = _by_name["UINT8_T"]
UINT16_T: Final[Datatype] = _by_name["UINT16_T"]
UINT32_T: Final[Datatype] = _by_name["UINT32_T"]
UINT64_T: Final[Datatype] = _by_name["UINT64_T"]
FLOAT16_T: Final[Datatype] = _by_name["FLOAT16_T"]
BFLOAT16_T: Final[Datatype] = _by_name["BFLOAT16_T"]
C_COMPLEX: Final[Datatype] = _by_name["C_COMPLEX"]
C_DOUBLE_COMPLEX: Final[Datatype] = _by_name["C_DOUBLE_COMPLEX"]
C_LONG_DOUBLE_COMPLEX: Final[Datatype] = _by_name["C_LONG_DOUBLE_COMPLEX"]
CXX_BOOL: Final[Datatype] = _by_name["CXX_BOOL"]
CXX_FLOAT_COMPLEX: Final[Datatype] = _by_name["CXX_FLOAT_COMPLEX"]
CXX_DOUBLE_COMPLEX: Final[Datatype] = _by_name["CXX_DOUBLE_COMPLEX"]
CXX_LONG_DOUBLE_COMPLEX: Final[Datatype] = _by_name["CXX_LONG_DOUBLE_COMPLEX"]
SHORT_INT: Final[Datatype] = _by_name["SHORT_INT"]
TWOINT: Final[Datatype] = _by_name["TWOINT"]
LONG_INT: Final[Datatype] = _by_name["LONG_INT"]
FLOAT_INT: Final[Datatype] = _by_name["FLOAT_INT"]
DOUBLE_INT: Final[Datatype] = _by_name["DOUBLE_INT"]
LONG_DOUBLE_INT: Final[Datatype] = _by_name["LONG_DOUBLE_INT"]
CHARACTER: Final[Datatype] = _by_name["CHARACTER"]
LOGICAL: Final[Datatype] = _by_name["LOGICAL"]
INTEGER: Final[Datatype] = _by_name["INTEGER"]
REAL: Final[Datatype] = _by_name["REAL"]
DOUBLE_PRECISION: Final[Datatype] = _by_name["DOUBLE_PRECISION"]
COMPLEX: Final[Datatype] = _by_name["COMPLEX"]
DOUBLE_COMPLEX: Final[Datatype] = _by_name["DOUBLE_COMPLEX"]
LOGICAL1: Final[Datatype] = _by_name["LOGICAL1"]
LOGICAL2: Final[Datatype] = _by_name["LOGICAL2"]
LOGICAL4: Final[Datatype] = _by_name["LOGICAL4"]
LOGICAL8: Final[Datatype] = _by_name["LOGICAL8"]
LOGICAL16: Final[Datatype] = _by_name["LOGICAL16"]
INTEGER1: Final[Datatype] = _by_name["INTEGER1"]
INTEGER2: Final[Datatype] = _by_name["INTEGER2"]
INTEGER4: Final[Datatype] = _by_name["INTEGER4"]
INTEGER8: Final[Datatype] = _by_name["INTEGER8"]
INTEGER16: Final[Datatype] = _by_name["INTEGER16"]
REAL2: Final[Datatype] = _by_name["REAL2"]
REAL4: Final[Datatype] = _by_name["REAL4"]
REAL8: Final[Datatype] = _by_name["REAL8"]
REAL16: Final[Datatype] = _by_name["REAL16"]
COMPLEX4: Final[Datatype] = _by_name["COMPLEX4"]
COMPLEX8: Final[Datatype] = _by_name["COMPLEX8"]
COMPLEX16: Final[Datatype] = _by_name["COMPLEX16"]
COMPLEX32: Final[Datatype] = _by_name["COMPLEX32"]
INT_INT: Final[Datatype] = _by_name["INT_INT"]
UNSIGNED_INT: Final[Datatype] = _by_name["UNSIGNED_INT"]
SIGNED_SHORT: Final[Datatype] = _by_name["SIGNED_SHORT"]
SIGNED_INT: Final[Datatype] = _by_name["SIGNED_INT"]
SIGNED_LONG: Final[Datatype] = _by_name["SIGNED_LONG"]
SIGNED_LONG_LONG: Final[Datatype] = _by_name["SIGNED_LONG_LONG"]
BOOL: Final[Datatype] = _by_name["BOOL"]
SINT8_T: Final[Datatype] = _by_name["SINT8_T"]
SINT16_T: Final[Datatype] = _by_name["SINT16_T"]
SINT32_T: Final[Datatype] = _by_name["SINT32_T"]
SINT64_T: Final[Datatype] = _by_name["SINT64_T"]
FLOAT32_T: Final[Datatype] = _by_name["FLOAT32_T"]
FLOAT64_T: Final[Datatype] = _by_name["FLOAT64_T"]
C_FLOAT_COMPLEX: Final[Datatype] = _by_name["C_FLOAT_COMPLEX"]
F_BOOL: Final[Datatype] = _by_name["F_BOOL"]
F_INT: Final[Datatype] = _by_name["F_INT"]
F_FLOAT: Final[Datatype] = _by_name["F_FLOAT"]
F_DOUBLE: Final[Datatype] = _by_name["F_DOUBLE"]
F_COMPLEX: Final[Datatype] = _by_name["F_COMPLEX"]
F_FLOAT_COMPLEX: Final[Datatype] = _by_name["F_FLOAT_COMPLEX"]
F_DOUBLE_COMPLEX: Final[Datatype] = _by_name["F_DOUBLE_COMPLEX"]

PREDEFINED: Final[dict[str, Datatype]] = dict(_by_name)
"""Every predefined type by its mpi4py name (aliases included)."""

_TYPECODES: Final[dict[str, str]] = {
    "?": "C_BOOL", "b": "SIGNED_CHAR", "h": "SHORT", "i": "INT", "l": "LONG", "q": "LONG_LONG",
    "B": "UNSIGNED_CHAR", "H": "UNSIGNED_SHORT", "I": "UNSIGNED", "L": "UNSIGNED_LONG",
    "Q": "UNSIGNED_LONG_LONG", "e": "FLOAT16_T", "f": "FLOAT", "d": "DOUBLE", "g": "LONG_DOUBLE",
    "Zf": "C_COMPLEX", "Zd": "C_DOUBLE_COMPLEX", "F": "C_COMPLEX", "D": "C_DOUBLE_COMPLEX",
    "Zg": "C_LONG_DOUBLE_COMPLEX", "G": "C_LONG_DOUBLE_COMPLEX", "i1": "INT8_T", "i2": "INT16_T",
    "i4": "INT32_T", "i8": "INT64_T", "f2": "FLOAT16_T", "f4": "FLOAT", "f8": "DOUBLE",
    "f16": "LONG_DOUBLE", "c8": "C_COMPLEX", "c16": "C_DOUBLE_COMPLEX", "c32": "C_LONG_DOUBLE_COMPLEX",
    "b1": "C_BOOL", "u1": "UINT8_T", "u2": "UINT16_T", "u4": "UINT32_T", "u8": "UINT64_T",
    "n": "COUNT", "N": "UNSIGNED_LONG", "p": "AINT", "P": "UNSIGNED_LONG", "c": "CHAR", "a": "CHAR",
    "S": "CHAR", "S1": "CHAR", "s": "CHAR", "1s": "CHAR", "U": "WCHAR", "U1": "WCHAR", "w": "WCHAR",
    "1w": "WCHAR", "u": "UINT16_T", "1u": "UINT16_T", "M": "INT64_T", "M8": "INT64_T",
    "m": "INT64_T", "m8": "INT64_T",
}
_typedict: Final[dict[str, Datatype]] = {code: _by_name[name] for code, name in _TYPECODES.items()}
_typedict_c: Final[dict[str, Datatype]] = {
    code: dt for code, dt in _typedict.items()
    if code in {"?", "B", "D", "F", "G", "H", "I", "L", "Q", "b", "b1", "c16", "c32", "c8", "d", "f",
                "f16", "f2", "f4", "f8", "g", "h", "i", "i1", "i2", "i4", "i8", "l", "q", "u1", "u2",
                "u4", "u8"}}
_typedict_f: Final[dict[str, Datatype]] = {
    code: _by_name[name] for code, name in {
        "l": "LOGICAL", "i": "INTEGER", "r": "REAL", "s": "REAL", "d": "DOUBLE_PRECISION",
        "c": "COMPLEX", "z": "DOUBLE_COMPLEX", "i1": "INTEGER1", "i2": "INTEGER2", "i4": "INTEGER4",
        "i8": "INTEGER8", "r4": "REAL4", "r8": "REAL8", "r16": "REAL16", "c8": "COMPLEX8",
        "c16": "COMPLEX16", "c32": "COMPLEX32"}.items()}

_MATCH: Final[dict[int, tuple[Datatype, ...]]] = {
    TYPECLASS_INTEGER: tuple(_by_name[n] for n in ("INT8_T", "INT16_T", "INT32_T", "INT64_T")),
    TYPECLASS_REAL: tuple(_by_name[n] for n in ("FLOAT16_T", "FLOAT", "DOUBLE", "LONG_DOUBLE")),
    TYPECLASS_COMPLEX: tuple(_by_name[n] for n in ("C_COMPLEX", "C_DOUBLE_COMPLEX",
                                                   "C_LONG_DOUBLE_COMPLEX")),
    TYPECLASS_LOGICAL: (_by_name["C_BOOL"],),
}


def _typecode(datatype: Datatype) -> str | None:
    """Return the numpy type character of a predefined type (mpi4py's private helper)."""
    return datatype.typechar or None


def from_dtype(dtype: np.dtype[Any]) -> Datatype | None:
    """Return the predefined type a numpy dtype maps to (None when it has none)."""
    if dtype.fields is not None:
        for dt in (_by_name["DOUBLE_INT"], _by_name["FLOAT_INT"], _by_name["LONG_INT"],
                   _by_name["TWOINT"], _by_name["SHORT_INT"], _by_name["LONG_DOUBLE_INT"]):
            if dt._np == dtype:
                return dt
        return None
    found = _typedict.get(dtype.char)
    if found is None and dtype.kind in "SUV":
        found = _typedict.get(dtype.kind)
    return found
