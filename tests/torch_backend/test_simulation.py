"""The simulator shows through torch.distributed: virtual time, stats, traces, deadlocks, mismatches, seeds."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402

ALPHA = 2.0**-20
BETA = 2.0**-30
"""Powers of two, so expected times compare exactly."""


def _line_of(fn: Any, text: str) -> int:
    """Return the line number of the first line of ``fn``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("size", [2, 3, 4])
def test_ring_all_reduce_costs_the_textbook_time(size: int) -> None:
    n = 1536  # float32 elements, a multiple of every size

    def fn(rank: int) -> float:
        dist.init_process_group("simcluster")
        t = torch.ones(n)
        dist.all_reduce(t)
        dist.destroy_process_group()
        return t[0].item()

    result = sctorch.spawn(fn, nprocs=size, latency=sc.latency.AlphaBeta(ALPHA, BETA),
                           algorithms={"all_reduce": "ring"})
    assert list(result) == [float(size)] * size
    assert result.elapsed == 2 * (size - 1) * (ALPHA + 4 * n / size * BETA)
    assert result.stats.messages_sent == (2 * (size - 1),) * size


def test_a_send_costs_alpha_plus_n_beta_and_counts_its_bytes() -> None:
    def fn(rank: int) -> float:
        dist.init_process_group("simcluster")
        t = torch.zeros(256, dtype=torch.float64)
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        return 0.0

    result = sctorch.spawn(fn, nprocs=2, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    assert result.times == [0.0, ALPHA + 2048 * BETA]
    assert result.stats.bytes_sent == (2048, 0)
    assert result.stats.messages_received == (0, 1)


@pytest.mark.timeout(60)  # 300 s of real sleep would run past this
def test_time_sleep_in_a_rank_is_virtual() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        time.sleep(100.0 * (rank + 1))  # compute, in virtual seconds
        dist.barrier()

    result = sctorch.spawn(fn, nprocs=3, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    # dissemination barrier: ceil(log2 3) = 2 rounds after the last rank (rank 2) arrives
    assert result.elapsed == pytest.approx(300.0 + 2 * ALPHA, rel=1e-15, abs=1e-12)
    assert min(result.times) >= 1.5 + ALPHA


def test_trace_records_torch_calls_as_spans_and_writes_chrome_json(tmp_path: Path) -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        t = torch.ones(4)
        dist.all_reduce(t)
        dist.broadcast(t, src=1)

    path = tmp_path / "trace.json"
    result = sctorch.spawn(fn, nprocs=2, trace=path)
    spans = [(s.rank, s.name) for s in result.trace.spans if s.name in ("iall_reduce", "ibroadcast")]
    assert sorted(spans) == [(0, "iall_reduce"), (0, "ibroadcast"), (1, "iall_reduce"),
                             (1, "ibroadcast")]
    doc = json.loads(path.read_text())
    assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"} >= {"iall_reduce", "ibroadcast"}


def test_head_to_head_recv_is_a_deadlock_naming_the_users_line() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        t = torch.zeros(1)
        dist.recv(t, src=1 - rank)
        dist.send(t, dst=1 - rank)

    line = _line_of(fn, "dist.recv(")
    where = f"{Path(__file__).name}:{line}"
    with pytest.raises(sc.DeadlockError) as info:
        sctorch.spawn(fn, nprocs=2)
    assert str(info.value) == (
        "deadlock: 2 ranks blocked and no message in flight at virtual time 0s\n"
        f"  rank 0 waiting in irecv(buf=torch.float32[1], src=1, tag=0) at {where}\n"
        f"  rank 1 waiting in irecv(buf=torch.float32[1], src=0, tag=0) at {where}\n"
        "wait-for cycle: 0 -> 1 -> 0")


def test_a_rank_that_skips_a_collective_leaves_the_others_deadlocked() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        if rank != 2:
            dist.all_reduce(torch.ones(1))

    line = _line_of(fn, "dist.all_reduce(")
    with pytest.raises(sc.DeadlockError) as info:
        sctorch.spawn(fn, nprocs=3)
    message = str(info.value)
    assert "rank 0 waiting in " in message and f"{Path(__file__).name}:{line}" in message
    assert "all_reduce(op=SUM)" in message


def test_different_collectives_on_different_ranks_are_a_mismatch() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        t = torch.ones(2)
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=0)

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=2)
    assert isinstance(info.value.__cause__, sc.CollectiveMismatchError)
    assert "all_reduce(op=SUM)" in str(info.value.__cause__)
    assert "broadcast(src=0)" in str(info.value.__cause__)


