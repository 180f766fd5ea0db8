"""ignite-style all_reduce: three ranks add their arrays together.

Rank r starts with ``[1 + 2r, 2 + 2r]``. ``dist.all_reduce(tensor, op="SUM")``
(ignite names ops by string) replaces every rank's array with the element-wise
sum, in place.

You will see the three starting values, then ``[ 9 12]`` on every rank.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    print(f"Rank {rank}, Initial value: {tensor}")
    await dist.all_reduce(tensor, op="SUM")
    print(f"Rank {rank}, After performing all_reduce: {tensor}")


if __name__ == "__main__":
    sc.run(main, world_size=3)
