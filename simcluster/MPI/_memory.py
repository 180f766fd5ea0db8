"""``MPI.buffer`` (alias ``MPI.memory``) and ``Alloc_mem``/``Free_mem``.

``MPI.buffer`` is mpi4py 4's view of raw memory: bytes at an address, from
any object with the buffer protocol, DLPack or the CUDA array interface
(``buffer(obj)``, ``buffer.frombuffer``), from an address
(``buffer.fromaddress``) or freshly allocated (``buffer.allocate``). It
indexes and slices as bytes, has the buffer protocol (``memoryview(buf)``),
and can be used as a message buffer (its bytes, ``MPI.BYTE``).

Here it is a 1-D ``uint8`` numpy array (a subclass, so ``memoryview`` works
on every Python), sharing the memory; ``release()`` drops the memory and
leaves an empty buffer, as mpi4py's does. Memory an exporter reports on a
device is not CPU-accessible: indexing, ``cast`` and ``tobytes`` raise
``BufferError``, as in mpi4py, even where simcluster can read it.

Rule 1: a buffer never copies: it views the memory of the object it came from
and keeps that object alive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import _interop

_EMPTY = np.empty(0, dtype=np.uint8)
_NO_OBJECT = object()


class buffer(np.ndarray):  # noqa: N801 - mpi4py's name
    """Bytes of memory: ``buffer(obj)``, ``buffer.allocate(n)``, ``buffer.fromaddress(addr, n)``."""

    _obj: Any
    _device: bool
    _released: bool
    _size: int  # the item size of the object the memory came from

    def __new__(cls, obj: Any = _NO_OBJECT) -> buffer:
        if obj is _NO_OBJECT:
            return _make(cls, _EMPTY, None, 1, empty=True)
        return cls.frombuffer(obj)

    def __array_finalize__(self, parent: Any) -> None:
        self._obj = getattr(parent, "_obj", None)
        self._device = getattr(parent, "_device", False)
        self._released = False
        self._size = getattr(parent, "_size", 1)

    # ---- constructors ----

    @classmethod
    def allocate(cls, nbytes: int, clear: bool = False) -> buffer:
        """Return a new buffer of ``nbytes`` bytes (zeroed: all memory here is)."""
        size = _nbytes(nbytes, "buffer.allocate")
        store = bytearray(size)
        return _make(cls, np.frombuffer(store, dtype=np.uint8), store, 1)

    @classmethod
    def fromaddress(cls, address: int, nbytes: int, readonly: bool = False) -> buffer:
        """Return a buffer of the ``nbytes`` bytes at ``address`` (which must stay valid)."""
        size = _nbytes(nbytes, "buffer.fromaddress")
        address = int(address)
        if address == 0 and size:
            raise ValueError(f"buffer.fromaddress({address}, {nbytes}): a null address with bytes; "
                             "pass the address of memory that holds them")
        if not size:
            return _make(cls, np.empty(0, dtype=np.uint8), None, 1)
        exp = _interop.Exported(address, size, None, bool(readonly), False, "buffer", None)
        return _make(cls, _interop.host_array(exp), None, 1)

    @classmethod
    def frombuffer(cls, obj: Any, readonly: bool = False) -> buffer:
        """Return a buffer of ``obj``'s memory (buffer protocol, DLPack or CUDA array interface)."""
        try:
            view = memoryview(obj)
        except TypeError:
            if not _interop.exports(obj):
                raise TypeError(f"buffer: a {type(obj).__name__} is not a buffer; pass bytes, a "
                                "bytearray, a numpy array or another object with the buffer protocol, "
                                "DLPack or the CUDA array interface") from None
            exp = _interop.export(obj)
            arr = _interop.host_array(exp)
            owner = exp.owner[1] if isinstance(exp.owner, tuple) else exp.owner  # the capsule, as mpi4py
            return _make(cls, _bytes(arr), owner, 1, readonly=readonly, device=exp.device)
        arr = np.asarray(view) if view.ndim else np.asarray(view).reshape(1)
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise BufferError(f"buffer: the {type(obj).__name__} is not contiguous; pass contiguous memory")
        return _make(cls, _bytes(arr), obj, view.itemsize, readonly=readonly)

    def toreadonly(self) -> buffer:
        """Return a read-only buffer of the same memory."""
        return _make(type(self), self.view(np.ndarray), self._obj, self._size, readonly=True,
                     device=self._device)

    # ---- what mpi4py's buffer reports ----

    @property
    def address(self) -> int:
        """The memory's address (0 for an empty or released buffer)."""
        if self._released or getattr(self, "_null", False):
            return 0
        return int(self.__array_interface__["data"][0])

    @property
    def obj(self) -> Any:
        """The object whose memory this is (None for ``fromaddress`` and after ``release``)."""
        return None if self._released else self._obj

    @property
    def nbytes(self) -> int:
        """The number of bytes."""
        return 0 if self._released else int(self.size)

    @property
    def readonly(self) -> bool:
        """Whether the memory may not be written."""
        return False if self._released else not self.flags.writeable

    @property
    def format(self) -> str:
        """``"B"``: a buffer is bytes."""
        return "B"

    @property
    def itemsize(self) -> int:
        """The item size of the object the memory came from (1 for bytes)."""
        return self._size

    def release(self) -> None:
        """Let go of the memory: the buffer becomes empty."""
        self._released, self._obj = True, None

    def cast(self, format: str, shape: Any = None) -> memoryview[Any]:  # noqa: A002 - mpi4py's name
        """Return a ``memoryview`` of the bytes as ``format`` items (of ``shape``)."""
        view = self._host("cast").data.cast("B")  # ndarray.data: memoryview(self)
        # ``format`` is the caller's struct code, any of them: the item type is not known statically
        as_format: Callable[..., memoryview[Any]] = view.cast
        return as_format(format) if shape is None else as_format(format, list(shape))

    def tobytes(self, order: Any = None) -> bytes:
        """Return the bytes."""
        return self._host("tobytes").view(np.ndarray).tobytes()

    # ---- sequence of bytes ----

    def __len__(self) -> int:
        return self.nbytes

    def __bool__(self) -> bool:  # mpi4py's buffer is a sequence: true when it holds bytes
        return self.nbytes > 0

    def __getitem__(self, index: Any) -> Any:
        host = self._host("indexing")
        key = _key(index, self.nbytes)
        value = np.ndarray.__getitem__(host, key)
        return int(value) if isinstance(key, int) else value

    def __setitem__(self, index: Any, value: Any) -> None:
        if self.readonly:
            raise TypeError("buffer: the buffer is read-only")
        host = self._host("item assignment")
        key = _key(index, self.nbytes)
        if isinstance(key, int) and not (isinstance(value, (int, np.integer)) and 0 <= value < 256):
            raise OverflowError(f"buffer: {value!r} is not a byte (0 to 255)") if isinstance(
                value, (int, np.integer)) else TypeError(f"buffer: {value!r} is not a byte")
        if not isinstance(value, (int, np.integer)):
            try:
                value = np.frombuffer(memoryview(value).cast("B"), dtype=np.uint8)
            except TypeError:
                pass
        target = np.ndarray.__getitem__(host.view(np.ndarray), key)
        if isinstance(key, slice) and np.ndim(value) and np.size(value) != target.size:
            raise ValueError(f"buffer: {np.size(value)} bytes assigned to a slice of {target.size}")
        host.view(np.ndarray)[key] = value

    def __delitem__(self, index: Any) -> None:
        raise NotImplementedError("buffer: bytes cannot be deleted from a buffer")

    def __repr__(self) -> str:
        return f"<MPI.buffer address={self.address:#x} nbytes={self.nbytes} readonly={self.readonly}>"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("buffer: a view of memory cannot be pickled; send its bytes (buf.tobytes())")

    def _host(self, what: str) -> buffer:
        if self._device:
            raise BufferError(f"buffer: {what}: the memory is reported on a device, not CPU-accessible")
        if self._released:
            return _make(type(self), _EMPTY, None, 1)
        return self


