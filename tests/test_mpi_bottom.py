"""``MPI.BOTTOM`` and absolute addresses, and the buffer-spec rules mpi4py's own suite checks.

With ``MPI.BOTTOM`` as the buffer, a datatype's displacements are absolute
addresses (``MPI.Get_address`` of the user's arrays): one message can gather
from, or scatter into, several numpy arrays at once. Programs doing that (in
p2p, ``Bcast``, ``Alltoall``/``Alltoallv``/``Alltoallw`` and the neighbour
collectives) run under MPICH's ``mpiexec`` with the real mpi4py and under
``simcluster mpirun``; every rank must print the same lines. Then simcluster's
own checks, in process: values on every rank, the error for bytes that are not
memory of the process, and the other rules (counts given as numpy scalars and
0-d arrays, ``Reduce_local`` and ``Reduce_scatter`` mismatches, the buffer
constants, handles made from ``fromint``, unhashable datatypes).
"""

from __future__ import annotations

import copy
import operator
import pickle
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

from mpi_scripts import needs_mpiexec, run_real, run_simulated

WORLD_SIZES = [1, 2, 3]


P2P_STRUCT = """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    f, i = np.arange(3.0) + 10 * rank, np.arange(4, dtype="i") + 100 * rank
    g, j = np.zeros(3), np.zeros(4, dtype="i")
    smsg = MPI.Datatype.Create_struct([3, 2], [MPI.Get_address(f), MPI.Get_address(i[2:])],
                                      [MPI.DOUBLE, MPI.INT]).Commit()
    rmsg = MPI.Datatype.Create_struct([3, 2], [MPI.Get_address(g), MPI.Get_address(j[:2])],
                                      [MPI.DOUBLE, MPI.INT]).Commit()
    comm.Sendrecv([MPI.BOTTOM, 1, smsg], right, 7, [MPI.BOTTOM, 1, rmsg], left, 7)
    print("struct", g.tolist(), j.tolist())
    g[:], j[:] = 0, 0
    comm.Sendrecv([MPI.BOTTOM, smsg], right, 8, [MPI.BOTTOM, rmsg], left, 8)
    print("without a count", g.tolist(), j.tolist())
    # an indexed type of absolute addresses into a plain buffer
    a = np.arange(6, dtype="i") * (rank + 1)
    pick = MPI.INT.Create_hindexed([2, 1], [MPI.Get_address(a), MPI.Get_address(a[4:])]).Commit()
    got = np.zeros(4, dtype="i")
    status = MPI.Status()
    comm.Sendrecv([MPI.BOTTOM, 1, pick], right, 9, [got, MPI.INT], left, 9, status)
    print("hindexed", got.tolist(), status.Get_count(MPI.INT))
    if rank == 0:
        b = np.arange(4.0) + 0.5
    else:
        b = np.zeros(4)
    every_other = MPI.DOUBLE.Create_hindexed_block(1, [MPI.Get_address(b), MPI.Get_address(b[2:])])
    every_other.Commit()
    comm.Bcast([MPI.BOTTOM, 1, every_other], root=0)
    print("bcast", b.tolist())
    for t in (smsg, rmsg, pick, every_other):
        t.Free()
"""

