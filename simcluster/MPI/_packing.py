"""Packing: ``Datatype.Pack``/``Unpack`` (and their ``external32`` twins) and ``MPI.Get_address``.

``Pack`` gathers the items of a datatype from a buffer into bytes of another,
exactly as a send puts them on the wire (``_datatypes.py``): the elements in
typemap order, each in its native bytes; ``Unpack`` scatters them back.
``Pack_external(\"external32\", ...)`` writes every number big-endian, so the
bytes are the same on any machine. The count is what fits in the buffer, as
in mpi4py (its size over the type's extent).

Rule 1: a ``position`` is a byte offset into the packed buffer; each call
returns the position after what it wrote or read.
Rule 2: packing never reads or writes outside either buffer: what does not
fit is an error (``ERR_ARG`` for a full output buffer, ``ERR_TRUNCATE`` for
input that ends early), where MPICH would write past the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import arrays
from . import _interop, _typemap
from ._buffers import _as_array, _BufferConstant, message
from ._constants import ERR_ARG, ERR_TRUNCATE
from ._datatypes import Datatype, _by_id, _rank
from ._errors import error

EXTERNAL32 = "external32"


def _call(dt: Datatype, what: str, datarep: str | None) -> str:
    name = dt._name or "Datatype"
    return f"{name}.{what}({datarep!r})" if datarep is not None else f"{name}.{what}()"


def _check_rep(datarep: str | None, rank: int | None, call: str) -> None:
    if datarep is not None and datarep != EXTERNAL32:
        raise error(ERR_ARG, rank, call, f"data representation {datarep!r} is not known",
                    'pass "external32"')


def _bytes(obj: Any, rank: int | None, call: str, writable: bool) -> NDArray[np.uint8]:
    """The packed buffer's memory as a flat byte array (shared)."""
    arr = _as_array(obj, -1 if rank is None else rank, call, writable)
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"rank {rank}: {call}: {arrays.describe(arr)} cannot be read as bytes; pack "
                        "into a bytearray or a numpy array")
    return arr.reshape(-1).view(np.uint8)


def _position(position: Any, rank: int | None, call: str) -> int:
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or position < 0:
        raise error(ERR_ARG, rank, call, f"position {position!r} is not a byte offset >= 0",
                    "pass 0, or the position the last Pack/Unpack returned")
    return int(position)


def _swap(dt: Datatype) -> NDArray[np.intp]:
    """The external32 byte permutation of one item of ``dt``."""
    if dt._predefined:
        return _typemap.swap_order(dt._base._layout.typemap(), dt._base, _by_id)
    if dt._base is dt._layout.leaf:
        tm = dt._layout.typemap()
        return _typemap.swap_order(tm, dt._base, _by_id)
    return _typemap.swap_order(dt._layout.typemap(), dt._layout.leaf, _by_id)


def pack(dt: Datatype, inbuf: Any, outbuf: Any, position: Any, comm: Any, datarep: str | None) -> int:
    """``Datatype.Pack`` (``datarep`` None) and ``Pack_external``."""
    rank = _rank()
    call = _call(dt, "Pack_external" if datarep is not None else "Pack", datarep)
    _check_rep(datarep, rank, call)
    start = _position(position, rank, call)
    b = message([inbuf, dt], -1 if rank is None else rank, call, False)
    data = b.take(b.displ, b.count)
    host = np.ascontiguousarray(data if isinstance(data, np.ndarray) else arrays.to_host(data))
    raw = host.reshape(-1).view(np.uint8)
    if datarep is not None and b.count:
        raw = raw.reshape(b.count, -1)[:, _swap(dt)].reshape(-1)
    out = _bytes(outbuf, rank, call, True)
    if start + raw.size > out.size:
        raise error(ERR_ARG, rank, call, f"{raw.size} packed bytes from position {start} do not fit "
                    f"in the output buffer of {out.size} bytes", "size it with Pack_size()")
    out[start:start + raw.size] = raw
    return start + int(raw.size)


