"""Steps the reduction collectives share: flat views, ordered combines, folds, halving.

The chunking algorithms (ring, Rabenseifner, recursive halving) work on a
*flat* value: a 1-D copy of an array for elementwise ops, or a list of whole
items otherwise (``[obj]`` for one Python object, the caller's list for
reduce_scatter). Slicing a flat value with chunk bounds gives a *segment*;
``combine_flat`` reduces two segments item by item, so one code path serves
arrays, numbers and arbitrary objects.

Non-power-of-two sizes use MPICH's fold: with ``pof2`` the largest power of
two ``<= size`` and ``rem = size - pof2``, each even rank below ``2*rem``
hands its data to the odd rank above it and sits out; the others renumber
to ``vrank`` in ``range(pof2)`` (``r // 2`` below ``2*rem``, ``r - rem``
above), run the power-of-two algorithm, and the odd ranks hand results back.

Rule 1: rank order is kept everywhere: the operand that holds lower ranks goes
on the left (``vrank`` order is rank order, and each vrank holds a contiguous
block of ranks), so non-commutative ops give ``x0 op x1 op ... op x(p-1)``.
Rule 2: nothing here writes into the caller's arrays: ``flatten`` copies, and
``ReduceOp.apply`` returns new values. Writes go only into our own flat copy,
and only after the sends that read it have completed.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Union

import numpy as np

from .. import arrays
from ..request import COMPLETED, wait_all
from ._chunks import fresh

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .._coll_context import CollContext
    from ..ops import ReduceOp

Flat = Union["NDArray[Any]", list[Any], Any]
"""A 1-D array (elementwise op on an array, of any library) or a list of whole items."""

# ---- values ----


def elementwise(obj: Any, op: ReduceOp) -> bool:
    """True when ``op`` reduces ``obj`` item by item (an array under an elementwise op)."""
    return op.elementwise and (isinstance(obj, np.ndarray) or arrays.is_array(obj))


def flatten(obj: Any, op: ReduceOp) -> Flat:
    """Return ``obj`` as a flat value: a 1-D copy of an array when ``op`` is elementwise, else ``[obj]``."""
    if isinstance(obj, np.ndarray) and op.elementwise:
        flat = np.array(obj, order="C")
        return flat if flat.ndim == 1 else flat.reshape(-1)
    if op.elementwise and arrays.is_array(obj):
        return arrays.flat_copy(obj)  # torch, CuPy, ...: copied by its own library
    return [obj]


def unflatten(flat: Flat, like: Any) -> Any:
    """Undo :func:`flatten` for a payload shaped like ``like``."""
    if isinstance(flat, np.ndarray):
        shape = like.shape
        return flat if flat.shape == shape else flat.reshape(shape)
    if type(flat) is list:
        return flat[0]
    return arrays.reshape(flat, tuple(like.shape))


def length(flat: Flat) -> int:
    """Return the number of items of a flat value (a list, or a 1-D array of any library)."""
    if type(flat) is list or type(flat) is np.ndarray:
        return len(flat)
    return int(getattr(flat, "shape")[0])


def segment(flat: Flat, bounds: Sequence[int], first: int, end: int | None = None) -> Flat:
    """Return chunks ``[first, end)`` of ``flat`` (just chunk ``first`` when ``end`` is None)."""
    return flat[bounds[first]:bounds[first + 1 if end is None else end]]


def nbytes_of(value: object) -> int:
    """Return the bytes a reduction of ``value`` touches (arrays: ``nbytes``; numbers: their width)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return int(value.nbytes)
    if isinstance(value, list):
        return sum(nbytes_of(item) for item in value)
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float, complex)):
        return 16 if isinstance(value, complex) else 8
    return arrays.nbytes(value) if arrays.is_array(value) else 0


def finish(op: ReduceOp, value: Any, count: int, obj: Any) -> Any:
    """Finalize ``value`` (AVG divides by ``count``); never hand back the caller's own ``obj``."""
    if value is obj:  # one rank, or nothing to reduce with: a copy, as if it had come over the wire
        value = fresh(value)
    return op.finalize(value, count)


# ---- combining, with the gamma charge ----


def charge(c: CollContext, value: object) -> Awaitable[None]:
    """Charge this rank ``reduce_time`` for having computed ``value``; await the result.

    Already complete (no sizing, no sleep) when the run's model makes reductions free.
    """
    if c.free_reductions:
        return COMPLETED
    seconds = c.latency.reduce_time(nbytes_of(value))
    return c.sleep(seconds) if seconds > 0 else COMPLETED


_ADD: Final = operator.add
_NDARRAY: Final = np.ndarray


