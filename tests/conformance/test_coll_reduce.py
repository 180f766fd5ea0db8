"""Reduce: every algorithm, size and root; in place on the root only; nonblocking; exact virtual time."""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import reduce
from simcluster.ops import ReduceOp
from coll_helpers import AFFINE, ALPHA, BETA, CONCAT, WORLD_SIZES, _compose

ALGORITHMS = sorted(reduce.ALGORITHMS)


def _np(ufunc: np.ufunc) -> Callable[[list[Any]], Any]:
    return lambda xs: np.asarray(ufunc.reduce(np.stack(xs), axis=0)).astype(xs[0].dtype)


# (op, rank's payload, reference reduction in rank order)
CASES: list[tuple[Any, Callable[[int], Any], Callable[[list[Any]], Any]]] = [
    (None, lambda r: np.arange(7.0) * (r + 1), _np(np.add)),
    ("prod", lambda r: np.arange(12, dtype=np.int32).reshape(3, 4) % (r + 2), _np(np.multiply)),
    (ReduceOp.MIN, lambda r: np.array(float(r % 5)), _np(np.minimum)),
    (ReduceOp.SUM, lambda r: np.zeros((0, 3), dtype=np.int8), _np(np.add)),
    (ReduceOp.BXOR, lambda r: np.arange(3000, dtype=np.int64) * (r + 1), _np(np.bitwise_xor)),
    (ReduceOp.MAX, lambda r: r * 7 % 5, max),
    (AFFINE, lambda r: (1 + (r + np.arange(600)) % 3) + 1j * (r - np.arange(600)),
     lambda xs: functools.reduce(_compose, xs)),
    (CONCAT, lambda r: [r], lambda xs: functools.reduce(operator.add, xs)),
]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_gives_the_root_the_rank_order_reduction_from_every_root(transport: str, algorithm: str,
                                                                        world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        got = []
        for root in range(comm.size):
            for op, make, _ in CASES:
                smsg = make(comm.rank)
                before = smsg.copy() if isinstance(smsg, (np.ndarray, list)) else smsg
                rmsg = await comm.reduce(smsg, dst=root, op=op, algorithm=algorithm)
                if comm.rank != root:
                    assert rmsg is None
                    np.testing.assert_array_equal(smsg, before)  # non-root buffers unchanged
                    continue
                if isinstance(smsg, np.ndarray):
                    assert rmsg is smsg  # in place, and the same object returned
                    rmsg = rmsg.copy()
                got.append(rmsg)
        return got

    result = sc.run(main, world_size=world_size, transport=transport)
    for root in range(world_size):
        for (_, make, reference), rmsg in zip(CASES, result[root][root * len(CASES):]):
            expected = reference([make(r) for r in range(world_size)])
            assert type(rmsg) is type(expected)
            if isinstance(expected, np.ndarray):
                assert rmsg.dtype == expected.dtype and rmsg.shape == expected.shape
            np.testing.assert_array_equal(rmsg, expected)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_of_python_numbers_and_avg(transport: str, algorithm: str) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        buf = np.full(3, comm.rank, dtype=np.float32)
        return [await comm.reduce(comm.rank + 1, dst=1, algorithm=algorithm),
                await comm.reduce(float(comm.rank), dst=2, op="avg", algorithm=algorithm),
                await comm.reduce(buf, dst=0, op=ReduceOp.AVG, algorithm=algorithm), buf.tolist()]

    result = sc.run(main, world_size=5, transport=transport)
    assert result[1][0] == 15 and type(result[1][0]) is int
    assert result[2][1] == 2.0
    assert result[0][2].dtype == np.float32 and result[0][3] == [2.0] * 3
    for rank in (2, 3, 4):
        assert result[rank][0] is None and result[rank][2] is None
        assert result[rank][3] == [float(rank)] * 3


def test_two_ireduces_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[Any, Any]:
        buf = np.arange(4) + comm.rank
        first = comm.ireduce(buf, dst=0, algorithm="binomial")
        second = comm.ireduce(f"{comm.rank}", dst=2, op=CONCAT, algorithm="linear")
        word = await second
        out = await first
        return (out.tolist() if out is not None else None), word

    result = sc.run(main, world_size=3, transport=transport)
    assert list(result) == [([3, 6, 9, 12], None), (None, None), (None, "012")]


def test_reduce_root_out_of_range_names_rank_and_call(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: reduce(dst=3, op=SUM): dst must be in range(3) for this comm; "
                    "pass the rank that holds the data")
        with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
            await comm.reduce(1, dst=3)

    sc.run(main, world_size=3, transport=transport)


def test_bor_on_complex_names_the_op_and_the_dtype(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: reduce(dst=0, op=BOR): BOR is not defined for dtype complex64; "
                    "use an integer or bool dtype, or another op")
        with pytest.raises(TypeError, match="^" + re.escape(expected) + "$"):
            await comm.reduce(np.ones(2, dtype=np.complex64), op="bor")

    sc.run(main, world_size=2, transport=transport)


def test_default_rule_follows_mpich() -> None:
    assert reduce.default(8, 2048) == "binomial"
    assert reduce.default(8, 2049) == "rabenseifner"
    assert reduce.default(7, 1 << 30) == "rabenseifner"
    assert reduce.default(8, 1 << 30, commutative=False) == "binomial"
    assert reduce.default(8, 1 << 30, arrays=False) == "binomial"
    assert reduce.default(1024, 4096) == "binomial"


# ---- virtual time ----


def _timed(transport: str, world_size: int, nbytes: int, root: int, algorithm: str) -> sc.RunResult:
    async def main(comm: sc.Comm) -> None:
        await comm.reduce(np.ones(nbytes // 8), dst=root, algorithm=algorithm)

    return sc.run(main, world_size=world_size, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_binomial_reduce_on_2_to_the_k_costs_k_alpha_plus_n_beta(transport: str, k: int) -> None:
    n = 8 * 256
    result = _timed(transport, 2**k, n, 2**k - 1, "binomial")
    assert math.isclose(result.elapsed, k * (ALPHA + n * BETA), rel_tol=1e-9, abs_tol=0.0)
    assert result.elapsed == result.times[2**k - 1]


@pytest.mark.parametrize("root", [0, 3])
def test_linear_reduce_serializes_on_the_roots_port(transport: str, root: int) -> None:
    n = 8 * 256
    result = _timed(transport, 5, n, root, "linear")
    assert math.isclose(result.elapsed, ALPHA + 4 * n * BETA, rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rabenseifner_reduce_on_2_to_the_k(transport: str, k: int) -> None:
    p, n = 2**k, 8 * 1024
    result = _timed(transport, p, n, 1, "rabenseifner")
    expected = 2 * k * ALPHA + 2 * (p - 1) / p * n * BETA
    assert math.isclose(result.times[1], expected, rel_tol=1e-9, abs_tol=0.0)
    assert result.elapsed == result.times[1]
