"""Buffer specs: mpi4py's ``buf``, ``[buf, MPI.DOUBLE]``, ``[buf, count, MPI.DOUBLE]`` and friends.

A spec becomes a ``Buf``: the user's memory seen as a 1-D array of the
datatype's base elements (``flat``, a view: numpy arrays, ``bytearray``,
``array.array``, ``memoryview``, anything with the buffer protocol; or a 1-D
view of an array of another library, such as CuPy, kept in its library), the
datatype, and the item count (or, for the ``v`` collectives, counts and
displacements in items). ``take`` returns the elements of some items as an
array to send (a view when the type is contiguous), ``put`` writes received
elements back into the user's memory. As in mpi4py, ``[None, MPI.INT]`` is an
empty message, a list or tuple in a spec's count place is ``(count, displ)``
(in a ``v`` spec only a tuple is ``(counts, displs)``: a list is the counts),
and counts left out of a ``v`` spec split the buffer as evenly as it goes.

Rule 1: ``flat`` always shares the user's memory; nothing here copies data
except gathering the items of a non-contiguous derived type.
Rule 2: spec errors are Python errors (``TypeError``/``ValueError``, as
mpi4py raises them) with the rank and the call; MPI error classes are for
what MPI itself would reject.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import arrays
from . import _interop
from ._datatypes import BYTE, Datatype, from_dtype


class InPlaceType:
    """The type of ``MPI.IN_PLACE``: use the receive buffer as the send buffer."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IN_PLACE"

    def __reduce__(self) -> str:
        return "IN_PLACE"

    def __bool__(self) -> bool:
        return True

    def __int__(self) -> int:
        return -1


IN_PLACE = InPlaceType()


class BottomType:
    """The type of ``MPI.BOTTOM`` (absolute addresses: not simulated)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BOTTOM"

    def __reduce__(self) -> str:
        return "BOTTOM"

    def __int__(self) -> int:
        return 0


BOTTOM = BottomType()


class BufferAutomaticType:
    """The type of ``MPI.BUFFER_AUTOMATIC`` (``Attach_buffer`` with automatic buffering)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BUFFER_AUTOMATIC"

    def __reduce__(self) -> str:
        return "BUFFER_AUTOMATIC"

    def __int__(self) -> int:
        return 0


BUFFER_AUTOMATIC = BufferAutomaticType()


