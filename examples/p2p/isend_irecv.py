"""Nonblocking point-to-point: isend and irecv return a Request at once.

Rank 0 starts sending ``[1.]`` with ``dist.isend``; rank 1 starts receiving
into its ``[0.]`` with ``dist.irecv``. Each prints that it has started, then
waits for its request; only after the wait may rank 0 change the buffer it
sent, or rank 1 read the one it receives into.

You will see both ranks holding 0.0 before, the two "started" lines, and then
both ranks holding 1.0.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc
from simcluster import dist


async def main(comm: sc.Comm) -> None:
    rank = dist.get_rank()
    tensor = np.zeros(1)
    print(f"Rank {rank} before: data {tensor[0]}")
    if rank == 0:
        tensor += 1
        req = dist.isend(tensor, dst=1)
        print("Rank 0 started sending")
    else:
        req = dist.irecv(tensor, src=0)
        print("Rank 1 started receiving")
    await req.wait()  # until here the buffer belongs to the transfer
    print("Rank ", rank, " has data ", tensor[0])


if __name__ == "__main__":
    sc.run(main, world_size=2)
