"""Window programs (``MPI.Win``) print under ``simcluster mpirun`` what they print under ``mpiexec``.

Five programs of the kinds windows are for, each at 2, 3 and 4 ranks, run
twice: under MPICH's ``mpiexec`` with the real mpi4py (each rank's stdout to a
file of its own) and under ``simcluster mpirun --prepend-rank``. Every rank
must print the same lines in the same order.

* a distributed counter: ``Fetch_and_op`` on rank 0's window under
  ``Lock``/``Unlock``;
* a halo exchange: ``Put`` into the neighbours' ghost cells between ``Fence``s;
* a shared-memory halo: ``Allocate_shared`` on ``Split_type(COMM_TYPE_SHARED)``,
  neighbours' segments read through ``Shared_query`` views;
* ``Get_accumulate`` and ``Compare_and_swap`` (a ticket taken in turn);
* post-start-complete-wait on a ring.

Then simcluster's own checks, in process: a Fence costs a barrier and an
operation a message, an access outside the target's window and conflicting
accesses name both ranks, calls outside an epoch are MPICH's
``ERR_RMA_SYNC``, and transports other than memory refuse windows up front.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

from mpi_scripts import needs_mpiexec, run_real, run_simulated


COUNTER = """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    win = MPI.Win.Allocate(MPI.INT.Get_size() if rank == 0 else 0, MPI.INT.Get_size(), comm=comm)
    if rank == 0:
        np.frombuffer(win.tomemory(), dtype="i")[:] = 0
    comm.Barrier()
    one, got = np.ones(1, "i"), np.zeros(1, "i")
    mine = []
    for _ in range(5):
        win.Lock(0, MPI.LOCK_SHARED)
        win.Fetch_and_op(one, got, 0, 0, MPI.SUM)
        win.Unlock(0)
        mine.append(int(got[0]))
    every = sorted(v for vals in comm.allgather(mine) for v in vals)
    print("distinct tickets", every == list(range(5 * size)), "increasing", mine == sorted(mine))
    comm.Barrier()
    final = np.zeros(1, "i")
    win.Lock(0, MPI.LOCK_SHARED)
    win.Get(final, 0)
    win.Unlock(0)
    print("final", int(final[0]))
    win.Free()
"""

HALO = """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 4
    cells = np.zeros(n + 2, dtype="d")  # cells[0] and cells[-1] are ghosts
    cells[1:-1] = rank * 10 + np.arange(n)
    win = MPI.Win.Create(cells, cells.itemsize, comm=comm)
    left, right = (rank - 1) % size, (rank + 1) % size
    for step in range(3):
        win.Fence()
        win.Put(cells[1:2], left, n + 1)  # my first cell is my left neighbour's right ghost
        win.Put(cells[n:n + 1], right, 0)  # my last cell is my right neighbour's left ghost
        win.Fence()
        cells[1:-1] += 0.5 * (cells[:-2] + cells[2:]) - cells[1:-1]
        print(step, " ".join(f"{x:.3f}" for x in cells))
    win.Fence(MPI.MODE_NOSUCCEED)
    print("attrs", win.Get_attr(MPI.WIN_SIZE), win.Get_attr(MPI.WIN_DISP_UNIT),
          win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_CREATE)
    win.Free()
"""

SHARED = """
    import numpy as np
    from mpi4py import MPI

    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    rank, size = node.Get_rank(), node.Get_size()
    n = 3
    win = MPI.Win.Allocate_shared(n * 8, 8, comm=node)
    mine = np.frombuffer(win.tomemory(), dtype="d")
    buf, unit = win.Shared_query((rank + 1) % size)
    right = np.frombuffer(buf, dtype="d")
    buf, unit = win.Shared_query((rank - 1) % size)
    left = np.frombuffer(buf, dtype="d")
    print("unit", unit, "flavor", win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_SHARED)
    for step in range(2):
        win.Fence()
        mine[:] = rank * 100 + step * 10 + np.arange(n)
        win.Fence()
        print(step, "left", left.tolist(), "right", right.tolist())
    win.Fence(MPI.MODE_NOSUCCEED)
    win.Free()
    node.Free()
