"""Running one mpi4py program under MPICH's ``mpiexec`` and under ``simcluster mpirun``, for differential tests.

``script`` writes a program's source (dedented) to a file, ``run_real`` gives each rank's stdout lines under ``mpiexec`` with the real
mpi4py (one output file per rank), ``run_simulated`` under ``simcluster mpirun
--prepend-rank``; ``needs_mpiexec`` skips, with the reason, where MPICH or the
real mpi4py is missing.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT_DIR = Path(__file__).resolve().parent.parent


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel installs it here
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpiexec = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
    reason="needs the real mpi4py and MPICH's mpiexec (pip install -e '.[mpi]')")


def script(tmp_path: Path, source: str, name: str = "prog.py") -> Path:
    """Write ``source``, dedented, to ``tmp_path / name``; return the path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def run_real(tmp_path: Path, script: Path, n: int, *args: str) -> list[list[str]]:
    """Run ``script`` under the real ``mpiexec -n n``; return each rank's stdout lines."""
    out = tmp_path / "real"
    out.mkdir(exist_ok=True)
    assert MPIEXEC is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_"))}
    proc = subprocess.run(
        [MPIEXEC, "-n", str(n), "-outfile-pattern", str(out / "out.%r"),
         "-errfile-pattern", str(out / "err.%r"), sys.executable, str(script), *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    errors = "".join(p.read_text() for p in sorted(out.glob("err.*")))
    assert proc.returncode == 0, f"mpiexec failed: {proc.stderr}{errors}"
    return [(out / f"out.{r}").read_text().splitlines() for r in range(n)]


def run_simulated(tmp_path: Path, script: Path, n: int, *args: str, options: tuple[str, ...] = (),
                  ranks: int | None = None) -> list[list[str]]:
    """Run ``script`` under ``simcluster mpirun --prepend-rank -n n``; return each rank's lines.

    ``ranks``: how many ranks' lines to collect (spawned ranks are numbered after the
    launched ones); ``n`` without.
    """
    proc = simulate(tmp_path, script, n, *args, options=("--prepend-rank", *options))
    assert (proc.returncode, proc.stderr) == (0, "")
    lines: list[list[str]] = [[] for _ in range(ranks or n)]
    for line in proc.stdout.splitlines():
        match = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert match, f"a line without its rank prefix: {line!r}"
        lines[int(match[1])].append(match[2])
    return lines


def simulate(tmp_path: Path, script: Path, n: int, *args: str,
             options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``simcluster mpirun [options] -n n script args``; return the finished process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT_DIR), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "simcluster", "mpirun", *options, "-n", str(n), str(script), *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
