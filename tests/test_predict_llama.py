"""The Llama 3 model and torchtitan's setup (simcluster.predict.llama), run on shapes.

The sizes of the published configurations, torchtitan's selective "op" checkpointing rule, and a
small Llama under FSDP2 on fake tensors with the GPU compute model: it steps, its collectives are
FSDP2's, and its virtual step time is the same on every run. The published comparisons
(``examples/torch/12_predict_llama.py`` at 8 and 128 ranks) take minutes and are marked ``slow``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.predict import llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("name", "parameters"), [
    ("8b", 8_030_261_248), ("70b", 70_553_706_496), ("405b", 405_853_388_800)])
def test_the_published_sizes_have_their_published_parameter_counts(name: str, parameters: int) -> None:
    config = llama.CONFIGS[name]
    assert config.parameters() == parameters
    model = llama.build(name)  # on the meta device: nothing allocated
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert config.head_dim == 128 and config.n_kv_heads == 8 and config.vocab_size == 128256


def test_the_8b_shapes_are_llama_3s() -> None:
    model = llama.build("8b", seq_len=8192)
    block = model.layers["0"]
    assert tuple(block.attention.wq.weight.shape) == (4096, 4096)
    assert tuple(block.attention.wk.weight.shape) == (1024, 4096)  # 8 kv heads of 128
    assert tuple(block.feed_forward.w1.weight.shape) == (14336, 4096)
    assert tuple(model.output.weight.shape) == (128256, 4096)  # untied from the embedding
    assert tuple(model.rope_cos.shape) == (8192, 64)
    # torchtitan's FLOPs per token for MFU: 6 x non-embedding parameters + 12 x l x h x q x t
    assert llama.CONFIGS["8b"].flops_per_token(8192) == 6 * (8_030_261_248 - 128256 * 4096) + 12 * 32 * 4096 * 8192


def test_selective_op_checkpointing_keeps_every_other_matmul_and_attention() -> None:
    from torch.utils.checkpoint import CheckpointPolicy

    class Ctx:
        def __init__(self, is_recompute: bool) -> None:
            self.is_recompute = is_recompute

    aten = torch.ops.aten
    policy = llama.selective_policy()
    forward = [policy(Ctx(False), op) for op in (aten.mm.default, aten.mm.default, aten.mm.default,
                                                  aten._scaled_dot_product_flash_attention.default,
                                                  aten.mul.Tensor, aten.mm.default)]
    save, again = CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE
    assert forward == [save, again, save, save, again, again]
    # the recomputation counts its own matmuls from 1: it makes the same choices
    assert [policy(Ctx(True), aten.mm.default) for _ in range(3)] == [save, again, save]


def _tiny_step(rank: int) -> tuple[float, str]:
    """Two training steps of the tiny Llama under FSDP2 + selective checkpointing; the second timed."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = llama.build("tiny", seq_len=128)
    llama.parallelize(model, dp_mesh=mesh, ac="selective")
    model.to_empty(device="cpu")
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    seconds = 0.0
    for _ in range(2):
        tokens = torch.randint(1024, (2, 128))
        start = time.perf_counter()
        llama.loss_fn(model(tokens), tokens).backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds = time.perf_counter() - start
    return seconds, type(model.output.weight.grad).__name__ if model.output.weight.grad is not None else "None"


def _run_tiny() -> sc.RunResult:
    return sctorch.spawn(_tiny_step, nprocs=2, tensors="fake", compute="gpu:h100_sxm",
                         latency=sc.platform.dgx_h100(1), trace=True)


def test_a_small_llama_steps_on_shapes_with_fsdp2_collectives_and_a_deterministic_time() -> None:
    first = _run_tiny()
    steps = [seconds for seconds, _ in first]
    assert steps[0] > 0 and len(set(steps)) == 1  # both ranks do the same work
    trace = first.trace
    assert trace is not None
    names = {span.name for span in trace.spans}
    assert any("all_gather" in n for n in names), names  # FSDP2 unshards parameters
    assert any("reduce_scatter" in n for n in names), names  # and reduce-scatters gradients
    assert "compute" in names  # the GPU model charged the ranks' ops
    again = _run_tiny()
    assert [seconds for seconds, _ in again] == steps  # the same prediction on every run
    assert again.elapsed == first.elapsed


def _tiny_2d_step(rank: int) -> float:
    """One step of the tiny Llama on FSDP 2 x tensor parallel 2 (torchtitan's TP plan), timed."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = llama.build("tiny", seq_len=128)
    llama.parallelize(model, dp_mesh=mesh["dp"], tp_mesh=mesh["tp"], ac="full")
    model.to_empty(device="cpu")
    model.init_weights()
    tokens = torch.randint(1024, (2, 128))
    start = time.perf_counter()
    llama.loss_fn(model(tokens), tokens).backward()
    return time.perf_counter() - start


@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module:UserWarning")  # TP's replicated output is a view
def test_tensor_parallel_runs_with_fsdp2_on_shapes() -> None:
    run = sctorch.spawn(_tiny_2d_step, nprocs=4, tensors="fake", compute="gpu:h100_sxm",
                        latency=sc.platform.dgx_h100(1), trace=True)
    assert min(run) > 0
    assert run.trace is not None
    names = {span.name for span in run.trace.spans}
    assert any("all_gather" in n for n in names) and any("reduce_scatter" in n for n in names), names


def _example(*arguments: str, nproc: int, latency: str, compute: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "simcluster", "torchrun", "--fake", "--nproc-per-node", str(nproc),
                           "--latency", latency, "--compute", compute, "examples/torch/12_predict_llama.py",
                           *arguments], capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)


@pytest.mark.slow
def test_the_8_gpu_8b_torchtitan_configuration_runs_and_prints_a_prediction() -> None:
    proc = _example("--model", "8b", "--local-batch", "2", "--seq", "8192", "--ac", "selective", "--steps", "2",
                    nproc=8, latency="dgx_h100:1", compute="gpu:h100_hbm2e_500w")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("step 2: ") and "tokens/s per GPU" in last and "loss unknown" in last
