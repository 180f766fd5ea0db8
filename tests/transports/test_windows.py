"""Lookahead windows: hosting processes run ahead of each other, and nothing changes but the rounds.

Under a model with a lookahead L (alpha under AlphaBeta), each round of a
multi-process run may cover every event before T + L in one go. These tests
drive every kind of message one rank can send another (``tp_programs.effects``)
under every model, and compare each process count's results, times and stats
with the memory transport's; then they check that windows really replace
rounds, and that a model promising no lookahead keeps one round per instant.
"""

from __future__ import annotations

import random

import pytest
from tp_programs import effects, pipeline

import simcluster as sc
from simcluster.latency import LatencyModel, Ports

L = sc.latency
MODELS = [
    L.Zero(), L.Constant(2e-6), L.AlphaBeta(1e-6, 1e-9), L.LogGP(1e-6, 2e-7, 3e-7, 1e-9),
    L.Hierarchical(L.AlphaBeta(1e-7, 1e-10), L.AlphaBeta(2e-6, 1e-9), ranks_per_node=3),
    L.Jitter(L.AlphaBeta(1e-6, 1e-9), rel=0.3),
]


class NoPromise(LatencyModel):
    """AlphaBeta's times, with the default lookahead of 0: what a model of one's own gets."""

    def __init__(self, model: L.AlphaBeta) -> None:
        self.model = model

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        return self.model.bind(world_size, rng)


def _same(got: sc.RunResult, ref: sc.RunResult) -> None:
    assert list(got) == list(ref)
    assert got.times == ref.times
    assert got.stats == ref.stats


@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
def test_every_kind_of_message_gives_the_memory_transports_run(model: LatencyModel) -> None:
    ref = sc.run(effects, world_size=5, latency=model, seed=4)
    assert ref[0][0][0] == 4  # rank 0 heard from its left neighbour
    for procs in (2, 3):
        got = sc.run(effects, world_size=5, latency=model, seed=4, transport="shm", procs=procs)
        _same(got, ref)
        assert got.rounds is not None and got.rounds[0] > 0
        if model.lookahead() == 0:
            assert got.rounds[1] == 0  # no promise: one round per instant, no window


def test_windows_replace_rounds_where_ranks_work_apart() -> None:
    model = L.AlphaBeta(1e-6, 1e-9)
    ref = sc.run(pipeline, world_size=6, latency=model)
    windowed = sc.run(pipeline, world_size=6, latency=model, transport="shm", procs=2)
    lockstep = sc.run(pipeline, world_size=6, latency=NoPromise(model), transport="shm", procs=2)
    _same(windowed, ref)
    _same(lockstep, ref)  # the pipeline's messages are eager: no request to send to delay
    rounds, windows = windowed.rounds  # type: ignore[misc]
    assert lockstep.rounds is not None and lockstep.rounds[1] == 0
    assert windows > 0 and rounds < lockstep.rounds[0]


def test_a_run_in_one_process_has_no_rounds() -> None:
    assert sc.run(pipeline, world_size=3).rounds is None


def test_lookahead_of_each_model() -> None:
    assert L.Zero().lookahead() == 0.0
    assert L.Constant(2e-6).lookahead() == 2e-6
    assert L.AlphaBeta(1e-6, 1e-9).lookahead() == 1e-6
    assert L.LogGP(1e-6, 2e-7, 3e-7, 1e-9).lookahead() == 1e-6 + 2 * 2e-7
    assert L.Hierarchical(L.AlphaBeta(1e-7, 1e-10), L.Constant(2e-6), 4).lookahead() == 1e-7
    assert L.Jitter(L.AlphaBeta(1e-6, 1e-9), rel=0.25).lookahead() == 1e-6 * 0.75
    assert L.Jitter(L.Constant(1e-6), rel=1.5).lookahead() == 0.0
    assert NoPromise(L.AlphaBeta(1e-6, 1e-9)).lookahead() == 0.0


@pytest.mark.parametrize("model", MODELS[1:], ids=lambda m: type(m).__name__)
def test_no_message_arrives_sooner_than_the_lookahead(model: LatencyModel) -> None:
    """The promise ``transfer(...)[1] >= t + lookahead()``, with busy ports and odd sizes."""
    ports = model.bind(8, random.Random(1))
    rng = random.Random(2)
    la = model.lookahead()
    for _ in range(2000):
        t = rng.choice([0.0, 1e-6, 0.37, 1234.5]) + rng.random() * 1e-5
        src, dst = rng.randrange(8), rng.randrange(8)
        nbytes = rng.choice([0, 1, 2, 100, 65536, 10**6])
        assert ports.transfer(src, dst, nbytes, t)[1] >= t + la * (1 - 1e-9)


def _errors(program: object, world_size: int, kind: type[BaseException]
            ) -> tuple[BaseException, BaseException]:
    """The error ``program`` ends with in one process, and on 2 processes with windows (AlphaBeta)."""
    model = L.AlphaBeta(1e-6, 1e-9)
    with pytest.raises(kind) as ref:
        sc.run(program, world_size=world_size, latency=model)  # type: ignore[arg-type]
    with pytest.raises(kind) as got:
        sc.run(program, world_size=world_size, latency=model,  # type: ignore[arg-type]
               transport="shm", procs=2)
    return ref.value, got.value


async def stuck_mid_window(comm: sc.Comm) -> None:
    if comm.rank == 0:
        await comm.sleep(3e-7)  # inside the first window (alpha = 1 us)
    await comm.recv(src=1 - comm.rank)


def test_a_deadlock_inside_a_window_is_reported_at_the_memory_transports_time() -> None:
    ref, got = _errors(stuck_mid_window, 2, sc.DeadlockError)
    assert "at virtual time 3e-07s" in str(ref)
    assert str(got) == str(ref)


async def fails_late_and_early(comm: sc.Comm) -> None:
    await comm.sleep(5e-7 if comm.rank == 0 else 2e-7)  # both inside one window
    raise ValueError(f"rank {comm.rank} gives up")


def test_of_two_failures_in_one_window_the_earlier_is_reported() -> None:
    ref, got = _errors(fails_late_and_early, 2, sc.RankError)
    assert isinstance(ref, sc.RankError) and isinstance(got, sc.RankError)
    assert ref.rank == got.rank == 1


async def mismatched(comm: sc.Comm) -> object:
    await comm.sleep([3e-7, 4e-7, 1e-7, 2e-7][comm.rank])  # rank 2, in process 1, enters first
    if comm.rank < 2:
        return await comm.all_reduce(comm.rank)
    return await comm.broadcast(comm.rank, src=0)


def test_a_collective_mismatch_inside_a_window_names_the_same_ranks() -> None:
    ref, got = _errors(mismatched, 4, sc.RankError)
    assert isinstance(ref, sc.RankError) and isinstance(got, sc.RankError)
    assert isinstance(ref.__cause__, sc.CollectiveMismatchError)
    assert str(got.__cause__) == str(ref.__cause__)
    assert got.rank == ref.rank
