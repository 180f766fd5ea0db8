"""The multi-process transports at least once in the default run: two processes, a ping-pong
and an all_reduce, equal to the memory transport (the full suite runs with ``-m slow``)."""

from __future__ import annotations

import numpy as np
import pytest

import simcluster as sc

LATENCY = sc.latency.AlphaBeta(1e-6, 1e-9)


async def ping_pong_then_all_reduce(comm: sc.Comm) -> object:
    peer = 1 - comm.rank
    if comm.rank == 0:
        await comm.send({"ping": [1, 2.5, "x"]}, dst=peer, tag=5)
        rmsg = await comm.recv(src=peer, tag=6)
    else:
        rmsg = await comm.recv(src=peer, tag=5)
        await comm.send(np.arange(10_000.0), dst=peer, tag=6)  # rendezvous: 80 kB
    x = np.arange(4.0) + comm.rank
    await comm.all_reduce(x)
    return (rmsg if isinstance(rmsg, dict) else float(rmsg.sum())), x.tolist()


@pytest.mark.parametrize("name", ["shm", "tcp"])
def test_two_processes_give_the_memory_transports_results_and_times(name: str) -> None:
    got = sc.run(ping_pong_then_all_reduce, world_size=2, transport=name, procs=2,
                 latency=LATENCY)
    ref = sc.run(ping_pong_then_all_reduce, world_size=2, latency=LATENCY)
    assert list(got) == list(ref) == [(49995000.0, [1.0, 3.0, 5.0, 7.0]),
                                      ({"ping": [1, 2.5, "x"]}, [1.0, 3.0, 5.0, 7.0])]
    assert got.times == ref.times
    assert got.elapsed == ref.elapsed > 0
    assert got.stats == ref.stats
    assert got.leaks == []
