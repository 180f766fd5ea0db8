"""The wire codec: payloads to msgpack headers plus raw buffers, envelopes to frames.

Owns two formats and nothing else. ``pack``/``unpack`` turn a payload object
into one msgpack *header* and a tuple of raw array *buffers*, and back.
``encode_frame``/``FrameDecoder`` turn an ``Envelope`` into the bytes of one
length-prefixed frame on a byte stream, and back. The module is sans-I/O (no
sockets, no asyncio, never ``simcluster``): the tcp driver is a short loop
around ``FrameDecoder.feed``, as h11 splits protocol from I/O.

Rule 1: arrays never enter a msgpack blob. ``pack`` replaces each array with
an EXT_NDARRAY ref ``[buffer index, dtype spec, shape, fortran]`` and keeps its
bytes as a separate contiguous buffer, copied at most once; ``encode_frame``
writes those buffers as memoryviews after the frame header, and the decoder
copies each one straight into its own allocation.
Rule 2: the decoding side trusts nothing. Whatever goes wrong while reading a
payload header or a frame (msgpack errors, bad dtypes, lengths that don't add
up, unknown ext codes) comes out as ``TransportError``. Pickle is never used.

Payload header: one msgpack object (use_bin_type; str-keyed maps only, read
back with strict_map_key). What msgpack cannot say exactly travels as an ext
type from the table below, never renumbered: tuples, complex, ints outside
64 bits, numpy scalars, dicts with any non-str key (a flat key/value list),
and array refs. Arrays of other libraries (torch, CuPy, array_api_strict) are
EXT_ARRAY refs ``[buffer index, library, dtype name, shape, fortran, device]``:
the dtype travels by *name* (``"bfloat16"`` too, which numpy lacks) and the
``ArrayCodec`` the caller passes as ``arrays=`` knows the libraries; this
module never imports one. Exact builtin types go straight through; subclasses of them
are sent as the base type (IntEnum -> int, namedtuple -> tuple, OrderedDict ->
dict), as json does; bytearray and memoryview are sent as bytes.

Frame: ``>II`` (length of everything after these first 4 bytes, length of the
frame header), the msgpack frame header ``[kind, ctx, src, dst, tag, msg_id,
nbytes, time, sync, payload header, meta, [buffer lengths]]``, then the raw buffers.
The explicit header length lets the decoder slice the header without a
streaming unpacker that would have to swallow the buffers too.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol

import msgpack  # untyped: skipped by [tool.mypy] in pyproject.toml
import numpy as np
from msgpack import ExtType
from numpy.typing import NDArray

from ._wire_errors import SEND_FIX as SEND_FIX
from ._wire_errors import Unreadable as Unreadable
from ._wire_errors import Unsendable as Unsendable
from .base import KIND_NAMES, Envelope, TransportError

__all__ = [
    "DEFAULT_MAX_FRAME",
    "EXT_ARRAY",
    "EXT_BIGINT",
    "EXT_COMPLEX",
    "EXT_DICT",
    "EXT_PICKLE",
    "EXT_NDARRAY",
    "EXT_NPSCALAR",
    "EXT_TUPLE",
    "MAX_DEPTH",
    "ArrayCodec",
    "ArraySpec",
    "FrameDecoder",
    "ObjectBuffer",
    "Packed",
    "Unreadable",
    "Unsendable",
    "encode_frame",
    "nbytes_of",
    "pack",
    "unpack",
]

# ---- the ext code table: one place, never renumbered ----

EXT_NDARRAY: Final = 1
"""Array ref: packed ``[buffer index, dtype spec, shape, fortran]``."""
EXT_COMPLEX: Final = 2
"""Python complex: ``<dd`` real, imag."""
EXT_TUPLE: Final = 3
"""Tuple: its items packed as a msgpack array."""
EXT_NPSCALAR: Final = 4
"""Numpy scalar: packed ``[dtype spec, raw bytes]``."""
EXT_BIGINT: Final = 5
"""Int outside [-2**63, 2**64): big-endian two's complement bytes."""
EXT_DICT: Final = 6
"""Dict with a key that is not a str: packed flat ``[k0, v0, k1, v1, ...]``."""
EXT_PICKLE: Final = 7
"""An object msgpack cannot carry, as the bytes of the caller's ``dumps`` (pickle, for runs
with ``run(..., serializer="pickle")``). This module never pickles: ``pack(dumps=...)`` and
``unpack(loads=...)`` are handed the functions, and without ``loads`` the code is refused,
because unpickling runs code chosen by whoever wrote the bytes."""
EXT_ARRAY: Final = 8
"""Array of another library: packed ``[buffer index, library, dtype name, shape, fortran, device]``;
its buffer is the raw bytes in that memory order, or an ``ObjectBuffer`` in process."""

MAX_DEPTH: Final = 256
"""Deepest nesting of containers that ``pack`` accepts (msgpack stops at 511)."""

DEFAULT_MAX_FRAME: Final = 1 << 30
"""Default cap on the declared length of one frame, in bytes."""


_NDARRAY: Final = np.ndarray  # Final: compiled, a static rather than an attribute of numpy per call
_INT_MIN: Final = -(1 << 63)
_INT_MAX: Final = (1 << 64) - 1
_COMPLEX: Final = struct.Struct("<dd")
_PREFIX: Final = struct.Struct(">II")
_PREFIX_SIZE: Final = _PREFIX.size
_U32_MAX: Final = 0xFFFFFFFF
_LARGE: Final = 1 << 16  # bytes from which a decoded buffer is allocated by numpy
_FRAME_FIELDS: Final = (
    "kind", "ctx", "src", "dst", "tag", "msg_id", "nbytes", "time", "sync", "header", "meta",
)
_UNPACK_FIX: Final = (
    "both ends must encode with transports.wire and run the same simcluster version"
)
_FRAME_FIX: Final = "check that the peer speaks simcluster's frame protocol, in the same version"