ALLTOALLW = """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 2
    sbuf = np.array([[rank * 10 + d * n + k for k in range(n)] for d in range(size)], dtype="l")
    rbuf = np.full((size, n), -1, dtype="l")
    saddr, raddr = MPI.Get_address(sbuf), MPI.Get_address(rbuf)
    ext = MPI.LONG.Get_extent()[1]
    stypes = [MPI.Datatype.Create_struct([n], [saddr + d * n * ext], [MPI.LONG]).Commit()
              for d in range(size)]
    rtypes = [MPI.Datatype.Create_struct([n], [raddr + d * n * ext], [MPI.LONG]).Commit()
              for d in range(size)]
    comm.Alltoallw((MPI.BOTTOM, ([1] * size, [0] * size), stypes),
                   (MPI.BOTTOM, ([1] * size, [0] * size), rtypes))
    print("alltoallw", rbuf.tolist())
    rbuf[:] = -1
    # the same with the addresses as displacements (in bytes) and plain types
    comm.Alltoallw([MPI.BOTTOM, [n] * size, [saddr + d * n * ext for d in range(size)],
                    [MPI.LONG] * size],
                   [None, [n] * size, [raddr + d * n * ext for d in range(size)], [MPI.LONG] * size])
    print("displacements", rbuf.tolist())
    rbuf[:] = -1
    block = MPI.LONG.Create_hindexed([n], [saddr]).Commit()
    rblock = MPI.LONG.Create_hindexed([n], [raddr]).Commit()
    comm.Alltoall([MPI.BOTTOM, 1, block.Create_resized(0, n * ext).Commit()],
                  [MPI.BOTTOM, 1, rblock.Create_resized(0, n * ext).Commit()])
    print("alltoall", rbuf.tolist())
    rbuf[:] = -1
    whole = MPI.LONG.Create_hindexed([1], [saddr]).Commit()
    rwhole = MPI.LONG.Create_hindexed([1], [raddr]).Commit()
    counts, displs = [n] * size, [d * n for d in range(size)]
    comm.Alltoallv([MPI.BOTTOM, (counts, displs), whole], [MPI.BOTTOM, (counts, displs), rwhole])
    print("alltoallv", rbuf.tolist())
    cart = comm.Create_cart([size], periods=[True])
    nsend = np.arange(2 * n, dtype="l").reshape(2, n) + 100 * rank  # to the left, to the right
    nrecv = np.full((2, n), -1, dtype="l")  # from the left, from the right
    two = [MPI.Datatype.Create_struct([n], [MPI.Get_address(nsend[k])], [MPI.LONG]).Commit()
           for k in range(2)]
    rtwo = [MPI.Datatype.Create_struct([n], [MPI.Get_address(nrecv[k])], [MPI.LONG]).Commit()
            for k in range(2)]
    cart.Neighbor_alltoallw((MPI.BOTTOM, ([1, 1], [0, 0]), two),
                            (MPI.BOTTOM, ([1, 1], [0, 0]), rtwo))
    print("neighbors", nrecv.tolist())
"""

RULES = """
    import pickle
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    s, r = bytearray(b"xabc" * size), bytearray(4 * size)
    comm.Alltoallv([s, (np.array(3), [1 + 4 * d for d in range(size)])], [r, np.array(3)])
    print("0-d counts", bytes(r[:3 * size]))
    for count in (np.float64(3), np.array(3.0), 3.0, "3"):
        try:
            comm.Alltoallv([s, count, MPI.BYTE], [r, count, MPI.BYTE])
        except TypeError:
            print("count", type(count).__name__, "TypeError")
    a, b = np.arange(3, dtype="i"), np.ones(3, dtype="i")
    for spec in ([a[:2], MPI.INT], [a, MPI.INT], [a.view("h"), MPI.SHORT]):
        try:
            MPI.SUM.Reduce_local(spec, [b, MPI.INT])
            print("reduce_local", b.tolist())
        except ValueError:
            print("reduce_local ValueError")
    sbuf, rbuf = np.zeros(size, "i"), np.zeros(1, "f")
    try:
        comm.Reduce_scatter([sbuf, MPI.INT], [rbuf, MPI.FLOAT], [1] * size)
    except ValueError:
        print("reduce_scatter ValueError")
    for c in (MPI.BOTTOM, MPI.IN_PLACE, MPI.BUFFER_AUTOMATIC):
        print(repr(c), int(c), bool(c), c == int(c), hash(c) == hash(int(c)), MPI.Get_address(c),
              memoryview(c).nbytes, pickle.loads(pickle.dumps(c)) == c)
    def mysum(x, y, dt):
        if dt is None:
            return x + y
        np.frombuffer(y, dtype="i")[:] += np.frombuffer(x, dtype="i")
    op = MPI.Op.Create(mysum, True)
    clone = MPI.Op.fromint(op.toint())
    for what in (lambda: clone.__reduce__(), lambda: clone(1, 2)):
        try:
            what()
        except ValueError:
            print("clone ValueError")
    x, y = np.arange(3, dtype="i"), np.ones(3, dtype="i")
    clone.Reduce_local([x, MPI.INT], [y, MPI.INT])
    print("clone reduces", y.tolist(), op(1, 2))
    op.Free()
    class MyInfo(MPI.Info):
        pass
    info = MyInfo.Create()
    print("info", type(info.Dup()).__name__, type(info.copy()).__name__)
    info.Free()
    for obj in (MPI.Status(), MPI.INT, MPI.REQUEST_NULL, MPI.MESSAGE_NULL):
        try:
            hash(obj)
        except TypeError:
            print(type(obj).__name__, "unhashable")
"""

