"""The testing kit: @distributed tests, explore() over seeds, the pytest plugin's fixtures."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

import simcluster as sc
import simcluster.testing as sctest

# ---- @distributed ----


@sctest.distributed(world_size=3)
async def test_distributed_runs_the_body_on_every_rank(comm: sc.Comm) -> None:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    assert comm.size == 3
    assert await comm.sendrecv(comm.rank, right, src=left) == left


@pytest.mark.parametrize("count", [1, 5])
@sctest.distributed(world_size=2, latency=sc.latency.Constant(1e-6))
async def test_distributed_passes_fixtures_and_parameters_to_every_rank(
        comm: sc.Comm, count: int, tmp_path: Path) -> None:
    assert tmp_path.is_dir()
    data = np.arange(count, dtype=np.float64) if comm.rank == 0 else np.zeros(count)
    await comm.broadcast(data, src=0)
    assert data.tolist() == list(range(count))
    assert comm.now == pytest.approx(1e-6 * comm.rank)  # run keywords reach sc.run


@pytest.mark.parametrize("world_size", [1, 2, 7])
@sctest.distributed()
async def test_distributed_takes_world_size_from_a_parameter(comm: sc.Comm, world_size: int) -> None:
    assert comm.size == world_size
    assert await comm.all_reduce(1) == world_size


@sctest.distributed(world_size=3)
async def test_distributed_takes_seed_from_the_plugin_fixture(comm: sc.Comm, seed: int) -> None:
    assert seed == 0


def test_distributed_seed_parameter_sets_the_runs_seed() -> None:
    async def first_sender(comm: sc.Comm, seed: int) -> None:
        if comm.rank == 0:
            got = await comm.recv()
            await comm.recv()
            assert got == 1, f"seed {seed}: rank {got} came first"
        else:
            await comm.send(comm.rank, 0)

    test = sctest.distributed(world_size=3)(first_sender)
    test(seed=5)  # seed 5 happens to deliver rank 1's message first
    with pytest.raises(AssertionError, match=r"^rank 0: seed 0: rank 2 came first"):
        test(seed=0)
    with pytest.raises(TypeError, match=r"^distributed\(seed=1\): first_sender also takes a seed"):
        sctest.distributed(seed=1)(first_sender)


def test_distributed_fails_with_the_ranks_own_message() -> None:
    @sctest.distributed(world_size=3)
    async def check_rank_sums(comm: sc.Comm) -> None:
        total = await comm.all_reduce(comm.rank)
        assert comm.rank != 1, f"rank one saw total {total}"

    with pytest.raises(AssertionError) as info:
        check_rank_sums()
    assert str(info.value).startswith("rank 1: rank one saw total 3")
    assert isinstance(info.value.__cause__, AssertionError)
    assert str(info.value.__cause__).startswith("rank one saw total 3")


def test_distributed_message_without_text_says_where() -> None:
    async def body(comm: sc.Comm) -> None:
        if comm.rank == 2:
            raise AssertionError

    with pytest.raises(AssertionError, match=r"^rank 2: assertion failed at test_testing_kit\.py:\d+$"):
        sctest.distributed(world_size=3)(body)()


def test_distributed_lets_other_errors_through_unchanged() -> None:
    @sctest.distributed(world_size=2)
    async def broken(comm: sc.Comm) -> None:
        if comm.rank == 1:
            raise KeyError("missing")

    with pytest.raises(sc.RankError) as info:
        broken()
    assert info.value.rank == 1 and isinstance(info.value.__cause__, KeyError)

    @sctest.distributed(world_size=2)
    async def stuck(comm: sc.Comm) -> None:
        await comm.recv(src=1 - comm.rank)

    with pytest.raises(sc.DeadlockError):
        stuck()


def test_distributed_hides_comm_from_pytest_but_keeps_metadata() -> None:
    async def test_example(comm: sc.Comm, value: int, *, other: str = "x") -> None:
        """The docstring."""

    wrapped = sctest.distributed()(test_example)
    assert not inspect.iscoroutinefunction(wrapped)
    assert list(inspect.signature(wrapped).parameters) == ["value", "other"]
    assert wrapped.__name__ == "test_example"
    assert wrapped.__doc__ == "The docstring."
    assert wrapped.__wrapped__ is test_example  # type: ignore[attr-defined]


def test_distributed_refuses_functions_it_cannot_run() -> None:
    with pytest.raises(TypeError, match=r"^distributed\(print\): expected a function \(async def "
                       r"print\(comm\): \.\.\., or a plain def for mpi4py-style code\), got "
                       r"builtin_function_or_method"):
        sctest.distributed()(print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="arguments come from the test's own parameters"):
        sctest.distributed(args=(1,))


# ---- explore ----


async def race(comm: sc.Comm) -> list[str] | None:
    """Rank 0 assumes rank 2's 'ready' comes before rank 1's 'data': a race on ANY_SOURCE."""
    if comm.rank == 0:
        first = await comm.recv(src=sc.ANY_SOURCE)
        second = await comm.recv(src=sc.ANY_SOURCE)
        assert first == "ready", f"expected 'ready' first, got {first!r}"
        return [first, second]
    await comm.send("data" if comm.rank == 1 else "ready", 0)
    return None


def failing_seeds(fn: object, seeds: range, schedule: str = "batch") -> list[int]:
    bad = []
    for seed in seeds:
        try:
            sc.run(fn, world_size=3, seed=seed, schedule=schedule)  # type: ignore[arg-type]
        except sc.RankError:
            bad.append(seed)
    return bad


def test_the_race_shows_only_under_some_seeds() -> None:
    bad = failing_seeds(race, range(20))
    assert 0 < len(bad) < 20
    assert 0 not in bad  # the default seed hides it: the reason to explore


def test_explore_finds_the_first_failing_seed_with_a_reproduction() -> None:
    seeds = range(1, 100)  # explore shuffles each batch; seed 0 fails at once
    first_bad = failing_seeds(race, seeds, "shuffle")[0]
    with pytest.raises(sctest.ExploreFailure) as info:
        sctest.explore(race, world_size=3, seeds=seeds)
    failure = info.value
    assert failure.seed == first_bad and failure.schedule == "shuffle"
    assert failure.passed == list(range(1, first_bad))
    assert failure.rank == 0
    assert failure.reproduction == f"sc.run(race, world_size=3, seed={first_bad}, schedule='shuffle')"
    message = str(failure)
    assert message == (
        f"explore(race, world_size=3): seed {first_bad} failed after {first_bad - 1} passing seeds: "
        "rank 0 raised AssertionError: expected 'ready' first, got 'data'; "
        f"reproduce with sc.run(race, world_size=3, seed={first_bad}, schedule='shuffle')")
    assert isinstance(failure, AssertionError) and isinstance(failure, sc.SimclusterError)
    assert isinstance(failure.__cause__, sc.RankError)


def test_explore_reproduction_line_reproduces_the_failure() -> None:
    with pytest.raises(sctest.ExploreFailure) as info:
        sctest.explore(race, world_size=3)
    with pytest.raises(sc.RankError) as again:
        eval(info.value.reproduction, {"sc": sc, "race": race})
    assert str(again.value.__cause__).startswith("expected 'ready' first, got 'data'")


async def race_free(comm: sc.Comm) -> list[str] | None:
    if comm.rank == 0:
        ready = await comm.recv(src=2)  # name the source: no race
        data = await comm.recv(src=1)
        return [ready, data]
    await comm.send("data" if comm.rank == 1 else "ready", 0)
    return None


def test_explore_passes_a_race_free_program_over_every_seed() -> None:
    results = sctest.explore(race_free, world_size=3)
    assert len(results) == 100
    assert all(list(r) == [["ready", "data"], None, None] for r in results)


async def arrival_order(comm: sc.Comm) -> list[int] | None:
    if comm.rank == 0:
        return [await comm.recv() for _ in range(comm.size - 1)]
    await comm.send(comm.rank, 0)
    return None


def test_explore_check_rejects_a_result() -> None:
    with pytest.raises(sctest.ExploreFailure) as info:
        sctest.explore(arrival_order, 3, check=lambda result: result[0] == [1, 2])
    failure = info.value
    assert failure.result is not None and failure.result[0] == [2, 1]
    assert failure.reproduction == (f"result = sc.run(arrival_order, world_size=3, seed={failure.seed}, "
                                    "schedule='shuffle')")
    assert "check(result) returned False" in str(failure)
    assert failure.__cause__ is None

    def strict(result: sc.RunResult) -> None:
        raise ValueError(f"bad order {result[0]}")

    with pytest.raises(sctest.ExploreFailure, match=r"check\(result\) raised ValueError: bad order"):
        sctest.explore(arrival_order, 3, check=strict)


async def timed(comm: sc.Comm) -> float:
    await comm.all_reduce(np.ones(1000))
    return comm.now


def test_explore_jitter_perturbs_times_and_the_reproduction_keeps_it() -> None:
    model = sc.latency.AlphaBeta(1e-6, 1e-9)
    results = sctest.explore(timed, 4, seeds=range(5), jitter=0.1, latency=model)
    assert len({r.elapsed for r in results}) == 5  # each seed draws other delays
    plain = sctest.explore(timed, 4, seeds=range(3), latency=model)
    assert len({r.elapsed for r in plain}) == 1  # without jitter, ties only: same times

    with pytest.raises(sctest.ExploreFailure) as info:
        sctest.explore(timed, 4, seeds=[3], jitter=0.1, latency=model, check=lambda r: False)
    line = info.value.reproduction
    assert line == ("result = sc.run(timed, world_size=4, seed=3, schedule='shuffle', "
                    "latency=sc.latency.Jitter("
                    "model=sc.latency.AlphaBeta(alpha=1e-06, beta=1e-09), rel=0.1))")
    replay = eval(line.removeprefix("result = "), {"sc": sc, "timed": timed})
    assert replay.elapsed == results[3].elapsed


def test_explore_reports_deadlocks_and_refuses_bad_keywords() -> None:
    async def stuck(comm: sc.Comm) -> None:
        await comm.recv(src=(comm.rank + 1) % comm.size)

    with pytest.raises(sctest.ExploreFailure, match=r"seed 0 failed: DeadlockError: deadlock") as info:
        sctest.explore(stuck, 2)
    assert isinstance(info.value.__cause__, sc.DeadlockError)
    with pytest.raises(TypeError, match="explore picks the seeds"):
        sctest.explore(race, 3, seed=1)
    with pytest.raises(ValueError, match=r"^run\(world_size=0\)"):
        sctest.explore(race, 0)


def test_testing_is_reachable_as_an_attribute_after_import() -> None:
    import simcluster.testing

    assert sc.testing is simcluster.testing
    assert issubclass(sc.testing.ExploreFailure, AssertionError)


# ---- the pytest plugin's fixtures ----


def test_plugin_fixtures_default_to_four_ranks_and_seed_zero(world_size: int, seed: int) -> None:
    assert (world_size, seed) == (4, 0)


@pytest.mark.parametrize("world_size", [1, 3])
def test_plugin_world_size_fixture_can_be_parametrized(world_size: int, seed: int) -> None:
    result = sc.run(arrival_order, world_size=world_size, seed=seed)
    assert sorted(result[0]) == list(range(1, world_size))
