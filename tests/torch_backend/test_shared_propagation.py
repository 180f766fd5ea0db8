"""DTensor's sharding propagation, computed once per spawn and shared by its ranks.

Two FSDP2 + TP steps on a (2, 2) mesh (``bench/torch_step.py``'s model) gives
every rank the same losses, parameters and virtual time with the sharing as
without it; each schema is propagated once and every other rank takes the
result, rebound to its own meshes.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("torch.distributed.tensor")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.bench import torch_step  # noqa: E402
from simcluster.torch import _session, _shared_propagation  # noqa: E402

DP, TP = 2, 2


def _train(rank: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
    model = torch_step._model()
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                               "v": ColwiseParallel(), "out": RowwiseParallel(),
                                               "up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + mesh["dp"].get_local_rank())
    tokens = torch.randint(0, torch_step.VOCAB, (torch_step.BATCH, torch_step.SEQ + 1),
                           generator=gen)
    losses = []
    for _ in range(2):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits, tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    x = distribute_tensor(torch.arange(8.0), mesh["tp"], [Shard(0)])
    y = x * 2 + 1  # propagated by the first rank, taken by the others
    params = {name: p.full_tensor() for name, p in model.named_parameters()}
    session = _session.active()
    assert session is not None
    sharing = session._sharing
    counts = None if sharing is None else (sharing.hits, sharing.misses, len(sharing.shared))
    out = {"losses": losses, "params": params, "y": y.full_tensor(), "counts": counts,
           "own_mesh": y.device_mesh is x.device_mesh,
           "coordinate": y.device_mesh.get_coordinate()}
    dist.destroy_process_group()
    return out


def _spawn() -> sc.RunResult:
    return sctorch.spawn(_train, nprocs=DP * TP, latency=sc.latency.AlphaBeta(*torch_step.NETWORK))


@pytest.fixture(scope="module")
def shared() -> sc.RunResult:
    return _spawn()


@pytest.fixture(scope="module")
def unshared() -> sc.RunResult:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_shared_propagation, "install", lambda dispatcher: None)
        return _spawn()


@pytest.mark.timeout(600)  # two spawns of the job, the first step's propagation unshared in one
def test_every_rank_gets_the_values_and_virtual_time_it_gets_without_sharing(
        shared: sc.RunResult, unshared: sc.RunResult) -> None:
    assert shared.elapsed == unshared.elapsed
    for rank, (mine, theirs) in enumerate(zip(shared, unshared)):
        assert mine["losses"] == theirs["losses"], rank
        assert mine["params"].keys() == theirs["params"].keys()
        for name, value in mine["params"].items():
            assert torch.equal(value, theirs["params"][name]), (rank, name)
        assert torch.equal(mine["y"], theirs["y"])
        assert tuple(mine["coordinate"]) == tuple(theirs["coordinate"]) == (rank % TP,)


def test_every_rank_holds_its_own_meshes(shared: sc.RunResult) -> None:
    assert all(got["own_mesh"] for got in shared)


def test_each_schema_is_propagated_once_and_every_other_rank_takes_it(
        shared: sc.RunResult, unshared: sc.RunResult) -> None:
    assert all(got["counts"] is None for got in unshared)
    hits, misses, schemas = max(got["counts"] for got in shared)  # the last rank's view
    assert misses == schemas > 0
    assert hits == (DP * TP - 1) * schemas


def test_the_spawn_puts_torchs_cache_back() -> None:
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    assert "propagate_op_sharding_non_cached" not in vars(propagator)
    assert propagator.propagate_op_sharding.cache.__wrapped__ == propagator.propagate_op_sharding_non_cached
