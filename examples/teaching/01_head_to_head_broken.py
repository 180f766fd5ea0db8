"""This example deadlocks on purpose: two ranks both send first, then receive.

Ranks 0 and 1 (and 2 and 3) are partners. Each calls ``send`` to its partner,
then ``recv`` from it. What you will see:

1. With a small message (8,000 bytes) it works. A standard ``send`` of a
   message up to ``eager_limit`` bytes (64 KiB by default) is *eager*: the
   data is copied into the network at once and ``send`` returns without
   waiting for the partner, so both ranks reach their ``recv``.
2. With a large message (800,000 bytes) both ranks stop inside ``send``. A
   large send uses *rendezvous*: it waits until the partner posts a matching
   receive, to avoid copying a big buffer. But the partner is stuck in its own
   ``send`` and never gets to ``recv``. Nobody can move: a deadlock. A real MPI
   program hangs forever here; simcluster notices that every rank is blocked
   with nothing in flight and raises ``sc.DeadlockError``, which names each
   blocked call, its source line and the wait-for cycle.

The fixes are in 01_head_to_head_fixed.py. Run it with

    python examples/teaching/01_head_to_head_broken.py
"""

import numpy as np

import simcluster as sc

LATENCY = sc.latency.AlphaBeta(alpha=1e-6, beta=1e-10)  # 1 us + 10 GB/s


async def main(comm: sc.Comm, count: int = 100_000) -> float:
    partner = comm.rank ^ 1  # 0 <-> 1, 2 <-> 3
    data = np.full(count, float(comm.rank))
    await comm.send(data, partner)  # both ranks send first...
    got = await comm.recv(src=partner)  # ...and receive second
    return float(got[0])


if __name__ == "__main__":
    small = sc.run(main, world_size=4, kwargs={"count": 1_000}, latency=LATENCY)
    print("1) small message: 1,000 float64 = 8,000 bytes, below eager_limit (65,536 bytes)")
    print(f"   every rank got its partner's number: {list(small)}")
    print(f"   finished at virtual time {small.elapsed * 1e6:.1f} us: both sends went out eagerly,")
    print("   so both ranks reached recv()")
    print()
    print("2) large message: 100,000 float64 = 800,000 bytes, above eager_limit")
    try:
        sc.run(main, world_size=4, latency=LATENCY)
    except sc.DeadlockError as exc:
        print("   sc.DeadlockError:")
        for line in str(exc).splitlines():
            print("   | " + line)
        print(f"   the wait-for cycle {exc.cycle}: rank 0 waits for rank 1, which waits for rank 0")
        print("   each send waits for a recv that its partner will only post after its own send")