PROGRAMS = {"p2p_struct": P2P_STRUCT, "alltoallw": ALLTOALLW, "rules": RULES}


@needs_mpiexec
@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_program_prints_what_it_prints_under_mpiexec(tmp_path: Path, program: str, n: int) -> None:
    script = tmp_path / f"{program}.py"
    script.write_text(textwrap.dedent(PROGRAMS[program]))
    real = run_real(tmp_path, script, n)
    assert any(real), "the real run printed nothing"
    assert run_simulated(tmp_path, script, n) == real


# ---- simcluster's own checks, in process ----


def struct_ring(comm: MPI.Intracomm) -> tuple[list[float], list[int]]:
    rank, size = comm.Get_rank(), comm.Get_size()
    f, i = np.arange(3.0) + 10 * rank, np.arange(4, dtype="i") + 100 * rank
    g, j = np.zeros(3), np.zeros(4, dtype="i")
    stype = MPI.Datatype.Create_struct([3, 4], [MPI.Get_address(f), MPI.Get_address(i)],
                                       [MPI.DOUBLE, MPI.INT]).Commit()
    rtype = MPI.Datatype.Create_struct([3, 4], [MPI.Get_address(g), MPI.Get_address(j)],
                                       [MPI.DOUBLE, MPI.INT]).Commit()
    comm.Sendrecv([MPI.BOTTOM, 1, stype], (rank + 1) % size, 0,
                  [MPI.BOTTOM, 1, rtype], (rank - 1) % size, 0)
    return g.tolist(), j.tolist()


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_struct_at_bottom_moves_two_arrays_on_every_rank(n: int) -> None:
    got = sc.run(struct_ring, world_size=n)
    for rank, (g, j) in enumerate(got):
        left = (rank - 1) % n
        assert g == [10.0 * left + k for k in range(3)]
        assert j == [100 * left + k for k in range(4)]


def alltoallw_bottom(comm: MPI.Intracomm) -> list[list[int]]:
    size, rank = comm.Get_size(), comm.Get_rank()
    sbuf = np.array([[rank * 100 + d * 10 + k for k in range(2)] for d in range(size)], dtype="i")
    rbuf = np.full((size, 2), -1, dtype="i")
    saddr, raddr, ext = MPI.Get_address(sbuf), MPI.Get_address(rbuf), MPI.INT.extent
    stypes = [MPI.Datatype.Create_struct([2], [saddr + 2 * d * ext], [MPI.INT]).Commit()
              for d in range(size)]
    rtypes = [MPI.Datatype.Create_struct([2], [raddr + 2 * d * ext], [MPI.INT]).Commit()
              for d in range(size)]
    comm.Alltoallw((MPI.BOTTOM, ([1] * size, [0] * size), stypes),
                   (MPI.BOTTOM, ([1] * size, [0] * size), rtypes))
    return rbuf.tolist()


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_alltoallw_at_bottom_gives_every_rank_its_blocks(n: int) -> None:
    for rank, rows in enumerate(sc.run(alltoallw_bottom, world_size=n)):
        assert rows == [[src * 100 + rank * 10, src * 100 + rank * 10 + 1] for src in range(n)]


def bottom_at_address_zero(comm: MPI.Intracomm) -> Any:
    try:
        comm.Send([MPI.BOTTOM, 1, MPI.INT], dest=0, tag=1)
    except MPI.Exception as exc:
        return exc.Get_error_class(), str(exc)
    return "no error"


