"""Broadcast: every rank gets the root's value.

Algorithms (``p`` ranks, ``n`` bytes, AlphaBeta costs; ranks numbered from the root):

- ``binomial``: the root sends to ``p/2``, ``p/4``, ... away, every rank
  forwards down its subtree; ``ceil(log2 p) * (alpha + n*beta)`` on ``2**k``
  ranks exactly (the root's port sends its ``log2 p`` copies one after another).
- ``scatter_allgather`` (van de Geijn): the root scatters ``p`` pieces of the
  array along a binomial tree, then a ring all_gather puts them back
  together; about ``(ceil(log2 p) + p - 1) * alpha + 2 * (p-1)/p * n*beta``,
  which wins for large arrays on many ranks. The root decides: a payload that
  is not an array, or an array with fewer elements than ranks, goes down the
  binomial tree whole instead (in a 1-tuple, so that the others can tell).
- ``linear``: the root sends to every rank in turn; ``alpha + (p-1)*n*beta``
  for the last one.
- ``smp``: on a platform whose ranks share nodes, to the first rank of the
  root's node, among the nodes' first ranks, then within each node (one copy
  per node crosses the network); ``binomial`` elsewhere.

Default rule (MPICH's ``MPIR_Bcast_intra_auto``, with a floor on piece size):
``scatter_allgather`` for arrays on 8 ranks or more whose size is at least
12288 bytes and at least 8 KiB per rank; ``binomial`` otherwise. MPICH goes
by the first two thresholds alone; the per-rank floor keeps the ring's
``p - 1`` latencies from costing more than the ``log2 p`` copies they save
(break-even under AlphaBeta with ``alpha/beta`` near 10 KB) and keeps the
simulator from moving ``p**2`` tiny messages on large worlds. When the payload
is not an array, non-root ranks cannot know its size, so the choice must not
depend on it: always ``binomial``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

from .. import arrays
from ..request import wait_all
from . import _cost, analytic
from ._chunks import absolute, binomial_children, binomial_parent, relative, split_bounds, subtree_end
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext


SHORT_MSG: Final = 12288
"""Bytes below which broadcast stays binomial (MPICH's ``BCAST_SHORT_MSG_SIZE``)."""

MIN_PROCS: Final = 8
"""Ranks below which broadcast stays binomial (MPICH's ``BCAST_MIN_PROCS``)."""

MIN_PIECE: Final = 8192
"""Bytes per rank below which broadcast stays binomial (the ring would cost more than it saves)."""


async def binomial(c: CollContext, obj: Any, root: int) -> Any:
    """Binomial-tree broadcast: receive from the parent, then send to each child, farthest first.

    The sends go one after another, as in MPICH (a rendezvous send waits for its
    transfer before the next starts). Costs ``log2(p) * (alpha + n*beta)`` on
    ``p = 2**k`` ranks (rank ``root - 1`` is last); ``p - 1`` messages. Works on
    any payload.
    """
    rel = relative(c.rank, root, c.size)
    value = obj if rel == 0 else await c.recv(absolute(binomial_parent(rel), root, c.size))
    for kid in binomial_children(rel, c.size):
        await c.send(value, absolute(kid, root, c.size))
    return value


async def scatter_allgather(c: CollContext, obj: Any, root: int) -> Any:
    """Van de Geijn broadcast: binomial scatter of ``p`` pieces, then a ring all_gather of them.

    Costs about ``(log2 p + p - 1) * alpha + 2 * (p-1)/p * n*beta``. Each scatter
    message carries the array's shape beside its slice (headers are free), so
    the other ranks' placeholders may be anything. A root payload that is not an
    array, or has fewer elements than ranks, travels whole down the binomial
    tree instead, wrapped in a 1-tuple (a few bytes more than ``binomial`` for objects).
    """
    size = c.size
    rel = relative(c.rank, root, size)
    if rel == 0:
        split = arrays.is_array(obj) and arrays.size(obj) >= size
        head = (obj.shape, arrays.reshape(obj, (-1,))) if split else (obj,)
    else:
        head = await c.recv(absolute(binomial_parent(rel), root, size))
    kids = binomial_children(rel, size)
    if len(head) == 1:
        for kid in kids:
            await c.send(head, absolute(kid, root, size))
        return head[0]
    shape, mine = head  # mine: pieces [rel, subtree_end(rel)), flat
    bounds = split_bounds(math.prod(shape), size)  # piece j starts at relative rank j
    first = bounds[rel]
    for kid in kids:
        await c.send((shape, mine[bounds[kid] - first:bounds[subtree_end(kid, size)] - first]),
                     absolute(kid, root, size))
    pieces: list[Any] = [None] * size
    pieces[rel] = mine[:bounds[rel + 1] - first]
    right, left = absolute(rel + 1, root, size), absolute(rel - 1, root, size)
    for step in range(size - 1):
        pieces[(rel - step - 1) % size] = await c.sendrecv(pieces[(rel - step) % size], right, left)
    return obj if rel == 0 else arrays.reshape(arrays.concat(pieces), tuple(shape))


async def linear(c: CollContext, obj: Any, root: int) -> Any:
    """The root sends the whole payload to every other rank, in rank order after it.

    Costs ``alpha + (p-1) * n*beta`` (the root's port sends ``p - 1`` copies); ``p - 1`` messages.
    """
    if c.rank != root:
        return await c.recv(root)
    await wait_all([c.isend(obj, (root + step) % c.size) for step in range(1, c.size)])
    return obj


async def smp(c: CollContext, obj: Any, root: int) -> Any:
    """The root's value to the first rank of its node, a binomial broadcast among the nodes' first
    ranks, then a binomial broadcast within each node (MPICH's SMP-aware broadcast).

    On a platform with nodes only one copy crosses the network to each
    node. Where the members share no node it is ``binomial``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm)
    if found is None:
        return await binomial(c, obj, root)
    local, leaders = _nodes.contexts(c, found)
    home = found.nodes[found.node_of[root]]
    value = obj
    if root != home[0]:  # the root hands its value to its node's first rank
        if c.rank == root:
            await local.send(obj, 0)
        elif c.rank == home[0]:
            value = await local.recv(home.index(root))
    if leaders is not None:
        value = await binomial(leaders, value, found.node_of[root])
    return await binomial(local, value, 0)


ALGORITHMS: Final = declare(
    Algorithm("broadcast", "binomial", binomial, _cost.broadcast_binomial, analytic.broadcast),
    Algorithm("broadcast", "smp", smp, _cost.broadcast_binomial, analytic.broadcast, shaped=True),
    Algorithm("broadcast", "scatter_allgather", scatter_allgather, _cost.broadcast_scatter_allgather,
              analytic.broadcast_in_pieces),
    Algorithm("broadcast", "linear", linear, _cost.broadcast_linear, analytic.broadcast),
)
"""Broadcast algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return the broadcast algorithm MPICH would pick (see the module docstring).

    ``nbytes`` is used only when ``arrays`` is true: then every rank holds a
    buffer of the same size, so every rank makes the same choice.
    """
    if arrays and size >= MIN_PROCS and nbytes >= max(SHORT_MSG, MIN_PIECE * size):
        return "scatter_allgather"
    return "binomial"
