"""This example deadlocks on purpose: both ranks receive first, as one might write a swap.

Each rank calls ``dist.recv`` from the other before sending. On gloo the two
processes would hang; simcluster sees that every rank waits and no message is
in flight, and stops the run with a ``DeadlockError`` naming each rank's
call and the line of this file where it waits.

You will see the deadlock report; the fix is to have one rank send first
(or to use ``dist.isend`` before ``dist.recv``).
"""

import torch
import torch.distributed as dist

import simcluster as sc
import simcluster.torch


def swap(rank, size):
    dist.init_process_group("simcluster")
    mine = torch.tensor([float(rank)])
    theirs = torch.zeros(1)
    dist.recv(theirs, src=1 - rank)  # both ranks wait here: nobody sends
    dist.send(mine, dst=1 - rank)


if __name__ == "__main__":
    try:
        simcluster.torch.spawn(swap, args=(2,), nprocs=2)
    except sc.DeadlockError as exc:
        print(exc)
