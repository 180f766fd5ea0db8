"""All_to_all: every algorithm on every size, items of any shape and type, exact virtual time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import all_to_all
from coll_helpers import ALPHA, BETA, WORLD_SIZES, assert_same

ALGORITHMS = sorted(all_to_all.ALGORITHMS)


def _item(src: int, dst: int) -> Any:
    """What ``src`` sends ``dst``: arrays of a shape per pair (0-d and empty too) or objects."""
    kind = (src + dst) % 3
    if kind == 0:
        return np.arange(src * dst, dtype=np.int64).reshape(src, dst)  # empty when either is 0
    if kind == 1:
        return np.array(src - dst / 2)  # 0-d float
    return {"from": src, "to": [dst, None]} if src % 2 else f"{src}->{dst}"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", [*ALGORITHMS, None])
def test_all_to_all_delivers_item_rank_of_every_list(transport: str, algorithm: str | None,
                                                     world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        return await comm.all_to_all([_item(comm.rank, dst) for dst in range(comm.size)],
                                     algorithm=algorithm)

    for rank, got in enumerate(sc.run(main, world_size=world_size, transport=transport)):
        assert isinstance(got, list) and len(got) == world_size
        for src, rmsg in enumerate(got):
            assert_same(rmsg, _item(src, rank))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_all_to_all_of_large_arrays_leaves_inputs_alone(transport: str, algorithm: str) -> None:
    async def main(comm: sc.Comm) -> list[int]:
        objs = [np.full(10_000, comm.rank * 10 + dst) for dst in range(comm.size)]
        got = await comm.all_to_all(objs, algorithm=algorithm)
        assert got[comm.rank] is not objs[comm.rank]
        for item in got:
            item[:] = -1
        assert all((objs[dst] == comm.rank * 10 + dst).all() for dst in range(comm.size))
        return [int(a[0]) for a in got]

    result = sc.run(main, world_size=5, transport=transport)
    assert list(result) == [[-1] * 5] * 5


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_pairwise_all_to_all_costs_p_minus_1_exchanges(transport: str, world_size: int) -> None:
    nbytes = 4096

    async def main(comm: sc.Comm) -> None:
        await comm.all_to_all([np.ones(nbytes // 8)] * comm.size, algorithm="pairwise")

    result = sc.run(main, world_size=world_size, transport=transport,
                    latency=sc.latency.AlphaBeta(ALPHA, BETA))
    expected = (world_size - 1) * (ALPHA + nbytes * BETA)
    assert all(math.isclose(t, expected, rel_tol=1e-9, abs_tol=0.0) for t in result.times)


def test_linear_all_to_all_streams_every_item_at_once(transport: str) -> None:
    nbytes = 4096

    async def main(comm: sc.Comm) -> None:
        await comm.all_to_all([np.ones(nbytes // 8)] * comm.size, algorithm="linear")

    result = sc.run(main, world_size=6, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    # every receiving port takes 5 items back to back, booked in the order they were posted
    assert ALPHA + 5 * nbytes * BETA <= result.elapsed <= ALPHA + 9 * nbytes * BETA


def test_default_all_to_all_is_pairwise_at_any_size() -> None:
    for size, nbytes in [(1, 0), (7, 1 << 30), (1024, 8)]:
        assert all_to_all.default(size, nbytes) == "pairwise"
        assert all_to_all.default(size, nbytes, arrays=False) == "pairwise"


def test_two_iall_to_alls_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[list[Any], list[Any]]:
        first = comm.iall_to_all([(comm.rank, dst) for dst in range(comm.size)], algorithm="pairwise")
        second = comm.iall_to_all([comm.rank] * comm.size)
        return await second, await first

    result = sc.run(main, world_size=3, transport=transport)
    assert list(result) == [([0, 1, 2], [(src, rank) for src in range(3)]) for rank in range(3)]


def test_all_to_all_with_a_list_of_the_wrong_length_names_rank_and_call(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(ValueError, match=(
                rf"^rank {comm.rank}: all_to_all\(\): objs must be a list with one item per rank \(2\), "
                r"got a list of length 1$")):
            await comm.all_to_all([1])

    sc.run(main, world_size=2, transport=transport)


def test_all_to_all_with_unknown_algorithm_lists_the_valid_ones(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(ValueError, match=r"^all_to_all\(algorithm='nope'\): unknown algorithm; "
                                             r"valid: linear, pairwise$"):
            await comm.all_to_all([1, 2], algorithm="nope")

    sc.run(main, world_size=2, transport=transport)
