"""Programs that do not race on ANY_SOURCE: memory, shm and tcp must agree on them exactly.

Their values never depend on timing, and their times depend only on the
program, the model and the world size (ports book simultaneous messages in a
canonical order). Module-level functions: hosting processes import
them by name.
"""

from __future__ import annotations

import numpy as np

import simcluster as sc


async def ping_pong(comm: sc.Comm) -> object:
    """Eager and rendezvous sizes, blocking and synchronous sends, virtual sleeps."""
    if comm.size < 2:
        return None
    log = []
    if comm.rank in (0, 1):
        peer = 1 - comm.rank
        for n in (1, 100, 9000, 70000):
            smsg = np.arange(n, dtype=np.float64) + comm.rank
            if comm.rank == 0:
                await comm.send(smsg, dst=peer, tag=n % 7)
                rmsg = await comm.recv(src=peer, tag=n % 7)
            else:
                rmsg = await comm.recv(src=peer, tag=n % 7)
                await comm.sleep(1e-6)
                await comm.ssend(rmsg * 2, dst=peer, tag=n % 7)
            log.append((n, float(rmsg.sum())))
    return log


async def collectives(comm: sc.Comm) -> object:
    """Every collective family once, arrays and objects, with a sub-communicator."""
    out: dict[str, object] = {}
    x = np.arange(1000, dtype=np.float64) * (comm.rank + 1)
    await comm.all_reduce(x)
    out["all_reduce"] = float(x.sum())
    big = np.full(20000, float(comm.rank))
    await comm.all_reduce(big, algorithm="ring")
    out["ring"] = float(big[0])
    out["broadcast"] = await comm.broadcast({"root": comm.rank} if comm.rank == 0 else None, src=0)
    out["all_gather"] = await comm.all_gather(comm.rank * 10)
    out["all_to_all"] = await comm.all_to_all([comm.rank * 100 + i for i in range(comm.size)])
    out["scan"] = await comm.scan(comm.rank + 1)
    out["gather"] = await comm.gather(str(comm.rank), dst=comm.size - 1)
    out["reduce"] = await comm.reduce(comm.rank, dst=0)
    await comm.barrier()
    half = await comm.split(comm.rank % 2, key=-comm.rank)
    assert half is not None
    out["split"] = (half.rank, half.size, await half.all_reduce(comm.rank))
    return out


async def nonblocking(comm: sc.Comm) -> object:
    """isend/irecv to every other rank with per-pair tags, then wait_all and a nonblocking collective."""
    reqs = []
    for other in range(comm.size):
        if other != comm.rank:
            reqs.append(comm.irecv(src=other, tag=other))
    sends = [comm.isend(np.full(50 * (other + 1), comm.rank), dst=other, tag=comm.rank)
             for other in range(comm.size) if other != comm.rank]
    got = await sc.wait_all(reqs)
    await sc.wait_all(sends)
    req = comm.iall_reduce(np.ones(3) * comm.rank)
    await comm.sleep(2e-6 * comm.rank)
    total = await req
    return [float(g.sum()) for g in got], total.tolist()


async def pipeline(comm: sc.Comm, rounds: int = 5) -> object:
    """A chain 0 -> 1 -> ... -> p-1 of growing messages, with compute in between."""
    value = np.zeros(10)
    for r in range(rounds):
        if comm.rank > 0:
            value = await comm.recv(src=comm.rank - 1, tag=r)
        await comm.sleep(1e-6 * (r + 1))
        value = np.concatenate([value, np.full(4000 * r + 1, comm.rank)])
        if comm.rank < comm.size - 1:
            await comm.send(value, dst=comm.rank + 1, tag=r)
    return float(value.sum())


async def effects(comm: sc.Comm) -> object:
    """Every way one rank reaches another, at staggered times, with each rank's right neighbour.

    Eager and zero-byte messages, a large one whose receive is posted first
    and one whose send is, a synchronous send of each size, a probe that polls
    with virtual sleeps, a blocking probe, a wildcard receive only one sender
    can match, and collectives.
    """
    size, rank = comm.size, comm.rank
    right, left = (rank + 1) % size, (rank - 1) % size
    log: list[object] = []
    if size < 2:
        return log
    await comm.sleep(3e-7 * rank)  # ranks act at different times: windows have work to do
    big = np.full(20_000, float(rank))  # 160 kB: above the eager limit
    early = comm.irecv(src=left, tag=1)  # posted before the large message is sent
    await comm.send(rank, dst=right, tag=0)
    await comm.send(None, dst=right, tag=3)  # zero bytes
    log.append(await comm.recv(src=left, tag=0))
    log.append(await comm.recv(src=left, tag=3))
    await comm.sleep(1e-6)
    await comm.send(big, dst=right, tag=1)
    log.append(float((await early).sum()))
    late = comm.isend(big * 2, dst=right, tag=2)  # sent before its receive is posted
    await comm.sleep(2e-6)
    log.append(float((await comm.recv(src=left, tag=2)).sum()))
    await late
    sync = comm.issend(rank * 10, dst=right, tag=4)  # completes when matched
    await comm.sleep(5e-7)
    log.append(await comm.recv(src=left, tag=4))
    await sync
    log.append(comm.now)
    req = comm.issend(big, dst=right, tag=5)
    await comm.sleep(1.3e-7 * (rank + 1))  # polls never fall on the instant the message is
    while (status := comm.iprobe(src=left, tag=5)) is None:  # sent (under Zero, a race)
        await comm.sleep(4.1e-7)
    log.append((status.source, status.nbytes, comm.now))
    log.append(float((await comm.recv(src=left, tag=5)).sum()))
    await req
    await comm.send(rank + 100, dst=right, tag=6)
    status = await comm.probe(src=left, tag=6)
    log.append((status.source, comm.now))
    log.append(await comm.recv(src=sc.ANY_SOURCE, tag=6))  # only the left neighbour sends tag 6
    log.append(await comm.all_reduce(rank))
    log.append(float((await comm.broadcast(big if rank == 0 else np.empty_like(big), src=0)).sum()))
    await comm.barrier()
    return log, comm.now


PROGRAMS = [ping_pong, collectives, nonblocking, pipeline, effects]
