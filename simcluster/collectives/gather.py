"""Gather: the root gets the list of every rank's item (items may differ in shape and type).

Algorithms (``p`` ranks, ``n`` bytes per item, AlphaBeta costs):

- ``binomial``: every rank collects its binomial subtree's items and sends
  them to its parent in one message; about ``ceil(log2 p) * alpha +
  (p-1) * n*beta`` (the root's port receives ``p - 1`` items in all),
  ``p - 1`` messages.
- ``linear``: every rank sends its item straight to the root;
  ``alpha + (p-1) * n*beta`` (the root's port receives them one after another).

Default rule: ``binomial`` at every size and message size, as MPICH does.
The choice must not depend on the item size here: items may differ per rank,
so ranks could disagree on a size threshold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..request import wait_all
from . import _cost, analytic
from ._chunks import absolute, binomial_children, binomial_parent, fresh, relative
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext


async def binomial(c: CollContext, obj: Any, root: int) -> list[Any] | None:
    """Binomial-tree gather: collect the children's subtrees, send them on with this rank's item.

    Costs about ``log2(p) * alpha + (p-1) * n*beta``; ``p - 1`` messages, each the
    list of one subtree's items in relative-rank order.
    """
    size = c.size
    rel = relative(c.rank, root, size)
    kids = binomial_children(rel, size)[::-1]  # nearest first: their subtrees follow ours in order
    parts = await wait_all([c.irecv(absolute(kid, root, size)) for kid in kids])
    items = [obj]
    for part in parts:
        items.extend(part)
    if rel:
        await c.send(items, absolute(binomial_parent(rel), root, size))
        return None
    items[0] = fresh(obj)
    return [items[relative(rank, root, size)] for rank in range(size)]


async def linear(c: CollContext, obj: Any, root: int) -> list[Any] | None:
    """Every rank sends its item to the root, which receives them all at once.

    Costs ``alpha + (p-1) * n*beta``; ``p - 1`` messages.
    """
    if c.rank != root:
        await c.send(obj, root)
        return None
    srcs = [rank for rank in range(c.size) if rank != root]
    items = await wait_all([c.irecv(src) for src in srcs])
    out: list[Any] = [None] * c.size
    for src, item in zip(srcs, items):
        out[src] = item
    out[root] = fresh(obj)
    return out


ALGORITHMS: Final = declare(
    Algorithm("gather", "binomial", binomial, _cost.gather_binomial, analytic.gather),
    Algorithm("gather", "linear", linear, _cost.gather_linear, analytic.gather),
)
"""Gather algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return ``binomial``, whatever the sizes (see the module docstring)."""
    return "binomial"
