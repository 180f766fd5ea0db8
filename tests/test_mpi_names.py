"""simcluster.MPI's names: mpi4py's, with placeholders for what is not simulated."""

from __future__ import annotations

import pytest

import simcluster as sc
from simcluster import MPI


@pytest.mark.parametrize(("use", "text"), [
    (lambda: MPI.Win.Create(None), "MPI.Win.Create: one-sided communication (MPI windows)"),
    (lambda: MPI.File.Open(None, "x"), "MPI.File.Open: MPI-IO (MPI.File)"),
    (lambda: MPI.Open_port(), "MPI.Open_port: dynamic processes"),
    (lambda: MPI.Session.Init(), "MPI.Session.Init: MPI sessions"),
    (lambda: MPI.Intercomm(None), "MPI.Intercomm: intercommunicators"),
])
def test_unsimulated_features_raise_not_implemented_naming_the_feature(use, text: str) -> None:
    with pytest.raises(NotImplementedError, match=r"^" + text.replace("(", r"\(").replace(")", r"\)")
                       + ".* not simulated by simcluster"):
        use()


def test_unsimulated_communicator_methods_raise_when_a_rank_calls_them() -> None:
    def main(comm: MPI.Intracomm) -> str:
        try:
            comm.Spawn("worker.py")
        except NotImplementedError as exc:
            return str(exc)
        return "no error"

    for text in sc.run(main, world_size=2):
        assert text.startswith("MPI.Comm.Spawn: dynamic processes")


def test_names_mpi4py_lacks_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="mpi4py's MPI has no such name either"):
        MPI.Send  # noqa: B018 - the attribute access is the test


def test_constants_keep_mpich_values_and_2int_is_the_pair_type() -> None:
    assert (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.PROC_NULL, MPI.UNDEFINED) == (-2, -1, -1, -32766)
    assert getattr(MPI, "2INT") is MPI.TWOINT
    assert MPI.DOUBLE.Get_size() == 8 and MPI.INT.Get_size() == 4


def test_comm_world_outside_a_rank_says_how_to_run_the_code() -> None:
    with pytest.raises(RuntimeError, match=r"^MPI\.COMM_WORLD: used outside any rank; run the "
                                           r"script with `simcluster mpirun -n 4 script\.py`"):
        MPI.COMM_WORLD.Get_rank()


def _real_mpi4py_names() -> set[str]:
    """The module-level names of the installed real mpi4py's MPI (imported without initialising MPI)."""
    import subprocess
    import sys

    pytest.importorskip("mpi4py")
    code = ("import mpi4py; mpi4py.rc.initialize = mpi4py.rc.finalize = False; "
            "from mpi4py import MPI; print(mpi4py.__version__); "
            "print(' '.join(n for n in dir(MPI) if not n.startswith('__')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"the real mpi4py does not import: {done.stderr.strip()[-200:]}")
    version, names = done.stdout.splitlines()[-2:]
    if version != "4.1.2":
        pytest.skip(f"the names listed are mpi4py 4.1.2's; mpi4py {version} is installed")
    return set(names.split())


def test_every_name_of_the_real_mpi4py_is_provided_or_listed_with_a_reason() -> None:
    from simcluster.MPI import _unsimulated

    real = _real_mpi4py_names()
    missing = sorted(n for n in real - set(_unsimulated.NOT_PROVIDED) if not hasattr(MPI, n))
    assert not missing, f"provide these names of mpi4py's MPI, or list them in NOT_PROVIDED: {missing}"
    invented = sorted(set(_unsimulated.NOT_PROVIDED) - real)
    assert not invented, f"NOT_PROVIDED lists names mpi4py 4.1.2 does not have: {invented}"


def test_a_name_mpi4py_has_but_simcluster_lacks_says_so_and_why() -> None:
    from simcluster.MPI import _unsimulated

    absent = [n for n in _unsimulated.NOT_PROVIDED if not hasattr(MPI, n)]
    if not absent:
        pytest.skip("every listed name is provided now")
    name = absent[0]
    with pytest.raises(AttributeError, match=rf"^module 'simcluster\.MPI' has no attribute "
                                             rf"'{name}': mpi4py 4\.1\.2 has MPI\.{name}, which "
                                             "simcluster does not provide \\("):
        getattr(MPI, name)
