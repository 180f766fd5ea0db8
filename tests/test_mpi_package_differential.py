"""The ``mpi4py`` package under ``simcluster mpirun`` answers as the real one under MPICH's ``mpiexec``.

One program prints, on every rank, what the package and the environment say:
``mpi4py.rc`` and its effects (thread level, default error handler), the
package's attributes and submodules, sessions and their process sets, the ABI
queries and the error classes of null objects. It runs as ``python PROGRAM``,
as ``python -m mpi4py [-rc ...] PROGRAM ARGS`` and as ``-c CMD``, under both
launchers; every rank must print the same lines.

Needs the real mpi4py and an ``mpiexec``; skipped, with the reason, otherwise.
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


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel installs it here
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                       reason="the real mpi4py is not installed (pip install -e '.[mpi]')"),
    pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH or beside python "
                                               "(pip install -e '.[mpi]' brings MPICH's)"),
]

PROGRAM = textwrap.dedent('''
    import os, sys
    import mpi4py
    if len(sys.argv) > 1 and sys.argv[1] == "single":
        mpi4py.rc.threads = False
    if len(sys.argv) > 1 and sys.argv[1] == "fatal":
        mpi4py.rc(errors="fatal")
    from mpi4py import MPI
    import mpi4py.run, mpi4py.typing

    def error_class(fn, *args):
        try:
            fn(*args)
        except MPI.Exception as exc:
            return exc.Get_error_class()
        return None

    comm = MPI.COMM_WORLD
    print("argv", sys.argv[1:], __name__)
    print("package", mpi4py.__version__, mpi4py.__all__, os.path.basename(mpi4py.__file__),
          len(mpi4py.__path__), mpi4py.rc, sorted(k for k in vars(mpi4py.Rc) if k[0] != "_"))
    print("rc", mpi4py.rc.thread_level, mpi4py.rc.threads, mpi4py.rc.errors, mpi4py.rc.initialize)
    print("submodules", callable(mpi4py.run.main), callable(mpi4py.run.set_abort_status),
          sorted(mpi4py.typing.__all__))
    print("threads", MPI.Is_initialized(), MPI.Is_finalized(), MPI.Query_thread(),
          MPI.Is_thread_main())
    print("errhandler", comm.Get_errhandler() == MPI.ERRORS_RETURN,
          comm.Get_errhandler() == MPI.ERRORS_ARE_FATAL, MPI.COMM_SELF.Dup().Get_errhandler() ==
          comm.Get_errhandler())
    print("abi", MPI.Get_abi_version(), MPI.Get_abi_info().items(),
          len(MPI.Get_abi_fortran_info().items()))
    session = MPI.Session.Init()
    psets = [session.Get_nth_pset(i) for i in range(session.Get_num_psets())]
    group = session.Create_group("mpi://WORLD")
    world = MPI.Intracomm.Create_from_group(group)
    print("session", psets, [session.Get_pset_info(p).items() for p in psets],
          group.Get_rank() == comm.Get_rank(), world.Get_size(), world.allreduce(1),
          session.Get_info().items(), session.Get_errhandler() == MPI.ERRORS_RETURN,
          bool(session), session == MPI.Session(session), isinstance(session, MPI.Session))
    if mpi4py.rc.errors != "fatal":  # there an MPI error ends the job
        print("errors", error_class(session.Get_nth_pset, 9),
              error_class(session.Get_pset_info, "x"), error_class(MPI.SESSION_NULL.Get_num_psets),
              error_class(MPI.REQUEST_NULL.Free), error_class(MPI.Status().Get_count,
                                                              MPI.DATATYPE_NULL))
    world.Free(); group.Free(); session.Finalize()
    print("finalized", session == MPI.SESSION_NULL, bool(session), MPI.SESSION_NULL.toint())
''')

#: (name, python's arguments after `python`, the same for `simcluster mpirun -n N`)
FORMS = [
    ("script", ["PROGRAM", "a", "b"], ["PROGRAM", "a", "b"]),
    ("single", ["PROGRAM", "single"], ["PROGRAM", "single"]),
    ("fatal", ["PROGRAM", "fatal"], ["PROGRAM", "fatal"]),
    ("python -m mpi4py", ["-m", "mpi4py", "-rc", "thread_level='serialized'", "PROGRAM", "x"],
     ["-m", "mpi4py", "-rc", "thread_level='serialized'", "PROGRAM", "x"]),
    ("python -m mpi4py -m", ["-m", "mpi4py", "-m", "program", "y"],
     ["-m", "mpi4py", "-m", "program", "y"]),
    ("python -m mpi4py -c", ["-m", "mpi4py", "-c", "exec(open('program.py').read())", "z"],
     ["-m", "mpi4py", "-c", "exec(open('program.py').read())", "z"]),
    ("mpirun python -m mpi4py", ["-m", "mpi4py", "PROGRAM", "w"],
     ["python", "-m", "mpi4py", "PROGRAM", "w"]),
    ("mpirun python -c", ["-c", "exec(open('program.py').read())", "v"],
     ["python", "-c", "exec(open('program.py').read())", "v"]),
]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "MPI4PY_"))}


def run_real(folder: Path, n: int, args: list[str]) -> list[list[str]]:
    out = folder / "real"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    assert MPIEXEC is not None
    proc = subprocess.run([MPIEXEC, "-n", str(n), "-outfile-pattern", str(out / "out.%r"),
                           sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=folder, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [(out / f"out.{r}").read_text().splitlines() for r in range(n)]


def run_simulated(folder: Path, n: int, args: list[str]) -> list[list[str]]:
    proc = subprocess.run([sys.executable, "-m", "simcluster", "mpirun", "--prepend-rank", "-n",
                           str(n), *args], capture_output=True, text=True, timeout=300,
                          cwd=folder, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks: list[list[str]] = [[] for _ in range(n)]
    for line in proc.stdout.splitlines():
        match = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert match, f"a line without its rank prefix: {line!r}"
        ranks[int(match[1])].append(match[2])
    return ranks


def _masked(ranks: list[list[str]]) -> list[list[str]]:
    # a session's handle is the library's; its null handle (and all else) is compared
    return [[re.sub(r"/\S+", "PATH", line) for line in lines] for lines in ranks]


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize(("form", "real_args", "sim_args"), FORMS, ids=[f[0] for f in FORMS])
def test_the_package_says_what_it_says_under_mpiexec(tmp_path: Path, form: str, n: int,
                                                     real_args: list[str],
                                                     sim_args: list[str]) -> None:
    (tmp_path / "program.py").write_text(PROGRAM)
    fill = [lambda args: [("program.py" if a == "PROGRAM" else a) for a in args]][0]
    real = run_real(tmp_path, n, fill(real_args))
    simulated = run_simulated(tmp_path, n, fill(sim_args))
    assert _masked(simulated) == _masked(real)
