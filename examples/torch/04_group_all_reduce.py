"""all_reduce on a group, as the PyTorch tutorial writes it, on 3 virtual ranks.

Every rank calls ``dist.new_group([0, 1])`` (making a group is collective,
as in torch); ranks 0 and 1 then all_reduce ``[1.]`` on it. Rank 2 is not
in the group and skips the all_reduce: calling it there would make torch
warn that the rank does not belong to the group.

You will see 2.0 on ranks 0 and 1, and 1.0 on rank 2.
"""

import os

import torch
import torch.distributed as dist

import simcluster.torch


def run(rank, size):
    """Simple collective communication."""
    group = dist.new_group([0, 1])
    tensor = torch.ones(1)
    if rank in (0, 1):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print("Rank ", rank, " has data ", tensor[0])


def init_process(rank, size, fn, backend="simcluster"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 3
    simcluster.torch.spawn(init_process, args=(size, run), nprocs=size)
