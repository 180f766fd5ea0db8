"""torch-style gather: rank 0 collects one array from every rank.

Rank r holds ``[r.]``. Rank 0 passes a list of four empty arrays as
``gather_list`` and ``dist.gather`` fills them in rank order; the others pass
``[]``.

You will see only rank 0 print, with the arrays 0., 1., 2. and 3.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    group = await dist.new_group(list(range(size)))
    tensor = np.array([float(rank)])
    if rank == 0:
        tensor_list = [np.empty(1) for _ in range(size)]
        await dist.gather(tensor, gather_list=tensor_list, dst=0, group=group)
        print(f"[{rank}] data = {tensor_list}")
    else:
        await dist.gather(tensor, gather_list=[], dst=0, group=group)


if __name__ == "__main__":
    sc.run(main, world_size=4)
