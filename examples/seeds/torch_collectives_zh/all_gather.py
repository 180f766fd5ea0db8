"""all_gather with distinct data: every rank collects every rank's pair.

Rank r holds ``[2r + 1, 2r + 2]`` and a list of four zero arrays, which
``dist.all_gather(gather_list, tensor)`` fills in rank order. The input
array itself does not change.

You will see each rank's pair unchanged, and every rank holding the list
``[1 2], [3 4], [5 6], [7 8]``.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print("before all_gather", " Rank ", rank, " has data ", tensor)
    gather_list = [np.zeros(2, dtype=np.int64) for _ in range(4)]
    await dist.all_gather(gather_list, tensor)
    print("after all_gather", " Rank ", rank, " has data ", tensor)
    print("after all_gather", " Rank ", rank, " has gather list ", gather_list)


if __name__ == "__main__":
    sc.run(main, world_size=4)
