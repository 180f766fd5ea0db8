"""Layouts of derived datatypes: bounds, alignment and the typemap, as MPICH computes them.

A derived type is built from *blocks*: block ``i`` holds ``counts[i]`` copies
of an old type laid one extent after another from byte ``starts[i]``
(``Create_contiguous``, ``Create_vector``, ``Create_indexed``,
``Create_struct``, ... are all this). ``Layout`` is what a type knows about
itself without listing its elements: size, lower and upper bound, true
bounds, alignment, element count, and whether every element is the same
predefined type at a multiple of that type's extent (then a buffer can be
read as an array of that type). ``typemap()`` lists the elements (byte
offsets, and the predefined type of each) and is computed only when a
buffer needs it: a type of 2**31 bytes costs nothing until it moves data.

Rule 1: bounds follow MPICH: a struct's extent is padded to the largest
alignment of its members unless one of them was resized (MPICH's "sticky"
bounds); blocks of length 0 are ignored.
Rule 2: the typemap keeps MPI's order (the order of the blocks, then of the
copies), which is the order ``Pack`` and the wire use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

Typemap = tuple[NDArray[np.int64], NDArray[np.int64] | None]
"""(byte offset of each element, the id of each element's predefined type; None: all ``leaf``)."""


@dataclass
class Layout:
    """What a datatype's shape is, in bytes (see the module docstring)."""

    size: int
    lb: int
    ub: int
    true_lb: int
    true_ub: int
    align: int
    elements: int  # predefined elements in one item
    leaf: Any  # the predefined Datatype every element is, or None when they differ
    aligned: bool  # every element at a multiple of leaf's extent, and the extent too
    sticky: bool = False  # the bounds were set by Create_resized (no struct padding)
    build: Callable[[], Typemap] | None = field(default=None, repr=False)
    _cache: Typemap | None = field(default=None, repr=False)

    @property
    def extent(self) -> int:
        return self.ub - self.lb

    def typemap(self) -> Typemap:
        """Return the elements' byte offsets and types (computed once)."""
        if self._cache is None:
            assert self.build is not None
            self._cache = self.build()
        return self._cache


def predefined(dt: Any, size: int, extent: int, align: int) -> Layout:
    """The layout of a predefined type: one element at offset 0."""
    tm: Typemap = (np.zeros(1, dtype=np.int64), None)
    return Layout(size, 0, extent, 0, extent, align, 1, dt, True, False, None, tm)


def blocks(olds: Sequence[Any], starts: Sequence[int], counts: Sequence[int], struct: bool = False
           ) -> Layout:
    """The layout of ``counts[i]`` copies of ``olds[i]._layout`` from byte ``starts[i]``."""
    first_old = olds[0] if olds else None
    if first_old is not None and not struct and all(o is first_old for o in olds):
        return _repeated(first_old._layout, starts, counts)
    lays = [o._layout for o in olds]
    used = [(lay, int(s), int(c)) for lay, s, c in zip(lays, starts, counts) if c > 0]
    size = sum(lay.size * c for lay, _, c in used)
    elements = sum(lay.elements * c for lay, _, c in used)
    leaves = {id(lay.leaf) for lay, _, _ in used} if used else {id(lays[0].leaf) if lays else 0}
    leaf = (used[0][0].leaf if used else lays[0].leaf if lays else None) if len(leaves) == 1 else None
    sticky = any(lay.sticky for lay, _, _ in used)
    align = max((lay.align for lay, _, _ in used), default=1)
    lo, hi, tlo, thi = [], [], [], []
    for lay, s, c in used:
        last = s + (c - 1) * lay.extent
        first, final = min(s, last), max(s, last)
        lo.append(first + lay.lb)
        hi.append(final + lay.ub)
        if lay.size:
            tlo.append(first + lay.true_lb)
            thi.append(final + lay.true_ub)
    lb, ub = min(lo, default=0), max(hi, default=0)
    if struct and not sticky and (ub - lb) % align:
        ub += align - (ub - lb) % align
    unit = leaf._extent if leaf is not None and leaf._extent else 0
    aligned = leaf is not None and all(lay.aligned for lay, _, _ in used) and (
        unit == 0 or ((ub - lb) % unit == 0 and all(s % unit == 0 for _, s, _ in used)))

    def build() -> Typemap:
        offs: list[NDArray[np.int64]] = []
        ids: list[NDArray[np.int64]] = []
        for lay, s, c in used:
            o, i = lay.typemap()
            copies = s + np.arange(c, dtype=np.int64) * lay.extent
            offs.append((copies[:, None] + o[None, :]).ravel())
            if leaf is None:
                each = i if i is not None else np.full(len(o), lay.leaf._id, dtype=np.int64)
                ids.append(np.tile(each, c))
        off = np.concatenate(offs) if offs else np.zeros(0, dtype=np.int64)
        return off, (np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)) if leaf is None else None

    return Layout(size, lb, ub, min(tlo, default=0), max(thi, default=0), align, elements, leaf,
                  aligned, sticky, build)


