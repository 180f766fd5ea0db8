"""Scatter: rank ``i`` gets element ``i`` of the root's list.

Algorithms (``p`` ranks, ``n`` bytes per element, AlphaBeta costs):

- ``binomial``: the root hands each child of a binomial tree the slice of the
  list its subtree needs, and every rank forwards likewise; about
  ``ceil(log2 p) * alpha + (p-1) * n*beta`` (the root's port sends ``p - 1``
  elements in all), ``p - 1`` messages.
- ``linear``: the root sends each rank its element in turn;
  ``alpha + (p-1) * n*beta`` for the last, ``p - 1`` messages.

Default rule: ``binomial`` at every size and message size, as MPICH does.
Here the choice must not depend on the size anyway: only the root holds the
elements, so the other ranks could not agree with it on a size threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..request import wait_all
from . import _cost, analytic
from ._chunks import absolute, binomial_children, binomial_parent, fresh, relative, subtree_end
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext


async def binomial(c: CollContext, objs: Sequence[Any] | None, root: int) -> Any:
    """Binomial-tree scatter: each rank receives its subtree's elements, keeps its own, forwards the rest.

    Sends go one after another, farthest child first, as in MPICH. Costs about
    ``log2(p) * alpha + (p-1) * n*beta``; ``p - 1`` messages, each the list of
    elements for one subtree.
    """
    size = c.size
    rel = relative(c.rank, root, size)
    if rel == 0:
        assert objs is not None
        items = [objs[absolute(j, root, size)] for j in range(size)]  # in relative order
    else:
        items = await c.recv(absolute(binomial_parent(rel), root, size))
    for kid in binomial_children(rel, size):  # one after another, as in MPICH
        await c.send(items[kid - rel:subtree_end(kid, size) - rel], absolute(kid, root, size))
    return fresh(items[0]) if rel == 0 else items[0]


async def linear(c: CollContext, objs: Sequence[Any] | None, root: int) -> Any:
    """The root sends element ``i`` to rank ``i``, for every rank in order after it.

    Costs ``alpha + (p-1) * n*beta``; ``p - 1`` messages.
    """
    if c.rank != root:
        return await c.recv(root)
    assert objs is not None
    dsts = [(root + step) % c.size for step in range(1, c.size)]
    await wait_all([c.isend(objs[dst], dst) for dst in dsts])
    return fresh(objs[root])


ALGORITHMS: Final = declare(
    Algorithm("scatter", "binomial", binomial, _cost.scatter_binomial, analytic.scatter),
    Algorithm("scatter", "linear", linear, _cost.scatter_linear, analytic.scatter),
)
"""Scatter algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return ``binomial``, whatever the sizes (see the module docstring)."""
    return "binomial"
