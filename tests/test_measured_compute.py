"""Measured compute: only the user's code between calls is charged, a threshold, record and replay.

``compute="wall"`` / ``"cpu"`` (``simcluster mpirun``'s default is ``cpu``) charge each
rank the time its own code runs between two calls into simcluster; what simcluster does
inside a call (copies, packing, rank switches, output capture) is never charged. The
few assertions on measured times here are loose single bounds (10%, a quarter); the
precise figures (the OSU benchmarks against the network model) are a benchmark:
``simcluster bench compute`` and the slow ``tests/test_bench_compute.py``.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI, cli
from simcluster.engine import sync as _sync
from simcluster.errors import RankError, UsageError

wall_clock = time.perf_counter  # bound at import: inside a rank, time.perf_counter() is virtual

STACKS = ["greenlet", "thread"]
AB = sc.latency.AlphaBeta(1e-6, 1e-9)


def on(stack: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a rank function on the given stack (threads are what torch ranks use)."""
    if stack == "thread":
        fn.__simcluster_stack__ = "thread"  # type: ignore[attr-defined]
    return fn


def busy(seconds: float) -> None:
    """Spin for ``seconds`` of wall time (the rank's own work)."""
    start = wall_clock()
    while wall_clock() - start < seconds:
        pass


# ---- what is charged ----


def test_outside_measured_runs_the_facade_is_untouched() -> None:
    original = MPI.Comm.Send
    seen = []

    def fn(comm: Any) -> None:
        seen.append(MPI.Comm.Send is original)

    sc.run(fn, 1)
    sc.run(fn, 1, compute="wall")
    sc.run(fn, 1)
    assert seen == [True, False, True]  # wrapped only while a measured run goes on
    assert MPI.Comm.Send is original


@pytest.mark.parametrize("stack", STACKS)
def test_a_numpy_loop_is_charged_its_wall_time(stack: str) -> None:
    def fn(comm: Any) -> tuple[float, float]:
        a = np.random.default_rng(comm.rank).random((128, 128))
        before = MPI.Wtime()
        start = wall_clock()
        while wall_clock() - start < 0.05:
            a = np.sqrt(a @ a.T) / 128
        spent = wall_clock() - start
        return MPI.Wtime() - before, spent

    for charged, spent in sc.run(on(stack, fn), 2, compute="wall"):
        assert abs(charged - spent) <= 0.1 * spent


def test_cpu_charges_the_cpu_time_of_the_rank_s_thread() -> None:
    def fn(comm: Any) -> tuple[float, float]:
        a = np.random.default_rng(comm.rank).random((128, 128))
        before = MPI.Wtime()
        start = time.thread_time()
        while time.thread_time() - start < 0.05:
            a = np.sqrt(a @ a.T) / 128
        spent = time.thread_time() - start
        return MPI.Wtime() - before, spent

    for charged, spent in sc.run(fn, 2, compute="cpu"):
        assert abs(charged - spent) <= 0.1 * spent


def test_copies_and_rank_switches_are_not_charged(tmp_path: Path) -> None:
    # 1 MiB ping-pongs on a network that costs nothing: every virtual second is a charge, and
    # almost all of the loop's time is simcluster's (the copies, the switches). The typical
    # call is judged (the median of the record), not the total: on a loaded machine one
    # burst now and then is charged a time slice the OS gave elsewhere.
    def fn(comm: Any) -> float:
        buf = np.zeros(1 << 20, dtype="u1")
        start = wall_clock()
        for _ in range(30):
            if comm.rank == 0:
                comm.Send(buf, dest=1)
                comm.Recv(buf, source=1)
            else:
                comm.Recv(buf, source=0)
                comm.Send(buf, dest=0)
        return wall_clock() - start

    path = tmp_path / "charges.json"
    result = sc.run(fn, 2, compute=f"cpu,record={path}")
    per_call = min(result) / 60
    for rank in json.loads(path.read_text(encoding="utf-8"))["ranks"]:
        charged = dict.fromkeys(range(61), 0.0)  # 60 calls and the rank's exit
        charged.update({index: seconds for index, _call, seconds in rank})
        assert np.median(list(charged.values())) < 0.05 * per_call


