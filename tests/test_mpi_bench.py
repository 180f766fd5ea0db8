"""``mpi4py.bench`` under ``simcluster mpirun``: the model's exact times on mpi4py's lines, and MPICH's form.

Under ``--exact --latency alphabeta:ALPHA,BETA`` nothing but messages moves the
clock, and a message of n bytes between two idle ports takes ``ALPHA + n*BETA``
(docs/latency.md), eager or rendezvous alike. So a pingpong sample (half a
round trip) is ``ALPHA + n*BETA`` and a ring lap on p ranks ``p*(ALPHA +
n*BETA)``: the tests read those figures off the printed lines. The
differential runs the real mpi4py under MPICH's ``mpiexec`` and compares the
output's form (header lines, rows, sizes, column layout), not its times.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_scripts import MPIEXEC, ROOT_DIR, needs_mpiexec

ALPHA, BETA = 1e-6, 1e-9
EXACT = ("--exact", "--latency", f"alphabeta:{ALPHA},{BETA}")
PINGPONG_HEADER = ["# MPI PingPong Test",
                   "# Size [B]  Bandwidth [MB/s] | Time Mean [s] \u00b1 StdDev [s]  Samples"]
ROW = re.compile(r"^ *(\d+) +(\S+) \| (\S+) \u00b1 (\S+) +(\d+)$")


def bench(tmp_path: Path, n: int, *args: str, options: tuple[str, ...] = EXACT,
          python: bool = False, status: int = 0) -> tuple[list[str], str]:
    """Run ``simcluster mpirun [options] -n n [python] -m mpi4py.bench args``; return stdout lines, stderr."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT_DIR),
                                                       os.environ.get("PYTHONPATH", "")]))
    launcher = ["python"] if python else []
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "mpirun", *options, "-n", str(n), *launcher,
         "-m", "mpi4py.bench", *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == status, proc.stderr
    return proc.stdout.splitlines(), proc.stderr


def real_bench(tmp_path: Path, n: int, *args: str) -> list[str]:
    """Run ``mpiexec -n n python -m mpi4py.bench args`` with the real mpi4py; return stdout lines."""
    assert MPIEXEC is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_"))}
    proc = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py.bench", *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def hop(nbytes: int) -> float:
    """What one n-byte message costs under AlphaBeta(ALPHA, BETA) between idle ports."""
    return ALPHA + nbytes * BETA


# ---- the model's figures on mpi4py's lines ----


def test_pingpong_rows_report_alpha_plus_n_beta_eager_and_rendezvous(tmp_path: Path) -> None:
    lines, err = bench(tmp_path, 2, "pingpong", "-m", "1", "-n", str(1 << 18), "-s", "2",
                       "-l", "5", "--large-size", "65536", "--loop-large", "3")
    assert err == ""
    assert lines[:2] == PINGPONG_HEADER
    rows = [ROW.match(line) for line in lines[2:]]
    assert all(rows), lines
    sizes = [1 << k for k in range(19)]  # 2**17 and 2**18 go by rendezvous (eager_limit 64 KiB)
    assert [int(row[1]) for row in rows if row] == sizes
    for nbytes, row in zip(sizes, rows):
        assert row is not None
        assert row[3] == f"{hop(nbytes):.7e}"  # the mean, exactly the model's
        assert row[2] == f"{nbytes / hop(nbytes) / 1e6:.2f}"
        assert float(row[4]) < 1e-15  # every sample the same, up to float rounding
        assert int(row[5]) == (3 if nbytes > 65536 else 5)


def test_pingpong_runs_as_python_dash_m_with_thread_options(tmp_path: Path) -> None:
    lines, _ = bench(tmp_path, 2, "--threads", "--thread-level", "serialized", "pingpong",
                     "-n", "8", "-l", "3", "--no-header", "--no-stats", "-a", "none", python=True)
    assert lines == [f"{n:10d}{n / hop(n) / 1e6:18.2f}" for n in (1, 2, 4, 8)]


def test_pingpong_pickle_and_outband_time_the_pickled_message(tmp_path: Path) -> None:
    import pickle

    import numpy

    nbytes = len(pickle.dumps(numpy.empty(8, "B"), protocol=4))
    lines, _ = bench(tmp_path, 2, "pingpong", "-m", "8", "-n", "8", "-l", "3", "-p",
                     "--protocol", "4")
    row = ROW.match(lines[-1])
    assert row is not None and lines[:2] == PINGPONG_HEADER, lines
    assert row[3] == f"{hop(nbytes):.7e}"  # one message of the pickle's length each way
    lines, _ = bench(tmp_path, 2, "pingpong", "-m", "8", "-n", "8", "-l", "3", "-o",
                     "--threshold", "1024")
    row = ROW.match(lines[-1])
    assert row is not None and lines[:2] == PINGPONG_HEADER, lines
    counted = (float(row[3]) - ALPHA) / BETA  # pkl5's own framing: a whole number of bytes
    assert counted > 8 and counted == pytest.approx(round(counted), abs=1e-3)


