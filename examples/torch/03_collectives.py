"""The six collectives of the "Collective Communication with PyTorch" tutorial, on 4 virtual ranks.

Each function is the tutorial's: it makes a group of every rank with
``dist.new_group`` and calls one collective on it (reduce, all_reduce,
scatter, gather, all_gather, broadcast). ``simcluster.torch.spawn`` runs the
4 ranks in one process, in a deterministic order.

You will see, for each collective, what every rank holds after it: the sum
4.0 on rank 0 only after reduce, on every rank after all_reduce, rank i's
element i + 1 after scatter, the gathered list on rank 0, on every rank after
all_gather, and rank 0's tensor everywhere after broadcast.
"""

import os

import torch
import torch.distributed as dist

import simcluster.torch


def do_reduce(rank: int, size: int):
    # create a group with all processors
    group = dist.new_group(list(range(size)))
    tensor = torch.ones(1)
    # sending all tensors to rank 0 and sum them
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM, group=group)
    # only rank 0 will have four
    print(f"[{rank}] data = {tensor[0]}")


def do_all_reduce(rank: int, size: int):
    group = dist.new_group(list(range(size)))
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    # will output 4 for all ranks
    print(f"[{rank}] data = {tensor[0]}")


def do_scatter(rank: int, size: int):
    group = dist.new_group(list(range(size)))
    tensor = torch.empty(1)
    # sending all tensors from rank 0 to the others
    if rank == 0:
        tensor_list = [torch.tensor([i + 1], dtype=torch.float32) for i in range(size)]
        dist.scatter(tensor, scatter_list=tensor_list, src=0, group=group)
    else:
        dist.scatter(tensor, scatter_list=[], src=0, group=group)
    # each rank will have a tensor with their rank number
    print(f"[{rank}] data = {tensor[0]}")


def do_gather(rank: int, size: int):
    group = dist.new_group(list(range(size)))
    tensor = torch.tensor([rank], dtype=torch.float32)
    if rank == 0:
        # create an empty list we will use to hold the gathered values
        tensor_list = [torch.empty(1) for i in range(size)]
        dist.gather(tensor, gather_list=tensor_list, dst=0, group=group)
    else:
        dist.gather(tensor, gather_list=[], dst=0, group=group)
    # only rank 0 will have the tensors from the other processed
    if rank == 0:
        print(f"[{rank}] data = {tensor_list}")


def do_all_gather(rank: int, size: int):
    group = dist.new_group(list(range(size)))
    tensor = torch.tensor([rank], dtype=torch.float32)
    tensor_list = [torch.empty(1) for i in range(size)]
    dist.all_gather(tensor_list, tensor, group=group)
    # all ranks will have [tensor([0.]), tensor([1.]), tensor([2.]), tensor([3.])]
    print(f"[{rank}] data = {tensor_list}")


def do_broadcast(rank: int, size: int):
    group = dist.new_group(list(range(size)))
    if rank == 0:
        tensor = torch.tensor([rank], dtype=torch.float32)
    else:
        tensor = torch.empty(1)
    dist.broadcast(tensor, src=0, group=group)
    # all ranks will have tensor([0.]) from rank 0
    print(f"[{rank}] data = {tensor}")


def every_collective(rank: int, size: int):
    for fn in (do_reduce, do_all_reduce, do_scatter, do_gather, do_all_gather, do_broadcast):
        if rank == 0:
            print(f"-- {fn.__name__}")
        dist.barrier()  # rank 0's heading first
        fn(rank, size)
        dist.barrier()


def init_process(rank: int, size: int, fn, backend="simcluster"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 4
    simcluster.torch.spawn(init_process, args=(size, every_collective), nprocs=size)
