"""Memory exported through DLPack (``__dlpack__``) or the CUDA array interface, seen from the host.

mpi4py 4 takes as a buffer any object with ``__dlpack__`` (and optionally
``__dlpack_device__``) or ``__cuda_array_interface__``, not only the buffer
protocol. ``export(obj)`` reads what such an object exports into an
``Exported`` (address, bytes, element type, read-only flag, whether the memory
is reported off the CPU); ``host_array`` makes a 1-D numpy array over that
memory, sharing it. Malformed exports raise what mpi4py raises for them
(``BufferError`` for a bad tensor, ``TypeError``/``ValueError``/``KeyError``
for a malformed interface dict).

Memory reported on a device (a DLPack device other than the CPU, and every
CUDA-array-interface object) is read on the host only when the host can read
it: CuPy, when installed, says where a pointer lives (device memory then goes
through CuPy, as CuPy arrays do); without it, the address must fall in a
readable mapping of this process. Real device memory without CuPy is refused
with a message that says so.

Rule 1: nothing here copies; a host array keeps the exporting object (and its
DLPack capsule) alive for as long as the array lives.
Rule 2: the capsule is read, never consumed: its owner frees it as usual.
"""

from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

# ---- the DLPack ABI (dlpack.h, versions 0.x and 1.x) ----

KDL_CPU = 1
KDL_CUDA_HOST = 3
KDL_ROCM_HOST = 11
_HOST_DEVICES = (KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST)
_READ_ONLY = 1 << 0


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):  # DLManagedTensor (capsule name "dltensor")
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned ("dltensor_versioned")
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

# DLPack type codes: int, uint, float, complex, bool -> numpy kind
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}


@dataclass(slots=True)
class Exported:
    """What an object exports: ``nbytes`` bytes at ``address``.

    ``dtype`` is the element type (None when it has no plain numpy type: the
    memory is then bytes), ``device`` whether the exporter reports the memory
    off the CPU, ``owner`` what keeps it alive (the object, and its capsule).
    """

    address: int
    nbytes: int
    dtype: np.dtype[Any] | None
    readonly: bool
    device: bool
    protocol: str  # "dlpack" or "__cuda_array_interface__", for messages
    owner: Any


def exports(obj: object) -> bool:
    """Return whether ``obj`` offers DLPack or the CUDA array interface."""
    return hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")


def nbytes_of(obj: Any) -> int:
    """The bytes of a buffer-protocol object or of a DLPack / CUDA-array-interface exporter."""
    try:
        return memoryview(obj).nbytes
    except TypeError:
        if not exports(obj):
            raise
        return export(obj).nbytes


def export(obj: Any) -> Exported:
    """Read ``obj``'s DLPack export, or else its CUDA array interface."""
    if hasattr(obj, "__dlpack__"):
        return dlpack(obj)
    return cuda_array(obj)


# ---- DLPack ----


def _device(obj: Any) -> tuple[int, int]:
    if not hasattr(obj, "__dlpack_device__"):
        return KDL_CPU, 0
    device = obj.__dlpack_device__()
    if not isinstance(device, tuple):
        raise TypeError(f"dlpack: __dlpack_device__() returned {type(device).__name__}, not a tuple")
    if len(device) != 2:
        raise ValueError(f"dlpack: __dlpack_device__() returned {len(device)} items, not "
                         "(device_type, device_id)")
    kind, ident = device
    if not isinstance(kind, int) or not isinstance(ident, int):
        raise TypeError(f"dlpack: __dlpack_device__() returned {device!r}; an integer is required")
    return int(kind), int(ident)


def _capsule(obj: Any, device_type: int) -> Any:
    kwargs = {} if device_type in _HOST_DEVICES else {"stream": -1}
    try:
        return obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # an exporter of DLPack 0.x takes no max_version
        return obj.__dlpack__(**kwargs)


