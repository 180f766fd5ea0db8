"""``simcluster.MPI.util`` (``mpi4py.util``): pkl5, dtlib and sync from synchronous ranks.

Values are checked on every rank. ``sync``'s objects keep their shared state
with the run and wait by messages, so a seed gives the same values and
virtual times every run, and a lock that is never released ends in a
deadlock report.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI
from simcluster.MPI.util import dtlib, pkl5, sync

# ---- pkl5 ----


def pkl5_p2p(comm: MPI.Intracomm) -> Any:
    comm = pkl5.Intracomm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    smsg = {"rank": rank, "array": np.arange(4) * rank}
    req = comm.isend(smsg, right, tag=7)
    status = MPI.Status()
    rmsg = comm.recv(None, left, 7, status)
    assert isinstance(req, pkl5.Request) and len(req) >= 2  # header + pickle
    assert req.wait() is None and not req
    msg = None
    sreq = comm.issend(("m", rank), right, tag=8)
    msg = comm.mprobe(left, 8)
    got = msg.irecv().wait()
    sreq.wait()
    with pytest.raises(RuntimeError, match="unsupported"):
        comm.irecv(None, left, 0)
    return (rmsg["rank"], rmsg["array"].tolist(), status.Get_source(), status.Get_tag(),
            status.Get_count() > 0, got)


def test_pkl5_point_to_point_values_requests_and_matched_probes_on_every_rank() -> None:
    result = sc.run(pkl5_p2p, world_size=3)
    for rank in range(3):
        left = (rank - 1) % 3
        assert result[rank] == (left, [0, left, 2 * left, 3 * left], left, 7, True, ("m", left))


def pkl5_collectives(comm: MPI.Intracomm) -> Any:
    comm = pkl5.Intracomm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    out = [comm.bcast({"root": 1} if rank == 1 else None, root=1),
           comm.gather(rank * 10, root=0),
           comm.scatter([f"s{i}" for i in range(size)] if rank == 2 else None, root=2),
           comm.allgather(rank),
           comm.alltoall([(rank, i) for i in range(size)]),
           comm.alltoall(None)]
    with pytest.raises(MPI.Exception) as err:
        comm.gather(None, root=size)
    out.append(err.value.Get_error_class() == MPI.ERR_ROOT)
    with pytest.raises(ValueError, match="expecting 3 items, got 2"):
        comm.alltoall([0, 1])
    return out


def test_pkl5_collectives_give_every_rank_the_real_results() -> None:
    result = sc.run(pkl5_collectives, world_size=3)
    for rank in range(3):
        bcast, gathered, scattered, allgathered, alltoall, nones, root_error = result[rank]
        assert bcast == {"root": 1}
        assert gathered == ([0, 10, 20] if rank == 0 else None)
        assert scattered == f"s{rank}"
        assert allgathered == [0, 1, 2]
        assert alltoall == [(src, rank) for src in range(3)]
        assert nones == [None] * 3 and root_error


def pkl5_null_objects(comm: MPI.Intracomm) -> Any:
    comm = pkl5.Intracomm(comm)
    req = comm.isend("x", MPI.PROC_NULL)
    msg = comm.mprobe(MPI.PROC_NULL)
    return (bool(req), req.wait(), bool(req), msg == MPI.MESSAGE_NO_PROC, msg.recv(),
            msg == MPI.MESSAGE_NULL, pkl5.Request() == MPI.REQUEST_NULL,
            pkl5.Request().__eq__("x") is NotImplemented, pkl5.Message().__ne__(1) is NotImplemented)


def test_pkl5_proc_null_and_null_handles_behave_as_mpi4py() -> None:
    for value in sc.run(pkl5_null_objects, world_size=2):
        assert value == (True, None, False, True, None, True, True, True, True)


# ---- dtlib ----


@pytest.mark.parametrize("spec", ["i", "f8", "(3,4)i", "i,d", "c,(2,3)f,B"])
def test_dtlib_round_trips_numpy_dtypes(spec: str) -> None:
    for align in (False, True):
        dtype = np.dtype(spec, align=align)
        datatype = dtlib.from_numpy_dtype(dtype)
        try:
            assert dtlib.to_numpy_dtype(datatype) == dtype
            assert datatype.Get_extent()[1] == dtype.itemsize
        finally:
            datatype.Free()


def test_dtlib_reads_derived_types_and_refuses_what_numpy_cannot_lay_out() -> None:
    vector = MPI.INT.Create_vector(2, 3, 4)
    assert dtlib.to_numpy_dtype(vector) == np.dtype(
        {"names": ["f0", "f1"], "formats": [("i", (3,)), ("i", (3,))], "offsets": [0, 16],
         "itemsize": 28, "aligned": True})
    assert dtlib.to_numpy_dtype(MPI.DOUBLE_INT) == np.dtype("d,i", align=True)
    assert MPI._typealign(MPI.SHORT_INT) == 4 and MPI._typecode(MPI.INT) == "i"
    partial = MPI.INT.Create_subarray([2], [1], [0])
    with pytest.raises(ValueError, match="subarray"):
        dtlib.to_numpy_dtype(partial)
    with pytest.raises(ValueError, match="null"):
        dtlib.to_numpy_dtype(MPI.DATATYPE_NULL)
    with pytest.raises(ValueError, match="object"):
        dtlib.from_numpy_dtype("O")
    vector.Free()
    partial.Free()


# ---- sync ----


def counted(comm: MPI.Intracomm) -> Any:
    counter = sync.Counter(start=5, step=2, comm=comm, root=1)
    mine = [counter.next() for _ in range(3)] if comm.rank != 1 else []
    counter.free()
    counter.free()
    with pytest.raises(RuntimeError, match="counter already freed"):
        counter.next()
    with sync.Sequential(comm):
        order = sync_order.append(comm.rank) or list(sync_order)
    return sorted(sum(comm.allgather(mine), [])), order, MPI.Wtime()


sync_order: list[int] = []


def test_counter_values_are_unique_and_sequential_runs_in_rank_order() -> None:
    sync_order.clear()
    latency = sc.latency.Constant(1e-6)
    first = sc.run(counted, world_size=3, latency=latency)
    sync_order.clear()
    again = sc.run(counted, world_size=3, latency=latency)
    for rank in range(3):
        values, order, _ = first[rank]
        assert values == [5 + 2 * i for i in range(6)]
        assert order == list(range(rank + 1))
    assert [r[2] for r in first] == [r[2] for r in again]  # same virtual times, run after run


def exclusive(comm: MPI.Intracomm) -> Any:
    mutex = sync.Mutex(comm=comm)
    counter = sync.Counter(comm=comm)
    comm.Barrier()
    with mutex:
        assert mutex.locked() and mutex.count() == 1
        with pytest.raises(RuntimeError, match="cannot acquire already held mutex"):
            mutex.acquire()
        values = [next(counter) for _ in range(4)]
        time.sleep(0.001)  # others queue meanwhile
    with pytest.raises(RuntimeError, match="cannot release unheld mutex"):
        mutex.release()
    comm.Barrier()
    flags = comm.allgather(mutex.acquire(blocking=False))
    if mutex.locked():
        mutex.release()
    comm.Barrier()
    while not mutex.acquire(blocking=False):  # a polling loop: each failure costs poll_cost
        pass
    mutex.release()
    mutex.free()
    counter.free()
    return values, flags.count(True)


def test_mutex_excludes_hands_over_in_order_and_lets_one_nonblocking_acquire_win() -> None:
    for values, winners in sc.run(exclusive, world_size=3):
        assert values == list(range(values[0], values[0] + 4)) and values[0] % 4 == 0
        assert winners == 1


def recursive(comm: MPI.Intracomm) -> Any:
    mutex = sync.Mutex(recursive=True, comm=comm)
    counts = []
    with mutex, mutex, mutex:
        counts.append(mutex.count())
    counts.append(mutex.count())
    mutex.acquire()
    mutex.free()
    with pytest.raises(RuntimeError, match="mutex already freed"):
        mutex.locked()
    return counts


def test_recursive_mutex_counts_and_free_releases() -> None:
    assert sc.run(recursive, world_size=2) == [[3, 0], [3, 0]]


def condition(comm: MPI.Intracomm) -> Any:
    cv = sync.Condition(comm=comm)
    woken = 0
    if comm.rank == 0:
        comm.Barrier()
        while woken < comm.size - 1:
            with cv:
                woken += cv.notify()
            time.sleep(0.001)
    else:
        comm.Barrier()
        with cv:
            cv.wait()
    with pytest.raises(RuntimeError, match="cannot wait on unheld mutex"):
        cv.wait()
    cv.free()
    return woken


def test_condition_wakes_every_waiter() -> None:
    assert sc.run(condition, world_size=3) == [2, 0, 0]


def semaphore(comm: MPI.Intracomm) -> Any:
    sem = sync.Semaphore(2, comm=comm)
    inside = sync.Counter(comm=comm)
    most = 0
    with sem:
        most = inside.next(1) + 1
        time.sleep(0.001)
        inside.next(-1)
    comm.Barrier()  # every unit is back
    with pytest.raises(ValueError, match="released too many times"):
        sem.release()
    with pytest.raises(ValueError, match="non-negative"):
        sync.Semaphore(-1)
    most = max(comm.allgather(most))
    sem.free()
    inside.free()
    return most


def test_semaphore_admits_at_most_its_value() -> None:
    assert sc.run(semaphore, world_size=4) == [2] * 4


def never_released(comm: MPI.Intracomm) -> None:
    mutex = sync.Mutex(comm=comm)
    comm.Barrier()
    mutex.acquire()  # the rank that gets it first ends without releasing it


def test_a_lock_never_released_is_a_deadlock_naming_the_waiting_rank() -> None:
    with pytest.raises(sc.DeadlockError, match=r"rank \d waiting in recv\(buf=uint8\[0\], src=\d, tag=1\)"):
        sc.run(never_released, world_size=2)


# ---- simcluster mpirun: the import names ----


def test_mpirun_provides_mpi4py_util_with_its_pool(tmp_path: Any) -> None:
    script = tmp_path / "u.py"
    script.write_text(
        "import mpi4py.util.sync as sync\n"
        "from mpi4py.util import pkl5, dtlib\n"
        "from mpi4py import MPI\n"
        "comm = pkl5.Intracomm(MPI.COMM_WORLD)\n"
        "print(comm.allgather(comm.rank), dtlib.to_numpy_dtype(MPI.DOUBLE))\n"
        "from mpi4py.util.pool import ThreadPool\n"
        "with ThreadPool(2) as threads:\n"
        "    print('pool', threads.map(abs, range(-2, 1)))\n")
    done = subprocess.run([sys.executable, "-m", "simcluster", "mpirun", "-n", "2", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("[0, 1] float64") == 2
    assert lines.count("pool [2, 1, 0]") == 2
