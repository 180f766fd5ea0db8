"""torch-style broadcast: rank 0's array is copied into everyone's.

Rank 0 holds ``[0.]``; the others hold an uninitialised one-element array of
the same dtype, which ``dist.broadcast(tensor, src=0, group=group)`` fills.

You will see ``[0.]`` on every rank.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    group = await dist.new_group(list(range(size)))
    if rank == 0:
        tensor = np.array([float(rank)])
    else:
        tensor = np.empty(1)
    await dist.broadcast(tensor, src=0, group=group)
    print(f"[{rank}] data = {tensor}")


if __name__ == "__main__":
    sc.run(main, world_size=4)
