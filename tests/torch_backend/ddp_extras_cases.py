"""DDP's features and ZeroRedundancyOptimizer, written as torch users write them.

Each case is ``case(rank, size) -> value`` called on every rank after
``init_process_group`` (see ``differential.py``): it trains a small model a
few steps and returns that rank's losses and final weights (and whatever
else the feature gives a user to check). ``REFERENCE`` holds, for the cases
whose result is defined without distribution, the same training done in one
process on the whole data: ``reference(name)`` gives its weights. This module
imports only torch: gloo's processes import it by name.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

with warnings.catch_warnings():
    # torch.distributed.optim compiles its functional optimizers with torch.jit at import,
    # which torch 2.13 says is deprecated, in every process (gloo's too)
    warnings.filterwarnings("ignore", "`torch.jit.[a-z]+` is deprecated", DeprecationWarning)
    from torch.distributed.optim import ZeroRedundancyOptimizer

SIZE = 4
STEPS = 4
ROWS = 8
"""Rows of each rank's batch; the one-process reference trains on SIZE * ROWS."""
LR = 0.1


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))


def _batch(step: int, rank: int, rows: int = ROWS) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch of step ``step``: the same on every backend and in the reference."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(rows, 6, generator=gen), torch.randn(rows, 2, generator=gen)


def _whole_batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*(_batch(step, r) for r in range(size)), strict=True)
    return torch.cat(xs), torch.cat(ys)


def _result(losses: list[float], model: nn.Module) -> dict[str, Any]:
    module = model.module if isinstance(model, DDP) else model
    return {"losses": losses, "weights": [p.detach().clone() for p in module.parameters()]}


def _train(model: DDP, opt: torch.optim.Optimizer, rank: int) -> dict[str, Any]:
    losses = []
    for step in range(STEPS):
        x, y = _batch(step, rank)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return _result(losses, model)


# ---- the cases ----


def no_sync_accumulation(rank: int, size: int) -> dict[str, Any]:
    """Gradient accumulation: two micro-batches a step, the first under ``no_sync()``."""
    model = DDP(_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = _batch(step, rank)
        opt.zero_grad()
        with model.no_sync():  # gradients stay local
            loss = nn.functional.mse_loss(model(x[:4]), y[:4])
            loss.backward()
            losses.append(loss.item())
        loss = nn.functional.mse_loss(model(x[4:]), y[4:])
        loss.backward()  # all-reduces the gradients of both micro-batches
        losses.append(loss.item())
        opt.step()
    return _result(losses, model)


def _uneven_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank r has 2 + r batches: ranks run out of data at different steps."""
    return [_batch(step, rank, rows=4) for step in range(2 + rank)]


def join_uneven_inputs(rank: int, size: int) -> dict[str, Any]:
    """``Join``: ranks with fewer batches shadow the others' all_reduces until all are done."""
    model = DDP(_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    with Join([model]):
        for x, y in _uneven_batches(rank):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return _result(losses, model)


def allreduce_hook(rank: int, size: int) -> dict[str, Any]:
    model = DDP(_model())
    model.register_comm_hook(None, default_hooks.allreduce_hook)
    return _train(model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9), rank)


def fp16_compress_hook(rank: int, size: int) -> dict[str, Any]:
    model = DDP(_model())
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    return _train(model, torch.optim.SGD(model.parameters(), lr=LR), rank)


def powersgd_hook(rank: int, size: int) -> dict[str, Any]:
    """PowerSGD from the second step (the 8x6 weight is compressed, the 2x8 one is not)."""
    model = DDP(_model())
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2, random_seed=0)
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    out = _train(model, torch.optim.SGD(model.parameters(), lr=LR), rank)
    out["iterations"] = state.iter
    return out


def static_graph(rank: int, size: int) -> dict[str, Any]:
    model = DDP(_model(), static_graph=True)
    return _train(model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9), rank)


