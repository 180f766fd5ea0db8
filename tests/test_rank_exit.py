"""Each rank exits as a process: its own ``atexit`` handlers, run as it ends, and ``os._exit``.

A rank's ``atexit`` handlers run, last registered first, when its program
ends (inside the rank: its pid, its environment, its output), not when the
launching process does; ``unregister`` drops a rank's own; a handler that
raises is printed as CPython prints it. ``os._exit`` ends that rank at once,
the others go on, and what it printed before is kept. The programs run
under MPICH's ``mpiexec`` and real torchrun too, and the lines are compared.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_scripts import needs_mpiexec, run_real, run_simulated, script, simulate
from torchrun_scripts import under_both

HANDLERS = """
    import atexit
    import os
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()

    def bye(tag, *, who):
        print(f"{who} {tag} pid-is-mine={os.getpid() == pids[who]}", flush=True)

    pids = world.allgather(os.getpid())
    atexit.register(bye, "first", who=rank)
    atexit.register(bye, "dropped", who=rank)
    atexit.unregister(bye)
    atexit.register(bye, "kept", who=rank)
    atexit.register(bye, "last registered, first run", who=rank)
    world.Barrier()
    print("done", flush=True)
"""
LEAVING = HANDLERS.replace('    print("done", flush=True)', """\
    if rank == 1:
        print("leaving at once", flush=True)
        os._exit(0)  # no atexit handler of rank 1 runs
    print("done", flush=True)""")
"""The same, but rank 1 leaves by ``os._exit`` (not compared with mpiexec: MPICH's mpiexec
sometimes counts a process that leaves so as failed)."""



def test_a_rank_runs_its_own_handlers_as_it_ends_and_os_exit_ends_only_it(tmp_path: Path) -> None:
    got = run_simulated(tmp_path, script(tmp_path, LEAVING), 3)
    for rank in (0, 2):
        assert got[rank] == ["done", f"{rank} last registered, first run pid-is-mine=True",
                             f"{rank} kept pid-is-mine=True"]
    assert got[1] == ["leaving at once"]


@needs_mpiexec
def test_exits_print_what_they_print_under_mpiexec(tmp_path: Path) -> None:
    prog = script(tmp_path, HANDLERS)
    assert run_simulated(tmp_path, prog, 3) == run_real(tmp_path, prog, 3)


def test_a_handler_that_raises_is_printed_and_the_next_runs_and_os_exit_gives_the_status(tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import atexit
        import os
        from mpi4py import MPI

        atexit.register(print, "still run", flush=True)
        atexit.register(lambda: 1 / 0)
        if MPI.COMM_WORLD.Get_rank() == 1:
            os._exit(7)
    """)
    proc = simulate(tmp_path, prog, 2, options=("--prepend-rank",))
    assert proc.returncode == 7
    assert proc.stdout == "[0] still run\n"
    assert proc.stderr.startswith("[0] Exception ignored in atexit callback: <function <lambda> at ")
    assert "[0] Traceback (most recent call last):\n[0]   File " in proc.stderr
    assert "simcluster" not in proc.stderr and proc.stderr.endswith("[0] ZeroDivisionError: division by zero\n")


TORCH_EXIT = """
    import atexit
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = open(f"rank{rank}.txt", "w")  # a file per rank: two processes' prints may interleave
    atexit.register(dist.destroy_process_group)  # a common way to tidy up
    atexit.register(lambda: out.write(f"exits as RANK={os.environ['RANK']}\\n"))
    t = torch.ones(1)
    dist.all_reduce(t)
    out.write(f"sum {t.item()}\\n")
"""


def test_torch_ranks_run_their_handlers_inside_their_process_as_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="simcluster torchrun needs torch: pip install 'simcluster[torch]'")
    got = under_both(tmp_path, TORCH_EXIT, 2)  # (and no "Exception ignored": destroy found its group)
    assert got["simcluster"] == got["torchrun"] == [f"sum 2.0\nexits as RANK={r}\n" for r in range(2)]


def test_a_spawned_rank_runs_its_handlers_when_its_function_returns() -> None:
    pytest.importorskip("torch", reason="needs torch: pip install 'simcluster[torch]'")
    from simcluster.torch import spawn
    import atexit

    ran: list[tuple[int, int]] = []

    def fn(rank: int) -> None:
        atexit.register(lambda: ran.append((rank, os.getpid())))  # as the rank's process exits

    spawn(fn, nprocs=2)
    assert sorted(ran) == [(0, 5_000_000), (1, 5_000_001)]  # run already, inside each rank


HOOKED = """
    import sys
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    if rank == 1:  # rank 1's own hook: rank 0 keeps the interpreter's
        sys.excepthook = lambda kind, value, tb: print(f"rank {rank} hook: {kind.__name__}: {value}", flush=True)
    MPI.COMM_WORLD.Barrier()
    if rank == 1:
        raise RuntimeError("boom")
"""


def test_an_uncaught_exception_goes_to_the_ranks_own_excepthook(tmp_path: Path) -> None:
    proc = simulate(tmp_path, script(tmp_path, HOOKED), 2, options=("--prepend-rank",))
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "[1] rank 1 hook: RuntimeError: boom\n", "")


@needs_mpiexec
def test_an_excepthook_prints_what_it_prints_under_mpiexec(tmp_path: Path) -> None:
    from mpi_scripts import MPIEXEC

    prog = script(tmp_path, HOOKED)
    real = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(prog)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    simulated = simulate(tmp_path, prog, 2)
    assert (simulated.returncode, simulated.stdout, simulated.stderr) == (real.returncode, real.stdout, real.stderr)
