"""Datatypes: the predefined MPI types as numpy dtypes, and derived types built from them.

A predefined ``Datatype`` is a numpy dtype with MPI's name and size
(``DOUBLE`` is ``float64``, ``DOUBLE_INT`` the aligned struct ``(float64,
int32)`` that ``MAXLOC`` reduces). A derived type (``Create_contiguous``,
``Create_vector``, ``Create_indexed``, ``Create_struct``, ``Create_subarray``,
``Create_darray``, ``Create_resized``, ...) has a *typemap*: the byte offset
and predefined type of each element of one item (``_typemap.py``); item
``k`` starts ``k * extent`` bytes into the buffer. Sending ``count`` items
gathers their elements into a packed array, receiving scatters them back, so
every message on the wire is a plain numpy array and counts and virtual
times are the packed bytes:

* when every element is one predefined type at a multiple of its extent
  (vectors, subarrays, indexed types of one type), the buffer is read as an
  array of that type (``_base``) and the payload is of that dtype;
* otherwise (a struct of several types, byte offsets that split elements)
  the buffer is read as bytes (``_base`` is ``BYTE``) and the payload is the
  elements' bytes, in typemap order. Receive such a message with the same
  kind of type, or as ``MPI.BYTE``.

Rule 1: a buffer is always reinterpreted through ``_base.np_dtype``; only the
positions depend on the derived type.
Rule 2: derived types must be committed before use and never after ``Free``;
predefined types cannot be freed (``ERR_TYPE``). A type built from another
keeps working after that one is freed, as in MPI.
Rule 3: envelopes and contents are MPICH's (every count and displacement in
the "large count" list), so ``decode()`` and pickling rebuild any type.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from ..engine.assembly import current_task
from . import _typemap
from ._constants import (
    COMBINER_CONTIGUOUS, COMBINER_DARRAY, COMBINER_DUP, COMBINER_F90_COMPLEX, COMBINER_F90_INTEGER,
    COMBINER_F90_REAL, COMBINER_HINDEXED, COMBINER_HINDEXED_BLOCK, COMBINER_HVECTOR, COMBINER_INDEXED,
    COMBINER_INDEXED_BLOCK, COMBINER_NAMED, COMBINER_RESIZED, COMBINER_STRUCT, COMBINER_SUBARRAY,
    COMBINER_VECTOR, DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, DISTRIBUTE_DFLT_DARG, DISTRIBUTE_NONE,
    ERR_ARG, ERR_COUNT, ERR_DIMS, ERR_TYPE, ORDER_C, ORDER_F, TYPECLASS_COMPLEX, TYPECLASS_INTEGER,
    TYPECLASS_LOGICAL, TYPECLASS_REAL,
)
from ._attributes import TypeAttributes
from ._errors import error

_ids = itertools.count(1)

_COMBINER_NAMES: Final[dict[int, str]] = {
    COMBINER_NAMED: "NAMED", COMBINER_DUP: "DUP", COMBINER_CONTIGUOUS: "CONTIGUOUS",
    COMBINER_VECTOR: "VECTOR", COMBINER_HVECTOR: "HVECTOR", COMBINER_INDEXED: "INDEXED",
    COMBINER_HINDEXED: "HINDEXED", COMBINER_INDEXED_BLOCK: "INDEXED_BLOCK",
    COMBINER_HINDEXED_BLOCK: "HINDEXED_BLOCK", COMBINER_STRUCT: "STRUCT",
    COMBINER_SUBARRAY: "SUBARRAY", COMBINER_DARRAY: "DARRAY", COMBINER_RESIZED: "RESIZED",
    COMBINER_F90_INTEGER: "F90_INTEGER", COMBINER_F90_REAL: "F90_REAL",
    COMBINER_F90_COMPLEX: "F90_COMPLEX",
}
_F90: Final = (COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX)
_CHARS: Final[dict[str, str]] = {  # mpi4py's type characters where numpy's dtype says another
    "MPI_CHAR": "c", "MPI_CHARACTER": "c", "MPI_AINT": "p", "MPI_OFFSET": "p", "MPI_COUNT": "p"}


def _rank() -> int | None:
    """The calling rank, for error messages (None outside any rank)."""
    task = current_task()
    world = None if task is None else task.comm
    return None if world is None else int(world.rank)


class Datatype(TypeAttributes):
    """An MPI datatype: sizes and bounds, derived-type constructors, ``Commit``/``Free``, packing."""

    __slots__ = ("_id", "_name", "_np", "_layout", "_base", "_combiner", "_decoded", "_contents",
                 "_committed", "_freed", "_predefined", "_named", "_pos", "__weakref__")

    _id: int
    _name: str
    _np: np.dtype[Any] | None  # predefined: the numpy dtype (None: DATATYPE_NULL / not in numpy)
    _layout: _typemap.Layout
    _base: Datatype  # the predefined type buffers are read as (self for predefined, BYTE for structs)
    _combiner: int
    _decoded: tuple[Datatype | None, dict[str, Any]]  # decode()'s old type and keyword arguments
    _contents: tuple[list[int], list[int], list[int], list[Datatype]]  # ints, addresses, counts, types
    _committed: bool
    _freed: bool
    _predefined: bool
    _named: bool
    _pos: NDArray[np.intp] | None  # cache: one item's positions in _base elements

    def __new__(cls, datatype: Datatype | None = None) -> Datatype:
        if datatype is None:
            datatype = DATATYPE_NULL
        if not isinstance(datatype, Datatype):
            raise TypeError(f"MPI.Datatype({datatype!r}): expected a Datatype")
        self = object.__new__(cls)
        self._id, self._name, self._np, self._layout = (datatype._id, datatype._name, datatype._np,
                                                        datatype._layout)
        self._base, self._combiner, self._decoded = datatype._base, datatype._combiner, datatype._decoded
        self._contents, self._committed, self._freed = (datatype._contents, datatype._committed,
                                                        datatype._freed)
        self._predefined, self._named, self._pos = datatype._predefined, datatype._named, datatype._pos
        return self

    @classmethod
    def _make(cls, name: str, np_dtype: Any, size: int | None = None) -> Datatype:
        self = object.__new__(cls)
        dt = None if np_dtype is None else np.dtype(np_dtype)
        self._id = next(_ids)
        self._name = name
        self._np = dt
        extent = 0 if dt is None else dt.itemsize
        self._layout = _typemap.predefined(self, extent if size is None else size, extent,
                                           1 if dt is None else dt.alignment)
        self._base = self
        self._combiner = COMBINER_NAMED
        self._decoded = (None, {})
        self._contents = ([], [], [], [])
        self._committed = True
        self._freed = False
        self._predefined = True
        self._named = True
        self._pos = None
        return self

    def _derive(self, layout: _typemap.Layout, combiner: int, old: Datatype | None,
                params: dict[str, Any], contents: tuple[list[int], list[int], list[int], list[Datatype]]
                ) -> Datatype:
        """Return a new uncommitted type with ``layout``, made by ``combiner`` from ``old``/``params``."""
        new = object.__new__(Datatype)
        new._id = next(_ids)
        new._name = ""
        new._np = None
        new._layout = layout
        leaf = layout.leaf
        new._base = leaf if leaf is not None and layout.aligned else BYTE
        new._combiner = combiner
        new._decoded = (old, params)
        new._contents = contents
        new._committed = False
        new._freed = False
        new._predefined = False
        new._named = False
        new._pos = None
        return new

    # ---- facts ----

    def __eq__(self, other: object) -> bool:
        # a freed type is DATATYPE_NULL, as MPI_Type_free sets the handle to MPI_DATATYPE_NULL
        return isinstance(other, Datatype) and (other._id == self._id or (not self and not other))

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable; tables key by _id

    def __bool__(self) -> bool:
        return self._id != DATATYPE_NULL._id and not self._freed

    def __repr__(self) -> str:
        if self._named:
            return f"<MPI.Datatype {self._name}>"
        state = "freed" if self._freed else "committed" if self._committed else "uncommitted"
        how = _COMBINER_NAMES.get(self._combiner, "?")
        return f"<MPI.Datatype {how} size={self.size} extent={self.extent} {state}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._named or self._combiner in _F90:
            key = _keys.get(self._id)
            if self._combiner in _F90 or key is None or _by_name[key] is not self:
                if self._combiner in _F90:
                    return (_rebuild, (self._combiner, None, self._decoded[1], True))
                return (type(self), (_by_name[key] if key else DATATYPE_NULL,))
            return (_predefined, (key,))
        old, params = self._decoded
        return (_rebuild, (self._combiner, old, params, self._committed))

    def Get_size(self) -> int:
        """Return the bytes of data one item holds."""
        return self._layout.size

    def Get_extent(self) -> tuple[int, int]:
        """Return ``(lb, extent)``: an item's lower bound and the bytes from one item to the next."""
        return (self._layout.lb, self._layout.extent)

    def Get_true_extent(self) -> tuple[int, int]:
        """Return ``(true_lb, true_extent)``: the span the data itself covers."""
        lay = self._layout
        return (lay.true_lb, lay.true_ub - lay.true_lb)

    Get_extent_c = Get_extent
    Get_true_extent_c = Get_true_extent
    Get_size_c = Get_size

    size = property(Get_size, doc="Bytes of data one item holds.")
    extent = property(lambda self: self._layout.extent, doc="Bytes from one item to the next.")
    lb = property(lambda self: self._layout.lb, doc="Lower bound of an item.")
    ub = property(lambda self: self._layout.ub, doc="Upper bound of an item.")
    true_extent = property(lambda self: self.Get_true_extent()[1], doc="Span the data covers.")
    true_lb = property(lambda self: self._layout.true_lb, doc="Where the data starts.")
    true_ub = property(lambda self: self._layout.true_ub, doc="Where the data ends.")
    combiner = property(lambda self: self._combiner, doc="How the type was made (COMBINER_*).")
    is_named = property(lambda self: self._named, doc="True for MPI's named types.")
    is_predefined = property(lambda self: self._predefined,
                             doc="True for named types and the Create_f90_* types.")

    # the underscored internals older modules read
    _size = property(lambda self: self._layout.size)
    _extent = property(lambda self: self._layout.extent)
    _lb = property(lambda self: self._layout.lb)

    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        """Return ``(num_integers, num_addresses, num_counts, num_datatypes, combiner)``."""
        ints, addrs, counts, types = self._contents
        return (len(ints), len(addrs), len(counts), len(types), self._combiner)

    envelope = property(Get_envelope, doc="Get_envelope()'s tuple.")

    def Get_contents(self) -> tuple[list[int], list[int], list[int], list[Datatype]]:
        """Return ``(integers, addresses, counts, datatypes)`` the type was made with.

        Derived types among them are new handles (free them when done, as in MPI); named types
        are the named types themselves.
        """
        if self._named:
            raise error(ERR_TYPE, _rank(), f"{self._name}.Get_contents()", "a named datatype has no "
                        "contents", "check Get_envelope()'s combiner first (COMBINER_NAMED)")
        ints, addrs, counts, types = self._contents
        return (list(ints), list(addrs), list(counts), [_handle(t) for t in types])

    contents = property(Get_contents, doc="Get_contents()'s tuple.")

    def decode(self) -> tuple[Datatype, str, dict[str, Any]]:
        """Return ``(old type, combiner name, keyword arguments)``: how to make this type again.

        ``getattr(old, "Create_" + name.lower())(**kwargs)`` rebuilds it (``Dup`` for ``"DUP"``).
        """
        if self._named:
            return (self, "NAMED", {})
        old, params = self._decoded
        kwargs = dict(params)
        if "datatypes" in kwargs:
            kwargs["datatypes"] = [_handle(t) for t in kwargs["datatypes"]]
        base = Datatype(DATATYPE_NULL) if old is None else _handle(old)
        return (base, _COMBINER_NAMES[self._combiner], kwargs)

    def Get_name(self) -> str:
        """Return the type's name (``MPI_DOUBLE``; ``""`` for derived types until named)."""
        return self._name

    def Set_name(self, name: str) -> None:
        """Name the type."""
        self._name = str(name)

    name = property(Get_name, Set_name, doc="The type's name.")

    def _code_type(self) -> Datatype | None:
        """The predefined type this one stands for (itself, or what a chain of Dup's copies)."""
        dt: Datatype | None = self
        while dt is not None and dt._combiner == COMBINER_DUP:
            dt = dt._decoded[0]
        return dt if dt is not None and dt._np is not None and dt._predefined else None

    @property
    def typechar(self) -> str:
        """The numpy type character (``"d"`` for DOUBLE; ``"V"`` for pairs and derived types)."""
        dt = self._code_type()
        if dt is None:
            return "" if self._id == DATATYPE_NULL._id else "V"
        assert dt._np is not None
        return _CHARS.get(dt._name, dt._np.char)

    @property
    def typestr(self) -> str:
        """The numpy type string without byte order (``"f8"`` for DOUBLE; ``"V24"`` for derived types)."""
        dt = self._code_type()
        if dt is None:
            return "" if self._id == DATATYPE_NULL._id else f"V{self.extent}"
        assert dt._np is not None
        text: str = dt._np.str
        return text.lstrip("<>|=")

    def tocode(self) -> str:
        """Return the type's numpy type character; ValueError for pairs and derived types."""
        code = self.typechar
        if not code or code == "V":
            raise ValueError(f"{self!r}.tocode(): cannot map to character code or type string")
        return code

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
        """Free a derived type (named types cannot be freed)."""
        if self._predefined:
            raise error(ERR_TYPE, _rank(), f"{self._name or 'Datatype'}.Free()", "a predefined datatype "
                        "cannot be freed", "free only the types you created")
        if self._freed:
            raise error(ERR_TYPE, _rank(), "Datatype.Free()", "the datatype was freed already",
                        "free each type once")
        try:
            self._delete_attrs("Datatype.Free()")  # each attribute's delete_fn runs first
        finally:
            self._freed = True
            self._forget_attrs()

    def free(self) -> None:
        """Free the datatype where that applies; nothing for predefined, null or freed types (mpi4py's safe free).

        A copy of a predefined type (``Datatype(MPI.INT)``) becomes ``DATATYPE_NULL``, as mpi4py
        sets its handle to null; the predefined constant itself stays as it is.
        """
        if self and self._predefined:
            if not any(self is const for const in _by_name.values()):
                self._freed = True
        elif self:
            self.Free()

    def Dup(self) -> Datatype:
        """Return a copy of the type (committed when this one is)."""
        self._check_usable("Dup")
        new = self._derive(self._layout, COMBINER_DUP, self, {}, ([], [], [], [self]))
        new._committed = self._committed or self._predefined
        try:
            self._copy_attrs_to(new, "Datatype.Dup()")  # through each keyval's copy_fn
        except BaseException:
            new._freed = True
            raise
        return new

    Create_dup = Dup

    def _check_usable(self, what: str) -> None:
        if self._freed:
            raise error(ERR_TYPE, _rank(), f"Datatype.{what}()", "the datatype was freed",
                        "create it again, or keep it until the last call that uses it")
        if self._base._np is None:
            raise error(ERR_TYPE, _rank(), f"Datatype.{what}()",
                        f"{self._name or 'this datatype'} is not available (DATATYPE_NULL, or a "
                        "type numpy has no dtype for)", "use another datatype")

    # ---- derived types ----

    def _blocks(self, call: str, combiner: int, starts: Sequence[int], counts: Sequence[int],
                params: dict[str, Any], contents: list[int]) -> Datatype:
        self._check_usable(call)
        layout = _typemap.blocks([self] * len(starts), starts, counts)
        return self._derive(layout, combiner, self, params, ([], [], contents, [self]))

    def Create_contiguous(self, count: int) -> Datatype:
        """Return a type of ``count`` consecutive items of this type."""
        count = _int_arg("Create_contiguous", "count", count, True)
        return self._blocks("Create_contiguous", COMBINER_CONTIGUOUS, [0], [count], {"count": count},
                            [count])

    def Create_vector(self, count: int, blocklength: int, stride: int) -> Datatype:
        """Return ``count`` blocks of ``blocklength`` items, block starts ``stride`` items apart."""
        count = _int_arg("Create_vector", "count", count, True)
        blocklength = _int_arg("Create_vector", "blocklength", blocklength, True)
        stride = _int_arg("Create_vector", "stride", stride)
        ext = self.extent
        return self._blocks("Create_vector", COMBINER_VECTOR, [i * stride * ext for i in range(count)],
                            [blocklength] * count,
                            {"count": count, "blocklength": blocklength, "stride": stride},
                            [count, blocklength, stride])

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> Datatype:
        """Like ``Create_vector`` with ``stride`` in bytes."""
        count = _int_arg("Create_hvector", "count", count, True)
        blocklength = _int_arg("Create_hvector", "blocklength", blocklength, True)
        stride = _int_arg("Create_hvector", "stride", stride)
        return self._blocks("Create_hvector", COMBINER_HVECTOR, [i * stride for i in range(count)],
                            [blocklength] * count,
                            {"count": count, "blocklength": blocklength, "stride": stride},
                            [count, blocklength, stride])

    def Create_indexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        """Return blocks of ``blocklengths[i]`` items at ``displacements[i]`` items."""
        bls = _int_list("Create_indexed", "blocklengths", blocklengths, True)
        disps = _int_list("Create_indexed", "displacements", displacements, n=len(bls))
        ext = self.extent
        return self._blocks("Create_indexed", COMBINER_INDEXED, [d * ext for d in disps], bls,
                            {"blocklengths": bls, "displacements": disps}, [len(bls), *bls, *disps])

    def Create_hindexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        """Return blocks of ``blocklengths[i]`` items at ``displacements[i]`` bytes."""
        bls = _int_list("Create_hindexed", "blocklengths", blocklengths, True)
        disps = _int_list("Create_hindexed", "displacements", displacements, n=len(bls))
        return self._blocks("Create_hindexed", COMBINER_HINDEXED, disps, bls,
                            {"blocklengths": bls, "displacements": disps}, [len(bls), *bls, *disps])

    def Create_indexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        """Return blocks of ``blocklength`` items at ``displacements[i]`` items."""
        bl = _int_arg("Create_indexed_block", "blocklength", blocklength, True)
        disps = _int_list("Create_indexed_block", "displacements", displacements)
        ext = self.extent
        return self._blocks("Create_indexed_block", COMBINER_INDEXED_BLOCK, [d * ext for d in disps],
                            [bl] * len(disps), {"blocklength": bl, "displacements": disps},
                            [len(disps), bl, *disps])

    def Create_hindexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        """Return blocks of ``blocklength`` items at ``displacements[i]`` bytes."""
        bl = _int_arg("Create_hindexed_block", "blocklength", blocklength, True)
        disps = _int_list("Create_hindexed_block", "displacements", displacements)
        return self._blocks("Create_hindexed_block", COMBINER_HINDEXED_BLOCK, disps, [bl] * len(disps),
                            {"blocklength": bl, "displacements": disps}, [len(disps), bl, *disps])

    @classmethod
    def Create_struct(cls, blocklengths: Sequence[int], displacements: Sequence[int],
                      datatypes: Sequence[Datatype]) -> Datatype:
        """Return blocks of ``blocklengths[i]`` items of ``datatypes[i]`` at ``displacements[i]`` bytes.

        The extent is padded to the largest alignment of the members, as a C compiler pads a
        struct (unless a member was made with ``Create_resized``).
        """
        bls = _int_list("Create_struct", "blocklengths", blocklengths, True)
        disps = _int_list("Create_struct", "displacements", displacements, n=len(bls))
        types = list(datatypes)
        if len(types) != len(bls):
            raise ValueError(f"Datatype.Create_struct(): expecting {len(bls)} items, got {len(types)} "
                             "datatypes; pass one datatype per block")
        for t in types:
            if not isinstance(t, Datatype):
                raise TypeError(f"Datatype.Create_struct(): {t!r} is not a Datatype")
            t._check_usable("Create_struct")
        layout = _typemap.blocks(types, disps, bls, struct=True)
        return DATATYPE_NULL._derive(layout, COMBINER_STRUCT, None,
                                     {"blocklengths": bls, "displacements": disps, "datatypes": types},
                                     ([], [], [len(bls), *bls, *disps], types))

    def Create_subarray(self, sizes: Sequence[int], subsizes: Sequence[int], starts: Sequence[int],
                        order: int = ORDER_C) -> Datatype:
        """Return the ``subsizes`` block at ``starts`` of an array of ``sizes`` items (C or F order)."""
        call = "Create_subarray"
        sizes = _int_list(call, "sizes", sizes)
        subsizes = _int_list(call, "subsizes", subsizes, n=len(sizes))
        starts = _int_list(call, "starts", starts, n=len(sizes))
        order = _order(call, order)
        for n, sub, st in zip(sizes, subsizes, starts):
            if n < 1 or sub < 1 or st < 0 or st + sub > n:
                raise error(ERR_ARG, _rank(), f"Datatype.{call}({sizes}, {subsizes}, {starts})",
                            f"a block of {sub} from {st} does not fit in a dimension of {n}",
                            "pass 0 <= starts[i] and starts[i] + subsizes[i] <= sizes[i], all >= 1")
        picks = [np.arange(st, st + sub, dtype=np.int64) for st, sub in zip(starts, subsizes)]
        params = {"sizes": sizes, "subsizes": subsizes, "starts": starts, "order": order}
        return self._grid(call, COMBINER_SUBARRAY, sizes, picks, order, params,
                          ([len(sizes), order], [], [*sizes, *subsizes, *starts], [self]))

    def Create_darray(self, size: int, rank: int, gsizes: Sequence[int], distribs: Sequence[int],
                      dargs: Sequence[int], psizes: Sequence[int], order: int = ORDER_C) -> Datatype:
        """Return the part process ``rank`` of ``size`` owns of a block/cyclic distributed array."""
        call = "Create_darray"
        size = _int_arg(call, "size", size, True)
        rank = _int_arg(call, "rank", rank, True)
        gsizes = _int_list(call, "gsizes", gsizes)
        distribs = _int_list(call, "distribs", distribs, n=len(gsizes))
        dargs = _int_list(call, "dargs", dargs, n=len(gsizes))
        psizes = _int_list(call, "psizes", psizes, n=len(gsizes))
        order = _order(call, order)
        if int(np.prod(psizes)) != size or not 0 <= rank < size:
            raise error(ERR_ARG, _rank(), f"Datatype.{call}({size}, {rank}, psizes={psizes})",
                        "the process grid does not hold `size` processes, or `rank` is not one of them",
                        "pass psizes whose product is size, and 0 <= rank < size")
        for d in distribs:
            if d not in (DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, DISTRIBUTE_NONE):
                raise error(ERR_ARG, _rank(), f"Datatype.{call}(distribs={distribs})",
                            f"{d} is not a distribution", "pass MPI.DISTRIBUTE_BLOCK, "
                            "DISTRIBUTE_CYCLIC or DISTRIBUTE_NONE")
        picks = _typemap.darray_picks(size, rank, gsizes, distribs, dargs, psizes, DISTRIBUTE_BLOCK,
                                      DISTRIBUTE_CYCLIC, DISTRIBUTE_DFLT_DARG)
        params = {"size": size, "rank": rank, "gsizes": gsizes, "distribs": distribs, "dargs": dargs,
                  "psizes": psizes, "order": order}
        ints = [size, rank, len(gsizes), *distribs, *dargs, *psizes, order]
        return self._grid(call, COMBINER_DARRAY, gsizes, picks, order, params,
                          (ints, [], list(gsizes), [self]))

    def _grid(self, call: str, combiner: int, sizes: list[int], picks: list[NDArray[np.int64]],
              order: int, params: dict[str, Any], contents: Any) -> Datatype:
        """The cells ``picks`` of an array of ``sizes`` items of this type, extent the whole array."""
        self._check_usable(call)
        flat = _typemap.cells(sizes, picks, order == ORDER_F)
        ext = self.extent
        inner = _typemap.blocks([self] * len(flat), (flat * ext).tolist(), [1] * len(flat))
        layout = _typemap.resized(inner, 0, int(np.prod(sizes)) * ext)
        layout.sticky = False
        return self._derive(layout, combiner, self, params, contents)

    def Create_resized(self, lb: int, extent: int) -> Datatype:
        """Return this type with lower bound ``lb`` and ``extent`` bytes; its data stays in place."""
        lb = _int_arg("Create_resized", "lb", lb)
        extent = _int_arg("Create_resized", "extent", extent)
        self._check_usable("Create_resized")
        return self._derive(_typemap.resized(self._layout, lb, extent), COMBINER_RESIZED, self,
                            {"lb": lb, "extent": extent}, ([], [], [lb, extent], [self]))

    Resized = Create_resized

    @classmethod
    def Create_f90_integer(cls, r: int) -> Datatype:
        """Return the predefined integer type of at least ``r`` decimal digits (Fortran's KIND)."""
        r = _int_arg("Create_f90_integer", "r", r)
        for limit, name in ((2, "INTEGER1"), (4, "INTEGER2"), (9, "INTEGER4"), (18, "INTEGER8")):
            if r <= limit:
                return _f90(COMBINER_F90_INTEGER, {"r": r}, _by_name[name], [r])
        raise error(ERR_ARG, _rank(), f"Datatype.Create_f90_integer({r})", "no integer type has "
                    f"{r} decimal digits here (the widest has 18)", "pass r <= 18")

    @classmethod
    def Create_f90_real(cls, p: int, r: int) -> Datatype:
        """Return the predefined real type of at least ``p`` digits and exponent range ``r``."""
        return _f90(COMBINER_F90_REAL, {"p": p, "r": r}, _real(p, r, "Create_f90_real", False), [p, r])

    @classmethod
    def Create_f90_complex(cls, p: int, r: int) -> Datatype:
        """Return the predefined complex type of at least ``p`` digits and exponent range ``r``."""
        return _f90(COMBINER_F90_COMPLEX, {"p": p, "r": r}, _real(p, r, "Create_f90_complex", True),
                    [p, r])

    @classmethod
    def Get_value_index(cls, value: Datatype, index: Datatype) -> Datatype:
        """Return the (value, index) pair type MAXLOC/MINLOC reduce (DATATYPE_NULL if none)."""
        for dt, what in ((value, "value"), (index, "index")):
            if not isinstance(dt, Datatype) or not dt or dt._np is None:
                raise error(ERR_TYPE, _rank(), "Datatype.Get_value_index()", f"the {what} type "
                            f"{dt!r} is not a datatype", "pass predefined types such as MPI.DOUBLE")
        if index == INT:
            pairs = ((SHORT, SHORT_INT), (INT, TWOINT), (LONG, LONG_INT), (FLOAT, FLOAT_INT),
                     (DOUBLE, DOUBLE_INT), (LONG_DOUBLE, LONG_DOUBLE_INT))
            for plain, pair in pairs:
                if value == plain:
                    return pair
        return DATATYPE_NULL

    # ---- packing: Pack, Unpack, Pack_size and their external twins are _packing.METHODS ----

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

    def _item(self) -> NDArray[np.intp]:
        """One item's positions, in ``_base`` elements from the item's start."""
        if self._pos is None:
            lay = self._layout
            if self._base is lay.leaf:
                unit = self._base._layout.extent
                pos = lay.typemap()[0] // unit if unit else lay.typemap()[0]
            else:
                pos = _typemap.byte_positions(lay.typemap(), lay.leaf, _by_id)
            self._pos = pos.astype(np.intp)
        return self._pos

    def _positions(self, count: int) -> NDArray[np.intp] | None:
        """Base-element positions of ``count`` items (None: contiguous, no gather needed)."""
        if self._predefined:
            return None
        index = self._item()
        step = self.extent // self._base._layout.extent if self._base._layout.extent else 0
        if step == len(index) and np.array_equal(index, np.arange(step)):
            return None  # contiguous after all (Create_contiguous, Dup)
        return (np.arange(count, dtype=np.intp)[:, None] * step + index[None, :]).ravel()

    def _elements(self) -> int:
        """Base elements one item holds."""
        return 1 if self._predefined else len(self._item())

    def _wire_size(self) -> int:
        """Bytes one item takes in a message (its size, plus the padding inside pair types)."""
        return self._elements() * self._base._layout.extent

    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> Datatype:
        """Return the predefined Fortran type of ``typeclass`` (TYPECLASS_*) with ``size`` bytes."""
        for dt in _MATCH.get(typeclass, ()):
            if dt._size == size:
                return dt
        raise error(ERR_ARG, _rank(), f"Datatype.Match_size({typeclass}, {size})",
                    "no predefined type of that class has that size",
                    "pass TYPECLASS_INTEGER (1, 2, 4, 8), TYPECLASS_REAL (4, 8, 16) or "
                    "TYPECLASS_COMPLEX (8, 16, 32)")


