"""torch-style scatter: rank 0 deals one array to each rank.

Rank 0 builds ``[[1.], [2.], [3.], [4.]]`` and scatters it; every rank
(rank 0 included) receives its item into a one-element output array. The
other ranks pass an empty ``scatter_list``: only the source's list is read.

You will see rank r holding r + 1.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    group = await dist.new_group(list(range(size)))
    tensor = np.empty(1)  # the output: overwritten by the scatter
    if rank == 0:
        tensor_list = [np.array([i + 1.0]) for i in range(size)]
        await dist.scatter(tensor, scatter_list=tensor_list, src=0, group=group)
    else:
        await dist.scatter(tensor, scatter_list=[], src=0, group=group)
    print(f"[{rank}] data = {tensor[0]}")


if __name__ == "__main__":
    sc.run(main, world_size=4)