def test_bottom_with_no_memory_there_is_err_buffer_naming_the_bytes() -> None:
    [(cls, text)] = sc.run(bottom_at_address_zero, world_size=1)
    assert cls == MPI.ERR_BUFFER
    assert text == ("rank 0: Send(dest=0, tag=1): 1 items of MPI_INT at MPI.BOTTOM span bytes 0x0 to "
                    "0x4, which are not memory of this process; build the datatype from "
                    "MPI.Get_address() of live buffers, or pass the buffer itself instead of MPI.BOTTOM")


def bottom_without_count(comm: MPI.Intracomm) -> int:
    a = np.arange(2, dtype="i")
    t = MPI.INT.Create_hindexed([2], [MPI.Get_address(a)]).Commit()
    status = MPI.Status()
    comm.Sendrecv([MPI.BOTTOM, t], 0, 0, [np.zeros(2, "i"), MPI.INT], 0, 0, status)
    return status.Get_count(MPI.INT)


def test_bottom_without_a_count_sends_nothing_as_in_mpi4py() -> None:
    assert sc.run(bottom_without_count, world_size=1) == [0]


def counts(comm: MPI.Intracomm) -> list[str]:
    s, r = bytearray(b"xabc"), bytearray(4)
    comm.Alltoallv([s, (np.array(3), [np.int64(1)])], [r, np.array([3])])
    out = [bytes(r)]
    for bad in (np.float64(3), np.array(3.0), 3.5):
        try:
            comm.Alltoallv([s, bad, MPI.BYTE], [r, 3, MPI.BYTE])
        except TypeError as exc:
            out.append(str(exc))
    try:
        comm.Sendrecv([s, -1, MPI.BYTE], 0, 0, [r, MPI.BYTE], 0, 0)
    except ValueError as exc:
        out.append(str(exc))
    return out


def test_counts_are_read_as_mpi4py_reads_them() -> None:
    [got] = sc.run(counts, world_size=1)
    assert got == [
        b"abc\x00",
        "rank 0: Alltoallv(): count np.float64(3.0) is not an integer; pass a whole number of items",
        "rank 0: Alltoallv(): count array(3.) is not an integer; pass a whole number of items",
        "rank 0: Alltoallv(): count 3.5 is not an integer; pass a whole number of items",
        "rank 0: Sendrecv(dest=0, tag=0): count -1 is negative; pass a number of items >= 0",
    ]


def reduce_local_mismatch(comm: MPI.Intracomm) -> list[str]:
    a, b = np.arange(3, dtype="i"), np.ones(3, dtype="i")
    out = []
    for spec in ([a[:2], MPI.INT], [a.view("h")[:3], MPI.SHORT]):
        try:
            MPI.SUM.Reduce_local(spec, [b, MPI.INT])
        except ValueError as exc:
            out.append(str(exc))
    return out


def test_reduce_local_refuses_buffers_of_other_counts_or_types() -> None:
    [got] = sc.run(reduce_local_mismatch, world_size=1)
    assert got == [
        "Op.Reduce_local(): inbuf holds 2 items but inoutbuf 3; pass buffers of the same count",
        "Op.Reduce_local(): inbuf holds <MPI.Datatype MPI_SHORT> but inoutbuf <MPI.Datatype MPI_INT>; "
        "pass buffers of the same datatype",
    ]


def reduce_scatter_types(comm: MPI.Intracomm) -> str:
    size = comm.Get_size()
    try:
        comm.Reduce_scatter([np.zeros(size, "i"), MPI.INT], [np.zeros(1, "f"), MPI.FLOAT], [1] * size)
    except ValueError as exc:
        return str(exc)
    return "no error"


@pytest.mark.parametrize("n", [1, 3])
def test_reduce_scatter_of_two_datatypes_is_a_value_error(n: int) -> None:
    for rank, text in enumerate(sc.run(reduce_scatter_types, world_size=n)):
        assert text == (f"rank {rank}: Reduce_scatter(op=SUM): the send buffer holds MPI_INT but the "
                        "receive buffer MPI_FLOAT; pass buffers of the same datatype")


