"""Reduce-scatter: every algorithm and size, item-by-item rank-order reduction, fresh results, time."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import reduce_scatter
from simcluster.ops import ReduceOp
from coll_helpers import AFFINE, ALPHA, BETA, CONCAT, MATMUL, WORLD_SIZES, _compose

ALGORITHMS = sorted(reduce_scatter.ALGORITHMS)


def _item(kind: str, rank: int, j: int) -> Any:
    """Item ``j`` of ``rank``'s list: shapes differ per item, empty and 0-d included."""
    if kind == "float64":
        return np.arange(float(j % 4)) * (rank + 1) + j  # item 0 is empty
    if kind == "int16":
        return np.array((rank * 3 + j) % 7 - 3, dtype=np.int16)  # 0-d
    if kind == "int":
        return rank * 100 + j
    if kind == "affine":
        return (1 + (rank + j) % 3) + 1j * (rank - j)
    if kind == "concat":
        return f"{rank}.{j},"
    shears = [[[1, 1], [0, 1]], [[1, 0], [1, 1]], [[2, 1], [1, 1]]]
    return np.array(shears[(rank + j) % 3])


# (kind of item, op, reference reduction of one item over the ranks, in rank order)
CASES: list[tuple[str, Any, Callable[[list[Any]], Any]]] = [
    ("float64", None, lambda xs: functools.reduce(np.add, xs)),
    ("int16", ReduceOp.MAX, lambda xs: np.asarray(functools.reduce(np.maximum, xs))),
    ("int", "sum", sum),
    ("affine", AFFINE, lambda xs: functools.reduce(_compose, xs)),
    ("concat", CONCAT, "".join),
    ("matmul", MATMUL, lambda xs: functools.reduce(np.matmul, xs)),
]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_scatter_gives_rank_r_item_r_reduced_in_rank_order(transport: str, algorithm: str,
                                                                  world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        got = []
        for kind, op, _ in CASES:
            smsgs = [_item(kind, comm.rank, j) for j in range(comm.size)]
            rmsg = await comm.reduce_scatter(smsgs, op=op, algorithm=algorithm)
            if isinstance(rmsg, (np.ndarray, list)):
                assert rmsg is not smsgs[comm.rank]  # a fresh value, never the caller's item
            for j, smsg in enumerate(smsgs):  # the caller's list is left alone
                np.testing.assert_array_equal(smsg, _item(kind, comm.rank, j))
            got.append(rmsg)
        return got

    result = sc.run(main, world_size=world_size, transport=transport)
    for rank, rmsgs in enumerate(result):
        for (kind, _, reference), rmsg in zip(CASES, rmsgs):
            expected = reference([_item(kind, r, rank) for r in range(world_size)])
            assert type(rmsg) is type(expected), kind
            if isinstance(expected, np.ndarray):
                assert rmsg.dtype == expected.dtype and rmsg.shape == expected.shape
            np.testing.assert_array_equal(rmsg, expected)


def test_reduce_scatter_avg_divides_by_the_size(transport: str) -> None:
    async def main(comm: sc.Comm) -> list[float]:
        out = await comm.reduce_scatter([np.full(2, float(comm.rank + j)) for j in range(3)], op="avg")
        return out.tolist()

    assert list(sc.run(main, world_size=3, transport=transport)) == [[1.0] * 2, [2.0] * 2, [3.0] * 2]


def test_two_ireduce_scatters_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[Any, Any]:
        first = comm.ireduce_scatter([np.ones(2) * j for j in range(comm.size)], algorithm="pairwise")
        second = comm.ireduce_scatter([f"{comm.rank}"] * comm.size, op=CONCAT, algorithm="ring")
        word = await second
        return (await first).tolist(), word

    result = sc.run(main, world_size=4, transport=transport)
    assert list(result) == [([4.0 * r] * 2, "0123") for r in range(4)]


def test_reduce_scatter_needs_one_item_per_rank(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: reduce_scatter(op=SUM): objs must be a list with one item per "
                    "rank (3), got a list of length 2")
        with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
            await comm.reduce_scatter([1, 2])

    sc.run(main, world_size=3, transport=transport)


def test_default_rule_follows_mpich() -> None:
    assert reduce_scatter.default(8, 512 * 1024 - 1) == "recursive_halving"
    assert reduce_scatter.default(8, 512 * 1024) == "pairwise"
    assert reduce_scatter.default(7, 0, arrays=False, commutative=False) == "recursive_halving"


# ---- virtual time ----


def _timed(transport: str, world_size: int, item_bytes: int, algorithm: str) -> sc.RunResult:
    async def main(comm: sc.Comm) -> None:
        await comm.reduce_scatter([np.ones(item_bytes // 8) for _ in range(comm.size)], algorithm=algorithm)

    return sc.run(main, world_size=world_size, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))


@pytest.mark.parametrize("algorithm", ["pairwise", "ring"])
@pytest.mark.parametrize("world_size", [2, 3, 5, 8])
def test_pairwise_and_ring_cost_p_minus_1_alpha_plus_n_over_p_beta(transport: str, algorithm: str,
                                                                  world_size: int) -> None:
    item = 8 * 128
    result = _timed(transport, world_size, item, algorithm)
    for t in [result.elapsed, *result.times]:
        assert math.isclose(t, (world_size - 1) * (ALPHA + item * BETA), rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_recursive_halving_on_2_to_the_k_costs_k_alpha_plus_p_minus_1_over_p_n_beta(transport: str,
                                                                                   k: int) -> None:
    p, item = 2**k, 8 * 128
    result = _timed(transport, p, item, "recursive_halving")
    for t in [result.elapsed, *result.times]:
        assert math.isclose(t, k * ALPHA + (p - 1) * item * BETA, rel_tol=1e-9, abs_tol=0.0)