# One packer, reused. Safe while the GIL is held: pack() runs no Python code
# for the exact builtin types it is given (no `default` hook), so calls never interleave.
# XX: free-threaded builds would need one packer per thread.
_pack: Final = msgpack.Packer(use_bin_type=True, strict_types=True, autoreset=True).pack
_unpackb: Final = msgpack.unpackb
# ExtType(code, data) runs a Python __new__ that re-checks its arguments (about 400 ns);
# our codes and bytes are known good, so build the namedtuple directly (about 150 ns).
_new_ext: Final = tuple.__new__


class Packed(NamedTuple):
    """A payload as it travels: a msgpack header plus raw array buffers.

    Immutable; a NamedTuple because one is built per message (see ``Envelope``).

    Attributes:
        header: msgpack bytes of the object tree, every array replaced by an
            EXT_NDARRAY ref.
        buffers: one contiguous ndarray per array in the payload, in ref order
            (an ``ObjectBuffer`` for an array of another library kept as itself).
        nbytes: size the latency model counts: 0 for ``None``, the sum of the
            arrays' ``nbytes`` when the payload holds arrays (headers are free),
            otherwise ``len(header)``.
        single_array: the payload is exactly one array (the header is its ref).
    """

    header: bytes
    buffers: tuple[NDArray[Any] | ObjectBuffer, ...]
    nbytes: int
    single_array: bool

    def __repr__(self) -> str:
        kind = " single_array" if self.single_array else ""
        return (
            f"<Packed nbytes={self.nbytes} header={len(self.header)}B "
            f"buffers={len(self.buffers)}{kind}>"
        )


PACKED_NONE: Final = Packed(_pack(None), (), 0, False)
"""The packed form of None (what a barrier sends)."""
_NONE_HEADER: Final = PACKED_NONE.header

INLINE: Final = bytes((0xC1,))
"""The header of a scalar that travels as itself: the envelope's ``buffers`` is the value (``inline_nbytes``).

Known by identity, never by value: only this object means it, so a header
of the same byte read off a wire is still refused as malformed. (Built at
import, not a literal, so that every compiled module refers to this one
object.)

0xc1 is the one byte msgpack never uses, so no encoded payload starts with it.
"""

_new_tuple: Final = tuple.__new__  # builds a NamedTuple without its Python-level __new__
_Packed: Final = Packed  # Final: compiled, a static rather than a lookup in the module's dict


def _packed(header: bytes, buffers: tuple[NDArray[Any] | ObjectBuffer, ...], nbytes: int,
            single: bool) -> Packed:
    packed: Packed = _new_tuple(_Packed, (header, buffers, nbytes, single))
    return packed


# ---- arrays of other libraries ----


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """What the wire says about an array of another library (an EXT_ARRAY ref).

    Attributes:
        library: the library's import name: ``"torch"``, ``"cupy"``, ``"array_api_strict"``.
        dtype: the dtype's name in that library, e.g. ``"float32"``, ``"bfloat16"``.
        shape: the array's shape.
        fortran: the buffer holds the elements in Fortran (column-major) order.
        device: the sender's device as text (``"cpu"``, ``"cuda:0"``, ...).
    """

    library: str
    dtype: str
    shape: tuple[int, ...]
    fortran: bool
    device: str


@dataclass(frozen=True, slots=True, eq=False)
class ObjectBuffer:
    """An array of another library carried as the object itself (in-process transports).

    A CuPy array stays on its device this way: ``copy()`` copies it with its
    own library, and ``unpack`` hands back ``array`` (or a copy) without
    touching its bytes. Frames cannot carry it (``encode_frame`` refuses it):
    pack with a codec that stages to host memory for byte transports.

    Attributes:
        array: the library's array, contiguous in the order its ref states.
        nbytes: its size in bytes.
        clone: returns a copy of an array of this library, on the same device.
    """

    array: Any
    nbytes: int
    clone: Callable[[Any], Any]

    def copy(self) -> ObjectBuffer:
        """Return a buffer holding a copy of ``array`` made by its own library."""
        return ObjectBuffer(self.clone(self.array), self.nbytes, self.clone)


class ArrayCodec(Protocol):
    """Knows the array libraries other than numpy; passed to ``pack``/``unpack`` as ``arrays=``."""

    def lower(self, obj: object, copy: bool) -> tuple[ArraySpec, Any, int] | None:
        """Describe ``obj`` for the wire, or return None if it is not an array of another library.

        Returns ``(spec, buffer, nbytes)``: the buffer is a contiguous host
        ndarray of the raw bytes in the spec's order, or an ``ObjectBuffer``.
        With ``copy`` the buffer must not share memory with ``obj``.

        Raises:
            Unsendable: ``obj`` is an array that cannot be sent (its library
                or dtype is not supported).
        """

    def rebuild(self, spec: ArraySpec, raw: memoryview, copy: bool) -> object:
        """Return the array that ``spec`` describes over the raw bytes ``raw``.

        Raises:
            Unreadable: the library or dtype cannot be held in this process.
            ValueError: ``raw`` does not hold ``spec``'s bytes (a malformed payload).
        """


# ---- dtypes ----

_SPECS: dict[np.dtype[Any], object] = {}  # dtype -> spec, for dtypes already sent
_DTYPES: dict[str, np.dtype[Any]] = {}  # spec str -> dtype, for specs already read
_CACHE_LIMIT: Final = 1024
# What dtype.str can look like ('<f8', '|b1', '<U5', '|V16', '<M8[ns]', '<m8[25s]'): only
# these reach np.dtype(), so garbage cannot pick deprecated aliases or odd spellings.
_DTYPE_STR: Final = re.compile(r"[<>|][bifucmMOSUV]\d*(?:\[\d*[A-Za-z]+\])?")


