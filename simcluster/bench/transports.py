"""``simcluster bench transports``: memory, shm and tcp side by side (and MPI, where installed).

Four figures per transport, each measured inside the ranks with the wall
clock after a barrier, so process start-up is not counted:

* small-message round trip: a ping-pong of Python ints between rank 0 and 1;
* bandwidth of 1 MiB and of 64 MiB float64 arrays sent into the receiver's
  buffer (``recv(buf)``), one way, back to back;
* a 16 MiB float64 ``all_reduce`` on 2 ranks.

A second table runs a small data-parallel loop: 64 ranks, each doing about
2 ms of elementwise numpy work per iteration (one thread), then an
``all_reduce`` of a 1 MiB gradient, 20 iterations, on the memory transport in
this process and on 2 processes (shm, tcp, and mpi under ``mpiexec -n 2``).
The work of one virtual instant runs in both processes at once, so the wall
time falls; the speedup is the memory transport's wall time over each one's,
and every run must give the same result and virtual time.

A third table splits one big world: a message-level barrier on 2^20 ranks
(2^14 with ``--quick``) in one process against ``transport="mpi"`` on 2 MPI
processes, each hosting half the ranks, with the peak memory of a process.

Under the first table, numpy's own copy bandwidth (``np.copyto`` of 64 MiB,
measured in the same run) is the baseline the 64 MiB figures are divided
by: the shm transport copies a large array twice (into a pooled segment,
then out into the receive buffer), so half of it is its ceiling.

The memory transport hosts both ranks in this process; shm and tcp put each
rank in its own process (``procs=2``), so every message crosses a process
boundary, and every round of virtual time costs one coordinator round trip
(see ``simcluster.hosting.host``); the mpi row is simcluster's ``transport="mpi"``
under ``mpiexec -n 2``. With mpi4py and an MPI library installed
(``mpiexec`` on the PATH), the same figures for plain MPI are measured with
``mpiexec -n 2`` and shown in the same table; otherwise a note says why not.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from time import perf_counter  # bound now: a rank's time.* reads virtual time
from typing import Any

import numpy as np

from .. import runner
from ..comm import Comm
from . import median_time, table

ROUND_TRIPS = 2000
MIB = 1 << 20
SIZES = (1 * MIB, 64 * MIB)
ALL_REDUCE = 16 * MIB
TRANSPORTS = ("memory", "shm", "tcp")


async def _measure(comm: Comm, round_trips: int, repeats: int) -> dict[str, float] | None:
    """Run every figure on ranks 0 and 1; rank 0 returns the medians (seconds)."""
    out: dict[str, float] = {}
    peer = 1 - comm.rank
    samples: list[float] = []
    for _ in range(repeats):
        await comm.barrier()
        start = perf_counter()
        for i in range(round_trips):
            if comm.rank == 0:
                await comm.send(i, dst=peer)
                await comm.recv(src=peer)
            else:
                await comm.send(await comm.recv(src=peer), dst=peer)
        samples.append((perf_counter() - start) / round_trips)
    out["rtt"] = float(np.median(samples))
    for size in SIZES:
        count = max(2, min(16, (256 * MIB) // size))
        arr = np.ones(size // 8)
        buf = np.empty_like(arr)
        samples = []
        for _ in range(repeats):
            await comm.barrier()
            start = perf_counter()
            for _ in range(count):
                if comm.rank == 0:
                    await comm.send(arr, dst=peer)
                else:
                    await comm.recv(buf, src=peer)
            await comm.barrier()  # the last byte has landed
            samples.append(size * count / (perf_counter() - start))
        out[f"bw{size}"] = float(np.median(samples))
    x = np.ones(ALL_REDUCE // 8)
    samples = []
    for _ in range(repeats):
        await comm.barrier()
        start = perf_counter()
        await comm.all_reduce(x)
        samples.append(perf_counter() - start)
    out["allreduce"] = float(np.median(samples))
    return out if comm.rank == 0 else None


def measure(transport: str, round_trips: int = ROUND_TRIPS, repeats: int = 3) -> dict[str, float]:
    """Return the figures of one transport (2 ranks; 2 processes for shm and tcp)."""
    procs = None if transport == "memory" else 2
    result = runner.run(_measure, 2, args=(round_trips, repeats), transport=transport,
                        procs=procs, checks="off")
    figures: dict[str, float] = result[0]
    return figures


_MPI_SCRIPT = r"""
import json, sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, peer = comm.rank, 1 - comm.rank
round_trips, repeats, sizes, total = json.loads(sys.argv[1])
out = {}
samples = []
for _ in range(repeats):
    comm.Barrier(); start = time.perf_counter()
    for i in range(round_trips):
        if rank == 0:
            comm.send(i, dest=peer); comm.recv(source=peer)
        else:
            comm.send(comm.recv(source=peer), dest=peer)
    samples.append((time.perf_counter() - start) / round_trips)
