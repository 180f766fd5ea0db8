"""Overlap computation with communication: isend/irecv, compute, then wait.

Each of 4 ranks in a ring sends 1,000,000 bytes (its "halo") to its right
neighbour, receives one from its left, and has 800 us of computation that
does not need the halo (the interior of its domain). The network costs
5 us + 1 byte/ns, so one transfer takes 5 + 1000 = 1005 us.

What you will see:

* blocking: ``sendrecv`` first, then compute. The rank sits idle while the
  bytes travel, then computes: 1005 + 800 = 1805 us.
* overlapped: post ``irecv`` and ``isend``, compute (``comm.sleep`` stands in
  for real work) while the network moves the data, then ``wait_all``. The
  time is max(1005, 800) = 1005 us: the computation is hidden behind the
  transfer.

The rule: start communication as early as you can, wait for it as late as
you can, and never touch a send buffer or read a receive buffer in between.

Run it with

    python examples/teaching/02_overlap.py
"""

import numpy as np

import simcluster as sc

LATENCY = sc.latency.AlphaBeta(alpha=5e-6, beta=1e-9)  # 5 us + 1 GB/s
COUNT = 125_000  # float64 values: 1,000,000 bytes
COMPUTE = 800e-6  # seconds of work that does not need the halo


async def blocking(comm: sc.Comm) -> float:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    halo = np.full(COUNT, float(comm.rank))
    got = await comm.sendrecv(halo, right, src=left)  # idle while the bytes travel
    await comm.sleep(COMPUTE)  # then compute the interior
    return float(got[0])


async def overlapped(comm: sc.Comm) -> float:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    halo = np.full(COUNT, float(comm.rank))
    rreq = comm.irecv(src=left)  # start the exchange...
    sreq = comm.isend(halo, right)
    await comm.sleep(COMPUTE)  # ...compute the interior while it runs...
    got, _ = await sc.wait_all([rreq, sreq])  # ...and wait only when the halo is needed
    return float(got[0])


main = overlapped


if __name__ == "__main__":
    slow = sc.run(blocking, world_size=4, latency=LATENCY)
    fast = sc.run(overlapped, world_size=4, latency=LATENCY)
    assert list(slow) == list(fast) == [3.0, 0.0, 1.0, 2.0]
    print(f"each rank got its left neighbour's halo: {list(fast)}")
    print(f"{'blocking   (sendrecv, then compute):':45} {slow.elapsed * 1e6:7.1f} us virtual")
    print(f"{'overlapped (isend/irecv, compute, wait_all):':45} {fast.elapsed * 1e6:7.1f} us virtual")
    saved = slow.elapsed - fast.elapsed
    print(f"saved {saved * 1e6:.1f} us ({saved / slow.elapsed:.0%}): the {COMPUTE * 1e6:.0f} us of "
          "computation ran while the message was in flight")
