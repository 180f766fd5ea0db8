"""Reduce: the root gets ``x0 op x1 op ... op x(p-1)``; the other ranks get nothing.

Algorithms (``p`` ranks, ``n`` bytes, AlphaBeta costs with ``gamma = 0``):

- ``binomial``: each rank reduces its children's partials (nearest child
  first) and sends the result to its parent: ``ceil(log2 p)`` rounds,
  ``log2(p) * (alpha + n*beta)`` on ``p = 2**k``. The tree is rooted at the
  root for commutative ops; for non-commutative ones it is rooted at rank 0,
  where every partial covers a contiguous run of ranks, and rank 0 then sends
  the result to the root (one more ``alpha + n*beta``), as MPICH does.
- ``rabenseifner``: recursive-halving reduce-scatter, then a binomial gather
  of the reduced pieces to the root: ``2*log2(p)*alpha + 2*(p-1)/p * n*beta``
  on ``p = 2**k``; other sizes add MPICH's fold, ``alpha + n*beta``, and one
  more such step when the root is a rank that the fold sets aside.
- ``linear``: every rank sends to the root, which reduces in rank order:
  ``alpha + (p-1)*n*beta`` (the root's port takes the messages one by one).
- ``smp``: on a platform whose ranks share nodes, a binomial reduce within
  each node to its first rank, the reduce the default picks among those
  leaders to the root's node, then one intra-node step to the root unless
  it leads its node (MPICH's SMP-aware reduce): one message per node
  crosses the network. For commutative ops; ``binomial`` otherwise, and
  where the members share no node.

- ``gloo_ring``: gloo's reduce (``_gloo``): the ring reduce-scatter of
  gloo's blocks, each rank adding its operand in front, then every rank
  sends its block to the root: ``(p-1)*(alpha + n/p*beta) + alpha +
  (p-1)*n/p*beta`` for equal blocks, float sums equal to gloo's bit for bit.
  For arrays under commutative elementwise ops; anything else runs
  ``binomial``.

The first three keep rank order, so non-commutative ops are correct with any of them.

Default rule (MPICH's ``MPIR_Reduce_intra_auto``): ``rabenseifner`` for
arrays over 2048 bytes with a commutative op on sizes where each of ``pof2``
ranks gets at least 8 bytes; ``binomial`` otherwise (small arrays, other
payloads, non-commutative ops). On a platform with nodes, at message
fidelity, ``smp`` for commutative ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from . import _cost, _gloo, analytic
from ._chunks import absolute, binomial_children, binomial_parent, relative, split_bounds
from ._reduction import (
    gloo_reduce_scatter,
    Fold,
    combine,
    doubling_gather,
    elementwise,
    finish,
    flatten,
    fold_in,
    halving,
    length,
    linear_fold,
    nbytes_of,
    unflatten,
)
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext
    from ..ops import ReduceOp


SHORT_MSG: Final = 2048
"""Bytes up to which reduce stays binomial (MPICH's ``REDUCE_SHORT_MSG_SIZE``)."""


async def binomial(c: CollContext, obj: Any, op: ReduceOp, root: int) -> Any:
    """Reduce up a binomial tree: receive each child's partial, nearest first, then send to the parent.

    Costs ``log2(p) * (alpha + n*beta)`` on ``p = 2**k`` (one more step for a
    non-commutative op when ``root != 0``). Works on any payload.
    """
    tree = root if op.commutative else 0  # rooted at 0, partials cover runs of ranks in order
    rel = relative(c.rank, tree, c.size)
    value = obj
    for kid in reversed(binomial_children(rel, c.size)):
        value = await combine(c, op, value, await c.recv(absolute(kid, tree, c.size)))
    if rel:
        await c.send(value, absolute(binomial_parent(rel), tree, c.size))
    if tree != root and c.rank == tree:
        await c.send(value, root)
    elif tree != root and c.rank == root:
        value = await c.recv(tree)
    return finish(op, value, c.size, obj) if c.rank == root else None


async def rabenseifner(c: CollContext, obj: Any, op: ReduceOp, root: int) -> Any:
    """Recursive-halving reduce-scatter, then a binomial gather of the pieces to the root.

    Costs ``2*log2(p)*alpha + 2*(p-1)/p * n*beta`` on ``p = 2**k`` ranks, plus
    MPICH's fold on other sizes.
    """
    fold = Fold.of(c.size)
    flat = await fold_in(c, fold, flatten(obj, op), op)
    vrank = fold.vrank(c.rank)
    holder = root if fold.vrank(root) is not None else root + 1  # who collects for a set-aside root
    if vrank is not None:
        bounds = split_bounds(length(flat), fold.pof2)
        windows = await halving(c, fold, vrank, flat, bounds, op)
        await doubling_gather(c, fold, vrank, flat, bounds, windows, fold.vrank(holder))
    if holder != root and c.rank == holder:
        await c.send(flat, root)
    elif holder != root and c.rank == root:
        flat = await c.recv(holder)
    return finish(op, unflatten(flat, obj), c.size, obj) if c.rank == root else None


async def linear(c: CollContext, obj: Any, op: ReduceOp, root: int) -> Any:
    """Every rank sends to the root, which reduces in rank order as the messages come in.

    Costs ``alpha + (p-1)*n*beta``; ``p - 1`` messages, all into the root's port.
    """
    value = await linear_fold(c, obj, op, root)
    return finish(op, value, c.size, obj) if c.rank == root else None


async def gloo_ring(c: CollContext, obj: Any, op: ReduceOp, root: int) -> Any:
    """gloo's reduce (``gloo::reduce``): a ring reduce-scatter of gloo's blocks, then each block to the root.

    Costs ``(p-1)*(alpha + n/p*beta)`` for the ring and ``alpha + (p-1)*n/p*beta``
    for the blocks into the root's port.
    """
    if not _gloo.applies(obj, op):
        return await binomial(c, obj, op, root)
    p, r = c.size, c.rank
    flat = flatten(obj, op)
    bounds = _gloo.blocks(flat, length(flat), p, _gloo.reduce_bounds)
    await gloo_reduce_scatter(c, flat, bounds, op)
    if r != root:
        if bounds[r + 1] > bounds[r]:  # an empty block is not sent (gloo's sendLength > 0)
            await c.send(flat[bounds[r]:bounds[r + 1]], root)
        return None
    reqs = [(src, c.irecv(src)) for src in range(p) if src != root and bounds[src + 1] > bounds[src]]
    for src, req in reqs:
        flat[bounds[src]:bounds[src + 1]] = await req
    return finish(op, unflatten(flat, obj), p, obj)


async def smp(c: CollContext, obj: Any, op: ReduceOp, root: int) -> Any:
    """Within each node a binomial reduce to its first rank; among those, the reduce the default
    picks, to the root's node; then to the root, unless it leads its node (MPICH's SMP-aware reduce).

    On a platform with nodes (``_nodes.layout``) one message per node
    crosses the network. Costs ``log2(q)`` intra-node steps, the leaders'
    reduce, and one more intra-node step where the root does not lead its
    node. For commutative ops; otherwise, and where the members share no
    node, it is ``binomial``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)
    from ..ops import ReduceOp as _ReduceOp  # (at run time: ops builds on the collectives' helpers)

    found = _nodes.layout(c.comm) if op.commutative else None
    if found is None:
        return await binomial(c, obj, op, root)
    inner = _ReduceOp.SUM if op is _ReduceOp.AVG else op  # AVG divides once, by the whole size
    local, leaders = _nodes.contexts(c, found)
    value = await binomial(local, obj, inner, 0)
    if leaders is not None:
        across = default(leaders.size, nbytes_of(value), arrays=elementwise(value, inner))
        value = await ALGORITHMS[across].run(leaders, value, inner, found.node_of[root])
    home = found.nodes[found.node_of[root]]
    if root != home[0]:  # the root's node's first rank hands the result over
        if c.rank == home[0]:
            await local.send(value, home.index(root))
        elif c.rank == root:
            value = await local.recv(0)
    return finish(op, value, c.size, obj) if c.rank == root else None


ALGORITHMS: Final = declare(
    Algorithm("reduce", "binomial", binomial, _cost.reduce_binomial, analytic.reduce(analytic.BINOMIAL)),
    Algorithm("reduce", "rabenseifner", rabenseifner, _cost.reduce_rabenseifner,
              analytic.reduce(analytic.BALANCED), wraps=True),
    Algorithm("reduce", "linear", linear, _cost.reduce_linear, analytic.reduce(analytic.LEFT)),
    Algorithm("reduce", "gloo_ring", gloo_ring, _cost.reduce_gloo_ring, analytic.reduce(analytic.GLOO_REDUCE)),
    Algorithm("reduce", "smp", smp, _cost.reduce_binomial, analytic.reduce(analytic.BINOMIAL), shaped=True),
)
"""Reduce algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return the reduce algorithm MPICH would pick (see the module docstring)."""
    pof2 = 1 << (size.bit_length() - 1)
    if arrays and commutative and nbytes > SHORT_MSG and nbytes >= 8 * pof2:
        return "rabenseifner"
    return "binomial"
