"""A test module run as a 2-process MPI job, for the mpi transport's tests.

``run(module, out, outcomes)``: the module's ``__main__`` calls ``write``
with what each case gives on the mpi transport; the test calls ``run``,
which starts ``mpiexec -n 2 python MODULE OUT`` and returns each process's
outcomes. ``needs_mpiexec`` skips, with the reason, where the real mpi4py
or MPICH's ``mpiexec`` is missing.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel installs it here
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpiexec = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
                                   reason="needs the real mpi4py and MPICH's mpiexec (pip install -e '.[mpi]')")


def run(module: Path, out: Path) -> list[dict[str, Any]]:
    """Run ``module`` under ``mpiexec -n 2``; return what each process wrote (``write``)."""
    assert MPIEXEC is not None
    done = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(module), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads((out / f"proc{p}.json").read_text()) for p in range(2)]


def write(out: Path, outcomes: dict[str, Any]) -> None:
    """In the job: this process's outcomes, for ``run``."""
    from mpi4py import MPI

    (out / f"proc{MPI.COMM_WORLD.Get_rank()}.json").write_text(json.dumps(outcomes))
