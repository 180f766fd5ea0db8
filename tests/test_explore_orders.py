"""Orders of simultaneous events: run(schedule=...) and explore's shuffled and exhaustive modes."""

from __future__ import annotations

import itertools
import random

import pytest

import simcluster as sc
import simcluster.testing as sctest


async def arrivals(comm: sc.Comm) -> list[int] | None:
    """Every other rank sends to rank 0 at one instant; rank 0 takes them with ANY_SOURCE."""
    if comm.rank == 0:
        return [await comm.recv(src=sc.ANY_SOURCE) for _ in range(comm.size - 1)]
    await comm.send(comm.rank, 0)
    return None


async def waiting_arrivals(comm: sc.Comm) -> list[int] | None:
    """As ``arrivals``, but rank 0 is already waiting when the four messages arrive together."""
    if comm.rank == 0:
        return [await comm.recv(src=sc.ANY_SOURCE) for _ in range(comm.size - 1)]
    await comm.sleep(1e-6)
    await comm.send(comm.rank, 0)
    return None


ALL_ORDERS = set(itertools.permutations(range(1, 5)))


def orders(results: list[sc.RunResult]) -> set[tuple[int, ...]]:
    return {tuple(result[0]) for result in results}


# ---- run(schedule=...) ----


def test_default_batch_schedule_reaches_only_some_orders() -> None:
    seen = orders([sc.run(arrivals, world_size=5, seed=seed) for seed in range(100)])
    assert 1 < len(seen) < 24  # rotations and reversals of a batch, not every permutation


def test_shuffle_schedule_reaches_every_order_of_four_any_source_senders() -> None:
    seen = orders([sc.run(arrivals, world_size=5, seed=seed, schedule="shuffle")
                   for seed in range(100)])
    assert seen == ALL_ORDERS


def test_shuffle_schedule_repeats_with_the_same_seed() -> None:
    for seed in range(10):
        first = sc.run(arrivals, world_size=5, seed=seed, schedule="shuffle")
        again = sc.run(arrivals, world_size=5, seed=seed, schedule="shuffle")
        assert list(first) == list(again) and first.times == again.times


def test_a_schedule_list_picks_each_simultaneous_event_and_repeats() -> None:
    # four choice points: which of the 5 starting ranks runs first, then of the 4 left, ...
    # (choices are positions among the events still waiting, in the order they were scheduled)
    assert sc.run(arrivals, world_size=5, schedule=[])[0] == [1, 2, 3, 4]
    assert sc.run(arrivals, world_size=5, schedule=[4, 2])[0] == [4, 2, 1, 3]
    assert sc.run(arrivals, world_size=5, schedule=[4, 2])[0] == [4, 2, 1, 3]


def test_run_refuses_a_schedule_it_does_not_know() -> None:
    with pytest.raises(ValueError, match=r"^run\(schedule='random'\): unknown schedule; valid: "
                                         r"'batch' .*'shuffle' .*a list of choices"):
        sc.run(arrivals, world_size=5, schedule="random")
    with pytest.raises(ValueError, match=r"^run\(schedule='exhaustive'\): .*sc\.testing\.explore"):
        sc.run(arrivals, world_size=5, schedule="exhaustive")
    with pytest.raises(ValueError, match=r"^run\(schedule=\[0, -1\]\): choices must be ints >= 0"):
        sc.run(arrivals, world_size=5, schedule=[0, -1])
    with pytest.raises(ValueError, match=r"^run\(schedule=\[7\]\): choice 7 at choice point 0 is out "
                                         r"of range: 5 events were simultaneous there"):
        sc.run(arrivals, world_size=5, schedule=[7])


# ---- explore over seeds: a full shuffle per seed ----


def test_explore_seeds_reach_all_24_orders() -> None:
    results = sctest.explore(arrivals, 5)
    assert len(results) == 100 and orders(results) == ALL_ORDERS
    assert results.runs == 100 and not results.complete  # seeds sample; they never cover all


def test_explore_seeds_repeat_exactly() -> None:
    first = sctest.explore(arrivals, 5, seeds=range(20))
    again = sctest.explore(arrivals, 5, seeds=range(20))
    assert [list(r) for r in first] == [list(r) for r in again]


def test_explore_can_keep_the_batch_schedule() -> None:
    results = sctest.explore(arrivals, 5, schedule="batch")
    assert 1 < len(orders(results)) < 24


# ---- explore(schedule="exhaustive"): every distinct order, once ----


def test_exhaustive_explore_runs_the_24_orders_of_four_simultaneous_arrivals() -> None:
    results = sctest.explore(waiting_arrivals, 5, schedule="exhaustive")
    assert len(results) == 24 and orders(results) == ALL_ORDERS
    assert results.complete and results.runs == 24


def test_exhaustive_explore_counts_a_receive_posted_at_the_same_instant_as_an_order_too() -> None:
    # rank 0 posts its receive at the instant the four messages arrive: each message can
    # come before or after the post (an iprobe would tell), so 5 events, 5! orders
    results = sctest.explore(arrivals, 5, schedule="exhaustive")
    assert len(results) == 120 and orders(results) == ALL_ORDERS and results.complete


