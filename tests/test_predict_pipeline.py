"""Pipeline parallel Llama (simcluster.predict.llama.pipeline), as torchtitan splits it.

With real data on CPU, torch's schedules (GPipe, 1F1B, interleaved 1F1B) over simcluster ranks give
every stage the losses and gradients of the same training in one process. On shapes with the GPU
compute model, the predicted step shows the pipeline bubble: GPipe with p stages and m microbatches
takes (m + p - 1) x the per-microbatch time of a stage, and a rank's peak memory falls as the stages
get fewer layers. The larger cases (4 stages, 1F1B's memory, transfer times) are marked ``slow``.
"""

from __future__ import annotations

import functools
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
from simcluster.predict.memory import MemoryTracker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# ---- the split ----


def test_stages_get_torchtitans_contiguous_layer_ranges() -> None:
    # torchtitan's generate_split_points: the base share each, the rest one by one to the middle
    # stages, what is still left to the last
    assert llama.stage_layers(10, 4) == [range(0, 2), range(2, 5), range(5, 8), range(8, 10)]
    assert llama.stage_layers(32, 4) == [range(i, i + 8) for i in range(0, 32, 8)]
    assert [len(r) for r in llama.stage_layers(126, 16)] == [7] + [8] * 14 + [7]
    with pytest.raises(ValueError, match="5 pipeline stages for 4 layers"):
        llama.stage_layers(4, 5)


def test_a_stage_holds_only_its_layers_and_the_ends_it_owns() -> None:
    model = llama.build("8b")  # meta: the copies take no memory
    layers = llama.stage_layers(32, 4)
    parts = [llama.split_stage(model, i, 4, layers[i]) for i in range(4)]
    assert list(parts[1].layers.keys()) == [str(i) for i in range(8, 16)]
    assert parts[0].tok_embeddings is not None and parts[0].output is None and parts[0].norm is None
    assert parts[1].tok_embeddings is None and parts[1].output is None
    assert parts[3].tok_embeddings is None and parts[3].norm is not None and parts[3].output is not None
    assert sum(sum(p.numel() for p in part.parameters()) for part in parts) == 8_030_261_248
    assert len(model.layers) == 32  # the whole model is left as it was


# ---- real data: the schedules give one process's training ----

SMALL = llama.LlamaConfig(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=64, vocab_size=64,
                          max_seq_len=8)
BATCH, MICROBATCHES = 4, 4


def _small_model() -> Any:
    torch.manual_seed(0)
    model = llama.build(SMALL, device="cpu")
    model.init_weights()
    return model


def _small_batch() -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(1)
    return (torch.randint(SMALL.vocab_size, (BATCH, 8), generator=gen),
            torch.randint(SMALL.vocab_size, (BATCH, 8), generator=gen))


def _real_rank(rank: int, schedule: str) -> tuple[float | None, dict[str, Any]]:
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("pp",))
    pipe = llama.pipeline(_small_model(), mesh["pp"], schedule=schedule, microbatches=MICROBATCHES)
    loss = pipe.step(*_small_batch())
    grads = {name: p.grad for part in pipe.parts for name, p in part.named_parameters()}
    return (None if loss is None else loss.item()), grads


def _one_process() -> tuple[float, dict[str, Any]]:
    """The same step in one process: the mean of the microbatches' losses, backward once."""
    model = _small_model()
    tokens, labels = _small_batch()
    losses = [llama.loss_fn(model(t), y)
              for t, y in zip(tokens.chunk(MICROBATCHES), labels.chunk(MICROBATCHES))]
    loss = torch.stack(losses).mean()
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize(("schedule", "stages_of_rank"), [
    ("GPipe", [[0, 1], [2, 3]]), ("1F1B", [[0, 1], [2, 3]]),
    ("Interleaved1F1B", [[0, 2], [1, 3]])])  # two stages a rank, stage s on rank s mod 2
def test_every_schedule_gives_each_stage_the_one_process_gradients(
        schedule: str, stages_of_rank: list[list[int]]) -> None:
    result = sctorch.spawn(_real_rank, args=(schedule,), nprocs=2)
    loss, grads = _one_process()
    assert result[0][0] is None  # the loss is the last stage's (rank 1's in all three)
    assert result[1][0] == pytest.approx(loss, rel=1e-6)
    for rank, layers in enumerate(stages_of_rank):
        held = result[rank][1]
        assert {name.split(".")[1] for name in held if name.startswith("layers.")} == {str(i) for i in layers}
        for name, grad in held.items():
            torch.testing.assert_close(grad, grads[name], rtol=1e-5, atol=1e-6, msg=name)
    assert sorted(n for r in result for n in r[1]) == sorted(grads)  # every parameter, once


