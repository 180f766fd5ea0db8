"""``simcluster bench collectives``: an OSU-style table for the memory transport.

For all_reduce, broadcast and all_gather at 8 and 64 ranks and a range of
message sizes: mean, min and max wall microseconds per call (over repeated
runs of ``ITERS`` calls each) and the virtual microseconds per call under a
stated AlphaBeta model (calls run back to back, as in OSU, so pipelined
collectives overlap). The cost of starting the ranks is measured with zero
calls in the same repetition and subtracted. Then, for all_reduce of 16 MiB of float32 on 8 ranks,
every algorithm's wall time next to the memory-bandwidth floor measured in
the same run: numpy reading the 8 inputs (one sum) and writing the 8 outputs.
Last, in each build (compiled and interpreted): a 4-rank all_reduce of a
float and of a one-element array, per call, without checks and under the
default strict ones, and a ring all_reduce of 1 MiB on 1,024 ranks, next to the
same ring run by SimGrid's Python bindings (``_simgrid_ring``) on the
AlphaBeta model's platform, with both virtual times (skipped, with the reason,
where no Python has SimGrid).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
from pathlib import Path
from time import perf_counter, process_time  # bound now: a rank's time.* reads virtual time
from typing import Any

import numpy as np

from .. import latency as _latency
from .. import runner
from ..collectives import declared
from ..comm import Comm
from . import BUILDS, in_build, median_time, table

MODEL = _latency.AlphaBeta(alpha=1e-6, beta=1e-10)  # 1 us, 10 GB/s
SIZES = (8, 1024, 65536, 1 << 20)
WORLDS = (8, 64)
ITERS = 10
REPEATS = 3
QUICK = {"sizes": (8, 65536), "worlds": (8,), "iters": 3, "repeats": 2, "floor_mib": 4,
         "small_calls": 200, "ring_ranks": 64}
SMALL_CALLS = 2000
"""all_reduce calls per run of the 4-rank figures."""
RING_RANKS = 1024
RING_BYTES = 1 << 20


async def _loop(comm: Comm, name: str, nbytes: int, iters: int, algorithm: str | None) -> None:
    x = np.ones(max(nbytes // 4, 1), dtype=np.float32)
    for _ in range(iters):
        if name == "all_reduce":
            await comm.all_reduce(x, algorithm=algorithm)
        elif name == "broadcast":
            await comm.broadcast(x, src=0, algorithm=algorithm)
        else:
            await comm.all_gather(x, algorithm=algorithm)


def _per_call(name: str, world: int, nbytes: int, iters: int, repeats: int,
              algorithm: str | None = None) -> tuple[list[float], float]:
    walls = []
    virtual = 0.0
    for _ in range(repeats):
        start = perf_counter()
        runner.run(_loop, world, args=(name, nbytes, 0, algorithm), checks="off")
        setup = perf_counter() - start  # starting the ranks, subtracted below
        start = perf_counter()
        result = runner.run(_loop, world, args=(name, nbytes, iters, algorithm), latency=MODEL,
                            checks="off")
        walls.append(max(perf_counter() - start - setup, 0.0) / iters)
        virtual = result.elapsed / iters
    return walls, virtual


def _floor(arrays: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    total = np.empty_like(arrays[0])

    def once() -> None:
        np.add(arrays[0], arrays[1], out=total)
        for a in arrays[2:]:
            np.add(total, a, out=total)
        for out in outputs:
            np.copyto(out, total)
    return median_time(once, 5)


async def _small(comm: Comm, array: bool, calls: int) -> None:
    x = np.zeros(1) if array else 0.0
    for _ in range(calls):
        await comm.all_reduce(x)


def small_all_reduce(calls: int, checks: str) -> dict[str, float]:
    """Median microseconds per call of a 4-rank all_reduce of a float and of a one-element array."""
    out = {}
    for kind, array in (("float", False), ("array", True)):
        walls = [runner.run(_small, 4, args=(array, calls), checks=checks).wall / calls for _ in range(5)]
        out[kind] = statistics.median(walls) * 1e6
    return out


async def _ring(comm: Comm) -> float:
    x = np.ones(RING_BYTES // 8)
    await comm.all_reduce(x, algorithm="ring")
    return float(x[0])


def ring_all_reduce(ranks: int) -> float:
    """Wall seconds of a message-level ring all_reduce of 1 MiB on ``ranks`` ranks (AlphaBeta)."""
    return ring_times(ranks)[0]


def ring_times(ranks: int) -> list[float]:
    """Wall, virtual and CPU seconds of the ring all_reduce of :func:`ring_all_reduce`."""
    cpu = process_time()
    result = runner.run(_ring, ranks, latency=MODEL, checks="off")
    cpu = process_time() - cpu
    assert result[0] == ranks  # every rank's ones, summed
    return [result.wall, result.elapsed, cpu]


def simgrid_python() -> str | None:
    """A Python with SimGrid's bindings: ``SIMGRID_PYTHON``, else ``/usr/bin/python3``, else ``python3``."""
    for candidate in (os.environ.get("SIMGRID_PYTHON"), "/usr/bin/python3", shutil.which("python3")):
        if candidate and Path(candidate).is_file():
            probe = subprocess.run([candidate, "-c", "import simgrid"], capture_output=True, check=False)
            if probe.returncode == 0:
                return candidate
    return None


