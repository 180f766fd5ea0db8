"""torch-style all_reduce: four ones are summed on every rank.

Every rank holds ``[1.]`` and calls ``dist.all_reduce(tensor, op=SUM,
group=group)`` on a group of all four ranks; each array is overwritten with
the sum.

You will see 4.0 on every rank.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    group = await dist.new_group(list(range(size)))
    tensor = np.ones(1)
    await dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print(f"[{rank}] data = {tensor[0]}")


if __name__ == "__main__":
    sc.run(main, world_size=4)
