"""Flows that share a platform's links across hosting processes: shm, tcp and mpi give the memory run.

On a platform with sharing every hosting process keeps every flow (each
hears of the others' a lookahead before they join their links), so the
virtual times of a program are the same on every transport. Each program
below runs on the memory transport, on shm (2 processes, and one per rank)
and on tcp (3 processes, which split the nodes unevenly), under max-min
sharing and under SimGrid's LV08 model, and every rank's values and times
must be equal, bit for bit. Under ``mpiexec`` (``__main__`` below) they run
on the mpi transport; that test needs the real mpi4py and MPICH.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.platform import LV08, MAX_MIN, FatTree, Link, Platform

import mpi_jobs

HERE = Path(__file__).resolve()
WORLD = 8


def platform(model: str, sharing: bool = True) -> Platform:
    """4 nodes of 2 ranks, 2 NICs each, on a 2:1 fat tree: links that flows from both ends share."""
    tree = FatTree(hosts_per_leaf=4, spines=1, link=Link(1e-6, 1e9), oversubscription=2)
    return Platform(4, 2, Link(1e-7, 1e10), tree, nics_per_node=2, sharing=sharing,
                    sharing_model=LV08 if model == "LV08" else MAX_MIN)


# ---- the programs ----


async def collectives(comm: sc.Comm) -> Any:
    """All-reduces by the node-aware and NCCL algorithms, an all-to-all and a barrier."""
    seen: list[Any] = []
    x = np.arange(20_000, dtype=np.float64) * (comm.rank + 1)
    for algorithm in ("nccl_ring", "nccl_tree", "smp", "ring", None):
        seen += [float((await comm.all_reduce(x, algorithm=algorithm)).sum()), comm.now]
    parts = await comm.all_to_all([np.full(3_000, comm.rank) for _ in range(comm.size)])
    await comm.barrier()
    return seen, [int(p[0]) for p in parts], comm.now


async def crossing_traffic(comm: sc.Comm) -> Any:
    """Eager and rendezvous messages at staggered starts: an incast and two shifted rings."""
    if comm.rank % 3 == 0:
        await comm.sleep(1e-5 * comm.rank)
    requests = [comm.isend(np.ones(100_000 + 10 * comm.rank, np.uint8), dst=(comm.rank + k) % comm.size)
                for k in (1, 3)]
    received = [comm.irecv(src=(comm.rank - k) % comm.size) for k in (1, 3)]
    if comm.rank:
        requests.append(comm.isend(np.zeros(500 * comm.rank, np.uint8), dst=0))
    else:
        received += [comm.irecv(src=src) for src in range(1, comm.size)]
    sizes = [len(await req) for req in received]
    for req in requests:
        await req
    if comm.rank < 4:  # synchronous sends, small and large, between nodes
        await comm.ssend(np.ones(100 if comm.rank < 2 else 200_000, np.uint8), dst=comm.rank + 4)
    elif comm.rank < 8:
        sizes.append(len(await comm.recv(src=comm.rank - 4)))
    return sizes, comm.now


PROGRAMS = {"collectives": collectives, "crossing traffic": crossing_traffic}


def _run(name: str, model: str, transport: str, procs: int = 1, **keywords: Any) -> dict[str, Any]:
    hosted: dict[str, Any] = {} if transport == "memory" else {"transport": transport}
    if transport in ("shm", "tcp"):
        hosted["procs"] = procs
    result = sc.run(PROGRAMS[name], WORLD, latency=platform(model), **hosted, **keywords)
    return json.loads(json.dumps({"values": list(result), "times": result.times}))


@pytest.mark.parametrize("model", ["max-min", "LV08"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_shm_and_tcp_give_the_memory_transports_times(name: str, model: str) -> None:
    expected = _run(name, model, "memory")
    unshared = sc.run(PROGRAMS[name], WORLD, latency=platform(model, sharing=False))
    assert unshared.times != expected["times"]  # the flows did share
    assert _run(name, model, "shm", 2) == expected
    assert _run(name, model, "tcp", 3) == expected


def test_one_rank_per_process_and_another_seed_give_the_same_times() -> None:
    expected = _run("crossing traffic", "max-min", "memory")
    assert _run("crossing traffic", "max-min", "shm", WORLD, seed=11) == expected


def test_a_hosted_runs_trace_has_the_memory_runs_link_utilisation(tmp_path: Path) -> None:
    def counters(path: Path) -> list[Any]:
        return [(e["name"], e["ts"], e["args"]) for e in sc.trace.load(path)["traceEvents"] if e.get("ph") == "C"]
    sc.run(crossing_traffic, WORLD, latency=platform("max-min"), trace=str(tmp_path / "memory.json"))
    sc.run(crossing_traffic, WORLD, latency=platform("max-min"), trace=str(tmp_path / "tcp.json"),
           transport="tcp", procs=3)
    memory = counters(tmp_path / "memory.json")
    assert memory and sorted(counters(tmp_path / "tcp.json")) == sorted(memory)


def test_what_hosting_processes_cannot_share_is_refused_with_the_way_out() -> None:
    async def main(comm: sc.Comm) -> None:
        return None
    instant = Platform(2, 1, Link(0.0, 1e12), FatTree(2, 1, Link(1e-6, 1e9)))  # a link of latency 0
    with pytest.raises(sc.UsageError, match=r"transport='shm', a link of latency 0\).*needs every link's "
                                            r"latency > 0.*sharing=False"):
        sc.run(main, 2, latency=instant, transport="shm", procs=2)


# ---- the mpi transport, under mpiexec ----


@mpi_jobs.needs_mpiexec
def test_an_mpi_job_gives_the_memory_transports_times(tmp_path: Path) -> None:
    for view in mpi_jobs.run(HERE, tmp_path):
        for name in PROGRAMS:
            assert view[name] == _run(name, "LV08", "memory"), name


if __name__ == "__main__":
    mpi_jobs.write(Path(sys.argv[1]), {name: _run(name, "LV08", "mpi") for name in PROGRAMS})
