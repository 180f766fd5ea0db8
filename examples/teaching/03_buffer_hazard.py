"""The buffer hazard: changing an array before its isend has completed.

``isend`` returns at once, but until its request completes the library may
still be reading your array (a real MPI may send straight from it, with no
copy). Writing to the array in between is a bug whose effect depends on
timing and message size: sometimes the old values arrive, sometimes the new
ones, sometimes a mix. Such a bug can hide for months.

What you will see:

1. the broken version: rank 0 starts ``isend(data)``, then reuses ``data``
   for the next step before waiting. Under ``checks="strict"`` (the default)
   simcluster remembers a checksum of the array when the isend starts and
   checks it again at ``wait``; it raises ``sc.BufferHazardError`` naming the
   rank, the request and the line that posted it.
2. the correct version: wait for the request first (or send a copy), then
   reuse the array. It runs cleanly.

Run it with

    python examples/teaching/03_buffer_hazard.py
"""

import numpy as np

import simcluster as sc


async def broken(comm: sc.Comm) -> list[float] | None:
    data = np.zeros(4)
    if comm.rank == 0:
        data[:] = [1, 2, 3, 4]
        req = comm.isend(data, 1)
        data[:] = 0  # BUG: reusing the buffer while the send may still read it
        await req  # the strict check notices here
        return data.tolist()
    if comm.rank == 1:
        return (await comm.recv(src=0)).tolist()
    return None  # any other rank has nothing to do


async def fixed(comm: sc.Comm) -> list[float] | None:
    data = np.zeros(4)
    if comm.rank == 0:
        data[:] = [1, 2, 3, 4]
        req = comm.isend(data, 1)
        await req  # wait first: now the library is done with data
        data[:] = 0  # safe
        return data.tolist()
    if comm.rank == 1:
        return (await comm.recv(src=0)).tolist()
    return None  # any other rank has nothing to do


main = fixed


if __name__ == "__main__":
    print("1) broken: data[:] = 0 right after isend(data), before waiting")
    try:
        sc.run(broken, world_size=2)
    except sc.RankError as exc:
        error = exc.__cause__
        print(f"   {type(error).__name__}: {error}")
        print("   the array changed between isend and wait, so what rank 1 receives")
        print("   would depend on when the library happened to read it")
    print()
    print("2) fixed: await the isend's request, then reuse the array")
    result = sc.run(fixed, world_size=2)
    print(f"   rank 0 reused its buffer: {result[0]}")
    print(f"   rank 1 received:          {result[1]}")
