"""``mpi4py.util.dtlib``: convert between numpy dtypes and MPI datatypes.

``from_numpy_dtype(dtype)`` builds the MPI datatype that lays out one item
of ``dtype``: a scalar gives (a ``Dup`` of) its predefined type, a
sub-array a contiguous or subarray type, a structured dtype a struct type
resized to the dtype's itemsize. ``to_numpy_dtype(datatype)`` goes back,
reading how the datatype was made (``combiner`` and ``decode()``): named
types, ``Dup``, contiguous, full subarrays, vectors, indexed blocks,
structs and resized structs, and the Fortran types; anything else (a
partial subarray, a resized scalar) is a ``ValueError``.

Both work on the public ``Datatype`` API only, and free every handle
``decode()`` hands them. With numpy missing (``dtlib._np_dtype = None``),
``to_numpy_dtype`` returns the specification it would pass to
``numpy.dtype`` (a code, a ``(code, shape)`` tuple or a dict of fields).
"""

from __future__ import annotations

from typing import Any

from ... import MPI as _package
from .._constants import (
    COMBINER_CONTIGUOUS, COMBINER_DUP, COMBINER_F90_COMPLEX, COMBINER_F90_INTEGER,
    COMBINER_F90_REAL, COMBINER_HINDEXED, COMBINER_HINDEXED_BLOCK, COMBINER_HVECTOR,
    COMBINER_INDEXED, COMBINER_INDEXED_BLOCK, COMBINER_NAMED, COMBINER_RESIZED, COMBINER_STRUCT,
    COMBINER_SUBARRAY, COMBINER_VECTOR, ORDER_FORTRAN,
)
from .._typeinfo import _pair_value, _typealign, _typecode

MPI: Any = _package  # names the package sets up at import (constants, datatypes) are not visible to mypy

try:
    from numpy import dtype as _np_dtype
except ImportError:  # pragma: no cover - numpy is a dependency of simcluster
    _np_dtype = None  # type: ignore[assignment,misc]

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]

_F90 = (COMBINER_F90_INTEGER, COMBINER_F90_REAL, COMBINER_F90_COMPLEX)
_INDEXED = (COMBINER_INDEXED, COMBINER_HINDEXED, COMBINER_INDEXED_BLOCK, COMBINER_HINDEXED_BLOCK)
_IN_ITEMS = (COMBINER_INDEXED, COMBINER_INDEXED_BLOCK)  # displacements counted in items, not bytes


def _release(*datatypes: Any) -> None:
    """Free the derived handles among ``datatypes`` (what decode() returned)."""
    for datatype in datatypes:
        if datatype and not datatype.is_predefined:
            datatype.Free()


def _spec(spec: Any, **kwargs: Any) -> Any:
    """``numpy.dtype(spec, **kwargs)``, or the specification itself without numpy."""
    if _np_dtype is None:
        return (spec, kwargs) if kwargs else spec
    return _np_dtype(spec, **kwargs)


# ---- alignment: whether every member sits where a C compiler would put it ----


def _member_offsets(datatype: Any) -> tuple[list[Any], list[int], list[Any]]:
    """The member types of a derived type, their byte offsets, and the handles to free."""
    combiner = datatype.combiner
    base, _, info = datatype.decode()
    members, offsets = [base], [0]
    if combiner == COMBINER_RESIZED:
        offsets = [info["extent"]]
    elif combiner == COMBINER_STRUCT:
        members, offsets = list(info["datatypes"]), list(info["displacements"])
        return members, offsets, [base, *members]
    elif combiner == COMBINER_HVECTOR:
        offsets = [info["stride"] if info["count"] > 1 else 0]
    elif combiner in (COMBINER_HINDEXED, COMBINER_HINDEXED_BLOCK):
        members = [base] * len(info["displacements"])
        offsets = list(info["displacements"])
    return members, offsets, [base]


def _is_aligned(datatype: Any, offset: int = 0) -> bool:
    """Whether ``datatype`` placed at byte ``offset`` keeps every member aligned."""
    if datatype.is_predefined:
        if offset == 0:
            return True
        return offset % (_typealign(datatype) or 1) == 0
    members, offsets, handles = _member_offsets(datatype)
    try:
        return all(_is_aligned(m, offset + d) for m, d in zip(members, offsets))
    finally:
        _release(*handles)


# ---- numpy -> MPI ----


def from_numpy_dtype(dtype: Any) -> Any:
    """Return a new MPI datatype laid out as one item of the numpy ``dtype`` (free it when done).

    Raises:
        RuntimeError: numpy is not available.
        ValueError: ``dtype`` holds Python objects, is not in native byte order, or has no MPI
            counterpart (a bare ``"V"``).
    """
    if _np_dtype is None:
        raise RuntimeError("NumPy is not available") from None
    dtype = _np_dtype(dtype)
    if dtype.hasobject:
        raise ValueError("NumPy datatype with object entries")
    if not dtype.isnative:
        raise ValueError("NumPy datatype with non-native byteorder")
    if dtype.fields:
        return _from_fields(dtype)
    if dtype.subdtype:
        base, shape = dtype.subdtype
        element = from_numpy_dtype(base)
        try:
            if len(shape) == 1:
                return element.Create_contiguous(shape[0])
            return element.Create_subarray(shape, shape, (0,) * len(shape))
        finally:
            _release(element)
    return MPI.Datatype.fromcode(dtype.char).Dup()


