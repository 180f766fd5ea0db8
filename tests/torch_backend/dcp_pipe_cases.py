"""Distributed checkpoints and pipeline parallelism, written as a torch user writes them.

A cases module for ``differential.py`` (4 ranks): each case runs on every
rank after ``init_process_group`` and returns plain values, under gloo and
under simcluster alike.

* ``torch.distributed.checkpoint`` (DCP): an FSDP2 model and its Adam
  optimizer saved midway (``get_state_dict`` + ``DCP.save``), then resumed
  in a fresh model (``DCP.load`` + ``set_state_dict``); and a plain,
  replicated ``state_dict()`` saved and loaded.
* ``torch.distributed.pipelining``: a model split by hand into
  ``PipelineStage``s run by ``ScheduleGPipe``, ``Schedule1F1B`` and
  ``ScheduleInterleaved1F1B`` (two stages per rank), and the tracing
  frontend ``pipeline`` with ``SplitPoint`` or ``pipe_split()``.

The models, data and one-process references (``one_process_*``) are here
too, so the test compares every case with the same training done in one
process on the whole batch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as DCP  # noqa: N812 - torch's documented alias
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    SplitPoint,
    pipe_split,
    pipeline,
)

SIZE = 4

# ---- distributed checkpoints ----

STEPS = 6  # training steps in all
SAVED_AT = 3  # the step after which the checkpoint is taken
BATCH = 16  # samples per step, split evenly over the ranks


def make_fsdp_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of ``step``: the same on every rank and in the one-process run."""
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 8, generator=gen), torch.randn(BATCH, 4, generator=gen)


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, steps: range,
                rank: int = 0, size: int = 1) -> list[float]:
    """Train on this rank's share of each step's batch; return the local losses."""
    losses = []
    for step in steps:
        x, y = batch(step)
        x, y = x.chunk(size)[rank], y.chunk(size)[rank]
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def shared_tempdir(rank: int) -> str:
    """A directory that rank 0 makes and every rank gets the name of."""
    name = [tempfile.mkdtemp(prefix="dcp-") if rank == 0 else None]
    dist.broadcast_object_list(name, src=0)
    return str(name[0])


def remove_shared(path: str, rank: int) -> None:
    dist.barrier()  # every rank is done with it
    if rank == 0:
        shutil.rmtree(path)


