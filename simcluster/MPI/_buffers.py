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
A count or displacement is any integer (``operator.index``: numpy integers and
0-d integer arrays too); anything else is a ``TypeError``.

``MPI.BOTTOM`` (and ``None`` in a ``v`` or ``Alltoallw`` spec) is address 0:
the datatype's displacements, or an ``Alltoallw`` spec's byte displacements,
are absolute addresses (``MPI.Get_address``), so one message can gather from
or scatter into several arrays. ``flat`` then views the process's memory over
exactly the bytes the elements span (``_absolute``), ``origin`` elements past
the items' start. ``MPI.BOTTOM``, ``MPI.IN_PLACE`` and ``MPI.BUFFER_AUTOMATIC``
are mpi4py's buffer constants: empty buffers equal to their address.

Rule 1: ``flat`` always shares the user's memory; nothing here copies data
except gathering the items of a non-contiguous derived type.
Rule 2: spec errors are Python errors (``TypeError``/``ValueError``, as
mpi4py raises them) with the rank and the call; MPI error classes are for
what MPI itself would reject.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import arrays
from . import _interop
from ._constants import ERR_BUFFER
from ._datatypes import BYTE, Datatype, from_dtype
from ._errors import error


class _BufferConstant(ctypes.Array):  # type: ignore[type-arg]
    """mpi4py's buffer constants: an empty buffer (``memoryview(c).nbytes == 0``) standing for an address.

    As in mpi4py, a constant equals and hashes as its address (``int(c)``: MPICH's
    ``MPI_BOTTOM`` 0, ``MPI_IN_PLACE`` -1, ``MPI_BUFFER_AUTOMATIC`` -2), is true when that
    address is not 0, and does no arithmetic. An empty ctypes array lends it the buffer
    protocol, which a Python class has no other way to offer before Python 3.12 (so
    ``memoryview(c).obj`` is ``c``, where mpi4py's C type leaves it None).
    """

    _type_ = ctypes.c_ubyte
    _length_ = 0
    __slots__ = ()
    _name = ""
    _address = 0

    def __new__(cls) -> _BufferConstant:
        made = _CONSTANTS.get(cls)
        if made is None:
            made = _CONSTANTS[cls] = ctypes.Array.__new__(cls)
        return made

    def __repr__(self) -> str:
        return self._name

    __str__ = __repr__

    def __reduce__(self) -> str:
        return self._name

    def __int__(self) -> int:
        return self._address

    def __bool__(self) -> bool:
        return self._address != 0

    def __hash__(self) -> int:
        return hash(self._address)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _BufferConstant) or (isinstance(other, int) and not isinstance(other, bool)):
            return self._address == int(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __len__(self) -> int:
        raise TypeError(f"object of type {type(self).__name__!r} has no len()")


_CONSTANTS: dict[type[_BufferConstant], _BufferConstant] = {}


class InPlaceType(_BufferConstant):
    """The type of ``MPI.IN_PLACE``: use the receive buffer as the send buffer."""

    __slots__ = ()
    _name, _address = "IN_PLACE", -1


IN_PLACE = InPlaceType()


class BottomType(_BufferConstant):
    """The type of ``MPI.BOTTOM``: address 0, so a datatype's displacements are absolute addresses."""

    __slots__ = ()
    _name, _address = "BOTTOM", 0

    def __index__(self) -> int:
        return 0


BOTTOM = BottomType()


class BufferAutomaticType(_BufferConstant):
    """The type of ``MPI.BUFFER_AUTOMATIC`` (``Attach_buffer`` with automatic buffering)."""

    __slots__ = ()
    _name, _address = "BUFFER_AUTOMATIC", -2


BUFFER_AUTOMATIC = BufferAutomaticType()


class Buf:
    """A parsed buffer spec (see the module docstring)."""

    __slots__ = ("obj", "flat", "datatype", "count", "displ", "origin", "counts", "displs", "_item",
                 "_elems", "_pos")

    def __init__(self, obj: Any, flat: Any, datatype: Datatype, count: int, displ: int = 0,
                 origin: int = 0, item: NDArray[np.intp] | None = None) -> None:
        self.obj = obj
        self.flat = flat
        self.datatype = datatype
        self.count = count  # items (per block for the blocked collectives)
        self.displ = displ  # items
        self.origin = origin  # base elements from item 0's start to flat[0] (MPI.BOTTOM: see _absolute)
        self.counts: list[int] | None = None  # the v collectives: items per rank
        self.displs: list[int] | None = None
        self._item = item  # one item's positions in flat's elements, when not the datatype's (_absolute)
        self._elems = datatype._elements() if item is None else len(item)
        self._pos = datatype._positions(1) is not None if item is None else True

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
        begin = start * self._elems - self.origin
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
        if self._item is None:
            pos = self.datatype._positions(count)
            assert pos is not None
            step = self.datatype._extent // self.datatype._base._extent
        else:
            step = self.datatype._extent // self.flat.dtype.itemsize
            pos = (np.arange(count, dtype=np.intp)[:, None] * step + self._item[None, :]).ravel()
        return pos + (start * step - self.origin)

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
    """Read a count or displacement as mpi4py does: any integer (``operator.index``), not below 0."""
    try:
        number = operator.index(value)  # type: ignore[arg-type]  # ints, numpy integers, 0-d int arrays
    except TypeError:
        raise _fail(rank, op, f"{what} {value!r} is not an integer", "pass a whole number of items",
                    TypeError) from None
    if number < 0:
        raise _fail(rank, op, f"{what} {number} is negative", "pass a number of items >= 0")
    return number


def _is_list(value: object) -> bool:
    """Whether a ``v`` spec's counts or displacements are one per rank (a 0-d array is one number)."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, Sequence)


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
    if obj is BOTTOM and datatype is not None:  # as mpi4py: without a count, no items
        start = 0 if displ is None else _count(displ, rank, op, "displacement")
        count = 0 if count is None else _count(count, rank, op)
        buf = _absolute(obj, datatype, 0, [(start, count)], rank, op, writable)
        buf.count, buf.displ = count, start
        return buf
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
    if obj is BOTTOM and datatype is not None:
        start = 0 if displ is None else _count(displ, rank, op, "displacement")
        count = 0 if count is None else _count(count, rank, op)
        buf = _absolute(obj, datatype, 0, [(start, count * size)], rank, op, writable)
        buf.count, buf.displ = count, start
        return buf
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
    ``None`` or ``MPI.BOTTOM`` with a datatype is address 0: the datatype gives absolute addresses.
    """
    obj, counts, displs, datatype = _split(spec, rank, op, v=True)
    absolute = (obj is None or obj is BOTTOM) and datatype is not None
    flat, datatype = _flat(obj, datatype, rank, op, writable)
    buf = Buf(obj, flat, datatype, 0)
    capacity = buf.capacity()
    if counts is None:  # as mpi4py: the first ``capacity % size`` ranks get one item more
        counts = [capacity // size + (r < capacity % size) for r in range(size)]
    elif not _is_list(counts):
        counts = [counts] * size
    counts = [_count(c, rank, op) for c in counts]
    if len(counts) != size:
        raise _fail(rank, op, f"{len(counts)} counts given for {size} ranks", "pass one count per rank")
    if displs is None:
        displs = [sum(counts[:i]) for i in range(size)]
    elif not _is_list(displs):
        displs = [_count(displs, rank, op, "displacement") * i for i in range(size)]
    displs = [_count(d, rank, op, "displacement") for d in displs]
    if len(displs) != size:
        raise _fail(rank, op, f"{len(displs)} displacements given for {size} ranks",
                    "pass one displacement per rank")
    for c, d in zip(counts, displs):
        if c and d + c > capacity and not absolute:
            raise _fail(rank, op, f"{c} items at displacement {d} do not fit in the buffer "
                        f"{buf.describe()}", "pass a larger buffer, or other counts and displacements")
    if absolute:
        buf = _absolute(obj, datatype, 0, list(zip(displs, counts)), rank, op, writable)
    buf.counts, buf.displs = counts, displs
    buf.count = sum(counts)
    return buf


def per_rank(spec: Any, size: int, rank: int, op: str, writable: bool) -> list[Buf]:
    """Parse an ``Alltoallw`` spec into one Buf per rank.

    ``[buf, (counts, displs), datatypes]``, ``[buf, counts, displs, datatypes]`` or ``[buf, datatypes]``:
    rank ``i``'s block is ``counts[i]`` items of ``datatypes[i]`` starting ``displs[i]`` *bytes* into
    ``buf``. Counts left out are 1 item each; displacements left out pack the blocks one after another.
    With ``MPI.BOTTOM`` (or ``None``) as ``buf``, ``displs[i]`` is an address (as in mpi4py, counts
    and displacements must then be given).
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
        return [_absolute_block(obj, counts[i], displs[i], types[i], rank, op, writable)
                for i in range(size)]
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


# ---- MPI.BOTTOM: absolute addresses ----


def _absolute(obj: Any, datatype: Datatype, at: int, blocks: list[tuple[int, int]], rank: int, op: str,
              writable: bool) -> Buf:
    """Return a Buf of the memory that ``blocks`` of a datatype's items from address ``at`` cover.

    This is MPI.BOTTOM: displacements in the datatype (``MPI.Get_address`` of the user's
    arrays) are absolute addresses. ``blocks`` are (first item, item count) pairs. The
    Buf's ``flat`` covers exactly the bytes the elements span, ``origin`` elements after
    ``at``. Its element type does not depend on where the arrays happen to lie: elements
    of one predefined type at offsets that differ by whole elements are read as that type
    (``_element_type``), so both ends of a message agree on its dtype.

    Raises:
        MPI.Exception: ``ERR_BUFFER`` when those bytes are not memory of this process (where
            MPI would read or write through a null or dangling pointer).
    """
    datatype._usable(rank, op)
    base, shift, item = _element_type(datatype)
    assert base._np is not None
    lay, unit = datatype._layout, base._np.itemsize
    used = [(s, c) for s, c in blocks if c > 0]
    if not used or not lay.size:
        return Buf(obj, np.empty(0, dtype=base._np), datatype, 0, 0, 0, item)
    ext = lay.extent
    lo = min(s * ext + min(0, (c - 1) * ext) for s, c in used) + lay.true_lb
    hi = max(s * ext + max(0, (c - 1) * ext) for s, c in used) + lay.true_ub
    nbytes = -(-(hi - lo) // unit) * unit  # whole elements (a pair type's padding too)
    address = at + lo
    if address <= 0 or not _interop.host_readable(address, nbytes):
        items = sum(c for _, c in used)
        raise error(ERR_BUFFER, rank, op, f"{items} items of {datatype._name or 'the datatype'} at "
                    f"MPI.BOTTOM span bytes {address:#x} to {address + nbytes:#x}, which are not "
                    "memory of this process", "build the datatype from MPI.Get_address() of live "
                    "buffers, or pass the buffer itself instead of MPI.BOTTOM")
    exp = _interop.Exported(address, nbytes, base._np, not writable, False, "MPI.BOTTOM", None)
    return Buf(obj, _interop.host_array(exp), datatype, 0, 0, (lo - shift) // unit, item)


def _element_type(datatype: Datatype) -> tuple[Datatype, int, NDArray[np.intp] | None]:
    """Return (element type, byte offset of the elements modulo its size, one item's positions).

    A derived type reads buffers as bytes when its elements do not lie at multiples of their
    size from byte 0 (``_datatypes``): with absolute addresses, that would depend on where
    malloc put the arrays. Here elements of one type whose offsets agree modulo its size are
    read as that type (positions None: the datatype's own).
    """
    lay, leaf = datatype._layout, datatype._layout.leaf
    if datatype._base is not BYTE or leaf is None or leaf is BYTE or leaf._np is None:
        return datatype._base, 0, None
    unit = leaf._np.itemsize
    offs = lay.typemap()[0]
    shift = int(offs[0]) % unit if len(offs) else 0
    if lay.extent % unit or not np.all(offs % unit == shift):
        return datatype._base, 0, None
    return leaf, shift, ((offs - shift) // unit).astype(np.intp)


def _absolute_block(obj: Any, count: Any, displ: Any, dt: Any, rank: int, op: str, writable: bool
                    ) -> Buf:
    """One rank's block of an ``Alltoallw`` spec at MPI.BOTTOM: ``displ`` is an address."""
    count = _count(count, rank, op)
    displ = _count(displ, rank, op, "displacement")
    datatype = _datatype(dt, rank, op)
    assert datatype is not None
    buf = _absolute(obj, datatype, displ, [(0, count)], rank, op, writable)
    buf.count = count
    return buf


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