def apply(op: ReduceOp, left: Any, right: Any) -> Any:
    """Return ``op.apply(left, right)``; two floats or two ints under SUM (or AVG) are added here.

    The all_reduce of a number runs this once per message: compiled, the
    sum costs no call into the interpreted ``ReduceOp``.
    """
    t = type(left)
    if (t is float or t is int) and type(right) is t and op.fn is None and op.py is _ADD:
        return left + right
    return op.apply(left, right)


async def combine(c: CollContext, op: ReduceOp, left: Any, right: Any) -> Any:
    """Return ``left op right`` (``left`` holds the lower ranks), charging ``reduce_time``."""
    value = apply(op, left, right)
    await charge(c, value)
    return value


def apply_flat(op: ReduceOp, left: Flat, right: Flat) -> Flat:
    """Return ``left op right`` item by item for two segments (no charge)."""
    if type(left) is _NDARRAY and type(right) is _NDARRAY:
        ufunc = op.ufunc
        if ufunc is not None and op.fn is None and not op.logical:
            # ReduceOp.apply's own first branch for arrays, without the interpreted call
            value = ufunc(left, right)
            return value if type(value) is _NDARRAY else np.asarray(value)
    if type(left) is not list:  # a 1-D array, of numpy or another library
        return op.apply(left, right)
    return [apply(op, a, b) for a, b in zip(left, right, strict=True)]


async def combine_flat(c: CollContext, op: ReduceOp, left: Flat, right: Flat) -> Flat:
    """Return ``left op right`` item by item for two segments, charging ``reduce_time``."""
    value = apply_flat(op, left, right)
    await charge(c, value)
    return value


def ordered(op: ReduceOp, mine: Flat, got: Flat, got_first: bool) -> Flat:
    """Combine my segment with a peer's, the lower ranks' operand first (the caller charges it)."""
    return apply_flat(op, got, mine) if got_first else apply_flat(op, mine, got)


async def fold_values(c: CollContext, op: ReduceOp, values: Sequence[Any], *, flat: bool = False) -> Any:
    """Return ``values[0] op values[1] op ...`` in order (item by item when ``flat``)."""
    step = combine_flat if flat else combine
    value = values[0]
    for item in values[1:]:
        value = await step(c, op, value, item)
    return value


async def linear_fold(c: CollContext, obj: Any, op: ReduceOp, root: int, *, flat: bool = False) -> Any:
    """Every rank sends ``obj`` to ``root``, which reduces them in rank order; others get None.

    Costs ``alpha + (p-1)*n*beta`` (the root's port takes the ``p - 1`` messages
    one after another) plus ``p - 1`` local reductions at the root.
    """
    if c.rank != root:
        await c.send(obj, root)
        return None
    reqs = {src: c.irecv(src) for src in range(c.size) if src != root}
    value = obj if root == 0 else await reqs[0]
    step = combine_flat if flat else combine
    for src in range(1, c.size):
        value = await step(c, op, value, obj if src == root else await reqs[src])
    return value


# ---- folding a non-power-of-two size ----


@dataclass(frozen=True, slots=True)
class Fold:
    """MPICH's renumbering of ``size`` ranks onto ``pof2`` virtual ranks (see the module docstring)."""

    size: int
    pof2: int
    rem: int

    @classmethod
    @functools.lru_cache(maxsize=64)
    def of(cls, size: int) -> Fold:
        """Return the fold for ``size`` ranks (one shared, immutable object per size)."""
        pof2 = 1 << (size.bit_length() - 1)
        return cls(size, pof2, size - pof2)

    def vrank(self, rank: int) -> int | None:
        """Return ``rank``'s virtual rank, or None for an even rank that sits out."""
        if rank >= 2 * self.rem:
            return rank - self.rem
        return None if rank % 2 == 0 else rank // 2

    def rank(self, vrank: int) -> int:
        """Return the real rank that plays virtual rank ``vrank``."""
        return 2 * vrank + 1 if vrank < self.rem else vrank + self.rem

    def members(self, vrank: int) -> range:
        """Return the real ranks whose data virtual rank ``vrank`` holds after the fold."""
        return range(2 * vrank, 2 * vrank + 2) if vrank < self.rem else range(vrank + self.rem,
                                                                              vrank + self.rem + 1)


async def fold_in(c: CollContext, fold: Fold, flat: Flat, op: ReduceOp, *, whole: bool = False) -> Flat:
    """Even ranks below ``2*rem`` send their flat value up; the odd ranks fold it in (one step).

    With ``whole`` the value is not flat: it is combined as one item.
    """
    r = c.rank
    if r >= 2 * fold.rem:
        return flat
    if r % 2 == 0:
        await c.send(flat, r + 1)
        return flat
    step = combine if whole else combine_flat
    return await step(c, op, await c.recv(r - 1), flat)


