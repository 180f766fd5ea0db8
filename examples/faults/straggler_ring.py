"""A straggler's effect on a ring all_reduce: one slow rank slows every rank down.

A ring all_reduce moves each piece around the whole ring, so every rank waits
for the slowest link in it. Here rank 3 of 8 is four times as slow (its
messages take four times as long) for the whole run; the fault plan makes it
so, deterministically, without touching the program.
"""

import numpy as np

import simcluster as sc
from simcluster.faults import Slow

MODEL = sc.latency.AlphaBeta(2e-6, 1 / 10e9)  # 2 us and 10 GB/s per message


async def main(comm: sc.Comm) -> float:
    data = np.ones(1 << 20)  # 8 MiB per rank
    await comm.all_reduce(data, algorithm="ring")
    return comm.now


healthy = sc.run(main, 8, latency=MODEL)
straggler = sc.run(main, 8, latency=MODEL, faults=[Slow(3, 4.0)])
print(f"ring all_reduce of 8 MiB on 8 ranks: {healthy.elapsed * 1e3:.3f} ms")
print(f"with rank 3 four times as slow:       {straggler.elapsed * 1e3:.3f} ms "
      f"({straggler.elapsed / healthy.elapsed:.2f}x)")
print("every rank finishes late:", all(t > healthy.elapsed for t in straggler.times))