def simgrid_ring(python: str, ranks: int) -> dict[str, float]:
    """Run the ring of :func:`ring_all_reduce` under SimGrid (``_simgrid_ring``, in ``python``).

    Returns its ``wall`` and ``cpu`` seconds (actors created and run; platform
    loading excluded), ``virtual`` end time and rank 0's ``value``.
    """
    numpy_path = str(Path(np.__file__).resolve().parent.parent)  # for a Python without numpy
    script = Path(__file__).with_name("_simgrid_ring.py")
    proc = subprocess.run([python, str(script), str(ranks), str(RING_BYTES), repr(MODEL.alpha),
                           repr(MODEL.beta), numpy_path], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"SimGrid's ring failed: {proc.stderr.strip()[-500:]}")
    figures: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["value"] == ranks
    return figures


def main(sizes: tuple[int, ...] = SIZES, worlds: tuple[int, ...] = WORLDS, iters: int = ITERS,
         repeats: int = REPEATS, floor_mib: int = 16, small_calls: int = SMALL_CALLS,
         ring_ranks: int = RING_RANKS) -> dict[str, Any]:
    """Measure and print the OSU-style table, the 16 MiB all_reduce floor ratio and the compiled-build targets."""
    # first, in fresh child processes, before this one holds the big runs' memory
    targets: dict[str, dict[str, Any]] = {}
    target_rows = []
    for build in BUILDS:
        off = in_build(build, __name__, "small_all_reduce", small_calls, "off")
        strict = in_build(build, __name__, "small_all_reduce", small_calls, "strict")
        ring, ring_virtual, ring_cpu = in_build(build, __name__, "ring_times", ring_ranks)
        targets[build] = {"off": off, "strict": strict, "ring": ring, "ring_virtual": ring_virtual,
                          "ring_cpu": ring_cpu}
        target_rows += [
            [build, "4-rank all_reduce of a float, per call", f"{off['float']:.1f} us",
             f"{strict['float']:.1f} us", "under 50 us"],
            [build, "4-rank all_reduce of a one-element array, per call", f"{off['array']:.1f} us",
             f"{strict['array']:.1f} us", "under 50 us"],
            [build, f"ring all_reduce of 1 MiB on {ring_ranks:,} ranks", f"{ring:.2f} s", "",
             "under 15 s" if ring_ranks == RING_RANKS else ""]]
    python = simgrid_python()
    simgrid = simgrid_ring(python, ring_ranks) if python is not None else None  # right after ours
    rows = []
    for name in ("all_reduce", "broadcast", "all_gather"):
        for world in worlds:
            for nbytes in sizes:
                walls, virtual = _per_call(name, world, nbytes, iters, repeats)
                rows.append([name, str(world), str(nbytes), f"{statistics.mean(walls) * 1e6:,.1f}",
                             f"{min(walls) * 1e6:,.1f}", f"{max(walls) * 1e6:,.1f}",
                             f"{virtual * 1e6:,.3f}"])
    print(f"simcluster bench collectives (memory transport, default algorithms, {iters} calls per "
          f"run, {repeats} runs; virtual time under {MODEL!r})")
    print(table(rows, ["collective", "ranks", "bytes", "mean us", "min us", "max us", "virtual us"]))

    nbytes = floor_mib << 20
    count = nbytes // 4
    inputs = [np.full(count, r, dtype=np.float32) for r in range(8)]
    outputs = [np.empty(count, dtype=np.float32) for _ in range(8)]
    floor = _floor(inputs, outputs)
    best: dict[str, float] = {}
    for algo in sorted(a for a, record in declared("all_reduce").items() if not record.shaped):
        # (the node-aware ones need a platform; here they would time another algorithm)
        walls, _ = _per_call("all_reduce", 8, nbytes, 1, 3, algo)
        best[algo] = statistics.median(walls)
    print(f"\nall_reduce of {floor_mib} MiB float32 on 8 ranks vs the memory-bandwidth floor "
          f"(numpy summing 8 inputs and writing 8 outputs: {floor * 1e3:.1f} ms)")
    print(table([[a, f"{t * 1e3:.1f}", f"{t / floor:.2f}x"] for a, t in sorted(best.items(), key=lambda kv: kv[1])],
                ["algorithm", "wall ms", "vs floor"]))

    print(f"\ncompiled-build targets ({small_calls} calls per run, medians of 5 runs; the ring under "
          f"{MODEL!r})")
    print(table(target_rows, ["build", "what", "checks='off'", "strict checks", "target"]))
    _print_simgrid(simgrid, targets, ring_ranks)
    return {"floor": floor, "algorithms": best, "rows": rows, "targets": targets, "simgrid": simgrid}