memory = buffer


def _make(cls: type[buffer], arr: Any, obj: Any, itemsize: int, readonly: bool = False,
          device: bool = False, empty: bool = False) -> buffer:
    view = np.asarray(arr).view(cls)
    if readonly:
        view.flags.writeable = False
    view._obj, view._size, view._device = obj, itemsize, device
    if empty:
        view._null = True  # type: ignore[attr-defined]
    return view


def _bytes(arr: Any) -> Any:
    return np.asarray(arr).reshape(-1, order="A").view(np.uint8)


def _nbytes(value: Any, call: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{call}({value!r}): an integer number of bytes is required")
    if value < 0:
        raise ValueError(f"{call}({value!r}): the number of bytes is negative; pass 0 or more")
    return int(value)


def _key(index: Any, nbytes: int) -> Any:
    """Check an index of a buffer: an int in range, or a slice of step 1."""
    if isinstance(index, slice):
        if index.step not in (None, 1):
            raise IndexError(f"buffer: slice step {index.step} is not supported; use a step of 1")
        return index
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        i = int(index)
        if not -nbytes <= i < nbytes:
            raise IndexError(f"buffer: index {i} is out of range for {nbytes} bytes")
        return i
    raise TypeError(f"buffer: indices must be integers or slices, not {type(index).__name__}")


# ---- MPI functions ----


def Alloc_mem(size: int, info: Any = None) -> buffer:
    """Return ``size`` bytes of new memory, as an ``MPI.buffer``."""
    return buffer.allocate(size)


def Free_mem(mem: Any) -> None:
    """Release memory from ``Alloc_mem`` (the buffer becomes empty)."""
    if isinstance(mem, buffer):
        mem.release()

