"""A script written for torchrun, run unmodified on 4 virtual ranks by ``simcluster torchrun``.

Nothing in it knows about simcluster: it reads the environment torchrun
sets, calls ``dist.init_process_group("gloo")`` and uses torch.distributed.
Run it with

    simcluster torchrun --nproc-per-node 4 --latency alphabeta:1us,1GB/s examples/torch/08_torchrun_script.py

and every rank runs it as ``__main__`` in one process, with its own
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``; the gloo group runs on simcluster's
backend (no sockets) under a 1 us + 1 GB/s network. The same command with
``torchrun`` instead of ``simcluster torchrun`` runs it on real processes.

You will see each rank's environment, then the sum 1 + 2 + 3 + 4 = 10.0 on
every rank after all_reduce, then rank 0's list [0.0, 1.0, 2.0] on every rank
after broadcast. Lines come in virtual-time order, ties by rank; stderr has
one line saying that the gloo backend runs on simcluster.
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    print(f"rank {rank}: LOCAL_RANK={local_rank} WORLD_SIZE={world_size} "
          f"MASTER_ADDR={os.environ['MASTER_ADDR']} MASTER_PORT={os.environ['MASTER_PORT']}")

    dist.init_process_group("gloo")

    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    print(f"rank {rank}: all_reduce sum = {total.item()}")

    data = torch.arange(3, dtype=torch.float32) if rank == 0 else torch.zeros(3)
    dist.broadcast(data, src=0)
    print(f"rank {rank}: broadcast from rank 0 = {data.tolist()}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