def _handle(dt: Datatype) -> Datatype:
    """A new handle of a derived type (named types are returned themselves).

    Live even when the user freed the handle the type was built from: a type
    in use by another stays, as MPI_Type_free leaves it to its users.
    """
    if dt._named or dt._combiner in _F90:
        return dt
    new = Datatype(dt)
    new._freed = False
    return new


def _int_arg(call: str, what: str, value: Any, nonneg: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Datatype.{call}(): {what}={value!r} is not an int")
    if nonneg and value < 0:
        raise error(ERR_COUNT if what in ("count", "blocklength", "blocklengths") else ERR_ARG, _rank(),
                    f"Datatype.{call}({what}={value!r})", f"negative {what} {value}", "pass counts >= 0")
    return int(value)


def _int_list(call: str, what: str, values: Any, nonneg: bool = False, n: int | None = None
              ) -> list[int]:
    if isinstance(values, (int, np.integer)) and n is not None:
        values = [values] * n
    out = [_int_arg(call, what, v, nonneg) for v in values]
    if n is not None and len(out) != n:
        raise ValueError(f"Datatype.{call}(): expecting {n} items, got {len(out)} {what}; pass one "
                         "per block")
    return out


def _order(call: str, order: int) -> int:
    if order not in (ORDER_C, ORDER_F):
        raise error(ERR_ARG, _rank(), f"Datatype.{call}(order={order!r})", "not an array order",
                    "pass MPI.ORDER_C or MPI.ORDER_FORTRAN")
    return int(order)


_f90_cache: dict[tuple[int, tuple[tuple[str, int], ...]], Datatype] = {}


def _f90(combiner: int, params: dict[str, int], base: Datatype, ints: list[int]) -> Datatype:
    """The Create_f90_* type of ``params``: ``base``'s layout, predefined, one handle per params."""
    key = (combiner, tuple(sorted(params.items())))
    found = _f90_cache.get(key)
    if found is None:
        found = base._derive(base._layout, combiner, None, params, (ints, [], [], []))
        found._np = base._np
        found._base = base
        found._predefined = True
        found._committed = True
        _f90_cache[key] = found
    return found


def _real(p: int, r: int, call: str, complex_: bool) -> Datatype:
    p = _int_arg(call, "p", p)
    r = _int_arg(call, "r", r)
    for pmax, rmax, real, cplx in ((6, 37, "REAL4", "COMPLEX8"), (15, 307, "REAL8", "COMPLEX16"),
                                   (18, 4931, "REAL16", "COMPLEX32")):
        if p <= pmax and r <= rmax:
            return _by_name[cplx if complex_ else real]
    raise error(ERR_ARG, _rank(), f"Datatype.{call}({p}, {r})", "no real type has that precision "
                "and range here", "pass p <= 18 and r <= 4931")


def _rebuild(combiner: int, old: Datatype | None, params: dict[str, Any], committed: bool) -> Datatype:
    """Make a type again from its decode() (what unpickling a derived type calls)."""
    name = _COMBINER_NAMES[combiner]
    ctor = "Dup" if name == "DUP" else "Create_" + name.lower()
    new: Datatype = getattr(old if old is not None else Datatype, ctor)(**params)
    if committed and not new._predefined:
        new.Commit()
    return new


def _check_count(call: str, count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"Datatype.{call}(count={count!r}): counts must be ints >= 0")


def _predefined(name: str) -> Datatype:
    return _by_name[name]

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

_MATCH: Final[dict[int, tuple[Datatype, ...]]] = {  # MPICH answers with the Fortran types
    TYPECLASS_INTEGER: tuple(_by_name[n] for n in ("INTEGER1", "INTEGER2", "INTEGER4", "INTEGER8")),
    TYPECLASS_REAL: tuple(_by_name[n] for n in ("REAL4", "REAL8", "REAL16")),
    TYPECLASS_COMPLEX: tuple(_by_name[n] for n in ("COMPLEX8", "COMPLEX16", "COMPLEX32")),
    TYPECLASS_LOGICAL: (_by_name["LOGICAL"],),
}

_keys: Final[dict[int, str]] = {}
"""The mpi4py name of each predefined type (its first name in the table), by id: what pickles it."""
for _key in [k for k, *_ in _TABLE] + list(_ALIASES):
    _keys.setdefault(_by_name[_key]._id, _key)
_by_id: Final[dict[int, Datatype]] = {dt._id: dt for dt in _by_name.values()}


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
