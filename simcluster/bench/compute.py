"""``simcluster bench compute``: OSU benchmarks under measured compute, against the network model.

Runs the repository's OSU-style mpi4py programs (``examples/mpi4py/osu_latency.py``
and ``osu_bw.py``) with ``simcluster mpirun -n 2`` on its default network
(``alphabeta:1us,10GB/s``): with ``--exact`` (nothing charged: the network model
itself), with mpirun's default measured compute (``cpu``: the CPU time of each
rank's own code between calls) and with ``--compute wall`` (elapsed time), each
``repeats`` times. It prints, for every message size from 64 KiB up, the model,
the median of the measured runs and how far it is from the model; the target is
5% (latency: 5% + 0.2 us). Every run is a fresh process; the figures depend on
the machine and its load (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from . import table

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "mpi4py"
"""The OSU-style programs: in a checkout of the repository (the package does not install them)."""

SCRIPTS = {"osu_latency.py": "latency (us)", "osu_bw.py": "bandwidth (MB/s)"}
FROM = 64 << 10
"""The smallest message size checked against the model (the issue's "from 64 KiB up")."""

CONFIGS = {"cpu (default)": (), "wall": ("--compute", "wall")}
QUICK = {"repeats": 1}


def run_rows(script: Path, *options: str) -> dict[int, float]:
    """Run ``script`` on 2 ranks under ``simcluster mpirun`` with ``options``; return its rows."""
    proc = subprocess.run([sys.executable, "-m", "simcluster", "mpirun", "-n", "2", *options,
                           str(script)], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{script.name} {' '.join(options)} failed: {proc.stderr.strip()[-500:]}")
    rows = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            rows[int(parts[0])] = float(parts[1])
    return rows


def within(script: str, model: float, value: float) -> bool:
    """Whether ``value`` is within the target of ``model``: 5% (latency: 5% + 0.2 us)."""
    slack = 0.2 if script == "osu_latency.py" else 0.0
    return abs(value - model) <= 0.05 * model + slack


def main(repeats: int = 3) -> dict[str, dict[str, dict[int, tuple[float, float, bool]]]]:
    """Print the table; return ``{script: {config: {size: (model, median, within)}}}``."""
    if not EXAMPLES.is_dir():
        print(f"simcluster bench compute: {EXAMPLES} not found; run it in a checkout of the repository")
        return {}
    figures: dict[str, dict[str, dict[int, tuple[float, float, bool]]]] = {}
    for script, what in SCRIPTS.items():
        path = EXAMPLES / script
        model = {size: value for size, value in run_rows(path, "--exact").items() if size >= FROM}
        figures[script] = {}
        for config, options in CONFIGS.items():
            runs = [run_rows(path, *options) for _ in range(repeats)]
            figures[script][config] = {
                size: (m, med, within(script, m, med))
                for size, m in model.items()
                for med in [statistics.median(run[size] for run in runs)]}
        rows = []
        for size, m in model.items():
            row = [str(size), f"{m:.2f}"]
            for config in CONFIGS:
                _, med, ok = figures[script][config][size]
                row += [f"{med:.2f}", f"{(med - m) / m:+.1%}" + ("" if ok else " !")]
            rows.append(row)
        header = ["size (B)", f"model {what}"]
        for config in CONFIGS:
            header += [config, "error"]
        print(f"{script}: median of {repeats} run(s) on 2 ranks, alphabeta:1us,10GB/s "
              "(! : outside 5%, latency 5% + 0.2 us)")
        print(table(rows, header))
        print()
    return figures
