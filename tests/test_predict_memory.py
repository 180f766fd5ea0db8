"""The memory tracker (issue 44, item 5): live tensor bytes per rank, the peak, and its breakdown."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from simcluster.predict.memory import CATEGORIES, MemoryTracker, cuda_block_bytes  # noqa: E402

WIDTH, HIDDEN, BLOCKS, BATCH = 64, 256, 4, 512


def test_cuda_block_bytes_is_the_allocators_round_size():
    assert [cuda_block_bytes(n) for n in (0, 1, 4, 511, 512, 513, 1024, 1025, 10**6)] == [
        0, 512, 512, 512, 512, 1024, 1024, 1536, 1000448]


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_known_set_of_tensors_counts_exactly(device):
    tracker = MemoryTracker()
    with tracker:
        a = torch.empty(100, device=device)                      # 400 bytes: one 512 block
        b = torch.empty(3, 1000, dtype=torch.float16, device=device)  # 6000 bytes: 6144
        view = b[1:].t()                                         # a view: no new storage
        c = torch.empty(0, device=device)                        # empty: nothing
    assert (tracker.current_nbytes, tracker.current) == (6400, 512 + 6144)
    assert (tracker.peak_nbytes, tracker.peak) == (6400, 6656)
    del a
    gc.collect()
    assert (tracker.current_nbytes, tracker.current) == (6000, 6144)
    del b
    assert tracker.current_nbytes == 6000  # the view keeps the storage alive
    del view, c
    assert (tracker.current_nbytes, tracker.current) == (0, 0)
    assert (tracker.peak_nbytes, tracker.peak) == (6400, 6656)
    report = tracker.report(rounded=False)
    assert (report.peak, report.current, report.storages) == (6400, 0, 0)
    assert report.peak_by_category["activations"] == 6400
    assert sum(report.peak_by_category.values()) == report.peak


def test_temporaries_of_an_expression_count_at_the_peak_and_then_leave():
    tracker = MemoryTracker()
    with tracker, torch.device("meta"):
        x = torch.empty(1024)                 # 4096
        y = (x * 2 + 1).sum()                 # x*2 and (x*2)+1 live together: 8192 more; sum: 4
    assert tracker.peak_nbytes == 4096 * 3
    assert tracker.current_nbytes == 4096 + 4
    del x, y


def _mlp():
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, WIDTH))
                           for _ in range(BLOCKS)])


def _step(mode, *, use_checkpoint):
    """One AdamW training step of the MLP on shapes; return (tracker, model, optimizer)."""
    with (FakeTensorMode() if mode == "fake" else torch.device("meta")):
        model = _mlp()
        optimizer = torch.optim.AdamW(model.parameters())
        x = torch.empty(BATCH, WIDTH)
        tracker = MemoryTracker().track(model, optimizer)
        with tracker:
            h = x
            for block in model:
                h = checkpoint(block, h, use_reentrant=False) if use_checkpoint else block(h)
            h.sum().backward()
            del h
            optimizer.step()
    return tracker, model, optimizer


@pytest.mark.parametrize("mode", ["meta", "fake"])
def test_an_mlp_training_step_accounts_params_grads_adamw_state_and_activations(mode):
    tracker, model, optimizer = _step(mode, use_checkpoint=False)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert params == BLOCKS * 4 * (WIDTH * HIDDEN + HIDDEN + WIDTH * HIDDEN + WIDTH)
    steps = 4 * len(list(model.parameters()))  # AdamW's float32 "step" counter per parameter
    report = tracker.report(rounded=False)
    now = report.current_by_category
    assert now["parameters"] == params
    assert now["gradients"] == params
    assert now["optimizer"] == 2 * params + steps    # exp_avg and exp_avg_sq
    assert now["activations"] == 0
    assert report.current == 4 * params + steps
    # the peak is at the end of backward: parameters, some gradients, and the saved activations
    peak = report.peak_by_category
    assert peak["parameters"] == params and peak["optimizer"] == 0
    assert 0 < peak["gradients"] <= params
    # saved for backward, per block: its input (saved by the first Linear) and the ReLU's output
    # (saved by the ReLU and the second Linear); the first block's input was made before the tracker
    saved = BLOCKS * BATCH * (WIDTH + HIDDEN) * 4 - BATCH * WIDTH * 4
    assert peak["activations"] >= saved
    assert report.peak == sum(peak.values())
    rounded = tracker.report()
    assert rounded.current == sum(cuda_block_bytes(p.numel() * 4) for p in model.parameters()) * 4 \
        + 512 * len(list(model.parameters()))
    optimizer.zero_grad()  # set_to_none: the gradients leave the live count
    assert tracker.report(rounded=False).current_by_category["gradients"] == 0


def test_checkpointing_lowers_the_activation_peak():
    plain = _step("meta", use_checkpoint=False)[0].report(rounded=False)
    checkpointed = _step("meta", use_checkpoint=True)[0].report(rounded=False)
    assert checkpointed.peak_by_category["activations"] < plain.peak_by_category["activations"]
    assert checkpointed.peak < plain.peak
    assert checkpointed.current == plain.current  # same parameters, gradients and state after the step


def test_meta_and_fake_runs_agree_and_repeat_exactly():
    reports = [_step(mode, use_checkpoint=c)[0].report() for mode in ("meta", "fake", "meta")
               for c in (False, True)]
    assert reports[0:2] == reports[2:4] == reports[4:6]


def test_mark_and_unknown_category():
    tracker = MemoryTracker()
    with tracker:
        buf = torch.empty(256, device="meta")
    tracker.mark(buf, "communication")
    assert tracker.report().current_by_category["communication"] == 1024
    assert set(tracker.report().current_by_category) == set(CATEGORIES)
    with pytest.raises(ValueError, match="unknown memory category"):
        tracker.mark(buf, "weights")
    assert "communication" in tracker.report().table()


def test_a_collectives_buffers_are_communication_unless_known_otherwise():
    layer = nn.Linear(16, 16, bias=False).to("meta")
    tracker = MemoryTracker().track(layer)
    with tracker:
        bucket = torch.empty(256, device="meta")  # 1024 bytes
        output = torch.empty(2, 128, device="meta")
        # as a collective's arguments reach the backend: lists of tensors, an options object
        tracker.mark_communication(([bucket, layer.weight], [[output]], object()))
    now = tracker.report().current_by_category
    assert now["communication"] == 2048 and now["parameters"] == cuda_block_bytes(16 * 16 * 4)
    tracker.mark(output, "gradients")  # learned later (FSDP2's reduce-scatter output): it wins
    now = tracker.report().current_by_category
    assert (now["communication"], now["gradients"]) == (1024, 1024)


def test_a_resized_storage_counts_at_its_new_size():
    tracker = MemoryTracker()
    with tracker:
        t = torch.empty(100, device="meta")
        t.resize_(1000)                          # aten.resize_: seen as the op returns
        assert tracker.current_nbytes == 4000
        t.untyped_storage().resize_(0)           # as FSDP2 frees an unsharded parameter
        t.untyped_storage().resize_(800)
        t[:200].add_(1)                          # seen at the next in-place op on it
    assert (tracker.current_nbytes, tracker.peak_nbytes) == (800, 4000)


def _rank_step(rank):
    import torch.distributed as dist
    dist.init_process_group("simcluster")
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    tracker = MemoryTracker().track(model)
    with tracker:
        model(torch.randn(64 * (rank + 1), 256)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    report = tracker.report(rounded=False)
    return report.peak, report.peak_by_category["activations"], report.current_by_category["gradients"]


def test_one_tracker_per_rank_in_a_spawn_and_shape_only_runs_count_the_same():
    import simcluster as sc
    import simcluster.torch
    latency = sc.latency.AlphaBeta(1e-6, 1e-9)
    data = list(simcluster.torch.spawn(_rank_step, nprocs=2, latency=latency))
    shapes = list(simcluster.torch.spawn(_rank_step, nprocs=2, latency=latency, tensors="fake"))
    params = (256 * 1024 + 1024 + 1024 * 256 + 256) * 4
    assert [grads for _, _, grads in data] == [params, params]
    assert data[1][1] > data[0][1]  # rank 1's batch is twice rank 0's: more activations
    assert shapes == data


def test_reset_peak_starts_from_the_live_bytes():
    tracker = MemoryTracker()
    with tracker, torch.device("meta"):
        keep = torch.empty(256)
        tracker.mark(keep, "buffers")
        (torch.empty(1024) * 2).sum()
        assert tracker.peak_nbytes == 1024 + 2 * 4096
        tracker.reset_peak()
        assert (tracker.peak_nbytes, tracker.current_nbytes) == (1024, 1024)  # the sum was dropped
        torch.empty(512)
    report = tracker.report(rounded=False)
    assert report.peak == report.current + 2048
    assert report.peak_by_category["buffers"] == 1024
