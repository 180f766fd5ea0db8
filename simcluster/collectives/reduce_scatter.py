"""Reduce-scatter: rank ``r`` gets item ``r`` of the item-by-item reduction of every rank's list.

Each rank passes a list of ``p`` items (arrays or any objects); item ``j`` of
the result is ``objs0[j] op objs1[j] op ... op objs(p-1)[j]`` and goes to rank
``j``. Algorithms (``p`` ranks, ``n`` bytes in each list, so ``n/p`` per item,
AlphaBeta costs with ``gamma = 0``):

- ``recursive_halving``: MPICH's fold of the extra ranks, then recursive
  halving over the lists: ``log2(p)*alpha + (p-1)/p * n*beta`` on
  ``p = 2**k``; other sizes add one step of ``alpha + n*beta`` before and a
  step of ``alpha + n/p*beta`` after.
- ``pairwise``: at step ``i`` rank ``r`` sends item ``r+i`` to rank ``r+i``
  and receives its own item from rank ``r-i``: ``(p-1)*(alpha + n/p*beta)``;
  the items are reduced in rank order once all have come.
- ``ring``: partials of each item travel around the ring, one simultaneous
  exchange with both neighbours per step: ``(p-1)*(alpha + n/p*beta)``.
- ``linear``: every rank sends its whole list to rank 0, which reduces in
  rank order and sends item ``j`` to rank ``j``:
  ``alpha + (p-1)*n*beta + alpha + (p-1)/p * n*beta``.
- ``nccl_ring``: NCCL's rings across nodes, one per NIC of a node, each
  carrying ``1/C`` of every item (``_nccl``); for commutative elementwise
  ops on arrays on a platform whose members share nodes, else ``ring``.
  The torch backend runs it on a platform with ``gpus``.

- ``gloo_items``: torch's list ``reduce_scatter`` on gloo: every item
  all_reduced by gloo's ring (``all_reduce``'s ``gloo_ring``), one after
  another, each rank keeping its own: ``p * 2*(p-1)*(alpha + n/p**2*beta)``.
- ``gloo_whole``: torch's ``reduce_scatter_tensor`` on gloo: the list
  concatenated and all_reduced by gloo's ring, each rank keeping its item:
  ``2*(p-1)*(alpha + n/p*beta)``.

Both add floats in gloo's order, bit for bit; for lists of arrays under
commutative elementwise ops (anything else runs ``ring``). The other
algorithms reduce items whole (an array item is never split), so every algorithm
works on any payload, and every algorithm keeps rank order, so non-commutative
ops are correct with any of them.

Default rule (MPICH's ``MPIR_Reduce_scatter_intra_auto`` for commutative
ops, which here serves every op since all algorithms keep order):
``recursive_halving`` when the list holds less than 512 KiB, else ``pairwise``.
"""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final

from .. import arrays
from . import _cost, _gloo, analytic
from ._reduction import (
    gloo_all_gather,
    gloo_reduce_scatter,
    Fold,
    elementwise,
    finish,
    flatten,
    fold_in,
    fold_values,
    halving,
    linear_fold,
    length,
    ring_reduce_scatter,
    segment,
    send_all,
    unflatten,
)
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext
    from ..ops import ReduceOp


LONG_MSG: Final = 512 * 1024
"""Bytes from which reduce_scatter goes pairwise (MPICH's ``REDSCAT_COMMUTATIVE_LONG_MSG_SIZE``)."""


def _bit_reverse(value: int, bits: int) -> int:
    return int(f"{value:0{bits}b}"[::-1], 2) if bits else 0