"""

ATOMICS = """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mem = np.zeros(size + 1, dtype="l")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    # Get_accumulate: every rank adds to its own slot of rank 0's window, twice
    old = np.zeros(1, "l")
    for k in range(2):
        win.Fence()
        win.Get_accumulate(np.array([rank + 1], "l"), old, 0, rank, MPI.SUM)
        win.Fence()
        print("get_accumulate", k, int(old[0]))
    fetched = np.zeros(size, "l")
    win.Fence()
    win.Get_accumulate(np.zeros(size, "l"), fetched, 0, 0, MPI.NO_OP)
    win.Fence()
    print("no_op", fetched.tolist())
    # Compare_and_swap: a ticket in the last slot, taken in rank order
    result = np.zeros(1, "l")
    for turn in range(size):
        if turn == rank:
            win.Lock(0)
            win.Compare_and_swap(np.array([rank + 1], "l"), np.array([rank], "l"), result, 0, size)
            win.Unlock(0)
            print("cas saw", int(result[0]))
        comm.Barrier()
    win.Lock(0)
    win.Compare_and_swap(np.array([-1], "l"), np.array([12345], "l"), result, 0, size)
    win.Unlock(0)
    print("cas failed compare", int(result[0]))
    win.Free()
"""

PSCW = """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    inbox = np.full(2, -1, dtype="i")
    win = MPI.Win.Create(inbox, inbox.itemsize, comm=comm)
    group = win.Get_group()
    left, right = (rank - 1) % size, (rank + 1) % size
    to_right = group.Incl([right])
    from_left = group.Incl([left])
    for step in range(2):
        win.Post(from_left)
        win.Start(to_right)
        win.Put(np.array([rank, step], "i"), right)
        win.Complete()
        win.Wait()
        print(step, inbox.tolist())
    win.Post(from_left)
    win.Start(to_right)
    win.Complete()
    while not win.Test():
        pass
    print("test done")
    for g in (to_right, from_left, group):
        g.Free()
    win.Free()