@pytest.mark.parametrize("name,address", [("BOTTOM", 0), ("IN_PLACE", -1), ("BUFFER_AUTOMATIC", -2)])
def test_buffer_constants_are_empty_buffers_equal_to_their_address(name: str, address: int) -> None:
    c = getattr(MPI, name)
    assert (repr(c), str(c), int(c), bool(c)) == (name, name, address, address != 0)
    assert c == address and not c != address and c != None  # noqa: E711 - mpi4py's __eq__
    assert hash(c) == hash(address) and MPI.Get_address(c) == address
    assert memoryview(c).nbytes == 0 and type(c)() == c and c.__reduce__() == name
    assert pickle.loads(pickle.dumps(c)) is c and copy.deepcopy(c) is c
    for binop in (operator.add, operator.mul, operator.lt):
        with pytest.raises(TypeError):
            binop(c, 1)
    with pytest.raises(TypeError):
        len(c)
    assert operator.index(MPI.BOTTOM) == 0


def test_mpi4py_handles_are_unhashable() -> None:
    for obj in (MPI.Status(), MPI.INT, MPI.DATATYPE_NULL, MPI.REQUEST_NULL, MPI.MESSAGE_NULL):
        with pytest.raises(TypeError):
            hash(obj)
    assert MPI.Datatype.Get_value_index(MPI.DOUBLE, MPI.INT) == MPI.DOUBLE_INT


def test_a_subclass_of_message_pickles_as_itself() -> None:
    class MyMessage(MPI.Message):
        pass

    MyMessage.__module__, MyMessage.__qualname__ = __name__, "MyMessage"
    globals()["MyMessage"] = MyMessage
    try:
        assert type(pickle.loads(pickle.dumps(MyMessage(MPI.MESSAGE_NULL)))) is MyMessage
    finally:
        del globals()["MyMessage"]


def op_from_handle(comm: MPI.Intracomm) -> list[Any]:
    op = MPI.Op.Create(lambda x, y, dt: x + y if dt is None else None, True)
    clone = MPI.Op.fromint(op.toint())
    out: list[Any] = []
    for what in (clone.__reduce__, lambda: clone(1, 2)):
        try:
            what()
        except ValueError:
            out.append("ValueError")
    out.append(type(MPI.Op(op).__reduce__()).__name__)
    op.Free()
    return out


def test_an_op_made_from_its_handle_cannot_be_pickled_or_called() -> None:
    assert sc.run(op_from_handle, world_size=1) == [["ValueError", "ValueError", "tuple"]]


def test_info_dup_keeps_the_subclass() -> None:
    class MyInfo(MPI.Info):
        pass

    info = MyInfo.Create({"a": "1"})
    assert type(info.Dup()) is MyInfo and type(info.copy()) is MyInfo and type(MyInfo().copy()) is MyInfo
    assert info.Dup().Get("a") == "1"


def rma_target_specs(comm: MPI.Intracomm) -> list[str]:
    win = MPI.Win.Allocate(16, 1, MPI.INFO_NULL, MPI.COMM_SELF)
    out = []
    for target in ({1: 2}, 1.5, np.int64(0), (0, 0, MPI.BYTE)):
        win.Lock(0)
        try:
            win.Put([None, 0, "B"], 0, target)
            out.append("ok")
        except ValueError as exc:
            out.append(str(exc))
        win.Unlock(0)
    win.Free()
    return out


def test_an_rma_target_that_is_not_a_spec_is_a_value_error() -> None:
    [got] = sc.run(rma_target_specs, world_size=1)
    assert got == [
        "rank 0: Win.Put(target_rank=0, target={1: 2}): a dict is not a target spec; pass None, "
        "a displacement or (disp, count, datatype)",
        "rank 0: Win.Put(target_rank=0, target=1.5): a float is not a target spec; pass None, "
        "a displacement or (disp, count, datatype)",
        "ok", "ok",
    ]
