"""Arrays of every library: the one module that knows numpy, torch, CuPy and array_api_strict.

Payloads may be numpy arrays or arrays of other libraries that follow the
array API standard. numpy is the wire's native array; for the others this
module finds the library and namespace (with array-api-compat), copies,
compares and reshapes them with their own library, moves them between host
memory and their device explicitly, and gives the wire codec the ``Codec``
objects (``wire.ArrayCodec``) that carry them:

* ``IN_PROCESS`` (the memory transport): an array travels as the object itself
  (``wire.ObjectBuffer``), copied by its own library, so a CuPy array stays on
  its device and a torch tensor stays a tensor; nothing is staged. A shape-only
  tensor (a torch ``FakeTensor``) holds no data: it travels as a new fake tensor
  of its shape, made without running an op, and weighs the bytes its data would.
* ``STAGED`` (shm, tcp, any byte transport): the array's raw bytes are staged
  through host memory (torch CPU tensors are viewed, not copied) and the
  receiver rebuilds it in the sender's library, on its own device of that kind
  (a CuPy array on the current GPU).
* ``HOST`` (a receive into the caller's ``buf``): what numpy can hold comes
  back as a numpy view of the bytes, to be copied into ``buf`` whatever its
  library, so the receiver needs no copy of the sender's library.

The wire carries the library's name, the dtype's *name* (``"bfloat16"`` too,
which numpy lacks), the shape, the memory order (C or Fortran, where the
library has one) and the device. Only the libraries below are rebuilt: a name
off the wire is looked up in a fixed table, never imported blindly.

Rule 1: numpy first. Every helper tests ``type(x) is np.ndarray`` before
anything else, so numpy payloads keep their fast paths; other types are
recognised once and remembered by type.
Rule 2: no silent conversion. Copies, comparisons and reductions run in the
array's own namespace; host memory is used only where data crosses libraries
or leaves the process, and then by the explicit ``to_host``/``from_host``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import importlib
import math
import re
import sys
import zlib
from types import ModuleType
from typing import Any, Final, Literal

import array_api_compat as _compat
import numpy as np
from numpy.typing import NDArray

from simcluster.transports.wire import ArraySpec, ObjectBuffer, Unreadable, Unsendable

__all__ = [
    "HOST", "IN_PROCESS", "STAGED", "Codec", "checksum", "clone", "concat", "copy_into", "describe",
    "device", "dtype_name", "empty_like", "fill_front", "flat_copy", "from_host", "is_array", "kind",
    "library", "namespace", "nbytes", "reshape", "size", "to_host",
]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()

_NUMPY_NAMES: Final = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
})
"""Dtype names numpy holds natively: what ``HOST`` can hand back as numpy."""

_KINDS: Final = (("b", "bool"), ("i", "signed integer"), ("u", "unsigned integer"),
                 ("f", "real floating"), ("c", "complex floating"))
_HASH_CHUNK: Final = 1 << 24  # bytes hashed per step on a device (bounds the temporaries)
_CACHE_LIMIT: Final = 1024


def _import(name: str, spec: ArraySpec | None = None) -> ModuleType:
    """Import an array library, or explain that this process cannot hold its arrays."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        what = f"a {name} array" if spec is None else f"a {name} array ({spec.dtype}{list(spec.shape)})"
        extra = " (pip install 'simcluster[cuda]')" if name == "cupy" else ""
        raise Unreadable(
            f"the message holds {what} but {name} cannot be imported here ({exc}); install "
            f"{name} where this rank runs{extra}, or receive into a buffer of a library you have "
            "(recv(buf=...))") from None


def _raw(host: NDArray[Any]) -> NDArray[Any]:
    """Return the bytes of a contiguous (C or F) host array as a flat uint8 view, in memory order."""
    if host.size == 0:
        return np.empty(0, np.uint8)
    return host.ravel(order="K").view(np.uint8)


def _numpy_dtype(spec: ArraySpec, names: frozenset[str] = _NUMPY_NAMES) -> np.dtype[Any]:
    if spec.dtype not in names:
        raise Unreadable(f"{spec.library} has no dtype {spec.dtype!r:.40} here; send a dtype both "
                         "ends hold")
    return np.dtype(spec.dtype)