def dlpack(obj: Any) -> Exported:
    """Read the tensor ``obj.__dlpack__()`` exports (without consuming its capsule)."""
    device_type, _ = _device(obj)
    capsule = _capsule(obj, device_type)
    readonly = False
    if type(capsule).__name__ == "PyCapsule" and _capsule_valid(capsule, b"dltensor_versioned"):
        managed = _ManagedVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        if managed.version.major < 1:
            raise BufferError(f"dlpack: unexpected version {managed.version.major}."
                              f"{managed.version.minor} of a versioned tensor")
        readonly = bool(managed.flags & _READ_ONLY)
        tensor = managed.dl_tensor
    elif type(capsule).__name__ == "PyCapsule" and _capsule_valid(capsule, b"dltensor"):
        tensor = _Managed.from_address(_capsule_pointer(capsule, b"dltensor")).dl_tensor
    else:
        raise BufferError(f"dlpack: __dlpack__() returned {type(capsule).__name__}, not an unused "
                          "DLPack capsule")
    shape, strides = _layout(tensor)
    itemsize = tensor.dtype.bits * tensor.dtype.lanes // 8
    _check_contiguous(shape, strides, 1, "dlpack")
    return Exported(address=(tensor.data or 0) + tensor.byte_offset,
                    nbytes=math.prod(shape) * itemsize, dtype=_dlpack_dtype(tensor.dtype),
                    readonly=readonly, device=device_type != KDL_CPU, protocol="dlpack",
                    owner=(obj, capsule))


def _layout(tensor: _Tensor) -> tuple[list[int], list[int] | None]:
    ndim = tensor.ndim
    if ndim < 0:
        raise BufferError(f"dlpack: the number of dimensions is negative ({ndim})")
    if ndim and not tensor.shape:
        raise BufferError(f"dlpack: a tensor of {ndim} dimensions has no shape")
    shape = [tensor.shape[i] for i in range(ndim)]
    if any(n < 0 for n in shape):
        raise BufferError(f"dlpack: a shape item is negative ({shape})")
    strides = [tensor.strides[i] for i in range(ndim)] if ndim and tensor.strides else None
    if strides is not None and any(s < 0 for s in strides):
        raise BufferError(f"dlpack: a strides item is negative ({strides})")
    return shape, strides


def _dlpack_dtype(dt: _DType) -> np.dtype[Any] | None:
    kind, bits = _KINDS.get(dt.code), int(dt.bits)
    if kind == "f" and dt.lanes == 2:  # two float lanes: a complex number (complex long double)
        kind, bits = "c", 2 * bits
    elif dt.lanes != 1:
        return None
    if kind is None or bits % 8 or not bits:
        return None
    try:
        return np.dtype("?" if kind == "b" else f"{kind}{bits // 8}")
    except TypeError:
        return None


def _check_contiguous(shape: list[int], strides: list[int] | None, unit: int, protocol: str) -> None:
    """Refuse a layout that is neither C- nor Fortran-contiguous (extent-1 axes may have any stride)."""
    if strides is None or math.prod(shape) == 0:
        return
    axes = [(n, s) for n, s in zip(shape, strides) if n != 1]

    def dense(order: list[tuple[int, int]]) -> bool:
        step = unit
        for n, s in order:
            if s != step:
                return False
            step *= n
        return True

    if not (dense(axes[::-1]) or dense(axes)):
        raise BufferError(f"{protocol}: the buffer is not contiguous (shape {tuple(shape)}, strides "
                          f"{tuple(strides)})")


# ---- the CUDA array interface ----


