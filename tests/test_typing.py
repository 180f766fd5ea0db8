"""The package type-checks: ``mypy --strict``, configured in pyproject.toml (``[tool.mypy]``).

The configuration skips the optional libraries (torch, mpi4py, cupy, matplotlib,
array-api-strict) whether or not they are installed, so the result is the same
with and without the extras.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)  # a cold cache reads numpy's stubs
def test_mypy_strict_passes() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "MYPY_CACHE_DIR")}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    status, output = proc.returncode, proc.stdout + proc.stderr
    assert status == 0, f"mypy --strict (configured in pyproject.toml) exited {status}:\n{output}"
