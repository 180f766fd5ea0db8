"""Dynamic processes: ``Spawn``, ``Spawn_multiple``, ``Get_parent``, ports and name publishing.

Differential: three programs print under ``simcluster mpirun`` what they print
under MPICH's ``mpiexec`` with the real mpi4py (only the launched ranks print;
the spawned ones report through their parents):

* manager/worker: the world spawns three workers of another script with an
  argument, rank 0 hands out tasks as workers finish, then a gather, a reduce
  of the workers' own allreduce, and ``Merge`` with an allgather on the merged
  communicator;
* ports: the world split in two halves that meet by a published service name
  (``Open_port``, ``Publish_name``, ``Lookup_name``, ``Accept``, ``Connect``);
* ``Spawn_multiple`` of two scripts: ``errcodes``, each child's ``APPNUM``,
  ``COMM_WORLD`` and ``sys.argv``;
* ``Comm.Join`` over a socket one rank accepts on (blocking) and the other
  connects to, by the first one's host name;
* the ``wdir`` key of each command's info: the children start there.

Then what MPICH cannot show: the children's virtual start time, the same for
every seed, and the errors: a command that is no Python program, a spawn that
does not fit the platform, spawning on the shm transport or outside ``mpirun``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import simcluster as sc
from simcluster import MPI

from mpi_scripts import needs_mpiexec, run_real, run_simulated, simulate

MANAGER = """
    import sys
    from pathlib import Path
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    worker = str(Path(__file__).with_name("worker.py"))
    inter = world.Spawn(sys.executable, args=[worker, "scale=3"], maxprocs=3, root=0)
    print("spawned", isinstance(inter, MPI.Intercomm), inter.Get_size(), inter.Get_remote_size())
    root = MPI.ROOT if rank == 0 else MPI.PROC_NULL
    if rank == 0:
        tasks, results, active, status = list(range(10)), [], 0, MPI.Status()
        for w in range(inter.Get_remote_size()):
            inter.send(tasks.pop(0), dest=w, tag=1)
            active += 1
        while active:
            results.append(inter.recv(source=MPI.ANY_SOURCE, tag=2, status=status))
            inter.send(tasks.pop(0) if tasks else None, dest=status.Get_source(), tag=1)
            active -= not tasks and len(results) + active > 10
        print("results", sorted(results))
    counts = np.zeros(3, dtype="i")
    inter.Gather(None, [counts, MPI.INT], root=root)
    total = inter.reduce(None, op=MPI.SUM, root=root)
    if rank == 0:
        print("tasks done", int(counts.sum()), "sum of the workers' allreduce", total)
    merged = inter.Merge(high=False)
    print("merged", merged.Get_rank(), merged.Get_size(), merged.allgather(merged.Get_rank() * 10))
    merged.Free()
    inter.Disconnect()
    print("no parent", MPI.Comm.Get_parent() == MPI.COMM_NULL)
"""

WORKER = """
    import sys
    import numpy as np
    from mpi4py import MPI

    parent = MPI.Comm.Get_parent()
    world = MPI.COMM_WORLD
    scale = int(sys.argv[1].split("=")[1])
    done = 0
    while (task := parent.recv(source=0, tag=1)) is not None:
        parent.send(task * scale, dest=0, tag=2)
        done += 1
    parent.Gather(np.array([done], dtype="i"), None, root=0)
    parent.reduce(world.allreduce(done), op=MPI.SUM, root=0)
    merged = parent.Merge(high=True)
    merged.allgather(merged.Get_rank() * 10)
    merged.Free()
    parent.Disconnect()
    assert MPI.Comm.Get_parent() == MPI.COMM_NULL
"""

PORTS = """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    color = 0 if rank < size // 2 else 1
    half = world.Split(color, key=rank)
    service = "simcluster-test-service"
    if color == 0:
        port = MPI.Open_port() if half.Get_rank() == 0 else None
        if port is not None:
            MPI.Publish_name(service, port)
        world.Barrier()
        inter = half.Accept(port, root=0)
    else:
        world.Barrier()
        port = MPI.Lookup_name(service) if half.Get_rank() == 0 else None
        inter = half.Connect(port, root=0)
    print("joined", color, inter.Get_size(), inter.Get_remote_size())
    print("remote ranks", inter.allgather(rank))
    print("remote total", inter.allreduce(rank + 1))
    world.Barrier()
    if color == 0 and half.Get_rank() == 0:
        MPI.Unpublish_name(service, port)
        MPI.Close_port(port)
    inter.Disconnect()
    world.Barrier()
    try:
        MPI.Lookup_name(service)
    except MPI.Exception as exc:
        print("unpublished", exc.Get_error_class() == MPI.ERR_NAME)
