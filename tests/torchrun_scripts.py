"""Running one torch script under real torchrun and under ``simcluster torchrun``, for differential tests.

Each rank of the script writes ``rank{RANK}.txt`` in its working directory
(two processes' prints may interleave on one pipe); ``under_both`` runs it
under each launcher in a folder of its own and returns each one's files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parent.parent
LAUNCHERS = {"simcluster": ["-m", "simcluster", "torchrun"], "torchrun": ["-m", "torch.distributed.run"]}


def under_both(tmp_path: Path, source: str, nproc: int) -> dict[str, list[str]]:
    """Run ``source`` under both launchers with ``--nproc-per-node nproc``: {launcher: each rank's file}."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT_DIR), os.environ.get("PYTHONPATH", "")]))
    got = {}
    for name, launcher in LAUNCHERS.items():
        folder = tmp_path / name
        folder.mkdir()
        prog = folder / "prog.py"
        prog.write_text(textwrap.dedent(source), encoding="utf-8")
        proc = subprocess.run([sys.executable, *launcher, "--nproc-per-node", str(nproc), str(prog)],
                              capture_output=True, text=True, timeout=300, cwd=folder, env=env)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert "Exception ignored" not in proc.stderr, f"{name}: {proc.stderr}"
        got[name] = [(folder / f"rank{r}.txt").read_text() for r in range(nproc)]
    return got
