"""The step report of a predicted run (issue 44, items 5 and 6): ``spawn(report=True)``, ``--report``.

A two-layer model on two ranks, shapes only, timed on an H100 SXM with an AlphaBeta network, data
parallel by hand through one flat gradient buffer (as DDP's bucket), AdamW, two steps. Every
figure of the report is checked against what a user computes by hand: the step's GPU time from a
``GpuClock`` run in one process, the all_reduce from the latency model, MFU from the parameter
count and the preset's peak, peak memory from a ``MemoryTracker`` run in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

import simcluster as sc  # noqa: E402
import simcluster.torch  # noqa: E402,F401
from simcluster.predict import H100_SXM  # noqa: E402
from simcluster.predict import report as step_report  # noqa: E402
from simcluster.predict.compute import GpuClock  # noqa: E402
from simcluster.predict.memory import MemoryTracker  # noqa: E402

ALPHA, BETA = 1e-6, 1e-9
BATCH, WIDTH, HIDDEN = 512, 1024, 4096
PARAMETERS = 2 * WIDTH * HIDDEN  # no biases: the bucket is 2**23 floats, split evenly by the ring
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_model() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    model = nn.Sequential(nn.Linear(WIDTH, HIDDEN, bias=False), nn.Linear(HIDDEN, WIDTH, bias=False))
    optimizer = torch.optim.AdamW(model.parameters())
    bucket = torch.zeros(PARAMETERS)  # the flat gradient buffer, made once, as DDP's bucket
    return model, optimizer, bucket


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, bucket: torch.Tensor,
               reduce: bool, tokens: bool = False) -> None:
    model(torch.randn(BATCH, WIDTH)).sum().backward()
    grads = [p.grad for p in model.parameters()]
    torch.cat([g.flatten() for g in grads], out=bucket)
    if reduce:
        dist.all_reduce(bucket)
    for g, part in zip(grads, bucket.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))
    if tokens:
        step_report.tokens(BATCH)
    optimizer.step()
    optimizer.zero_grad()


def program(rank: int, tokens: bool = False) -> None:
    dist.init_process_group("simcluster")
    model, optimizer, bucket = make_model()
    for _ in range(2):
        train_step(model, optimizer, bucket, True, tokens)


def spawn(tokens: bool = False, **keywords: object) -> sc.RunResult:
    return simcluster.torch.spawn(program, args=(tokens,), nprocs=2, tensors="fake",
                                  compute="gpu:h100_sxm", latency=sc.latency.AlphaBeta(ALPHA, BETA),
                                  report=True, **keywords)


@pytest.fixture(scope="module")
def result() -> sc.RunResult:
    return spawn(tokens_per_step=BATCH)


class ByHand:
    """The program run in one process: GPU seconds and FLOPs at each optimizer step, peak memory."""

    def __init__(self) -> None:
        self.clock, self.tracker = GpuClock(H100_SXM, keep_ops=False), MemoryTracker()
        self.boundaries: list[tuple[float, float]] = []
        handle = register_optimizer_step_post_hook(
            lambda *_: self.boundaries.append((self.clock.seconds, self.clock.flops)))
        try:
            with FakeTensorMode(), self.tracker, self.clock:
                model, optimizer, bucket = make_model()
                for _ in range(2):
                    train_step(model, optimizer, bucket, False)
        finally:
            handle.remove()
        (seconds_1, flops_1), (seconds_2, flops_2) = self.boundaries
        self.step_seconds, self.step_flops = seconds_2 - seconds_1, flops_2 - flops_1
        # after the hook, torch's optimizer wrapper closes its profiler record_function: no kernel,
        # so no GPU time after the last step ends
        self.tail = self.clock.seconds - seconds_2


@pytest.fixture(scope="module")
def by_hand() -> ByHand:
    return ByHand()


def test_step_times_add_up_to_the_run_and_the_steady_step_is_the_last(
        result: sc.RunResult, by_hand: ByHand) -> None:
    report = result.report
    assert len(report.step_times) == 2 and report.steady_step == 2
    assert report.step_time == report.step_times[-1]
    assert by_hand.tail == 0.0
    assert sum(report.step_times) == pytest.approx(result.elapsed, rel=1e-12)


def test_the_split_is_the_gpu_time_and_the_all_reduce_and_sums_to_the_step(
        result: sc.RunResult, by_hand: ByHand) -> None:
    report = result.report
    # the second step's GPU time: zero_grad, the forward, backward, bucket copies, AdamW's step
    assert report.compute.min == pytest.approx(by_hand.step_seconds, rel=1e-12)
    assert report.compute.max == pytest.approx(by_hand.step_seconds, rel=1e-12)
    # a ring all_reduce on 2 ranks: reduce-scatter and all-gather, each alpha + half the bytes x beta
    all_reduce = 2 * (ALPHA + PARAMETERS * 4 / 2 * BETA)
    assert report.exposed_communication.median == pytest.approx(all_reduce, rel=1e-9)
    assert report.idle.max == pytest.approx(0.0, abs=1e-15)
    assert report.compute.median + report.exposed_communication.median + report.idle.median == \
        pytest.approx(report.step_time, rel=1e-12)
    assert report.step_time == pytest.approx(by_hand.step_seconds + all_reduce, rel=1e-12)


def test_tokens_per_second_and_mfu_are_the_hand_computed_ones(
        result: sc.RunResult, by_hand: ByHand) -> None:
    report = result.report
    step = report.step_time
    assert report.tokens_per_gpu == BATCH
    assert report.tokens_per_second_per_gpu == pytest.approx(BATCH / step, rel=1e-12)
    assert report.flops_per_token == 6 * PARAMETERS
    assert report.peak_flops == 989.4e12
    assert report.mfu == pytest.approx(6 * PARAMETERS * BATCH / (step * 989.4e12), rel=1e-12)
    assert report.counted_flops == pytest.approx(by_hand.step_flops, rel=1e-12)
    assert report.hfu == pytest.approx(by_hand.step_flops / (step * 989.4e12), rel=1e-12)


def test_peak_memory_is_a_memory_tracker_run_by_hand(
        result: sc.RunResult, by_hand: ByHand) -> None:
    tracker = by_hand.tracker
    memory = result.report.peak_memory
    assert memory.min == memory.max == tracker.peak
    by_category = result.report.peak_memory_by_category
    assert sum(by_category.values()) == tracker.peak
    assert by_category["parameters"] == 4 * PARAMETERS  # every tensor here a multiple of 512 bytes
    assert by_category["optimizer"] > 2 * 4 * PARAMETERS  # AdamW's two moments, and its step counters
    # the bucket the program all_reduces: the collective's buffer, not an activation
    assert by_category["communication"] == 4 * PARAMETERS


def test_tokens_from_the_program_and_unknown_without_them() -> None:
    given = spawn(tokens=True).report
    assert given.tokens_per_gpu == BATCH
    missing = spawn().report
    assert missing.tokens_per_second_per_gpu is None and missing.mfu is None
    assert "tokens/s per GPU   unknown (give --tokens-per-step N" in missing.table()
    assert missing.to_dict()["unknown"]["tokens"].startswith("give --tokens-per-step")


def test_the_same_report_on_every_run(result: sc.RunResult) -> None:
    again = spawn(tokens_per_step=BATCH)
    assert again.report.to_dict() == result.report.to_dict()
    assert again.report.table() == result.report.table()


def test_tokens_outside_a_report_run_do_nothing_and_bad_counts_are_refused() -> None:
    step_report.tokens(5)  # no run: nothing to add to
    with pytest.raises(ValueError, match="tokens"):
        step_report.tokens(-1)
    with pytest.raises(ValueError, match="add report=True"):
        simcluster.torch.spawn(program, nprocs=1, tokens_per_step=4)


def test_transformer_flops_are_torchtitans_count() -> None:
    # Llama 3 8B's shape: 32 layers, 32 heads of 128, sequence 8192
    assert step_report.transformer_flops_per_token(6_979_321_856, 32, 32, 128, 8192) == \
        6 * 6_979_321_856 + 12 * 32 * 32 * 128 * 8192


def test_the_cli_prints_the_report(tmp_path: object) -> None:
    script = os.path.join(str(tmp_path), "train.py")
    with open(script, "w", encoding="utf-8") as file:
        file.write(textwrap.dedent("""
            import torch, torch.distributed as dist
            from torch import nn
            dist.init_process_group("gloo")
            model = nn.Sequential(nn.Linear(256, 512), nn.Linear(512, 256))
            optimizer = torch.optim.AdamW(model.parameters())
            for _ in range(2):
                model(torch.randn(64, 256)).sum().backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                optimizer.step()
                optimizer.zero_grad()
            """))
    trace = os.path.join(str(tmp_path), "trace.json")
    command = [sys.executable, "-m", "simcluster", "torchrun", "--nproc-per-node", "2", "--fake",
               "--latency", "alphabeta:1us,1GB/s", "--compute", "gpu:h100_sxm", "--report",
               "--tokens-per-step", "64", "--trace", trace, script]
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "step report: 2 ranks on H100 SXM 80GB" in done.stderr
    assert "steady step        step 2:" in done.stderr
    assert "tokens/s per GPU   " in done.stderr and "(64 tokens per step per GPU)" in done.stderr
    assert "MFU " in done.stderr and "peak memory        min" in done.stderr
    assert f"trace              {trace} (open in ui.perfetto.dev)" in done.stderr
    assert os.path.exists(trace)
    refused = subprocess.run(command[:-1] + ["--tokens-per-step", "0", script], capture_output=True,
                             text=True, env=env, timeout=300, check=False)
    assert refused.returncode == 2 and "--tokens-per-step 0" in refused.stderr


def reduce_each_gradient(rank: int) -> None:
    dist.init_process_group("simcluster")
    model, optimizer, _ = make_model()
    for _ in range(2):
        model(torch.randn(BATCH, WIDTH)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()


def test_a_collective_holds_no_tensor_after_it_was_waited_for() -> None:
    tracker = MemoryTracker()
    with FakeTensorMode(), tracker:
        model, optimizer, _ = make_model()
        for _ in range(2):
            model(torch.randn(BATCH, WIDTH)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    run = simcluster.torch.spawn(reduce_each_gradient, nprocs=2, tensors="fake",
                                 compute="gpu:h100_sxm", latency=sc.latency.AlphaBeta(ALPHA, BETA),
                                 report=True)
    # the last step's gradients are freed by zero_grad, not kept by the run's requests
    assert run.report.peak_memory.max == tracker.peak


def test_a_run_without_an_optimizer_step_says_so() -> None:
    report = step_report.build([step_report.RankRecord(0, peak_memory=1024)])
    assert report.step_times == () and report.step_time is None and report.mfu is None
    text = report.table()
    assert "step time          unknown (no rank ran optimizer.step())" in text
    assert "step report: 1 rank (no GPU model" in text
    assert "peak memory        min 0.001 MiB, median 0.001 MiB, max 0.001 MiB (rank 0)" in text
    assert "(no GPU model: give --compute gpu:DEVICE)" in text
