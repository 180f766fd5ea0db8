"""All-reduce: every rank gets ``x0 op x1 op ... op x(p-1)``.

Algorithms (``p`` ranks, ``n`` bytes, AlphaBeta costs with ``gamma = 0``;
``pof2`` is the largest power of two ``<= p``, and on other sizes MPICH's fold
adds one step before and one after, each ``alpha + n*beta``):

- ``recursive_doubling``: ``log2 pof2`` exchanges of the whole value with the
  rank ``2**i`` away: ``k * (alpha + n*beta)`` on ``p = 2**k`` exactly.
- ``rabenseifner``: recursive-halving reduce-scatter, then recursive-doubling
  all_gather: ``2*log2(p)*alpha + 2*(p-1)/p * n*beta`` on ``p = 2**k``.
- ``ring``: ring reduce-scatter, then ring all_gather, each step one
  simultaneous exchange with both neighbours: ``2*(p-1)*(alpha + n/p*beta)``
  exactly when ``p`` divides the array into equal pieces; no fold needed.
- ``reduce_broadcast``: binomial reduce to rank 0, then binomial broadcast:
  ``2*log2(p)*(alpha + n*beta)`` on ``p = 2**k``.
- ``linear``: every rank sends to rank 0, which reduces in rank order and
  sends the result to each rank: ``2*(alpha + (p-1)*n*beta)``.
- ``gloo_ring``: gloo's ring, its blocks and its order of additions
  (``_gloo``), so float sums equal gloo's bit for bit:
  ``2*(p-1)*(alpha + n/p*beta)`` for equal blocks.

Every algorithm keeps rank order, so non-commutative ops are correct with any
of them; ``ring`` and ``rabenseifner`` split arrays into ``p`` (``pof2``)
pieces by ``numpy.array_split`` bounds and treat other payloads, and arrays
under non-elementwise user ops, as one piece.

Default rule (MPICH's ``MPIR_Allreduce_intra_auto``, plus the ring for large
arrays on sizes that are not powers of two, where the fold's two full-size
steps cost more than the ring's extra latency): ``recursive_doubling`` for
payloads that are not arrays, for non-commutative ops, for arrays up to 2048
bytes and for arrays too small to give each of ``pof2`` ranks 8 bytes;
otherwise ``ring`` when ``p`` is not a power of two and the array holds at
least 1 MiB, else ``rabenseifner``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from . import _cost, _gloo, analytic
from . import broadcast as _broadcast
from . import reduce as _reduce
from ._chunks import split_bounds
from ._reduction import (
    gloo_all_gather,
    gloo_reduce_scatter,
    Fold,
    apply,
    charge,
    doubling_gather,
    elementwise,
    finish,
    flatten,
    fold_in,
    fold_out,
    halving,
    length,
    nbytes_of,
    ordered,
    ring_reduce_scatter,
    unflatten,
)
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext
    from ..ops import ReduceOp
    from ._nodes import Layout


SHORT_MSG: Final = 2048
"""Bytes up to which all_reduce uses recursive doubling (MPICH's ``ALLREDUCE_SHORT_MSG_SIZE``)."""

RING_MSG: Final = 1 << 20
"""Bytes from which sizes that are not powers of two use the ring."""


async def recursive_doubling(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Exchange the whole partial result with the rank ``2**i`` away, for each bit ``i``.

    Costs ``k * (alpha + n*beta)`` on ``p = 2**k`` ranks, two more such steps
    otherwise (MPICH's fold). Works on any payload: an array under an
    elementwise op travels as a flat copy, anything else as itself.
    """
    fold = Fold.of(c.size)
    whole = not elementwise(obj, op)
    value = obj if whole else flatten(obj, op)
    if fold.rem:
        value = await fold_in(c, fold, value, op, whole=whole)
    vrank = fold.vrank(c.rank)
    if vrank is not None:
        mask = 1
        while mask < fold.pof2:
            peer = vrank ^ mask
            partner = fold.rank(peer)
            got = await c.sendrecv(value, partner, partner)
            if whole:
                value = apply(op, got, value) if peer < vrank else apply(op, value, got)
            else:
                value = ordered(op, value, got, peer < vrank)
            if not c.free_reductions:  # (awaiting the complete charge costs an iterator a round)
                await charge(c, value)
            mask <<= 1
    if fold.rem:
        value = await fold_out(c, fold, value)
    return finish(op, value if whole else unflatten(value, obj), c.size, obj)


async def rabenseifner(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Recursive-halving reduce-scatter, then recursive-doubling all_gather (Rabenseifner).

    Costs ``2*log2(p)*alpha + 2*(p-1)/p * n*beta`` on ``p = 2**k`` ranks, plus
    ``2*(alpha + n*beta)`` for the fold on other sizes.
    """
    fold = Fold.of(c.size)
    flat = await fold_in(c, fold, flatten(obj, op), op)
    vrank = fold.vrank(c.rank)
    if vrank is not None:
        bounds = split_bounds(length(flat), fold.pof2)
        windows = await halving(c, fold, vrank, flat, bounds, op)
        await doubling_gather(c, fold, vrank, flat, bounds, windows)
    return finish(op, unflatten(await fold_out(c, fold, flat), obj), c.size, obj)


async def ring(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Ring reduce-scatter of ``p`` pieces, then a ring all_gather of the reduced pieces.

    Every step is a simultaneous send right / receive left of one piece:
    ``2*(p-1)*(alpha + n/p*beta)`` in all, bandwidth-optimal on any size.
    """
    p, r = c.size, c.rank
    flat = flatten(obj, op)
    bounds = split_bounds(length(flat), p)
    flat[bounds[r]:bounds[r + 1]] = await ring_reduce_scatter(c, flat, bounds, op)
    right, left = (r + 1) % p, (r - 1) % p
    k = r  # send chunk k, receive chunk k - 1 (mod p) into place
    for _ in range(p - 1):
        got = await c.sendrecv(flat[bounds[k]:bounds[k + 1]], right, left)
        k = k - 1 if k else p - 1
        flat[bounds[k]:bounds[k + 1]] = got
    return finish(op, unflatten(flat, obj), p, obj)


async def gloo_ring(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """gloo's ring (``gloo::allreduce``, as torch's gloo backend runs it on CPU tensors).

    A reduce-scatter of gloo's blocks round the ring to the left, each rank
    adding its operand in front, then the same ring passes the finished
    blocks on (``_gloo``): ``2*(p-1)*(alpha + n/p*beta)`` for equal blocks.
    Arrays under commutative elementwise ops; anything else runs ``ring``.
    """
    if not _gloo.applies(obj, op):
        return await ring(c, obj, op)
    flat = flatten(obj, op)
    bounds = _gloo.blocks(flat, length(flat), c.size, _gloo.all_reduce_bounds)
    await gloo_reduce_scatter(c, flat, bounds, op)
    await gloo_all_gather(c, flat, bounds)
    return finish(op, unflatten(flat, obj), c.size, obj)


async def reduce_broadcast(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Binomial reduce to rank 0, then binomial broadcast from it.

    Costs ``2*log2(p)*(alpha + n*beta)`` on ``p = 2**k`` ranks.
    """
    value = await _reduce.binomial(c, obj, op, 0)
    return await _broadcast.binomial(c, value if c.rank == 0 else obj, 0)


async def linear(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Every rank sends to rank 0, which reduces in rank order and sends the result to each.

    Costs ``2*(alpha + (p-1)*n*beta)``: rank 0's port takes ``p - 1`` messages in, then sends as many out.
    """
    value = await _reduce.linear(c, obj, op, 0)
    return await _broadcast.linear(c, value if c.rank == 0 else obj, 0)


async def smp(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Within each node, a binomial reduce to its first rank; among those, the all_reduce the
    default picks for their number; within each node, a binomial broadcast (MPICH's SMP-aware
    all_reduce).

    On a platform with nodes (``_nodes.layout``) only one rank per node
    crosses the network. Costs the intra-node reduce and broadcast
    (``2*log2(q)`` intra-node steps, ``q`` ranks per node) plus the leaders'
    all_reduce over the network. Where the members share no node it is
    ``recursive_doubling``. Kept for commutative ops: non-commutative ones
    run ``recursive_doubling`` (its rank order could not be kept).
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm) if op.commutative else None
    if found is None:
        return await recursive_doubling(c, obj, op)
    return await _through_leaders(c, found, obj, op, False)


async def _through_leaders(c: CollContext, found: Layout, obj: Any, op: ReduceOp, trees: bool) -> Any:
    """Within each node a binomial reduce to its first rank; among those, the default all_reduce
    (``smp``) or NCCL's double binary tree (``trees``: ``nccl_tree``); within each node a
    binomial broadcast."""
    from . import _nodes
    from ..ops import ReduceOp as _ReduceOp  # (at run time: ops builds on the collectives' helpers)

    inner = _ReduceOp.SUM if op is _ReduceOp.AVG else op  # AVG divides once, by the whole size
    local, leaders = _nodes.contexts(c, found)
    value = await _reduce.binomial(local, obj, inner, 0)
    if leaders is not None and trees:
        from . import _nccl

        flat = flatten(value, inner)
        await _nccl.double_tree(c, leaders, found, flat, inner)
        value = unflatten(flat, value)
    elif leaders is not None:
        across = default(leaders.size, nbytes_of(value), arrays=elementwise(value, inner))
        value = await ALGORITHMS[across].run(leaders, value, inner)
    value = await _broadcast.binomial(local, value if leaders is not None else obj, 0)
    return finish(op, value, c.size, obj)


async def nccl_ring(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """NCCL's ring across nodes: as many rings side by side as the nodes have NICs, each visiting
    the nodes in order and carrying its part of the array (``_nccl.rings``).

    Each ring crosses each node boundary once, and the rings leave every
    node through different NICs. Every ring takes ``2(p-1)`` steps of
    ``n/(p*C)`` bytes, ``C`` rings. For commutative ops on arrays on a
    platform whose members share nodes; elsewhere it is ``ring``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm) if op.commutative and elementwise(obj, op) else None
    if found is None:
        return await ring(c, obj, op)
    from . import _nccl
    from ..ops import ReduceOp as _ReduceOp  # (at run time: ops builds on the collectives' helpers)

    flat = flatten(obj, op)
    await _nccl.rings(c, found, flat, _ReduceOp.SUM if op is _ReduceOp.AVG else op, ring)  # AVG: divided once
    return finish(op, unflatten(flat, obj), c.size, obj)


async def nccl_tree(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """NCCL's tree: within each node a binomial reduce to its first rank; among those, two binary
    trees each reducing and broadcasting half the array (``_nccl.double_tree``); within each
    node a binomial broadcast.

    ``2*log2(q)`` steps within nodes of ``q`` ranks and ``2*floor(log2 m)``
    across ``m`` nodes, each of the whole array (NCCL pipelines its tree in
    chunks; this does not). For commutative ops on arrays on a platform
    whose members share nodes; elsewhere it is ``reduce_broadcast``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm) if op.commutative and elementwise(obj, op) else None
    if found is None:
        return await reduce_broadcast(c, obj, op)
    return await _through_leaders(c, found, obj, op, True)


ALGORITHMS: Final = declare(
    Algorithm("all_reduce", "ring", ring, _cost.all_reduce_ring, analytic.all_reduce(analytic.RING),
              wraps=True),
    Algorithm("all_reduce", "recursive_doubling", recursive_doubling, _cost.all_reduce_recursive_doubling,
              analytic.all_reduce(analytic.BALANCED)),
    Algorithm("all_reduce", "rabenseifner", rabenseifner, _cost.all_reduce_rabenseifner,
              analytic.all_reduce(analytic.BALANCED), wraps=True),
    Algorithm("all_reduce", "reduce_broadcast", reduce_broadcast, _cost.all_reduce_reduce_broadcast,
              analytic.all_reduce(analytic.BINOMIAL, from_rank_0=True)),
    Algorithm("all_reduce", "linear", linear, _cost.all_reduce_linear,
              analytic.all_reduce(analytic.LEFT, from_rank_0=True)),
    Algorithm("all_reduce", "gloo_ring", gloo_ring, _cost.all_reduce_gloo_ring,
              analytic.all_reduce(analytic.GLOO_RING), wraps=True),
    Algorithm("all_reduce", "smp", smp, _cost.all_reduce_recursive_doubling,
              analytic.all_reduce(analytic.BALANCED), shaped=True),
    Algorithm("all_reduce", "nccl_ring", nccl_ring, _cost.all_reduce_ring, analytic.all_reduce(analytic.RING),
              wraps=True, shaped=True),
    Algorithm("all_reduce", "nccl_tree", nccl_tree, _cost.all_reduce_reduce_broadcast,
              analytic.all_reduce(analytic.BINOMIAL, from_rank_0=True), shaped=True),
)
"""All-reduce algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return the all_reduce algorithm MPICH would pick (see the module docstring)."""
    pof2 = 1 << (size.bit_length() - 1)
    if not arrays or not commutative or nbytes <= SHORT_MSG or nbytes < 8 * pof2:
        return "recursive_doubling"
    if size != pof2 and nbytes >= RING_MSG:
        return "ring"
    return "rabenseifner"
