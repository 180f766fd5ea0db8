"""``simcluster bench mpi``: an unmodified mpi4py program under ``simcluster mpirun`` next to MPICH.

The program (``_mpi_allreduce.py``) times ``comm.Allreduce(sendbuf, recvbuf,
op=MPI.SUM)`` of one-element float64 arrays on 4 ranks: after a ``Barrier``,
``CALLS`` calls per round, rank 0's median over ``ROUNDS`` rounds. It runs
under MPICH's ``mpiexec -n 4`` with the real mpi4py (4 processes on this
machine) and under ``simcluster mpirun -n 4`` (4 ranks on greenlets in one
process, mpirun's defaults), alternately, ``REPEATS`` times each; the table
gives each side's median and their ratio. Where ``mpiexec`` or the real
mpi4py is missing, the MPICH column says so and the simcluster side still runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import table

PROGRAM = Path(__file__).with_name("_mpi_allreduce.py")
RANKS = 4
CALLS = 2000
ROUNDS = 5
REPEATS = 3
QUICK = {"calls": 50, "rounds": 2, "repeats": 1}


def mpiexec() -> str | None:
    """MPICH's ``mpiexec`` beside this Python (the mpich wheel puts it there) or on PATH, if the real
    mpi4py is installed too; else None."""
    if importlib.util.find_spec("mpi4py") is None:
        return None
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


def _per_call(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run the program; return its (wall, CPU) microseconds per call."""
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    figures = dict(line.split() for line in proc.stdout.splitlines() if line.startswith(("per-call-us ",
                                                                                        "cpu-per-call-us ")))
    if proc.returncode or len(figures) != 2:
        raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    return float(figures["per-call-us"]), float(figures["cpu-per-call-us"])


def simulated(calls: int, rounds: int) -> tuple[float, float]:
    """(Wall, CPU) microseconds per call under ``simcluster mpirun -n 4`` (this build, this environment)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    return _per_call([sys.executable, "-m", "simcluster", "mpirun", "-n", str(RANKS), str(PROGRAM),
                      str(calls), str(rounds)], env)


def real(launcher: str, calls: int, rounds: int) -> tuple[float, float]:
    """(Wall, rank 0's CPU) microseconds per call under MPICH's ``mpiexec -n 4`` with the real mpi4py."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_"))}
    return _per_call([launcher, "-n", str(RANKS), sys.executable, str(PROGRAM), str(calls), str(rounds)],
                     env)


def main(calls: int = CALLS, rounds: int = ROUNDS, repeats: int = REPEATS) -> dict[str, Any]:
    """Print the row; return ``{"simcluster": [us...], "mpich": [us...] or None, "ratio": float or None,
    "simcluster_cpu": [us...]}`` (wall microseconds per call of each run; CPU of simcluster's)."""
    launcher = mpiexec()
    sim: list[float] = []
    cpu: list[float] = []
    mpich: list[float] = []
    for _ in range(repeats):  # alternated: both sides see the same load
        wall, used = simulated(calls, rounds)
        sim.append(wall)
        cpu.append(used)
        if launcher is not None:
            mpich.append(real(launcher, calls, rounds)[0])
    sim_us = statistics.median(sim)
    mpich_us = statistics.median(mpich) if mpich else None
    ratio = sim_us / mpich_us if mpich_us else None
    print(f"simcluster bench mpi: {RANKS}-rank Allreduce of a one-element float64 array, per call "
          f"({calls} calls a round, median of {rounds} rounds, median of {repeats} runs alternated)")
    row = ["4-rank Allreduce of a one-element array, per call", f"{sim_us:.1f} us",
           "not run" if mpich_us is None else f"{mpich_us:.1f} us",
           "" if ratio is None else f"{ratio:.2f}x", "at most 1.0x"]
    print(table([row], ["what", "simcluster mpirun", "MPICH mpiexec", "ratio", "target"]))
    print(f"simcluster's CPU time per call (every rank's work, in one process): "
          f"{statistics.median(cpu):.1f} us; wall above CPU is the machine's other load")
    if launcher is None:
        print("MPICH not measured: needs the real mpi4py and MPICH's mpiexec (pip install -e '.[mpi]')")
    return {"simcluster": sim, "mpich": mpich if launcher is not None else None, "ratio": ratio,
            "simcluster_cpu": cpu}
