"""reduce with distinct data: every rank's pair is summed onto rank 3.

Rank r holds ``[2r + 1, 2r + 2]``; ``dist.reduce(tensor, dst=3, op=SUM)``
writes the sum ``[1+3+5+7, 2+4+6+8] = [16 20]`` into rank 3's array.

You will see ``[16 20]`` on rank 3 and the other ranks' pairs unchanged.
(torch's gloo backend also leaves partial sums in the other ranks' arrays;
simcluster does not touch them.)
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print("before reduce", " Rank ", rank, " has data ", tensor)
    await dist.reduce(tensor, dst=3, op=dist.ReduceOp.SUM)
    print("after reduce", " Rank ", rank, " has data ", tensor)


if __name__ == "__main__":
    sc.run(main, world_size=4)
