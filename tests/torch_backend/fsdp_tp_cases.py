"""FSDP2, tensor parallel and 2-D FSDP + TP training, written as a torch user writes it.

Each case is ``case(rank, size) -> value`` called on every one of ``SIZE``
ranks after ``init_process_group`` (gloo or ``"simcluster"``); it builds a
``DeviceMesh``, shards or parallelizes a small model the way torch's
documentation shows, trains it for a few steps and returns what a user
checks: the losses, the full weights (``DTensor.full_tensor()``), outputs
and gradients. ``REFERENCES`` holds, for each training case, the same model
and data trained in one process without torch.distributed, returning the
same structure. This module imports only torch: gloo's processes import it
by name.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - torch's own spelling
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

SIZE = 4
"""World size: FSDP and TP over all 4 ranks, or a (dp=2, tp=2) mesh for 2-D."""

STEPS = 3


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor a DTensor stands for (a collective), or ``t`` itself."""
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().clone()


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: _full(p) for name, p in model.named_parameters()}


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: _full(p.grad) for name, p in model.named_parameters() if p.grad is not None}


# ---- FSDP2: fully_shard over the 4 ranks ----


class MLP(nn.Module):
    """Three linear layers; ``fully_shard`` goes on each layer, then on the root."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.tanh(x)
        return x


def _mlp() -> MLP:
    torch.manual_seed(0)  # every rank builds the same weights before sharding them
    return MLP()


def _mlp_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, 16, 8, generator=gen), torch.randn(STEPS, 16, 4, generator=gen)


def _optimizer(kind: str, params: Any) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def _train_fsdp(rank: int, size: int, reshard: bool, opt_kind: str,
                mp_policy: MixedPrecisionPolicy | None = None,
                per_layer: bool = True) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", (size,))
    model = _mlp()
    extra = {} if mp_policy is None else {"mp_policy": mp_policy}
    if per_layer:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, **extra)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, **extra)
    opt = _optimizer(opt_kind, model.parameters())
    xs, ys = _mlp_data()
    losses = []
    for x, y in zip(xs, ys):
        x, y = x.chunk(size)[rank], y.chunk(size)[rank]  # this rank's part of the batch
        opt.zero_grad()
        loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # equal parts: the mean of the means is the whole batch's
        losses.append((mean / size).item())
    local_shapes = {n: list(p.to_local().shape) for n, p in model.named_parameters()}
    return {"losses": losses, "weights": _weights(model), "local_shapes": local_shapes}


def fsdp_per_layer_reshard_sgd(rank: int, size: int) -> Any:
    return _train_fsdp(rank, size, reshard=True, opt_kind="sgd")


def fsdp_per_layer_no_reshard_adam(rank: int, size: int) -> Any:
    return _train_fsdp(rank, size, reshard=False, opt_kind="adam")


def fsdp_root_only_adam(rank: int, size: int) -> Any:
    return _train_fsdp(rank, size, reshard=True, opt_kind="adam", per_layer=False)


BF16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def fsdp_mixed_precision_sgd(rank: int, size: int) -> Any:
    return _train_fsdp(rank, size, reshard=True, opt_kind="sgd", mp_policy=BF16)


def fsdp_mixed_precision_no_reshard_adam(rank: int, size: int) -> Any:
    return _train_fsdp(rank, size, reshard=False, opt_kind="adam", mp_policy=BF16)


def _one_process_fsdp(opt_kind: str, size: int = SIZE, bf16: bool = False) -> dict[str, Any]:
    """What FSDP computes, in one process: each rank's gradient on its part, then their mean.

    With bf16 compute, each part's gradient comes from a bf16 copy of the weights (as FSDP's
    all-gathered bf16 parameters), turned to float32 before averaging (``reduce_dtype``).
    """
    model = _mlp()
    opt = _optimizer(opt_kind, model.parameters())
    xs, ys = _mlp_data()
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        if not bf16:
            loss = F.mse_loss(model(x), y)
            loss.backward()
            losses.append(loss.item())
        else:
            copies = []
            for xr, yr in zip(x.chunk(size), y.chunk(size)):
                low = copy.deepcopy(model).to(torch.bfloat16)
                loss = F.mse_loss(low(xr.to(torch.bfloat16)).float(), yr)
                loss.backward()
                copies.append((loss.detach(), low))
            losses.append(float(sum(loss for loss, _ in copies) / size))
            for p, *lows in zip(model.parameters(), *(low.parameters() for _, low in copies)):
                p.grad = sum(q.grad.float() for q in lows) / size
        opt.step()
    local_shapes = {n: [-(-p.shape[0] // size), *p.shape[1:]] for n, p in model.named_parameters()}
    return {"losses": losses, "weights": _weights(model), "local_shapes": local_shapes}


# ---- tensor parallel over the 4 ranks ----


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class Attention(nn.Module):
    """Self-attention whose head count follows the width of ``wq``'s output (local heads)."""

    def __init__(self, dim: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = (w(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class Block(nn.Module):
    def __init__(self, dim: int = 16, head_dim: int = 4) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(dim)
        self.attention = Attention(dim, head_dim)
        self.ffn_norm = nn.LayerNorm(dim)
        self.feed_forward = FeedForward(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


def _block_plan() -> dict[str, Any]:
    """Megatron-style TP with sequence parallel norms (torch's TP tutorial's plan)."""
    return {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1),),
                                        desired_input_layouts=(Replicate(),)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                           desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def _feed_forward() -> FeedForward:
    torch.manual_seed(0)
    return FeedForward(8, 32)


def _ff_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return torch.randn(STEPS, 6, 8, generator=gen), torch.randn(STEPS, 6, 8, generator=gen)


def tp_mlp_colwise_rowwise_sgd(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("tp",))
    model = parallelize_module(_feed_forward(), mesh,
                               {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _ff_data()
    out: dict[str, Any] = {"outputs": [], "losses": []}
    for step, (x, y) in enumerate(zip(xs, ys)):  # every TP rank sees the same batch
        opt.zero_grad()
        pred = model(x)
        loss = F.mse_loss(pred, y)
        loss.backward()
        if step == 0:
            out["grads"] = _grads(model)
        opt.step()
        out["outputs"].append(pred.detach())
        out["losses"].append(loss.item())
    out["local_shapes"] = {n: list(p.to_local().shape) for n, p in model.named_parameters()}
    out["weights"] = _weights(model)
    return out


def _one_process_mlp() -> dict[str, Any]:
    model = _feed_forward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _ff_data()
    out: dict[str, Any] = {"outputs": [], "losses": []}
    for step, (x, y) in enumerate(zip(xs, ys)):
        opt.zero_grad()
        pred = model(x)
        loss = F.mse_loss(pred, y)
        loss.backward()
        if step == 0:
            out["grads"] = _grads(model)
        opt.step()
        out["outputs"].append(pred.detach())
        out["losses"].append(loss.item())
    out["local_shapes"] = {"w1.weight": [8, 8], "w1.bias": [8], "w2.weight": [8, 8],
                           "w2.bias": [8]}
    out["weights"] = _weights(model)
    return out


def _block() -> Block:
    torch.manual_seed(0)
    return Block()


def _block_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return torch.randn(STEPS, 2, 8, 16, generator=gen), torch.randn(STEPS, 2, 8, 16, generator=gen)


def tp_block_sequence_parallel_sgd(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("tp",))
    model = parallelize_module(_block(), mesh, _block_plan())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _block_data()
    out: dict[str, Any] = {"outputs": [], "losses": []}
    for step, (x, y) in enumerate(zip(xs, ys)):
        # sequence parallel: each rank holds its part of the sequence, in and out
        x, y = x.chunk(size, dim=1)[rank], y.chunk(size, dim=1)[rank]
        opt.zero_grad()
        pred = model(x)
        # the ranks' backward passes add up (sequence parallel): each gives its share of the mean
        loss = F.mse_loss(pred, y) / size
        loss.backward()
        if step == 0:
            out["grads"] = _grads(model)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        full = [torch.empty_like(pred) for _ in range(size)]
        dist.all_gather(full, pred.detach().contiguous())
        out["outputs"].append(torch.cat(full, dim=1))
        out["losses"].append(total.item())
    out["weights"] = _weights(model)
    return out


def _one_process_block() -> dict[str, Any]:
    model = _block()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _block_data()
    out: dict[str, Any] = {"outputs": [], "losses": []}
    for step, (x, y) in enumerate(zip(xs, ys)):
        opt.zero_grad()
        pred = model(x)
        loss = F.mse_loss(pred, y)
        loss.backward()
        if step == 0:
            out["grads"] = _grads(model)
        opt.step()
        out["outputs"].append(pred.detach())
        out["losses"].append(loss.item())
    out["weights"] = _weights(model)
    return out


# ---- 2-D: FSDP over "dp", TP over "tp" ----


class Transformer(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16, layers: int = 2) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def _transformer() -> Transformer:
    torch.manual_seed(0)
    return Transformer()


def _tokens() -> torch.Tensor:
    gen = torch.Generator().manual_seed(4)
    return torch.randint(0, 32, (STEPS, 4, 9), generator=gen)  # 8 inputs + the next token


def parallelize_transformer(model: Transformer, mesh: Any) -> Transformer:
    """TP (with sequence parallel) over ``mesh["tp"]``, then FSDP over ``mesh["dp"]``."""
    tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        # logits stay sharded over the vocabulary: cross_entropy runs under loss_parallel()
        "output": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
    })
    for block in model.layers:
        parallelize_module(block, tp_mesh, _block_plan())
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return model


def fsdp_tp_transformer_adam(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    model = parallelize_transformer(_transformer(), mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    dp, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    losses = []
    for batch in _tokens():
        batch = batch.chunk(dp_size)[dp]  # each dp rank its part; tp ranks of a dp rank alike
        opt.zero_grad()
        logits = model(batch[:, :-1])
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(0, 1))
            loss.backward()
        opt.step()
        mean = loss.detach().full_tensor()  # the same on every tp rank
        dist.all_reduce(mean, group=mesh["dp"].get_group())
        losses.append((mean / dp_size).item())
    placements = {n: [str(p) for p in w.placements] for n, w in model.named_parameters()}
    return {"losses": losses, "weights": _weights(model), "placements": placements}


def _one_process_transformer() -> dict[str, Any]:
    model = _transformer()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for batch in _tokens():
        opt.zero_grad()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "weights": _weights(model)}


CASES: dict[str, Callable[[int, int], Any]] = {
    f.__name__: f for f in (
        fsdp_per_layer_reshard_sgd, fsdp_per_layer_no_reshard_adam, fsdp_root_only_adam,
        fsdp_mixed_precision_sgd, fsdp_mixed_precision_no_reshard_adam,
        tp_mlp_colwise_rowwise_sgd, tp_block_sequence_parallel_sgd,
        fsdp_tp_transformer_adam,
    )
}

REFERENCES: dict[str, Callable[[], dict[str, Any]]] = {
    "fsdp_per_layer_reshard_sgd": lambda: _one_process_fsdp("sgd"),
    "fsdp_per_layer_no_reshard_adam": lambda: _one_process_fsdp("adam"),
    "fsdp_root_only_adam": lambda: _one_process_fsdp("adam"),
    "fsdp_mixed_precision_sgd": lambda: _one_process_fsdp("sgd", bf16=True),
    "fsdp_mixed_precision_no_reshard_adam": lambda: _one_process_fsdp("adam", bf16=True),
    "tp_mlp_colwise_rowwise_sgd": _one_process_mlp,
    "tp_block_sequence_parallel_sgd": _one_process_block,
    "fsdp_tp_transformer_adam": _one_process_transformer,
}
"""One process, no torch.distributed: the values each training case must give on every rank."""
