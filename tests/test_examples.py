"""Every script under examples/ runs and prints exactly its checked-in ``.out``.

Examples are found by walking the folder, so a new example without an
``.out`` file next to it fails here instead of being skipped. An example
whose module docstring gives the command that runs it (a line starting with
``simcluster mpirun ``, ``simcluster torchrun `` or ``python ``) is run by
that command as written, from the top folder of the project: what the
docstring tells a reader to type is what prints the ``.out``. Any other
example runs as ``python examples/.../NAME.py``. ``simcluster`` and
``python`` stand for this interpreter (``python -m simcluster``), with
``-W error`` so that a warning fails the test.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.rglob("*.py") if "__pycache__" not in p.parts)
SGD = EXAMPLES / "seeds" / "torch_p2p_and_sgd" / "sync_sgd.py"


# the command lines a docstring may give; stderr has the launcher's notes
COMMANDS = ("simcluster mpirun ", "simcluster torchrun ", "python ")
NOTES = re.compile(r"simcluster torchrun: .* runs on simcluster \(.*\)"
                   r"|simcluster (mpirun|torchrun): rank \d+ crashed at virtual time .* \(the fault plan\)"
                   r"|simcluster torchrun: attempt \d+ failed with exit status \d+; restarting every rank "
                   r"\(restart \d+ of \d+\)")


def command_of(script: Path) -> list[str]:
    """The command its docstring gives, split as a shell would, or ``python examples/.../NAME.py``."""
    docstring = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    lines = [line.strip() for line in docstring.splitlines() if line.strip().startswith(COMMANDS)]
    name = script.relative_to(ROOT).as_posix()
    if not lines:
        return ["python", name]
    assert len(lines) == 1, f"{name}: its docstring needs one command line, not {len(lines)}: {lines}"
    argv = shlex.split(lines[0])
    assert name in argv, f"{name}: its docstring's command runs another file: {lines[0]}"
    return argv


def run_example(script: Path) -> subprocess.CompletedProcess[str]:
    """Run its command from the top folder, in a fresh interpreter where any warning is an error."""
    program, *args = command_of(script)
    assert program in ("simcluster", "python"), program
    prefix = [sys.executable, "-W", "error"] + (["-m", "simcluster"] if program == "simcluster" else [])
    return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=240, cwd=ROOT)


# Eight examples at a time on a 2-core machine: each takes a few seconds alone (the torch
# ones up to 15), many times that together; the limits are for a hang, not for speed.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def outputs() -> dict[Path, subprocess.CompletedProcess[str]]:
    """Run every example once, several at a time (each is its own process)."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return dict(zip(SCRIPTS, pool.map(run_example, SCRIPTS)))


def stdout_of(script: Path, outputs: dict[Path, subprocess.CompletedProcess[str]]) -> str:
    proc = outputs[script]
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stderr}"
    errors = proc.stderr.splitlines()
    command = command_of(script)
    if command[0] == "simcluster":  # torchrun says once which backend it maps; mpirun names crashed ranks
        assert all(NOTES.fullmatch(line) for line in errors), proc.stderr
        assert errors or command[1] != "torchrun", "simcluster torchrun says which backend it maps"
    else:
        assert proc.stderr == "", f"{script.name} wrote to stderr:\n{proc.stderr}"
    return proc.stdout


def test_examples_were_found() -> None:
    assert len(SCRIPTS) >= 20
    assert SGD in SCRIPTS
    mpi4py = {p.stem for p in SCRIPTS if p.parent.name == "mpi4py"}
    assert {"hello", "ring", "pi", "mandelbrot", "osu_latency", "osu_bw"} <= mpi4py


def test_mpi4py_examples_name_their_simcluster_mpirun_command() -> None:
    """An mpi4py script runs under ``simcluster mpirun``, not plain python: its docstring says how."""
    for script in SCRIPTS:
        if script.parent.name == "mpi4py":
            assert command_of(script)[:2] == ["simcluster", "mpirun"], script.name


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_prints_its_expected_output(
        script: Path, outputs: dict[Path, subprocess.CompletedProcess[str]]) -> None:
    needs_torch = (script.relative_to(EXAMPLES).parts[0] == "torch"
                   or re.search(r"^import torch$", script.read_text(encoding="utf-8"), re.M))
    if needs_torch and importlib.util.find_spec("torch") is None:
        pytest.skip(f"{script.name} needs torch: pip install 'simcluster[torch]'")
    expected = script.with_suffix(".out")
    assert expected.is_file(), f"{script.relative_to(EXAMPLES)} has no {expected.name} next to it"
    assert script.read_text(encoding="utf-8").lstrip().startswith('"""'), "needs a module docstring"
    output = stdout_of(script, outputs)
    # NAME.<case>.out: what the script prints on other machines (gpu_all_reduce.gpu.out with a GPU)
    others = [p.read_text(encoding="utf-8") for p in sorted(script.parent.glob(f"{script.stem}.*.out"))]
    if output not in others:
        assert output == expected.read_text(encoding="utf-8")


def test_sgd_loss_falls_every_epoch_on_every_rank(
        outputs: dict[Path, subprocess.CompletedProcess[str]]) -> None:
    losses: dict[int, list[float]] = {}
    for line in stdout_of(SGD, outputs).splitlines():
        match = re.fullmatch(r"Rank (\d+), epoch (\d+): (\d+\.\d+)", line)
        assert match, f"unexpected line {line!r}"
        rank, epoch, loss = int(match[1]), int(match[2]), float(match[3])
        assert epoch == len(losses.setdefault(rank, []))
        losses[rank].append(loss)
    assert sorted(losses) == [0, 1]
    for rank, series in losses.items():
        assert len(series) == 10
        assert all(b < a for a, b in zip(series, series[1:])), f"rank {rank}: {series}"
        assert series[-1] < 0.8 * series[0]
