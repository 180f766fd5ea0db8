"""Barrier: every algorithm synchronizes, costs what its formula says, and has a nonblocking twin."""

from __future__ import annotations

import math

import pytest

import simcluster as sc
from simcluster.collectives import barrier
from coll_helpers import ALPHA, WORLD_SIZES


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", sorted(barrier.ALGORITHMS))
def test_barrier_waits_for_the_last_rank_to_arrive(transport: str, algorithm: str, world_size: int) -> None:
    late = world_size // 2

    async def main(comm: sc.Comm) -> float:
        if comm.rank == late:
            await comm.sleep(5.0)
        await comm.barrier(algorithm=algorithm)
        return comm.now

    result = sc.run(main, world_size=world_size, transport=transport)
    assert list(result) == [5.0] * world_size
    assert result.times == [5.0] * world_size


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_dissemination_barrier_costs_ceil_log2_p_alphas_and_no_bytes(transport: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.barrier(algorithm="dissemination")

    result = sc.run(main, world_size=world_size, transport=transport,
                    latency=sc.latency.AlphaBeta(ALPHA, 2.0**-30))
    expected = math.ceil(math.log2(world_size)) * ALPHA
    assert math.isclose(result.elapsed, expected, rel_tol=1e-9, abs_tol=0.0)
    assert all(math.isclose(t, expected, rel_tol=1e-9, abs_tol=0.0) for t in result.times)
    assert result.stats.total_bytes == 0
    assert result.stats.total_messages == world_size * math.ceil(math.log2(world_size))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_tree_barrier_costs_twice_its_depth_in_alphas(transport: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.barrier(algorithm="tree")

    result = sc.run(main, world_size=world_size, transport=transport,
                    latency=sc.latency.AlphaBeta(ALPHA, 2.0**-30))
    depth = world_size.bit_length() - 1  # floor(log2 p): the deepest rank has that many set bits
    assert math.isclose(result.elapsed, 2 * depth * ALPHA, rel_tol=1e-9, abs_tol=0.0)
    assert result.stats.total_bytes == 0
    assert result.stats.total_messages == 2 * (world_size - 1)


def test_default_barrier_is_dissemination(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.barrier()

    result = sc.run(main, world_size=5, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, 0.0))
    assert math.isclose(result.elapsed, 3 * ALPHA, rel_tol=1e-9)
    assert barrier.default(1, 0) == barrier.default(1 << 20, 0) == "dissemination"


def test_run_algorithms_forces_the_tree_barrier(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.barrier()

    result = sc.run(main, world_size=4, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, 0.0),
                    algorithms={"barrier": "tree"})
    assert math.isclose(result.elapsed, 4 * ALPHA, rel_tol=1e-9)


@pytest.mark.parametrize("algorithm", sorted(barrier.ALGORITHMS))
def test_ibarrier_completes_only_once_every_rank_has_entered(transport: str, algorithm: str) -> None:
    async def main(comm: sc.Comm) -> tuple[bool, float]:
        if comm.rank == 0:
            await comm.sleep(5.0)
        req = comm.ibarrier(algorithm=algorithm)
        done_early = req.test() if comm.rank else False
        await req
        return done_early, comm.now

    result = sc.run(main, world_size=4, transport=transport)
    assert list(result) == [(False, 5.0)] * 4


def test_two_ibarriers_can_be_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[bool, float]:
        first = comm.ibarrier()
        if comm.rank == 2:
            await comm.sleep(3.0)
        second = comm.ibarrier(algorithm="tree")
        await second
        first_done = first.done()  # every rank entered it at time 0
        await first
        return first_done, comm.now

    assert list(sc.run(main, world_size=5, transport=transport)) == [(True, 3.0)] * 5


def test_barrier_with_unknown_algorithm_lists_the_valid_ones(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(ValueError, match=r"^barrier\(algorithm='nope'\): unknown algorithm; "
                                             r"valid: dissemination, smp, tree$"):
            await comm.barrier(algorithm="nope")
        with pytest.raises(ValueError, match=r"^barrier\(algorithm='nope'\): unknown algorithm"):
            comm.ibarrier(algorithm="nope")

    sc.run(main, world_size=2, transport=transport)


def test_barrier_against_broadcast_is_a_collective_mismatch(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.barrier()
        else:
            await comm.broadcast("x", src=1)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    # checked at the call: the member that enters second fails (which one: the run's seeded order)
    assert error.op == ("barrier()" if error.rank == 0 else "broadcast(src=1)")
    assert str(error) == {
        0: "rank 0: barrier(): this is collective #1 on comm 'world', but rank 1 called "
           "broadcast(src=1); every rank must call collectives in the same order",
        1: "rank 1: broadcast(src=1): this is collective #1 on comm 'world', but rank 0 called "
           "barrier(); every rank must call collectives in the same order"}[error.rank]