def test_changing_an_isend_tensor_before_wait_is_a_buffer_hazard() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        t = torch.zeros(4)
        if rank == 0:
            req = dist.isend(t, dst=1)
            t += 1
            req.wait()
        else:
            dist.recv(t, src=0)

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=2)
    assert isinstance(info.value.__cause__, sc.BufferHazardError)


def test_an_isend_never_waited_is_reported_as_a_leak() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        if rank == 0:
            dist.isend(torch.ones(1), dst=1)
        else:
            dist.recv(torch.zeros(1), src=0)

    with pytest.warns(sc.SimclusterWarning, match=r"rank 0: isend\(dst=1, tag=0\) completed but "
                      r"was never waited or tested"):
        sctorch.spawn(fn, nprocs=2)


def _any_source_order(rank: int, size: int) -> list[Any]:
    dist.init_process_group("simcluster")
    if rank == 0:
        got = []
        for _ in range(size - 1):
            t = torch.zeros(1)
            got.append(dist.recv(t))  # any source: the order is what the schedule makes it
        return got
    time.sleep(0.001 * (rank % 2))
    dist.send(torch.ones(1), dst=0)
    return [torch.rand(1).item()]


def test_the_same_seed_gives_the_same_results_times_and_trace() -> None:
    kw: dict[str, Any] = {"latency": sc.latency.Jitter(sc.latency.AlphaBeta(ALPHA, BETA), rel=0.5),
                          "trace": True}
    first = sctorch.spawn(_any_source_order, args=(5,), nprocs=5, seed=7, **kw)
    second = sctorch.spawn(_any_source_order, args=(5,), nprocs=5, seed=7, **kw)
    assert list(first) == list(second)
    assert first.times == second.times
    assert first.stats == second.stats
    assert first.trace.dumps() == second.trace.dumps()


def test_isend_above_the_eager_limit_completes_when_received() -> None:
    def fn(rank: int) -> list[Any]:
        dist.init_process_group("simcluster")
        big = torch.zeros(1 << 15)  # 128 KiB: a rendezvous send
        if rank == 0:
            work = dist.isend(big, dst=1)
            before = work.is_completed()
            work.wait()
            return [before, work.is_completed(), dist.get_rank()]
        time.sleep(1.0)
        dist.recv(big, src=0)
        return []

    result = sctorch.spawn(fn, nprocs=2)
    assert result[0] == [False, True, 0]
    assert result.times == [1.0, 1.0]


def test_a_ring_of_large_isends_does_not_deadlock_but_blocking_sends_do() -> None:
    def overlapped(rank: int, size: int) -> float:
        dist.init_process_group("simcluster")
        out, got = torch.full((1 << 15,), float(rank)), torch.zeros(1 << 15)
        req = dist.isend(out, dst=(rank + 1) % size)
        dist.recv(got, src=(rank - 1) % size)
        req.wait()
        return got[0].item()

    def blocking(rank: int, size: int) -> None:
        dist.init_process_group("simcluster")
        out, got = torch.full((1 << 15,), float(rank)), torch.zeros(1 << 15)
        dist.send(out, dst=(rank + 1) % size)  # above eager_limit: waits for the receive
        dist.recv(got, src=(rank - 1) % size)

    assert list(sctorch.spawn(overlapped, args=(3,), nprocs=3)) == [2.0, 0.0, 1.0]
    with pytest.raises(sc.DeadlockError, match="wait-for cycle"):
        sctorch.spawn(blocking, args=(3,), nprocs=3)


def test_timeout_stops_a_thread_rank_that_spins_and_names_its_line() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster")
        if rank == 1:
            while True: pass  # noqa: E701 - one line, so the interrupt lands on it
        dist.barrier()

    spin = _line_of(fn, "while True")
    barrier = _line_of(fn, "dist.barrier()")
    with pytest.raises(sc.RunTimeoutError) as info:
        sctorch.spawn(fn, nprocs=3, timeout=0.5)
    assert str(info.value).splitlines()[1:4] == [
        f"  rank 0 waiting in ibarrier() at test_simulation.py:{barrier}",
        f"  rank 1 running at test_simulation.py:{spin}",
        f"  rank 2 waiting in ibarrier() at test_simulation.py:{barrier}",
    ]