def _host_view(spec: ArraySpec, raw: memoryview, dt: np.dtype[Any], copy: bool) -> NDArray[Any]:
    """Return ``raw`` as a numpy array of ``spec``'s shape and order, owned when ``copy``."""
    count = math.prod(spec.shape)
    if len(raw) != count * dt.itemsize:
        raise ValueError(f"{spec.library} array of {count * dt.itemsize} bytes "
                         f"({spec.dtype}{list(spec.shape)}) got a buffer of {len(raw)}")
    order: Literal["C", "F"] = "F" if spec.fortran else "C"
    if not count:
        return np.empty(spec.shape, dt, order=order)
    host = np.frombuffer(raw, dt, count).reshape(spec.shape, order=order)
    return host.copy(order="K") if copy or not host.flags.writeable else host


# ---- one adapter per library ----


class _Library(ABC):
    """What simcluster needs from one array library; subclasses fill it in."""

    name = "?"
    supported = True

    def dtype_name(self, x: Any) -> str:
        return str(x.dtype).rpartition(".")[2]

    def nbytes(self, x: Any) -> int:
        return int(x.nbytes)

    def namespace(self, x: Any) -> ModuleType:
        xp: ModuleType = _compat.array_namespace(x)
        return xp

    @abstractmethod
    def lower(self, x: Any, copy: bool, keep: bool) -> tuple[ArraySpec, Any, int]:
        """See the subclasses."""

    @abstractmethod
    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> Any:
        """See the subclasses."""

    @abstractmethod
    def clone(self, x: Any) -> Any:
        """See the subclasses."""

    @abstractmethod
    def to_host(self, x: Any) -> NDArray[Any]:
        """See the subclasses."""

    @abstractmethod
    def from_host(self, host: NDArray[Any], like: Any) -> Any:
        """See the subclasses."""

    @abstractmethod
    def copy_same(self, dst: Any, src: Any) -> None:
        """Copy ``src`` (this library, same shape) into ``dst`` on ``dst``'s device."""

    @abstractmethod
    def checksum(self, x: Any) -> int:
        """See the subclasses."""

    def no_numpy(self, x: Any) -> TypeError:
        name = self.dtype_name(x)
        return TypeError(f"numpy has no dtype {name}, so a {self.name} {name} array cannot be "
                         f"staged through a numpy array; copy it into a {self.name} array, or "
                         f"convert it to a dtype numpy has first")


class _Other(_Library):
    """An array-API array of a library simcluster does not carry (jax, dask, ...)."""

    supported = False

    def lower(self, x: Any, copy: bool, keep: bool) -> tuple[ArraySpec, Any, int]:
        name = f"{type(x).__module__}.{type(x).__qualname__}"
        raise Unsendable(name, "convert it to a numpy, CuPy, torch or array_api_strict array first",
                         f"{name} is an array of a library simcluster does not carry")

    def _refuse(self) -> TypeError:
        return TypeError("an array of a library simcluster does not carry; convert it to a numpy, "
                         "CuPy, torch or array_api_strict array first")

    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> Any:
        raise self._refuse()

    def clone(self, x: Any) -> Any:
        raise self._refuse()

    def to_host(self, x: Any) -> NDArray[Any]:
        raise self._refuse()

    def from_host(self, host: NDArray[Any], like: Any) -> Any:
        raise self._refuse()

    def copy_same(self, dst: Any, src: Any) -> None:
        raise self._refuse()

    def checksum(self, x: Any) -> int:
        raise self._refuse()


