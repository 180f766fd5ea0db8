"""All_to_all: rank ``i`` sends its ``objs[j]`` to rank ``j`` and gets a list of what each rank sent it.

Algorithms (``p`` ranks, ``n`` bytes per item, AlphaBeta costs):

- ``pairwise``: ``p - 1`` steps; in step ``s`` every rank sends to
  ``rank + s`` and receives from ``rank - s``; ``(p-1) * (alpha + n*beta)``,
  with at most one send and one receive outstanding per rank.
- ``linear``: every rank posts all its receives and sends at once (MPICH's
  "scattered" algorithm, destinations staggered so no rank is hit by all at
  once); ``alpha + (p-1) * n*beta`` since each port just streams its
  ``p - 1`` items, but ``2 * (p-1)`` requests outstanding per rank.

Default rule: ``linear`` up to 32 ranks, ``pairwise`` above. MPICH chooses by
item size (scattered for short, pairwise for long items); here items may
differ per rank (an alltoallv), so a size threshold could split ranks between
algorithms, and the rule looks only at ``p``. 32 is MPICH's throttle on
outstanding requests (``MPIR_CVAR_ALLTOALL_THROTTLE``); above it, pairwise keeps
the simulator's memory at ``O(p)`` pending messages instead of ``O(p**2)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..request import wait_all
from ._chunks import fresh

if TYPE_CHECKING:
    from ..comm import CollContext

AllToAllAlgo = Callable[["CollContext", "list[Any]"], Awaitable["list[Any]"]]

THROTTLE: Final = 32
"""Ranks up to which ``linear`` is the default (MPICH's alltoall throttle)."""


async def pairwise(c: CollContext, objs: list[Any]) -> list[Any]:
    """Pairwise exchange: in step ``s`` send ``objs[rank + s]`` and receive from ``rank - s``.

    Costs ``(p-1) * (alpha + n*beta)``; ``p * (p-1)`` messages.
    """
    size, rank = c.size, c.rank
    out: list[Any] = [None] * size
    for step in range(1, size):
        dst, src = (rank + step) % size, (rank - step) % size
        out[src] = await c.sendrecv(objs[dst], dst, src)
    out[rank] = fresh(objs[rank])
    return out


async def linear(c: CollContext, objs: list[Any]) -> list[Any]:
    """Post every receive, then every send (to ``rank + 1``, ``rank + 2``, ...), and wait for all.

    Costs ``alpha + (p-1) * n*beta``; ``p * (p-1)`` messages.
    """
    size, rank = c.size, c.rank
    srcs = [(rank - step) % size for step in range(1, size)]
    dsts = [(rank + step) % size for step in range(1, size)]
    recvs = [c.irecv(src) for src in srcs]
    got = await wait_all([*recvs, *(c.isend(objs[dst], dst) for dst in dsts)])
    out: list[Any] = [None] * size
    for src, item in zip(srcs, got):
        out[src] = item
    out[rank] = fresh(objs[rank])
    return out


ALGORITHMS: Final[Mapping[str, AllToAllAlgo]] = {
    "pairwise": pairwise,
    "linear": linear,
}
"""All_to_all algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return ``linear`` up to ``THROTTLE`` ranks, ``pairwise`` above (see the module docstring)."""
    return "linear" if size <= THROTTLE else "pairwise"
