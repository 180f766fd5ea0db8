"""Nonblocking point-to-point with torch.distributed, as the PyTorch tutorial writes it.

``dist.isend`` and ``dist.irecv`` return a work handle at once; the tensors
must not be touched until ``req.wait()`` returns. On simcluster the handle
completes in virtual time, and ``wait()`` is where a rank waits.

You will see both ranks start their transfer, then rank 1 holding 1.0.
"""

import os

import torch
import torch.distributed as dist

import simcluster.torch


def run(rank, size):
    tensor = torch.zeros(1)
    req = None
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        req = dist.isend(tensor=tensor, dst=1)
        print("Rank 0 started sending")
    else:
        # Receive tensor from process 0
        req = dist.irecv(tensor=tensor, src=0)
        print("Rank 1 started receiving")
    req.wait()
    print("Rank ", rank, " has data ", tensor[0])


def init_process(rank, size, fn, backend="simcluster"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 2
    simcluster.torch.spawn(init_process, args=(size, run), nprocs=size)
