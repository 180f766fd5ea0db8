"""Barrier: wait until every member has entered.

Algorithms (``p`` ranks, AlphaBeta costs; every message is ``None``, 0 bytes):

- ``dissemination``: ``ceil(log2 p)`` rounds, in round ``k`` each rank signals
  ``rank + 2**k`` and waits for ``rank - 2**k``; ``ceil(log2 p) * alpha``.
- ``tree``: fan in to rank 0 along a binomial tree, then fan out along it;
  ``2 * floor(log2 p) * alpha`` (the deepest rank, ``2**floor(log2 p) - 1``, is
  that many hops from rank 0), but only ``2 * (p - 1)`` messages in all
  (dissemination sends ``p * ceil(log2 p)``).

- ``smp``: on a platform whose ranks share nodes, a barrier within each
  node, one among the nodes' first ranks, and one more within each node;
  ``dissemination`` elsewhere.

Default rule: ``dissemination`` at every size, as MPICH does; it has the
shortest critical path and needs no root. On a platform whose ranks share
nodes, ``smp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..request import wait_all
from . import _cost, analytic
from ._chunks import binomial_children, binomial_parent
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext


async def dissemination(c: CollContext) -> None:
    """Dissemination barrier (Hensgen, Finkel and Manber).

    After round ``k`` every rank has heard, directly or not, from the
    ``2**(k+1) - 1`` ranks before it, so after ``ceil(log2 p)`` rounds from all.
    Costs ``ceil(log2 p) * alpha`` (0 for one rank); ``p * ceil(log2 p)`` messages.
    """
    dist = 1
    while dist < c.size:
        await c.sendrecv(None, (c.rank + dist) % c.size, (c.rank - dist) % c.size)
        dist <<= 1


async def tree(c: CollContext) -> None:
    """Binomial fan-in to rank 0 followed by a binomial fan-out.

    Costs ``2 * floor(log2 p) * alpha``; ``2 * (p - 1)`` messages.
    """
    kids = binomial_children(c.rank, c.size)
    await wait_all([c.irecv(kid) for kid in kids])
    if c.rank:
        parent = binomial_parent(c.rank)
        await c.send(None, parent)
        await c.recv(parent)
    await wait_all([c.isend(None, kid) for kid in kids])


async def smp(c: CollContext) -> None:
    """A barrier within each node, one among the nodes' first ranks, then one more within each node
    (whose ranks so wait for their first rank to have met the others).

    On a platform with nodes only one rank per node signals across the
    network. Where the members share no node it is ``dissemination``.
    """
    from . import _nodes  # (only runs on a platform with nodes load it)

    found = _nodes.layout(c.comm)
    if found is None:
        return await dissemination(c)
    local, leaders = _nodes.contexts(c, found)
    await dissemination(local)
    if leaders is not None:
        await dissemination(leaders)
    await dissemination(local)


ALGORITHMS: Final = declare(
    Algorithm("barrier", "dissemination", dissemination, _cost.barrier_dissemination, analytic.nothing),
    Algorithm("barrier", "smp", smp, _cost.barrier_dissemination, analytic.nothing, shaped=True),
    Algorithm("barrier", "tree", tree, _cost.barrier_tree, analytic.nothing),
)
"""Barrier algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return the barrier algorithm to use: ``dissemination`` always (see the module docstring)."""
    return "dissemination"
