"""broadcast with distinct data: rank 0's pair overwrites every rank's.

Rank r starts with ``[2r + 1, 2r + 2]`` (int64). ``dist.broadcast(tensor,
src=0)`` copies rank 0's array into every other rank's, in place.

You will see the four different pairs before, and ``[1 2]`` everywhere after.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print("before broadcast", " Rank ", rank, " has data ", tensor)
    await dist.broadcast(tensor, src=0)
    print("after broadcast", " Rank ", rank, " has data ", tensor)


if __name__ == "__main__":
    sc.run(main, world_size=4)