# ---- shapes: the bubble and the memory ----


def _objects_and_sends(rank: int) -> tuple[Any, list[int]]:
    dist.init_process_group("simcluster")
    objects = [{"stage": 0, "shape": (2, 8)}] if rank == 0 else [None]
    dist.broadcast_object_list(objects, src=0)  # pickled into a real byte tensor, not a fake one
    x = torch.empty(2, 8)  # a fake tensor
    if rank == 0:
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, 1)])
    else:
        works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, x, 0)])
    for work in works:
        work.wait()
    return objects[0], list(x.shape)


def test_object_collectives_and_nonblocking_sends_run_on_shapes() -> None:
    # what torch's schedules need: their stages' shapes sent as objects, activations by isend
    result = sctorch.spawn(_objects_and_sends, nprocs=2, tensors="fake")
    assert list(result) == [({"stage": 0, "shape": (2, 8)}, [2, 8])] * 2

# 8B-sized blocks (a few of them) and a small vocabulary, so a stage's time is its blocks'
BIG = llama.LlamaConfig(dim=4096, n_layers=2, n_heads=32, n_kv_heads=8, ffn_dim=14336, vocab_size=256,
                        max_seq_len=2048)
MICRO, SEQ, M = 2, 2048, 4  # microbatches of 2 x 2048 tokens, 4 a step
ZERO = sc.latency.AlphaBeta(0.0, 0.0)


def _shape_rank(rank: int, schedule: str, layers: int) -> tuple[list[float], int]:
    """Two steps of a pipeline on shapes: each step's virtual time on this rank (from a barrier to
    the end of its part of the schedule), and the rank's peak of live tensor bytes."""
    from dataclasses import replace

    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("pp",))
    model = llama.build(replace(BIG, n_layers=layers), device="cpu")  # fake tensors: no memory
    pipe = llama.pipeline(model, mesh["pp"], schedule=schedule, microbatches=M)
    tracker = MemoryTracker().track(*pipe.parts)
    tokens = torch.randint(BIG.vocab_size, (MICRO * M, SEQ))
    times = []
    for _ in range(2):
        dist.barrier()
        start = time.perf_counter()
        with tracker:
            pipe.step(tokens, tokens)
        times.append(time.perf_counter() - start)
        for p in pipe.parameters():
            p.grad = None
    return times, tracker.peak


@functools.cache
def _pipeline_run(schedule: str, ranks: int, layers_per_rank: int,
                  latency: Any = ZERO) -> list[tuple[list[float], int]]:
    return list(sctorch.spawn(_shape_rank, args=(schedule, ranks * layers_per_rank), nprocs=ranks,
                              tensors="fake", compute="gpu:h100_sxm", latency=latency))


def _middle_stage_rank(rank: int, layers: int) -> float:
    """Forward and backward of one microbatch through ``layers`` transformer blocks."""
    part = llama.split_stage(llama.build(BIG, device="cpu"), 1, 3, range(layers))
    x = torch.randn(MICRO, SEQ, BIG.dim, requires_grad=True)
    start = time.perf_counter()
    out = part(x)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - start


@functools.cache
def _stage_time(layers: int) -> float:
    """The per-microbatch time of a stage of ``layers`` blocks, by hand: the same blocks, alone on
    one rank."""
    return float(sctorch.spawn(_middle_stage_rank, args=(layers,), nprocs=1, tensors="fake",
                               compute="gpu:h100_sxm")[0])


BUBBLE_TOLERANCE = 0.03
"""The first stage also embeds, the last also projects to the vocabulary and takes the loss, and
the schedule divides every gradient by m (``scale_grads``): within 3% at these sizes."""


def _check_bubble(schedule: str, stages: int) -> None:
    run = _pipeline_run(schedule, stages, 1)
    step = max(times[1] for times, _ in run)  # the steady step; the first also infers shapes
    per_microbatch = _stage_time(1)
    assert step == pytest.approx((M + stages - 1) * per_microbatch, rel=BUBBLE_TOLERANCE)
    # the first stage finishes last: the backward of the last microbatch ends there
    assert step == run[0][0][1]


def test_gpipe_on_two_stages_takes_the_bubble_formula() -> None:
    _check_bubble("GPipe", 2)


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "stages"), [("GPipe", 4), ("1F1B", 2), ("1F1B", 4)])
def test_gpipe_and_1f1b_take_the_bubble_formula(schedule: str, stages: int) -> None:
    _check_bubble(schedule, stages)


