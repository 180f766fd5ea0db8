"""``mpi4py.futures`` and ``mpi4py.util.pool`` on simcluster: values, virtual times, and MPICH's output.

Programs run twice, under MPICH's ``mpiexec`` with the real mpi4py (each
rank's stdout to a file of its own) and under ``simcluster mpirun
--prepend-rank``, and must print the same lines on every rank:

* ``MPICommExecutor`` over ``COMM_WORLD`` (``map`` with ``chunksize`` and
  ``unordered``, ``starmap``, ``submit`` with ``as_completed``, an exception
  coming back), at 1, 2 and 3 ranks;
* the static mode, ``-m mpi4py.futures script.py``: ``MPIPoolExecutor.map``
  and an initializer on ranks 1..N-1, at 2 and 3 ranks;
* ``mpi4py.util.pool``: ``Pool`` on the static workers at 3 ranks, and
  ``ThreadPool`` on every rank with rank 0's ``Pool`` spawning its workers
  at 1 and 2 ranks.

Then simcluster's own checks, in process (``sc.run``): the virtual time of a
map is the workers' schedule, a worker's task sees ``get_comm_workers``, the
master's waits make progress (``done`` polling, ``wait``, ``collect``,
``compose``, timeouts in virtual time), and a thread pool's waits cost the
rank the wall time it waited; and under ``simcluster mpirun``: spawned
workers and their virtual time, and the static mode's command line.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import simcluster as sc
from simcluster import MPI
from simcluster.MPI import futures
from simcluster.MPI.util import pool

ROOT_DIR = Path(__file__).resolve().parent.parent


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel installs it here
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpiexec = [
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                       reason="the real mpi4py is not installed (pip install -e '.[mpi]')"),
    pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH or beside python "
                                               "(pip install -e '.[mpi]' brings MPICH's)"),
]

COMM_EXECUTOR = """
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor, as_completed

    def cube(x):
        return x ** 3

    def fails(x):
        raise ValueError(f"no {x}")

    comm = MPI.COMM_WORLD
    with MPICommExecutor(comm, root=0) as executor:
        if executor is not None:
            print("workers", executor.num_workers)
            print("map", list(executor.map(cube, range(10), chunksize=3)))
            print("unordered", sorted(executor.map(cube, range(7), unordered=True)))
            print("starmap", list(executor.starmap(pow, [(2, k) for k in range(6)])))
            futures = [executor.submit(divmod, 100, k) for k in range(1, 6)]
            print("as_completed", sorted(f.result() for f in as_completed(futures)))
            try:
                executor.submit(fails, 3).result()
            except ValueError as exc:
                print("raised", exc)
        else:
            print("served")
    print("after", comm.Get_rank())
"""

STATIC = """
    from mpi4py import MPI
    from mpi4py.futures import MPIPoolExecutor, get_comm_workers

    def setup(value):
        global OFFSET
        OFFSET = value

    def shifted(x):
        return x + OFFSET

    def where(x):
        workers = get_comm_workers()
        return workers.Get_size(), __name__

    if __name__ == "__main__":
        print("world", MPI.COMM_WORLD.Get_size())
        with MPIPoolExecutor(max_workers=1) as executor:
            print("workers", executor.num_workers)
            print("where", sorted(set(executor.map(where, range(8)))))
            print("squares", list(executor.map(pow, range(9), [2] * 9, chunksize=2)))
        with MPIPoolExecutor(initializer=setup, initargs=(100,)) as executor:
            print("shifted", list(executor.map(shifted, range(5))))
            print("unordered", sorted(executor.map(shifted, range(5), unordered=True)))
"""

UTIL_POOL = """
    import time
    from mpi4py import MPI
    from mpi4py.util.pool import Pool, ThreadPool

    def square(x):
        return x * x

    def nap(x):
        time.sleep(0.01)
        return -x

    if __name__ == "__main__":
        rank = MPI.COMM_WORLD.Get_rank()
        with ThreadPool(2) as threads:
            print("threads map", threads.map(square, range(6)))
            print("threads starmap", threads.starmap(pow, [(3, k) for k in range(4)]))
            print("threads apply", threads.apply_async(nap, (rank,)).get())
        if rank == 0:
            with Pool(2) as workers:
                print("pool map", workers.map(square, range(10), chunksize=3))
                print("pool imap", list(workers.imap(nap, range(4))))
                print("pool unordered", sorted(workers.imap_unordered(square, range(5))))
                print("pool starmap", workers.starmap_async(pow, [(2, k) for k in range(5)]).get())
                print("pool apply", workers.apply(divmod, (17, 5)))
                workers.close()
                workers.join()
"""

WDIR = """
    import os
    from mpi4py.futures import MPIPoolExecutor

    def where(_):
        with open("marker.txt") as f:  # relative: in the worker's own directory
            return os.path.basename(os.getcwd()), f.read()

    if __name__ == "__main__":
        start = os.getcwd()
        os.makedirs("work", exist_ok=True)
        with open("work/marker.txt", "w") as f:
            f.write("found")
        with MPIPoolExecutor(max_workers=2, wdir="work") as executor:
            print(sorted(set(executor.map(where, range(4)))))
        print("the master stays", os.getcwd() == start)