def _spec_of(dt: np.dtype[Any], kind: str) -> object:
    """Return the msgpack-native spec of ``dt``; ``kind`` names the sender's type in errors."""
    spec = _SPECS.get(dt)
    if spec is None:
        if dt.hasobject:
            raise Unsendable(
                f"{kind}[{dt}]", 'convert it with .tolist() or .astype(a fixed-size dtype), '
                'or run(..., serializer="pickle")'
            )
        spec = _make_spec(dt, kind)
        if len(_SPECS) < _CACHE_LIMIT:
            _SPECS[dt] = spec
    return spec


def _make_spec(dt: np.dtype[Any], kind: str) -> object:
    """Spell ``dt`` as a str (plain), ``[base, shape]`` (subarray) or a dict (structured)."""
    if dt.names is not None:
        fields = dt.fields
        assert fields is not None
        entries = [fields[name] for name in dt.names]
        spec: dict[str, object] = {
            "names": list(dt.names),
            "formats": [_make_spec(entry[0], kind) for entry in entries],
            "offsets": [entry[1] for entry in entries],
            "itemsize": dt.itemsize,
        }
        titles = [entry[2] if len(entry) > 2 else None for entry in entries]
        if any(title is not None for title in titles):
            if not all(title is None or type(title) is str for title in titles):
                raise Unsendable(f"{kind}[{dt}]", "use str field titles, or none")
            spec["titles"] = titles
        return spec
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return [_make_spec(base, kind), list(shape)]
    text = dt.str
    if not _DTYPE_STR.fullmatch(text) or np.dtype(text) != dt:  # e.g. user-defined dtypes
        raise Unsendable(f"{kind}[{dt}]", "convert it to a builtin numpy dtype first")
    return text


def _dtype_from_spec(spec: object) -> np.dtype[Any]:
    """Rebuild a dtype from a spec read off the wire, refusing object dtypes."""
    if type(spec) is str:
        dt = _DTYPES.get(spec)
        if dt is not None:
            return dt
        if not _DTYPE_STR.fullmatch(spec):
            raise _malformed(f"dtype {spec!r:.40} is not a dtype.str")
        dt = np.dtype(spec)
        if not dt.hasobject and len(_DTYPES) < _CACHE_LIMIT:
            _DTYPES[spec] = dt
    elif type(spec) is list and len(spec) == 2:
        dt = np.dtype((_dtype_from_spec(spec[0]), tuple(_uints(spec[1], "subarray shape"))))
    elif type(spec) is dict:
        layout: Any = {
            "names": spec["names"],
            "formats": [_dtype_from_spec(f) for f in spec["formats"]],
            "offsets": _uints(spec["offsets"], "field offsets"),
            "itemsize": spec["itemsize"],
        }
        if "titles" in spec:
            layout["titles"] = spec["titles"]
        dt = np.dtype(layout)
    else:
        raise _malformed(f"dtype spec {spec!r:.60} is not a str, list or map")
    if dt.hasobject:
        raise _malformed(f"dtype {dt} holds Python objects")
    return dt


def _uints(value: object, what: str) -> list[int]:
    """Return ``value`` if it is a list of non-negative ints, else raise TransportError."""
    if type(value) is not list or not all(type(n) is int and n >= 0 for n in value):
        raise _malformed(f"{what} {value!r:.60} is not a list of non-negative ints")
    return value


def _malformed(problem: str) -> TransportError:
    return TransportError(None, "unpack", f"malformed payload header: {problem}", _UNPACK_FIX)


# ---- pack ----


