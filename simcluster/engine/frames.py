"""Find the user's source line for a blocked call or a posted request.

Walks a suspended coroutine's await chain (``cr_await``/``gi_yieldfrom``) or
the live call stack, and returns the innermost frame that is not simcluster's
own code, as ``file.py:42``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from types import FrameType, TracebackType
from typing import Any

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # simcluster/, above engine/
_PACKAGE_DIRS = tuple(
    os.path.abspath(d) + os.sep
    for d in (_PACKAGE, os.path.join(_PACKAGE, "..", "transports"), os.path.dirname(asyncio.__file__))
)


_OURS: dict[str, bool] = {}
"""``is_ours`` by file name: a code object's file name never changes, and a collective's first
member under mpi4py's API looks its caller up (``coll_check``)."""


def skip(directory: str) -> None:
    """Treat frames under ``directory`` as library code too (simcluster.torch: torch's own)."""
    global _PACKAGE_DIRS
    path = os.path.abspath(directory) + os.sep
    if path not in _PACKAGE_DIRS:
        _PACKAGE_DIRS = (*_PACKAGE_DIRS, path)
        _OURS.clear()


def is_ours(filename: str) -> bool:
    ours = _OURS.get(filename)
    if ours is None:
        ours = _OURS[filename] = os.path.abspath(filename).startswith(_PACKAGE_DIRS)
    return ours


def _where(frame: FrameType) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def coroutine_line(coro: Any) -> str:
    """Return ``file:line`` of the innermost user frame where ``coro`` is suspended.

    A synchronous rank (``engine.sync.SyncRank``) offers its innermost frame instead
    of an await chain; its user frame is found walking outwards.
    """
    inner = getattr(coro, "suspended_frame", None)
    if inner is not None:
        while inner is not None and is_ours(inner.f_code.co_filename):
            inner = inner.f_back
        return "?" if inner is None else _where(inner)
    best = "?"
    obj = coro
    while obj is not None:
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
        if frame is not None and not is_ours(frame.f_code.co_filename):
            best = _where(frame)
        obj = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
    return best


def user_line() -> str:
    """Return ``file:line`` of the innermost user frame on the current call stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and is_ours(frame.f_code.co_filename):
        frame = frame.f_back
    return "?" if frame is None else _where(frame)


def user_traceback(exc: BaseException) -> TracebackType | None:
    """``exc``'s traceback as its user should see it, for printing.

    It starts at the user's first frame (not in simcluster's engine or
    launchers, which called the user's code). For errors simcluster wrote for
    users (``SimclusterError``: a collective mismatch, an MPI error) it also
    ends at the user's last frame, the call they made, as a compiled MPI's
    errors do; any other exception keeps its frames inside simcluster, which
    a bug report needs. A traceback with no user frame is kept whole.
    """
    from ..errors import SimclusterError

    full = exc.__traceback__
    entries: list[TracebackType] = []
    tb = full
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    users = [i for i, entry in enumerate(entries) if not is_ours(entry.tb_frame.f_code.co_filename)]
    if not users:
        return full
    end = users[-1] + 1 if isinstance(exc, SimclusterError) else len(entries)
    if end == len(entries):
        return entries[users[0]]
    kept: TracebackType | None = None
    for entry in reversed(entries[users[0]:end]):
        kept = TracebackType(kept, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return kept
