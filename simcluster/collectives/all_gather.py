"""All_gather: every rank gets the list of every rank's item (items may differ in shape and type).

Algorithms (``p`` ranks, ``n`` bytes per item, AlphaBeta costs):

- ``ring``: ``p - 1`` steps; in each, every rank passes the item it got last
  to its right neighbour; ``(p-1) * (alpha + n*beta)`` exactly.
- ``recursive_doubling``: ``log2 p`` steps exchanging doubling blocks with
  partner ``rank ^ 2**k``; ``log2(p) * alpha + (p-1) * n*beta`` on ``2**k`` ranks.
  On other sizes the ``r = p - 2**floor(log2 p)`` extra ranks first hand their
  item to a partner among the first ``r`` ranks and get the whole list back
  at the end: two more steps, still correct for every size.
- ``bruck``: ``ceil(log2 p)`` steps; in step ``k`` every rank sends the items
  it holds to ``rank - 2**k``; ``ceil(log2 p) * alpha + (p-1) * n*beta`` on
  any size, then a local rotation.
- ``nccl_ring``: NCCL's rings across nodes, one per NIC of a node, each
  carrying ``1/C`` of every item (``_nccl``); ``ring`` where the members
  share no node. The torch backend runs it on a platform with ``gpus``.

Default rule: ``recursive_doubling`` when ``p`` is a power of two, ``bruck``
otherwise; that is MPICH's rule for short messages, and under AlphaBeta both
cost the same bandwidth as ``ring`` with ``log p`` instead of ``p - 1``
latencies. MPICH switches to ``ring`` above a total size, but that needs every
rank to know the same size, and here items may differ per rank: a size
threshold could send ranks into different algorithms. So the rule looks only
at ``p``; ask for ``algorithm="ring"`` where link topology (``Hierarchical``)
makes neighbour traffic cheaper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from . import _cost, analytic
from ._chunks import fresh, is_pow2
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext


async def ring(c: CollContext, obj: Any) -> list[Any]:
    """Ring all_gather: in step ``s`` pass item ``rank - s`` right, take item ``rank - s - 1`` from the left.

    Costs ``(p-1) * (alpha + n*beta)``; ``p * (p-1)`` messages of one item each.
    """
    size, rank = c.size, c.rank
    right, left = (rank + 1) % size, (rank - 1) % size
    items: list[Any] = [None] * size
    items[rank] = obj
    for step in range(size - 1):
        items[(rank - step - 1) % size] = await c.sendrecv(items[(rank - step) % size], right, left)
    items[rank] = fresh(obj)
    return items


def _block(base: int, count: int, pof2: int, size: int) -> list[int]:
    """Return the ranks whose items virtual ranks ``[base, base + count)`` hold, in a fixed order."""
    ranks = list(range(base, base + count))
    return ranks + [v + pof2 for v in ranks if v + pof2 < size]


async def recursive_doubling(c: CollContext, obj: Any) -> list[Any]:
    """Recursive-doubling all_gather, with extra ranks folded in on sizes that are not powers of two.

    Costs ``log2(p) * alpha + (p-1) * n*beta`` on ``p = 2**k`` ranks; otherwise two
    more steps (the extra ranks' items in, the whole list out).
    """
    size, rank = c.size, c.rank
    pof2 = 1 << (size.bit_length() - 1)
    items: list[Any] = [None] * size
    items[rank] = obj
    if rank >= pof2:  # an extra rank: rank - pof2 gathers for it
        await c.send(obj, rank - pof2)
        items = await c.recv(rank - pof2)
        items[rank] = fresh(obj)
        return items
    if rank + pof2 < size:
        items[rank + pof2] = await c.recv(rank + pof2)
    mask = 1
    while mask < pof2:
        partner = rank ^ mask
        mine = _block(rank & -mask, mask, pof2, size)
        got = await c.sendrecv([items[i] for i in mine], partner, partner)
        for i, item in zip(_block(partner & -mask, mask, pof2, size), got):
            items[i] = item
        mask <<= 1
    if rank + pof2 < size:
        await c.send([None if i == rank + pof2 else item for i, item in enumerate(items)], rank + pof2)
    items[rank] = fresh(obj)
    return items


async def bruck(c: CollContext, obj: Any) -> list[Any]:
    """Bruck all_gather: in step ``k`` send the first ``min(2**k, p - 2**k)`` held items to ``rank - 2**k``.

    Rank ``r`` holds the items of ``r, r+1, ...`` (mod ``p``) in that order, so a
    rotation at the end puts them in rank order. Costs ``ceil(log2 p) * alpha +
    (p-1) * n*beta`` on any size; ``p * ceil(log2 p)`` messages.
    """
    size, rank = c.size, c.rank
    held = [obj]  # held[j] is the item of rank (rank + j) % size
    dist = 1
    while dist < size:
        count = min(dist, size - dist)
        held.extend(await c.sendrecv(held[:count], (rank - dist) % size, (rank + dist) % size))
        dist <<= 1
    held[0] = fresh(obj)
    return [held[(i - rank) % size] for i in range(size)]


async def nccl_ring(c: CollContext, obj: Any) -> list[Any]:
    """NCCL's rings across nodes: as many rings side by side as the nodes have NICs, each visiting
    the nodes in order and carrying its part of every item, cut along the item's first axis
    (``_nccl.gather_rings``).

    Every ring takes ``p - 1`` steps of ``n/C`` bytes, ``C`` rings, each
    leaving every node through its own NIC. For arrays with at least one
    axis on a platform whose members share nodes; elsewhere it is ``ring``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm)
    if found is not None:
        from . import _nccl

        if _nccl.splittable(obj):
            return await _nccl.gather_rings(c, found, obj, ring)
    return await ring(c, obj)


ALGORITHMS: Final = declare(
    Algorithm("all_gather", "ring", ring, _cost.all_gather_ring, analytic.all_gather),
    Algorithm("all_gather", "recursive_doubling", recursive_doubling, _cost.all_gather_recursive_doubling,
              analytic.all_gather),
    Algorithm("all_gather", "bruck", bruck, _cost.all_gather_bruck, analytic.all_gather),
    Algorithm("all_gather", "nccl_ring", nccl_ring, _cost.all_gather_ring, analytic.all_gather, shaped=True),
)
"""All_gather algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return ``recursive_doubling`` on a power of two ranks, else ``bruck`` (see the module docstring)."""
    return "recursive_doubling" if is_pow2(size) else "bruck"