class _Branchy(nn.Module):
    """A trunk and head always used, and a branch a forward uses only when asked."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Linear(6, 8)
        self.head = nn.Linear(8, 2)
        self.branch = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, use_branch: bool) -> torch.Tensor:
        h = torch.tanh(self.trunk(x))
        return self.head(h) + self.branch(h) if use_branch else self.head(h)


def _uses_branch(step: int, rank: int) -> bool:
    """Half the ranks use the branch on a step, and no rank on step 2."""
    return step != 2 and (step + rank) % 2 == 0


def find_unused_parameters(rank: int, size: int) -> dict[str, Any]:
    model = DDP(_Branchy(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = _batch(step, rank)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x, _uses_branch(step, rank)), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return _result(losses, model)


def zero_redundancy_optimizer(rank: int, size: int) -> dict[str, Any]:
    """DDP with Adam's state sharded across the ranks; the whole state consolidated on rank 0."""
    model = DDP(_model())
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    out = _train(model, opt, rank)
    out["owned"] = [p.shape for p in opt.optim.param_groups[0]["params"]]
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        out["state_dict"] = _adam_state(opt.state_dict())
    else:
        try:
            opt.state_dict()
        except RuntimeError as exc:
            out["state_dict"] = ("raised", type(exc).__name__, str(exc))
    return out


def _adam_state(state_dict: dict[str, Any]) -> dict[str, Any]:
    groups = [{k: v for k, v in g.items() if k in ("lr", "betas", "eps", "params")}
              for g in state_dict["param_groups"]]
    state = {i: {k: v for k, v in s.items() if k in ("step", "exp_avg", "exp_avg_sq")}
             for i, s in sorted(state_dict["state"].items())}
    return {"param_groups": groups, "state": state}


CASES: dict[str, Callable[[int, int], Any]] = {
    f.__name__: f for f in (no_sync_accumulation, join_uneven_inputs, allreduce_hook,
                            fp16_compress_hook, powersgd_hook, static_graph,
                            find_unused_parameters, zero_redundancy_optimizer)
}


# ---- one process, no distribution ----


def _reference_steps(model: nn.Module, opt: torch.optim.Optimizer,
                     losses: Callable[[int], list[torch.Tensor]], steps: int) -> nn.Module:
    """Train ``model``: each step's gradient is that of the sum of ``losses(step)``."""
    for step in range(steps):
        opt.zero_grad()
        sum(losses(step)).backward()
        opt.step()
    return model


def _mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def _ref_whole_batch(size: int, momentum: float = 0.9) -> nn.Module:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum)
    return _reference_steps(model, opt, lambda s: [_mse(model, _whole_batch(s, size))], STEPS)


def _ref_no_sync(size: int) -> nn.Module:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)

    def micro_batches(step: int) -> list[torch.Tensor]:  # the mean of the ranks' k-th micro-batches
        x, y = _whole_batch(step, size)
        x, y = x.view(size, 2, 4, 6), y.view(size, 2, 4, 2)
        return [_mse(model, (x[:, k].reshape(-1, 6), y[:, k].reshape(-1, 2))) for k in range(2)]
    return _reference_steps(model, opt, micro_batches, STEPS)


def _ref_join(size: int) -> nn.Module:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    batches = [_uneven_batches(r) for r in range(size)]

    def active(step: int) -> list[torch.Tensor]:  # a joined rank adds zeros; DDP divides by size
        return [_mse(model, b[step]) / size for b in batches if step < len(b)]
    return _reference_steps(model, opt, active, max(map(len, batches)))


def _ref_find_unused(size: int) -> nn.Module:
    model = _Branchy()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)

    def per_rank(step: int) -> list[torch.Tensor]:
        return [nn.functional.mse_loss(model(x, _uses_branch(step, r)), y) / size
                for r, (x, y) in ((r, _batch(step, r)) for r in range(size))]
    return _reference_steps(model, opt, per_rank, STEPS)


def _ref_zero(size: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _reference_steps(model, opt, lambda s: [_mse(model, _whole_batch(s, size))], STEPS)
    return model, opt


def reference(name: str, size: int = SIZE) -> dict[str, Any]:
    """One process's result for case ``name``: its weights (and Adam's state for ZeRO)."""
    if name == "zero_redundancy_optimizer":
        model, opt = _ref_zero(size)
        return {"weights": [p.detach() for p in model.parameters()],
                "state_dict": _adam_state(opt.state_dict())}
    model = REFERENCE[name](size)
    return {"weights": [p.detach() for p in model.parameters()]}


REFERENCE: dict[str, Callable[[int], nn.Module]] = {
    "no_sync_accumulation": _ref_no_sync,
    "join_uneven_inputs": _ref_join,
    "allreduce_hook": _ref_whole_batch,
    "fp16_compress_hook": lambda size: _ref_whole_batch(size, momentum=0),
    "static_graph": _ref_whole_batch,
    "find_unused_parameters": _ref_find_unused,
    "zero_redundancy_optimizer": lambda size: _ref_zero(size)[0],
}
"""The cases whose result is one process's training on the whole data (fp16_compress_hook's
to float16's precision, the others' to rel 1e-5)."""
