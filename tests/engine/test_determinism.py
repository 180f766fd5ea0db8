"""Same seed, same schedule: results, times and counts repeat exactly; other seeds may differ."""

from __future__ import annotations

import numpy as np

import simcluster as sc


async def noisy_program(comm: sc.Comm) -> object:
    """ANY_SOURCE receives, sleeps, arrays and objects, under a jittered AlphaBeta model."""
    log: list[object] = []
    if comm.rank == 0:
        for _ in range(2 * (comm.size - 1)):
            req = comm.irecv(src=sc.ANY_SOURCE, tag=sc.ANY_TAG)
            value = await req
            assert req.status is not None
            summary = float(value.sum()) if isinstance(value, np.ndarray) else value
            log.append((req.status.source, req.status.tag, summary, comm.now))
        for dst in range(1, comm.size):
            await comm.send(f"ack {dst}", dst=dst, tag=99)
    else:
        await comm.sleep(1e-6 * (comm.rank % 3))
        await comm.send(np.full(100 * comm.rank, float(comm.rank)), dst=0, tag=1)
        await comm.sleep(2e-6)
        await comm.send({"rank": comm.rank, "now": comm.now}, dst=0, tag=2)
        log.append((await comm.recv(src=0, tag=99), comm.now))
    return log


def _snapshot(result: sc.RunResult) -> tuple[object, ...]:
    return list(result), result.times, result.elapsed, result.stats


def test_same_seed_gives_identical_results_times_and_stats() -> None:
    lat = sc.latency.Jitter(sc.latency.AlphaBeta(1e-6, 1e-9), rel=0.3)
    for seed in (0, 7):
        first = sc.run(noisy_program, world_size=6, latency=lat, seed=seed)
        second = sc.run(noisy_program, world_size=6, latency=lat, seed=seed)
        assert _snapshot(first) == _snapshot(second)
        assert first.elapsed > 0  # the model did charge time


def test_jitter_draws_depend_on_the_seed() -> None:
    lat = sc.latency.Jitter(sc.latency.AlphaBeta(1e-6, 1e-9), rel=0.3)
    times = {tuple(sc.run(noisy_program, world_size=6, latency=lat, seed=seed).times)
             for seed in range(5)}
    assert len(times) > 1


async def tie_program(comm: sc.Comm) -> object:
    """Every sender posts at virtual time 0, so the ANY_SOURCE order is decided by tie-breaking."""
    if comm.rank == 0:
        order = []
        for _ in range(comm.size - 1):
            req = comm.irecv(src=sc.ANY_SOURCE)
            await req
            assert req.status is not None
            order.append(req.status.source)
        return order
    await comm.send(comm.rank, dst=0)
    return None


def test_any_source_order_varies_with_seed_and_repeats_with_equal_seed() -> None:
    orders = {}
    for seed in range(20):
        order = sc.run(tie_program, world_size=5, seed=seed)[0]
        assert sorted(order) == [1, 2, 3, 4]
        assert sc.run(tie_program, world_size=5, seed=seed)[0] == order
        orders[seed] = tuple(order)
    assert len(set(orders.values())) > 1, orders


def test_default_seed_is_zero() -> None:
    assert list(sc.run(tie_program, world_size=5)) == list(sc.run(tie_program, world_size=5, seed=0))
