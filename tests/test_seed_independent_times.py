"""Virtual times depend on the program, the latency model and the world size, not on the seed.

Messages that reach one port at the same virtual instant are booked in a
canonical order (the instant, then source rank, then the sender's posting
order), whatever order the seeded schedule runs the instant's events in. So a
program that leaves no order open (no ANY_SOURCE receive, no wait_any, no
polling) finishes at the same virtual times for every seed, and shm and tcp
give the memory transport's times bit for bit. ``Jitter`` draws each
message's noise from the seed as a pure function of the message, so it is the
same on every transport and for every processing order of one seed.

The rank functions are module-level: shm and tcp hosting processes import them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import simcluster as sc

L = sc.latency
AB = L.AlphaBeta(1e-6, 1e-9)
MODELS = [
    AB,
    L.LogGP(1e-6, 2e-7, 3e-7, 1e-9),
    L.Hierarchical(L.AlphaBeta(1e-7, 1e-10), L.AlphaBeta(2e-6, 1e-9), ranks_per_node=3),
]
JITTER = L.Jitter(AB, rel=0.3)
SIZES = [8, 6]  # a power of two and not
SEEDS = range(20)


# ---- programs that leave no order open ----


async def ring_all_reduce(comm: sc.Comm) -> object:
    stamps = []
    for n in (48, 1000, 7):
        x = np.arange(n, dtype=np.float64) + comm.rank
        await comm.all_reduce(x, algorithm="ring")
        stamps.append((float(x.sum()), comm.now))
    return stamps


async def recursive_doubling(comm: sc.Comm) -> object:
    stamps = []
    for n in (3, 500):
        x = np.full(n, float(comm.rank))
        await comm.all_reduce(x, algorithm="recursive_doubling")
        stamps.append((float(x[0]), comm.now))
    return stamps


async def pairwise_all_to_all(comm: sc.Comm) -> object:
    got = await comm.all_to_all([np.full(20 * (i + 1), comm.rank) for i in range(comm.size)],
                                algorithm="pairwise")
    stamps = [comm.now]
    got2 = await comm.all_to_all([f"{comm.rank}->{i}" for i in range(comm.size)], algorithm="pairwise")
    return [float(g.sum()) for g in got], got2, stamps, comm.now


async def linear_all_to_all(comm: sc.Comm) -> object:
    """Every rank sends to every other at once: the most contention at every receive port."""
    got = await comm.all_to_all([np.ones(30 + comm.rank) for _ in range(comm.size)],
                                algorithm="linear")
    return [g.size for g in got], comm.now


async def dissemination_barrier(comm: sc.Comm) -> object:
    stamps = []
    for _ in range(3):
        await comm.sleep(1e-7 * (comm.rank % 3))
        await comm.barrier(algorithm="dissemination")
        stamps.append(comm.now)
    return stamps


async def all_gather_strings(comm: sc.Comm) -> object:
    out = []
    for algorithm in ("ring", "bruck", "recursive_doubling"):
        got = await comm.all_gather("same string on every rank", algorithm=algorithm)
        out.append((len(got), comm.now))
    return out


async def fan_in(comm: sc.Comm) -> object:
    """Every rank sends to rank 0 at once; rank 0 receives from each source by name."""
    if comm.rank == 0:
        stamps = []
        for src in range(1, comm.size):
            value = await comm.recv(src=src)
            stamps.append((src, float(value.sum()), comm.now))
        return stamps
    await comm.send(np.full(100 * comm.rank, 1.0), dst=0)
    return comm.now


async def broadcast(comm: sc.Comm) -> object:
    out = []
    for algorithm in ("binomial", "scatter_allgather", "linear"):
        data = np.arange(600, dtype=np.float64) if comm.rank == 2 else None
        got = await comm.broadcast(data, src=2, algorithm=algorithm)
        out.append((float(got.sum()), comm.now))
    return out


async def isend_burst(comm: sc.Comm) -> object:
    """Several isends posted at one instant, in an order unlike rank order, to every other rank."""
    others = [r for r in range(comm.size) if r != comm.rank]
    order = others[1::2] + others[0::2]
    sends = [comm.isend(np.full(40 * (r + 1), comm.rank), dst=r, tag=7) for r in order]
    sends += [comm.isend(comm.rank, dst=r, tag=8) for r in order]
    stamps = []
    for r in others:
        value = await comm.recv(src=r, tag=7)
        stamps.append((r, float(value.sum()), comm.now))
    for r in others:
        stamps.append((r, await comm.recv(src=r, tag=8), comm.now))
    await sc.wait_all(sends)
    return stamps, comm.now


async def rendezvous_burst(comm: sc.Comm) -> object:
    """Rank 0 posts rendezvous isends (over eager_limit) to every rank, in reverse order."""
    if comm.rank == 0:
        sends = [comm.isend(np.full(9000, float(r)), dst=r) for r in reversed(range(1, comm.size))]
        await sc.wait_all(sends)
        return comm.now
    buf = np.empty(9000)
    await comm.recv(buf, src=0)
    return float(buf[0]), comm.now


async def channel_mix(comm: sc.Comm) -> object:
    """Eager messages, a rendezvous one and an eager one behind it, on one channel per pair."""
    peer = comm.size - 1 - comm.rank
    if peer == comm.rank:
        return None
    if comm.rank < peer:
        for i in range(5):
            await comm.send(np.full(10 * (i + 1), i), dst=peer, tag=1)
        reqs = [comm.isend(np.ones(9000), dst=peer, tag=2), comm.isend(2.0, dst=peer, tag=2)]
        await sc.wait_all(reqs)
        return comm.now
    stamps = []
    for _ in range(5):
        stamps.append((float((await comm.recv(src=peer, tag=1)).sum()), comm.now))
    big = await comm.recv(src=peer, tag=2)
    small = await comm.recv(src=peer, tag=2)
    return stamps, float(big.sum()), small, comm.now


async def mixed(comm: sc.Comm) -> object:
    """Collectives of several families and sizes back to back (ranks drift apart in time)."""
    out = []
    for n in (10, 1000, 33):
        x = np.ones(n) * comm.rank
        await comm.all_reduce(x, algorithm="ring")
        await comm.all_reduce(x, algorithm="recursive_doubling")
        await comm.all_to_all([comm.rank] * comm.size, algorithm="pairwise")
        await comm.barrier(algorithm="dissemination")
        await comm.all_gather("hello" * comm.size)
        await comm.broadcast("x" * 100 if comm.rank == 0 else None, src=0)
        out.append(comm.now)
    return out


async def overlapping_nonblocking(comm: sc.Comm) -> object:
    """Two nonblocking collectives at once: a rank's helpers post at the same instants."""
    a, b = np.ones(300) * comm.rank, np.ones(500)
    first = comm.iall_reduce(a, algorithm="ring")
    second = comm.iall_reduce(b, algorithm="ring")
    await comm.send(comm.rank, dst=(comm.rank + 1) % comm.size, tag=3)  # and the rank itself
    got = await comm.recv(src=(comm.rank - 1) % comm.size, tag=3)
    await sc.wait_all([first, second])
    return float(a[0]), got, comm.now


