"""Float reductions whose bits show the order of the additions; run under gloo and under simcluster.

Each case returns its tensors as ``(dtype, shape, bytes)`` (a SHA-256 of the
bytes past a million elements), so ``==`` compares bit for bit. The inputs
are adversarial: ``[1, 1e8, 1, -1e8]`` spread over the ranks, and random
values with exponents from ``2**-20`` to ``2**20`` from a fixed seed, at
element counts around gloo's block boundaries (``simcluster/collectives/
_gloo.py``) and past ``2p`` MiB, where gloo's all_reduce and reduce lay their
segments out differently. ``reduce`` is compared on the root only: gloo
leaves partial sums in the other ranks' tensors, which torch documents as
unspecified.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.distributed as dist

SIZES = (2, 3, 4, 5)
COUNTS = (1, 2, 3, 7, 64, 1000, 4097, 100_000)
BIG = 2_700_000  # float32: 10.8 MB, past 2p MiB for every p in SIZES
ADVERSARIAL = (1.0, 1e8, 1.0, -1e8)


def bits(t: torch.Tensor) -> tuple[str, list[int], Any]:
    raw = t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return (str(t.dtype), list(t.shape), hashlib.sha256(raw).hexdigest() if len(raw) > 4_000_000 else raw)


def data(rank: int, n: int, dtype: torch.dtype, seed: int = 0, spread: int = 20) -> torch.Tensor:
    """Random values with wide exponents, different on each rank, the same under both backends."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    scale = torch.exp2(torch.randint(-spread, spread + 1, (n,), generator=g).double())
    return (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(dtype)


def near_one(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Factors close to 1, so a PRODUCT stays finite and its rounding shows."""
    g = torch.Generator().manual_seed(77 + rank)
    return (1 + torch.randn(n, generator=g, dtype=torch.float64) / 8).to(dtype)


def all_reduce_cases(rank: int, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t = torch.tensor([ADVERSARIAL[rank % 4]])
    dist.all_reduce(t)
    out["adversarial/one"] = bits(t)
    t = torch.tensor([ADVERSARIAL[(rank + j) % 4] for j in range(9)])
    dist.all_reduce(t)
    out["adversarial/nine"] = bits(t)
    for dtype in (torch.float32, torch.float64):
        for n in COUNTS:
            t = data(rank, n, dtype)
            dist.all_reduce(t)
            out[f"sum/{dtype}/{n}"] = bits(t)
            t = data(rank, n, dtype, seed=1)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            out[f"avg/{dtype}/{n}"] = bits(t)
            t = near_one(rank, n, dtype)
            dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
            out[f"product/{dtype}/{n}"] = bits(t)
    for dtype in (torch.float16, torch.bfloat16):
        for n in (7, 1000):
            t = data(rank, n, dtype, spread=6)
            dist.all_reduce(t)
            out[f"sum/{dtype}/{n}"] = bits(t)
    t = data(rank, 1000, torch.complex64)
    dist.all_reduce(t)
    out["sum/complex64/1000"] = bits(t)
    t = data(rank, BIG, torch.float32, seed=2)
    dist.all_reduce(t)
    out["sum/big"] = bits(t)
    return out


def reduce_cases(rank: int, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for root in range(size):
        for n in (1, 7, 4097):
            t = data(rank, n, torch.float32, seed=3 + root)
            dist.reduce(t, dst=root)
            out[f"reduce/{root}/{n}"] = bits(t) if rank == root else None
    t = data(rank, BIG, torch.float32, seed=2)
    dist.reduce(t, dst=size - 1)
    out["reduce/big"] = bits(t) if rank == size - 1 else None
    return out


def scatter_and_coalesced_cases(rank: int, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in (1, 7, 1000):
        x = data(rank, size * m, torch.float32, seed=5)
        o = torch.empty(m)
        dist.reduce_scatter_tensor(o, x)
        out[f"reduce_scatter_tensor/{m}"] = bits(o)
        o = torch.empty(m)
        dist.reduce_scatter(o, list(x.chunk(size)))
        out[f"reduce_scatter/{m}"] = bits(o)
    ts = [data(rank, n, torch.float32, seed=6 + n) for n in (5, 7, 1000)]
    dist.all_reduce_coalesced(ts)
    out["all_reduce_coalesced"] = [bits(t) for t in ts]
    return out


def ddp_cases(rank: int, size: int) -> dict[str, Any]:
    """A few steps of DistributedDataParallel: every loss and the final weights, bit for bit."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    return {"ddp/losses": losses, "ddp/weights": [bits(p) for p in model.parameters()]}


CASES = {
    "all_reduce": all_reduce_cases,
    "reduce": reduce_cases,
    "reduce_scatter_and_coalesced": scatter_and_coalesced_cases,
    "ddp": ddp_cases,
}
