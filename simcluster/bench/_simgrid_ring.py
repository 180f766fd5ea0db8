"""The ring all_reduce of ``simcluster bench collectives``, written for SimGrid's S4U Python bindings.

Run as a script by a Python that has SimGrid (Debian's ``python3-simgrid``),
never imported by simcluster: ``python3 _simgrid_ring.py RANKS NBYTES ALPHA
BETA [NUMPY_PATH]``. Prints one JSON object: ``virtual`` (seconds at which the
last rank finished), ``wall`` (seconds creating the actors and running the
engine; loading the platform excluded), ``cpu`` (the process's user and system
seconds over the same span, every thread's), ``load`` (seconds loading the
platform) and ``value`` (rank 0's first item after the all_reduce).

The platform is the AlphaBeta model's: one host per rank, and one link of
latency ``ALPHA`` and bandwidth ``1 / BETA`` from each rank to its right-hand
neighbour, under SimGrid's CM02 network model without cross traffic, where a
message of ``n`` bytes on an idle link takes ``latency + n / bandwidth``.

Every actor runs simcluster's ``ring`` (``collectives/all_reduce.py``) on a
float64 array of ones of ``NBYTES`` bytes: ``numpy.array_split`` bounds,
``p - 1`` reduce-scatter steps that send the partial of one chunk right while
receiving the left neighbour's and adding it to the local chunk (numpy), then
``p - 1`` all_gather steps that pass the reduced chunks on. Each step puts a
copy of the chunk (what goes over simcluster's wire) asynchronously on the
right neighbour's mailbox, gets from its own, and waits for the put.
``NUMPY_PATH`` (appended to ``sys.path``) lends numpy to a Python without one.
"""

import importlib
import json
import os
import resource
import sys
import tempfile
from time import perf_counter


def platform_xml(ranks: int, alpha: float, beta: float) -> str:
    xml = ['<?xml version="1.0"?>', '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
           '<platform version="4.1">', '<zone id="world" routing="Full">']
    xml += [f'<host id="h{h}" speed="1Gf"/>' for h in range(ranks)]
    xml += [f'<link id="l{h}" bandwidth="{1 / beta!r}Bps" latency="{alpha!r}s"/>' for h in range(ranks)]
    xml += [f'<route src="h{h}" dst="h{(h + 1) % ranks}" symmetrical="NO"><link_ctn id="l{h}"/></route>'
            for h in range(ranks)]
    xml += ["</zone>", "</platform>"]
    return "\n".join(xml)


def main(ranks: int, nbytes: int, alpha: float, beta: float) -> dict[str, float]:
    import numpy as np

    simgrid = importlib.import_module("simgrid")  # only the Python running this script has it

    engine = simgrid.Engine(["simgrid_ring", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                             "--log=root.thres:critical"])
    start = perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ring.xml")
        with open(path, "w") as f:
            f.write(platform_xml(ranks, alpha, beta))
        engine.load_platform(path)
    load = perf_counter() - start
    n = nbytes // 8
    base, extra = divmod(n, ranks)
    bounds = [0]
    for j in range(ranks):
        bounds.append(bounds[-1] + base + (1 if j < extra else 0))
    done = [0.0] * ranks
    first = [0.0]

    def ring(r: int) -> None:
        p = ranks
        flat = np.ones(n)
        right = simgrid.Mailbox.by_name(f"to {(r + 1) % p}")
        mine = simgrid.Mailbox.by_name(f"to {r}")
        k = (r - 1) % p
        tail = flat[bounds[k]:bounds[k + 1]]
        for step in range(p - 1):  # reduce-scatter
            sent = right.put_async(tail.copy(), tail.nbytes)
            got = mine.get()
            sent.wait()
            k = (r - step - 2) % p
            tail = got + flat[bounds[k]:bounds[k + 1]]
        flat[bounds[r]:bounds[r + 1]] = tail
        for step in range(p - 1):  # all_gather
            k = (r - step) % p
            chunk = flat[bounds[k]:bounds[k + 1]]
            sent = right.put_async(chunk.copy(), chunk.nbytes)
            got = mine.get()
            sent.wait()
            k = (r - step - 1) % p
            flat[bounds[k]:bounds[k + 1]] = got
        done[r] = simgrid.Engine.clock
        if r == 0:
            first[0] = float(flat[0])

    start, cpu = perf_counter(), _cpu()
    for r in range(ranks):
        simgrid.Actor.create(f"rank {r}", simgrid.Host.by_name(f"h{r}"), ring, r)
    engine.run()
    wall, cpu = perf_counter() - start, _cpu() - cpu
    return {"virtual": max(done), "wall": wall, "cpu": cpu, "load": load, "value": first[0]}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # the whole process: every actor's thread
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    if len(sys.argv) > 5:
        sys.path.append(sys.argv[5])
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))))
