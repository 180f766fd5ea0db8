"""Scan and exscan: inclusive and exclusive prefix reductions in rank order.

``scan`` gives rank ``r`` the value ``x0 op ... op xr``; ``exscan`` gives
``x0 op ... op x(r-1)`` and ``None`` on rank 0 (AVG divides by the number of
values reduced: ``r + 1`` and ``r``). Algorithms (``p`` ranks, ``n`` bytes,
AlphaBeta costs with ``gamma = 0``):

- ``recursive_doubling``: at step ``i`` each rank exchanges the reduction of
  its aligned block of ``2**i`` ranks with the rank ``2**i`` away and folds
  what came from below into its prefix: ``ceil(log2 p) * (alpha + n*beta)``.
- ``linear``: the prefix travels down the ranks one after another:
  ``(p-1) * (alpha + n*beta)`` for the last rank.

Both keep rank order (non-commutative ops are correct) and work on any payload.

Default rule (MPICH's ``MPIR_Scan_intra_auto`` and ``MPIR_Exscan_intra_auto``):
always ``recursive_doubling``; ``linear`` only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from . import _cost, analytic
from ._reduction import combine, finish
from ._registry import Algorithm, declare

if TYPE_CHECKING:
    from ..comm import CollContext
    from ..ops import ReduceOp


_NOTHING: Final = object()
"""The exclusive prefix of rank 0: nothing yet (never sent)."""


async def _linear_prefix(c: CollContext, obj: Any, op: ReduceOp, inclusive: bool) -> tuple[Any, Any]:
    """Return ``(exclusive, inclusive)`` prefixes by a chain down the ranks (``_NOTHING`` where not computed)."""
    r = c.rank
    below = _NOTHING if r == 0 else await c.recv(r - 1)
    upto = _NOTHING
    if inclusive or r + 1 < c.size:
        upto = obj if below is _NOTHING else await combine(c, op, below, obj)
    if r + 1 < c.size:
        await c.send(upto, r + 1)
    return below, upto


async def _doubling_prefix(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Return the exclusive prefix by recursive doubling (``_NOTHING`` on rank 0)."""
    r = c.rank
    block, below = obj, _NOTHING  # block: my aligned block's reduction; below: ranks under me in it
    mask = 1
    while mask < c.size:
        peer = r ^ mask
        if peer < c.size:
            got = await c.sendrecv(block, peer, peer)
            if peer < r:
                block = await combine(c, op, got, block)
                below = got if below is _NOTHING else await combine(c, op, got, below)
            else:
                block = await combine(c, op, block, got)
        mask <<= 1
    return below


async def _inclusive(c: CollContext, obj: Any, op: ReduceOp, below: Any) -> Any:
    value = obj if below is _NOTHING else await combine(c, op, below, obj)
    return finish(op, value, c.rank + 1, obj)


def _exclusive(c: CollContext, obj: Any, op: ReduceOp, below: Any) -> Any:
    return None if below is _NOTHING else finish(op, below, c.rank, obj)


async def recursive_doubling(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Inclusive scan by recursive doubling; ``ceil(log2 p) * (alpha + n*beta)``."""
    return await _inclusive(c, obj, op, await _doubling_prefix(c, obj, op))


async def linear(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Inclusive scan by a chain: receive the prefix from ``r-1``, add mine, pass it to ``r+1``.

    Costs ``(p-1) * (alpha + n*beta)`` for the last rank.
    """
    below, upto = await _linear_prefix(c, obj, op, inclusive=True)
    return finish(op, upto, c.rank + 1, obj)


async def exscan_recursive_doubling(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Exclusive scan by recursive doubling; ``ceil(log2 p) * (alpha + n*beta)``; None on rank 0."""
    return _exclusive(c, obj, op, await _doubling_prefix(c, obj, op))


async def exscan_linear(c: CollContext, obj: Any, op: ReduceOp) -> Any:
    """Exclusive scan by a chain; ``(p-1) * (alpha + n*beta)`` for the last rank; None on rank 0."""
    below, _ = await _linear_prefix(c, obj, op, inclusive=False)
    return _exclusive(c, obj, op, below)


ALGORITHMS: Final = declare(
    Algorithm("scan", "recursive_doubling", recursive_doubling, _cost.scan_recursive_doubling,
              analytic.scan(analytic.doubling_prefixes)),
    Algorithm("scan", "linear", linear, _cost.scan_linear, analytic.scan(analytic.chain_prefixes)),
)
"""Scan algorithms by name."""

EXSCAN_ALGORITHMS: Final = declare(
    Algorithm("exscan", "recursive_doubling", exscan_recursive_doubling, _cost.exscan_recursive_doubling,
              analytic.exscan(analytic.doubling_prefixes)),
    Algorithm("exscan", "linear", exscan_linear, _cost.exscan_linear,
              analytic.exscan(analytic.chain_prefixes)),
)
"""Exscan algorithms by name."""


def default(size: int, nbytes: int, *, commutative: bool = True, arrays: bool = True) -> str:
    """Return the scan (and exscan) algorithm MPICH would pick: always ``recursive_doubling``."""
    return "recursive_doubling"