PROGRAMS = [ring_all_reduce, recursive_doubling, pairwise_all_to_all, linear_all_to_all,
            dissemination_barrier, all_gather_strings, fan_in, broadcast, isend_burst, mixed,
            overlapping_nonblocking, channel_mix]


def snapshot(result: sc.RunResult) -> tuple[object, ...]:
    return repr(list(result)), result.times, result.elapsed, result.stats


def _name(obj: object) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


# ---- one transport, every seed ----


@pytest.mark.parametrize("world_size", SIZES)
@pytest.mark.parametrize("model", MODELS, ids=_name)
@pytest.mark.parametrize("program", PROGRAMS, ids=_name)
def test_times_are_the_same_for_every_seed(program: object, model: L.LatencyModel,
                                           world_size: int) -> None:
    ref = sc.run(program, world_size, latency=model)  # type: ignore[arg-type]
    assert ref.elapsed > 0
    for seed in SEEDS:
        got = sc.run(program, world_size, latency=model, seed=seed)  # type: ignore[arg-type]
        assert snapshot(got) == snapshot(ref), seed
    shuffled = sc.run(program, world_size, latency=model, seed=3,  # type: ignore[arg-type]
                      schedule="shuffle")
    assert snapshot(shuffled) == snapshot(ref)


@pytest.mark.parametrize("world_size", SIZES)
@pytest.mark.parametrize("model", MODELS, ids=_name)
def test_rendezvous_sends_take_the_send_port_in_posting_order(model: L.LatencyModel,
                                                              world_size: int) -> None:
    ref = sc.run(rendezvous_burst, world_size, latency=model)
    for seed in SEEDS:
        assert snapshot(sc.run(rendezvous_burst, world_size, latency=model, seed=seed)) == snapshot(ref)
    # rank 0 posted to p-1 first: under AlphaBeta its message leaves first and lands first
    if model is AB:
        arrivals = [ref[r][1] for r in range(1, world_size)]
        assert arrivals == sorted(arrivals, reverse=True)


