"""``run(transport="mpi")``: ranks hosted by the processes of a real ``mpiexec`` job.

The tests start ``mpiexec -n 2`` and ``-n 3`` on this file (its ``__main__``
part runs every program below with ``transport="mpi"``, each MPI process
writing what it got to a file of its own) and compare every process's
results, virtual times and stats with the memory transport's; and they run
the whole conformance suite under ``mpiexec``, where every process runs the
same tests on the "mpi" column (``tests/conftest.py``). They need
the real mpi4py and MPICH's ``mpiexec`` (``pip install -e '.[mpi]'``) and
are skipped, with the reason, without them; the usage errors are checked
without MPI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc

AB = sc.latency.AlphaBeta(alpha=1e-6, beta=1e-9)
HERE = Path(__file__).resolve()


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel installs it here
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
NO_MPI4PY = "the real mpi4py is not installed (pip install -e '.[mpi]')"
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY, reason=NO_MPI4PY)
needs_mpi = pytest.mark.skipif(
    not HAVE_MPI4PY or MPIEXEC is None,
    reason=NO_MPI4PY if not HAVE_MPI4PY else "no mpiexec on PATH or beside python (pip install -e '.[mpi]')")

# ---- the programs, each run on both transports ----


async def exchange(comm: sc.Comm) -> Any:
    """Eager and rendezvous sends around a ring, ssend, ANY_SOURCE-free probes."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    small = await comm.sendrecv(comm.rank, dst=right, src=left)
    big = np.full(20_000, float(comm.rank))  # 160 kB: above the eager limit
    req = comm.isend(big, dst=right, tag=7)
    got = await comm.recv(src=left, tag=7)
    await req
    if comm.size > 1:
        if comm.rank == 0:
            await comm.ssend("sync", dst=1)
        elif comm.rank == 1:
            status = await comm.probe(src=0)
            assert status.nbytes > 0
            await comm.recv(src=0)
    return small, float(got.sum()), comm.now


async def collectives(comm: sc.Comm) -> Any:
    x = np.arange(4.0) * (comm.rank + 1)
    await comm.all_reduce(x)
    root = comm.size - 1
    b = await comm.broadcast({"from": comm.rank} if comm.rank == root else None, src=root)
    g = await comm.gather(comm.rank * 10, dst=0)
    s = await comm.scan(comm.rank + 1)
    a2a = await comm.all_to_all([comm.rank * 100 + i for i in range(comm.size)])
    await comm.barrier()
    return x.tolist(), b, g, s, a2a, comm.now


async def sub_communicators(comm: sc.Comm) -> Any:
    half = await comm.split(comm.rank % 2, key=-comm.rank)
    assert half is not None
    total = await half.all_reduce(comm.rank)
    return half.rank, half.size, total, comm.now


PROGRAMS = {"exchange": exchange, "collectives": collectives, "sub_communicators": sub_communicators}
WORLD = 5


def _outcome(result: sc.RunResult) -> dict[str, Any]:
    return json.loads(json.dumps({"values": list(result), "times": list(result.times),
                                  "stats": repr(result.stats), "transport": "?"}))


def _job(out: Path) -> None:
    """Under mpiexec: run every program on transport="mpi"; write this process's view of each."""
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    outcomes = {}
    for name, fn in PROGRAMS.items():
        result = sc.run(fn, WORLD, transport="mpi", latency=AB, seed=3)
        outcomes[name] = _outcome(result)

    async def where(comm: sc.Comm) -> str:
        return comm.transport

    outcomes["transport"] = list(sc.run(where, WORLD, transport="mpi"))
    (out / f"proc{rank}.json").write_text(json.dumps(outcomes))