async def fold_out(c: CollContext, fold: Fold, flat: Flat) -> Flat:
    """Odd ranks below ``2*rem`` send the result down to the even rank that sat out."""
    r = c.rank
    if r >= 2 * fold.rem:
        return flat
    if r % 2:
        await c.send(flat, r - 1)
        return flat
    received: Flat = await c.recv(r + 1)
    return received


# ---- recursive halving and its reverse ----


async def halving(c: CollContext, fold: Fold, vrank: int, flat: Flat, bounds: Sequence[int],
                  op: ReduceOp) -> list[tuple[int, int]]:
    """Reduce-scatter ``pof2`` chunks of ``flat`` among the virtual ranks by recursive halving.

    Step ``i`` pairs ``vrank`` with ``vrank ^ 2**i``: each keeps half of its
    current window of chunks and sends the other half, so the steps move
    ``n/2, n/4, ..., n/pof2`` bytes: ``log2(pof2) * alpha + (pof2-1)/pof2 * n*beta``.
    Distances grow (1, 2, 4, ...) so each partial covers a contiguous block of
    ranks and order is kept. ``flat`` is updated in place; the result is the
    stack of windows, one per step, the last entry being this rank's final chunk.
    """
    lo, hi = 0, len(bounds) - 1
    windows = [(lo, hi)]
    mask = 1
    while mask < fold.pof2:
        peer = vrank ^ mask
        mid = (lo + hi) // 2
        (lo, hi), give = ((mid, hi), (lo, mid)) if vrank & mask else ((lo, mid), (mid, hi))
        got = await c.sendrecv(segment(flat, bounds, *give), fold.rank(peer), fold.rank(peer))
        reduced = ordered(op, segment(flat, bounds, lo, hi), got, peer < vrank)
        await charge(c, reduced)
        flat[bounds[lo]:bounds[hi]] = reduced
        windows.append((lo, hi))
        mask <<= 1
    return windows


async def doubling_gather(c: CollContext, fold: Fold, vrank: int, flat: Flat, bounds: Sequence[int],
                          windows: list[tuple[int, int]], vroot: int | None = None) -> bool:
    """Undo :func:`halving`: put the reduced chunks back together in ``flat``.

    With ``vroot`` None every virtual rank ends with every chunk (recursive
    doubling all_gather, ``n/pof2, ..., n/2`` bytes per step); otherwise the
    chunks flow to ``vroot`` only (binomial gather) and the ranks that handed
    theirs on return early. Returns whether this rank now holds the whole value.
    """
    for depth in range(len(windows) - 1, 0, -1):
        mask = 1 << (depth - 1)  # the step that made windows[depth] paired vranks this far apart
        (lo, hi), (plo, phi) = windows[depth], windows[depth - 1]
        other = (plo, lo) if lo > plo else (hi, phi)
        peer = fold.rank(vrank ^ mask)
        mine = segment(flat, bounds, lo, hi)
        if vroot is None:
            flat[bounds[other[0]]:bounds[other[1]]] = await c.sendrecv(mine, peer, peer)
        elif (vrank ^ vroot) & mask:
            await c.send(mine, peer)
            return False
        else:
            flat[bounds[other[0]]:bounds[other[1]]] = await c.recv(peer)
    return True


# ---- the ring reduce-scatter ----