out["rtt"] = float(np.median(samples))
for size in sizes:
    count = max(2, min(16, (256 << 20) // size)); arr = np.ones(size // 8); buf = np.empty_like(arr)
    samples = []
    for _ in range(repeats):
        comm.Barrier(); start = time.perf_counter()
        for _ in range(count):
            if rank == 0: comm.Send(arr, dest=peer)
            else: comm.Recv(buf, source=peer)
        comm.Barrier(); samples.append(size * count / (time.perf_counter() - start))
    out["bw%d" % size] = float(np.median(samples))
x = np.ones(total // 8); y = np.empty_like(x); samples = []
for _ in range(repeats):
    comm.Barrier(); start = time.perf_counter()
    comm.Allreduce(x, y); samples.append(time.perf_counter() - start)
out["allreduce"] = float(np.median(samples))
if rank == 0:
    print(json.dumps(out))
"""


def _mpiexec() -> str | None:
    """``mpiexec`` beside this python (the mpich wheel puts it there), else on the PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.isfile(beside) else shutil.which("mpiexec") or shutil.which("mpirun")


def _under_mpiexec(command: list[str]) -> dict[str, float] | str:
    """Run ``command`` on 2 MPI processes; return the figures process 0 prints, or why there are none."""
    try:
        import importlib

        importlib.import_module("mpi4py")
    except ImportError:
        return "mpi4py is not installed (pip install 'simcluster[mpi]', or mpi4py with an MPI library)"
    launcher = _mpiexec()
    if launcher is None:
        return "no mpiexec/mpirun on the PATH (install an MPI library such as Open MPI or MPICH)"
    try:
        done = subprocess.run([launcher, "-n", "2", sys.executable, *command],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mpiexec failed ({exc})"
    if done.returncode != 0:
        return f"mpiexec failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def measure_mpi(round_trips: int = ROUND_TRIPS, repeats: int = 3) -> dict[str, float] | str:
    """Return plain MPI's figures via ``mpiexec -n 2``, or a note saying why they are missing."""
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "bench_mpi.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(_MPI_SCRIPT)
        return _under_mpiexec([script, json.dumps([round_trips, repeats, list(SIZES), ALL_REDUCE])])


def measure_mpi_transport(round_trips: int = ROUND_TRIPS, repeats: int = 3) -> dict[str, float] | str:
    """Return simcluster's figures on ``transport="mpi"`` (2 MPI processes, a rank each), or why not."""
    return _under_mpiexec(["-m", "simcluster.bench.transports", "--mpi-child",
                           json.dumps([round_trips, repeats])])


def _mpi_child(arg: str) -> None:
    """Under ``mpiexec -n 2``: measure on transport="mpi"; process 0 prints the figures."""
    from ..hosting import mpi_job as _mpi_job

    round_trips, repeats = json.loads(arg)
    result = runner.run(_measure, 2, args=(round_trips, repeats), transport="mpi", checks="off")
    if _mpi_job.first_process():
        print(json.dumps(result[0]))


# ---- the floor: asyncio's own round trip between two processes ----


async def _echo(port: Any, round_trips: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(round_trips):
            writer.write(await reader.readexactly(64))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port.put(server.sockets[0].getsockname()[1])
    async with server:
        await asyncio.sleep(60)


def _echo_process(port: Any, round_trips: int) -> None:
    try:
        asyncio.run(asyncio.wait_for(_echo(port, round_trips), 60))
    except asyncio.TimeoutError:
        pass


async def _ping(port: int, round_trips: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = perf_counter()
    for _ in range(round_trips):
        writer.write(b"x" * 64)
        await reader.readexactly(64)
    took = perf_counter() - start
    writer.close()
    return took / round_trips


def socket_floor(round_trips: int = ROUND_TRIPS) -> float:
    """Seconds per round trip of 64 bytes between two processes' asyncio loops over loopback TCP.

    A simcluster round trip across processes takes two rounds, and each round
    at least two such hops (the coordinator's STEP and the process's REPORT),
    so twice this is what the rounds cost before any work is done.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    port = ctx.Queue()
    server = ctx.Process(target=_echo_process, args=(port, round_trips), daemon=True)
    server.start()
    try:
        return asyncio.run(_ping(port.get(timeout=60), round_trips))
    finally:
        server.terminate()
        server.join()


# ---- parallel speedup: ranks with work of their own between all_reduces ----

SPEEDUP_RANKS = 64
SPEEDUP_ITERATIONS = 20
SPEEDUP_WORK = 2e-3  # wall seconds of numpy work per rank per iteration
SPEEDUP_GRADIENT = 1 * MIB
SPEEDUP_MODEL = "alphabeta:1us,10GB/s"
_WORK_SIZE = 1 << 16


def _work(a: np.ndarray[Any, Any], reps: int) -> None:
    for _ in range(reps):
        np.sqrt(a * a + 1.0)  # elementwise: one thread, whatever BLAS is configured to use


def work_reps(seconds: float = SPEEDUP_WORK) -> int:
    """How many rounds of ``_work`` take ``seconds`` here (calibrated once, in the caller)."""
    a = np.random.default_rng(0).random(_WORK_SIZE)
    reps = 1
    while True:
        start = perf_counter()
        _work(a, reps)
        took = perf_counter() - start
        if took > 0.05:
            return max(1, round(reps * seconds / took))
        reps *= 2


async def _training(comm: Comm, reps: int, iterations: int) -> float:
    """Work, then all_reduce a 1 MiB gradient; every rank returns the same checksum."""
    a = np.random.default_rng(comm.rank).random(_WORK_SIZE)
    grad = np.zeros(SPEEDUP_GRADIENT // 8)
    for _ in range(iterations):
        _work(a, reps)
        grad += 1.0
        await comm.all_reduce(grad)
    return float(grad.sum())


def measure_speedup(transport: str, reps: int, iterations: int = SPEEDUP_ITERATIONS) -> dict[str, float]:
    """Wall seconds of the training loop on ``transport`` (shm and tcp: 2 processes), and its result."""
    from .. import latency

    start = perf_counter()
    result = runner.run(_training, SPEEDUP_RANKS, args=(reps, iterations), transport=transport,
                        procs=None if transport in ("memory", "mpi") else 2, checks="off",
                        latency=latency.parse(SPEEDUP_MODEL))
    return {"wall": perf_counter() - start, "checksum": result[0], "elapsed": result.elapsed}


def _mpi_speedup_child(arg: str) -> None:
    from ..hosting import mpi_job as _mpi_job

    reps, iterations = json.loads(arg)
    figures = measure_speedup("mpi", reps, iterations)
    if _mpi_job.first_process():
        print(json.dumps(figures))


def speedup(iterations: int = SPEEDUP_ITERATIONS, transports: tuple[str, ...] = ("shm", "tcp"),
            repeats: int = 1) -> dict[str, Any]:
    """Measure and print the speedup table; the memory transport in this process is the baseline."""
    reps = work_reps()
    figures: dict[str, Any] = {}

    def best(measure: Any) -> Any:  # the fastest of the repeats: other load only slows a run down
        runs = [measure() for _ in range(repeats)]
        return min(runs, key=lambda m: m["wall"] if isinstance(m, dict) else 0.0)

    figures["memory"] = best(lambda: measure_speedup("memory", reps, iterations))
    for name in transports:
        measure_speedup(name, 0, 1)  # start the process server once: a session pays it once
        figures[name] = best(lambda: measure_speedup(name, reps, iterations))
    figures["mpi"] = best(lambda: _under_mpiexec(["-m", "simcluster.bench.transports",
                                                  "--mpi-speedup-child", json.dumps([reps, iterations])]))
    base = figures["memory"]
    rows = []
    for name, m in figures.items():
        if not isinstance(m, dict):
            continue
        if m["checksum"] != base["checksum"] or m["elapsed"] != base["elapsed"]:
            raise AssertionError(f"{name}: result or virtual time differs from the memory transport's")
        rows.append([name, "1" if name == "memory" else "2", f"{m['wall']:.2f} s",
                     f"{base['wall'] / m['wall']:.2f}x"])
    print(f"parallel speedup: {SPEEDUP_RANKS} ranks, {iterations} iterations of about "
          f"{SPEEDUP_WORK * 1e3:g} ms of numpy work per rank, then an all_reduce of "
          f"{SPEEDUP_GRADIENT // MIB} MiB ({SPEEDUP_MODEL}); best of {repeats}")
    print(table(rows, ["transport", "processes", "wall", "speedup"]))
    if not isinstance(figures["mpi"], dict):
        print(f"mpi: skipped: {figures['mpi']}")
    return figures


# ---- scale across processes: one big world, split between 2 MPI processes ----

SCALE_RANKS = 1 << 20
SCALE_MODEL = "alphabeta:1us,10GB/s"


def _mpi_scale_child(arg: str) -> None:
    """Under ``mpiexec -n 2``: a message-level barrier on ``transport="mpi"``; process 0 prints."""
    from ..hosting import mpi_job as _mpi_job
    from . import scale

    (ranks,) = json.loads(arg)
    figures = scale._child_collective("message", "barrier", ranks, SCALE_MODEL, "mpi")
    peaks = _mpi_job.real_mpi().COMM_WORLD.gather(figures["peak_kib"], root=0)
    if _mpi_job.first_process():
        figures["peak_kib"] = max(peaks)  # of either process
        print(json.dumps(figures))


def scale_across(ranks: int = SCALE_RANKS) -> dict[str, Any]:
    """Measure and print the barrier on ``ranks`` ranks in one process against 2 MPI processes."""
    from . import scale

    status = scale._Status(sys.stderr)
    one = scale._measure(["collective", "message", "barrier", str(ranks), SCALE_MODEL],
                         f"barrier on {ranks} ranks in one process", status, 3600.0)
    status.clear()
    two = _under_mpiexec(["-m", "simcluster.bench.transports", "--mpi-scale-child",
                          json.dumps([ranks])])
    figures = {"memory": one, "mpi": two}
    rows = []
    for name, procs, got in (("memory", "1", one), ("mpi", "2", two)):
        if isinstance(got, dict):
            ratio = (f"{one['wall'] / got['wall']:.2f}x" if isinstance(one, dict) else "")
            rows.append([name, procs, f"{got['wall']:.1f} s", ratio,
                         f"{got['peak_kib'] / 1024:.0f} MiB"])
    print(f"scale across processes: a message-level barrier on {ranks:,} ranks ({SCALE_MODEL}); "
          "peak memory of one process")
    print(table(rows, ["transport", "processes", "wall", "speedup", "peak RSS"]))
    for name, got in figures.items():
        if not isinstance(got, dict):
            print(f"{name}: skipped: {got}")
    return figures


def _row(name: str, m: dict[str, float]) -> list[str]:
    return [name, f"{m['rtt'] * 1e6:.1f} us",
            *(f"{m[f'bw{size}'] / 1e9:.2f} GB/s" for size in SIZES),
            f"{m['allreduce'] * 1e3:.1f} ms"]


def main(round_trips: int = ROUND_TRIPS, repeats: int = 3,
         transports: tuple[str, ...] = TRANSPORTS,
         speedup_iterations: int = SPEEDUP_ITERATIONS, speedup_repeats: int = 3,
         scale_ranks: int = SCALE_RANKS) -> dict[str, Any]:
    """Measure and print the table of every transport (and MPI where it can run), then the
    speedup and scale tables."""
    figures: dict[str, Any] = {name: measure(name, round_trips, repeats) for name in transports}
    hosted = measure_mpi_transport(round_trips, repeats)
    mpi = measure_mpi(round_trips, repeats)
    big = SIZES[-1]
    arr, out = np.ones(big // 8), np.empty(big // 8)
    figures["copy"] = big / median_time(lambda: np.copyto(out, arr), max(repeats, 5))
    rows = [_row(name, figures[name]) for name in transports]
    if isinstance(hosted, dict):
        figures["mpi transport"] = hosted
        rows.append(_row("mpi", hosted))
    if isinstance(mpi, dict):
        figures["mpi"] = mpi
        rows.append(_row("MPI (mpi4py)", mpi))
    print(f"simcluster bench transports: 2 ranks (shm/tcp/mpi: 2 processes), wall clock measured "
          f"in the ranks, medians of {repeats} repeats, {round_trips} round trips")
    print(table(rows, ["transport", "round trip", "1 MiB bandwidth", "64 MiB bandwidth",
                       "16 MiB all_reduce"]))
    copy = figures["copy"]
    print(f"numpy's copy of {big // MIB} MiB (np.copyto, the baseline): {copy / 1e9:.2f} GB/s; "
          + ", ".join(f"{name} {figures[name][f'bw{big}'] / copy:.2f}x" for name in transports))
    figures["floor"] = floor = socket_floor(round_trips)
    print(f"asyncio's own round trip between 2 processes over loopback TCP: {floor * 1e6:.1f} us "
          f"(a simcluster round trip across processes is 2 rounds, each one exchange between the "
          f"processes, which poll their sockets without blocking for a moment first)")
    if not isinstance(hosted, dict):
        print(f"mpi transport: skipped: {hosted}")
    if not isinstance(mpi, dict):
        print(f"MPI: skipped: {mpi}")
    print()
    figures["speedup"] = speedup(speedup_iterations, tuple(t for t in transports if t != "memory"),
                                 speedup_repeats)
    print()
    figures["scale"] = scale_across(scale_ranks)
    return figures


QUICK = {"round_trips": 300, "repeats": 2, "speedup_iterations": 5, "speedup_repeats": 1,
         "scale_ranks": 1 << 14}

if __name__ == "__main__" and sys.argv[1:2] == ["--mpi-child"]:
    _mpi_child(sys.argv[2])
if __name__ == "__main__" and sys.argv[1:2] == ["--mpi-speedup-child"]:
    _mpi_speedup_child(sys.argv[2])
if __name__ == "__main__" and sys.argv[1:2] == ["--mpi-scale-child"]:
    _mpi_scale_child(sys.argv[2])