class _Encoder:
    """One walk over a payload: lowers it to msgpack-native values, collects arrays.

    ``plain`` holds the types copied through without a call. In the first try it
    includes int, so an int beyond 64 bits reaches the packer, which raises
    OverflowError; ``pack`` then walks again with ``exact=True``.
    """

    __slots__ = ("arrays", "buffers", "copy", "depth", "dumps", "last", "nbytes", "plain")

    def __init__(self, copy: bool, exact: bool = False,
                 dumps: Callable[[object], bytes] | None = None,
                 arrays: ArrayCodec | None = None) -> None:
        self.buffers: list[Any] = []
        self.copy = copy
        self.dumps = dumps
        self.arrays = arrays
        self.last: object = None  # the last array of another library, for Packed.single_array
        self.depth = 0
        self.nbytes = 0
        self.plain = _PLAIN_EXACT if exact else _PLAIN

    def lower(self, obj: Any) -> object:
        """Return ``obj`` as exact msgpack types (lists, str-keyed dicts, ExtType)."""
        t = type(obj)
        if t is str or t is float or t is bool or t is bytes or obj is None:
            return obj
        if t is int:
            return obj if _INT_MIN <= obj <= _INT_MAX else _bigint(obj)
        if t is list:
            return self.items(obj)
        if t is dict:
            return self.mapping(obj)
        if t is tuple:
            return _new_ext(ExtType, (EXT_TUPLE, _pack(self.items(obj))))
        if t is _NDARRAY:
            return self.array(obj)
        if t is complex:
            return _new_ext(ExtType, (EXT_COMPLEX, _COMPLEX.pack(obj.real, obj.imag)))
        return self.other(obj)

    def too_deep(self, obj: object) -> Unsendable:
        name = type(obj).__name__
        return Unsendable(
            name, "flatten it", f"{name} nests deeper than {MAX_DEPTH} levels or contains itself"
        )

    def items(self, seq: list[Any] | tuple[Any, ...]) -> list[object]:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.too_deep(seq)
        lower, plain = self.lower, self.plain
        out = [x if type(x) in plain else lower(x) for x in seq]
        self.depth -= 1
        return out

    def mapping(self, d: dict[Any, Any]) -> object:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.too_deep(d)
        lower, plain = self.lower, self.plain
        out: dict[str, object] = {}
        pairs = iter(d.items())
        for key, value in pairs:
            if type(key) is not str:
                # Some key is not a str: switch to the flat EXT_DICT form, keeping the
                # values lowered so far (and their buffers) in the same order.
                flat: list[object] = []
                for done in out.items():
                    flat += done
                flat += (lower(key), lower(value))
                for key, value in pairs:
                    flat += (lower(key), lower(value))
                self.depth -= 1
                return _new_ext(ExtType, (EXT_DICT, _pack(flat)))
            out[key] = value if type(value) in plain else lower(value)
        self.depth -= 1
        return out

    def array(self, arr: NDArray[Any]) -> ExtType:
        spec = _spec_of(arr.dtype, "numpy.ndarray")
        fortran = _fortran(arr)
        buf = _contiguous(arr, fortran, self.copy)
        index = len(self.buffers)
        self.buffers.append(buf)
        self.nbytes += arr.nbytes
        ref = _pack([index, spec, list(arr.shape), fortran])
        return _new_ext(ExtType, (EXT_NDARRAY, ref))

    def other(self, obj: object) -> object:
        """Lower what the exact-type checks missed: numpy, subclasses, or Unsendable."""
        if isinstance(obj, np.ndarray):
            if isinstance(obj, np.ma.MaskedArray):
                raise Unsendable(
                    "numpy.ma.MaskedArray",
                    'send .data and .mask as two arrays, or run(..., serializer="pickle")',
                )
            return self.array(obj.view(np.ndarray))
        if isinstance(obj, np.generic):
            spec = _spec_of(obj.dtype, f"numpy.{type(obj).__name__}")
            raw = obj.tobytes() if obj.dtype.itemsize else b""  # np.str_("") has 4
            return _new_ext(ExtType, (EXT_NPSCALAR, _pack([spec, raw])))
        if self.arrays is not None:
            lowered = self.arrays.lower(obj, self.copy)
            if lowered is not None:
                return self.foreign(obj, *lowered)
        if type(obj) is bytearray:
            return obj  # the packer writes an exact bytearray as bin
        if isinstance(obj, memoryview):
            return obj.tobytes()
        for base in _BASES:
            if isinstance(obj, base):
                return self.lower(base(obj))
        if self.dumps is not None:
            return self.opaque(obj, self.dumps)
        raise Unsendable(type(obj).__name__)

    def foreign(self, obj: object, spec: ArraySpec, buf: Any, nbytes: int) -> ExtType:
        index = len(self.buffers)
        self.buffers.append(buf)
        self.nbytes += nbytes
        self.last = obj
        ref = _pack([index, spec.library, spec.dtype, list(spec.shape), spec.fortran, spec.device])
        return _new_ext(ExtType, (EXT_ARRAY, ref))

    def opaque(self, obj: object, dumps: Callable[[object], bytes]) -> ExtType:
        try:
            data = dumps(obj)
        except Exception as exc:
            name = type(obj).__name__
            raise Unsendable(name, "make it picklable, or send a dict/list/array instead",
                             f"{name} is not sendable even with pickle ({type(exc).__name__}: {exc})"
                             ) from None
        return _new_ext(ExtType, (EXT_PICKLE, bytes(data)))


_BASES: Final[tuple[type[Any], ...]] = (
    int, float, complex, str, bytes, bytearray, list, tuple, dict,
)
_PLAIN_EXACT: Final = frozenset({str, float, bool, bytes, type(None)})
_PLAIN: Final = _PLAIN_EXACT | {int}
_SHORT_LIST: Final = 16


def _bigint(n: int) -> ExtType:
    data = n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)
    return _new_ext(ExtType, (EXT_BIGINT, data))


def pack(obj: object, *, copy: bool = True,
         dumps: Callable[[object], bytes] | None = None,
         arrays: ArrayCodec | None = None) -> Packed:
    """Encode a payload as a msgpack header plus one contiguous buffer per array.

    Args:
        obj: the payload: None, bool, int, float, complex, str, bytes (bytearray
            and memoryview are sent as bytes), lists, tuples, dicts, numpy
            scalars and numpy arrays of any non-object dtype, nested freely.
        copy: copy each array once into a fresh contiguous array (C order, or F
            order for an F-contiguous input), so the sender may change its own
            array afterwards. With ``copy=False`` contiguous arrays are
            referenced, not copied; strided views are still copied once.
        dumps: turns what msgpack cannot carry (class instances, sets, ...)
            into bytes sent as EXT_PICKLE, instead of raising ``Unsendable``
            (``pickle.dumps`` for ``serializer="pickle"`` runs); only
            ``unpack(loads=...)`` reads such a payload back.
        arrays: lowers arrays of other libraries (torch, CuPy, ...) to EXT_ARRAY
            refs; without it they are not sendable. ``simcluster.arrays``
            provides the codecs.

    Returns:
        The header, the buffers, the counted size and whether the payload is
        exactly one array.

    Raises:
        Unsendable: ``obj`` holds something the codec cannot carry (a class
            instance, a set, an object array, ...), or nests deeper than
            ``MAX_DEPTH``.
    """
    t = type(obj)
    if obj is None:
        return PACKED_NONE
    if t is _NDARRAY:  # one array: its header is remembered by dtype, shape and order
        return _pack_array(obj, copy)  # type: ignore[arg-type]
    if t is float or t is str or t is bool or t is bytes or (
        t is int and _INT_MIN <= obj <= _INT_MAX  # type: ignore[operator]
    ):
        header = _pack(obj)
        return _packed(header, (), len(header), False)
    if t is list and len(obj) <= _SHORT_LIST:  # type: ignore[arg-type]
        for x in obj:  # type: ignore[attr-defined]
            if type(x) not in _PLAIN:
                break
        else:
            try:  # a short list of scalars (a reduction's flat value) is msgpack-native as it is
                header = _pack(obj)
                return _packed(header, (), len(header), False)
            except OverflowError:  # an int beyond 64 bits: the walk below makes it an ext
                pass
    encoder = _Encoder(copy, dumps=dumps, arrays=arrays)
    try:
        header = _pack(encoder.lower(obj))
    except OverflowError:  # an int beyond 64 bits slipped through the fast walk
        encoder = _Encoder(copy, exact=True, dumps=dumps, arrays=arrays)
        header = _pack(encoder.lower(obj))
    if not encoder.buffers:
        return _packed(header, (), len(header), False)
    single = isinstance(obj, np.ndarray) or encoder.last is obj
    return _packed(header, tuple(encoder.buffers), encoder.nbytes, single)