async def two_pairs(comm: sc.Comm) -> int:
    peer = comm.rank ^ 1
    return await comm.sendrecv(comm.rank, peer, src=sc.ANY_SOURCE)


def test_exhaustive_explore_does_not_reorder_independent_events() -> None:
    # ranks 0,1 and ranks 2,3 never touch each other: 2 orders per pair, not 4! = 24
    results = sctest.explore(two_pairs, 4, schedule="exhaustive")
    assert len(results) == 4 and results.complete
    assert all(list(r) == [1, 0, 3, 2] for r in results)


def test_exhaustive_explore_repeats_exactly() -> None:
    first = sctest.explore(waiting_arrivals, 5, schedule="exhaustive")
    again = sctest.explore(waiting_arrivals, 5, schedule="exhaustive")
    assert [list(r) for r in first] == [list(r) for r in again]


def test_exhaustive_explore_stops_at_max_runs_and_says_so() -> None:
    with pytest.warns(sc.SimclusterWarning, match=r"stopped after max_runs=10 runs .*not every order"):
        results = sctest.explore(arrivals, 5, schedule="exhaustive", max_runs=10)
    assert results.runs == 10 and not results.complete and len(results) <= 10


async def race(comm: sc.Comm) -> list[str] | None:
    """Rank 0 assumes rank 1's 'ready' comes before rank 2's 'data': a race on ANY_SOURCE."""
    if comm.rank == 0:
        first = await comm.recv(src=sc.ANY_SOURCE)
        second = await comm.recv(src=sc.ANY_SOURCE)
        assert first == "ready", f"expected 'ready' first, got {first!r}"
        return [first, second]
    await comm.send("ready" if comm.rank == 1 else "data", 0)
    return None


def test_exhaustive_explore_finds_the_race_with_a_schedule_that_replays_it() -> None:
    with pytest.raises(sctest.ExploreFailure) as info:
        sctest.explore(race, 3, schedule="exhaustive")
    failure = info.value
    # the first schedule starts ranks 0, 1, 2 in order and passes; the second starts
    # rank 2 (position 1 of the two ranks left) before rank 1, and 'data' comes first
    assert failure.schedule == [0, 1]
    assert failure.reproduction == "sc.run(race, world_size=3, seed=0, schedule=[0, 1])"
    assert str(failure) == (
        "explore(race, world_size=3): schedule [0, 1] failed after 1 passing schedule: "
        "rank 0 raised AssertionError: expected 'ready' first, got 'data'; "
        "reproduce with sc.run(race, world_size=3, seed=0, schedule=[0, 1])")
    assert len(failure.passed) == 1
    with pytest.raises(sc.RankError, match="expected 'ready' first"):
        eval(failure.reproduction, {"sc": sc, "race": race})


def test_explore_refuses_max_runs_without_exhaustive_and_an_unknown_schedule() -> None:
    with pytest.raises(TypeError, match=r"^explore\(max_runs=5\): max_runs bounds "
                                        r"schedule='exhaustive' only"):
        sctest.explore(race, 3, max_runs=5)
    with pytest.raises(ValueError, match=r"^explore\(schedule='everything'\): unknown schedule; "
                                         r"valid: 'shuffle' .*'batch' .*'exhaustive'"):
        sctest.explore(race, 3, schedule="everything")


# ---- exhaustive exploration finds every outcome any order gives ----


async def scatter_sends(comm: sc.Comm, dests: list[list[int]]) -> list[int]:
    """Each rank sends to its ``dests`` at one instant; receivers log the sources in arrival order."""
    incoming = sum(comm.rank in d for d in dests)
    recvs = [comm.irecv(src=sc.ANY_SOURCE) for _ in range(incoming)]
    await comm.sleep(1e-6)
    sends = [comm.isend(comm.rank, dst) for dst in dests[comm.rank]]
    await sc.wait_all(sends)
    return [await req for req in recvs]


@pytest.mark.parametrize("case", range(4))
def test_exhaustive_explore_finds_every_outcome_of_every_order(case: int) -> None:
    rng = random.Random(case)
    size = 5
    dests = [sorted(rng.sample([d for d in range(size) if d != r], rng.randint(0, 2)))
             for r in range(size)]
    kw = {"args": (dests,)}
    outcomes = set()
    # every order of the five rank steps at time 1e-6 (the steps at time 0 only post receives)
    for perm in itertools.permutations(range(size)):
        waiting = list(range(size))
        choices = []
        for event in perm[:-1]:
            choices.append(waiting.index(event))
            waiting.remove(event)
        result = sc.run(scatter_sends, size, schedule=[0] * (size - 1) + choices, **kw)
        outcomes.add(tuple(map(tuple, result)))
    explored = sctest.explore(scatter_sends, size, schedule="exhaustive", **kw)
    assert explored.complete
    assert {tuple(map(tuple, r)) for r in explored} == outcomes
    assert len(explored) <= 120
