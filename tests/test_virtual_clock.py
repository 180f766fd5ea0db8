"""Inside a synchronous rank, ``time``'s clocks read the rank's virtual time.

``time.time()``, ``time.monotonic()``, ``time.perf_counter()`` and their ``_ns``
forms are each their real reading when the run started plus the rank's virtual
seconds since: the clock ``MPI.Wtime`` and ``time.sleep`` use. Outside ranks
(the caller's thread, other threads) they are the real clocks, and every one
is the original again once the run ends. Without measured compute the
differences are exact; with it, reading a clock charges the work before it.
"""

from __future__ import annotations

import sys
import threading
import time
import textwrap
from pathlib import Path
from typing import Any

import pytest

import simcluster as sc
from simcluster import MPI, cli
from simcluster.engine import sync as _sync

ORIGINALS = {name: getattr(time, name) for name in _sync.VIRTUAL_CLOCKS}
"""The real clocks, bound at import (no run goes on then)."""

wall_clock = time.perf_counter
CLOCKS = ["time", "monotonic", "perf_counter"]
NS = [f"{name}_ns" for name in CLOCKS]
STACKS = ["greenlet", "thread"]
AB = sc.latency.AlphaBeta(1e-6, 1e-9)


def on(stack: str, fn: Any) -> Any:
    """``fn`` as a rank function on the given stack (threads are what torch ranks use)."""
    if stack == "thread":
        fn.__simcluster_stack__ = "thread"
    return fn


def readings() -> dict[str, float]:
    """Every clock of ``time`` (and ``MPI.Wtime``) read now."""
    return {**{name: getattr(time, name)() for name in CLOCKS + NS}, "Wtime": MPI.Wtime()}


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def assert_advanced(delta: dict[str, float], seconds: float) -> None:
    """Every clock advanced by exactly ``seconds`` (to a float's precision)."""
    for name in CLOCKS:
        assert delta[name] == pytest.approx(seconds, rel=0, abs=1e-6), name
    for name in NS:
        assert delta[name] == round(seconds * 1e9), name
    assert delta["Wtime"] == seconds


# ---- under sc.run ----


def test_the_virtual_clocks_are_the_epoch_s_fields() -> None:
    assert _sync.VIRTUAL_CLOCKS == _sync.Epoch._fields


@pytest.mark.parametrize("stack", STACKS)
def test_a_sleep_advances_every_clock_by_exactly_its_seconds(stack: str) -> None:
    def fn(comm: Any) -> dict[str, float]:
        before = readings()
        time.sleep(1.5)
        return deltas(before, readings())

    for delta in sc.run(on(stack, fn), 2):
        assert_advanced(delta, 1.5)


@pytest.mark.parametrize("stack", STACKS)
def test_the_clocks_start_at_the_real_clocks_when_the_run_started(stack: str) -> None:
    def fn(comm: Any) -> dict[str, float]:
        time.sleep(3600.0 * (comm.rank + 1))  # an hour of virtual time passes in no time
        return readings()

    start = {name: clock() for name, clock in ORIGINALS.items()}
    ranks = list(sc.run(on(stack, fn), 2))
    end = {name: clock() for name, clock in ORIGINALS.items()}
    for rank, got in enumerate(ranks):
        hours = 3600.0 * (rank + 1)
        for name in CLOCKS + NS:
            scale = 1e9 if name.endswith("_ns") else 1.0
            assert start[name] + hours * scale <= got[name] <= end[name] + hours * scale, name


def test_wtime_and_every_clock_agree_through_messages_and_sleeps() -> None:
    def fn(comm: Any) -> list[dict[str, float]]:
        start = readings()
        seen = []
        buf = bytearray(1 << 16)
        for step in range(3):
            if comm.rank == 0:
                comm.Send(buf, dest=1)
            else:
                comm.Recv(buf, source=0)
            time.sleep(0.001 * (comm.rank + step))
            comm.Barrier()
            seen.append(deltas(start, readings()))
        return seen

    for seen in sc.run(fn, 2, latency=AB):
        for delta in seen:
            assert delta["Wtime"] > 0
            for name in CLOCKS:
                assert delta[name] == pytest.approx(delta["Wtime"], rel=0, abs=1e-6)
            for name in NS:
                assert abs(delta[name] - delta["Wtime"] * 1e9) <= 1


def after_a_barrier_where_rank_1_slept(comm: Any) -> tuple[float, float]:
    before, wtime = time.time(), MPI.Wtime()
    if comm.rank == 1:
        time.sleep(2.0)
    comm.Barrier()
    return time.time() - before, MPI.Wtime() - wtime


def test_a_barrier_passes_the_sleep_of_the_last_rank_to_arrive_to_every_clock() -> None:
    (zero, _), (one, _) = sc.run(after_a_barrier_where_rank_1_slept, 2)
    assert zero == pytest.approx(2.0, rel=0, abs=1e-6)  # no latency: the barrier costs nothing
    assert one == pytest.approx(2.0, rel=0, abs=1e-6)
    modelled = list(sc.run(after_a_barrier_where_rank_1_slept, 2, latency=AB))
    assert 2.0 < modelled[0][1] < 2.001  # rank 0 waits 2 s, then for rank 1's message
    for wall, wtime in modelled:
        assert 2.0 <= wtime < 2.001
        assert wall == pytest.approx(wtime, rel=0, abs=1e-6)