@pytest.mark.slow
def test_interleaved_1f1b_shortens_the_bubble_by_the_stages_a_rank_holds() -> None:
    # 2 ranks, 2 one-block stages each (stage s on rank s mod 2): a rank's work per microbatch is
    # two blocks, and the fill and drain are v = 2 times shorter: (m + (p - 1) / v) x that
    # (Narayanan et al., arXiv:2104.04473, section 2.2.2: a bubble fraction of (1 / v)(p - 1) / m)
    run = _pipeline_run("Interleaved1F1B", 2, 2)  # 2 ranks, 2 blocks each: 4 one-block stages
    step = max(times[1] for times, _ in run)
    assert step == pytest.approx((M + (2 - 1) / 2) * _stage_time(2), rel=BUBBLE_TOLERANCE)
    one_f_one_b = max(times[1] for times, _ in _pipeline_run("1F1B", 2, 2))  # one 2-block stage a rank
    assert step < 0.93 * one_f_one_b  # 4.5 against 5 stage times


def test_each_rank_holds_only_its_stage_so_memory_falls_with_more_stages() -> None:
    # the same 2-block model on one stage (a GPipe of one) and on two
    whole = _pipeline_run("GPipe", 1, 2)
    split = _pipeline_run("GPipe", 2, 1)
    one = whole[0][1]
    for _, peak in split:  # half the blocks, half their weights and activations, on each rank
        assert 0.45 * one < peak < 0.6 * one


@pytest.mark.slow
def test_1f1b_holds_fewer_microbatches_than_gpipe() -> None:
    gpipe, one_f_one_b = _pipeline_run("GPipe", 2, 1), _pipeline_run("1F1B", 2, 1)
    # GPipe keeps all 4 microbatches' activations until the backward; 1F1B at most as many as
    # stages ahead of it (2 on the first stage, 1 on the last)
    assert one_f_one_b[0][1] < 0.8 * gpipe[0][1]
    assert one_f_one_b[1][1] < one_f_one_b[0][1]


@pytest.mark.slow
def test_activations_sent_between_stages_take_the_links_time() -> None:
    beta = 1e-11  # 100 GB/s
    slow = _pipeline_run("GPipe", 2, 1, sc.latency.AlphaBeta(1e-6, beta))
    fast = _pipeline_run("GPipe", 2, 1)
    hop = 1e-6 + MICRO * SEQ * BIG.dim * 4 * beta  # one microbatch's float32 activations, 64 MiB
    extra = max(t[1] for t, _ in slow) - max(t[1] for t, _ in fast)
    # at least the forward's and the backward's crossing; at most every send of the step
    assert 2 * hop * 0.99 < extra < 2 * M * hop * 1.01


def _parallelized_rank(rank: int) -> tuple[list[str], bool, bool]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    model = llama.build("tiny", seq_len=64)  # meta, as torchtitan builds it
    pipe = llama.parallelize(model, dp_mesh=mesh["dp"], pp_mesh=mesh["pp"], ac="full",
                             pp_schedule="GPipe", pp_microbatches=2)
    pipe.to_empty(device="cpu")
    pipe.init_weights()
    optimizer = torch.optim.AdamW(pipe.parameters())
    tokens = torch.randint(llama.CONFIGS["tiny"].vocab_size, (2, 64))
    loss = pipe.step(tokens, tokens)
    optimizer.step()
    sharded = all(isinstance(p, DTensor) for p in pipe.parameters())
    return list(pipe.parts[0].layers.keys()), sharded, loss is not None


def test_parallelize_with_a_pipeline_mesh_shards_each_stage_with_fsdp2_on_shapes() -> None:
    result = sctorch.spawn(_parallelized_rank, nprocs=4, tensors="fake", compute="gpu:h100_sxm",
                           latency=sc.latency.AlphaBeta(1e-6, 1e-10))
    # mesh (pp, dp): ranks 0 and 1 are stage 0's FSDP2 pair, ranks 2 and 3 stage 1's
    assert list(result) == [(["0"], True, False), (["0"], True, False),
                            (["1"], True, True), (["1"], True, True)]


# ---- the example ----


@pytest.mark.slow
def test_the_example_predicts_a_pipeline_parallel_step() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "simcluster", "torchrun", "--fake", "--nproc-per-node", "4",
         "--latency", "dgx_h100:1", "--compute", "gpu:h100_hbm2e_500w", "examples/torch/12_predict_llama.py",
         "--model", "tiny", "--local-batch", "4", "--seq", "256", "--steps", "2", "--pp", "2",
         "--pp-schedule", "GPipe"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    assert "(PP 2 x FSDP 2 x TP 1)" in out
    assert out.count("tokens/s per GPU") == 2