"""

PROGRAMS = {"counter": COUNTER, "halo": HALO, "shared": SHARED, "atomics": ATOMICS, "pscw": PSCW}


@needs_mpiexec
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_window_program_prints_what_it_prints_under_mpiexec(tmp_path: Path, program: str,
                                                             n: int) -> None:
    script = tmp_path / f"{program}.py"
    script.write_text(textwrap.dedent(PROGRAMS[program]))
    real = run_real(tmp_path, script, n)
    assert any(real), "the real run printed nothing"
    assert run_simulated(tmp_path, script, n) == real


# ---- simcluster's own checks, in process ----


def fence_then_put(comm: MPI.Intracomm, nbytes: int) -> tuple[float, float]:
    mem = np.zeros(nbytes, dtype=np.uint8)
    win = MPI.Win.Create(mem, 1, comm=comm)
    win.Fence()
    start = MPI.Wtime()
    win.Fence()
    fence = MPI.Wtime() - start
    if comm.rank == 0:
        win.Put(np.ones(nbytes, dtype=np.uint8), 1)
    start = MPI.Wtime()
    win.Fence()
    put_fence = MPI.Wtime() - start
    win.Free()
    return fence, put_fence


def test_a_fence_costs_a_barrier_and_an_operation_a_message() -> None:
    alpha, beta, n = 1e-6, 1e-9, 1000
    out = sc.run(fence_then_put, 2, args=(n,), latency=sc.latency.AlphaBeta(alpha, beta))
    assert [fence for fence, _ in out] == pytest.approx([alpha, alpha])  # a barrier: one round on 2
    origin, target = out[0][1], out[1][1]
    assert origin == pytest.approx(alpha + n * beta)  # the Put's message; rank 1's barrier message is in
    assert target == pytest.approx(alpha + n * beta + alpha)  # then the origin's barrier message
    assert out == sc.run(fence_then_put, 2, args=(n,), latency=sc.latency.AlphaBeta(alpha, beta))


def outside_epoch(comm: MPI.Intracomm) -> tuple[int, ...]:
    mem = np.zeros(4, "i")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    classes = []
    for call in (lambda: win.Put(np.ones(1, "i"), 0), lambda: win.Get(mem[:1], 0),
                 lambda: win.Unlock(0), lambda: win.Flush(0), win.Complete, win.Wait):
        try:
            call()
        except MPI.Exception as exc:
            classes.append(exc.Get_error_class())
    win.Free()
    return tuple(classes)


def test_calls_outside_an_epoch_are_mpich_err_rma_sync() -> None:
    assert sc.run(outside_epoch, 2) == [(MPI.ERR_RMA_SYNC,) * 6] * 2


def out_of_range(comm: MPI.Intracomm) -> str:
    mem = np.zeros(4 + comm.rank, "i")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    win.Lock(1)
    try:
        win.Put(np.ones(2, "i"), 1, 4)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_RMA_RANGE
        return str(exc)
    finally:
        win.Unlock(1)
        win.Free()
    return ""


def test_an_access_outside_the_target_window_names_both_ranks() -> None:
    messages = sc.run(out_of_range, 2)
    assert re.match(r"^rank 0: Win.Put\(target_rank=1, target=4\): bytes \[16, 24\) are outside "
                    r"rank 1's window of 20 bytes; ", messages[0])


def conflicting_puts(comm: MPI.Intracomm) -> str:
    mem = np.zeros(4, "i")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    win.Fence()
    try:
        win.Put(np.array([comm.rank + 1], "i"), 0, 2)
        message = ""
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_RMA_CONFLICT
        message = str(exc)
    win.Fence()
    win.Free()
    return message


def test_conflicting_puts_in_one_epoch_name_both_ranks() -> None:
    messages = sc.run(conflicting_puts, 2)
    assert messages[0] == ""
    assert re.match(r"^rank 1: Win.Put\(target_rank=0, target=2\): bytes \[8, 12\) of rank 0's "
                    r"window are also accessed by rank 0's Win.Put\(target_rank=0, target=2\) in "
                    r"the same epoch \(a conflicting access\); ", messages[1])


def put_and_get(comm: MPI.Intracomm) -> str:
    mem = np.zeros(4, "i")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    win.Lock(1)
    win.Put(np.ones(2, "i"), 1, 0)
    try:
        win.Get(np.zeros(1, "i"), 1, 1)
        message = ""
    except MPI.Exception as exc:
        message = str(exc)
    win.Flush(1)
    win.Get(np.zeros(1, "i"), 1, 1)  # after the flush: no conflict
    win.Unlock(1)
    win.Free()
    return message


def test_a_put_and_an_overlapping_get_of_one_epoch_conflict() -> None:
    message = sc.run(put_and_get, 2)[0]
    assert "of rank 1's window are also accessed by this rank's Win.Put" in message


def allocate(comm: MPI.Intracomm) -> None:
    MPI.Win.Allocate(8, 1, comm=comm)


def test_windows_are_refused_up_front_off_the_memory_transport() -> None:
    with pytest.raises(Exception, match="one-sided windows need every rank in one process"):
        sc.run(allocate, 2, transport="shm")


def shared_across_nodes(comm: MPI.Intracomm) -> tuple[int, list[float]]:
    try:
        MPI.Win.Allocate_shared(8, 8, comm=comm)
        spans = -1
    except MPI.Exception as exc:
        spans = exc.Get_error_class()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    win = MPI.Win.Allocate_shared(8, 8, comm=node)
    np.frombuffer(win.tomemory(), dtype="d")[0] = comm.rank
    win.Fence()
    seen = [float(np.frombuffer(win.Shared_query(r)[0], dtype="d")[0]) for r in range(node.size)]
    win.Fence()
    win.Free()
    return spans, seen


def test_a_shared_window_is_one_node_and_its_ranks_see_one_buffer() -> None:
    lat = sc.latency.Hierarchical(sc.latency.Constant(1e-7), sc.latency.Constant(1e-5), 2)
    out = sc.run(shared_across_nodes, 4, latency=lat)
    assert [spans for spans, _ in out] == [MPI.ERR_RMA_SHARED] * 4
    assert [seen for _, seen in out] == [[0.0, 1.0], [0.0, 1.0], [2.0, 3.0], [2.0, 3.0]]


def lock_forever(comm: MPI.Intracomm) -> None:
    win = MPI.Win.Allocate(8, 1, comm=comm)
    win.Lock(0)  # the first rank to lock never unlocks: the other waits for its grant forever
    comm.Barrier()


def test_a_lock_that_is_never_released_is_a_deadlock() -> None:
    with pytest.raises(sc.DeadlockError, match=r"waiting in recv\(src=ANY_SOURCE, tag=3\) at "
                                               r"test_mpi_win.py:\d+"):
        sc.run(lock_forever, 2)
