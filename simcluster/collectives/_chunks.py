"""Small helpers the collective algorithms share: tree shapes, splits, copies.

Binomial trees here are MPICH's: ranks are renumbered relative to the root
(``rel = (rank - root) % size``), a node's parent is ``rel`` with its lowest set
bit cleared, and its children are ``rel + mask`` for every power of two
``mask`` below that bit (below the next power of two of ``size`` for the root).
The subtree of ``rel`` is the contiguous range ``[rel, subtree_end(rel, size))``,
which is what lets scatter and gather move one slice per child.

Rule 1: nothing here sends or waits; these are pure functions of ranks and sizes.
Rule 2: only add functions; other collective modules rely on the existing ones.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .. import arrays

# ---- ranks relative to a root ----


def relative(rank: int, root: int, size: int) -> int:
    """Return ``rank``'s number in a numbering where ``root`` is 0."""
    return (rank - root) % size


def absolute(rel: int, root: int, size: int) -> int:
    """Undo :func:`relative`: the real rank of relative rank ``rel``."""
    return (rel + root) % size


def is_pow2(n: int) -> bool:
    """True when ``n`` is a positive power of two."""
    return n > 0 and n & (n - 1) == 0


def ceil_log2(n: int) -> int:
    """Return ``ceil(log2(n))`` for ``n >= 1`` (0 for 1), exactly, in integers."""
    return (n - 1).bit_length()


# ---- binomial trees (relative ranks) ----


def _span(rel: int, size: int) -> int:
    """Return the power of two that bounds ``rel``'s subtree (its lowest set bit; above ``size`` for 0)."""
    return rel & -rel if rel else 1 << ceil_log2(size)


def binomial_parent(rel: int) -> int:
    """Return the parent of relative rank ``rel > 0``: ``rel`` with its lowest set bit cleared."""
    return rel & (rel - 1)


def binomial_children(rel: int, size: int) -> list[int]:
    """Return the children of relative rank ``rel``, farthest (largest subtree) first."""
    kids = []
    mask = _span(rel, size) >> 1
    while mask:
        if rel + mask < size:
            kids.append(rel + mask)
        mask >>= 1
    return kids


def subtree_end(rel: int, size: int) -> int:
    """Return the end of ``rel``'s subtree: it holds relative ranks ``[rel, subtree_end)``."""
    return min(rel + _span(rel, size), size)


# ---- splitting and copying ----


def split_bounds(n: int, parts: int) -> list[int]:
    """Return ``parts + 1`` offsets cutting ``n`` items into near-equal pieces (larger first).

    Piece ``j`` is ``[bounds[j], bounds[j + 1])``, as ``numpy.array_split`` cuts.
    """
    base, extra = divmod(n, parts)
    # the first ``extra`` pieces hold ``base + 1`` items, the rest ``base``
    return [j * base + (j if j < extra else extra) for j in range(parts + 1)]


def fresh(obj: Any) -> Any:
    """Return a copy of ``obj`` that shares nothing with it (arrays copied, containers deep-copied).

    A rank's own item in a gathered list must be as independent of the caller's
    input as the items that came over the wire.
    """
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if arrays.is_array(obj):
        return arrays.clone(obj)  # its own library, on its own device
    return copy.deepcopy(obj)