def _from_fields(dtype: Any) -> Any:
    """A struct of the dtype's fields (one item each, at their offsets), resized to its itemsize."""
    members: list[Any] = []
    offsets = []
    try:
        for name in dtype.names or ():
            field, offset = dtype.fields[name][:2]
            members.append(from_numpy_dtype(field))
            offsets.append(offset)
        struct = MPI.Datatype.Create_struct([1] * len(members), offsets, members)
    finally:
        _release(*members)
    try:
        return struct.Create_resized(0, dtype.itemsize)
    finally:
        _release(struct)


# ---- MPI -> numpy ----


def to_numpy_dtype(datatype: Any) -> Any:
    """Return the numpy dtype of one item of the MPI ``datatype``.

    Raises:
        ValueError: ``datatype`` is ``DATATYPE_NULL``, or numpy has no layout for it (a
            subarray that is not the whole array, a resized scalar, ...).
    """
    if datatype == MPI.DATATYPE_NULL:
        raise ValueError("cannot convert null MPI datatype to NumPy")
    combiner = datatype.combiner
    if combiner == COMBINER_NAMED:
        return _from_named(datatype)
    if combiner in _F90:
        code = _typecode(datatype)
        if code is None:
            raise ValueError("cannot convert MPI datatype to NumPy")
        return _spec(code)
    base, _, info = datatype.decode()
    handles = [base]
    try:
        if combiner == COMBINER_DUP:
            return to_numpy_dtype(base)
        if combiner == COMBINER_CONTIGUOUS:
            return _spec((to_numpy_dtype(base), (info["count"],)))
        if combiner == COMBINER_SUBARRAY:
            return _from_subarray(base, info)
        if combiner == COMBINER_RESIZED and base.combiner == COMBINER_STRUCT:
            aligned = _is_aligned(base, info["extent"])
            _, _, struct_info = base.decode()
            handles.extend(struct_info["datatypes"])
            return _from_struct(datatype, struct_info, aligned)
        if combiner == COMBINER_STRUCT:
            handles.extend(info["datatypes"])
            return _from_struct(datatype, info, True)
        if combiner in (COMBINER_VECTOR, COMBINER_HVECTOR):
            return _from_vector(datatype, base, info, combiner == COMBINER_VECTOR)
        if combiner in _INDEXED:
            return _from_indexed(base, info, combiner)
        raise ValueError("cannot convert MPI datatype to NumPy")
    finally:
        _release(*handles)


def _from_named(datatype: Any) -> Any:
    code = _typecode(datatype)
    if code is not None:
        return _spec(code)
    value = _pair_value(datatype)
    if value is None:
        raise ValueError("cannot convert MPI datatype to NumPy")
    return _spec(f"{_typecode(MPI.Datatype.fromcode(value))},i", align=True)


def _from_subarray(base: Any, info: dict[str, Any]) -> Any:
    sizes, subsizes, starts = list(info["sizes"]), list(info["subsizes"]), list(info["starts"])
    if subsizes != sizes or any(starts):
        raise ValueError("cannot convert subarray MPI datatype to NumPy")
    if info["order"] == ORDER_FORTRAN:
        sizes.reverse()
    return _spec((to_numpy_dtype(base), tuple(sizes)))


def _member(datatype: Any, count: int) -> Any:
    element = to_numpy_dtype(datatype)
    return element if count == 1 else (element, count)


def _fields(formats: list[Any], offsets: list[int], aligned: bool, itemsize: int | None) -> Any:
    spec: dict[str, Any] = {"names": [f"f{i}" for i in range(len(formats))], "formats": formats,
                            "offsets": offsets}
    if itemsize is not None:
        spec["itemsize"] = itemsize
    spec["aligned"] = aligned
    return _spec(spec)


def _from_struct(datatype: Any, info: dict[str, Any], aligned: bool) -> Any:
    members, offsets = info["datatypes"], list(info["displacements"])
    formats = [_member(m, n) for m, n in zip(members, info["blocklengths"])]
    aligned = aligned and all(_is_aligned(m, d) for m, d in zip(members, offsets))
    return _fields(formats, offsets, aligned, datatype.extent)


def _from_vector(datatype: Any, base: Any, info: dict[str, Any], in_items: bool) -> Any:
    count, stride = info["count"], info["stride"]
    if in_items:
        stride *= base.extent
        aligned = _is_aligned(base)
    else:
        stride = stride if count > 1 else 0
        aligned = _is_aligned(base, stride)
    element = to_numpy_dtype(base)
    formats = [(element, (info["blocklength"],))] * count
    return _fields(formats, [i * stride for i in range(count)], aligned, datatype.extent)


def _from_indexed(base: Any, info: dict[str, Any], combiner: int) -> Any:
    displacements = list(info["displacements"])
    if combiner in (COMBINER_INDEXED, COMBINER_HINDEXED):
        lengths = list(info["blocklengths"])
    else:
        lengths = [info["blocklength"]] * len(displacements)
    aligned = _is_aligned(base)
    if combiner in _IN_ITEMS:
        offsets = [d * base.extent for d in displacements]
    else:
        offsets = displacements
        aligned = aligned and all(_is_aligned(base, d) for d in displacements)
    element = to_numpy_dtype(base)
    return _fields([(element, (n,)) for n in lengths], offsets, aligned, None)