def _repeated(lay: Layout, starts: Sequence[int], counts: Sequence[int]) -> Layout:
    """``blocks`` when every block holds copies of the same type (all constructors but struct)."""
    ext = lay.extent
    used = [(int(s), int(c)) for s, c in zip(starts, counts) if c > 0]
    total = sum(c for _, c in used)
    if used:
        ends = [(s, s + (c - 1) * ext) for s, c in used]
        lo = min(min(a, b) for a, b in ends)
        hi = max(max(a, b) for a, b in ends)
        lb, ub = lo + lay.lb, hi + lay.ub
        tlb, tub = (lo + lay.true_lb, hi + lay.true_ub) if lay.size else (0, 0)
    else:
        lb = ub = tlb = tub = 0
    leaf = lay.leaf
    unit = leaf._extent if leaf is not None and leaf._extent else 0
    aligned = lay.aligned and (unit == 0 or ((ub - lb) % unit == 0 and all(s % unit == 0 for s, _ in used)))

    def build() -> Typemap:
        o, ids = lay.typemap()
        if not used:
            return np.zeros(0, dtype=np.int64), None if ids is None else np.zeros(0, dtype=np.int64)
        copies = np.concatenate([s + np.arange(c, dtype=np.int64) * ext for s, c in used])
        off = (copies[:, None] + o[None, :]).ravel()
        return off, None if ids is None else np.tile(ids, len(copies))

    return Layout(lay.size * total, lb, ub, tlb, tub, lay.align, lay.elements * total, leaf, aligned,
                  lay.sticky, build)


def resized(old: Layout, lb: int, extent: int) -> Layout:
    """``old`` with new bounds; its elements stay where they are."""
    unit = old.leaf._extent if old.leaf is not None else 0
    aligned = old.aligned and (unit == 0 or extent % unit == 0)
    return Layout(old.size, lb, lb + extent, old.true_lb, old.true_ub, old.align, old.elements,
                  old.leaf, aligned, True, old.typemap)


def cells(sizes: Sequence[int], picks: Sequence[NDArray[np.int64]], fortran: bool) -> NDArray[np.int64]:
    """Flat indices, in memory order, of the cells whose index along dim ``d`` is in ``picks[d]``."""
    if not sizes:
        return np.zeros(1, dtype=np.int64)
    grids = np.meshgrid(*picks, indexing="ij")
    order: Literal["C", "F"] = "F" if fortran else "C"
    flat = [g.ravel(order=order) for g in grids]
    if any(len(f) == 0 for f in flat):
        return np.zeros(0, dtype=np.int64)
    index: NDArray[np.int64] = np.asarray(np.ravel_multi_index(tuple(flat), tuple(sizes), order=order),
                                          dtype=np.int64)
    return index


def darray_picks(size: int, rank: int, gsizes: Sequence[int], distribs: Sequence[int],
                 dargs: Sequence[int], psizes: Sequence[int], block: int, cyclic: int, default: int
                 ) -> list[NDArray[np.int64]]:
    """Per dimension, the global indices process ``rank`` owns in a distributed array."""
    coords, left = [], rank
    for p in reversed(psizes):  # process grid ranks are row-major whatever the array order
        coords.append(left % p)
        left //= p
    coords.reverse()
    picks = []
    for g, dist, darg, p, c in zip(gsizes, distribs, dargs, psizes, coords):
        idx = np.arange(g, dtype=np.int64)
        if dist == block:
            b = -(-g // p) if darg == default else darg
            picks.append(idx[(idx >= c * b) & (idx < (c + 1) * b)])
        elif dist == cyclic:
            b = 1 if darg == default else darg
            picks.append(idx[(idx // b) % p == c])
        else:
            picks.append(idx)
    return picks


def byte_positions(tm: Typemap, leaf: Any, by_id: dict[int, Any]) -> NDArray[np.intp]:
    """Every byte of one item's elements, in typemap order."""
    offs, ids = tm
    if ids is None:
        width = leaf._extent
        return (offs[:, None] + np.arange(width, dtype=np.int64)[None, :]).ravel().astype(np.intp)
    parts = [np.arange(o, o + by_id[i]._extent, dtype=np.intp) for o, i in zip(offs.tolist(), ids.tolist())]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)


def swap_order(tm: Typemap, leaf: Any, by_id: dict[int, Any]) -> NDArray[np.intp]:
    """The permutation that turns one packed item's native bytes into big-endian (external32)."""
    offs, ids = tm
    kinds = [leaf] * len(offs) if ids is None else [by_id[i] for i in ids.tolist()]
    templates: dict[int, NDArray[np.intp]] = {}
    out, at = [], 0
    for dt in kinds:
        t = templates.get(dt._id)
        if t is None:
            t = templates[dt._id] = _swap_template(dt._np)
        out.append(t + at)
        at += len(t)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.intp)


def _swap_template(dtype: np.dtype[Any]) -> NDArray[np.intp]:
    """Byte order of one element of ``dtype`` in big-endian form: each number's bytes reversed."""
    perm = np.arange(dtype.itemsize, dtype=np.intp)
    fields = dtype.fields
    parts: list[tuple[int, np.dtype[Any]]] = (
        [(fields[n][1], fields[n][0]) for n in dtype.names] if dtype.names and fields else [(0, dtype)])
    for off, dt in parts:
        if dt.kind in "biufcm M" and dt.itemsize > 1:
            width = dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
            for start in range(off, off + dt.itemsize, width):
                perm[start:start + width] = perm[start:start + width][::-1]
        elif dt.kind == "U":
            for start in range(off, off + dt.itemsize, 4):
                perm[start:start + 4] = perm[start:start + 4][::-1]
    return perm
