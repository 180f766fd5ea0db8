"""Each rank of a launched script imports its own copy of pure-Python packages, installed ones too.

A package is put on ``sys.path`` as an installed package would be (its own
folder, found by import, not beside the script), with module-level state a
framework would keep per process. Under ``simcluster mpirun`` each rank must
see its own state, as each process of an ``mpiexec`` job does; a package
with a compiled extension module, the standard library and what ``--shared``
names are shared; ``--private`` copies a package the rule would share.
"""

from __future__ import annotations

import importlib.machinery
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from simcluster import cli
from simcluster._rank_modules import ModulePolicy, has_extensions


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


STATEFUL = """
    import functools
    from mpi4py import MPI

    _STATE = None  # set once per process, as accelerate's PartialState or ignite's idist model

    def setup():
        global _STATE
        if _STATE is None:
            _STATE = MPI.COMM_WORLD.Get_rank()
        return _STATE

    @functools.lru_cache(maxsize=None)
    def cached_rank():
        return MPI.COMM_WORLD.Get_rank()

    class Token:
        def __init__(self, n):
            self.n = n
"""


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder standing for site-packages, with a stateful pure-Python package in it."""
    folder = tmp_path / "site"
    write(folder, "statepkg/__init__.py", STATEFUL)
    write(folder, "statepkg/sub.py", "from . import setup\n")
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    forget_statepkg()  # a shared copy stays after a run, as an installed package's does


def forget_statepkg() -> None:
    for name in [n for n in sys.modules if n.partition(".")[0] == "statepkg"]:
        del sys.modules[name]


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = cli.main(["mpirun", "--exact", "--latency", "zero", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    return rc, out, err


PROG = """
    import statepkg, statepkg.sub
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    comm.Barrier()  # every rank has imported statepkg before any sets its state
    first = statepkg.setup()
    comm.Barrier()
    print(comm.rank, first, statepkg.setup(), statepkg.cached_rank(), statepkg.sub.setup is statepkg.setup)
