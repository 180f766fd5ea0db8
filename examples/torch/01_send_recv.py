"""Blocking point-to-point with torch.distributed, as the PyTorch tutorial writes it.

The code is the tutorial's (``init_process`` sets ``MASTER_ADDR`` and calls
``dist.init_process_group``); only the backend name and the launcher change:
``simcluster.torch.spawn`` runs both ranks as virtual ranks of one process,
with no sockets, under a 1 us + 1 GB/s network.

You will see rank 1 holding 1.0 after the transfer, then the virtual time the
one 4-byte message took.
"""

import os

import torch
import torch.distributed as dist

import simcluster as sc
import simcluster.torch


def run(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        dist.send(tensor=tensor, dst=1)
    else:
        # Receive tensor from process 0
        dist.recv(tensor=tensor, src=0)
    print("Rank ", rank, " has data ", tensor[0])


def init_process(rank, size, fn, backend="simcluster"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 2
    result = simcluster.torch.spawn(init_process, args=(size, run), nprocs=size,
                                    latency=sc.latency.AlphaBeta(1e-6, 1e-9))
    print(f"virtual time: {result.elapsed * 1e6:.3f} us")
