"""scatter with distinct data: rank 0 hands ``[i i]`` to rank i.

Rank r starts with ``[2r + 1, 2r + 2]``. Rank 0 alone supplies the
``scatter_list`` ``[[0 0], [1 1], [2 2], [3 3]]``; ``dist.scatter`` writes
item r into rank r's array.

You will see the starting pairs and the list, then rank r holding ``[r r]``.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print("before scatter", " Rank ", rank, " has data ", tensor)
    if rank == 0:
        scatter_list = [np.full(2, i, dtype=np.int64) for i in range(4)]
        print("scatter list:", scatter_list)
        await dist.scatter(tensor, src=0, scatter_list=scatter_list)
    else:
        await dist.scatter(tensor, src=0)
    print("after scatter", " Rank ", rank, " has data ", tensor)


if __name__ == "__main__":
    sc.run(main, world_size=4)
