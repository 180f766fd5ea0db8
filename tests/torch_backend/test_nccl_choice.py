"""On a platform of GPUs the torch backend runs what NCCL would: for all_reduce its tree or its rings,
for all_gather and reduce_scatter its rings (``nccl_ring``)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.platform import dgx_h100, ethernet_cluster  # noqa: E402

SMALL, LARGE = 16, 2**20  # float32 elements: 64 bytes, 4 MiB


def training_step(rank: int) -> list[float]:
    """A data-parallel step as users write it: a small and a large gradient all_reduced, then a
    DDP model's backward pass (its buckets are all_reduced too)."""
    dist.init_process_group("simcluster")
    small = torch.full((SMALL,), float(rank))
    large = torch.ones(LARGE)
    dist.all_reduce(small)
    dist.all_reduce(large, op=dist.ReduceOp.AVG)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    model(torch.full((4, 8), float(rank))).sum().backward()
    grad = model.module.weight.grad
    assert grad is not None
    gathered = [torch.zeros(2) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, torch.full((2,), float(rank)))
    shard = torch.zeros(2)
    dist.reduce_scatter(shard, list(torch.arange(2.0 * dist.get_world_size()).chunk(dist.get_world_size())))
    dist.destroy_process_group()
    return [small[0].item(), large[0].item(), grad.sum().item(), float(sum(t.sum() for t in gathered)),
            shard.tolist()]


def algorithms_run(result: sc.RunResult, collective: str = "all_reduce") -> list[Any]:
    assert result.trace is not None
    return sorted({s.args.get("algorithm") for s in result.trace.spans if s.name == "i" + collective})


def test_small_tensors_take_the_tree_and_large_ones_the_rings_with_the_values_of_any_algorithm() -> None:
    result = sctorch.spawn(training_step, nprocs=16, latency=dgx_h100(2), trace=True)
    plain = sctorch.spawn(training_step, nprocs=16, latency=dgx_h100(2), algorithms={"all_reduce": "ring"},
                          trace=True)
    assert algorithms_run(result) == ["nccl_ring", "nccl_tree"]
    assert algorithms_run(result, "all_gather") == algorithms_run(result, "reduce_scatter") == ["nccl_ring"]
    assert algorithms_run(plain) == ["ring"]  # what the run asks for wins
    assert list(result) == list(plain)
    assert [values[:2] + values[3:4] for values in result] == [[120.0, 1.0, 240.0]] * 16
    assert [values[4] for values in result] == [[32.0 * r, 32.0 * r + 16] for r in range(16)]


def test_platforms_without_gpus_run_gloos_reductions_and_the_defaults() -> None:
    result = sctorch.spawn(training_step, nprocs=8, latency=ethernet_cluster(2, 4), trace=True)
    assert algorithms_run(result) == ["gloo_ring"]  # CPU tensors: gloo's order (test_gloo_bits.py)
    assert algorithms_run(result, "reduce_scatter") == ["gloo_items"]
    assert algorithms_run(result, "all_gather") != ["ring"]
