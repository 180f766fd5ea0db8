"""All-reduce: every algorithm and size, every op, in place, nonblocking, exact virtual time."""

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
from simcluster.collectives import all_reduce
from simcluster.ops import ReduceOp
from coll_helpers import AFFINE, ALPHA, BETA, CONCAT, MATMUL, SHEARS, WORLD_SIZES, assert_same

ALGORITHMS = sorted(all_reduce.ALGORITHMS)


def _affine(rank: int, n: int) -> np.ndarray:
    i = np.arange(n)
    return (1 + (rank + i) % 3) + 1j * (rank - i)


def _np(ufunc: np.ufunc) -> Callable[[list[Any]], Any]:
    return lambda xs: np.asarray(ufunc.reduce(np.stack(xs), axis=0)).astype(xs[0].dtype)


def _in_order(op: ReduceOp) -> Callable[[list[Any]], Any]:
    return lambda xs: functools.reduce(op.apply, xs)


# (op, this rank's payload, the reference reduction of every rank's payload in rank order)
CASES: list[tuple[Any, Callable[[int], Any], Callable[[list[Any]], Any]]] = [
    (None, lambda r: np.arange(7.0) * (r + 1), _np(np.add)),
    ("sum", lambda r: np.arange(12, dtype=np.int32).reshape(3, 4) - r, _np(np.add)),
    (ReduceOp.MAX, lambda r: np.array(float(r % 5)), _np(np.maximum)),
    (ReduceOp.SUM, lambda r: np.zeros(0, dtype=np.float32), _np(np.add)),
    (ReduceOp.SUM, lambda r: np.arange(20_000.0).reshape(100, 200) + r, _np(np.add)),
    (ReduceOp.SUM, lambda r: 10**20 + r, sum),
    (ReduceOp.MIN, lambda r: 2.5 - r, min),
    (AFFINE, lambda r: _affine(r, 5), _in_order(AFFINE)),
    (AFFINE, lambda r: _affine(r, 1).reshape(()), _in_order(AFFINE)),
    (CONCAT, lambda r: f"{r},", "".join),
    (MATMUL, lambda r: SHEARS[r % 3].copy(), _in_order(MATMUL)),
]


