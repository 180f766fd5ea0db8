"""torch-style all_gather: every rank collects one array from every rank.

Rank r holds ``[r.]``. Each rank passes a list of four empty arrays and
``dist.all_gather(tensor_list, tensor)`` fills it in rank order.

You will see every rank holding the arrays 0., 1., 2. and 3.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    group = await dist.new_group(list(range(size)))
    tensor = np.array([float(rank)])
    tensor_list = [np.empty(1) for _ in range(size)]
    await dist.all_gather(tensor_list, tensor, group=group)
    print(f"[{rank}] data = {tensor_list}")


if __name__ == "__main__":
    sc.run(main, world_size=4)
