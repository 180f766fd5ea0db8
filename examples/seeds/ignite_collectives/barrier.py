"""ignite-style barrier: only rank 0 downloads, the others wait and reuse its copy.

Rank 0 "downloads" a dataset (two virtual seconds) into a shared cache while
ranks 1 and 2 wait in ``dist.barrier()``. Rank 0 enters the barrier only once
the file is in place, so when the others come out of it they read the cache
instead of downloading again. Every rank calls barrier exactly once, at
different places in the code.

You will see rank 0 download at t=0, then every rank holding the dataset at
t=2, and a single download, by rank 0.
"""

from __future__ import annotations

import simcluster as sc
from simcluster import dist

CACHE: dict[str, list[int]] = {}
"""Stands in for the shared disk: every rank of this run lives in one process."""

DOWNLOADED_BY: list[int] = []

DOWNLOAD_SECONDS = 2.0


async def get_dataset(comm: sc.Comm) -> list[int]:
    rank = dist.get_rank()
    if rank > 0:
        await dist.barrier()  # wait until rank 0 has the file
    if "train" not in CACHE:
        print(f"Rank {rank}, t={comm.now:.1f}s: downloading the dataset")
        DOWNLOADED_BY.append(rank)
        await comm.sleep(DOWNLOAD_SECONDS)
        CACHE["train"] = list(range(10))
    dataset = CACHE["train"]
    if rank == 0:
        await dist.barrier()  # release the others
    return dataset


async def main(comm: sc.Comm) -> None:
    dataset = await get_dataset(comm)
    print(f"Rank {dist.get_rank()}, t={comm.now:.1f}s: have {len(dataset)} samples")


if __name__ == "__main__":
    sc.run(main, world_size=3)
    print(f"downloaded by ranks: {DOWNLOADED_BY}")