async def recursive_halving(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """Fold to a power of two, then halve the list of items between partners ``1, 2, 4, ...`` apart.

    Costs ``log2(p)*alpha + (p-1)/p * n*beta`` on ``p = 2**k`` ranks. The items
    are laid out so that the piece each virtual rank ends with holds the items
    of the real ranks it stands for.
    """
    fold, r = Fold.of(c.size), c.rank
    units = await fold_in(c, fold, list(objs), op)
    vrank = fold.vrank(r)
    mine: list[Any] = []
    if vrank is not None:
        bits = fold.pof2.bit_length() - 1
        owners = [_bit_reverse(pos, bits) for pos in range(fold.pof2)]  # halving ends vrank at bitrev(vrank)
        flat = [units[i] for owner in owners for i in fold.members(owner)]
        bounds = list(accumulate((len(fold.members(owner)) for owner in owners), initial=0))
        windows = await halving(c, fold, vrank, flat, bounds, op)
        mine = list(segment(flat, bounds, *windows[-1]))
    if r < 2 * fold.rem and r % 2:
        await c.send(mine[0], r - 1)
    value = (await c.recv(r + 1)) if r < 2 * fold.rem and r % 2 == 0 else mine[-1]
    return finish(op, value, c.size, objs[r])


async def pairwise(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """Exchange with ranks ``i`` away in both directions, then reduce the ``p`` items in rank order.

    Costs ``(p-1)*(alpha + n/p*beta)``: each step is a permutation, so no port is shared.
    """
    p, r = c.size, c.rank
    parts: list[Any] = list(objs)  # parts[src] ends as src's item for me; only parts[r] is mine
    for step in range(1, p):
        dst, src = (r + step) % p, (r - step) % p
        parts[src] = await c.sendrecv(objs[dst], dst, src)
    return finish(op, await fold_values(c, op, parts), p, objs[r])


async def ring(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """Pass partials of each item around the ring (the first half of the ring all_reduce).

    Costs ``(p-1)*(alpha + n/p*beta)``.
    """
    mine = await ring_reduce_scatter(c, list(objs), range(c.size + 1), op)
    return finish(op, mine[0], c.size, objs[c.rank])


async def _gloo_all_reduce(c: CollContext, flat: Any, op: ReduceOp) -> None:
    """gloo's ring all_reduce of our own flat copy, in place (``_gloo``)."""
    bounds = _gloo.blocks(flat, length(flat), c.size, _gloo.all_reduce_bounds)
    await gloo_reduce_scatter(c, flat, bounds, op)
    await gloo_all_gather(c, flat, bounds)


async def gloo_items(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """All_reduce every item by gloo's ring, one after another; keep item ``rank`` (torch's gloo).

    Costs ``p`` all_reduces of one item: ``p * 2*(p-1)*(alpha + n/p**2*beta)``.
    """
    if not all(_gloo.applies(item, op) for item in objs):
        return await ring(c, objs, op)
    mine = None
    for j, item in enumerate(objs):
        flat = flatten(item, op)
        await _gloo_all_reduce(c, flat, op)
        if j == c.rank:
            mine = unflatten(flat, item)
    return finish(op, mine, c.size, objs[c.rank])


async def gloo_whole(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """All_reduce the concatenated list by gloo's ring; keep item ``rank`` (torch's gloo
    ``reduce_scatter_tensor``).

    Costs ``2*(p-1)*(alpha + n/p*beta)``.
    """
    if not all(_gloo.applies(item, op) for item in objs):
        return await ring(c, objs, op)
    flat = arrays.concat([flatten(item, op) for item in objs])
    await _gloo_all_reduce(c, flat, op)
    start = sum(arrays.size(item) for item in objs[:c.rank])
    mine = objs[c.rank]
    return finish(op, unflatten(flat[start:start + arrays.size(mine)], mine), c.size, mine)


async def linear(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """Reduce the whole lists at rank 0 in rank order, then send item ``j`` to rank ``j``.

    Costs ``2*alpha + (p-1)*n*beta + (p-1)/p * n*beta``.
    """
    total = await linear_fold(c, list(objs), op, 0, flat=True)
    if c.rank == 0:
        await send_all(c, [(total[dst], dst) for dst in range(1, c.size)])
        value = total[0]
    else:
        value = await c.recv(0)
    return finish(op, value, c.size, objs[c.rank])


async def nccl_ring(c: CollContext, objs: list[Any], op: ReduceOp) -> Any:
    """NCCL's rings across nodes: as many rings side by side as the nodes have NICs, each visiting
    the nodes in order and carrying its part of every item (``_nccl.scatter_rings``).

    Every ring takes ``p - 1`` steps of ``n/(p*C)`` bytes, ``C`` rings, each
    leaving every node through its own NIC. For commutative elementwise ops
    on lists of arrays on a platform whose members share nodes; elsewhere
    it is ``ring``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm) if op.commutative and all(elementwise(item, op) for item in objs) else None
    if found is None:
        return await ring(c, objs, op)
    from . import _nccl
    from ..ops import ReduceOp as _ReduceOp  # (at run time: ops builds on the collectives' helpers)

    inner = _ReduceOp.SUM if op is _ReduceOp.AVG else op  # AVG: divided once, at the end
    mine = objs[c.rank]
    flat = await _nccl.scatter_rings(c, found, [flatten(item, inner) for item in objs], inner, ring)
    return finish(op, unflatten(flat, mine), c.size, mine)


ALGORITHMS: Final = declare(
    Algorithm("reduce_scatter", "recursive_halving", recursive_halving,
              _cost.reduce_scatter_recursive_halving, analytic.reduce_scatter(analytic.BALANCED)),
    Algorithm("reduce_scatter", "pairwise", pairwise, _cost.reduce_scatter_pairwise,
              analytic.reduce_scatter(analytic.LEFT)),
    Algorithm("reduce_scatter", "ring", ring, _cost.reduce_scatter_ring,
              analytic.reduce_scatter(analytic.RING)),
    Algorithm("reduce_scatter", "gloo_items", gloo_items, _cost.reduce_scatter_gloo_items,
              analytic.reduce_scatter(analytic.GLOO_RING)),
    Algorithm("reduce_scatter", "gloo_whole", gloo_whole, _cost.reduce_scatter_gloo_whole,
              analytic.reduce_scatter(analytic.GLOO_WHOLE)),
    Algorithm("reduce_scatter", "linear", linear, _cost.reduce_scatter_linear,
              analytic.reduce_scatter(analytic.LEFT)),
    Algorithm("reduce_scatter", "nccl_ring", nccl_ring, _cost.reduce_scatter_ring,
              analytic.reduce_scatter(analytic.RING), shaped=True),
)
"""Reduce-scatter algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return the reduce_scatter algorithm MPICH would pick (see the module docstring)."""
    return "recursive_halving" if nbytes < LONG_MSG else "pairwise"
