"""Scatter and gather: every algorithm, every root, arrays of any shape, objects, buf=, twins."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import gather, scatter
from coll_helpers import ALPHA, BETA, WORLD_SIZES, assert_same


OBJECTS: list[Any] = [None, True, 2**70, -1.5, 2j, "s", b"b", [1, "x"], (1, None), {"k": [1.0]}]


def _item(rank: int, root: int) -> Any:
    """Rank ``rank``'s item when ``root`` is the root: shapes, dtypes and types vary by rank."""
    kind = rank % 4
    if kind == 0:
        return np.arange(rank + root, dtype=np.float64).reshape(-1, 1)  # empty when both are 0
    if kind == 1:
        return np.array(rank * 10 + root, dtype=np.int32)  # 0-d
    if kind == 2:
        return (np.arange(3 * rank, dtype=np.int16) + root).reshape(3, rank)
    return OBJECTS[(rank + root) % len(OBJECTS)]


# ---- scatter ----


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", sorted(scatter.ALGORITHMS))
def test_scatter_gives_each_rank_its_element_from_every_root(transport: str, algorithm: str,
                                                             world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        got = []
        for root in range(comm.size):
            objs = [_item(rank, root) for rank in range(comm.size)] if comm.rank == root else None
            got.append(await comm.scatter(objs, src=root, algorithm=algorithm))
        return got

    for rank, rank_got in enumerate(sc.run(main, world_size=world_size, transport=transport)):
        for root, rmsg in enumerate(rank_got):
            assert_same(rmsg, _item(rank, root))


@pytest.mark.parametrize("algorithm", sorted(scatter.ALGORITHMS))
def test_scatter_into_buf_fills_it_in_place(transport: str, algorithm: str) -> None:
    async def main(comm: sc.Comm) -> list[float]:
        objs = [np.full(3, float(rank)) for rank in range(comm.size)] if comm.rank == 1 else None
        buf = np.zeros(3)
        out = await comm.scatter(objs, src=1, buf=buf, algorithm=algorithm)
        assert out is buf
        return [float(x) for x in buf]

    assert list(sc.run(main, world_size=5, transport=transport)) == [[float(r)] * 3 for r in range(5)]


def test_scatter_returns_a_copy_of_the_roots_own_element(transport: str) -> None:
    async def main(comm: sc.Comm) -> bool:
        objs = [np.arange(2), np.arange(2)]
        mine = await comm.scatter(objs if comm.rank == 0 else None, src=0)
        mine[0] = 99
        return bool(objs[comm.rank][0] == 0)

    assert list(sc.run(main, world_size=2, transport=transport)) == [True, True]


def test_two_iscatters_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[Any, Any]:
        first = comm.iscatter(list(range(comm.size)) if comm.rank == 0 else None, src=0)
        second = comm.iscatter([f"s{r}" for r in range(comm.size)] if comm.rank == 2 else None, src=2,
                               algorithm="linear")
        return await second, await first

    assert list(sc.run(main, world_size=3, transport=transport)) == [("s0", 0), ("s1", 1), ("s2", 2)]


def test_scatter_src_out_of_range_names_rank_and_call(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: scatter(src=2): src must be in range(2) for this comm; "
                    "pass the rank that holds the data")
        with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
            await comm.scatter([1, 2], src=2)

    sc.run(main, world_size=2, transport=transport)


def test_scatter_with_unknown_algorithm_lists_the_valid_ones(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(ValueError, match=r"^scatter\(algorithm='nope'\): unknown algorithm; "
                                             r"valid: binomial, linear$"):
            await comm.scatter([1, 2], algorithm="nope")

    sc.run(main, world_size=2, transport=transport)


# ---- gather ----


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", sorted(gather.ALGORITHMS))
def test_gather_collects_every_item_on_every_root(transport: str, algorithm: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        return [await comm.gather(_item(comm.rank, root), dst=root, algorithm=algorithm)
                for root in range(comm.size)]

    for rank, rank_got in enumerate(sc.run(main, world_size=world_size, transport=transport)):
        for root, got in enumerate(rank_got):
            if rank != root:
                assert got is None
                continue
            assert isinstance(got, list) and len(got) == world_size
            for src, rmsg in enumerate(got):
                assert_same(rmsg, _item(src, root))


@pytest.mark.parametrize("algorithm", sorted(gather.ALGORITHMS))
def test_gather_leaves_inputs_alone_and_returns_fresh_arrays(transport: str, algorithm: str) -> None:
    async def main(comm: sc.Comm) -> bool:
        smsg = np.arange(3) + comm.rank
        got = await comm.gather(smsg, dst=1, algorithm=algorithm)
        if got is not None:
            assert got[comm.rank] is not smsg
            got[comm.rank][0] = -1
        return bool(np.array_equal(smsg, np.arange(3) + comm.rank))

    assert list(sc.run(main, world_size=4, transport=transport)) == [True] * 4


def test_linear_gather_serializes_on_the_roots_port(transport: str) -> None:
    nbytes = 4096

    async def main(comm: sc.Comm) -> None:
        await comm.gather(np.ones(nbytes // 8), dst=1, algorithm="linear")

    result = sc.run(main, world_size=6, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    assert math.isclose(result.elapsed, ALPHA + 5 * nbytes * BETA, rel_tol=1e-9, abs_tol=0.0)


def test_two_igathers_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[Any, Any]:
        first = comm.igather(comm.rank, dst=0)
        second = comm.igather(str(comm.rank), dst=2)
        return await second, await first

    assert list(sc.run(main, world_size=3, transport=transport)) == [
        (None, [0, 1, 2]), (None, None), (["0", "1", "2"], None)]


def test_gather_dst_out_of_range_names_rank_and_call(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: gather(dst=-1): dst must be in range(2) for this comm; "
                    "pass the rank that holds the data")
        with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
            comm.igather(1, dst=-1)

    sc.run(main, world_size=2, transport=transport)


def test_default_scatter_and_gather_are_binomial_at_any_size() -> None:
    for size, nbytes in [(1, 0), (7, 1 << 30), (1024, 8)]:
        assert scatter.default(size, nbytes) == gather.default(size, nbytes) == "binomial"
        assert scatter.default(size, nbytes, arrays=False) == "binomial"


def test_gather_against_scatter_is_a_collective_mismatch(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.scatter([1, 2], src=0)
        else:
            await comm.gather("y", dst=1)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    # checked at the call: the member that enters second fails (which one: the run's seeded order)
    assert str(error) == {
        0: "rank 0: scatter(src=0): this is collective #1 on comm 'world', but rank 1 called "
           "gather(dst=1); every rank must call collectives in the same order",
        1: "rank 1: gather(dst=1): this is collective #1 on comm 'world', but rank 0 called "
           "scatter(src=0); every rank must call collectives in the same order"}[error.rank]


def test_gather_against_scatter_that_would_deadlock_is_caught_at_the_call(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.gather(1, dst=0, algorithm="linear")  # would wait for rank 1
        else:
            await comm.sleep(1.0)
            await comm.scatter(None, src=0)  # would wait for rank 0: nothing in flight

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    assert str(error) == ("rank 1: scatter(src=0): this is collective #1 on comm 'world', but rank 0 "
                          "called gather(dst=0); every rank must call collectives in the same order")
