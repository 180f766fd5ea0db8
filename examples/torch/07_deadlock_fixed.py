"""The swap of ``07_deadlock_broken.py``, fixed: rank 0 sends first, rank 1 receives first.

With the calls in opposite orders on the two ranks every receive has a send
to match, so the swap completes.

You will see each rank holding the other's value.
"""

import torch
import torch.distributed as dist

import simcluster.torch


def swap(rank, size):
    dist.init_process_group("simcluster")
    mine = torch.tensor([float(rank)])
    theirs = torch.zeros(1)
    if rank == 0:
        dist.send(mine, dst=1)
        dist.recv(theirs, src=1)
    else:
        dist.recv(theirs, src=0)
        dist.send(mine, dst=0)
    print(f"rank {rank} got {theirs.item()}")


if __name__ == "__main__":
    simcluster.torch.spawn(swap, args=(2,), nprocs=2)
