"""DistributedDataParallel trains on the simcluster backend as on one process with the whole batch."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402

WORLD = 4
STEPS = 5
LR = 0.1


def _model() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))


def _data() -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(64, 6, generator=gen), torch.randn(64, 2, generator=gen)


def _train_one_process() -> list[Any]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    x, y = _data()
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def _train_ddp(rank: int, size: int) -> list[Any]:
    dist.init_process_group("simcluster", rank=rank, world_size=size)
    model = DDP(_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    x, y = _data()
    x, y = x.chunk(size)[rank], y.chunk(size)[rank]  # equal shards: mean of means = whole mean
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()  # DDP all-reduces the gradients in here
        opt.step()
    weights = [p.detach().clone() for p in model.module.parameters()]
    dist.destroy_process_group()
    return weights


@pytest.fixture(scope="module")
def ddp_run() -> sc.RunResult:
    return sctorch.spawn(_train_ddp, args=(WORLD,), nprocs=WORLD,
                         latency=sc.latency.AlphaBeta(1e-6, 1e-9), trace=True)


def test_ddp_weights_equal_one_process_training_on_the_whole_batch(ddp_run: sc.RunResult) -> None:
    expected = _train_one_process()
    for rank in range(WORLD):
        for got, want in zip(ddp_run[rank], expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_ddp_leaves_every_rank_with_the_same_weights(ddp_run: sc.RunResult) -> None:
    for rank in range(1, WORLD):
        for got, rank0 in zip(ddp_run[rank], ddp_run[0], strict=True):
            assert torch.equal(got, rank0)


def test_ddp_traffic_shows_in_stats_trace_and_virtual_time(ddp_run: sc.RunResult) -> None:
    assert ddp_run.stats.total_messages > 0
    assert all(n > 0 for n in ddp_run.stats.messages_sent)
    assert ddp_run.elapsed > 0
    names = {span.name for span in ddp_run.trace.spans}
    assert {"iall_reduce", "ibroadcast", "wait"} <= names  # DDP's broadcast at start, then buckets
    assert len(ddp_run.trace.messages) == ddp_run.stats.total_messages


def test_ddp_with_no_sync_accumulates_then_syncs() -> None:
    def fn(rank: int, size: int) -> list[Any]:
        dist.init_process_group("simcluster")
        model = DDP(_model())
        x, y = _data()
        x, y = x.chunk(size)[rank], y.chunk(size)[rank]
        with model.no_sync():
            nn.functional.mse_loss(model(x[:8]), y[:8]).backward()  # local only
        nn.functional.mse_loss(model(x[8:]), y[8:]).backward()  # this one all-reduces both
        grads = [p.grad.clone() for p in model.parameters()]
        dist.destroy_process_group()
        return grads

    result = sctorch.spawn(fn, args=(2,), nprocs=2)
    for got, other in zip(result[0], result[1], strict=True):
        assert torch.equal(got, other)
