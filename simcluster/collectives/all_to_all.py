"""All_to_all: rank ``i`` sends its ``objs[j]`` to rank ``j`` and gets a list of what each rank sent it.

Algorithms (``p`` ranks, ``n`` bytes per item, AlphaBeta costs):

- ``pairwise``: ``p - 1`` steps; in step ``s`` every rank sends to
  ``rank + s`` and receives from ``rank - s``; ``(p-1) * (alpha + n*beta)``,
  with at most one send and one receive outstanding per rank.
- ``linear``: every rank posts all its receives and sends at once (MPICH's
  "scattered" algorithm, destinations staggered so no rank is hit by all at
  once); ``2 * (p-1)`` requests outstanding per rank. Each port streams its
  ``p - 1`` items, but AlphaBeta books a receiving port in the order the
  messages were posted, so the last item lands between
  ``alpha + (p-1) * n*beta`` and ``alpha + (2p-3) * n*beta``: best for tiny
  items, up to twice ``pairwise``'s bandwidth time for large ones.

Default rule: ``pairwise`` at every size. MPICH takes ``linear`` (scattered)
for short items and ``pairwise`` for long ones, by item size; here items may
differ per rank (an alltoallv), so a size threshold could send ranks into
different algorithms, and the rule must not look at ``nbytes``. ``pairwise``
wins where the time goes (large items), costs exactly its textbook formula,
and keeps the simulator at ``O(p)`` pending messages instead of ``O(p**2)``;
pass ``algorithm="linear"`` for many tiny items, where it is up to ``p - 1``
times faster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..request import wait_all
from . import _cost, analytic
from ._chunks import fresh
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext


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

    Costs ``alpha + (p-1) * n*beta`` to ``alpha + (2p-3) * n*beta`` (see the
    module docstring); ``p * (p-1)`` messages.
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


ALGORITHMS: Final = declare(
    Algorithm("all_to_all", "pairwise", pairwise, _cost.all_to_all_pairwise, analytic.all_to_all),
    Algorithm("all_to_all", "linear", linear, _cost.all_to_all_linear, analytic.all_to_all),
)
"""All_to_all algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return ``pairwise``, whatever the sizes (see the module docstring)."""
    return "pairwise"
