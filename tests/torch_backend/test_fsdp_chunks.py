"""FSDP2's cut of each parameter into shards, made only where a rank reads it.

The lazy list gives the tensors ``torch.chunk`` would (sizes, strides,
storage offsets, values, the empty padding chunks); two FSDP2 steps give
every rank the same losses, shards and virtual time with it as with torch's
own cut, on parameters that split unevenly (5 rows over 4 ranks: a short
chunk and an empty one); torch's function is back once the spawn ends.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
fsdp_param = pytest.importorskip("torch.distributed.fsdp._fully_shard._fsdp_param")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.torch import _fsdp_chunks  # noqa: E402

TORCH_CUT = fsdp_param._chunk_with_empty


@pytest.mark.parametrize("rows", [1, 3, 5, 8, 9, 17])
@pytest.mark.parametrize("ranks", [2, 4, 7])
@pytest.mark.parametrize("dim", [0, 1])
def test_the_lazy_cut_gives_torchs_chunks(rows: int, ranks: int, dim: int) -> None:
    tensor = torch.arange(rows * 6.0).reshape(rows, 6)
    if dim == 1:
        tensor = torch.arange(rows * 6.0).reshape(6, rows)
    lazy = _fsdp_chunks.Chunks(tensor, ranks, dim)
    mine, theirs = list(lazy), TORCH_CUT(tensor, ranks, dim)
    assert len(lazy) == len(theirs) == ranks
    for got, want in zip(mine, theirs):
        assert (got.shape, got.stride(), got.storage_offset()) == \
            (want.shape, want.stride(), want.storage_offset())
        assert torch.equal(got, want)
    assert [c.shape for c in lazy[-2:]] == [c.shape for c in theirs[-2:]]
    with pytest.raises(IndexError):
        lazy[ranks]


def _train(rank: int) -> dict[str, Any]:
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("simcluster")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    fully_shard(model[0])
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1 + rank)
    losses = []
    for _ in range(2):
        loss = model(torch.randn(4, 3, generator=gen)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    shards = {name: p.to_local().clone() for name, p in model.named_parameters()}
    full = {name: p.full_tensor() for name, p in model.named_parameters()}
    lazy = getattr(fsdp_param._chunk_with_empty, "torch_own", None) is not None
    dist.destroy_process_group()
    return {"losses": losses, "shards": shards, "full": full, "lazy": lazy}


def _spawn() -> sc.RunResult:
    return sctorch.spawn(_train, nprocs=4, latency=sc.latency.AlphaBeta(1e-6, 1e9))


def test_fsdp2_steps_are_the_same_with_the_lazy_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    lazy = _spawn()
    assert fsdp_param._chunk_with_empty is TORCH_CUT  # put back when the spawn ended
    with monkeypatch.context() as patch:
        patch.setattr(_fsdp_chunks, "install", lambda: None)
        torch_own = _spawn()
    assert [r["lazy"] for r in lazy] == [True] * 4
    assert [r["lazy"] for r in torch_own] == [False] * 4
    for mine, theirs in zip(lazy, torch_own):
        assert mine["losses"] == theirs["losses"]
        for name in theirs["shards"]:
            assert torch.equal(mine["shards"][name], theirs["shards"][name]), name
            assert torch.equal(mine["full"][name], theirs["full"][name]), name
    assert lazy[3]["shards"]["0.weight"].shape == (0, 3)  # 5 rows: 2, 2, 1, none
    assert lazy[2]["shards"]["0.weight"].shape == (1, 3)
    assert lazy.elapsed == torch_own.elapsed
