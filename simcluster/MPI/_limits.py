"""mpi4py's per-process limits on live user callbacks (32 user ops, 32 error handlers per kind).

mpi4py keeps user-defined ops and error handlers in fixed tables of 32 entries
and raises ``RuntimeError`` when one more is created while all are live. A
simcluster rank is a process, so each rank has its own tables: ``UserSlots``
counts live entries per calling rank (code outside any rank, such as a
module imported before the run, counts on a table of its own).

Rule 1: ``take`` returns the holder to hand back to ``give_back``; a slot is
never given back twice.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..engine.assembly import current_task


class _Holder:
    __slots__ = ("live", "__weakref__")

    def __init__(self) -> None:
        self.live = 0


class UserSlots:
    """Live entries of one kind of user callback, per rank, at most ``limit``."""

    __slots__ = ("what", "limit", "fix", "_by_rank", "_outside")

    def __init__(self, what: str, limit: int, fix: str) -> None:
        self.what, self.limit, self.fix = what, limit, fix
        self._by_rank: weakref.WeakKeyDictionary[Any, _Holder] = weakref.WeakKeyDictionary()
        self._outside = _Holder()

    def _holder(self) -> tuple[_Holder, int | None]:
        task = current_task()
        world = None if task is None else task.comm
        if world is None:
            return self._outside, None
        found = self._by_rank.get(world)
        if found is None:
            found = self._by_rank[world] = _Holder()
        return found, world.rank

    def take(self, call: str) -> _Holder:
        """Count one more live entry for the calling rank; RuntimeError past the limit."""
        holder, rank = self._holder()
        if holder.live >= self.limit:
            prefix = "" if rank is None else f"rank {rank}: "
            raise RuntimeError(f"{prefix}{call}: cannot create more than {self.limit} {self.what} "
                               f"at once (mpi4py's limit); {self.fix}")
        holder.live += 1
        return holder

    @staticmethod
    def give_back(holder: _Holder) -> None:
        """Release one entry taken from ``holder``."""
        holder.live -= 1
