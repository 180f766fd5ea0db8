"""A torch training script that checkpoints, loses a rank, and is restarted as torchelastic would.

    simcluster torchrun --nproc-per-node 2 --max-restarts 1 --faults crash:1@all_reduce#4 examples/faults/elastic_checkpoint.py

Two ranks train a small model for eight steps, averaging their gradients
with an ``all_reduce`` per step, and save a checkpoint with
``torch.distributed.checkpoint`` every two steps. The fault plan crashes
rank 1 at its fourth ``all_reduce``; rank 0's ``all_reduce`` then raises, as
gloo's does when a peer dies, rank 0 exits with status 1, and the attempt fails. ``--max-restarts 1``
starts the world again (``TORCHELASTIC_RESTART_COUNT=1``, the same ranks,
the fault plan applying to the first attempt only); the script resumes from
its latest checkpoint and ends with exactly the weights of a run that never
failed. The checkpoints go to the folder given as the first argument (a
temporary one by default, removed at the end).
"""

import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

STEPS = 8
EVERY = 2  # steps between checkpoints


def latest(folder: str) -> str | None:
    """The newest complete checkpoint in ``folder`` (DCP writes .metadata last)."""
    done = [d for d in os.listdir(folder) if os.path.exists(os.path.join(folder, d, ".metadata"))]
    return os.path.join(folder, max(done)) if done else None


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(),
                                                                "simcluster-elastic-example")
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    if rank == 0 and attempt == "0" and os.path.isdir(folder):
        shutil.rmtree(folder)  # a fresh run: no checkpoint of an earlier one
    dist.barrier()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    found = latest(folder) if os.path.isdir(folder) else None
    if found is not None:
        state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "step": 0}
        dcp.load(state, checkpoint_id=found)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        start = state["step"]
    if rank == 0:
        print(f"attempt {attempt}: starting at step {start}")
    for step in range(start, STEPS):
        gen = torch.Generator().manual_seed(step * size + rank)
        x = torch.randn(16, 4, generator=gen)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        try:
            dist.all_reduce(grads)
        except RuntimeError as exc:  # a peer died: gloo says "Connection closed by peer"
            print(f"rank {rank} at step {step}: {str(exc).split('.')[0]}; exiting for a restart")
            sys.exit(1)
        offset = 0
        for p in model.parameters():
            p.grad.copy_(grads[offset:offset + p.numel()].view_as(p) / size)
            offset += p.numel()
        optimizer.step()
        if (step + 1) % EVERY == 0:
            dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step + 1},
                     checkpoint_id=os.path.join(folder, f"step{step + 1:04d}"))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    if rank == 0:
        print("final weights:", " ".join(f"{w:.6f}" for w in weights.tolist()))
    dist.barrier()
    if rank == 0 and len(sys.argv) < 2:
        shutil.rmtree(folder)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
