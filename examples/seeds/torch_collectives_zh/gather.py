"""gather with distinct data: rank 0 collects every rank's pair.

Rank r holds ``[2r + 1, 2r + 2]``. Rank 0 passes four zero arrays as
``gather_list``; ``dist.gather(tensor, dst=0, gather_list=...)`` fills them
in rank order. Nobody's own array changes.

You will see every rank's pair unchanged, and on rank 0 the list
``[1 2], [3 4], [5 6], [7 8]``.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print("before gather", " Rank ", rank, " has data ", tensor)
    if rank == 0:
        gather_list = [np.zeros(2, dtype=np.int64) for _ in range(4)]
        await dist.gather(tensor, dst=0, gather_list=gather_list)
        print("after gather", " Rank ", rank, " has data ", tensor)
        print("gather_list:", gather_list)
    else:
        await dist.gather(tensor, dst=0)
        print("after gather", " Rank ", rank, " has data ", tensor)


if __name__ == "__main__":
    sc.run(main, world_size=4)
