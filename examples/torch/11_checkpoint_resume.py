"""Checkpoint an FSDP2 model with torch.distributed.checkpoint, crash, and resume.

Four virtual ranks train a model sharded with ``fully_shard`` (FSDP2) and
Adam. Midway, every rank saves its shards of the model and optimizer state
with ``torch.distributed.checkpoint`` (DCP) into one directory; then a rank
fails and the run ends. A second run builds a fresh model, loads the
checkpoint, and trains the remaining steps.

You will see the loss of each run, the files of the checkpoint (a metadata
file and one shard file per rank), the failure, and that the resumed run
ends with exactly the weights of a run that never stopped.
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import simcluster as sc
import simcluster.torch

STEPS = 10
SAVE_AFTER = 5  # steps done when the checkpoint is saved
FAIL_AT = 7  # the step at which rank 2 fails, in the run that crashes


def make_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.Adam(model.parameters(), lr=0.03)


def batch(step, rank, size):
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(64, 8, generator=gen)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)  # a hidden linear rule
    return x.chunk(size)[rank], y.chunk(size)[rank]


def train(rank, size, checkpoint_dir, mode):
    """Train; ``mode`` is "uninterrupted", "crash" (save, then fail) or "resume"."""
    dist.init_process_group("simcluster")
    model, optimizer = make_model()
    start = 0
    if mode == "resume":
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, "step": 0}
        dcp.load(state, checkpoint_id=checkpoint_dir)
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start = state["step"]
        if rank == 0:
            print(f"resumed from the checkpoint at step {start}")
    for step in range(start, STEPS):
        if mode == "crash" and step == FAIL_AT and rank == 2:
            raise RuntimeError(f"rank 2 lost its node at step {step}")
        optimizer.zero_grad()
        x, y = batch(step, rank, size)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"  step {step}: loss on rank 0's shard {loss.item():.4f}")
        if mode == "crash" and step + 1 == SAVE_AFTER:
            model_sd, optim_sd = get_state_dict(model, optimizer)
            dcp.save({"model": model_sd, "optim": optim_sd, "step": step + 1},
                     checkpoint_id=checkpoint_dir)
            if rank == 0:
                print(f"saved a checkpoint after step {step}: "
                      f"{', '.join(sorted(os.listdir(checkpoint_dir)))}")
    weights = [p.full_tensor() for p in model.parameters()]
    dist.destroy_process_group()
    return weights


if __name__ == "__main__":
    size = 4
    with tempfile.TemporaryDirectory() as checkpoint_dir:
        print("uninterrupted run:")
        reference = simcluster.torch.spawn(train, args=(size, checkpoint_dir, "uninterrupted"),
                                           nprocs=size)
        print("run that crashes:")
        try:
            simcluster.torch.spawn(train, args=(size, checkpoint_dir, "crash"), nprocs=size)
        except sc.RankError as error:
            print(f"the run ended: {error.__cause__}")
        print("resumed run:")
        resumed = simcluster.torch.spawn(train, args=(size, checkpoint_dir, "resume"),
                                         nprocs=size)
    same = all(torch.equal(a, b) for weights in resumed for a, b in zip(weights, reference[0]))
    print(f"every rank of the resumed run holds the uninterrupted run's weights: {same}")