def test_a_nonblocking_call_is_posted_after_the_work_before_it() -> None:
    def fn(comm: Any) -> float:
        if comm.rank == 0:
            busy(0.005)
            req = comm.Isend(np.zeros(1), dest=1)  # posted at 5 ms, not at 0
            req.Wait()
            return 0.0
        status = MPI.Status()
        comm.Recv(np.zeros(1), source=0, status=status)
        return MPI.Wtime()

    assert sc.run(fn, 2, compute="wall,threshold=1ms")[1] >= 0.005


def test_bursts_under_the_threshold_are_not_charged() -> None:
    def fn(comm: Any) -> float:
        busy(0.005)
        comm.Barrier()
        return MPI.Wtime()

    assert list(sc.run(fn, 2, compute="wall,threshold=1s")) == [0.0, 0.0]
    assert min(sc.run(fn, 2, compute="wall:2,threshold=1ms")) >= 0.010  # the factor applies


# ---- record and replay ----


def test_a_record_lists_each_rank_s_charges_by_call(tmp_path: Path) -> None:
    path = tmp_path / "charges.json"

    def fn(comm: Any) -> float:
        busy(0.002)
        time.sleep(1.0)  # a virtual sleep: the work before it is charged first
        busy(0.002)
        comm.Barrier()
        busy(0.002)
        return MPI.Wtime()

    result = sc.run(fn, 2, compute=f"wall,threshold=1ms,record={path}")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert (data["format"], data["clock"], data["factor"], data["threshold"], data["world_size"]) == (
        _sync.RECORD_FORMAT, "wall", 1.0, 0.001, 2)
    for rank, charges in enumerate(data["ranks"]):
        assert [(index, call) for index, call, _ in charges] == [
            (0, "time.sleep"), (1, "Barrier"), (2, "Wtime"), (3, "exit")]
        assert all(seconds >= 0.002 for _, _, seconds in charges[:3]) and charges[3][2] == 0.0
        assert result[rank] >= 1.0 + sum(seconds for _, _, seconds in charges)


def _work(comm: Any) -> list[float]:
    """Ranks of unequal work exchanging messages, noting the time after each call."""
    times = []
    for i in range(4):
        busy(0.0003 * (comm.rank + 1) * (i + 1))
        total = comm.allreduce(i + comm.rank)
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        comm.sendrecv(total, dest=right, source=left)
        times.append(MPI.Wtime())
    return times


def test_replay_gives_the_same_times_bit_for_bit(tmp_path: Path) -> None:
    path = tmp_path / "charges.json"
    measured = sc.run(_work, 3, latency=AB, compute=f"cpu,threshold=0,record={path}")
    replayed = sc.run(_work, 3, latency=AB, compute=f"replay:{path}")
    assert list(replayed) == list(measured)
    assert replayed.times == measured.times
    assert sc.run(_work, 3, latency=AB, compute=f"replay:{path}").times == measured.times


def test_a_replay_that_leaves_its_record_says_where(tmp_path: Path) -> None:
    path = tmp_path / "charges.json"
    sc.run(_work, 2, compute=f"wall,threshold=0,record={path}")

    def other(comm: Any) -> None:
        comm.Barrier()
        comm.Barrier()

    with pytest.raises(RankError) as info:
        sc.run(other, 2, compute=f"replay:{path}")
    assert isinstance(info.value.__cause__, UsageError)
    assert "this run left the record at its call 0, Barrier: the record has allreduce there" in str(
        info.value.__cause__)
    with pytest.raises(UsageError, match=r"the record is of 2 ranks, this run has 3"):
        sc.run(_work, 3, compute=f"replay:{path}")


def test_a_replay_may_go_with_a_fault_plan(tmp_path: Path) -> None:
    path = tmp_path / "charges.json"
    sc.run(_work, 2, compute=f"wall,threshold=0,record={path}")
    first = sc.run(_work, 2, compute=f"replay:{path}", faults="slow:1x2@0..1")
    assert sc.run(_work, 2, compute=f"replay:{path}", faults="slow:1x2@0..1").times == first.times
    with pytest.raises(UsageError, match="a fault plan replays exactly only when no measured"):
        sc.run(_work, 2, compute="wall", faults="slow:1x2@0..1")


