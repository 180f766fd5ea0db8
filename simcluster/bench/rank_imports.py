"""``simcluster bench rank_imports``: what each rank's own copy of a framework costs.

Under ``simcluster mpirun`` and ``simcluster torchrun`` each rank imports its
own copy of the pure-Python packages it imports (docs/mpi.md, "Each rank has
its own copy of your modules"). This benchmark runs a script that imports
accelerate and ignite (``import accelerate, ignite.distributed``, then a
barrier) on 1, 64 and 1,024 ranks (1 and 64 with ``--quick``), each in a
fresh process, and reports the wall time and the peak memory of that
process. The baseline, measured in the same run, is one plain Python process
importing the same packages once: the time and memory a rank's copy adds is
the difference from the 1-rank run divided by the ranks added.

Both packages must be installed (``pip install 'simcluster[frameworks]'``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

SCRIPT = """\
import accelerate, ignite.distributed
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
"""
PLAIN = "import numpy, torch, accelerate, ignite.distributed"
SIZES = (1, 64, 1024)
QUICK = {"sizes": (1, 64), "repeats": 1}

_MEASURE = """\
import json, resource, sys, time
start = time.perf_counter()
{body}
wall = time.perf_counter() - start
print(json.dumps([rc, wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))
"""


def _child(body: str) -> tuple[float, int]:
    """Run ``body`` in a fresh interpreter; return its wall seconds and peak memory in bytes."""
    code = _MEASURE.format(body=body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        raise RuntimeError(f"the measurement failed: {proc.stderr.strip()[-800:]}")
    rc, wall, peak = json.loads(lines[-1])
    if rc:
        raise RuntimeError(f"simcluster mpirun exited with {rc}: {proc.stderr.strip()[-800:]}")
    return wall, peak


def measure(ranks: int, script: str) -> tuple[float, int]:
    """Wall seconds and peak bytes of ``simcluster mpirun --exact -n ranks script``, start to end."""
    body = (f"from simcluster import mpirun\n"
            f"rc = mpirun.main(['--exact', '-n', '{ranks}', {script!r}])")
    return _child(body)


def main(sizes: tuple[int, ...] = SIZES, repeats: int = 3) -> None:
    for name in ("accelerate", "ignite"):
        try:
            __import__(name)
        except ImportError:
            print(f"bench rank_imports: {name} is not installed (pip install 'simcluster[frameworks]')")
            return
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "imports.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(SCRIPT)
        plain = [_child(f"{PLAIN}\nrc = 0") for _ in range(repeats)]
        base_wall = statistics.median(w for w, _ in plain)
        base_peak = statistics.median(p for _, p in plain)
        print("accelerate + ignite imported by every rank (simcluster mpirun --exact), "
              f"medians of {repeats}")
        print(f"baseline, one process importing them once: {base_wall:.2f} s, "
              f"{base_peak / 2**20:.0f} MiB")
        print(f"{'ranks':>6} {'wall s':>8} {'peak MiB':>9} {'ms/rank':>8} {'MiB/rank':>9}")
        first: tuple[float, float] | None = None
        for ranks in sizes:
            runs = [measure(ranks, script) for _ in range(repeats)]
            wall = statistics.median(w for w, _ in runs)
            peak = statistics.median(p for _, p in runs)
            if first is None:
                first = (wall, peak)
            added = ranks - sizes[0]
            per_ms = (wall - first[0]) / added * 1e3 if added else float("nan")
            per_mib = (peak - first[1]) / added / 2**20 if added else float("nan")
            print(f"{ranks:>6} {wall:>8.2f} {peak / 2**20:>9.0f} {per_ms:>8.1f} {per_mib:>9.2f}")


if __name__ == "__main__":
    main()