def sharded_fsdp(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = make_fsdp_model(seed)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def full_weights(model: nn.Module) -> list[torch.Tensor]:
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def dcp_fsdp2_resume(rank: int, size: int) -> dict[str, Any]:
    """Train, checkpoint midway with DCP, train on; resume a fresh model from the checkpoint."""
    path = shared_tempdir(rank)
    try:
        model, optimizer = sharded_fsdp(seed=0)
        losses = train_steps(model, optimizer, range(SAVED_AT), rank, size)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        DCP.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
        dist.barrier()
        files = sorted(os.listdir(path))
        losses += train_steps(model, optimizer, range(SAVED_AT, STEPS), rank, size)
        uninterrupted = full_weights(model)

        fresh, fresh_optimizer = sharded_fsdp(seed=1)  # other weights: the load must replace them
        model_sd, optim_sd = get_state_dict(fresh, fresh_optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        DCP.load(state, checkpoint_id=path)
        set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        loaded = full_weights(fresh)
        resumed_losses = train_steps(fresh, fresh_optimizer, range(SAVED_AT, STEPS), rank, size)
        resumed = full_weights(fresh)
    finally:
        remove_shared(path, rank)
    return {"files": files, "losses": losses, "resumed_losses": resumed_losses,
            "loaded": loaded, "uninterrupted": uninterrupted, "resumed": resumed,
            "resumed_equals_uninterrupted": all(torch.equal(a, b)
                                                for a, b in zip(resumed, uninterrupted))}


def one_process_fsdp_run() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The weights at the checkpoint and at the end, trained in one process on whole batches."""
    model = make_fsdp_model(seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train_steps(model, optimizer, range(SAVED_AT))
    at_checkpoint = [p.detach().clone() for p in model.parameters()]
    train_steps(model, optimizer, range(SAVED_AT, STEPS))
    return at_checkpoint, [p.detach().clone() for p in model.parameters()]


def dcp_plain_state_dict(rank: int, size: int) -> dict[str, Any]:
    """A replicated (not sharded) ``state_dict()`` and a plain value, saved and loaded with DCP."""
    path = shared_tempdir(rank)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.Linear(5, 3))
        model(torch.randn(4, 6))  # moves the BatchNorm running statistics
        DCP.save({"model": model.state_dict(), "epoch": 7}, checkpoint_id=path)
        dist.barrier()
        files = sorted(os.listdir(path))

        torch.manual_seed(1)
        fresh = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.Linear(5, 3))
        state = {"model": fresh.state_dict(), "epoch": 0}
        DCP.load(state, checkpoint_id=path)
        fresh.load_state_dict(state["model"])
    finally:
        remove_shared(path, rank)
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  fresh.state_dict().values()))
    return {"files": files, "epoch": state["epoch"], "loaded_equals_saved": same,
            "state": dict(fresh.state_dict())}


# ---- pipeline parallelism ----

WIDTH = 6
SAMPLES = 8  # the whole batch, split into microbatches by the schedule
MICROBATCHES = 4
LR = 0.1


def make_layers(n: int) -> nn.Sequential:
    """``n`` blocks of Linear + Tanh, the same on every rank."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(n)])


def pipe_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    return torch.randn(SAMPLES, WIDTH, generator=gen), torch.randn(SAMPLES, WIDTH, generator=gen)


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(output, target)


def run_schedule(schedule: Any, stages: list[Any], rank: int, size: int) -> dict[str, Any]:
    """One training step: the first stage feeds the batch, the last scores it; SGD after."""
    x, y = pipe_data()
    losses: list[torch.Tensor] = []
    first = any(s.is_first for s in stages)
    last = any(s.is_last for s in stages)
    if first and last:
        schedule.step(x, target=y, losses=losses)
    elif first:
        schedule.step(x)
    elif last:
        schedule.step(target=y, losses=losses)
    else:
        schedule.step()
    out: dict[str, Any] = {"losses": [loss.item() for loss in losses]}
    for stage in stages:
        named = sorted(stage.submod.named_parameters())
        grads = {name: p.grad.clone() for name, p in named}
        torch.optim.SGD(stage.submod.parameters(), lr=LR).step()
        out[f"stage {stage.stage_index}"] = {"grads": grads,
                                             "weights": {name: p for name, p in named}}
    return out


def manual_stages(rank: int, size: int, per_rank: int) -> list[PipelineStage]:
    """Stages ``rank``, ``rank + size``, ...: each one block of the split model."""
    layers = make_layers(size * per_rank)
    n = size * per_rank
    return [PipelineStage(layers[i], i, n, torch.device("cpu"))
            for i in range(rank, n, size)]


def pipe_gpipe(rank: int, size: int) -> dict[str, Any]:
    stages = manual_stages(rank, size, 1)
    schedule = ScheduleGPipe(stages[0], n_microbatches=MICROBATCHES, loss_fn=mse)
    return run_schedule(schedule, stages, rank, size)


def pipe_1f1b(rank: int, size: int) -> dict[str, Any]:
    stages = manual_stages(rank, size, 1)
    schedule = Schedule1F1B(stages[0], n_microbatches=MICROBATCHES, loss_fn=mse)
    return run_schedule(schedule, stages, rank, size)


def pipe_interleaved_1f1b(rank: int, size: int) -> dict[str, Any]:
    stages = manual_stages(rank, size, 2)
    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=MICROBATCHES, loss_fn=mse)
    return run_schedule(schedule, stages, rank, size)


class Net(nn.Module):
    """The split model as one module, for the tracing frontend."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = make_layers(n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class MarkedNet(Net):
    """The same model, with its stage boundaries marked by ``pipe_split()`` in ``forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            if i:
                pipe_split()
            x = layer(x)
        return x


def traced(module: nn.Module, rank: int, size: int,
           split_spec: dict[str, SplitPoint] | None) -> dict[str, Any]:
    x, _ = pipe_data()
    pipe = pipeline(module, mb_args=(x.chunk(MICROBATCHES)[0],), split_spec=split_spec)
    stage = pipe.build_stage(rank, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES, loss_fn=mse)
    return {"num_stages": pipe.num_stages, **run_schedule(schedule, [stage], rank, size)}


def pipe_traced_split_spec(rank: int, size: int) -> dict[str, Any]:
    split_spec = {f"layers.{i}": SplitPoint.BEGINNING for i in range(1, size)}
    return traced(Net(size), rank, size, split_spec)


def pipe_traced_pipe_split(rank: int, size: int) -> dict[str, Any]:
    return traced(MarkedNet(size), rank, size, None)


def one_process_pipe(n: int) -> dict[str, Any]:
    """The losses, and each block's gradients and updated weights, of one process's step.

    The schedules average the microbatch losses' gradients (``scale_grads``),
    so the reference sums the microbatch losses and divides by their number.
    """
    layers = make_layers(n)
    x, y = pipe_data()
    losses = [mse(layers(xm), ym) for xm, ym in zip(x.chunk(MICROBATCHES), y.chunk(MICROBATCHES))]
    (sum(losses) / MICROBATCHES).backward()
    out: dict[str, Any] = {"losses": [loss.item() for loss in losses]}
    for i, block in enumerate(layers):
        named = sorted(block.named_parameters())
        grads = {name: p.grad.clone() for name, p in named}
        torch.optim.SGD(block.parameters(), lr=LR).step()
        out[f"stage {i}"] = {"grads": grads, "weights": {name: p for name, p in named}}
    return out


CASES = {
    "dcp_fsdp2_resume": dcp_fsdp2_resume,
    "dcp_plain_state_dict": dcp_plain_state_dict,
    "pipe_gpipe": pipe_gpipe,
    "pipe_1f1b": pipe_1f1b,
    "pipe_interleaved_1f1b": pipe_interleaved_1f1b,
    "pipe_traced_split_spec": pipe_traced_split_spec,
    "pipe_traced_pipe_split": pipe_traced_pipe_split,
}
