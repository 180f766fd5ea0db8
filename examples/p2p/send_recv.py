"""Blocking point-to-point: rank 0 sends a one-element array to rank 1.

Both ranks start with ``[0.]``. Rank 0 adds one and sends it with
``dist.send``; rank 1 waits in ``dist.recv``, which fills its array in place.

You will see both ranks holding 0.0 before the transfer and 1.0 after it.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()  # the same as comm.rank: dist finds the running rank itself
    tensor = np.zeros(1)
    print(f"Rank {rank} before: data {tensor[0]}")
    if rank == 0:
        tensor += 1
        await dist.send(tensor, dst=1)
    else:
        await dist.recv(tensor, src=0)  # fills tensor, returns the sender's rank
    print("Rank ", rank, " has data ", tensor[0])


if __name__ == "__main__":
    sc.run(main, world_size=2)
