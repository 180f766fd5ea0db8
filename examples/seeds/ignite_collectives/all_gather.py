"""ignite-style all_gather: every rank collects a number from every rank.

Rank r holds ``2.0 * r``. ``dist.all_gather(num)`` returns the list of all
ranks' numbers, in rank order, on every rank.

You will see each rank's own number, then ``[0.0, 2.0, 4.0]`` on every rank.
"""

from __future__ import annotations

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    num = 2.0 * rank
    print(f"Rank {rank}, Initial value: {num}")
    all_nums = await dist.all_gather(num)
    print(f"Rank {rank}, After performing all_gather: {all_nums}")


if __name__ == "__main__":
    sc.run(main, world_size=3)
