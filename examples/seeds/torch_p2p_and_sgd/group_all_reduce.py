"""all_reduce on a group: ranks 0 and 1 sum their ones.

Both ranks make the group ``[0, 1]`` with ``dist.new_group`` (a collective
call: everyone calls it, with the same list) and all_reduce ``[1.]`` on it.

You will see 2.0 on both ranks.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    group = await dist.new_group([0, 1])
    tensor = np.ones(1)
    await dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print("Rank ", rank, " has data ", tensor[0])


if __name__ == "__main__":
    sc.run(main, world_size=2)