class _Torch(_Library):
    name = "torch"

    @staticmethod
    def plain(t: Any) -> Any:
        """Return ``t`` without autograd history or lazy conjugate/negative bits."""
        t = t.detach()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        return t

    @staticmethod
    def contiguous(t: Any) -> tuple[Any, bool, bool]:
        """Return ``(tensor, fortran, copied)``: ``t`` if C- or F-contiguous, else a C copy."""
        if t.is_contiguous():
            return t, False, False
        if t.ndim >= 2 and t.permute(*reversed(range(t.ndim))).is_contiguous():
            return t, True, False
        return t.contiguous(), False, True

    @staticmethod
    def host_bytes(t: Any, fortran: bool) -> NDArray[Any]:
        """Return the bytes of a contiguous tensor in memory order as host uint8 (a view on CPU)."""
        if t.numel() == 0:
            return np.empty(0, np.uint8)
        torch = sys.modules["torch"]
        flat = (t.permute(*reversed(range(t.ndim))) if fortran else t).reshape(-1)
        raw = flat.view(torch.uint8)
        if raw.device.type != "cpu":
            raw = raw.cpu()  # explicit staging off the device
        return raw.numpy()  # type: ignore[no-any-return]

    def lower(self, x: Any, copy: bool, keep: bool) -> tuple[ArraySpec, Any, int]:
        torch = sys.modules["torch"]
        if x.layout != torch.strided or x.is_quantized or x.is_meta or x.is_nested:
            kind = "meta" if x.is_meta else str(x.layout).removeprefix("torch.")
            raise Unsendable(f"torch.Tensor[{kind}]", "send a dense tensor (x.to_dense(), or a "
                             "dequantized copy)", f"a {kind} torch tensor is not sendable")
        if keep and _is_fake(x) and x.is_contiguous() and not (x.is_conj() or x.is_neg()):
            # a shape-only tensor carries no data: it travels as a fresh tensor of its shape
            spec = ArraySpec("torch", self.dtype_name(x), tuple(x.shape), False, str(x.device))
            nbytes = x.numel() * x.element_size()
            return spec, ObjectBuffer(_fake_like(x), nbytes, _fake_like), nbytes
        t, fortran, copied = self.contiguous(self.plain(x))
        spec = ArraySpec("torch", self.dtype_name(t), tuple(t.shape), fortran, str(t.device))
        nbytes = int(t.nbytes)
        if keep:
            if copy and not copied:
                t = t.clone()
            return spec, ObjectBuffer(t, nbytes, _torch_clone), nbytes
        host = self.host_bytes(t, fortran)
        if copy and not copied and t.device.type == "cpu":
            host = host.copy()
        return spec, host, nbytes

    def dtype_of(self, spec: ArraySpec) -> Any:
        torch = _import("torch", spec)
        dt = getattr(torch, spec.dtype, None) if re.fullmatch(r"[a-z][a-z0-9_]*", spec.dtype) else None
        if not isinstance(dt, torch.dtype):
            raise Unreadable(f"torch has no dtype {spec.dtype!r:.40} here (torch {torch.__version__}); "
                             "use the same torch version on every host, or send a common dtype")
        return dt

    def device_of(self, spec: ArraySpec) -> Any:
        torch = sys.modules["torch"]
        kind = spec.device.partition(":")[0]
        if kind == "cpu":
            return None
        if kind == "cuda" and not torch.cuda.is_available():
            raise Unreadable(f"the message holds a torch tensor from {spec.device} but this process "
                             "has no CUDA device; receive into a CPU tensor or a numpy array "
                             "(recv(buf=...))")
        return torch.device(kind)  # the receiver's current device of that kind

    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> Any:
        torch = sys.modules.get("torch") or _import("torch", spec)
        dt = self.dtype_of(spec)
        device = self.device_of(spec)
        count = math.prod(spec.shape)
        if len(raw) != count * dt.itemsize:
            raise ValueError(f"torch array of {count * dt.itemsize} bytes ({spec.dtype}"
                             f"{list(spec.shape)}) got a buffer of {len(raw)}")
        if not count:
            t = torch.empty(spec.shape, dtype=dt)
        else:
            host = np.frombuffer(raw, np.uint8)
            if copy or not host.flags.writeable:
                host = host.copy()
            flat = torch.from_numpy(host).view(dt)
            if spec.fortran:
                t = flat.reshape(spec.shape[::-1]).permute(*reversed(range(len(spec.shape))))
            else:
                t = flat.reshape(spec.shape)
        return t if device is None else t.to(device)

    def clone(self, x: Any) -> Any:
        return x.detach().clone()

    def to_host(self, x: Any) -> NDArray[Any]:
        if self.dtype_name(x) not in _NUMPY_NAMES:
            raise self.no_numpy(x)
        t = self.plain(x)
        if t.device.type != "cpu":
            t = t.cpu()
        return t.numpy()  # type: ignore[no-any-return]

    def from_host(self, host: NDArray[Any], like: Any) -> Any:
        torch = sys.modules["torch"]
        if not host.dtype.isnative or not host.flags.writeable:
            host = host.astype(host.dtype.newbyteorder("="))  # torch wants native, writeable memory
        t = torch.from_numpy(host)
        return t if like.device.type == "cpu" else t.to(like.device)

    def copy_same(self, dst: Any, src: Any) -> None:
        torch = sys.modules["torch"]
        with torch.no_grad():  # a leaf that requires grad is filled in place, as torch.distributed does
            dst.copy_(src)

    def checksum(self, x: Any) -> int:
        if _is_fake(x):
            return 0  # a shape-only run's tensor holds no data to guard
        t, fortran, _ = self.contiguous(self.plain(x))
        if t.device.type == "cpu":
            return zlib.crc32(self.host_bytes(t, fortran).data)
        torch = sys.modules["torch"]
        flat = (t.permute(*reversed(range(t.ndim))) if fortran else t).reshape(-1)
        return _device_hash(self.namespace(t), flat.view(torch.uint8))