"""


def run_real(tmp_path: Path, script: Path, n: int, launch: list[str]) -> list[list[str]]:
    """Run under the real mpiexec; return each rank's stdout lines."""
    out = tmp_path / "real"
    out.mkdir()
    assert MPIEXEC is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_"))}
    proc = subprocess.run(
        [MPIEXEC, "-n", str(n), "-outfile-pattern", str(out / "out.%r"),
         "-errfile-pattern", str(out / "err.%r"), sys.executable, *launch, str(script)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    errors = "".join(p.read_text() for p in sorted(out.glob("err.*")))
    assert proc.returncode == 0, f"mpiexec failed: {proc.stderr}{errors}"
    files = [out / f"out.{r}" for r in range(n)]  # a rank that printed nothing may leave none
    return [f.read_text().splitlines() if f.exists() else [] for f in files]


def run_simulated(tmp_path: Path, script: Path, n: int, launch: list[str]) -> list[list[str]]:
    """Run under simcluster mpirun --prepend-rank; return each rank's lines."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT_DIR), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "mpirun", "--prepend-rank", "-n", str(n), *launch,
         str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    ranks: list[list[str]] = [[] for _ in range(n)]
    for line in proc.stdout.splitlines():
        match = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert match, f"a line without its rank prefix: {line!r}"
        ranks[int(match[1])].append(match[2])
    return ranks


CASES = [
    ("comm_executor", COMM_EXECUTOR, [], 1), ("comm_executor", COMM_EXECUTOR, [], 2),
    ("comm_executor", COMM_EXECUTOR, [], 3),
    ("static", STATIC, ["-m", "mpi4py.futures"], 2), ("static", STATIC, ["-m", "mpi4py.futures"], 3),
    ("util_pool", UTIL_POOL, ["-m", "mpi4py.futures"], 3),
    ("util_pool_spawned", UTIL_POOL, [], 1), ("util_pool_spawned", UTIL_POOL, [], 2),
    ("wdir_spawned", WDIR, [], 1),
]


@needs_mpiexec[0]
@needs_mpiexec[1]
@pytest.mark.parametrize(("name", "program", "launch", "n"), CASES,
                         ids=[f"{name}-{n}" for name, _, _, n in CASES])
def test_futures_program_prints_what_it_prints_under_mpiexec(
        tmp_path: Path, name: str, program: str, launch: list[str], n: int) -> None:
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(program))
    real = run_real(tmp_path, script, n, launch)
    assert any(real), "the real run printed nothing"
    assert run_simulated(tmp_path, script, n, launch) == real


# ---- simcluster's own checks, in process ----


def nap(seconds: float) -> float:
    time.sleep(seconds)  # inside a rank: a virtual sleep of the worker
    return seconds


def workers_seen(_: int) -> tuple[int, int]:
    workers = futures.get_comm_workers()
    return workers.Get_size(), MPI.COMM_WORLD.Get_rank()


def timed_map(comm: MPI.Intracomm, naps: list[float]) -> tuple[list[float], float] | None:
    with futures.MPICommExecutor(comm, root=0) as executor:
        if executor is None:
            return None
        start = MPI.Wtime()
        values = list(executor.map(nap, naps))
        return values, MPI.Wtime() - start


def test_a_map_takes_the_workers_schedule_in_virtual_time() -> None:
    naps = [1.0, 2.0, 1.0]  # two workers: rank 1 naps 1.0 then the third, rank 2 naps 2.0
    out = sc.run(timed_map, 3, args=(naps,))
    values, elapsed = out[0]
    assert values == naps and out[1] is None and out[2] is None
    assert elapsed == pytest.approx(2.0)  # 1 + 1 on one worker while the other naps 2
    alpha = 1e-3  # each task and each result is a message
    out = sc.run(timed_map, 3, args=(naps,), latency=sc.latency.AlphaBeta(alpha, 0.0))
    assert out[0][1] == pytest.approx(2.0 + 4 * alpha, rel=1e-6)  # task, result, task, result
    assert out == sc.run(timed_map, 3, args=(naps,), latency=sc.latency.AlphaBeta(alpha, 0.0))


def where_tasks_run(comm: MPI.Intracomm) -> list[tuple[int, int]] | None:
    with futures.MPICommExecutor(comm, root=1) as executor:
        if executor is None:
            return None
        with pytest.raises(RuntimeError, match="communicator is not accessible"):
            futures.get_comm_workers()
        return sorted(set(executor.map(workers_seen, range(12))))


def test_the_workers_are_the_other_ranks_and_see_their_communicator() -> None:
    out = sc.run(where_tasks_run, 4)
    assert out[1] == [(3, 0), (3, 2), (3, 3)]
    assert out[0] is None and out[2] is None and out[3] is None


def waits_progress(comm: MPI.Intracomm) -> dict[str, object] | None:
    with futures.MPICommExecutor(comm, root=0) as executor:
        if executor is None:
            return None
        seen: dict[str, object] = {}
        slow = executor.submit(nap, 0.5)
        polls = 0
        while not slow.done():  # polling progresses: each done() looks for the result
            polls += 1
        seen["polled"] = polls > 0 and slow.result() == 0.5
        start = MPI.Wtime()
        late = executor.submit(nap, 3.0)
        with pytest.raises(futures.TimeoutError):
            late.result(timeout=1.0)
        seen["timeout"] = round(MPI.Wtime() - start, 3)
        done, pending = futures.wait([late, executor.submit(nap, 0.1)],
                                     return_when=futures.FIRST_COMPLETED)
        seen["first"] = [f.result() for f in done]
        seen["collect"] = futures.collect([executor.submit(nap, t) for t in (0.2, 0.1)]).result()
        seen["compose"] = futures.compose(executor.submit(nap, 0.3), lambda v: v * 10).result()
        seen["late"] = late.result()
        seen["elapsed"] = round(MPI.Wtime() - start, 3)
        return seen


def test_the_masters_waits_make_progress_in_virtual_time() -> None:
    out = sc.run(waits_progress, 3)
    assert out[0] == {"polled": True, "timeout": 1.0, "first": [0.1], "collect": [0.2, 0.1],
                      "compose": 3.0, "late": 3.0, "elapsed": 3.0}


SPAWNING = """
    import time
    from mpi4py import MPI
    from mpi4py.futures import MPIPoolExecutor

    def nap(seconds):
        time.sleep(seconds)
        return MPI.COMM_WORLD.Get_size(), __name__

    if __name__ == "__main__":
        start = MPI.Wtime()
        with MPIPoolExecutor(max_workers=2) as executor:
            print(executor.num_workers, sorted(set(executor.map(nap, [1.0] * 4))))
        print(f"{MPI.Wtime() - start:.1f}")
"""


def test_an_executor_outside_a_static_pool_spawns_its_workers(tmp_path: Path) -> None:
    script = tmp_path / "spawning.py"
    script.write_text(textwrap.dedent(SPAWNING))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT_DIR), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "simcluster", "mpirun", "--exact", "-n", "1",
                           str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    # two spawned ranks (their own COMM_WORLD of 2, the script as __worker__), four 1 s naps
    assert proc.stdout.splitlines() == ["2 [(2, '__worker__')]", "2.0"]


STATIC_USAGE = ["usage: python -m mpi4py.futures <pyfile> [arg] ...",
                "   or: python -m mpi4py.futures -m <module> [arg] ...",
                "   or: python -m mpi4py.futures -c <string> [arg] ..."]


@pytest.mark.parametrize(("args", "code", "error"), [
    (["-h"], 0, ""), (["-x"], 1, "Unknown option: -x"),
    (["-m"], 1, "Argument expected for option: -m"), ([], 1, "No path specified for execution")])
def test_the_static_mode_checks_its_command_line_as_mpi4py_does(
        tmp_path: Path, args: list[str], code: int, error: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT_DIR), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "simcluster", "mpirun", "-n", "2", "python", "-m",
                           "mpi4py.futures", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stderr.splitlines()) == (code, [error] if error else [])
    assert [line.replace(Path(sys.executable).name, "python", 1) for line in
            proc.stdout.splitlines()] == STATIC_USAGE


def threads(comm: MPI.Intracomm) -> tuple[list[int], float, float]:
    with pool.ThreadPool(2) as workers:
        values = workers.map(abs, range(-4, 4))
        result = workers.apply_async(time.sleep, (0.3,))  # a thread sleeps 300 ms of wall time
        start = time.monotonic()  # the rank's virtual clock
        result.get()
        waited = time.monotonic() - start
    return values, waited, MPI.Wtime()


def test_a_rank_waiting_for_its_threads_is_charged_the_wall_time() -> None:
    out = sc.run(threads, 2)
    for values, waited, now in out:
        assert values == [4, 3, 2, 1, 0, 1, 2, 3]
        # about 300 ms: what the rank stood still, as a process would (less what the thread slept
        # before the rank began to wait, which a loaded machine can stretch: hence the margins)
        assert 0.1 < waited < 5.0
        assert now >= waited


def refused(comm: MPI.Intracomm) -> None:
    futures.ProcessPoolExecutor(1)


def test_a_process_pool_is_refused_inside_a_rank() -> None:
    with pytest.raises(Exception, match="cannot start processes"):
        sc.run(refused, 1)


def test_the_names_are_mpi4pys() -> None:
    mpi4py_futures = pytest.importorskip("mpi4py.futures")
    mpi4py_pool = pytest.importorskip("mpi4py.util.pool")
    assert futures.__all__ == mpi4py_futures.__all__
    assert pool.__all__ == mpi4py_pool.__all__
    for name in ("submit", "map", "starmap", "shutdown", "bootup", "num_workers"):
        assert hasattr(futures.MPIPoolExecutor, name)