"""

MULTIPLE = """
    import sys
    from pathlib import Path
    from mpi4py import MPI

    here = Path(__file__).parent
    world = MPI.COMM_WORLD
    errcodes = []
    inter = world.Spawn_multiple([sys.executable, sys.executable],
                                 [[str(here / "child_a.py")], [str(here / "child_b.py"), "extra"]],
                                 [2, 1], root=0, errcodes=errcodes)
    print("errcodes", errcodes if world.Get_rank() == 0 else "-")
    root = MPI.ROOT if world.Get_rank() == 0 else MPI.PROC_NULL
    print("children", inter.gather(None, root=root))
    inter.Disconnect()
"""

CHILD = """
    import os
    import sys
    from mpi4py import MPI

    parent = MPI.Comm.Get_parent()
    world = MPI.COMM_WORLD
    parent.gather((NAME, world.Get_rank(), world.Get_size(), world.Get_attr(MPI.APPNUM),
                   os.path.basename(sys.argv[0]), sys.argv[1:]), root=0)
    parent.Disconnect()
"""


JOIN = """
    import socket
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if rank == 0:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind((socket.gethostname(), 0))
        server.listen(1)
        world.send(server.getsockname(), dest=1)
        sock = server.accept()[0]
        server.close()
    else:
        sock = socket.create_connection(world.recv(source=0))
    inter = MPI.Comm.Join(sock.fileno())
    sock.close()
    print("joined", type(inter).__name__, inter.Get_size(), inter.Get_remote_size(), inter.Get_rank())
    got = inter.bcast("over the socket" if rank == 0 else None,
                      root=MPI.ROOT if rank == 0 else 0)
    print("bcast", got)
    inter.Free()
"""


WDIR = """
    import os
    import sys
    from pathlib import Path
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    start = os.getcwd()
    if rank == 0:
        os.makedirs("kids/a", exist_ok=True)
        os.makedirs("kids/b", exist_ok=True)
    world.Barrier()
    infos = [MPI.Info.Create(), MPI.Info.Create()]
    infos[0].Set("wdir", "kids/a")
    infos[1].Set("wdir", os.path.abspath("kids/b"))
    kid = str(Path(__file__).with_name("kid.py"))
    inter = world.Spawn_multiple([sys.executable] * 2, [[kid], [kid]], [2, 1], infos, root=0)
    for info in infos:
        info.Free()
    got = inter.gather(None, root=MPI.ROOT if rank == 0 else MPI.PROC_NULL)
    if rank == 0:
        print("children in", got)
    print("the parents stay", os.getcwd() == start)
    inter.Disconnect()
"""

KID = """
    import os
    from mpi4py import MPI

    parent = MPI.Comm.Get_parent()
    here = os.getcwd()
    parent.gather((os.path.basename(os.path.dirname(here)), os.path.basename(here)), root=0)
    parent.Disconnect()
"""


def _write(folder: Path, **scripts: str) -> Path:
    for name, text in scripts.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return folder / f"{next(iter(scripts))}.py"


PROGRAMS = {
    "manager": lambda folder: _write(folder, manager=MANAGER, worker=WORKER),
    "ports": lambda folder: _write(folder, ports=PORTS),
    "join": lambda folder: _write(folder, join=JOIN),
    "wdir": lambda folder: _write(folder, wdir=WDIR, kid=KID),
    "multiple": lambda folder: _write(folder, multiple=MULTIPLE,
                                      child_a=CHILD.replace("NAME", '"a"'),
                                      child_b=CHILD.replace("NAME", '"b"')),
}


@needs_mpiexec
@pytest.mark.parametrize(("program", "n"), [("manager", 1), ("manager", 3), ("ports", 2),
                                            ("ports", 4), ("multiple", 2),
                                            ("join", 2), ("wdir", 2)])
def test_spawning_program_prints_what_it_prints_under_mpiexec(tmp_path: Path, program: str,
                                                              n: int) -> None:
    script = PROGRAMS[program](tmp_path)
    real = run_real(tmp_path, script, n)
    simulated = run_simulated(tmp_path, script, n)
    assert simulated == real
    assert all(real)  # every rank printed something


# ---- what MPICH cannot show: virtual times, determinism, errors ----

TIMED = """
    import sys
    import time
    from pathlib import Path
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    time.sleep(0.001 * (world.Get_rank() + 1))  # the root (rank 1) spawns at 2 ms
    inter = world.Spawn(sys.executable, [str(Path(__file__).with_name("late.py"))], 2, root=1)
    root = MPI.ROOT if world.Get_rank() == 1 else MPI.PROC_NULL
    got = inter.gather(None, root=root)
    if got:
        print("children started at", [round(t * 1e3, 6) for t in got], "ms")
    inter.Disconnect()
