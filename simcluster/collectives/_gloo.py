"""gloo's ring, as ``ProcessGroupGloo`` runs it on CPU tensors: its blocks and its order of additions.

torch's gloo backend reduces dense CPU tensors with ``gloo::allreduce``
(``AsyncAllreduceWork`` in torch's ``ProcessGroupGlooDetail.hpp``, which sets
no algorithm, so gloo's ``allreduce.cc`` runs ``ring``) and ``gloo::reduce``
(``reduce.cc``, a ring too). Both cut the buffer into ``numSegments``
segments of ``segmentBytes``, ``S = numSegments / p`` of them per rank; the
``S`` segments from ``c*S`` on form *block* ``c`` (bytes past the end make
the last blocks short or empty). Where they differ is how the segments are
sized, from ``maxSegmentSize`` = 1 MiB (``allreduce.h`` / ``reduce.h``):

- ``allreduce.cc`` ``ring``: ``numSegments = roundUp(max(ceil(bytes /
  maxSegment), 2p), p)``, then ``segmentBytes = roundUp(ceil(bytes /
  numSegments), elementSize)``;
- ``reduce.cc``: ``segmentBytes = roundUp(min(ceil(bytes / 2p), maxSegment),
  elementSize)``, then ``numSegments = roundUp(max(ceil(bytes /
  segmentBytes), 2p), p)``.

The two agree up to ``2p`` MiB and differ above (:func:`all_reduce_bounds`,
:func:`reduce_bounds`).

Order: a rank sends to ``rank - 1`` and receives from ``rank + 1``, and
reduces ``out = local + received``. Block ``c`` leaves rank ``c - 1`` as it
is, and each rank it passes adds its own operand in front, so rank ``c``
ends with ``x[c] + (x[c+1] + (... + (x[c-2] + x[c-1])))`` (indices mod
``p``). The all_reduce then passes the finished blocks on round the same
ring; the reduce sends each rank's block to the root.

Here each block travels as one message per step (gloo pipelines the ``S``
segments of a block, two in flight, so that a reduction overlaps the next
transfer): the same bytes in ``2(p-1)`` steps, the ring's textbook time.
gloo posts no send or receive of length 0, so neither do these: a buffer of
fewer elements than ranks leaves blocks empty, and the ring then carries
only its full blocks (a one-float all_reduce on ``p`` ranks is ``2(p-1)``
messages, not ``2p(p-1)``; the last rank still ends after ``2(p-1)`` hops).

This module holds the layout and the order (``_cost`` and ``analytic`` read
them); the messages are ``_reduction.gloo_reduce_scatter`` and
``gloo_all_gather``. Rule 1: for commutative elementwise ops only; the
callers fall back to the rank-ordered ring for anything else. Rule 2: it
imports nothing of comm, so the layout costs no import knot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .. import arrays

ReduceOp = Any  # (``ops.ReduceOp``: this module stays outside the modules that import comm)

MAX_SEGMENT: Final = 1 << 20
"""gloo's ``kMaxSegmentSize``: the largest segment, in bytes, for all_reduce and reduce."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil(a, b) * b


def blocks(like: Any, n: int, p: int, bounds: Callable[[int, int, int], list[int]]) -> list[int]:
    """Return gloo's blocks (``bounds``: :func:`all_reduce_bounds` or :func:`reduce_bounds`) of ``n``
    elements of ``like``'s dtype on ``p`` ranks.

    gloo sees a complex tensor as its real view (torch's ``view_as_real``):
    its blocks are laid out in real elements, and halved here (exact while
    a block holds an even number of them, as it does below ``2p`` MiB).
    """
    count = arrays.size(like)
    size = arrays.nbytes(like) // count if count else 1
    if arrays.kind(like) == "c":
        return [b // 2 for b in bounds(2 * n, size // 2, p)]
    return bounds(n, size, p)


def _blocks(n: int, size: int, segment_bytes: int, segments: int, p: int) -> list[int]:
    """Return the ``p + 1`` element offsets of the blocks: ``S`` segments each, cut at ``n``."""
    per_block = segments // p * (segment_bytes // size)
    full = min(p, -(-n // per_block)) if per_block else 0  # blocks holding elements; the rest are at n
    return [c * per_block for c in range(full)] + [n] * (p + 1 - full)


def all_reduce_bounds(n: int, size: int, p: int) -> list[int]:
    """Return the blocks of ``gloo::allreduce``'s ring over ``n`` elements of ``size`` bytes on ``p`` ranks."""
    total = n * size
    largest = size * max(1, MAX_SEGMENT // size)
    segments = _round_up(max(_ceil(total, largest), 2 * p), p)
    segment_bytes = _round_up(_ceil(total, segments), size)
    return _blocks(n, size, segment_bytes, segments, p)


def reduce_bounds(n: int, size: int, p: int) -> list[int]:
    """Return the blocks of ``gloo::reduce``'s ring over ``n`` elements of ``size`` bytes on ``p`` ranks."""
    total = n * size
    largest = size * (MAX_SEGMENT // size)
    segment_bytes = max(size, _round_up(min(_ceil(total, 2 * p), largest), size))
    segments = _round_up(max(_ceil(total, segment_bytes), 2 * p), p)
    return _blocks(n, size, segment_bytes, segments, p)


def applies(obj: Any, op: ReduceOp) -> bool:
    """Whether gloo's order applies: an array (of any library) under a commutative elementwise op."""
    return op.commutative and op.elementwise and arrays.is_array(obj)


# ---- the order, without messages (analytic fidelity) ----


def fold_blocks(flats: list[Any], bounds: list[int], op: ReduceOp) -> Any:
    """Return the reduction of the ranks' flat operands in gloo's ring order (one new flat array)."""
    p = len(flats)
    pieces = []
    for c in range(p):
        lo, hi = bounds[c], bounds[c + 1]
        value = flats[(c - 1) % p][lo:hi]
        for k in range(2, p + 1):
            value = op.apply(flats[(c - k) % p][lo:hi], value)
        pieces.append(value)
    return arrays.concat(pieces) if pieces else flats[0]


# ---- the torch backend's choice ----


def algorithm(comm: Any, collective: str, name: str) -> str | None:
    """What gloo would run for ``collective`` on ``comm`` (its algorithm ``name``), as the torch
    backend asks on CPU; None where ``run(algorithms=...)`` names one, which wins."""
    return None if collective in comm.group.engine.algorithms else name
