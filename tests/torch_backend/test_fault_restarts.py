"""Faults on the torch backend: a dead peer raises gloo's error, and torchrun --max-restarts resumes.

The error is checked against gloo itself: two real processes, one of which
dies (``os._exit``) before the second ``all_reduce``; the survivor's
``all_reduce`` raises. Under simcluster the fault plan crashes the same rank
at the same call, and the survivor must see the same kind of error.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import simcluster.torch as sctorch  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "faults" / "elastic_checkpoint.py"


def _gloo_rank(rank: int, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    t = torch.ones(2)
    dist.all_reduce(t)
    if rank == 1:
        os._exit(1)  # the peer dies, as a crashed worker does
    Path(out).write_text(repr(_second_all_reduce()), encoding="utf-8")
    os._exit(0)


def _second_all_reduce() -> tuple[str, bool]:
    """What the survivor's all_reduce raises once its peer is gone: its type, and whether it says the
    connection was closed or reset "by peer", as gloo words it (which of the two depends on timing)."""
    t = torch.ones(2)
    try:
        dist.all_reduce(t)
    except Exception as exc:  # noqa: BLE001
        return (type(exc).__name__, "by peer" in str(exc))
    return ("no error", False)


def test_a_collective_with_a_crashed_peer_raises_what_gloo_raises(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "gloo.txt"
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_gloo_rank, args=(rank, port, str(out))) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    real = eval(out.read_text(encoding="utf-8"))  # noqa: S307 - our own repr of a tuple
    assert real == ("RuntimeError", True)

    def rank_fn(rank: int) -> tuple[str, bool]:
        dist.init_process_group("simcluster")
        dist.all_reduce(torch.ones(2))
        return _second_all_reduce()  # rank 1 crashes at it

    simulated = sctorch.spawn(rank_fn, nprocs=2, faults="crash:1@all_reduce#2")
    assert simulated[0] == real


def _torchrun(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simcluster", "torchrun", *map(str, argv)],
                          capture_output=True, text=True, timeout=300, cwd=EXAMPLE.parent)


def _weights(stdout: str) -> str:
    found = re.findall(r"^final weights: (.*)$", stdout, re.M)
    assert len(found) == 1, stdout
    return found[0]


@pytest.mark.timeout(900)
def test_max_restarts_resumes_from_the_checkpoint_with_the_uninterrupted_weights_for_every_step(
        tmp_path: Path) -> None:
    clean = _torchrun("--nproc-per-node", 2, EXAMPLE, tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    reference = _weights(clean.stdout)
    for step in range(1, 9):  # the example's 8 steps: one all_reduce each
        folder = tmp_path / f"crash{step}"
        run = _torchrun("--nproc-per-node", 2, "--max-restarts", 1, "--faults",
                        f"crash:1@all_reduce#{step}", EXAMPLE, folder)
        assert run.returncode == 0, (step, run.stderr)
        assert "attempt 0 failed with exit status 1; restarting every rank (restart 1 of 1)" in run.stderr
        assert "rank 1 crashed at virtual time" in run.stderr
        assert f"rank 0 at step {step - 1}: Connection closed by peer [rank 1]" in run.stdout
        assert _weights(run.stdout) == reference, step
        resumed = re.search(r"attempt 1: starting at step (\d+)", run.stdout)
        assert resumed is not None and int(resumed.group(1)) == 2 * ((step - 1) // 2), run.stdout


def test_without_restarts_the_failed_attempt_is_the_exit_status(tmp_path: Path) -> None:
    run = _torchrun("--nproc-per-node", 2, "--faults", "crash:1@all_reduce#3", EXAMPLE, tmp_path)
    assert run.returncode == 1
    assert "rank 1 crashed at virtual time" in run.stderr
    assert "final weights" not in run.stdout


def test_a_negative_max_restarts_is_refused(tmp_path: Path) -> None:
    run = _torchrun("--nproc-per-node", 2, "--max-restarts", -1, EXAMPLE, tmp_path)
    assert run.returncode == 2
    assert "--max-restarts -1: give how many restarts to allow, 0 or more" in run.stderr


def test_each_attempt_keeps_its_trace_with_the_crash_and_the_restart_marked(tmp_path: Path) -> None:
    from simcluster import trace

    run = _torchrun("--nproc-per-node", 2, "--max-restarts", 1, "--faults", "crash:1@all_reduce#3",
                    "--trace", tmp_path / "t.json", EXAMPLE, tmp_path / "ckpt")
    assert run.returncode == 0, run.stderr
    first = trace.show(tmp_path / "t.json")
    again = trace.show(tmp_path / "t.restart1.json")
    assert "rank 1 crashed" in first and "restarted" not in first
    assert [line.split()[-3:] for line in again.splitlines() if " X " in line] == [
        ["restarted", "(restart", "1)"]] * 2
