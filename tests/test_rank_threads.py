"""A thread a rank starts belongs to the rank's process, as a thread of an ``mpiexec`` or torchrun process does.

In the thread, ``os.getpid()``, the host name and ``threading.main_thread()``
are the rank's; ``threading.enumerate()`` and ``active_count()`` list the
rank's own threads only, not the other ranks' that run in the same
interpreter; what the thread prints is the rank's output. psutil sees the
rank's pid as a process (the one hosting it). The programs run
under MPICH's ``mpiexec`` with the real mpi4py and under real torchrun too,
and every rank's lines are compared.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mpi_scripts import needs_mpiexec, run_real, run_simulated, script, simulate
from torchrun_scripts import under_both

WORKERS = """
    import os
    import socket
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    main = threading.current_thread()
    started, stop = threading.Event(), threading.Event()
    seen = {}

    def inner():
        seen["inner pid"] = os.getpid()

    def work():
        seen["pid"] = os.getpid()
        seen["host"] = socket.gethostname()
        seen["main"] = threading.main_thread() is main
        nested = threading.Thread(target=inner)
        nested.start()
        nested.join()
        print("from the thread of rank", rank)
        started.set()
        stop.wait()

    worker = threading.Thread(target=work, name=f"worker{rank}")
    worker.start()
    started.wait()
    world.Barrier()  # every rank's worker is alive now
    print(seen["pid"] == os.getpid(), seen["inner pid"] == os.getpid(), seen["host"] == socket.gethostname(),
          seen["main"], threading.main_thread() is main)
    print(sorted(t.name for t in threading.enumerate()), threading.active_count())
    with ThreadPoolExecutor(2) as pool:
        print(sorted(set(pool.map(lambda _: os.getpid() == seen["pid"], range(4)))))
    stop.set()
    worker.join()
    world.Barrier()
    print(threading.active_count())
"""


def test_a_ranks_thread_is_part_of_its_process(tmp_path: Path) -> None:
    got = run_simulated(tmp_path, script(tmp_path, WORKERS), 3)
    assert got == [[f"from the thread of rank {r}", "True True True True True",
                    f"['MainThread', 'worker{r}'] 2", "[True]", "1"] for r in range(3)]


@needs_mpiexec
def test_threads_of_ranks_print_what_they_print_under_mpiexec(tmp_path: Path) -> None:
    prog = script(tmp_path, WORKERS)
    assert run_simulated(tmp_path, prog, 3) == run_real(tmp_path, prog, 3)


TORCH_WORKERS = """
    import os
    import threading

    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    started, stop = threading.Event(), threading.Event()
    seen = {}

    def work():
        seen["pid"] = os.getpid()
        seen["main"] = threading.main_thread().name
        seen["names"] = sorted(t.name for t in threading.enumerate())
        started.set()
        stop.wait()

    worker = threading.Thread(target=work, name=f"worker{rank}")
    worker.start()
    started.wait()
    dist.barrier()  # every rank's worker is alive now
    with open(f"rank{rank}.txt", "w") as out:
        print(seen["pid"] == os.getpid(), seen["main"], seen["names"], file=out)
        print(sorted(t.name for t in threading.enumerate()), file=out)
    stop.set()
    worker.join()
    dist.destroy_process_group()
"""


def test_threads_of_torch_ranks_see_what_they_see_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs torch: pip install 'simcluster[torch]'")
    got = under_both(tmp_path, TORCH_WORKERS, 3)
    assert got["simcluster"] == got["torchrun"]
    assert got["simcluster"][2] == "True MainThread ['MainThread', 'worker2']\n['MainThread', 'worker2']\n"


def test_outside_a_run_the_threading_functions_are_back() -> None:
    pytest.importorskip("torch", reason="needs torch: pip install 'simcluster[torch]'")
    from simcluster.torch import spawn

    def fn(rank: int) -> tuple[int, int, bool]:
        box: dict[str, object] = {}
        worker = threading.Thread(target=lambda: box.update(pid=os.getpid(), main=threading.main_thread()))
        worker.start()
        worker.join()
        return box["pid"] - os.getpid(), threading.active_count(), box["main"] is threading.current_thread()

    start = threading.Thread.start
    assert list(spawn(fn, nprocs=2)) == [(0, 1, True), (0, 1, True)]
    assert threading.Thread.start is start and threading.main_thread().name == "MainThread"
    assert threading.active_count() == len(threading.enumerate())


PSUTIL = """
    import os
    import psutil
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    me = psutil.Process()  # as a script logs its memory
    print(me.pid == os.getpid(), me.memory_info().rss > 0, me.is_running(), psutil.pid_exists(os.getpid()))
    print(psutil.Process(os.getpid()) == me, me.cpu_times().user >= 0)
"""


@needs_mpiexec
def test_psutil_sees_a_rank_as_a_process_as_under_mpiexec(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    prog = script(tmp_path, PSUTIL)
    assert run_simulated(tmp_path, prog, 2) == run_real(tmp_path, prog, 2) == [["True True True True", "True True"]] * 2


@pytest.mark.parametrize("after", ["time.sleep(1)  # the process is gone by now\nprint('still here')",
                                   "pass  # ends as its script does"])
def test_a_threads_os_exit_ends_its_rank_only_and_keeps_every_ranks_output(tmp_path: Path, after: str) -> None:
    prog = script(tmp_path, """
        import atexit
        import os
        import threading
        import time
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        atexit.register(print, "atexit of", rank, flush=True)
        print("started", flush=True)
        if rank == 1:  # a watchdog thread gives up on its process
            watchdog = threading.Thread(target=os._exit, args=(5,))
            watchdog.start()
            watchdog.join()
            AFTER
        else:
            print("done", flush=True)
    """.replace("AFTER", after.replace("\n", "\n" + " " * 12)))
    proc = simulate(tmp_path, prog, 3, options=("--prepend-rank",))
    assert proc.returncode == 5  # the whole simulation was not ended by the thread's os._exit
    lines = proc.stdout.splitlines()
    assert sorted(lines) == sorted(["[0] started", "[0] done", "[0] atexit of 0", "[1] started",
                                    "[2] started", "[2] done", "[2] atexit of 2"])


def test_a_thread_signalling_its_rank_runs_the_ranks_handler_on_the_ranks_stack(tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import signal
        import threading
        import time
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        main = threading.current_thread()

        def on_term(number, frame):
            print("handler on the main thread:", threading.current_thread() is main, "at", frame.f_code.co_name)
            raise SystemExit(3)

        signal.signal(signal.SIGTERM, on_term)
        if rank == 0:
            killer = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM))
            killer.start()
            killer.join()
            time.sleep(1)  # the handler runs as the sleep returns
            print("not reached")
        print("rank", rank, "done")
    """)
    proc = simulate(tmp_path, prog, 2, options=("--prepend-rank",))
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == ["[1] rank 1 done", "[0] handler on the main thread: True at <module>"]