class Buf:
    """A parsed buffer spec (see the module docstring)."""

    __slots__ = ("obj", "flat", "datatype", "count", "displ", "counts", "displs", "_elems", "_pos")

    def __init__(self, obj: Any, flat: Any, datatype: Datatype, count: int, displ: int = 0) -> None:
        self.obj = obj
        self.flat = flat
        self.datatype = datatype
        self.count = count  # items (per block for the blocked collectives)
        self.displ = displ  # items
        self.counts: list[int] | None = None  # the v collectives: items per rank
        self.displs: list[int] | None = None
        self._elems = datatype._elements()
        self._pos = datatype._positions(1) is not None

    @property
    def nbytes(self) -> int:
        """Bytes the spec's items hold (``count`` items of the datatype's size)."""
        size: int = self.datatype._size
        return self.count * size

    def describe(self) -> str:
        """Describe the user's buffer for messages (``float64[4]``, ``bytearray[8]``)."""
        obj = self.obj
        if obj is None or obj is BOTTOM:
            return repr(obj)
        if isinstance(obj, np.ndarray) or arrays.is_array(obj):
            return arrays.describe(obj)
        try:
            return f"{type(obj).__name__}[{len(obj)}]"
        except TypeError:
            return type(obj).__name__

    def _span(self, start: int, count: int) -> tuple[int, int]:
        """Return the base-element range of ``count`` items from item ``start`` (contiguous types)."""
        extent_elems = self.datatype._extent // self.datatype._base._extent if self._pos else 1
        begin = start * extent_elems if self._pos else start * self._elems
        return begin, begin + count * self._elems

    def take(self, start: int, count: int) -> Any:
        """Return the elements of ``count`` items from item ``start`` (a view when contiguous)."""
        if not self._pos:
            a, b = self._span(start, count)
            return self.flat[a:b]
        index = self._index(start, count)
        return self.flat[index]

    def put(self, start: int, value: Any, count: int | None = None) -> int:
        """Write ``value`` (base elements) into the items from ``start``; return the elements written."""
        n = _size(value)
        if not self._pos:
            a, _ = self._span(start, 0)
            target = self.flat[a:a + n]
            if isinstance(target, np.ndarray):
                target[...] = _host(value).reshape(-1)
            else:
                arrays.copy_into(target, arrays.reshape(value, (-1,)))
            return n
        items = count if count is not None else -(-n // max(self._elems, 1))
        index = self._index(start, items)[:n]
        self.flat[index] = _host(value).reshape(-1)
        return n

    def _index(self, start: int, count: int) -> Any:
        pos = self.datatype._positions(count)
        assert pos is not None
        step = self.datatype._extent // self.datatype._base._extent
        return pos + start * step

    def empty(self, count: int) -> Any:
        """Return a fresh array for ``count`` items' elements, of the buffer's library and dtype."""
        n = count * self._elems
        if isinstance(self.flat, np.ndarray):
            return np.empty(n, dtype=self.flat.dtype)
        return arrays.empty_like(self.flat[:n]) if n <= _size(self.flat) else \
            arrays.namespace(self.flat).empty((n,), dtype=self.flat.dtype, device=arrays.device(self.flat))

    def capacity(self) -> int:
        """Return how many items fit in the whole buffer."""
        total = _size(self.flat)
        if not self._pos:
            return total // self._elems if self._elems else 0
        step = self.datatype._extent // self.datatype._base._extent
        last = int(self.datatype._positions(1).max()) + 1 if self._elems else 0  # type: ignore[union-attr]
        return 0 if total < last else (total - last) // step + 1 if step else 0


def _size(x: Any) -> int:
    return int(x.size) if isinstance(x, np.ndarray) else arrays.size(x)


def _host(x: Any) -> np.ndarray[Any, Any]:
    return x if isinstance(x, np.ndarray) else arrays.to_host(x)


# ---- parsing ----


def _fail(rank: int, op: str, problem: str, fix: str, exc: type[Exception] = ValueError) -> Exception:
    return exc(f"rank {rank}: {op}: {problem}; {fix}")


def _as_array(obj: Any, rank: int, op: str, writable: bool) -> Any:
    """Return ``obj``'s memory as an array (numpy, or the array's own library), sharing it."""
    if isinstance(obj, np.ndarray):
        arr = obj if type(obj) is np.ndarray else obj.view(np.ndarray)  # MPI.buffer: plain indexing
    elif arrays.is_array(obj) and not _has_buffer(obj):
        return obj
    elif _interop.exports(obj) and not _has_buffer(obj):
        return _exported(obj, rank, op, writable)
    else:
        try:
            arr = np.asarray(memoryview(obj))
        except (TypeError, ValueError, NotImplementedError):
            raise _fail(rank, op, f"a {type(obj).__name__} is not a buffer",
                        "pass a numpy array, bytearray, array.array or another object with the "
                        "buffer protocol, or [buf, count, MPI.DOUBLE]", TypeError) from None
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise _fail(rank, op, f"the buffer {arrays.describe(arr)} is not contiguous",
                    "pass a contiguous array (np.ascontiguousarray(x)), or describe the layout with "
                    "a derived datatype (Create_vector)", BufferError)
    if writable and not arr.flags.writeable:
        raise _fail(rank, op, f"the buffer {arrays.describe(arr)} is read-only",
                    "pass a writeable buffer to receive into", BufferError)
    return arr


def _exported(obj: Any, rank: int, op: str, writable: bool) -> Any:
    """Return the memory an object exports through DLPack or the CUDA array interface, as an array."""
    what = type(obj).__name__
    try:
        exp = _interop.export(obj)
        if writable and exp.readonly:
            raise BufferError(f"{exp.protocol}: the buffer is read-only")
        return _interop.host_array(exp)
    except (BufferError, TypeError, ValueError, KeyError) as exc:
        fix = ("pass a writeable buffer to receive into" if writable and "read-only" in str(exc) else
               "export a contiguous array of a plain element type, or pass a numpy array")
        raise type(exc)(f"rank {rank}: {op}: the {what} given as a buffer: {exc}; {fix}") from None


def _has_buffer(obj: Any) -> bool:
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


def _flat(obj: Any, datatype: Datatype | None, rank: int, op: str, writable: bool
          ) -> tuple[Any, Datatype]:
    """Return ``obj``'s memory as a 1-D array of ``datatype``'s base elements, and the datatype.

    ``None`` (or ``BOTTOM``) with a datatype is a buffer of no items, as in mpi4py
    (``[None, MPI.INT]``: a message of count 0).
    """
    if (obj is None or obj is BOTTOM) and datatype is not None:
        datatype._usable(rank, op)
        assert datatype._base._np is not None
        return np.empty(0, dtype=datatype._base._np), datatype
    arr = _as_array(obj, rank, op, writable)
    if not isinstance(arr, np.ndarray):  # another library's array: its own dtype, whole elements
        np_dtype = np.dtype(arrays.dtype_name(arr)) if arrays.dtype_name(arr) != "bfloat16" else None
        inferred = None if np_dtype is None else from_dtype(np_dtype)
        if datatype is None:
            datatype = inferred
        if datatype is None or inferred is None or datatype._base._np != np_dtype:
            raise _fail(rank, op, f"{arrays.describe(arr)} cannot be read as "
                        f"{'its datatype' if datatype is None else datatype._name}",
                        "pass an array of the datatype's dtype, or a numpy array", TypeError)
        return arrays.reshape(arr, (-1,)), datatype
    if datatype is None:
        if not arr.dtype.isnative:
            raise _fail(rank, op, f"numpy dtype {arr.dtype.str} is not in native byte order",
                        "pass [buf, datatype] to send its bytes as they are, or convert the array",
                        BufferError)
        datatype = from_dtype(arr.dtype)
        if datatype is None:
            raise _fail(rank, op, f"numpy dtype {arr.dtype} has no MPI datatype",
                        "pass [buf, MPI.BYTE] to send its bytes, or convert the array", TypeError)
    datatype._usable(rank, op)
    base = datatype._base._np
    assert base is not None
    raw = arr.ravel(order="K") if arr.ndim != 1 else arr
    if raw.dtype == base:
        return raw, datatype
    raw = raw.view(np.uint8)
    if raw.size % base.itemsize:
        raise _fail(rank, op, f"buffer length {raw.size} is not a multiple of {datatype._base._name}'s "
                    f"{base.itemsize} bytes", "pass a buffer of whole elements of the datatype")
    return raw.view(base), datatype


def _datatype(value: object, rank: int, op: str) -> Datatype | None:
    if isinstance(value, Datatype) and value._name == "MPI_DATATYPE_NULL":
        raise _fail(rank, op, "MPI.DATATYPE_NULL describes no data", "pass a datatype such as MPI.DOUBLE")
    if value is None or isinstance(value, Datatype):
        return value
    if isinstance(value, str):
        try:
            return Datatype.fromcode(value)
        except (ValueError, TypeError, KeyError) as exc:  # KeyError: mpi4py looks codes up in a dict
            raise _fail(rank, op, str(exc), "pass an MPI datatype such as MPI.DOUBLE", KeyError) from None
    raise _fail(rank, op, f"{value!r} is not a datatype", "pass an MPI datatype such as MPI.DOUBLE",
                TypeError)


def _count(value: object, rank: int, op: str, what: str = "count") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise _fail(rank, op, f"{what} {value!r} is not an int >= 0", f"pass the number of items")
    return int(value)


def _split(spec: Any, rank: int, op: str, v: bool = False) -> tuple[Any, Any, Any, Datatype | None]:
    """Split a spec into (buffer, count or None, displacement or None, datatype or None).

    As mpi4py: in a simple spec a list or tuple in the count's place is ``(count, displ)``;
    in a ``v`` spec only a tuple is ``(counts, displs)``, and a list is the counts.
    """
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    pair = tuple if v else (list, tuple)
    items = list(spec)
    if len(items) == 2:
        buf, second = items
        if isinstance(second, (Datatype, str)):
            return buf, None, None, _datatype(second, rank, op)
        if isinstance(second, pair):
            return (buf, *_pair(second, rank, op, v), None)
        return buf, second, None, None
    if len(items) == 3:
        buf, count, dt = items
        if isinstance(count, pair):
            return (buf, *_pair(count, rank, op, v), _datatype(dt, rank, op))
        return buf, count, None, _datatype(dt, rank, op)
    if len(items) == 4:
        buf, count, displ, dt = items
        return buf, count, displ, _datatype(dt, rank, op)
    raise _fail(rank, op, f"a buffer spec of {len(items)} items is not understood",
                "pass buf, [buf, datatype], [buf, count, datatype] or [buf, (count, displ), datatype]")


def _pair(value: Any, rank: int, op: str, v: bool) -> tuple[Any, Any]:
    """Return the (count, displacement) of a spec, or the (counts, displacements) of a ``v`` spec."""
    if len(value) != 2:
        what = "(counts, displs)" if v else "(count, displ)"
        raise _fail(rank, op, f"{value!r} in a buffer spec is read as {what} but has {len(value)} items",
                    "pass [buf, (counts, displs), datatype], or the counts as a list" if v else
                    "pass [buf, count, datatype] or [buf, (count, displ), datatype]")
    return value[0], value[1]


def message(spec: Any, rank: int, op: str, writable: bool) -> Buf:
    """Parse a simple spec (``Send``, ``Recv``, ``Bcast``, reductions): count items from displ."""
    obj, count, displ, datatype = _split(spec, rank, op)
    flat, datatype = _flat(obj, datatype, rank, op, writable)
    buf = Buf(obj, flat, datatype, 0)
    capacity = buf.capacity()
    start = 0 if displ is None else _count(displ, rank, op, "displacement")
    if count is None:
        if not buf._pos and _size(flat) % max(buf._elems, 1):
            raise _fail(rank, op, f"cannot infer count: the buffer's {_size(flat)} elements are not "
                        f"a multiple of {datatype._name or 'the datatype'}'s {buf._elems}",
                        "pass [buf, count, datatype]")
        count = capacity - start
    count = _count(count, rank, op)
    if start + count > capacity:
        raise _fail(rank, op, f"{count} items of {datatype._name or 'the datatype'} from item {start} do "
                    f"not fit in the buffer {buf.describe()}", "pass a smaller count or a larger buffer")
    buf.count, buf.displ = count, start
    return buf


def blocked(spec: Any, size: int, rank: int, op: str, writable: bool) -> Buf:
    """Parse a spec split in ``size`` equal blocks (``Gather``/``Scatter``/``Allgather``/``Alltoall``).

    ``count`` is per block; inferred as the whole buffer divided by ``size``.
    """
    obj, count, displ, datatype = _split(spec, rank, op)
    flat, datatype = _flat(obj, datatype, rank, op, writable)
    buf = Buf(obj, flat, datatype, 0)
    capacity = buf.capacity()
    if count is None:
        if capacity % size:
            raise _fail(rank, op, f"cannot infer count: the buffer's {capacity} items are not a "
                        f"multiple of the {size} blocks", "pass [buf, count, datatype] with the "
                        "count of one block")
        count = capacity // size
    count = _count(count, rank, op)
    start = 0 if displ is None else _count(displ, rank, op, "displacement")
    if start + count * size > capacity:
        raise _fail(rank, op, f"{size} blocks of {count} items do not fit in the buffer {buf.describe()}",
                    "pass a larger buffer or a smaller count")
    buf.count, buf.displ = count, start
    return buf


def vector(spec: Any, size: int, rank: int, op: str, writable: bool) -> Buf:
    """Parse a ``v`` spec: ``[buf, counts]``, ``[buf, (counts, displs), dt]``, ``[buf, counts, displs, dt]``.

    Missing displacements pack the blocks one after another; an int count is the same for every rank,
    an int displacement a stride; missing counts split the buffer as evenly as it goes (mpi4py).
    """
    obj, counts, displs, datatype = _split(spec, rank, op, v=True)
    flat, datatype = _flat(obj, datatype, rank, op, writable)
    buf = Buf(obj, flat, datatype, 0)
    capacity = buf.capacity()
    if counts is None:  # as mpi4py: the first ``capacity % size`` ranks get one item more
        counts = [capacity // size + (r < capacity % size) for r in range(size)]
    elif not isinstance(counts, Sequence) and not isinstance(counts, np.ndarray):
        counts = [counts] * size
    counts = [_count(c, rank, op) for c in counts]
    if len(counts) != size:
        raise _fail(rank, op, f"{len(counts)} counts given for {size} ranks", "pass one count per rank")
    if displs is None:
        displs = [sum(counts[:i]) for i in range(size)]
    elif not isinstance(displs, Sequence) and not isinstance(displs, np.ndarray):
        displs = [int(displs) * i for i in range(size)]
    displs = [_count(d, rank, op, "displacement") for d in displs]
    if len(displs) != size:
        raise _fail(rank, op, f"{len(displs)} displacements given for {size} ranks",
                    "pass one displacement per rank")
    for c, d in zip(counts, displs):
        if c and d + c > capacity:
            raise _fail(rank, op, f"{c} items at displacement {d} do not fit in the buffer "
                        f"{buf.describe()}", "pass a larger buffer, or other counts and displacements")
    buf.counts, buf.displs = counts, displs
    buf.count = sum(counts)
    return buf


def per_rank(spec: Any, size: int, rank: int, op: str, writable: bool) -> list[Buf]:
    """Parse an ``Alltoallw`` spec into one Buf per rank.

    ``[buf, (counts, displs), datatypes]``, ``[buf, counts, displs, datatypes]`` or ``[buf, datatypes]``:
    rank ``i``'s block is ``counts[i]`` items of ``datatypes[i]`` starting ``displs[i]`` *bytes* into
    ``buf``. Counts left out are 1 item each; displacements left out pack the blocks one after another.
    """
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3, 4):
        raise _fail(rank, op, f"{_describe_spec(spec)} is not an Alltoallw buffer spec",
                    "pass [buf, (counts, displs), datatypes] or [buf, counts, displs, datatypes], "
                    "with displacements in bytes and one datatype per rank")
    if len(spec) == 2:
        (obj, types), counts, displs = spec, None, None
    elif len(spec) == 3:
        obj, pair, types = spec
        counts, displs = _pair(pair, rank, op, True)
    else:
        obj, counts, displs, types = spec
    if (obj is None or obj is BOTTOM) and (counts is None or displs is None):
        raise _fail(rank, op, "MPI.BOTTOM without counts and displacements", "give both")
    if counts is None:
        counts = [1] * size
    if isinstance(types, (list, tuple)) and displs is None:
        extents = [t._extent if isinstance(t, Datatype) else 0 for t in types]
        displs = [sum(int(c) * e for c, e in zip(counts[:i], extents)) for i in range(len(types))]
    lists = {"counts": counts, "displacements": displs, "datatypes": types}
    for what, value in lists.items():
        if not isinstance(value, (Sequence, np.ndarray)) or isinstance(value, str) or len(value) != size:
            raise _fail(rank, op, f"{what} {value!r} are not one per rank", f"pass a list of {size} {what}")
    assert displs is not None  # checked just above: one per rank
    if obj is None or obj is BOTTOM:
        raise NotImplementedError(f"rank {rank}: {op}: absolute addresses (MPI.BOTTOM with "
                                  "Get_address displacements) are not simulated by simcluster; "
                                  "pass the buffer itself with displacements from its start")
    arr = _as_array(obj, rank, op, writable)
    if not isinstance(arr, np.ndarray):
        raise _fail(rank, op, f"{arrays.describe(arr)} cannot be addressed by bytes",
                    "pass a numpy array or another object with the buffer protocol", TypeError)
    raw = (arr.ravel(order="K") if arr.ndim != 1 else arr).view(np.uint8)
    bufs = []
    for i in range(size):
        count = _count(counts[i], rank, op)
        displ = _count(displs[i], rank, op, "displacement")
        datatype = _datatype(types[i], rank, op)
        assert datatype is not None
        datatype._usable(rank, op)
        base = datatype._base._np
        assert base is not None
        window = raw[displ:]
        window = window[:window.size - window.size % base.itemsize]
        buf = Buf(obj, window.view(base), datatype, count)
        if count and count > buf.capacity():
            raise _fail(rank, op, f"{count} items of {datatype._name or 'the datatype'} at byte {displ} "
                        f"do not fit in the buffer {buf.describe()}",
                        "pass a larger buffer, or other counts and displacements")
        bufs.append(buf)
    return bufs


def _describe_spec(spec: Any) -> str:
    if isinstance(spec, (list, tuple)):
        return f"a {type(spec).__name__} of {len(spec)} items"
    return f"a {type(spec).__name__}"


def is_in_place(spec: Any) -> bool:
    """Return whether ``spec`` is ``MPI.IN_PLACE`` (or ``None``, which mpi4py reads as IN_PLACE)."""
    return spec is IN_PLACE or spec is None


def byte_buffer(obj: Any) -> Buf:
    """Return a Buf of an object's raw bytes (``Attach_buffer``)."""
    arr = np.asarray(memoryview(obj)).reshape(-1).view(np.uint8)
    return Buf(obj, arr, BYTE, int(arr.size))
