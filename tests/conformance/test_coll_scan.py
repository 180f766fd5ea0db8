"""Scan and exscan: every algorithm and size, rank-order prefixes, nonblocking, exact virtual time."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import algorithms, scan
from simcluster.ops import ReduceOp
from coll_helpers import AFFINE, ALPHA, BETA, CONCAT, SHEARS, WORLD_SIZES, _compose


def _in_order(fn: Callable[[Any, Any], Any]) -> Callable[[list[Any]], Any]:
    return lambda xs: functools.reduce(fn, xs)


# (op, rank's payload, reference reduction of a prefix in rank order)
CASES: list[tuple[Any, Callable[[int], Any], Callable[[list[Any]], Any]]] = [
    (None, lambda r: np.arange(5.0) + r, _in_order(np.add)),
    ("max", lambda r: np.array((r * 5) % 7, dtype=np.int32), lambda xs: np.asarray(functools.reduce(
        np.maximum, xs))),
    ("bor", lambda r: np.zeros((2, 0), dtype=np.uint8), _in_order(np.bitwise_or)),
    ("prod", lambda r: r + 2, _in_order(operator.mul)),
    (ReduceOp.AVG, lambda r: float(r), lambda xs: sum(xs) / len(xs)),
    (AFFINE, lambda r: (1 + (r + np.arange(4)) % 3) + 1j * (r - np.arange(4)), _in_order(_compose)),
    (CONCAT, lambda r: f"{r},", "".join),
    (ReduceOp.custom(np.matmul, commutative=False), lambda r: SHEARS[r % 3].copy(), _in_order(np.matmul)),
]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("name, algorithm", [(name, algo) for name in ("scan", "exscan")
                                              for algo in sorted(algorithms(name))])
def test_prefix_reductions_in_rank_order(transport: str, name: str, algorithm: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        call = comm.scan if name == "scan" else comm.exscan
        got = []
        for op, make, _ in CASES:
            smsg = make(comm.rank)
            rmsg = await call(smsg, op=op, algorithm=algorithm)
            if isinstance(smsg, np.ndarray):
                assert rmsg is not smsg  # a new value; the input is left alone
                np.testing.assert_array_equal(smsg, make(comm.rank))
            got.append(rmsg)
        return got

    result = sc.run(main, world_size=world_size, transport=transport)
    for rank, rmsgs in enumerate(result):
        for (_, make, reference), rmsg in zip(CASES, rmsgs):
            count = rank + 1 if name == "scan" else rank
            if count == 0:
                assert rmsg is None
                continue
            expected = reference([make(r) for r in range(count)])
            assert type(rmsg) is type(expected)
            if isinstance(expected, np.ndarray):
                assert rmsg.dtype == expected.dtype and rmsg.shape == expected.shape
            np.testing.assert_array_equal(rmsg, expected)


def test_two_iscans_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[Any, Any]:
        first = comm.iscan(np.ones(3) * comm.rank)
        second = comm.iexscan(f"{comm.rank}", op=CONCAT, algorithm="linear")
        word = await second
        return (await first).tolist(), word

    result = sc.run(main, world_size=4, transport=transport)
    assert list(result) == [([0.0] * 3, None), ([1.0] * 3, "0"), ([3.0] * 3, "01"), ([6.0] * 3, "012")]


def test_scan_lxor_on_python_bools(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[Any, Any]:
        return await comm.scan(True, op="lxor"), await comm.exscan(comm.rank % 2 == 0, op="land")

    result = sc.run(main, world_size=4, transport=transport)
    assert list(result) == [(True, None), (False, True), (True, False), (False, False)]


def test_default_rule_follows_mpich() -> None:
    for size in (1, 2, 7, 64):
        assert scan.default(size, 1 << 20) == "recursive_doubling"
        assert scan.default(size, 8, commutative=False, arrays=False) == "recursive_doubling"


# ---- virtual time ----


@pytest.mark.parametrize("name", ["scan", "exscan"])
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_recursive_doubling_on_2_to_the_k_costs_k_alpha_plus_n_beta(transport: str, name: str,
                                                                   k: int) -> None:
    n = 8 * 512

    async def main(comm: sc.Comm) -> None:
        await getattr(comm, name)(np.ones(n // 8), algorithm="recursive_doubling")

    result = sc.run(main, world_size=2**k, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    for t in [result.elapsed, *result.times]:
        assert math.isclose(t, k * (ALPHA + n * BETA), rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("name", ["scan", "exscan"])
def test_linear_scan_is_a_chain(transport: str, name: str) -> None:
    n = 8 * 512

    async def main(comm: sc.Comm) -> None:
        await getattr(comm, name)(np.ones(n // 8), algorithm="linear")

    result = sc.run(main, world_size=6, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    for rank, t in enumerate(result.times):
        assert math.isclose(t, rank * (ALPHA + n * BETA), rel_tol=1e-9, abs_tol=0.0)