def inline_nbytes(obj: object) -> int:
    """The bytes an in-process scalar counts, or -1 when ``obj`` is not one.

    Transports that hand envelopes over within one process (``in_process``)
    send a float, a bool or an int msgpack holds natively (64 bits) without
    encoding it. Its envelope's header is ``INLINE`` and its ``buffers`` field
    is the value itself, immutable, so nothing is copied. It counts what its
    msgpack encoding would (9 bytes for a float, 1 to 9 for an int), so
    virtual times and stats are those of a byte transport.
    """
    t = type(obj)
    if t is float:
        return 9
    if t is int and _INT_MIN <= obj <= _INT_MAX:  # type: ignore[operator]
        return _int_nbytes(obj)  # type: ignore[arg-type]
    if t is bool:
        return 1
    return -1


def _int_nbytes(n: int) -> int:
    """Return the length of msgpack's encoding of an int in 64 bits, without encoding it."""
    if n >= 0:
        return 1 if n < 0x80 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9
    return 1 if n >= -0x20 else 2 if n >= -0x80 else 3 if n >= -0x8000 else 5 if n >= -0x80000000 else 9


_ArrayKey = tuple[np.dtype[Any], tuple[int, ...], bool]
_ARRAY_HEADERS: Final[dict[_ArrayKey, bytes]] = {}
"""The header of a payload that is one numpy array, by (dtype, shape, Fortran order)."""
_ARRAY_REFS: Final[dict[bytes, _ArrayKey]] = {}
"""The reverse: what such a header says, so ``unpack`` need not decode it again."""


def _pack_array(arr: NDArray[Any], copy: bool) -> Packed:
    """``pack`` of a payload that is exactly one numpy array (a reduction's flat value, a tensor's data)."""
    fortran = _fortran(arr)
    dt = arr.dtype
    key = (dt, arr.shape, fortran)
    header = _ARRAY_HEADERS.get(key)
    if header is None:  # first (raises Unsendable for a dtype that holds objects)
        ref = _pack([0, _spec_of(dt, "numpy.ndarray"), list(arr.shape), fortran])
        header = _pack(_new_ext(ExtType, (EXT_NDARRAY, ref)))
        if len(_ARRAY_HEADERS) < _CACHE_LIMIT:
            _ARRAY_HEADERS[key] = header
            _ARRAY_REFS[header] = key
    return _packed(header, (_contiguous(arr, fortran, copy),), arr.nbytes, True)


def nbytes_of(obj: object) -> int:
    """Return the size the latency model counts for ``obj`` (see ``Packed.nbytes``)."""
    return pack(obj, copy=False).nbytes


# ---- unpack ----