# ---- results ----


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_all_reduce_gives_every_rank_the_rank_order_reduction(transport: str, algorithm: str,
                                                               world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        got = []
        for op, make, _ in CASES:
            smsg = make(comm.rank)
            before = smsg.copy() if isinstance(smsg, np.ndarray) else smsg
            rmsg = await comm.all_reduce(smsg, op=op, algorithm=algorithm)
            if isinstance(smsg, np.ndarray):
                assert rmsg is smsg  # in place, and the same object returned
                rmsg = rmsg.copy()
            else:
                assert smsg == before
            got.append(rmsg)
        return got

    result = sc.run(main, world_size=world_size, transport=transport)
    for (_, make, reference), *rmsgs in zip(CASES, *result):
        expected = reference([make(r) for r in range(world_size)])
        for rmsg in rmsgs:
            assert_same(rmsg, expected)


OP_PAYLOADS: dict[str, Callable[[int], Any]] = {
    "int32": lambda r: (np.arange(6, dtype=np.int32) * 5 + 3 * r) % 7 - 2,
    "uint8": lambda r: ((np.arange(6) + r) % 4).astype(np.uint8),
    "float64": lambda r: (np.arange(6.0) * 3 - 2 * r) % 5 - 1.0,
    "complex128": lambda r: (np.arange(6) % 3 - r % 2) + 1j * (np.arange(6) % 2),
    "bool": lambda r: (np.arange(6) + r) % 3 == 0,
    "float32[]": lambda r: np.array(r % 3 - 1, dtype=np.float32),
    "int": lambda r: r % 4 - 1,
    "float": lambda r: r * 0.5 - 1,
    "bool_": lambda r: r % 3 == 0,
}
REAL = {"int32", "uint8", "float64", "bool", "float32[]", "int", "float", "bool_"}
INTEGER = {"int32", "uint8", "bool", "int", "bool_"}
FITS: dict[str, set[str]] = {
    "SUM": set(OP_PAYLOADS), "PRODUCT": set(OP_PAYLOADS), "MIN": REAL, "MAX": REAL,
    "BAND": INTEGER, "BOR": INTEGER, "BXOR": INTEGER,
    "LAND": set(OP_PAYLOADS), "LOR": set(OP_PAYLOADS), "LXOR": set(OP_PAYLOADS),
    "AVG": {"float64", "complex128", "float32[]", "int", "float"},
}
UFUNCS: dict[str, Any] = {
    "SUM": np.add, "PRODUCT": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
    "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
    "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor,
}
PYTHON: dict[str, Callable[[list[Any]], Any]] = {
    "SUM": sum, "PRODUCT": math.prod, "MIN": min, "MAX": max, "AVG": lambda xs: sum(xs) / len(xs),
    "BAND": lambda xs: functools.reduce(operator.and_, xs),
    "BOR": lambda xs: functools.reduce(operator.or_, xs),
    "BXOR": lambda xs: functools.reduce(operator.xor, xs),
    "LAND": all, "LOR": any, "LXOR": lambda xs: sum(map(bool, xs)) % 2 == 1,
}


def _reference(op: str, values: list[Any]) -> Any:
    if not isinstance(values[0], np.ndarray):
        return PYTHON[op](values)
    stacked = np.stack(values)
    if op == "AVG":
        return np.asarray(stacked.mean(axis=0)).astype(stacked.dtype)
    return np.asarray(UFUNCS[op].reduce(stacked, axis=0)).astype(stacked.dtype)


@pytest.mark.parametrize("algorithm", [None, "ring", "rabenseifner"])
@pytest.mark.parametrize("op", sorted(FITS))
def test_every_op_on_every_dtype_it_is_defined_for(transport: str, op: str, algorithm: str | None) -> None:
    kinds = sorted(FITS[op])

    async def main(comm: sc.Comm) -> list[Any]:
        return [await comm.all_reduce(OP_PAYLOADS[kind](comm.rank), op=op, algorithm=algorithm)
                for kind in kinds]

    result = sc.run(main, world_size=5, transport=transport)
    for kind, *rmsgs in zip(kinds, *result):
        expected = _reference(op, [OP_PAYLOADS[kind](r) for r in range(5)])
        for rmsg in rmsgs:
            assert type(rmsg) is type(expected), kind
            if isinstance(expected, np.ndarray):
                assert rmsg.dtype == expected.dtype and rmsg.shape == expected.shape
            np.testing.assert_allclose(rmsg, expected, rtol=1e-12)


def test_python_numbers_come_back_as_new_values_of_their_type(transport: str) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        return [await comm.all_reduce(3), await comm.all_reduce(1.5, op="max"),
                await comm.all_reduce(2, op=ReduceOp.AVG), await comm.all_reduce(True, op="land"),
                await comm.all_reduce(np.int16(2), op="product")]

    for rmsgs in sc.run(main, world_size=3, transport=transport):
        assert rmsgs == [9, 1.5, 2.0, True, 8]
        assert [type(x) for x in rmsgs] == [int, float, float, bool, np.int16]


def test_avg_of_floats_divides_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> list[float]:
        buf = np.full(4, float(comm.rank))
        await comm.all_reduce(buf, op="avg")
        return buf.tolist()

    assert list(sc.run(main, world_size=4, transport=transport)) == [[1.5] * 4] * 4


# ---- nonblocking ----


def test_two_iall_reduces_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[list[float], str]:
        buf = np.arange(5.0) * comm.rank
        first = comm.iall_reduce(buf, algorithm="ring")
        second = comm.iall_reduce(f"{comm.rank}", op=CONCAT)
        await comm.sleep(1.0)  # the rank goes on while both progress
        word = await second
        assert await first is buf
        return buf.tolist(), word

    expected = ((np.arange(5.0) * 6).tolist(), "0123")
    assert list(sc.run(main, world_size=4, transport=transport)) == [expected] * 4


# ---- errors ----


def test_repeated_calls_keep_their_op_algorithm_and_checks(transport: str) -> None:
    # what a call works out first (op, checks, algorithm) is remembered per op, algorithm,
    # dtype and shape; each of these calls must still get its own
    async def main(comm: sc.Comm) -> object:
        got = []
        for _ in range(2):
            got.append(float((await comm.all_reduce(np.full(3, comm.rank + 1.0)))[0]))
            got.append(float((await comm.all_reduce(np.full(3, comm.rank + 1.0), op=sc.ReduceOp.MAX))[0]))
            got.append(int((await comm.all_reduce(np.full(3, comm.rank + 1), op="prod"))[0]))
            got.append(await comm.all_reduce(comm.rank + 1.0))
            got.append(float((await comm.all_reduce(np.full(2, comm.rank + 1.0), algorithm="ring"))[0]))
            for _ in range(2):  # refused every time, never remembered
                try:
                    await comm.all_reduce(np.ones(3), op=sc.ReduceOp.BAND)
                except TypeError as exc:
                    got.append(str(exc))
        return got

    errors = ("rank {}: all_reduce(op=BAND): BAND is not defined for dtype float64; use an integer or "
              "bool dtype, or another op")
    result = sc.run(main, world_size=3, transport=transport, trace=True)
    for rank in range(3):
        assert result[rank] == [6.0, 3.0, 6, 6.0, 6.0, errors.format(rank), errors.format(rank)] * 2
    algorithms = [span.args["algorithm"] for span in result.trace.spans
                  if span.name == "all_reduce" and span.rank == 0]
    assert algorithms == ["recursive_doubling", "recursive_doubling", "recursive_doubling",
                          "recursive_doubling", "ring"] * 2


def test_unknown_algorithm_lists_the_valid_ones(transport: str) -> None:
    message = ("all_reduce(algorithm='rng'): unknown algorithm; valid: gloo_ring, linear, nccl_ring, "
               "nccl_tree, rabenseifner, recursive_doubling, reduce_broadcast, ring, smp")

    async def main(comm: sc.Comm) -> None:
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            await comm.all_reduce(1.0, algorithm="rng")
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            comm.iall_reduce(1.0, algorithm="rng")

    sc.run(main, world_size=2, transport=transport)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        sc.run(main, world_size=2, transport=transport, algorithms={"all_reduce": "rng"})


def test_band_on_floats_names_the_op_and_the_dtype(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: all_reduce(op=BAND): BAND is not defined for dtype float64; "
                    "use an integer or bool dtype, or another op")
        with pytest.raises(TypeError, match="^" + re.escape(expected) + "$"):
            await comm.all_reduce(np.ones(3), op=ReduceOp.BAND)
        with pytest.raises(TypeError, match="^" + re.escape(expected) + "$"):
            comm.iall_reduce(np.ones(3), op="band")

    sc.run(main, world_size=2, transport=transport)


def test_avg_on_an_int_array_asks_for_a_float_dtype(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(TypeError, match=r"^rank \d: all_reduce\(op=AVG\): AVG is not defined for "
                                            r"dtype int64 arrays.*; use a float dtype"):
            await comm.all_reduce(np.ones(3, dtype=np.int64), op="avg")

    sc.run(main, world_size=2, transport=transport)


def test_unknown_op_name_lists_the_valid_ones(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(TypeError, match=r"^rank \d: all_reduce: op='plus' is not a reduction op; "
                                            r"valid: AVG, BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MIN, "
                                            r"PRODUCT, SUM \(any case\), or ReduceOp.custom\(fn\)$"):
            await comm.all_reduce(1, op="plus")

    sc.run(main, world_size=2, transport=transport)


# ---- choosing an algorithm ----


def test_default_rule_follows_mpich() -> None:
    assert all_reduce.default(8, 2048) == "recursive_doubling"
    assert all_reduce.default(8, 2049) == "rabenseifner"
    assert all_reduce.default(8, 1 << 30) == "rabenseifner"
    assert all_reduce.default(6, 1 << 19) == "rabenseifner"
    assert all_reduce.default(6, 1 << 20) == "ring"
    assert all_reduce.default(1024, 4096) == "recursive_doubling"  # fewer than 8 bytes per rank
    assert all_reduce.default(6, 1 << 30, commutative=False) == "recursive_doubling"
    assert all_reduce.default(6, 1 << 30, arrays=False) == "recursive_doubling"
    assert all_reduce.default(1, 1 << 30) in all_reduce.ALGORITHMS


def test_run_algorithms_forces_the_ring(transport: str) -> None:
    n = 8 * 4 * 512

    async def main(comm: sc.Comm) -> float:
        buf = np.ones(n // 8)
        await comm.all_reduce(buf)
        return float(buf[0])

    latency = sc.latency.AlphaBeta(ALPHA, BETA)
    forced = sc.run(main, world_size=4, transport=transport, latency=latency,
                    algorithms={"all_reduce": "ring"})
    assert list(forced) == [4.0] * 4
    assert math.isclose(forced.elapsed, 2 * 3 * (ALPHA + n / 4 * BETA), rel_tol=1e-9, abs_tol=0.0)
    chosen = sc.run(main, world_size=4, transport=transport, latency=latency)
    assert all_reduce.default(4, n) == "rabenseifner"
    assert math.isclose(chosen.elapsed, 2 * 2 * ALPHA + 2 * 3 / 4 * n * BETA, rel_tol=1e-9, abs_tol=0.0)


# ---- virtual time ----


def _timed(transport: str, world_size: int, nbytes: int, algorithm: str,
           latency: sc.latency.LatencyModel) -> sc.RunResult:
    async def main(comm: sc.Comm) -> None:
        await comm.all_reduce(np.ones(nbytes // 8), algorithm=algorithm)

    return sc.run(main, world_size=world_size, transport=transport, latency=latency)


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("per_rank", [8 * 64, 8 * 12_000], ids=["eager", "rendezvous"])
def test_ring_costs_2_p_minus_1_alpha_plus_n_over_p_beta(transport: str, world_size: int,
                                                         per_rank: int) -> None:
    n = per_rank * world_size
    result = _timed(transport, world_size, n, "ring", sc.latency.AlphaBeta(ALPHA, BETA))
    expected = 2 * (world_size - 1) * (ALPHA + n / world_size * BETA)
    assert math.isclose(result.elapsed, expected, rel_tol=1e-9, abs_tol=0.0)
    for t in result.times:
        assert math.isclose(t, expected, rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [8 * 64, 8 * 12_000], ids=["eager", "rendezvous"])
def test_recursive_doubling_on_2_to_the_k_costs_k_alpha_plus_n_beta(transport: str, k: int, n: int) -> None:
    result = _timed(transport, 2**k, n, "recursive_doubling", sc.latency.AlphaBeta(ALPHA, BETA))
    for t in [result.elapsed, *result.times]:
        assert math.isclose(t, k * (ALPHA + n * BETA), rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rabenseifner_on_2_to_the_k_costs_2k_alpha_plus_2_p_minus_1_over_p_n_beta(transport: str,
                                                                                  k: int) -> None:
    p, n = 2**k, 8 * 1024
    result = _timed(transport, p, n, "rabenseifner", sc.latency.AlphaBeta(ALPHA, BETA))
    for t in [result.elapsed, *result.times]:
        assert math.isclose(t, 2 * k * ALPHA + 2 * (p - 1) / p * n * BETA, rel_tol=1e-9, abs_tol=0.0)


def test_reductions_charge_gamma_per_byte_reduced(transport: str) -> None:
    gamma, n = 2.0**-25, 8 * 1000
    result = _timed(transport, 4, n, "recursive_doubling", sc.latency.AlphaBeta(0.0, 0.0, gamma))
    for t in [result.elapsed, *result.times]:
        assert math.isclose(t, 2 * n * gamma, rel_tol=1e-9, abs_tol=0.0)  # two steps, n bytes each


def test_arrays_of_different_shapes_are_a_named_mismatch(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.all_reduce(np.ones(3 + comm.rank))

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    # checked at the call: the member that enters second fails (which one: the run's seeded order)
    assert str(error) == {
        0: "rank 0: all_reduce(op=SUM): rank 1 passed float64[4] but this rank passed float64[3]; "
           "every rank must pass arrays of one shape and dtype",
        1: "rank 1: all_reduce(op=SUM): rank 0 passed float64[3] but this rank passed float64[4]; "
           "every rank must pass arrays of one shape and dtype"}[error.rank]
