"""ignite-style broadcast: rank 0's string replaces everyone's.

Each rank writes its own greeting. ``dist.broadcast(message, src=0)``
returns rank 0's greeting on every rank (for strings and numbers the result is
a new value, so assign it).

You will see three different greetings, then "hello from rank 0" everywhere.
"""

from __future__ import annotations

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    message = f"hello from rank {rank}"
    print(f"Rank {rank}, Initial value: {message}")
    message = await dist.broadcast(message, src=0)
    print(f"Rank {rank}, After performing broadcast: {message}")


if __name__ == "__main__":
    sc.run(main, world_size=3)