class _Decoder:
    """One read of a header: rebuilds ext types, hands out the buffers as arrays."""

    __slots__ = ("arrays", "buffers", "copy", "loads", "used")

    def __init__(self, buffers: Sequence[object], copy: bool,
                 loads: Callable[[bytes], object] | None = None,
                 arrays: ArrayCodec | None = None) -> None:
        self.buffers = buffers
        self.copy = copy
        self.loads = loads
        self.arrays = arrays
        self.used = 0

    def read(self, data: bytes | bytearray | memoryview) -> object:
        return _unpackb(
            data, ext_hook=self.ext_hook, raw=False, strict_map_key=True, timestamp=1,
        )

    def read_list(self, data: bytes, what: str) -> list[Any]:
        items = self.read(data)
        if type(items) is not list:
            raise _malformed(f"{what} is {type(items).__name__}, expected an array")
        return items

    def ext_hook(self, code: int, data: bytes) -> object:
        if code == EXT_NDARRAY:
            return self.array(data)
        if code == EXT_TUPLE:
            return tuple(self.read_list(data, "tuple"))
        if code == EXT_COMPLEX:
            real, imag = _COMPLEX.unpack(data)
            return complex(real, imag)
        if code == EXT_NPSCALAR:
            return self.scalar(data)
        if code == EXT_BIGINT:
            return int.from_bytes(data, "big", signed=True)
        if code == EXT_DICT:
            flat = self.read_list(data, "dict")
            if len(flat) % 2:
                raise _malformed(f"dict has {len(flat)} items, expected key/value pairs")
            pairs = iter(flat)
            return dict(zip(pairs, pairs))
        if code == EXT_PICKLE:
            if self.loads is None:
                raise TransportError(
                    None, "unpack", "the payload holds a pickled object and pickle is off",
                    'pass serializer="pickle" to run() to accept pickled payloads (only from '
                    "peers you trust: unpickling runs their code)")
            return self.loads(data)
        if code == EXT_ARRAY:
            return self.foreign(data)
        raise TransportError(None, "unpack", f"unknown ext code {code}", _UNPACK_FIX)

    def scalar(self, data: bytes) -> object:
        ref = self.read_list(data, "numpy scalar")
        if len(ref) != 2 or type(ref[1]) is not bytes:
            raise _malformed("numpy scalar is not [dtype, bytes]")
        dt = _dtype_from_spec(ref[0])
        raw = ref[1]
        if len(raw) != dt.itemsize or dt.subdtype is not None:
            raise _malformed(f"numpy scalar of dtype {dt} has {len(raw)} bytes")
        if not raw:  # e.g. np.str_(""): frombuffer refuses itemsize 0
            return np.zeros(1, dt)[0]
        return np.frombuffer(raw, dt, 1)[0]

    def array(self, data: bytes) -> NDArray[Any]:
        ref = self.read_list(data, "array ref")
        if len(ref) != 4:
            raise _malformed("array ref is not [index, dtype, shape, fortran]")
        index, spec, shape, fortran = ref
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise _malformed(f"array ref to buffer {index!r:.20} of {len(self.buffers)}")
        if type(fortran) is not bool or type(shape) is not list:
            raise _malformed("array ref needs a list shape and a bool order flag")
        dt = _dtype_from_spec(spec)
        dims = tuple(shape)
        order: Literal["C", "F"] = "F" if fortran else "C"
        buf = self.buffers[index]
        self.used += 1
        if type(buf) is _NDARRAY and buf.shape == dims and buf.dtype == dt and (
            buf.flags.f_contiguous if fortran else buf.flags.c_contiguous
        ):  # straight from Packed.buffers
            return _copy(buf, order) if self.copy else buf
        count = math.prod(_uints(shape, "array shape"))
        raw = _byte_view(buf)
        if raw.nbytes != count * dt.itemsize:
            raise _malformed(
                f"array of {count * dt.itemsize} bytes ({dt}{shape}) got a buffer of {raw.nbytes}"
            )
        if not raw.nbytes:
            return np.empty(dims, dt, order=order)
        arr = np.frombuffer(raw, dt, count).reshape(dims, order=order)
        return _copy(arr, order) if self.copy else arr


    def foreign(self, data: bytes) -> object:
        ref = self.read_list(data, "array ref")
        if len(ref) != 6:
            raise _malformed("array ref is not [index, library, dtype, shape, fortran, device]")
        index, library, dtype, shape, fortran, device = ref
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise _malformed(f"array ref to buffer {index!r:.20} of {len(self.buffers)}")
        if not (type(library) is str and type(dtype) is str and type(device) is str
                and type(fortran) is bool):
            raise _malformed("array ref needs str library, dtype and device and a bool order flag")
        dims = tuple(_uints(shape, "array shape"))
        buf = self.buffers[index]
        self.used += 1
        if type(buf) is ObjectBuffer:  # in process: the object itself, never its bytes
            return buf.copy().array if self.copy else buf.array
        spec = ArraySpec(library, dtype, dims, fortran, device)
        if self.arrays is None:
            raise Unreadable(
                f"unpack: the payload holds a {library} array ({dtype}{list(dims)}) and no array "
                "codec was given; pass unpack(..., arrays=) an ArrayCodec")
        return self.arrays.rebuild(spec, _byte_view(buf), self.copy)


def _fortran(arr: NDArray[Any]) -> bool:
    """Whether ``arr`` travels in Fortran order: F-contiguous and not C-contiguous."""
    flags = arr.flags
    return not flags.c_contiguous and bool(flags.f_contiguous)


def _contiguous(arr: NDArray[Any], fortran: bool, copy: bool) -> NDArray[Any]:
    """The buffer that carries ``arr``: itself, or a copy when ``copy`` or when it is strided."""
    if fortran:
        return _copy(arr, "F") if copy else arr
    if arr.flags.c_contiguous:
        return _copy(arr, "C") if copy else arr
    return _copy(arr, "C")  # a strided view needs one contiguous copy either way


def _copy(arr: NDArray[Any], order: Literal["C", "F"]) -> NDArray[Any]:
    """Copy ``arr`` into a fresh array in ``order``, bit for bit."""
    dt = arr.dtype
    copied: NDArray[Any]
    if dt.names is None or not dt.itemsize:
        copied = arr.copy(order=order)
        return copied
    # numpy copies structured arrays field by field and leaves the padding between
    # fields uninitialised; copy the raw records so no stray heap bytes travel.
    raw = arr.view(np.dtype((np.void, dt.itemsize))).copy(order=order)
    copied = raw.view(dt)
    return copied


def _byte_view(buf: object) -> memoryview:
    """Return the bytes of a contiguous buffer (ndarray or bytes-like) as a flat view."""
    if isinstance(buf, np.ndarray):
        if buf.nbytes == 0:
            return memoryview(b"")
        return buf.ravel(order="K").view(np.uint8).data
    if type(buf) is ObjectBuffer:
        raise TypeError(f"an in-process {type(buf.array).__name__} buffer has no bytes to frame; "
                        "pack for byte transports with a codec that stages arrays to host memory")
    view = memoryview(buf)  # type: ignore[arg-type]  # a non-buffer raises TypeError
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


_NO_BUFFERS: Final = _Decoder((), False)  # stateless while it has no buffers to count