def _torch_clone(t: Any) -> Any:
    return t.clone()


def _is_fake(x: Any) -> bool:
    """Whether ``x`` is a shape-only tensor (a torch ``FakeTensor``: shape, dtype, device, no data)."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return fake is not None and isinstance(x, fake.FakeTensor)


def _fake_like(t: Any) -> Any:
    """A new ``FakeTensor`` of ``t``'s shape, strides, dtype and device in ``t``'s fake mode.

    What a clone of it gives, made directly: each collective message of a shape-only run is
    copied, and a clone would run through the rank's dispatch modes (several times the cost).
    """
    torch = sys.modules["torch"]
    fake = sys.modules["torch._subclasses.fake_tensor"]
    with torch._C._DisableTorchDispatch():  # a plain meta tensor, not one made fake by the mode
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return fake.FakeTensor(t.fake_mode, meta, t.device)


class _CuPy(_Library):
    name = "cupy"

    def dtype_name(self, x: Any) -> str:
        return str(x.dtype.name)

    def lower(self, x: Any, copy: bool, keep: bool) -> tuple[ArraySpec, Any, int]:
        cupy = sys.modules["cupy"]
        if x.dtype.kind not in "biufc":
            raise Unsendable(f"cupy.ndarray[{x.dtype}]", "send a numeric or bool array")
        with x.device:
            copied = False
            if x.flags.c_contiguous:
                fortran = False
            elif x.flags.f_contiguous:
                fortran = True
            else:
                x, fortran, copied = cupy.ascontiguousarray(x), False, True
            spec = ArraySpec("cupy", self.dtype_name(x), tuple(x.shape), fortran, f"cuda:{x.device.id}")
            nbytes = int(x.nbytes)
            if keep:  # stays on its device: a device-to-device copy at most
                if copy and not copied:
                    x = x.copy(order="K")
                return spec, ObjectBuffer(x, nbytes, _cupy_clone), nbytes
            host = x.get(order="F" if fortran else "C")  # explicit staging: device to host
        return spec, _raw(host), nbytes

    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> Any:
        cupy = _import("cupy", spec)
        host = _host_view(ArraySpec(spec.library, spec.dtype, (math.prod(spec.shape),), False,
                                    spec.device), raw, _numpy_dtype(spec), False)
        flat = cupy.asarray(host)  # host to the current device: always a fresh device array
        return flat.reshape(spec.shape, order="F" if spec.fortran else "C")

    def clone(self, x: Any) -> Any:
        return _cupy_clone(x)

    def to_host(self, x: Any) -> NDArray[Any]:
        host: NDArray[Any] = x.get()
        return host

    def from_host(self, host: NDArray[Any], like: Any) -> Any:
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.asarray(host)

    def copy_same(self, dst: Any, src: Any) -> None:
        cupy = sys.modules["cupy"]
        with dst.device:
            if src.device != dst.device:
                src = src.copy(order="K")  # CuPy copies to the current device: dst's
            cupy.copyto(dst, src)

    def checksum(self, x: Any) -> int:
        cupy = sys.modules["cupy"]
        with x.device:
            if not (x.flags.c_contiguous or x.flags.f_contiguous):
                x = cupy.ascontiguousarray(x)
            return _device_hash(self.namespace(x), x.ravel(order="K").view(cupy.uint8))


def _cupy_clone(x: Any) -> Any:
    with x.device:  # CuPy copies onto the current device; keep the array's own
        return x.copy(order="K")


_STRICT_NAMES: Final = _NUMPY_NAMES - {"float16"}


class _Strict(_Library):
    name = "array_api_strict"

    def nbytes(self, x: Any) -> int:
        return int(math.prod(x.shape)) * np.dtype(self.dtype_name(x)).itemsize

    def namespace(self, x: Any) -> ModuleType:
        return sys.modules["array_api_strict"]

    @staticmethod
    def device_name(x: Any) -> str:
        match = re.fullmatch(r".*Device\('(.*)'\)", repr(x.device))
        return match[1] if match else "CPU_DEVICE"

    def lower(self, x: Any, copy: bool, keep: bool) -> tuple[ArraySpec, Any, int]:
        xp = self.namespace(x)
        spec = ArraySpec(self.name, self.dtype_name(x), tuple(x.shape), False, self.device_name(x))
        nbytes = self.nbytes(x)
        if keep:
            return spec, ObjectBuffer(xp.asarray(x, copy=True) if copy else x, nbytes, self.clone), nbytes
        host = np.from_dlpack(x)  # a CPU library: a view of its memory, no conversion
        if copy or not host.flags.c_contiguous:
            host = np.array(host, order="C", copy=True)
        return spec, _raw(host), nbytes

    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> Any:
        xp = _import(self.name, spec)
        host = _host_view(spec, raw, _numpy_dtype(spec, _STRICT_NAMES), copy)
        return xp.asarray(host, device=xp.Device(spec.device))

    def clone(self, x: Any) -> Any:
        return self.namespace(x).asarray(x, copy=True)

    def to_host(self, x: Any) -> NDArray[Any]:
        return np.from_dlpack(x)

    def from_host(self, host: NDArray[Any], like: Any) -> Any:
        return self.namespace(like).asarray(np.array(host, copy=True), device=like.device)

    def copy_same(self, dst: Any, src: Any) -> None:
        if src.device != dst.device:
            src = src.to_device(dst.device)
        dst[...] = src

    def checksum(self, x: Any) -> int:
        return zlib.crc32(np.ascontiguousarray(np.from_dlpack(x)).data.cast("B"))


_TORCH: Final = _Torch()
_CUPY: Final = _CuPy()
_STRICT: Final = _Strict()
_OTHER: Final = _Other()
_BY_NAME: Final[dict[str, _Library]] = {lib.name: lib for lib in (_TORCH, _CUPY, _STRICT)}

# ---- recognising arrays ----

_BY_TYPE: dict[type, _Library | None] = {}  # type -> its library (None: not an array of another library)


def _learn(x: object) -> _Library | None:
    lib: _Library | None
    if isinstance(x, (np.ndarray, np.generic)):
        lib = None  # numpy is the wire's own
    elif _compat.is_torch_array(x):
        lib = _TORCH
    elif _compat.is_cupy_array(x):
        lib = _CUPY
    elif _compat.is_array_api_obj(x):
        try:
            xp = _compat.array_namespace(x)
        except TypeError:  # claims a namespace it cannot give
            xp = None
        lib = _STRICT if xp is not None and _compat.is_array_api_strict_namespace(xp) else _OTHER
    else:
        lib = None
    if len(_BY_TYPE) < _CACHE_LIMIT:
        _BY_TYPE[type(x)] = lib
    return lib


def _lib(x: object) -> _Library | None:
    """Return the adapter of ``x``'s library; None for numpy and for non-arrays."""
    try:
        return _BY_TYPE[type(x)]
    except KeyError:
        return _learn(x)