"""


def test_each_rank_has_its_own_copy_of_an_installed_pure_python_package(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: Path) -> None:
    prog = write(tmp_path, "prog.py", PROG)
    rc, out, err = run(capsys, "-n", 3, prog)
    assert (rc, err) == (0, "")
    assert sorted(out.splitlines()) == ["0 0 0 0 True", "1 1 1 1 True", "2 2 2 2 True"]
    assert "statepkg" not in sys.modules  # the ranks' copies went with the run


def test_shared_names_a_package_every_rank_shares(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: Path) -> None:
    prog = write(tmp_path, "prog.py", PROG)
    rc, out, err = run(capsys, "-n", 3, "--shared", "statepkg", prog)
    assert (rc, err) == (0, "")
    # one module for all: the first rank to call setup() set the state of every rank
    assert len(out.splitlines()) == 3
    assert len({line.split(" ", 1)[1] for line in out.splitlines()}) == 1


def test_a_package_with_a_compiled_extension_is_shared_unless_named_private(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: Path) -> None:
    # an extension module is loaded once per process: such a package is shared, as torch is
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (site / "statepkg" / f"_native{suffix}").write_bytes(b"")  # never imported: its presence decides
    prog = write(tmp_path, "prog.py", PROG)
    rc, out, err = run(capsys, "-n", 2, prog)
    assert (rc, err) == (0, "")
    assert len({line.split(" ", 1)[1] for line in out.splitlines()}) == 1  # one state for all
    forget_statepkg()
    rc, out, err = run(capsys, "-n", 2, "--private", "statepkg", prog)
    assert (rc, err) == (0, "")
    assert sorted(out.splitlines()) == ["0 0 0 0 True", "1 1 1 1 True"]


def test_objects_unpickle_with_the_receiving_ranks_copy_of_their_class(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: Path) -> None:
    prog = write(tmp_path, "prog.py", """
        import statepkg
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.send(statepkg.Token(7), dest=1)
        else:
            got = comm.recv(source=0)
            print(got.n, type(got) is statepkg.Token)
    """)
    rc, out, err = run(capsys, "-n", 2, prog)
    assert (rc, err) == (0, "")
    assert out == "7 True\n"


def test_the_standard_library_and_packages_it_pulls_in_stay_shared(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = write(tmp_path, "prog.py", """
        import json, logging, sys
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        ids = comm.allgather((id(json), id(logging), id(sys.modules["numpy"])))
        print(comm.rank, len(set(ids)))
    """)
    rc, out, err = run(capsys, "-n", 3, prog)
    assert (rc, err) == (0, "")
    assert sorted(out.splitlines()) == ["0 1", "1 1", "2 1"]


def test_copies_share_their_compiled_code(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: Path) -> None:
    # each copy runs the module's body for itself; the code object is read from disk once
    prog = write(tmp_path, "prog.py", """
        import statepkg
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        codes = comm.allgather(id(statepkg.setup.__code__))
        funcs = comm.allgather(id(statepkg.setup))
        print(comm.rank, len(set(codes)), len(set(funcs)))
    """)
    rc, out, err = run(capsys, "-n", 3, prog)
    assert (rc, err) == (0, "")
    assert sorted(out.splitlines()) == ["0 1 3", "1 1 3", "2 1 3"]


@pytest.mark.parametrize(("argv", "said"), [
    (["--shared", "statepkg.sub"], "--shared 'statepkg.sub': name a top-level package"),
    (["--shared", "statepkg", "--private", "statepkg"], "--shared and --private both name statepkg"),
])
def test_shared_and_private_take_top_level_names_once(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], said: str) -> None:
    prog = write(tmp_path, "prog.py", "print('ran')\n")
    rc, out, err = run(capsys, "-n", 2, *argv, prog)
    assert rc == 2 and out == ""
    assert said in err


def test_the_rule_in_the_policy_alone(site: Path) -> None:
    write(site, "plainpkg/__init__.py", "VALUE = 1\n")  # statepkg needs mpi4py, not always installed
    policy = ModulePolicy(shared=["sharedpkg"], private=["json"])
    policy.install()
    try:
        import plainpkg  # noqa: F401 - imported outside a rank: the process's, as simcluster's own

        assert not policy.private("plainpkg")
        assert not policy.private("os") and not policy.private("numpy.linalg")
        assert policy.private("json")  # named private: the name wins
        assert not policy.private("sharedpkg")
        assert not policy.private("simcluster.mpirun")
    finally:
        policy.uninstall()
        sys.modules.pop("plainpkg", None)
    assert has_extensions(sys.modules["numpy"])
    assert not has_extensions(sys.modules["json"])


def test_each_rank_has_its_own_environment_with_mpiexecs_variables(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARED_SETTING", "launcher")
    prog = write(tmp_path, "prog.py", """
        import os
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        os.environ["MINE"] = str(comm.rank)  # as a process: only this rank's environment
        if comm.rank == 1:
            del os.environ["SHARED_SETTING"]
        comm.Barrier()
        print(comm.rank, os.environ["PMI_RANK"], os.environ["PMI_SIZE"], os.environ["MPI_LOCALRANKID"],
              os.environ["MPI_LOCALNRANKS"], os.environ["MINE"], os.environ.get("SHARED_SETTING"))
    """)
    rc, out, err = run(capsys, "-n", 3, prog)
    assert (rc, err) == (0, "")
    assert sorted(out.splitlines()) == ["0 0 3 0 3 0 launcher", "1 1 3 1 3 1 None",
                                        "2 2 3 2 3 2 launcher"]
    import os

    assert "MINE" not in os.environ and "PMI_RANK" not in os.environ
    assert os.environ["SHARED_SETTING"] == "launcher"


def test_code_run_outside_sys_modules_imports_private_copies(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: Path) -> None:
    # a test runner exec's a module into a namespace of its own (never in sys.modules): what that
    # code imports is still the rank's own, not shared as if a shared package had imported it
    prog = write(tmp_path, "prog.py", """
        import types
        from mpi4py import MPI

        namespace = types.ModuleType("exec_d")
        exec("import statepkg", namespace.__dict__)
        comm = MPI.COMM_WORLD
        comm.Barrier()
        first = namespace.statepkg.setup()
        comm.Barrier()
        print(comm.rank, first)
    """)
    rc, out, err = run(capsys, "-n", 2, prog)
    assert (rc, err) == (0, "")
    assert sorted(out.splitlines()) == ["0 0", "1 1"]
