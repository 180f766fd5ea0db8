"""What can be sent, and how payloads are described in messages and reports.

The codec itself lives in ``transports.wire`` (so every transport shares it);
this module holds what the user-facing layer needs on top: short
descriptions of buffers for error messages and the check that a receive
buffer can be filled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import arrays

__all__ = ["check_buffer", "describe"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


_DESCRIBED: dict[tuple[Any, tuple[int, ...]], str] = {}  # (dtype, shape) -> description
_DESCRIBED_LIMIT = 4096


def describe(buf: Any) -> str:
    """Return a short description of an array such as ``float64[4]`` or ``torch.float32[2, 3]``."""
    if type(buf) is np.ndarray:  # every collective call describes its payload: remember them
        key = (buf.dtype, buf.shape)
        text = _DESCRIBED.get(key)
        if text is None:
            text = f"{buf.dtype}[{', '.join(map(str, buf.shape))}]"
            if len(_DESCRIBED) < _DESCRIBED_LIMIT:
                _DESCRIBED[key] = text
        return text
    if not isinstance(buf, np.ndarray) and arrays.is_array(buf):
        return arrays.describe(buf)
    shape = getattr(buf, "shape", None)
    dtype = getattr(buf, "dtype", None)
    if shape is None or dtype is None:
        return type(buf).__name__
    return f"{dtype}[{', '.join(map(str, shape))}]"


def check_buffer(buf: Any, rank: int, op: str) -> None:
    """Raise a clear error unless ``buf`` is an array a receive can fill (numpy, CuPy, torch, ...)."""
    if not isinstance(buf, np.ndarray):
        if arrays.is_array(buf):
            return  # their arrays are writeable; the copy runs in the buffer's own library
        raise TypeError(f"rank {rank}: {op}: buf must be an array, not {type(buf).__name__}; "
                        "pass an array to fill (numpy, CuPy, torch or array_api_strict), or "
                        "buf=None to get the payload")
    if not buf.flags.writeable:
        raise ValueError(f"rank {rank}: {op}: buf is read-only; pass a writeable array")