def _foreign(x: object, what: str = "x") -> _Library:
    lib = _lib(x)
    if lib is None or not lib.supported:
        raise TypeError(f"{what} must be an array (numpy, CuPy, torch or array_api_strict), "
                        f"not {type(x).__name__}")
    return lib


_NEVER_ARRAYS: Final = frozenset({float, int, bool, complex, str, bytes, type(None), list, tuple, dict})
"""Exact types ``is_array`` answers at once: the payloads of most collectives."""


def is_array(x: object) -> bool:
    """Return whether ``x`` is an array simcluster carries: numpy, CuPy, torch or array_api_strict."""
    t = type(x)
    if t is np.ndarray:
        return True
    if t in _NEVER_ARRAYS:
        return False
    if isinstance(x, np.ndarray):
        return True
    lib = _lib(x)
    return lib is not None and lib.supported


def library(x: object) -> str:
    """Return the import name of ``x``'s library: ``"numpy"``, ``"torch"``, ``"cupy"``, ...."""
    if isinstance(x, np.ndarray):
        return "numpy"
    return _foreign(x).name


def namespace(x: object) -> ModuleType:
    """Return ``x``'s array-API namespace (array-api-compat's wrapper for numpy, torch and CuPy)."""
    xp: ModuleType = _compat.array_namespace(x)
    return xp


