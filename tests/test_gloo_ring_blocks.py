"""gloo's ring on buffers with fewer elements than ranks: empty blocks travel nowhere, as in gloo.

gloo posts no send or receive of length 0 (``allreduce.cc``: each segment is sent only when its
length is above 0), so a one-float all_reduce on ``p`` ranks passes one block round the ring in
``2(p-1)`` messages, and the rank that finishes last still waits ``2(p-1)`` hops.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import _gloo

ALPHA, BETA = 1e-6, 1e-9


async def _ring(comm: sc.Comm, n: int) -> tuple[float, list[float]]:
    x = np.arange(n, dtype=np.float32) + comm.rank
    y = await comm.all_reduce(x, algorithm="gloo_ring")
    return comm.now, y.tolist()


def _full_blocks(n: int, p: int) -> int:
    bounds = _gloo.all_reduce_bounds(n, 4, p)
    return sum(hi > lo for lo, hi in zip(bounds, bounds[1:]))


@pytest.mark.parametrize(("n", "p"), [(1, 16), (3, 16), (1, 5), (40, 16), (16, 16)])
def test_the_ring_sends_only_blocks_that_hold_elements(n: int, p: int) -> None:
    result = sc.run(_ring, p, args=(n,), latency=sc.latency.AlphaBeta(ALPHA, BETA))
    expected = [float(sum(i + r for r in range(p))) for i in range(n)]
    assert [values for _, values in result] == [expected] * p
    assert result.stats.total_messages == 2 * (p - 1) * _full_blocks(n, p)
    # the last rank to finish has waited the ring's 2(p-1) hops of its largest block
    largest = max(np.diff(_gloo.all_reduce_bounds(n, 4, p))) * 4
    assert result.elapsed == pytest.approx(2 * (p - 1) * (ALPHA + largest * BETA), rel=1e-9)


def test_a_one_float_ring_finishes_each_rank_when_the_block_has_passed_it() -> None:
    """Rank r gets the finished block 2(p-1) - r hops after the start, r = 1 .. p-1; rank 0 first
    (after p-1 hops it holds the reduced block, then it only sends)."""
    p = 8
    result = sc.run(_ring, p, args=(1,), latency=sc.latency.AlphaBeta(ALPHA, BETA))
    hop = ALPHA + 4 * BETA
    finish = [now for now, _ in result]
    assert finish[1] == pytest.approx(2 * (p - 1) * hop)
    assert all(math.isclose(finish[r], (2 * (p - 1) - (r - 1)) * hop) for r in range(1, p))
    assert finish[0] == pytest.approx((p - 1) * hop)