def test_simultaneous_arrivals_take_the_receive_port_in_a_canonical_order() -> None:
    """Ranks 1, 2, 3 send 800, 1600, 2400 bytes to rank 0 at time 0: booked in that order."""
    alpha, beta = 1e-6, 1e-9
    model = L.AlphaBeta(alpha, beta)
    ref = sc.run(fan_in, 4, latency=model)
    first = 0.0 + alpha + 800 * beta  # the port is idle
    second = max(0.0 + alpha + 1600 * beta, first + 1600 * beta)
    third = max(0.0 + alpha + 2400 * beta, second + 2400 * beta)
    assert [t for _, _, t in ref[0]] == [first, second, third]
    for seed in SEEDS:
        assert sc.run(fan_in, 4, latency=model, seed=seed)[0] == ref[0]


@pytest.mark.parametrize("program", [ring_all_reduce, fan_in, isend_burst, mixed], ids=_name)
def test_jitter_noise_does_not_depend_on_the_processing_order(program: object) -> None:
    """One seed, many orders of simultaneous events (replayed choice lists): the same noisy times."""
    ref = sc.run(program, 6, latency=JITTER, seed=5)  # type: ignore[arg-type]
    plain = sc.run(program, 6, latency=AB, seed=5)  # type: ignore[arg-type]
    assert ref.times != plain.times  # the noise is there
    rng = random.Random(1)
    for _ in range(8):
        choices = [rng.randrange(2) for _ in range(300)]
        got = sc.run(program, 6, latency=JITTER, seed=5, schedule=choices)  # type: ignore[arg-type]
        assert snapshot(got) == snapshot(ref)
    got = sc.run(program, 6, latency=JITTER, seed=5, schedule="shuffle")  # type: ignore[arg-type]
    assert snapshot(got) == snapshot(ref)


def test_jitter_noise_depends_on_the_seed() -> None:
    times = {tuple(sc.run(fan_in, 6, latency=JITTER, seed=seed).times) for seed in range(5)}
    assert len(times) > 1


# ---- what the program leaves open, the seed still orders ----


async def any_source_race(comm: sc.Comm) -> object:
    """Rank 0 takes two messages with ANY_SOURCE and assumes rank 1's comes first: a race."""
    if comm.rank == 0:
        first = await comm.recv(src=sc.ANY_SOURCE)
        second = await comm.recv(src=sc.ANY_SOURCE)
        assert (first, second) == (1, 2), f"got {first} before {second}"
        return None
    await comm.send(comm.rank, dst=0)
    return None


def test_explore_still_finds_an_any_source_race() -> None:
    with pytest.raises(sc.testing.ExploreFailure) as info:
        sc.testing.explore(any_source_race, world_size=3, seeds=range(50))
    assert "got 2 before 1" in str(info.value)


def test_explore_finds_an_any_source_race_under_a_port_model_with_jitter() -> None:
    # under AlphaBeta the two messages reach rank 0's port in source order, every seed;
    # explore's jitter perturbs their times per seed, and one seed reverses them
    sc.testing.explore(any_source_race, world_size=3, seeds=range(20), latency=AB)
    with pytest.raises(sc.testing.ExploreFailure) as info:
        sc.testing.explore(any_source_race, world_size=3, seeds=range(100), latency=AB, jitter=0.5)
    assert "got 2 before 1" in str(info.value)


# ---- shm and tcp: the memory transport's times, bit for bit ----

MULTI = [("shm", 3), ("tcp", 4)]


@pytest.mark.slow
@pytest.mark.parametrize("world_size", SIZES)
@pytest.mark.parametrize("model", [*MODELS, JITTER], ids=_name)
@pytest.mark.parametrize("program", [*PROGRAMS, rendezvous_burst], ids=_name)
def test_shm_and_tcp_give_the_memory_times(program: object, model: L.LatencyModel,
                                           world_size: int) -> None:
    ref = sc.run(program, world_size, latency=model, seed=4)  # type: ignore[arg-type]
    for name, procs in MULTI:
        got = sc.run(program, world_size, latency=model, seed=4,  # type: ignore[arg-type]
                     transport=name, procs=procs)
        assert snapshot(got) == snapshot(ref), (name, procs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["shm", "tcp"])
def test_shm_and_tcp_times_do_not_depend_on_the_seed(name: str) -> None:
    ref = sc.run(mixed, 6, latency=AB)
    for seed in (1, 2, 3):
        got = sc.run(mixed, 6, latency=AB, seed=seed, transport=name, procs=4)
        assert snapshot(got) == snapshot(ref), seed