def device(x: object) -> object:
    """Return the device ``x`` lives on, as its library names it (``"cpu"`` for numpy)."""
    return _compat.device(x)


def dtype_name(x: Any) -> str:
    """Return the name of ``x``'s dtype, the same in every library: ``"float32"``, ``"bfloat16"``."""
    if isinstance(x, np.ndarray):
        return str(x.dtype.name)
    return _foreign(x).dtype_name(x)


def kind(x: Any) -> str:
    """Return numpy's kind letter for ``x``'s dtype (``"b"``, ``"i"``, ``"u"``, ``"f"``, ``"c"``; else ``"?"``)."""
    if isinstance(x, np.ndarray):
        return str(x.dtype.kind)
    xp = _foreign(x).namespace(x)
    for letter, name in _KINDS:
        if xp.isdtype(x.dtype, name):
            return letter
    return "?"


def nbytes(x: Any) -> int:
    """Return the bytes ``x``'s elements take."""
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    return _foreign(x).nbytes(x)


def size(x: Any) -> int:
    """Return the number of elements of ``x``."""
    return math.prod(x.shape)


def describe(x: Any) -> str:
    """Describe an array for messages: ``float64[4]`` for numpy, ``torch.bfloat16[2, 3]`` otherwise."""
    shape = ", ".join(str(n) for n in x.shape)
    if isinstance(x, np.ndarray):
        return f"{x.dtype}[{shape}]"
    return f"{library(x)}.{dtype_name(x)}[{shape}]"


# ---- copies, in the array's own library ----


def clone(x: Any) -> Any:
    """Return a copy of ``x`` made by its own library, on its device (numpy keeps its memory order)."""
    if type(x) is np.ndarray:
        return x.copy(order="K")
    return _foreign(x).clone(x)


def empty_like(x: Any) -> Any:
    """Return an uninitialised array of ``x``'s library, dtype, shape and device."""
    if isinstance(x, np.ndarray):
        return np.empty_like(x)
    return namespace(x).empty_like(x)


def reshape(x: Any, shape: tuple[int, ...]) -> Any:
    """Return ``x`` in ``shape`` (a view where its library gives one)."""
    if type(x) is np.ndarray:
        return x.reshape(shape)
    return _foreign(x).namespace(x).reshape(x, shape)


def flat_copy(x: Any) -> Any:
    """Return a 1-D copy of ``x``'s elements in C order that shares nothing with ``x``."""
    if isinstance(x, np.ndarray):
        return np.array(x, order="C").reshape(-1)
    lib = _foreign(x)
    return lib.namespace(x).reshape(lib.clone(x), (-1,))


def concat(pieces: list[Any]) -> Any:
    """Join 1-D arrays of one library end to end."""
    if type(pieces[0]) is np.ndarray:
        return np.concatenate(pieces)
    return _foreign(pieces[0]).namespace(pieces[0]).concat(pieces)


def to_host(x: Any) -> NDArray[Any]:
    """Return ``x``'s elements as a numpy array: explicit staging to host memory.

    CuPy and CUDA tensors are copied off the device; CPU libraries give a view
    of their memory where they can (do not write through it).

    Raises:
        TypeError: ``x`` is not an array, or its dtype has no numpy type (bfloat16).
    """
    if isinstance(x, np.ndarray):
        return x
    return _foreign(x).to_host(x)


def from_host(host: NDArray[Any], like: Any) -> Any:
    """Return the numpy array ``host`` as an array of ``like``'s library on ``like``'s device."""
    if isinstance(like, np.ndarray):
        return host
    return _foreign(like, "like").from_host(host, like)


def copy_into(dst: Any, src: Any) -> Any:
    """Copy ``src`` into ``dst`` in place (same shape) and return ``dst``; any library to any library.

    The same library copies device to device (``torch.Tensor.copy_``,
    ``cupy.copyto``, ``dst[...] = src``); different libraries stage through
    host memory explicitly (``to_host`` then ``from_host``). Dtypes are the
    caller's business: check them first.
    """
    if isinstance(dst, np.ndarray):
        np.copyto(dst, src if isinstance(src, np.ndarray) else to_host(src))
        return dst
    lib = _foreign(dst, "dst")
    if _lib(src) is not lib:
        src = lib.from_host(to_host(src), dst)
    lib.copy_same(dst, src)
    return dst