@pytest.mark.parametrize(("bad", "says"), [
    ("gpu", "compute must be None, 'wall', 'cpu'"),
    ("wall:0", "compute must be None"),
    ("wall:", "compute must be None"),
    ("cpu,threshold=soon", "'threshold=soon' is not an option"),
    ("wall,colour=red", "'colour=red' is not an option"),
    ("replay:/no/such/record.json", "cannot read /no/such/record.json"),
    ("cpu,record=/no/such/record.json", "no folder /no/such to write the record in"),
])
def test_a_bad_compute_says_what_it_takes(bad: str, says: str) -> None:
    with pytest.raises(UsageError, match=r"run\(compute=.*\): " + says):
        sc.run(_work, 1, compute=bad)


def test_a_record_that_is_not_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": []}', encoding="utf-8")
    with pytest.raises(UsageError, match="is not a record of measured compute"):
        sc.run(_work, 1, compute=f"replay:{path}")


# ---- under simcluster mpirun ----


SCRIPT = """
    import time
    from mpi4py import MPI

    def busy(seconds):
        start = time.clock_gettime(time.CLOCK_MONOTONIC)  # the wall clock: time.perf_counter() is the rank's
        while time.clock_gettime(time.CLOCK_MONOTONIC) - start < seconds:
            pass

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for step in range(3):
        busy(0.0004 * ((rank * 7 + step * 3) % 5 + 1))  # unequal work: the lines interleave
        print(f"rank {rank} step {step} at {MPI.Wtime()!r}")
        comm.Barrier()
        print(f"rank {rank} after barrier {step} at {MPI.Wtime()!r}")
"""


def mpirun(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = cli.main(["mpirun", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_mpirun_replays_a_measured_run_byte_for_byte(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    record = tmp_path / "charges.json"
    rc, measured, err = mpirun(capsys, "-n", 3, "--compute", f"cpu,threshold=0,record={record}", prog)
    assert (rc, err) == (0, "") and measured.count("\n") == 18
    rc, replayed, err = mpirun(capsys, "-n", 3, "--compute", f"replay:{record}", prog)
    assert (rc, err) == (0, "")
    assert replayed == measured
    calls = {call for rank in json.loads(record.read_text(encoding="utf-8"))["ranks"]
             for _, call, _ in rank}
    assert {"Barrier", "Wtime", "print", "exit"} <= calls  # a line comes after the work before it


def test_mpirun_charges_cpu_time_by_default(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import time
        from mpi4py import MPI

        start = time.thread_time()
        while time.thread_time() - start < 0.01:  # 10 ms of CPU time
            pass
        print(MPI.Wtime() >= 0.01)
    """), encoding="utf-8")
    assert mpirun(capsys, "-n", 2, "--latency", "zero", prog) == (0, "True\nTrue\n", "")
    assert mpirun(capsys, "-n", 2, "--latency", "zero", "--exact", prog) == (0, "False\nFalse\n", "")
    rc, out, err = mpirun(capsys, "--compute", "replay:missing.json", prog)
    assert (rc, out) == (2, "")
    assert "cannot read missing.json" in err


# ---- torch ranks ----


def test_torch_operations_stop_the_clock(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    from simcluster.torch import spawn

    path = tmp_path / "charges.json"

    def fn(rank: int) -> list[float]:
        dist.init_process_group("simcluster")
        busy(0.003)
        t = torch.ones(4)
        dist.all_reduce(t)  # posted after the 3 ms before it, then waited for
        dist.destroy_process_group()
        return list(t.tolist())

    result = spawn(fn, nprocs=2, compute=f"wall,threshold=1ms,record={path}")
    assert list(result) == [[2.0] * 4] * 2
    assert result.elapsed >= 0.003
    for charges in json.loads(path.read_text(encoding="utf-8"))["ranks"]:
        assert [call for _, call, seconds in charges if seconds >= 0.003] == ["allreduce"]