def _run_job(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    assert MPIEXEC is not None
    return subprocess.run([MPIEXEC, *args], capture_output=True, text=True, timeout=timeout)


@needs_mpi
@pytest.mark.parametrize("procs", [2, 3])
def test_an_mpi_job_gives_the_memory_transports_results_times_and_stats(procs: int, tmp_path: Path) -> None:
    done = _run_job(["-n", str(procs), sys.executable, str(HERE), str(tmp_path)])
    assert done.returncode == 0, done.stdout + done.stderr
    views = [json.loads((tmp_path / f"proc{p}.json").read_text()) for p in range(procs)]
    for name, fn in PROGRAMS.items():
        expected = _outcome(sc.run(fn, WORLD, transport="memory", latency=AB, seed=3))
        for p, view in enumerate(views):  # every process gets the whole result
            assert view[name] == expected, (name, p)
    assert all(view["transport"] == ["mpi"] * WORLD for view in views)


@needs_mpi
def test_a_rank_that_raises_ends_the_job_with_its_error_on_every_process(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent("""
        import sys
        import simcluster as sc
        from mpi4py import MPI

        async def main(comm):
            if comm.rank == 3:
                raise KeyError("lost")
            return await comm.recv(src=3)

        if __name__ == "__main__":
            out = f"{sys.argv[1]}/proc{MPI.COMM_WORLD.Get_rank()}.txt"
            try:
                sc.run(main, 4, transport="mpi")
            except sc.RankError as exc:
                with open(out, "w") as f:
                    f.write(f"RankError {exc.rank} {type(exc.__cause__).__name__}")
    """))
    done = _run_job(["-n", "2", sys.executable, str(script), str(tmp_path)], timeout=120)
    got = [(tmp_path / f"proc{p}.txt").read_text() for p in range(2)]
    assert got == ["RankError 3 KeyError"] * 2, done.stdout + done.stderr


@needs_mpi
def test_a_process_that_dies_ends_the_job_promptly_not_a_hang(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent("""
        import os
        import simcluster as sc

        async def main(comm):
            if comm.rank == 3:  # hosted by MPI process 1
                os._exit(7)
            return await comm.recv(src=3)

        if __name__ == "__main__":
            sc.run(main, 4, transport="mpi")
    """))
    done = _run_job(["-n", "2", sys.executable, str(script)], timeout=60)  # mpiexec ends the job
    # Never a hang, never a success. Which status the job ends with is a race MPICH decides:
    # - the dead process's own status (7);
    # - process 0 noticed the loss first and ended with the TransportError that names it (1);
    # - mpiexec killed process 0 while cleaning up and reports that kill (signal 9), with its
    #   banner naming the bad termination.
    output = done.stdout + done.stderr
    assert done.returncode in (7, 1, 9), output
    if done.returncode == 1:
        assert "TransportError" in done.stderr and "process 1" in done.stderr, output
    if done.returncode == 9:
        assert "BAD TERMINATION" in output, output


@needs_mpi
def test_simcluster_run_takes_transport_mpi_under_mpiexec(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text("async def main(comm):\n    return await comm.all_reduce(comm.rank)\n")
    done = _run_job(["-n", "2", sys.executable, "-m", "simcluster", "run", str(script), "-n", "4",
                     "--transport", "mpi"], timeout=120)
    assert done.returncode == 0, done.stderr
    # the result is printed once, by MPI process 0
    assert [line for line in done.stdout.splitlines() if line.startswith("rank ")] == \
        [f"rank {r}: 6" for r in range(4)], done.stdout


@needs_mpi
@pytest.mark.timeout(900)  # a whole suite per process: 85 s on an idle 2-core machine, twice that loaded
@pytest.mark.parametrize("procs", [2, 3])
def test_the_conformance_suite_passes_on_every_process_of_an_mpi_job(procs: int, tmp_path: Path) -> None:
    # every process runs the same tests; tests/conftest.py keeps only the "mpi" column there
    done = subprocess.run(
        [str(MPIEXEC), "-n", str(procs), "-prepend-rank", sys.executable, "-m", "pytest", "-q",
         "-p", "no:cacheprovider", "--timeout", "120", str(HERE.parent / "conformance")],
        capture_output=True, text=True, timeout=900, cwd=HERE.parent.parent,
        env={**os.environ, "SIMCLUSTER_MPI_TMP": str(tmp_path)})
    summaries = re.findall(r"\[(\d+)\] (\d+) passed(?:, (\d+) skipped)?(?:, \d+ deselected)? in", done.stdout)
    assert done.returncode == 0 and len(summaries) == procs, done.stdout[-3000:] + done.stderr[-2000:]
    assert sorted(int(p) for p, *_ in summaries) == list(range(procs))
    assert len({(passed, skipped) for _, passed, skipped in summaries}) == 1  # the same tests on each
    assert int(summaries[0][1]) > 800 and "failed" not in done.stdout


@needs_mpi
def test_bench_transports_measures_the_mpi_transport_under_mpiexec() -> None:
    from simcluster.bench import transports

    figures = transports.measure_mpi_transport(round_trips=20, repeats=1)
    assert isinstance(figures, dict), figures
    assert set(figures) == {"rtt", "bw1048576", "bw67108864", "allreduce"}
    assert all(value > 0 for value in figures.values())


# ---- usage errors, without MPI ----


def test_keywords_the_mpi_job_decides_are_refused() -> None:
    async def main(comm: sc.Comm) -> None:
        return None

    with pytest.raises(sc.UsageError, match=r"run\(transport='mpi', procs=2\): the MPI job decides") as info:
        sc.run(main, 4, transport="mpi", procs=2)
    assert isinstance(info.value, ValueError) and info.value.op == "run(transport='mpi', procs=2)"


def test_without_mpi4py_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py raises ImportError

    async def main(comm: sc.Comm) -> None:
        return None

    with pytest.raises(sc.UsageError, match=r"mpi4py cannot be imported.*mpiexec -n P python SCRIPT"):
        sc.run(main, 2, transport="mpi")


@needs_mpi4py
def test_a_job_of_one_process_runs_the_ranks_in_it(tmp_path: Path) -> None:
    script = tmp_path / "single.py"
    script.write_text(textwrap.dedent("""
        import simcluster as sc

        async def main(comm):
            return await comm.all_reduce(comm.rank), comm.transport

        if __name__ == "__main__":
            print(list(sc.run(main, 3, transport="mpi")))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([(3, "memory")] * 3)


if __name__ == "__main__":
    _job(Path(sys.argv[1]))


MPI4PY_SCRIPT = """
import sys
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank)
buf = np.full(30_000, float(rank))  # above the eager limit: a rendezvous to the right
got = np.empty_like(buf)
comm.Sendrecv(buf, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)
print(f"rank {rank} of {size}: total {total}, from the left {got[0]:g}, at {MPI.Wtime():.9f}")
if rank == size - 1:
    print("last rank done", file=sys.stderr)
    sys.exit(3)
"""


@needs_mpi
@pytest.mark.parametrize("procs", [2, 3])
def test_simcluster_mpirun_hosts_the_ranks_on_an_mpi_job(procs: int, tmp_path: Path) -> None:
    script = tmp_path / "ring.py"
    script.write_text(MPI4PY_SCRIPT)
    common = ["-m", "simcluster", "mpirun", "-n", "5", "--exact", "--latency", "alphabeta:1us,1GB/s"]
    memory = subprocess.run([sys.executable, *common, str(script)], capture_output=True,
                            text=True, timeout=120)
    assert memory.returncode == 3, memory.stderr
    assert "rank 4 of 5: total 10, from the left 3" in memory.stdout
    done = _run_job(["-n", str(procs), sys.executable, *common, "--transport", "mpi", str(script)],
                    timeout=180)
    # the script's mpi4py is simcluster's (5 ranks, not the job's processes), the ranks are
    # hosted by the job, and process 0 alone writes the lines: the memory transport's text
    assert done.stdout == memory.stdout, done.stderr
    assert done.stderr == memory.stderr
    assert done.returncode == 3


@needs_mpi
def test_simcluster_mpirun_transport_mpi_reports_a_failing_rank_once(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("from mpi4py import MPI\n"
                      "if MPI.COMM_WORLD.Get_rank() == 2:\n"
                      "    raise ValueError('rank two gives up')\n"
                      "MPI.COMM_WORLD.barrier()\n")
    done = _run_job(["-n", "2", sys.executable, "-m", "simcluster", "mpirun", "-n", "4",
                     "--transport", "mpi", str(script)], timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("ValueError: rank two gives up") == 1, done.stderr
    assert f'File "{script}", line 3' in done.stderr
