"""Synchronous ranks: plain functions on stacks of their own, on the engine async ranks use.

These tests reach the rank's world ``Comm`` directly (``engine.current_task().comm``)
and block on it with ``engine.sync.block``, so they test the stack mechanism itself;
``tests/mpi`` tests the same ranks through ``simcluster.MPI``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import _config
from simcluster.engine import sync as _sync
from simcluster.engine.assembly import current_task

wall_clock = time.perf_counter  # bound at import: inside a rank, time.perf_counter() is virtual

STACKS = ["greenlet", "thread"]
AB = sc.latency.AlphaBeta(1e-6, 1e-9)


@pytest.fixture(autouse=True)
def _bare_comm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give rank functions their world ``Comm`` itself: these tests are about the stacks, not MPI."""
    monkeypatch.setattr(_config, "_mpi_world", lambda comm: comm)


def world() -> sc.Comm:
    task = current_task()
    assert task is not None and task.comm is not None
    return task.comm


def on(stack: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a rank function on the given stack (threads are what the torch backend uses)."""
    if stack == "thread":
        fn.__simcluster_stack__ = "thread"  # type: ignore[attr-defined]
    return fn


def ring(_comm: object, n: int) -> tuple[list[int], int, float]:
    comm, block = world(), _sync.block
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    req = comm.irecv(np.zeros(n, dtype=np.int64), src=left)
    block(comm.send(np.arange(n) + comm.rank, dst=right))
    got = block(req)
    total = block(comm.all_reduce(comm.rank + 1))
    block(comm.barrier())
    return got.tolist(), total, comm.now


async def async_ring(comm: sc.Comm, n: int) -> tuple[list[int], int, float]:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    req = comm.irecv(np.zeros(n, dtype=np.int64), src=left)
    await comm.send(np.arange(n) + comm.rank, dst=right)
    got = await req
    total = await comm.all_reduce(comm.rank + 1)
    await comm.barrier()
    return got.tolist(), total, comm.now


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_plain_function_gives_what_the_async_one_gives_with_the_same_virtual_times(
        stack: str, size: int) -> None:
    sync = sc.run(on(stack, ring), size, args=(3,), latency=AB)
    async_ = sc.run(async_ring, size, args=(3,), latency=AB)
    assert list(sync) == list(async_)
    assert sync.times == async_.times
    assert sync.stats == async_.stats
    assert [value[0] for value in sync] == [[(r - 1) % size + i for i in range(3)] for r in range(size)]
    assert [value[1] for value in sync] == [size * (size + 1) // 2] * size


@pytest.mark.parametrize("stack", STACKS)
def test_same_seed_same_results_times_and_trace(stack: str) -> None:
    runs = [sc.run(on(stack, ring), 4, args=(2,), latency=AB, seed=3, trace=True) for _ in range(2)]
    assert list(runs[0]) == list(runs[1])
    assert runs[0].times == runs[1].times
    assert runs[0].trace.to_chrome() == runs[1].trace.to_chrome()


def head_to_head(_comm: object) -> None:
    comm = world()
    _sync.block(comm.recv(src=1 - comm.rank))  # the line the report must name


@pytest.mark.parametrize("stack", STACKS)
def test_deadlock_report_names_the_users_line(stack: str) -> None:
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(on(stack, head_to_head), 2)
    line = head_to_head.__code__.co_firstlineno + 2
    text = str(info.value)
    assert f"rank 0 waiting in recv(src=1, tag=ANY_TAG) at test_sync_ranks.py:{line}" in text
    assert f"rank 1 waiting in recv(src=0, tag=ANY_TAG) at test_sync_ranks.py:{line}" in text
    assert "wait-for cycle: 0 -> 1 -> 0" in text


@pytest.mark.parametrize("stack", STACKS)
def test_a_failing_rank_stops_the_run_and_the_others_unwind(stack: str) -> None:
    unwound: list[int] = []

    def fn(_comm: object) -> None:
        comm = world()
        if comm.rank == 1:
            raise KeyError("bad key in rank 1")
        try:
            _sync.block(comm.recv(src=1))
        finally:
            unwound.append(comm.rank)

    with pytest.raises(sc.RankError) as info:
        sc.run(on(stack, fn), 3)
    assert info.value.rank == 1
    assert isinstance(info.value.__cause__, KeyError)
    frames = []
    tb = info.value.__cause__.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-1] == "fn"  # the user's own frame, where it raised
    assert sorted(unwound) == [0, 2]


@pytest.mark.parametrize("stack", STACKS)
def test_each_rank_has_its_own_random_and_numpy_state(stack: str) -> None:
    def fn(_comm: object) -> tuple[list[int], list[float]]:
        comm = world()
        if comm.rank == 0:
            np.random.seed(7)
            random.seed(7)
        _sync.block(comm.barrier())  # rank 1 draws between rank 0's seeding and its draws
        if comm.rank == 1:
            np.random.rand(5)
            random.random()
        _sync.block(comm.barrier())
        return np.random.randint(0, 1000, 3).tolist(), [random.random()]

    before = (np.random.get_state()[1].copy(), random.getstate())
    result = sc.run(on(stack, fn), 2)
    np.random.seed(7)
    random.seed(7)
    assert result[0] == (np.random.randint(0, 1000, 3).tolist(), [random.random()])
    assert result[1] != result[0]
    np.random.set_state(("MT19937", before[0], 0, 0, 0.0))
    random.setstate(before[1])


def test_the_process_generators_are_restored_after_the_run() -> None:
    def fn(_comm: object) -> float:
        np.random.seed(world().rank)
        random.seed(world().rank)
        return float(np.random.rand())

    np.random.seed(123)
    random.seed(123)
    sc.run(fn, 2)
    assert np.random.rand() == np.random.RandomState(123).rand()
    assert random.random() == random.Random(123).random()
    assert np.random.seed.__module__ != _sync.__name__  # the wrappers are gone


def test_unseeded_ranks_draw_different_numbers_reproducibly() -> None:
    def fn(_comm: object) -> tuple[float, float]:
        return float(np.random.rand()), random.random()

    first, again, other = sc.run(fn, 3, seed=1), sc.run(fn, 3, seed=1), sc.run(fn, 3, seed=2)
    assert list(first) == list(again)
    assert len(set(first)) == 3
    assert list(first) != list(other)


@pytest.mark.parametrize("stack", STACKS)
def test_time_sleep_in_a_rank_is_a_virtual_sleep(stack: str) -> None:
    def fn(_comm: object) -> float:
        time.sleep(3600.0 * (world().rank + 1))  # a real hour would time the test out
        return world().now

    assert list(sc.run(on(stack, fn), 2)) == [3600.0, 7200.0]
    assert time.sleep is _sync._real_sleep


def test_compute_wall_charges_the_time_spent_between_calls() -> None:
    def fn(_comm: object) -> float:
        comm = world()
        start = wall_clock()  # time.perf_counter() in a rank is its virtual clock
        while wall_clock() - start < 0.005:  # 5 ms of "compute"
            pass
        _sync.block(comm.barrier())
        return comm.now

    assert list(sc.run(fn, 2)) == [0.0, 0.0]
    charged = sc.run(fn, 2, compute="wall:2")
    assert min(charged) >= 0.010  # at least 5 ms of wall time, times 2


@pytest.mark.parametrize("bad", ["gpu", "wall:0", "wall:-1", "wall:x", 3])
def test_compute_must_be_wall_with_a_positive_factor(bad: object) -> None:
    with pytest.raises(ValueError, match=r"run\(compute=.*\): compute must be None, 'wall', 'cpu', 'wall:FACTOR'"):
        sc.run(ring, 1, args=(1,), compute=bad)


def test_a_blocking_call_outside_any_rank_says_where_to_make_it() -> None:
    async def idle() -> None:
        pass

    with pytest.raises(RuntimeError, match="outside any synchronous rank; call it from the plain "
                                           "function passed to sc.run"):
        _sync.block(idle())


def test_a_plain_function_that_returns_a_coroutine_is_told_to_use_async_def() -> None:
    async def body() -> None:
        pass

    def fn(_comm: object) -> Any:
        return body()

    with pytest.raises(sc.RankError) as info:
        sc.run(fn, 1)
    assert "fn(comm) returned an awaitable from a plain function; define it with async def" in str(
        info.value.__cause__)


def test_thread_ranks_keep_thread_local_state_per_rank() -> None:
    local = threading.local()

    def fn(_comm: object) -> tuple[int, str]:
        comm = world()
        local.value = comm.rank
        _sync.block(comm.barrier())
        return local.value, threading.current_thread().name

    result = sc.run(on("thread", fn), 3)
    assert list(result) == [(r, f"simcluster rank {r}") for r in range(3)]
    assert not [t for t in threading.enumerate() if t.name.startswith("simcluster rank")]


def test_sync_and_async_ranks_cannot_be_told_apart_by_their_peers() -> None:
    """A partial of a plain function is synchronous; a partial of an async one is async."""
    import functools

    assert not _sync.is_async(functools.partial(ring, n=1))
    assert _sync.is_async(functools.partial(async_ring, n=1))
    assert list(sc.run(functools.partial(ring, n=1), 2)) == list(
        sc.run(functools.partial(async_ring, n=1), 2))
