"""all_reduce with distinct data: every rank ends with the sum of all pairs.

Rank r holds ``[2r + 1, 2r + 2]``; ``dist.all_reduce(tensor, op=SUM)``
overwrites each array with ``[1+3+5+7, 2+4+6+8]``.

You will see the four pairs before, and ``[16 20]`` on every rank after.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print("before all_reduce", " Rank ", rank, " has data ", tensor)
    await dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    print("after all_reduce", " Rank ", rank, " has data ", tensor)


if __name__ == "__main__":
    sc.run(main, world_size=4)
