"""The testing kit with synchronous ranks: plain functions using simcluster.MPI's API."""

from __future__ import annotations

import pytest

import simcluster as sc
from simcluster import MPI


@sc.testing.distributed(world_size=3, latency=sc.latency.Constant(1e-6))
def test_a_plain_function_runs_as_a_distributed_test(comm: MPI.Intracomm) -> None:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    assert comm.sendrecv(comm.rank, dest=right, source=left) == left
    assert MPI.Wtime() == pytest.approx(1e-6)


@pytest.mark.parametrize("world_size", [1, 2, 5])
@sc.testing.distributed()
def test_a_plain_function_takes_the_world_size_parameter(comm: MPI.Intracomm,
                                                          world_size: int) -> None:
    assert comm.allreduce(1) == world_size == comm.Get_size()


def test_a_failing_plain_rank_fails_the_test_with_its_message() -> None:
    @sc.testing.distributed(world_size=2)
    def check(comm: MPI.Intracomm) -> None:
        assert comm.allreduce(comm.rank) == 0, f"sum was {comm.allreduce(comm.rank)}"

    with pytest.raises(AssertionError, match=r"^rank [01]: sum was 1"):
        check()


def _race(comm: MPI.Intracomm) -> list[str] | None:
    if comm.rank == 0:
        first = comm.recv(source=MPI.ANY_SOURCE)
        second = comm.recv(source=MPI.ANY_SOURCE)
        assert first == "ready", f"expected 'ready' first, got {first!r}"
        return [first, second]
    comm.send("data" if comm.rank == 1 else "ready", dest=0)
    return None


def _arrivals(comm: MPI.Intracomm) -> tuple[int, ...] | None:
    if comm.rank == 0:
        return tuple(comm.recv(source=MPI.ANY_SOURCE) for _ in range(comm.size - 1))
    comm.send(comm.rank, dest=0)
    return None


def test_explore_finds_a_race_between_plain_ranks_and_the_reproduction_replays_it() -> None:
    with pytest.raises(sc.testing.ExploreFailure) as info:
        sc.testing.explore(_race, world_size=3, seeds=range(50))
    failure = info.value
    assert "expected 'ready' first, got 'data'" in str(failure)
    with pytest.raises(sc.RankError, match="expected 'ready' first"):
        sc.run(_race, world_size=3, seed=failure.seed, schedule="shuffle")


def test_exhaustive_explore_of_plain_ranks_reaches_every_arrival_order() -> None:
    done = sc.testing.explore(_arrivals, world_size=5, schedule="exhaustive")
    assert done.complete
    assert {result[0] for result in done} == {
        (a, b, c, d) for a in range(1, 5) for b in range(1, 5) for c in range(1, 5)
        for d in range(1, 5) if len({a, b, c, d}) == 4}