def cuda_array(obj: Any) -> Exported:
    """Read ``obj.__cuda_array_interface__`` (version 0 to 3)."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError(f"__cuda_array_interface__ is a {type(cai).__name__}, not a dict")
    data, typestr, shape = cai["data"], cai["typestr"], cai["shape"]
    strides, descr, mask = cai.get("strides"), cai.get("descr"), cai.get("mask")
    if not isinstance(data, tuple):
        raise TypeError(f"__cuda_array_interface__: 'data' is a {type(data).__name__}, not "
                        "(pointer, read_only)")
    if len(data) != 2:
        raise ValueError(f"__cuda_array_interface__: 'data' has {len(data)} items, not (pointer, read_only)")
    if mask is not None:
        raise BufferError("__cuda_array_interface__: masked arrays are not supported")
    if not isinstance(shape, tuple):
        raise TypeError(f"__cuda_array_interface__: 'shape' is a {type(shape).__name__}, not a tuple")
    if strides is not None and not isinstance(strides, tuple):
        raise TypeError(f"__cuda_array_interface__: 'strides' is a {type(strides).__name__}, not a tuple")
    if descr is not None and not isinstance(descr, list):
        raise TypeError(f"__cuda_array_interface__: 'descr' is a {type(descr).__name__}, not a list")
    dtype, itemsize = _typestr(typestr, descr)
    if any(int(n) < 0 for n in shape):
        raise BufferError(f"__cuda_array_interface__: a shape item is negative ({shape})")
    shape_ = [int(n) for n in shape]
    _check_contiguous(shape_, None if strides is None else [int(s) for s in strides], itemsize,
                      "__cuda_array_interface__")
    return Exported(address=int(data[0]), nbytes=math.prod(shape_) * itemsize, dtype=dtype,
                    readonly=bool(data[1]), device=True, protocol="__cuda_array_interface__",
                    owner=obj)


def _typestr(typestr: Any, descr: Any) -> tuple[np.dtype[Any] | None, int]:
    """Return the element type (None: bytes) and item size of an interface's ``typestr``."""
    if not isinstance(typestr, str):
        raise TypeError(f"__cuda_array_interface__: 'typestr' is a {type(typestr).__name__}, not a str")
    order, kind, size = typestr[:1], typestr[1:2], typestr[2:]
    native = "<" if sys.byteorder == "little" else ">"
    if order not in (native, "|", "="):
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} is not in native byte order")
    itemsize = int(size)  # ValueError for a size that is no integer, as mpi4py
    if kind in "biufc" and kind:
        return np.dtype(f"{'?' if kind == 'b' else kind + str(itemsize)}"), itemsize
    import warnings
    warnings.warn(f"__cuda_array_interface__: typestr {typestr!r}"
                  f"{' and its descr' if descr else ''} taken as {itemsize} raw bytes",
                  RuntimeWarning, stacklevel=2)
    return None, itemsize


# ---- host views ----


class _Holder:
    """Carries ``__array_interface__`` for numpy and keeps the exporter alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, interface: dict[str, Any], owner: Any) -> None:
        self.__array_interface__ = interface
        self.owner = owner


def host_array(exp: Exported) -> Any:
    """Return a 1-D array over the exported memory: numpy on the host, CuPy for device memory."""
    dtype = exp.dtype if exp.dtype is not None else np.dtype(np.uint8)
    count = exp.nbytes // dtype.itemsize
    if count == 0:
        return np.empty(0, dtype=dtype)
    if exp.device and _on_device(exp.address):
        return _cupy_array(exp, dtype, count)
    if exp.device and not host_readable(exp.address, exp.nbytes):
        raise BufferError(f"{exp.protocol}: memory at {exp.address:#x} is on a device that "
                          "simcluster cannot read without CuPy; install cupy, or pass a host array")
    interface = {"version": 3, "shape": (count,), "typestr": dtype.str,
                 "data": (exp.address, exp.readonly)}
    arr = np.asarray(_Holder(interface, exp.owner))
    return arr


def _on_device(address: int) -> bool:
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return False
    try:
        kind = cupy.cuda.runtime.pointerGetAttributes(address).type
    except Exception:  # noqa: BLE001 - not a pointer CUDA knows: host memory
        return False
    return int(kind) in (2, 3)  # cudaMemoryTypeDevice, cudaMemoryTypeManaged


def _cupy_array(exp: Exported, dtype: np.dtype[Any], count: int) -> Any:
    import cupy
    mem = cupy.cuda.UnownedMemory(exp.address, exp.nbytes, exp.owner)
    return cupy.ndarray((count,), dtype=dtype, memptr=cupy.cuda.MemoryPointer(mem, 0))


_readable: list[tuple[int, int]] = []  # readable mappings last read from /proc/self/maps


def host_readable(address: int, nbytes: int) -> bool:
    """Return whether ``[address, address + nbytes)`` lies in readable mappings of this process."""
    if _within(address, address + nbytes):
        return True
    try:
        with open("/proc/self/maps", encoding="ascii") as f:
            lines = f.readlines()
    except OSError:
        return False
    spans: list[tuple[int, int]] = []
    for line in lines:
        span, perms = line.split(None, 2)[:2]
        if perms.startswith("r"):
            lo, hi = (int(x, 16) for x in span.split("-"))
            if spans and spans[-1][1] == lo:  # adjacent readable mappings: one span
                spans[-1] = (spans[-1][0], hi)
            else:
                spans.append((lo, hi))
    _readable[:] = spans
    return _within(address, address + nbytes)


def _within(lo: int, hi: int) -> bool:
    return any(a <= lo and hi <= b for a, b in _readable)
