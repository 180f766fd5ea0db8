"""torch-style reduce: four ones are summed onto rank 0.

Every rank holds ``[1.]`` and calls ``dist.reduce(tensor, dst=0, op=SUM,
group=group)`` on a group of all four ranks. Only the destination's array
changes.

You will see 4.0 on rank 0 and 1.0 on the others. (torch's gloo backend
leaves partial sums such as 3.0 and 2.0 in the other ranks' arrays;
simcluster leaves them unchanged, so the result never depends on the
algorithm.)
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    group = await dist.new_group(list(range(size)))
    tensor = np.ones(1)
    await dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM, group=group)
    print(f"[{rank}] data = {tensor[0]}")


if __name__ == "__main__":
    sc.run(main, world_size=4)
