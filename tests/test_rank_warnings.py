"""Each rank has its own warning filters, as each process of an ``mpiexec`` or torchrun job has.

A rank's ``warnings.filterwarnings`` / ``simplefilter`` (the common "keep the
other ranks quiet") and its ``warnings.catch_warnings`` blocks, also across
blocking calls where the other ranks run theirs, touch its own filters only;
the launcher's are back once the run ends. The program runs under MPICH's
``mpiexec`` with the real mpi4py too, and every rank's lines are compared.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from mpi_scripts import needs_mpiexec, run_real, run_simulated, script, simulate

FILTERS = """
    import warnings
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if rank != 0:
        warnings.filterwarnings("ignore", category=UserWarning)  # the others keep quiet
    world.Barrier()

    def quiet():
        return any(f[0] == "ignore" and f[2] is UserWarning for f in warnings.filters)

    print("quiet", quiet())
    world.Barrier()
    warnings.warn(f"from rank {rank}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        world.Barrier()  # the other ranks run their blocks meanwhile
        warnings.warn(f"recorded on {rank}")
    print("caught", [str(w.message) for w in caught])
    print("after the block quiet", quiet())
"""


def test_each_rank_filters_its_own_warnings(tmp_path: Path) -> None:
    proc = simulate(tmp_path, script(tmp_path, FILTERS), 3, options=("--prepend-rank",))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for rank in range(3):
        assert [line for line in lines if line.startswith(f"[{rank}]")] == [
            f"[{rank}] quiet {rank != 0}", f"[{rank}] caught ['recorded on {rank}']",
            f"[{rank}] after the block quiet {rank != 0}"]
    assert "UserWarning: from rank 0" in proc.stderr  # rank 0 alone did not silence it
    assert "from rank 1" not in proc.stderr and "from rank 2" not in proc.stderr


@needs_mpiexec
def test_warning_filters_per_rank_print_what_they_print_under_mpiexec(tmp_path: Path) -> None:
    prog = script(tmp_path, FILTERS.replace('warnings.warn(f"from rank {rank}")', "pass  # stdout only"))
    assert run_simulated(tmp_path, prog, 3) == run_real(tmp_path, prog, 3)


def test_the_launchers_filters_are_back_after_the_run(tmp_path: Path) -> None:
    from simcluster import cli

    before = list(warnings.filters)
    prog = script(tmp_path, """
        import warnings
        warnings.simplefilter("error")
    """)
    assert cli.main(["mpirun", "-n", "2", str(prog)]) == 0
    assert warnings.filters == before