async def ring_reduce_scatter(c: CollContext, flat: Flat, bounds: Sequence[int], op: ReduceOp) -> Flat:
    """Reduce ``size`` chunks around the ring; return chunk ``c.rank`` reduced over all ranks.

    At step ``s`` rank ``r`` sends its partial of chunk ``r-s-1`` right and
    receives chunk ``r-s-2`` from the left, a simultaneous exchange costing
    ``alpha + n/p*beta``: ``(p-1) * (alpha + n/p*beta)`` in all. Chunk ``k``'s
    partial travels ``k+1, ..., p-1, 0, ..., k``; for a non-commutative op the
    part gathered after the wrap at rank 0 travels as a separate head (the
    message carries ``[tail, head]``, ``head`` None until then, 0 bytes), and
    rank ``k`` returns ``head op tail``, keeping rank order. An array tail
    without a head travels alone, as one array (the common case, and the
    codec's fastest); a list is always a ``[tail, head]`` pair.
    """
    p, r = c.size, c.rank
    right, left = (r + 1) % p, (r - 1) % p
    tail: Flat = segment(flat, bounds, (r - 1) % p)
    if type(flat) is _NDARRAY and op.commutative:
        # no head ever travels: each step is one array out, one in, one combine (no coroutine)
        free = c.free_reductions
        k = (r - 2) % p  # the chunk this rank adds at step 0; one lower (mod p) each step
        for _ in range(p - 1):
            tail = apply_flat(op, await c.sendrecv(tail, right, left), flat[bounds[k]:bounds[k + 1]])
            if not free:
                await charge(c, tail)
            k = k - 1 if k else p - 1
        return tail
    head: Flat = None
    for step in range(p - 1):
        got = await c.sendrecv(tail if head is None and type(tail) is not list else [tail, head], right, left)
        tail, head = got if type(got) is list else (got, None)
        mine = segment(flat, bounds, (r - step - 2) % p)
        if r == 0 and not op.commutative:
            head = mine
        elif head is None:
            tail = await combine_flat(c, op, tail, mine)
        else:
            head = await combine_flat(c, op, head, mine)
    return tail if head is None else await combine_flat(c, op, head, tail)


# ---- gloo's ring (its layout and order: ``_gloo``) ----


async def gloo_reduce_scatter(c: CollContext, flat: Flat, bounds: Sequence[int], op: ReduceOp) -> None:
    """gloo's reduce-scatter: leave block ``c.rank`` of ``flat`` reduced over every rank.

    At step ``s`` rank ``r`` sends block ``r+1+s`` left (to ``r-1``) and
    receives block ``r+2+s`` from the right, adding its own operand in front:
    ``(p-1) * (alpha + n/p*beta)`` for equal blocks. ``flat`` (our own copy)
    is updated in place, each block after the send that read it. An empty
    block (a buffer of fewer elements than ranks) is neither sent nor
    received, as gloo posts no operation of length 0.
    """
    p, r = c.size, c.rank
    left, right = (r - 1) % p, (r + 1) % p
    for step in _busy_steps(bounds, p, r + 1, r + 2):
        out, k = (r + 1 + step) % p, (r + 2 + step) % p
        got = await _gloo_step(c, flat, bounds, out, k, left, right)
        if got is not None:
            flat[bounds[k]:bounds[k + 1]] = await combine_flat(c, op, segment(flat, bounds, k), got)


async def gloo_all_gather(c: CollContext, flat: Flat, bounds: Sequence[int]) -> None:
    """gloo's all_gather of the reduced blocks: step ``s`` sends block ``r+s`` left, gets ``r+1+s``
    (empty blocks not at all, as in ``gloo_reduce_scatter``)."""
    p, r = c.size, c.rank
    left, right = (r - 1) % p, (r + 1) % p
    for step in _busy_steps(bounds, p, r, r + 1):
        k = (r + 1 + step) % p
        got = await _gloo_step(c, flat, bounds, (r + step) % p, k, left, right)
        if got is not None:
            flat[bounds[k]:bounds[k + 1]] = got


def _busy_steps(bounds: Sequence[int], p: int, sends_from: int, receives_from: int) -> Sequence[int]:
    """The steps of a ring pass (``0 .. p-2``) at which a rank sends block ``sends_from + step`` or
    receives block ``receives_from + step`` holding elements: every step, unless the buffer has
    fewer elements than ranks. gloo's blocks are cut at the end of the buffer, so the ones holding
    elements are the first ``full``; a pass then costs a rank ``O(full)``, not ``O(p)``."""
    full = bisect.bisect_left(bounds, bounds[p])
    if full >= p:
        return range(p - 1)
    steps = {(c - first) % p for c in range(full) for first in (sends_from, receives_from)}
    return sorted(step for step in steps if step < p - 1)


async def _gloo_step(c: CollContext, flat: Flat, bounds: Sequence[int], out: int, k: int, left: int,
                     right: int) -> Any:
    """Send block ``out`` left and receive block ``k`` from the right, each only if it holds
    elements; return what came (None when block ``k`` is empty)."""
    sends, receives = bounds[out + 1] > bounds[out], bounds[k + 1] > bounds[k]
    if sends and receives:
        return await c.sendrecv(segment(flat, bounds, out), left, right)
    if sends:
        await c.send(segment(flat, bounds, out), left)
    elif receives:
        return await c.recv(right)
    return None


async def send_all(c: CollContext, items: Sequence[tuple[Any, int]]) -> None:
    """Send each ``(obj, dst)`` at once and wait for them all."""
    await wait_all([c.isend(obj, dst) for obj, dst in items])
