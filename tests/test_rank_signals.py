"""Each rank has its own signal handlers, as each process of an ``mpiexec`` or torchrun job has.

A rank's ``signal.signal`` sets its own handler and returns its own previous
one; ``os.kill`` of a rank's pid (and ``signal.raise_signal``) runs that
rank's handler: at once for the rank itself, and for another rank when it
comes back from the blocking call it is in (as CPython runs a handler once
the C call returns). A rank on a thread (torch's) may set handlers, as a
process's main thread may, and is its process's main thread. The same
program runs under MPICH's ``mpiexec`` with the real mpi4py, and under real
torchrun, and every rank's lines are compared.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from mpi_scripts import needs_mpiexec, run_real, run_simulated, script, simulate
from torchrun_scripts import under_both

HANDLERS = """
    import os
    import signal
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    seen = []
    fresh = [str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGPIPE)]
    print("fresh", fresh, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: seen.append(("usr1", rank)))
    print("previous", str(previous), signal.getsignal(signal.SIGUSR1) is not previous)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    world.Barrier()  # every rank's handlers are set
    os.kill(os.getpid(), signal.SIGUSR1)  # runs this rank's handler, no other's
    signal.raise_signal(signal.SIGUSR2)  # ignored
    print("self", seen)
    pids = world.allgather(os.getpid())
    if rank == 0:
        os.kill(pids[1], signal.SIGUSR1)  # rank 1 runs its handler once its barrier returns
    world.Barrier()
    print("after", seen)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    print("restored", str(signal.getsignal(signal.SIGUSR1)))
"""



def test_each_rank_sets_and_runs_its_own_handlers(tmp_path: Path) -> None:
    got = run_simulated(tmp_path, script(tmp_path, HANDLERS), 3)
    for rank in range(3):
        signalled = [("usr1", rank)] * (2 if rank == 1 else 1)  # rank 0 signalled rank 1 once
        assert got[rank] == ["fresh ['0', '0', '1'] True", "previous 0 True", f"self [('usr1', {rank})]",
                             f"after {signalled}", "restored 0"]


@needs_mpiexec
def test_handlers_per_rank_print_what_they_print_under_mpiexec(tmp_path: Path) -> None:
    prog = script(tmp_path, HANDLERS)
    assert run_simulated(tmp_path, prog, 3) == run_real(tmp_path, prog, 3)


def test_what_a_signal_cannot_do_is_refused_as_python_refuses_it(tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import signal
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        for args in ((signal.SIGKILL, signal.SIG_IGN), (0, signal.SIG_IGN), (signal.SIGUSR1, 5)):
            try:
                signal.signal(*args)
            except (OSError, ValueError, TypeError) as exc:
                print(type(exc).__name__, exc)
        pids = world.allgather(os.getpid())
        if world.Get_rank() == 1:
            world.Barrier()
        else:
            world.Barrier()
            os.kill(pids[0], 0)  # rank 0 is running: nothing happens
            print("rank 0 runs")
    """)
    got = run_simulated(tmp_path, prog, 2)
    refused = ["OSError [Errno 22] Invalid argument", "ValueError signal number out of range",
               "TypeError signal handler must be signal.SIG_IGN, signal.SIG_DFL, or a callable object"]
    assert got == [refused + ["rank 0 runs"], refused]
    for args in ((signal.SIGKILL, signal.SIG_IGN), (0, signal.SIG_IGN), (signal.SIGUSR1, 5)):
        with pytest.raises((OSError, ValueError, TypeError)) as real:  # this process's own refusals
            signal.signal(*args)
        assert f"{type(real.value).__name__} {real.value}" in refused


def test_a_pid_of_no_rank_is_no_process_and_a_default_action_ends_the_rank(tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import signal
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        if world.Get_rank() == 0:
            try:
                os.kill(os.getpid() + world.Get_size(), signal.SIGUSR1)  # past the last rank
            except ProcessLookupError as exc:
                print("gone:", exc)
            os.kill(os.getpid(), signal.SIGTERM)  # no handler: the rank ends as a killed process
            print("not reached")
    """)
    proc = simulate(tmp_path, prog, 2, options=("--prepend-rank",))
    assert proc.stdout == "[0] gone: [Errno 3] No such process\n"
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr


TORCH_MAIN = """
    import signal
    import threading
    import torch.distributed as dist

    dist.init_process_group("gloo")
    caught = []
    signal.signal(signal.SIGTERM, lambda number, frame: caught.append(number))  # a preemption hook
    signal.raise_signal(signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    with open(f"rank{dist.get_rank()}.txt", "w") as out:  # a file each: prints may interleave
        out.write(f"{main} {threading.current_thread().name} {caught == [signal.SIGTERM]}")
    dist.destroy_process_group()
"""


def test_a_torch_rank_is_its_process_s_main_thread_and_sets_handlers(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="simcluster torchrun needs torch: pip install 'simcluster[torch]'")
    got = under_both(tmp_path, TORCH_MAIN, 2)
    assert got["simcluster"] == got["torchrun"] == ["True MainThread True"] * 2
    assert threading.current_thread().name == "MainThread"  # (this process's own, untouched)


def test_a_rank_starts_with_the_handlers_of_an_interpreter_the_launcher_starts(tmp_path: Path) -> None:
    # (what the launcher ignores stays ignored across exec: the fresh interpreter inherits it too)
    every = """
        import signal
        print(sorted((int(s), str(signal.getsignal(s))) for s in signal.valid_signals()
                     if s not in (signal.SIGKILL, signal.SIGSTOP)))
    """
    fresh = subprocess.run([sys.executable, "-c", textwrap.dedent(every)], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert run_simulated(tmp_path, script(tmp_path, "from mpi4py import MPI\n" + textwrap.dedent(every)),
                         2) == [fresh, fresh]