def _print_simgrid(simgrid: dict[str, float] | None, targets: dict[str, dict[str, Any]], ranks: int) -> None:
    print(f"\nring all_reduce of 1 MiB of float64 on {ranks:,} ranks against SimGrid's Python bindings "
          f"running the same ring (S4U actors, numpy chunks put and got on mailboxes, summed), one "
          f"link per neighbour pair of {MODEL.alpha * 1e6:g} us and {1e-9 / MODEL.beta:g} GB/s under "
          "SimGrid's CM02; wall and CPU seconds exclude starting Python and loading the platform; "
          "one run each, SimGrid's right after ours")
    if simgrid is None:
        print("skipped: no Python with SimGrid's bindings (Debian: apt install python3-simgrid; "
              "or set SIMGRID_PYTHON)")
        return
    rows = [[build, f"{got['ring']:.2f}", f"{simgrid['wall']:.2f}", f"{simgrid['wall'] / got['ring']:.1f}x",
             f"{got['ring_cpu']:.2f}", f"{simgrid['cpu']:.2f}", f"{simgrid['cpu'] / got['ring_cpu']:.1f}x",
             f"{got['ring_virtual'] * 1e3:.6f}", f"{simgrid['virtual'] * 1e3:.6f}",
             "at least 60x" if ranks == RING_RANKS else ""] for build, got in targets.items()]
    print(table(rows, ["build", "wall s", "SimGrid wall s", "SimGrid/simcluster", "CPU s", "SimGrid CPU s",
                       "SimGrid/simcluster", "virtual ms", "SimGrid virtual ms", "target"]))