def unpack(header: bytes | bytearray | memoryview, buffers: Sequence[object] = (),
           *, copy: bool = False, loads: Callable[[bytes], object] | None = None,
           arrays: ArrayCodec | None = None) -> object:
    """Rebuild a payload from its header and buffers.

    Arrays come back with their dtype, shape and memory order (C or F).
    With ``copy=False`` they are zero-copy views over ``buffers`` and writeable
    exactly when the buffer is: an ndarray from ``Packed.buffers`` is returned
    as is, and the memoryviews ``FrameDecoder`` hands out are writeable, but
    arrays over ``bytes`` are read-only (nothing is copied behind your back).
    With ``copy=True`` every array is a fresh, writeable copy the caller owns.

    Args:
        header: ``Packed.header`` or ``Envelope.header`` (``INLINE``: the
            payload is ``buffers`` itself, returned as it is).
        buffers: the ndarrays from ``Packed.buffers``, or raw bytes, bytearray
            or memoryview objects as they come off a stream.
        copy: return arrays that own their data.
        loads: rebuilds EXT_PICKLE objects (``pickle.loads`` for
            ``serializer="pickle"`` runs); without it they are refused, because
            unpickling runs code chosen by the sender.
        arrays: rebuilds EXT_ARRAY refs (arrays of other libraries) from their
            bytes; an ``ObjectBuffer`` needs none (its array is handed back).

    Returns:
        The payload: tuples, numpy scalars, big ints and non-str-keyed dicts
        come back as the types that were sent.

    Raises:
        TransportError: the header is not one ``pack`` produced, refers to
            missing buffers, or leaves some unused.
        Unreadable: an array of another library cannot be held here (its
            library is missing, or its dtype has no type here).
    """
    if header is INLINE:  # an in-process scalar (inline_nbytes): ``buffers`` is the value itself
        return buffers
    if len(buffers) == 1:
        key = _ARRAY_REFS.get(bytes(header))
        buf = buffers[0]
        if key is not None and type(buf) is _NDARRAY and buf.dtype == key[0] and buf.shape == key[1] and (
            buf.flags.f_contiguous if key[2] else buf.flags.c_contiguous
        ):  # one array, straight from Packed.buffers: what _Decoder.array would do
            return _copy(buf, "F" if key[2] else "C") if copy else buf
    if not buffers and loads is None:  # no arrays to rebuild: the shared stateless decoder
        if header == _NONE_HEADER:
            return None
        decoder = _NO_BUFFERS
    elif loads is not None or arrays is not None:
        decoder = _Decoder(buffers, copy, loads, arrays)
    else:
        decoder = _Decoder(buffers, copy)
    try:
        obj = decoder.read(header)
    except (TransportError, Unreadable):
        raise
    except Exception as exc:  # msgpack, numpy and struct errors alike: garbage in
        raise _malformed(f"{type(exc).__name__}: {exc}") from exc
    if decoder.used != len(buffers):
        raise _malformed(f"header refers to {decoder.used} arrays but {len(buffers)} buffers came")
    return obj


# ---- frames ----


def _no_ext(code: int, data: bytes) -> object:
    raise ValueError(f"ext code {code} has no place in a frame header")


def encode_frame(envelope: Envelope) -> list[bytes | memoryview]:
    """Encode ``envelope`` as the pieces of one frame, to be written in order.

    The first piece is the 8-byte prefix joined with the msgpack frame header;
    each array buffer follows as a memoryview of its bytes, never copied
    (a strided ndarray is made contiguous first).

    Raises:
        TransportError: a field has a type the frame cannot carry, or the frame
            would exceed the 4 GiB a length prefix can state.
    """
    e = envelope
    try:
        views = [_byte_view(buf) for buf in e.buffers]
        lengths = [view.nbytes for view in views]
        header = _pack([
            e.kind, e.ctx, e.src, e.dst, e.tag, e.msg_id, e.nbytes, float(e.time), e.sync,
            e.header, e.meta, lengths,
        ])
    except (TypeError, ValueError, OverflowError) as exc:
        raise TransportError(
            None, "send frame", f"cannot encode envelope {e.src!r}->{e.dst!r} ({exc})",
            "envelope fields must be Python ints, a float time, a bool sync, a bytes header "
            "and contiguous buffers",
        ) from None
    rest = 4 + len(header) + sum(lengths)
    if rest > _U32_MAX:
        raise TransportError(
            None, "send frame", f"frame of {rest} bytes does not fit a 4-byte length",
            "send the data in pieces under 4 GiB",
        )
    return [_PREFIX.pack(rest, len(header)) + header, *views]


