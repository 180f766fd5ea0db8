"""shm and tcp give the memory transport's results, times, elapsed and stats.

Virtual time crosses processes with the messages (each carries its send-side
timestamp and the receiver charges its own port), and ports book simultaneous
messages in a canonical order, so the match is exact, bit for bit, for
programs that do not race on ANY_SOURCE.
"""

from __future__ import annotations

import pytest
from tp_programs import PROGRAMS

import simcluster as sc

L = sc.latency
MODELS = [
    L.Zero(), L.Constant(2e-6), L.AlphaBeta(1e-6, 1e-9, gamma=1e-10),
    L.LogGP(1e-6, 2e-7, 3e-7, 1e-9),
    L.Hierarchical(L.AlphaBeta(1e-7, 1e-10), L.AlphaBeta(2e-6, 1e-9), ranks_per_node=2),
]
CASES = [("tcp", 2), ("shm", 3), ("tcp", None)]  # None: one process per rank


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__)
def test_same_program_same_results_times_and_stats(program: object, model: L.LatencyModel,
                                                   world_size: int) -> None:
    ref = sc.run(program, world_size=world_size, latency=model)  # type: ignore[arg-type]
    for name, procs in CASES:
        got = sc.run(program, world_size=world_size, latency=model,  # type: ignore[arg-type]
                     transport=name, procs=procs or world_size)
        assert list(got) == list(ref), (name, procs)
        assert got.stats == ref.stats, (name, procs)
        assert got.times == ref.times, (name, procs)
        assert got.elapsed == ref.elapsed, (name, procs)


def test_a_run_across_processes_repeats_exactly_with_the_same_seed() -> None:
    from tp_programs import nonblocking  # ties at one receive port

    model = L.AlphaBeta(1e-6, 1e-9)
    first = sc.run(nonblocking, world_size=5, latency=model, transport="tcp", procs=3)
    second = sc.run(nonblocking, world_size=5, latency=model, transport="tcp", procs=3)
    assert (list(first), first.times, first.stats) == (list(second), second.times, second.stats)


def test_jitter_times_across_processes_repeat_with_the_same_seed() -> None:
    from tp_programs import pipeline

    model = L.Jitter(L.AlphaBeta(1e-6, 1e-9), rel=0.2)
    ref = sc.run(pipeline, world_size=3, latency=model)
    first = sc.run(pipeline, world_size=3, latency=model, transport="shm", procs=3)
    second = sc.run(pipeline, world_size=3, latency=model, transport="shm", procs=3)
    assert list(first) == list(ref)
    assert first.times == second.times  # each process draws the noise of its own sends
