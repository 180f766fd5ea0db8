"""Intercommunicator programs print under ``simcluster mpirun`` what they print under ``mpiexec``.

Two programs of the kinds intercommunicators are for, each at 2, 3, 4 and 5
ranks, run twice: under MPICH's ``mpiexec`` with the real mpi4py (each rank's
stdout to a file of its own) and under ``simcluster mpirun --prepend-rank``.
Every rank must print the same lines in the same order.

* coupled codes: the world split in two halves, joined by ``Create_intercomm``;
  point-to-point across, every collective with the intercommunicator's roots
  (``ROOT``/``PROC_NULL``), nonblocking ones, ``Dup``/``Split``/``Create``, and
  ``Merge`` with a collective on the merged communicator;
* manager/worker: rank 0 hands out tasks over an intercommunicator to the
  other ranks as they finish, then reduces their counts.

Needs the real mpi4py and an ``mpiexec``; skipped, with the reason, when either is missing.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

from mpi_scripts import needs_mpiexec, run_real, run_simulated


COUPLED = """
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    color = 0 if rank < size // 2 else 1
    local = world.Split(color, key=rank)
    inter = local.Create_intercomm(0, world, size // 2 if color == 0 else 0, tag=11)
    print("inter", isinstance(inter, MPI.Intercomm), inter.Is_inter(), inter.Get_rank(),
          inter.Get_size(), inter.Get_remote_size(), inter.Get_remote_group().Get_size())
    me, nlocal, nremote = inter.Get_rank(), inter.Get_size(), inter.Get_remote_size()

    # point-to-point: local rank i talks to remote rank i % nremote
    peer = me % nremote
    req = inter.isend({"from": rank, "color": color}, dest=peer, tag=5)
    senders = [i for i in range(nremote) if i % nlocal == me]
    for i in senders:
        status = MPI.Status()
        got = inter.recv(source=i, tag=5, status=status)
        print("p2p from remote", status.Get_source(), got["from"], got["color"])
    req.wait()
    buf = np.zeros(4, dtype="i")
    if me < nremote and me < nlocal:
        sreq = inter.Isend(np.arange(4, dtype="i") + 10 * rank, dest=me, tag=6)
        inter.Recv(buf, source=me, tag=6)
        sreq.Wait()
        print("Sendrecv got", buf.tolist())

    # collectives: group 0's rank 0 is the root of the broadcasts and scatters
    def root_of(group):
        if color == group:
            return MPI.ROOT if me == 0 else MPI.PROC_NULL
        return 0

    data = np.zeros(3)
    if color == 0 and me == 0:
        data[:] = [1.5, 2.5, 3.5]
    inter.Bcast(data if root_of(0) != MPI.PROC_NULL else None, root=root_of(0))
    print("Bcast", data.tolist())
    print("bcast", inter.bcast({"key": "value"} if root_of(1) == MPI.ROOT else None, root=root_of(1)))
    total = np.zeros(2)
    inter.Allreduce(np.array([rank, 1.0]), total, op=MPI.SUM)
    print("Allreduce", total.tolist())
    print("allreduce max", inter.allreduce(rank * 10, op=MPI.MAX))
    gathered = np.full(nremote, -1, dtype="i") if root_of(1) == MPI.ROOT else None
    inter.Gather(np.array([rank], dtype="i"), gathered, root=root_of(1))
    print("Gather", None if gathered is None else gathered.tolist())
    print("gather", inter.gather(rank * rank, root=root_of(0)))
    part = np.zeros(2, dtype="d")
    send = np.arange(2 * nremote, dtype="d") if root_of(0) == MPI.ROOT else None
    inter.Scatter(send, part, root=root_of(0))
    print("Scatter", part.tolist() if color == 1 else None)
    print("scatter", inter.scatter([f"item{i}" for i in range(nremote)] if root_of(1) == MPI.ROOT
                                   else None, root=root_of(1)))
    everyone = np.zeros(nremote, dtype="i")
    inter.Allgather(np.array([rank], dtype="i"), everyone)
    print("Allgather", everyone.tolist())
    print("allgather", inter.allgather((color, me)))
    out = np.zeros(nremote, dtype="i")
    inter.Alltoall(np.array([100 * rank + j for j in range(nremote)], dtype="i"), out)
    print("Alltoall", out.tolist())
    print("alltoall", inter.alltoall([(rank, j) for j in range(nremote)]))
    red = np.zeros(1)
    inter.Reduce(np.array([float(rank)]), red if root_of(0) == MPI.ROOT else None, op=MPI.SUM,
                 root=root_of(0))
    print("Reduce", red.tolist())
    print("reduce", inter.reduce(rank + 1, op=MPI.PROD, root=root_of(1)))
    inter.Barrier()
    ibuf = np.zeros(2)
    r1 = inter.Iallreduce(np.array([1.0, float(rank)]), ibuf)
    r2 = inter.Ibarrier()
    MPI.Request.Waitall([r1, r2])
    print("Iallreduce", ibuf.tolist())

    # new communicators
    dup = inter.Dup()
    print("Dup", dup.Get_size(), dup.Get_remote_size(), dup.allreduce(1))
    half = inter.Split(me % 2, key=-me)
    if half != MPI.COMM_NULL:
        print("Split", half.Get_rank(), half.Get_size(), half.Get_remote_size(), half.allgather(rank))
        half.Free()
    else:
        print("Split null")
    merged = inter.Merge(high=(color == 0))
    print("Merge", merged.Get_rank(), merged.Get_size(), merged.allreduce(rank), merged.allgather(rank))
    for comm in (merged, dup, inter, local):
        comm.Free()
"""

MANAGER_WORKER = """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    manager = rank == 0
    local = world.Split(0 if manager else 1, key=rank)
    inter = local.Create_intercomm(0, world, 1 if manager else 0, tag=3)
    TASK, STOP = 1, 2
    if manager:
        tasks = list(range(1, 13))
        results = {}
        active = 0
        for worker in range(inter.Get_remote_size()):
            inter.send(tasks.pop(0), dest=worker, tag=TASK)
            active += 1
        while active:
            status = MPI.Status()
            task, value = inter.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            results[task] = value
            if tasks:
                inter.send(tasks.pop(0), dest=status.Get_source(), tag=TASK)
            else:
                inter.send(None, dest=status.Get_source(), tag=STOP)
                active -= 1
        print("results", sorted(results.items()))
        print("tasks done", inter.reduce(None, op=MPI.SUM, root=MPI.ROOT))
        print("workers", inter.gather(None, root=MPI.ROOT))
    else:
        done = 0
        while True:
            status = MPI.Status()
            task = inter.recv(source=0, tag=MPI.ANY_TAG, status=status)
            if status.Get_tag() == STOP:
                break
            inter.send((task, task * task), dest=0, tag=TASK)
            done += 1
        inter.reduce(done, op=MPI.SUM, root=0)
        inter.gather(local.Get_rank(), root=0)
        print("worker", local.Get_rank(), "of", local.Get_size(), "stopped")
    merged = inter.Merge(high=not manager)
    print("merged", merged.Get_rank(), merged.Get_size(), merged.allreduce(1))
"""

PROGRAMS = {"coupled": COUPLED, "manager_worker": MANAGER_WORKER}


@needs_mpiexec
@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_intercomm_program_prints_what_it_prints_under_mpiexec(tmp_path: Path, program: str,
                                                               n: int) -> None:
    script = tmp_path / f"{program}.py"
    script.write_text(textwrap.dedent(PROGRAMS[program]))
    real = run_real(tmp_path, script, n)
    assert all(real), "a rank of the real run printed nothing"
    sim = run_simulated(tmp_path, script, n)
    for rank, (want, got) in enumerate(zip(real, sim)):
        assert got == want, f"rank {rank} differs"


def test_intercomm_is_a_class_of_the_facade() -> None:
    assert issubclass(MPI.Intercomm, MPI.Comm)
    assert not issubclass(MPI.Intercomm, MPI.Intracomm)
    assert MPI.Intercomm() == MPI.COMM_NULL
    annotation = MPI.Intracomm | MPI.Intercomm  # as newer mpi4py test helpers annotate
    assert MPI.Intercomm in annotation.__args__


# ---- in one process (no mpiexec needed) ----

ALPHA = 2.0**-20
BETA = 2.0**-30


def halves(comm: MPI.Intracomm) -> tuple[int, MPI.Intracomm, MPI.Intercomm]:
    """Split ``comm`` in two halves joined by an intercommunicator (tag 9)."""
    color = 0 if comm.rank < comm.size // 2 else 1
    local = comm.Split(color, comm.rank)
    inter = local.Create_intercomm(0, comm, comm.size // 2 if color == 0 else 0, 9)
    return color, local, inter


def coupled(comm: MPI.Intracomm) -> tuple[object, ...]:
    color, local, inter = halves(comm)
    root = (MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL) if color == 0 else 0
    got = inter.bcast("from group 0" if root == MPI.ROOT else None, root=root)
    total = np.zeros(1)
    inter.Allreduce(np.array([float(comm.rank)]), total)
    merged = inter.Merge(high=color == 1)
    return (color, inter.Get_size(), inter.Get_remote_size(), got, total[0], merged.rank,
            merged.allreduce(comm.rank), inter.allgather(comm.rank), inter.Dup().allreduce(1))


@pytest.mark.parametrize("world_size", [2, 3, 5, 8])
def test_intercomm_collectives_follow_mpi_semantics(transport: str, world_size: int) -> None:
    out = sc.run(coupled, world_size, transport=transport, serializer="pickle")
    low = list(range(world_size // 2))
    high = list(range(world_size // 2, world_size))
    for rank, (color, size, remote, got, total, merged_rank, merged_sum, everyone, dups) in enumerate(out):
        mine, theirs = (low, high) if color == 0 else (high, low)
        assert (size, remote) == (len(mine), len(theirs))
        assert got == (None if color == 0 else "from group 0")
        assert total == sum(theirs)  # the other group's values
        assert merged_rank == rank  # the high=False group (low) first
        assert merged_sum == sum(range(world_size))
        assert everyone == theirs
        assert dups == len(theirs)


def timed_bcast(comm: MPI.Intracomm, n: int) -> float:
    color, _local, inter = halves(comm)
    comm.Barrier()
    start = MPI.Wtime()
    if color == 0:
        inter.Bcast(np.ones(n // 8) if inter.rank == 0 else None,
                    root=MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL)
    else:
        inter.Bcast(np.zeros(n // 8), root=0)
    return MPI.Wtime() - start


def timed_chain(comm: MPI.Intracomm, n: int) -> float:
    """What an intercomm Bcast from world rank 0 to ranks 2 and 3 sends, as plain messages."""
    halves(comm)  # the same start: the barrier below leaves ranks at the same times
    comm.Barrier()
    start = MPI.Wtime()
    if comm.rank == 0:
        comm.Send(np.ones(n // 8), dest=2)
    elif comm.rank == 2:
        buf = np.zeros(n // 8)
        comm.Recv(buf, source=0)
        comm.Send(buf, dest=3)
    elif comm.rank == 3:
        comm.Recv(np.zeros(n // 8), source=2)
    return MPI.Wtime() - start


def test_intercomm_bcast_costs_the_messages_it_sends() -> None:
    n = 1 << 20
    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    times = sc.run(timed_bcast, 4, args=(n,), latency=lat)
    chain = sc.run(timed_chain, 4, args=(n,), latency=lat)
    assert times[1] == 0.0  # PROC_NULL: nothing to do
    assert times[0] >= ALPHA + n * BETA  # the root's send to the remote leader (rendezvous)
    assert list(times) == pytest.approx(list(chain), rel=1e-12)


def bad_root(comm: MPI.Intracomm) -> str:
    _color, _local, inter = halves(comm)
    try:
        inter.Bcast(np.zeros(1), root=5)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_ROOT
        return str(exc)
    return "no error"


def test_intercomm_root_outside_the_remote_group_is_err_root() -> None:
    messages = sc.run(bad_root, 2)
    assert messages[0].startswith("rank 0: Bcast(root=5): root must be MPI.ROOT, MPI.PROC_NULL or "
                                  "in range(1) (the remote group)")


def intercomm_p2p(comm: MPI.Intracomm) -> tuple[int, int, object]:
    _color, _local, inter = halves(comm)
    status = MPI.Status()
    if inter.rank < inter.Get_remote_size():
        inter.send(comm.rank, dest=inter.rank, tag=4)
    if inter.rank < inter.Get_remote_size():
        got = inter.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
        return status.Get_source(), status.Get_tag(), got
    return -1, -1, None


def test_intercomm_p2p_names_remote_ranks() -> None:
    out = sc.run(intercomm_p2p, 4)
    assert list(out) == [(0, 4, 2), (1, 4, 3), (0, 4, 0), (1, 4, 1)]


def constructors(comm: MPI.Intracomm) -> tuple[bool, ...]:
    _color, local, inter = halves(comm)
    refused = []
    for make, arg in ((MPI.Intercomm, local), (MPI.Intracomm, inter)):
        try:
            make(arg)
        except TypeError:
            refused.append(True)
    return (*refused, inter.Is_inter(), MPI.Comm(inter).Is_inter(), not local.Is_inter(),
            MPI.Comm.Compare(inter, local) == MPI.UNEQUAL)


def test_intercomm_and_intracomm_handles_stay_apart() -> None:
    assert all(all(flags) and len(flags) == 6 for flags in sc.run(constructors, 2))