class FrameDecoder:
    """Turn a byte stream, split anywhere, back into envelopes (sans-I/O).

    Each byte is copied once. A frame that lies whole in one ``feed`` is parsed
    in place; otherwise the prefix and frame header are gathered in a scratch
    buffer and each array buffer is filled straight in its own allocation.
    Buffers are handed out as writeable memoryviews that the decoder never
    touches again.
    """

    __slots__ = (
        "_bufs", "_error", "_fields", "_fill", "_got", "_head", "_index", "_max_frame",
        "_need", "_peer", "_rest",
    )

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME, peer: object = None) -> None:
        """Start at a frame boundary.

        Args:
            max_frame: largest declared frame length accepted, in bytes.
            peer: names the other side in errors (a rank, a process, an address).
        """
        self._max_frame = max_frame
        self._peer = peer
        self._error: TransportError | None = None
        self._got = 0  # bytes of the current frame seen so far; 0 at a frame boundary
        self._head = bytearray()  # the prefix, then the frame header, being gathered
        self._need = _PREFIX_SIZE  # length _head must reach before it is parsed
        self._rest = -1  # declared length of the current frame; -1 while reading the prefix
        self._fields: list[Any] | None = None  # parsed frame header, while buffers arrive
        self._bufs: list[memoryview] = []
        self._index = 0  # buffer being filled
        self._fill = 0  # bytes in it so far

    def feed(self, data: bytes | bytearray | memoryview) -> list[Envelope]:
        """Consume ``data`` and return the envelopes it completes, in order.

        Raises:
            TransportError: the stream holds a malformed or oversize frame; the
                decoder then refuses any further input with the same error.
        """
        if self._error is not None:
            raise self._error
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        out: list[Envelope] = []
        pos, end = 0, len(view)
        try:
            while pos < end:
                if not self._got and end - pos >= _PREFIX_SIZE:
                    size = self._whole_frame(view, pos, end, out)
                    if size:
                        pos += size
                        continue
                if self._fields is None:
                    take = min(self._need - len(self._head), end - pos)
                    self._head += view[pos:pos + take]
                    self._got += take
                    if len(self._head) == self._need:
                        self._parse_head(out)
                else:
                    buf, fill = self._bufs[self._index], self._fill
                    take = min(len(buf) - fill, end - pos)
                    buf[fill:fill + take] = view[pos:pos + take]
                    self._got += take
                    self._fill = fill + take
                    if self._fill == len(buf):
                        self._index += 1
                        self._fill = 0
                        self._advance(out)
                pos += take
        except TransportError as exc:
            self._error = exc
            raise
        return out

    def feed_eof(self) -> None:
        """Note that the stream ended.

        Raises:
            TransportError: the stream ended in the middle of a frame.
        """
        if self._error is not None:
            raise self._error
        if self._got:
            size = f"a frame of {self._rest + 4} bytes" if self._rest >= 0 else "a frame prefix"
            self._error = self._fail(
                f"the stream ended {self._got} bytes into {size}",
                "the peer closed its connection mid-send; look for its own error",
            )
            raise self._error

    def __repr__(self) -> str:
        if self._error is not None:
            state = "failed"
        elif self._got:
            state = f"{self._got} bytes into a frame"
        else:
            state = "at a frame boundary"
        return f"<FrameDecoder peer={self._peer!r} max_frame={self._max_frame} {state}>"

    # ---- internals ----

    def _fail(self, problem: str, fix: str = _FRAME_FIX) -> TransportError:
        where = "" if self._peer is None else f"from peer {self._peer!r}: "
        return TransportError(None, "recv frame", where + problem, fix, peer=self._peer)

    def _whole_frame(self, view: memoryview, pos: int, end: int, out: list[Envelope]) -> int:
        """Decode the frame at ``pos`` if it lies whole in ``view``; return its size or 0."""
        rest: int
        header_len: int
        rest, header_len = _PREFIX.unpack_from(view, pos)
        self._check_prefix(rest, header_len)
        stop = pos + 4 + rest
        if stop > end:
            return 0
        at = pos + _PREFIX_SIZE + header_len
        fields = self._read_header(view[pos + _PREFIX_SIZE:at], stop - at)
        bufs = []
        for n in fields[11]:
            bufs.append(_copy_out(view[at:at + n]))
            at += n
        out.append(_envelope(fields, bufs))
        return stop - pos

    def _check_prefix(self, rest: int, header_len: int) -> None:
        if rest > self._max_frame:
            raise self._fail(
                f"frame of {rest} bytes exceeds the cap of {self._max_frame}",
                "raise max_frame if messages this large are expected",
            )
        if not 0 < header_len <= rest - 4:
            raise self._fail(f"frame header of {header_len} bytes does not fit a frame of {rest}")

    def _parse_head(self, out: list[Envelope]) -> None:
        """Act on a complete prefix or frame header gathered in ``_head``."""
        if self._rest < 0:
            rest, header_len = _PREFIX.unpack(self._head)
            self._check_prefix(rest, header_len)
            self._rest = rest
            self._need = header_len
        else:
            fields = self._read_header(self._head, self._rest - 4 - len(self._head))
            self._fields = fields
            self._bufs = [_allocate(n) for n in fields[11]]
            self._index = 0
            self._fill = 0
            self._advance(out)
        self._head.clear()

    def _advance(self, out: list[Envelope]) -> None:
        """Step over empty buffers; emit the envelope once every buffer is full."""
        bufs = self._bufs
        while self._index < len(bufs) and not len(bufs[self._index]):
            self._index += 1
        if self._index < len(bufs):
            return
        assert self._fields is not None
        out.append(_envelope(self._fields, bufs))
        self._fields = None
        self._bufs = []
        self._rest = -1
        self._need = _PREFIX_SIZE
        self._got = 0

    def _read_header(self, head: bytearray | memoryview, body: int) -> list[Any]:
        """Decode and check a frame header; ``body`` is the byte count after it."""
        try:
            fields = _unpackb(head, raw=False, strict_map_key=True, ext_hook=_no_ext)
        except Exception as exc:
            raise self._fail(f"malformed frame header ({type(exc).__name__}: {exc})") from None
        if type(fields) is not list or len(fields) != 12:
            raise self._fail("frame header is not an array of 12 fields")
        kind, ctx, src, dst, tag, msg_id, nbytes, time, sync, header, meta, lengths = fields
        if not (
            type(kind) is int and type(ctx) is int and type(src) is int and type(dst) is int
            and type(tag) is int and type(msg_id) is int and type(nbytes) is int
            and type(time) is float and type(sync) is bool and type(header) is bytes
            and type(meta) is bytes
        ):
            expected = (*[int] * 7, float, bool, bytes, bytes)
            name, got, want = next(
                (n, type(v).__name__, e.__name__)
                for n, v, e in zip(_FRAME_FIELDS, fields, expected) if type(v) is not e
            )
            raise self._fail(f"frame field {name} is {got}, expected {want}")
        if not 0 <= kind < len(KIND_NAMES):
            raise self._fail(f"frame kind {kind} is not one of 0..{len(KIND_NAMES) - 1}")
        if type(lengths) is not list or not all(type(n) is int and n >= 0 for n in lengths):
            raise self._fail("frame buffer lengths are not a list of non-negative ints")
        if sum(lengths) != body:
            raise self._fail(
                f"buffer lengths add up to {sum(lengths)} bytes but {body} follow the frame header"
            )
        return fields


def _allocate(n: int) -> memoryview:
    """Return ``n`` fresh writeable bytes: numpy's allocator asks for huge pages for
    large blocks, which keeps page faults off the copy; small ones are cheaper as bytearray."""
    return np.empty(n, np.uint8).data if n >= _LARGE else memoryview(bytearray(n))


def _copy_out(view: memoryview) -> memoryview:
    """Return a fresh writeable copy of ``view``."""
    if len(view) < _LARGE:
        return memoryview(bytearray(view))
    out = _allocate(len(view))
    out[:] = view
    return out


def _envelope(fields: list[Any], bufs: list[memoryview]) -> Envelope:
    kind, ctx, src, dst, tag, msg_id, nbytes, time, sync, header, meta, _ = fields
    return Envelope(kind, ctx, src, dst, tag, msg_id, nbytes, time, header, tuple(bufs), sync, meta)