def test_two_runs_see_the_same_differences() -> None:
    def fn(comm: Any) -> list[int]:
        start = time.perf_counter_ns()
        seen = []
        for step in range(4):
            time.sleep(0.25 * ((comm.rank + step) % 3))
            comm.sendrecv(step, dest=(comm.rank + 1) % 3, source=(comm.rank - 1) % 3)
            comm.Barrier()
            seen.append(time.perf_counter_ns() - start)
        return seen

    first = list(sc.run(fn, 3, latency=AB))
    assert first == list(sc.run(fn, 3, latency=AB))
    assert first[0][-1] > 0


def test_other_threads_and_the_caller_keep_the_real_clocks() -> None:
    def fn(comm: Any) -> dict[str, float]:
        time.sleep(3600.0)  # the rank's clocks are an hour ahead of the real ones
        seen: dict[str, float] = {}

        def helper() -> None:  # a thread of the rank's, not the rank: the real clocks
            seen.update({name: getattr(time, name)() - ORIGINALS[name]() for name in CLOCKS})

        thread = threading.Thread(target=helper)
        thread.start()
        thread.join()
        seen["rank"] = time.time() - ORIGINALS["time"]()
        return seen

    (seen,) = sc.run(fn, 1)
    for name in CLOCKS:  # the real clocks agree with each other; the rank's is an hour ahead
        assert abs(seen[name]) < 600.0, name
    assert seen["rank"] == pytest.approx(3600.0, abs=600.0)
    for name, original in ORIGINALS.items():
        assert getattr(time, name) is original, name


def test_a_failing_run_restores_the_real_clocks() -> None:
    def fn(comm: Any) -> None:
        time.sleep(1.0)
        raise ValueError("boom")

    with pytest.raises(sc.RankError):
        sc.run(fn, 2)
    for name, original in ORIGINALS.items():
        assert getattr(time, name) is original, name


# ---- measured compute ----


@pytest.mark.parametrize("stack", STACKS)
def test_measured_work_between_two_reads_reads_as_its_charged_time(stack: str) -> None:
    def fn(comm: Any) -> float:
        before = time.perf_counter()
        start = wall_clock()
        while wall_clock() - start < 0.05:  # 50 ms of the rank's own work
            pass
        return time.perf_counter() - before

    for spent in sc.run(on(stack, fn), 2, compute="wall"):
        assert 0 < spent < 5.0  # about 50 ms: the machine may be loaded


@pytest.mark.timeout(60)
def test_a_loop_polling_a_clock_sees_time_pass_under_measured_compute() -> None:
    # each turn is shorter than the threshold: a read that dropped it would never see time move
    def fn(comm: Any) -> float:
        start = time.monotonic()
        while time.monotonic() - start < 0.01:
            pass
        return MPI.Wtime()

    for wtime in sc.run(fn, 2, compute="wall"):
        assert wtime >= 0.01


def test_a_replay_gives_the_clock_reads_of_the_recorded_run(tmp_path: Path) -> None:
    path = tmp_path / "charges.json"

    def fn(comm: Any) -> list[float]:
        start = time.perf_counter()
        seen = []
        for step in range(5):
            end = wall_clock() + 0.0002 * (step + comm.rank + 1)
            while wall_clock() < end:
                pass
            seen.append(time.perf_counter() - start)
            comm.Barrier()
        return seen

    recorded = list(sc.run(fn, 2, compute=f"wall,record={path}"))
    assert list(sc.run(fn, 2, compute=f"replay:{path}")) == recorded


# ---- under simcluster mpirun ----


SCRIPT = """
    import time
    from mpi4py import MPI

    def readings():
        return [time.time(), time.monotonic(), time.perf_counter(), time.time_ns(),
                time.monotonic_ns(), time.perf_counter_ns(), MPI.Wtime()]

    comm = MPI.COMM_WORLD
    before = readings()
    time.sleep(1.5)
    print(comm.rank, [round(b - a, 6) for a, b in zip(before, readings())])
    before = time.time()
    if comm.rank == 1:
        time.sleep(2)
    comm.Barrier()
    print(comm.rank, round(time.time() - before, 6))
"""


def test_mpirun_scripts_read_the_rank_s_virtual_clock(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    prog = tmp_path / "clocks.py"
    prog.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    monkey_path = list(sys.path)
    try:
        rc = cli.main(["mpirun", "--exact", "--latency", "zero", "-n", "2", str(prog)])
    finally:
        sys.path[:] = monkey_path
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")
    ns = 1_500_000_000
    assert sorted(out.splitlines()) == sorted([
        f"0 [1.5, 1.5, 1.5, {ns}, {ns}, {ns}, 1.5]", "0 2.0",
        f"1 [1.5, 1.5, 1.5, {ns}, {ns}, {ns}, 1.5]", "1 2.0"])


# ---- torch ranks ----


def test_torch_ranks_read_the_virtual_clock_around_a_barrier() -> None:
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    import simcluster.torch as sctorch

    def fn(rank: int) -> float:
        dist.init_process_group("simcluster")
        start = time.time()
        if rank == 1:
            time.sleep(1.0)
        dist.barrier()
        took = time.time() - start
        dist.destroy_process_group()
        return took

    for took in sctorch.spawn(fn, nprocs=3):
        assert took == pytest.approx(1.0, rel=0, abs=1e-3)