"""

LATE = """
    from mpi4py import MPI

    start = MPI.Wtime()
    MPI.Comm.Get_parent().gather(start, root=1)
"""


def test_children_start_at_the_roots_virtual_time_for_every_seed(tmp_path: Path) -> None:
    script = _write(tmp_path, timed=TIMED, late=LATE)
    outputs = set()
    for seed in (0, 1, 7):
        proc = simulate(tmp_path, script, 2, options=("--exact", "--seed", str(seed), "--latency", "alphabeta:1e-6,1e-9"))
        assert (proc.returncode, proc.stderr) == (0, "")
        outputs.add(proc.stdout)
    assert outputs == {"children started at [2.0, 2.0] ms\n"}


BAD_COMMAND = """
    import sys
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    try:
        world.Spawn(COMMAND, ARGS, 1, root=0)
    except MPI.Exception as exc:
        print(world.Get_rank(), exc.Get_error_class() == MPI.ERR_SPAWN, exc)
"""


@pytest.mark.parametrize(("command", "args", "says"), [
    ("sys.executable", '["no_such_worker.py"]', "no_such_worker.py: no such file"),
    ('"/bin/ls"', "[]", "/bin/ls: not a Python interpreter or a Python script"),
])
def test_a_command_that_cannot_run_fails_spawn_on_every_rank(tmp_path: Path, command: str,
                                                             args: str, says: str) -> None:
    script = _write(tmp_path, bad=BAD_COMMAND.replace("COMMAND", command).replace("ARGS", args))
    proc = simulate(tmp_path, script, 3)
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = sorted(proc.stdout.splitlines())
    assert [line.split(" ", 2)[:2] for line in lines] == [[str(r), "True"] for r in range(3)]
    assert all(says in line for line in lines), lines


ONE_CHILD = """
    import sys
    from pathlib import Path
    from mpi4py import MPI

    MPI.COMM_WORLD.Spawn(sys.executable, [str(Path(__file__).with_name("late.py"))], 1)
"""


@pytest.mark.parametrize(("options", "n", "says"), [
    (("--latency", "dgx_h100:1"), 8, "9 ranks do not fit on 8"),
    (("--transport", "shm", "--procs", "2"), 2, "ranks can be added to a run on the memory transport only"),
])
def test_spawn_refuses_what_the_run_cannot_hold(tmp_path: Path, options: tuple[str, ...], n: int,
                                                says: str) -> None:
    script = _write(tmp_path, one=ONE_CHILD, late=LATE)
    proc = simulate(tmp_path, script, n, options=options)
    assert proc.returncode == 1
    assert f"rank 0: Spawn: {says}" in proc.stderr, proc.stderr


def spawn_in_run(comm: MPI.Intracomm) -> str:
    try:
        comm.Spawn("python", ["worker.py"], 1)
    except MPI.Exception as exc:
        return str(exc)
    return "spawned"


def test_spawn_outside_mpirun_says_where_it_works() -> None:
    said = sc.run(spawn_in_run, 2)
    assert list(said) == [f"rank {r}: Spawn: spawning needs a launcher that runs programs: run this "
                          "one with simcluster mpirun (simcluster.run starts a function, not a "
                          "program); no rank was started" for r in range(2)]


def lonely(comm: MPI.Intracomm) -> tuple[bool, bool]:
    parent = MPI.Comm.Get_parent()
    return isinstance(parent, MPI.Intercomm), parent == MPI.COMM_NULL


def test_a_launched_rank_has_a_null_parent_of_the_intercomm_class() -> None:
    assert list(sc.run(lonely, 2)) == [(True, True)] * 2
