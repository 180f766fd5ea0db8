"""Scripts built on training frameworks print under simcluster torchrun what they print under torchrun.

Each program in ``programs/`` is written as a user of accelerate, ignite,
Lightning Fabric or a Megatron-style ``parallel_state`` module writes one:
the framework keeps per-process state in module globals and singletons. Each
runs unmodified under real ``torchrun --standalone`` (4 processes, gloo) and
under ``simcluster torchrun``; every rank prints one JSON line of its values,
and every rank's values must be equal. The log lines the frameworks print on
stderr must come out as often as under torchrun (a logger shared between
ranks prints a rank's line once per rank that added a handler).

``site/`` stands for site-packages: the Megatron-style package is found on
``PYTHONPATH``, as an installed package, by both launchers.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="simcluster torchrun needs torch: pip install 'simcluster[torch]'")

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
NEEDS = {"accelerate_state.py": "accelerate", "ignite_parallel.py": "ignite",
         "lightning_fabric.py": "lightning", "megatron_state.py": "torch"}
LAUNCHER_LINES = re.compile(r"^([WIE]\d{4} |\*+$|simcluster|Setting OMP_NUM_THREADS)|^\s*$")
"""stderr lines of the launchers themselves (torchrun's glog lines, simcluster's notes), not the program's."""
VARYING = [(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+"), "TIME"), (re.compile(r"0x[0-9a-f]+"), "ADDR")]
"""What differs from run to run in a log line: its time stamp, object addresses."""


def _mask(line: str) -> str:
    for pattern, repl in VARYING:
        line = pattern.sub(repl, line)
    return line


def _torchrun() -> str:
    found = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if found is None:  # pragma: no cover - torch installs it beside the interpreter
        pytest.skip("torch's torchrun is not installed beside this Python")
    return found


def _run(argv: list[str], cwd: Path) -> tuple[dict[int, Any], collections.Counter[str]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE / "site"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    values = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    logs = collections.Counter(_mask(line) for line in proc.stderr.splitlines()
                               if not LAUNCHER_LINES.match(line))
    return {v["rank"]: v for v in values}, logs


@pytest.mark.timeout(900)
@pytest.mark.parametrize("program", sorted(NEEDS), ids=lambda name: name.removesuffix(".py"))
def test_a_framework_script_prints_what_it_prints_under_torchrun(tmp_path: Path, program: str) -> None:
    if importlib.util.find_spec(NEEDS[program]) is None:
        pytest.skip(f"{NEEDS[program]} is not installed (pip install 'simcluster[frameworks]')")
    path = PROGRAMS / program
    real, real_logs = _run([_torchrun(), "--standalone", "--nproc-per-node", "4", str(path)], tmp_path)
    sim, sim_logs = _run([sys.executable, "-m", "simcluster", "torchrun", "--nproc-per-node", "4",
                          str(path)], tmp_path)
    assert sorted(real) == sorted(sim) == [0, 1, 2, 3]
    for rank in range(4):
        assert sim[rank] == real[rank], f"rank {rank}"
    assert sim_logs == real_logs
