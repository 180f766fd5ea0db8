"""Three ways to fix the head-to-head deadlock of 01_head_to_head_broken.py.

Partners 0 <-> 1 and 2 <-> 3 swap 800,000 bytes each, more than eager_limit,
so a plain ``send`` waits until the partner posts its receive (rendezvous).
What you will see: each fix finishes, and its virtual time under a 1 us +
10 GB/s network (one transfer costs 1 + 80 = 81 us):

1. order by rank parity: even ranks send then receive, odd ranks receive
   then send. There is no cycle any more, but the two transfers happen one
   after the other: 2 x 81 us.
2. ``sendrecv``: send and receive as one call; the library posts the receive
   before it sends, so both transfers run at the same time: 81 us.
3. ``isend`` + ``irecv`` + ``sc.wait_all``: start both, then wait for both.
   Same idea, spelled out; also 81 us. This form lets you do other work
   before the wait (see 02_overlap.py).

Run it with

    python examples/teaching/01_head_to_head_fixed.py
"""

import numpy as np

import simcluster as sc

LATENCY = sc.latency.AlphaBeta(alpha=1e-6, beta=1e-10)  # 1 us + 10 GB/s
COUNT = 100_000  # float64 values: 800,000 bytes


async def by_parity(comm: sc.Comm, data: np.ndarray, partner: int) -> np.ndarray:
    if comm.rank % 2 == 0:
        await comm.send(data, partner)
        return await comm.recv(src=partner)
    got = await comm.recv(src=partner)
    await comm.send(data, partner)
    return got


async def by_sendrecv(comm: sc.Comm, data: np.ndarray, partner: int) -> np.ndarray:
    return await comm.sendrecv(data, partner, src=partner)


async def by_nonblocking(comm: sc.Comm, data: np.ndarray, partner: int) -> np.ndarray:
    rreq = comm.irecv(src=partner)
    sreq = comm.isend(data, partner)
    got, _ = await sc.wait_all([rreq, sreq])
    return got


FIXES = {
    "parity": (by_parity, "order by rank parity (even sends first, odd receives first)"),
    "sendrecv": (by_sendrecv, "sendrecv (send and receive in one call)"),
    "nonblocking": (by_nonblocking, "isend + irecv, then wait_all"),
}


async def main(comm: sc.Comm, fix: str = "sendrecv") -> float:
    partner = comm.rank ^ 1
    data = np.full(COUNT, float(comm.rank))
    got = await FIXES[fix][0](comm, data, partner)
    return float(got[0])


if __name__ == "__main__":
    for number, (fix, (_, title)) in enumerate(FIXES.items(), start=1):
        result = sc.run(main, world_size=4, kwargs={"fix": fix}, latency=LATENCY)
        print(f"{number}) {title}")
        print(f"   got {list(result)}, finished at virtual time {result.elapsed * 1e6:.1f} us")
    print()
    print("parity takes twice as long: rank 1 can only send after it has received.")
    print("sendrecv and isend/irecv move both messages at once on the full-duplex links.")