def unpack(dt: Datatype, inbuf: Any, position: Any, outbuf: Any, comm: Any, datarep: str | None) -> int:
    """``Datatype.Unpack`` (``datarep`` None) and ``Unpack_external``."""
    rank = _rank()
    call = _call(dt, "Unpack_external" if datarep is not None else "Unpack", datarep)
    _check_rep(datarep, rank, call)
    start = _position(position, rank, call)
    b = message([outbuf, dt], -1 if rank is None else rank, call, True)
    src = _bytes(inbuf, rank, call, False)
    n = b.count * dt._wire_size()
    if start + n > src.size:
        raise error(ERR_TRUNCATE, rank, call, f"{b.count} items need {n} packed bytes from position "
                    f"{start} but the input buffer has {max(src.size - start, 0)}",
                    "unpack as many items as were packed (size the output buffer to them)")
    raw = np.array(src[start:start + n], copy=True)
    if datarep is not None and b.count:
        raw = raw.reshape(b.count, -1)[:, np.argsort(_swap(dt))].reshape(-1)
    base = dt._base._np
    assert base is not None
    if n:
        b.put(b.displ, raw.view(base), b.count)
    return start + n


def pack_size(dt: Datatype, count: Any, comm: Any, datarep: str | None) -> int:
    """``Datatype.Pack_size`` and ``Pack_external_size``: bytes for ``count`` items."""
    rank = _rank()
    call = _call(dt, "Pack_external_size" if datarep is not None else "Pack_size", datarep)
    _check_rep(datarep, rank, call)
    dt._usable(rank, call)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise error(ERR_ARG, rank, call, f"count {count!r} is not an int >= 0", "pass a count of items")
    return int(count) * dt._wire_size()


def Get_address(location: Any) -> int:
    """Return the address of a buffer's first byte (0 for ``None``; a buffer constant's own value)."""
    if location is None:
        return 0
    if isinstance(location, _BufferConstant):  # MPI.BOTTOM is 0, MPI.IN_PLACE -1, as in MPICH
        return int(location)
    if hasattr(location, "release") and hasattr(location, "address"):  # an MPI.buffer
        return int(location.address)
    if isinstance(location, np.ndarray):
        return int(location.__array_interface__["data"][0])
    try:
        view = np.asarray(memoryview(location))
    except TypeError:
        if _interop.exports(location):  # DLPack or the CUDA array interface
            return _interop.export(location).address
        raise TypeError(f"MPI.Get_address(): a {type(location).__name__} is not a buffer; pass a "
                        "numpy array, bytearray or another object with the buffer protocol") from None
    return int(view.__array_interface__["data"][0])


# ---- Datatype's packing methods (attached by MPI/__init__: _datatypes cannot import this module) ----


def _pack_method(self: Datatype, inbuf: Any, outbuf: Any, position: int, comm: Any) -> int:
    """Pack ``inbuf``'s items of this type into ``outbuf`` from byte ``position``; return the new one."""
    return pack(self, inbuf, outbuf, position, comm, None)


def _unpack_method(self: Datatype, inbuf: Any, position: int, outbuf: Any, comm: Any) -> int:
    """Unpack items of this type from ``inbuf`` at byte ``position`` into ``outbuf``; return the new one."""
    return unpack(self, inbuf, position, outbuf, comm, None)


def _pack_size_method(self: Datatype, count: int, comm: Any) -> int:
    """Return the bytes ``Pack`` needs for ``count`` items."""
    return pack_size(self, count, comm, None)


def _pack_external_method(self: Datatype, datarep: str, inbuf: Any, outbuf: Any, position: int) -> int:
    """Like ``Pack`` in a portable representation (``"external32"``: big-endian)."""
    return pack(self, inbuf, outbuf, position, None, datarep)


def _unpack_external_method(self: Datatype, datarep: str, inbuf: Any, position: int, outbuf: Any) -> int:
    """Like ``Unpack`` from ``Pack_external``'s representation."""
    return unpack(self, inbuf, position, outbuf, None, datarep)


def _pack_external_size_method(self: Datatype, datarep: str, count: int) -> int:
    """Return the bytes ``Pack_external`` needs for ``count`` items."""
    return pack_size(self, count, None, datarep)


METHODS: dict[str, Callable[..., int]] = {
    "Pack": _pack_method, "Unpack": _unpack_method, "Pack_size": _pack_size_method,
    "Pack_external": _pack_external_method, "Unpack_external": _unpack_external_method,
    "Pack_external_size": _pack_external_size_method,
}
