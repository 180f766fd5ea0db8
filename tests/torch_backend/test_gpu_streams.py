"""Compute on a modelled GPU (compute="gpu:DEVICE") and streams: async collectives overlap compute."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster import cli  # noqa: E402
from simcluster.engine import sync as _sync  # noqa: E402
from simcluster.predict import H100_SXM, Device  # noqa: E402
from simcluster.predict.compute import GpuClock  # noqa: E402

ALPHA, BETA = 1e-6, 1e-9
LATENCY = sc.latency.AlphaBeta(ALPHA, BETA)
NBYTES = 1 << 20  # the all_reduce's buffer: 2**19 bfloat16 elements
TOLERANCE = 1e-10  # seconds: time.perf_counter reads the real epoch plus virtual time, a float of ~1e-11 s resolution


def _comm_seconds() -> float:
    """The all_reduce of NBYTES on 2 ranks by hand: gloo's ring is one reduce-scatter step and one
    all-gather step, each sending half the buffer (alpha + half * beta each)."""
    return 2 * (ALPHA + NBYTES / 2 * BETA)


def _matmul_seconds(k: int) -> float:
    """A (k, k) @ (k, k) bfloat16 matmul on the H100 SXM preset by hand, from its constants."""
    flops = 2.0 * k ** 3
    compute = flops / (H100_SXM.peak_flops["bfloat16"].value * H100_SXM.matmul(flops))
    memory = 3 * k * k * 2 / (H100_SXM.memory_bandwidth.value * H100_SXM.memory_efficiency.value)
    return H100_SXM.launch_overhead.value + max(compute, memory)


def _step(rank: int, async_op: bool, k: int) -> tuple[float, float, float]:
    """An all_reduce and an independent matmul; returns (step seconds, the rank's predicted
    GPU seconds so far, the same after the step)."""
    dist.init_process_group("simcluster")
    x = torch.ones(NBYTES // 2, dtype=torch.bfloat16)
    a = torch.ones(k, k, dtype=torch.bfloat16)
    b = torch.ones(k, k, dtype=torch.bfloat16)
    dist.barrier()
    t0 = time.perf_counter()
    work = dist.all_reduce(x, async_op=async_op)
    c = a @ b
    if async_op:
        work.wait()
    step = time.perf_counter() - t0
    assert tuple(c.shape) == (k, k)
    meter = _sync.current().meter  # type: ignore[union-attr]
    return step, meter.clock(), meter.since


def _run(async_op: bool, k: int, tensors: str = "real", compute: Any = "gpu:h100_sxm") -> Any:
    return sctorch.spawn(_step, (async_op, k), nprocs=2, latency=LATENCY, compute=compute,
                         tensors=tensors, trace=True)


@pytest.mark.parametrize("tensors", ["real", "fake"])
@pytest.mark.parametrize("k", [2048, 8192])  # compute shorter than communication, then longer
def test_async_collective_and_independent_compute_take_the_longer_of_the_two(tensors: str, k: int) -> None:
    comm, compute = _comm_seconds(), _matmul_seconds(k)
    assert (compute < comm) == (k == 2048)
    result = _run(True, k, tensors)
    for step, _, _ in result:
        assert step == pytest.approx(max(compute, comm), abs=TOLERANCE)


@pytest.mark.parametrize("tensors", ["real", "fake"])
def test_a_synchronous_collective_returns_at_once_as_nccl_s_does(tensors: str) -> None:
    # nothing reads the all_reduce's result before the clock is read: the step is the matmul alone
    # (test_gpu_sync_overlap.py: the op that reads it waits)
    result = _run(False, 8192, tensors)
    for step, _, _ in result:
        assert step == pytest.approx(_matmul_seconds(8192), abs=TOLERANCE)


def test_the_compute_charged_is_the_gpu_clock_total() -> None:
    result = _run(True, 2048)
    assert result.trace is not None
    for rank, (_, total, since) in enumerate(result):
        assert total == since  # the clock read at the rank's end: nothing after the last call
        charged = sum(s.args["seconds"] for s in result.trace.spans
                      if s.rank == rank and s.name == "compute")
        assert charged == pytest.approx(total, rel=1e-12)
        assert total > _matmul_seconds(2048)  # the tensors' creation too
    # the charge at wait() is the matmul alone, as a GpuClock outside the run times it
    a = torch.ones(2048, 2048, dtype=torch.bfloat16)
    with GpuClock(H100_SXM) as clock:
        a @ a
    matmul = [s.args["seconds"] for s in result.trace.spans
              if s.rank == 0 and s.name == "compute" and s.args["before"] == "wait"]
    assert matmul == [clock.seconds] and clock.seconds == pytest.approx(_matmul_seconds(2048), rel=1e-12)


def test_runs_are_deterministic_and_take_a_device_object() -> None:
    first, second = _run(True, 2048), _run(True, 2048, compute=H100_SXM)
    assert list(first) == list(second)
    assert first.trace is not None and second.trace is not None
    assert first.trace.dumps() == second.trace.dumps()


def test_the_trace_shows_each_rank_s_compute_and_communication_as_two_tracks() -> None:
    result = _run(True, 8192)
    assert result.trace is not None
    events = result.trace.to_chrome()["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 0 compute", 3: "rank 1 compute"}
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in spans if e["name"] == "compute"} == {2, 3}
    # the collective's span on the rank's track runs from its issue to its completion
    assert {e["tid"] for e in spans if e["name"] == "all_reduce"} == {0, 1}
    collective = next(e for e in spans if e["tid"] == 0 and e["name"] == "all_reduce")
    assert collective["dur"] * 1e-6 == pytest.approx(_comm_seconds())
    # the matmul's span runs while the all_reduce is in flight: it starts where the collective is
    # issued, and the collective completes before the compute does
    matmul = next(e for e in spans if e["tid"] == 2 and e["args"]["before"] == "wait")
    assert matmul["ts"] == collective["ts"] and matmul["dur"] * 1e-6 == pytest.approx(_matmul_seconds(8192))


def test_an_unknown_device_names_the_presets() -> None:
    with pytest.raises(Exception, match="gpu:h100_sxm"):
        _run(True, 64, compute="gpu:h200")
    with pytest.raises(ValueError, match="gpu:a100_sxm_80gb"):
        _sync.parse_compute("gpu:")
    assert isinstance(_sync.parse_compute("gpu:a100_sxm_80gb").device, Device)


def test_torchrun_charges_the_modelled_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "step.py"
    script.write_text("import time, torch, torch.distributed as dist\n"
                      "dist.init_process_group('gloo')\n"
                      "x = torch.ones(1 << 19, dtype=torch.bfloat16)\n"
                      "a = torch.ones(8192, 8192, dtype=torch.bfloat16)\n"
                      "dist.barrier()\n"
                      "t0 = time.perf_counter()\n"
                      "work = dist.all_reduce(x, async_op=True)\n"
                      "c = a @ a\n"
                      "work.wait()\n"
                      "print(f'step {time.perf_counter() - t0!r}')\n")
    trace = tmp_path / "trace.json"
    for extra in ([], ["--fake"]):
        rc = cli.main(["torchrun", *extra, "--nproc-per-node", "2", "--compute", "gpu:h100_sxm",
                       "--latency", "alphabeta:1us,1ns", "--trace", str(trace), str(script)])
        out, _ = capsys.readouterr()
        assert rc == 0
        steps = [float(line.split()[1]) for line in out.splitlines() if line.startswith("step ")]
        assert len(steps) == 2
        for step in steps:
            assert step == pytest.approx(max(_matmul_seconds(8192), _comm_seconds()), abs=TOLERANCE)
        doc = json.loads(trace.read_text())
        assert any(e.get("args", {}).get("name") == "rank 1 compute" for e in doc["traceEvents"])


def test_a_gpu_mode_refuses_ranks_that_are_not_torch_ranks() -> None:
    def rank_fn(comm: Any) -> int:
        return int(comm.rank)

    with pytest.raises(sc.errors.RankError, match="simcluster.torch.spawn") as info:
        sc.run(rank_fn, 2, compute="gpu:h100_sxm")
    assert "gpu: compute mode" in str(info.value.__cause__)
