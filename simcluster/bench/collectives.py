"""``simcluster bench collectives``: an OSU-style table for the memory transport.

For all_reduce, broadcast and all_gather at 8 and 64 ranks and a range of
message sizes: mean, min and max wall microseconds per call (over repeated
runs of ``ITERS`` calls each) and the virtual microseconds per call under a
stated AlphaBeta model (calls run back to back, as in OSU, so pipelined
collectives overlap). The cost of starting the ranks is measured with zero
calls in the same repetition and subtracted. Then, for all_reduce of 16 MiB of float32 on 8 ranks,
every algorithm's wall time next to the memory-bandwidth floor measured in
the same run: numpy reading the 8 inputs (one sum) and writing the 8 outputs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from .. import latency as _latency
from .. import runner
from ..collectives import algorithms
from ..comm import Comm
from . import median_time, table

MODEL = _latency.AlphaBeta(alpha=1e-6, beta=1e-10)  # 1 us, 10 GB/s
SIZES = (8, 1024, 65536, 1 << 20)
WORLDS = (8, 64)
ITERS = 10
REPEATS = 3
QUICK = {"sizes": (8, 65536), "worlds": (8,), "iters": 3, "repeats": 2, "floor_mib": 4}


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
        start = time.perf_counter()
        runner.run(_loop, world, args=(name, nbytes, 0, algorithm), checks="off")
        setup = time.perf_counter() - start  # starting the ranks, subtracted below
        start = time.perf_counter()
        result = runner.run(_loop, world, args=(name, nbytes, iters, algorithm), latency=MODEL,
                            checks="off")
        walls.append(max(time.perf_counter() - start - setup, 0.0) / iters)
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


def main(sizes: tuple[int, ...] = SIZES, worlds: tuple[int, ...] = WORLDS, iters: int = ITERS,
         repeats: int = REPEATS, floor_mib: int = 16) -> dict[str, Any]:
    """Measure and print the OSU-style table and the 16 MiB all_reduce floor ratio."""
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
    for algo in sorted(algorithms("all_reduce")):
        walls, _ = _per_call("all_reduce", 8, nbytes, 1, 3, algo)
        best[algo] = statistics.median(walls)
    print(f"\nall_reduce of {floor_mib} MiB float32 on 8 ranks vs the memory-bandwidth floor "
          f"(numpy summing 8 inputs and writing 8 outputs: {floor * 1e3:.1f} ms)")
    print(table([[a, f"{t * 1e3:.1f}", f"{t / floor:.2f}x"] for a, t in sorted(best.items(), key=lambda kv: kv[1])],
                ["algorithm", "wall ms", "vs floor"]))
    return {"floor": floor, "algorithms": best, "rows": rows}