def fill_front(dst: Any, src: Any) -> Any:
    """Copy ``src``'s elements into the first ``size(src)`` elements of ``dst`` (C order), as MPI does."""
    count = size(src)
    flat_src = reshape(src, (-1,))
    if isinstance(dst, np.ndarray):
        flat_src = to_host(flat_src)
        if dst.flags.c_contiguous:
            dst.reshape(-1)[:count] = flat_src
        else:
            dst.flat[:count] = flat_src
        return dst
    lib = _foreign(dst, "dst")
    if _lib(flat_src) is not lib:
        flat_src = lib.from_host(to_host(flat_src), dst)
    xp = lib.namespace(dst)
    flat = xp.reshape(lib.clone(dst), (-1,))  # works whether or not reshape gives a view
    flat[:count] = flat_src
    lib.copy_same(dst, xp.reshape(flat, tuple(dst.shape)))
    return dst


# ---- buffer-hazard checksums ----


def checksum(x: Any) -> int:
    """Return a checksum of ``x``'s bytes, computed where ``x`` lives.

    numpy and CPU libraries: CRC-32 of the memory. CuPy and CUDA tensors: two
    position-weighted byte sums computed on the device (no copy to the host),
    which catch any single changed byte and nearly every other write.
    """
    if isinstance(x, np.ndarray):
        return zlib.crc32(np.ascontiguousarray(x).data.cast("B"))
    return _foreign(x).checksum(x)


def _device_hash(xp: ModuleType, raw: Any) -> int:
    """Hash the 1-D uint8 array ``raw`` with its own namespace, in chunks (no host copy).

    ``sum(b[i] * (i % p + 1))`` for two primes ``p``: no int64 overflow below
    about 2**43 bytes per chunk sum, and a swap of two bytes goes unseen only if
    their positions agree modulo both primes.
    """
    n = int(raw.shape[0])
    where = _compat.device(raw)
    first = second = 0
    for start in range(0, n, _HASH_CHUNK):
        stop = min(n, start + _HASH_CHUNK)
        values = xp.astype(raw[start:stop], xp.int64)
        index = xp.arange(start, stop, dtype=xp.int64, device=where)
        first += int(xp.sum(values * (index % 65521 + 1)))
        second += int(xp.sum(values * (index % 65519 + 1)))
    return (first << 64) | second


# ---- codecs for transports.wire ----


class Codec:
    """Carries arrays of other libraries over ``transports.wire`` (a ``wire.ArrayCodec``).

    Use the module constants: ``IN_PROCESS`` keeps arrays as objects,
    ``STAGED`` stages them through host bytes, ``HOST`` also rebuilds what
    numpy can hold as numpy (for receives into a caller's buffer).
    """

    __slots__ = ("_host", "_keep", "_name")

    def __init__(self, name: str, *, keep: bool, host: bool = False) -> None:
        self._name = name
        self._keep = keep
        self._host = host

    def lower(self, obj: object, copy: bool) -> tuple[ArraySpec, Any, int] | None:
        lib = _lib(obj)
        if lib is None:
            return None
        return lib.lower(obj, copy, self._keep)

    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> object:
        lib = _BY_NAME.get(spec.library)
        if lib is None:
            raise Unreadable(
                f"the message holds a {spec.library!r:.40} array ({spec.dtype!r:.40}), a library "
                "simcluster does not carry; send numpy, CuPy, torch or array_api_strict arrays")
        if self._host and spec.dtype in _NUMPY_NAMES:
            return _host_view(spec, raw, np.dtype(spec.dtype), copy)
        return lib.rebuild(spec, raw, copy)

    def __repr__(self) -> str:
        return f"simcluster.arrays.{self._name}"


IN_PROCESS: Final = Codec("IN_PROCESS", keep=True)
"""For transports that hand objects over (memory): arrays travel as themselves."""
STAGED: Final = Codec("STAGED", keep=False)
"""For byte transports (shm, tcp): arrays are staged through host memory, rebuilt in their library."""
HOST: Final = Codec("HOST", keep=False, host=True)
"""For receives into a caller's buffer: what numpy can hold is rebuilt as numpy."""