def test_pingpong_on_one_rank_and_beyond_two(tmp_path: Path) -> None:
    one, _ = bench(tmp_path, 1, "pingpong", "-n", "4", "-l", "2", "--no-header")
    assert [ROW.match(line)[3] for line in one] == [f"{hop(n):.7e}" for n in (1, 2, 4)]  # type: ignore[index]
    three, _ = bench(tmp_path, 3, "pingpong", "-n", "4", "-l", "2", "--no-header")
    assert three[0].split("|")[1] == one[0].split("|")[1]  # rank 2 only joins the barriers


def test_ringtest_reports_p_hops_per_loop(tmp_path: Path) -> None:
    lines, _ = bench(tmp_path, 3, "ringtest", "-n", "1000", "-s", "2", "-l", "5")
    assert lines == [f"time for 5 loops = {5 * 3 * hop(1000):g} seconds (3 processes, 1000 bytes)"]
    assert lines == ["time for 5 loops = 3e-05 seconds (3 processes, 1000 bytes)"]
    default, _ = bench(tmp_path, 4, "ringtest", python=True)
    assert default == [f"time for 1 loops = {4 * hop(1):g} seconds (4 processes, 1 bytes)"]


def test_helloworld_prints_one_line_per_rank_in_rank_order(tmp_path: Path) -> None:
    lines, _ = bench(tmp_path, 3, "helloworld", options=(*EXACT, "--prepend-rank"))
    assert lines == [f"[{r}] Hello, World! I am process {r} of 3 on node0." for r in range(3)]
    wide, _ = bench(tmp_path, 11, "helloworld")
    assert wide[0] == "Hello, World! I am process  0 of 11 on node0."
    assert wide[10] == "Hello, World! I am process 10 of 11 on node0."


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    for command in (["helloworld", "-q"], ["ringtest", "-q"], ["pingpong", "-q", "-n", "2", "-l", "2"]):
        assert bench(tmp_path, 2, *command) == ([], "")


def test_futures_table_over_mpi_workers(tmp_path: Path) -> None:
    lines, _ = bench(tmp_path, 1, "futures", "-n", "4", "-w", "2", "-t", "3", "-l", "2")
    assert lines[:2] == ["# MPIPoolExecutor - 2 workers, 3 tasks/worker",
                         "# Size [B]  Tasks/s | Time Mean [s] \u00b1 StdDev [s]  Samples"]
    rows = [re.fullmatch(r" *(\d+) +(\d+) \| (\S+) \u00b1 (\S+) +2", line) for line in lines[2:]]
    assert [int(row[1]) for row in rows if row] == [1, 2, 4]
    assert all(row and float(row[3]) > 0 for row in rows)


def test_errors_end_every_rank_with_status_2(tmp_path: Path) -> None:
    lines, err = bench(tmp_path, 2, "nosuch", status=2)
    assert (lines, err.splitlines()[-1]) == (
        [], "python -m mpi4py.bench: error: unknown command 'nosuch'")
    try:
        import cupy  # noqa: F401
    except ImportError:
        lines, err = bench(tmp_path, 2, "pingpong", "-a", "cupy", status=2)
        assert err.splitlines()[-1].startswith(
            "python -m mpi4py.bench pingpong: error: argument -a/--array: cupy is not installed")
        assert err.splitlines()[-1].endswith("use -a numpy or -a none")
        assert err.count("error:") == 1  # rank 0 says it once


# ---- the form of MPICH's output ----


@needs_mpiexec
@pytest.mark.parametrize("args", [
    ["pingpong", "-n", "64", "-l", "10"],
    ["pingpong", "-m", "4", "-n", "1024", "-s", "1", "-l", "5", "--no-stats"],
    ["pingpong", "-n", "8", "-l", "5", "--no-header"],
    ["pingpong", "-n", "8", "-l", "5", "-p"],
])
def test_pingpong_form_matches_mpich(tmp_path: Path, args: list[str]) -> None:
    real = real_bench(tmp_path, 2, *args)
    ours, _ = bench(tmp_path, 2, *args)
    assert [line for line in ours if line.startswith("#")] == \
           [line for line in real if line.startswith("#")]
    assert len(ours) == len(real)
    assert [line.split()[0] for line in ours] == [line.split()[0] for line in real]
    for mine, theirs in zip(ours, real):
        assert len(mine) == len(theirs) and mine.find("|") == theirs.find("|")
        assert mine.find("\u00b1") == theirs.find("\u00b1")


@needs_mpiexec
def test_helloworld_and_ringtest_form_match_mpich(tmp_path: Path) -> None:
    real = real_bench(tmp_path, 3, "helloworld")
    ours, _ = bench(tmp_path, 3, "helloworld")
    assert [line.rsplit(" on ", 1)[0] for line in ours] == \
           [line.rsplit(" on ", 1)[0] for line in real]
    ring = re.compile(r"time for 4 loops = \S+ seconds \(3 processes, 16 bytes\)")
    real = real_bench(tmp_path, 3, "ringtest", "-n", "16", "-l", "4")
    ours, _ = bench(tmp_path, 3, "ringtest", "-n", "16", "-l", "4")
    assert len(real) == len(ours) == 1 and ring.fullmatch(real[0]) and ring.fullmatch(ours[0])
