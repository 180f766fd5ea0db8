"""simcluster.MPI's point-to-point extras: Isendrecv, partitioned requests, generalized requests,
statuses as MPICH lays them out, handles, and lowercase receives with ``buf``.

Each behaviour was checked against the real mpi4py 4.1.2 on MPICH under
``mpiexec``; the values asserted are the ones every rank sees.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

# ---- Isendrecv, Isendrecv_replace ----


def ring_isendrecv(comm: MPI.Intracomm) -> tuple[list[float], int, int, list[float], int]:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    rmsg = np.zeros(3)
    status = MPI.Status()
    comm.Isendrecv(np.arange(3.0) + comm.rank, right, 4, rmsg, left, 4).Wait(status)
    buf = np.full(2, float(comm.rank))
    comm.Isendrecv_replace([buf, MPI.DOUBLE], right, 5, left, 5).Wait()
    null = MPI.Status()
    comm.Isendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0).Wait(null)
    return rmsg.tolist(), status.source, status.Get_count(MPI.DOUBLE), buf.tolist(), null.source


def test_isendrecv_and_replace_move_data_around_a_ring() -> None:
    got = sc.run(ring_isendrecv, world_size=3)
    assert list(got) == [
        ([2.0, 3.0, 4.0], 2, 3, [2.0, 2.0], MPI.PROC_NULL),
        ([0.0, 1.0, 2.0], 0, 3, [0.0, 0.0], MPI.PROC_NULL),
        ([1.0, 2.0, 3.0], 1, 3, [1.0, 1.0], MPI.PROC_NULL),
    ]


# ---- partitioned communication ----


def partitioned_ring(comm: MPI.Intracomm) -> list[Any]:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    rbuf = np.zeros(6, dtype="i")
    sreq = comm.Psend_init(np.full(6, comm.rank, dtype="i"), 3, right, 7)
    rreq = comm.Precv_init(rbuf, 3, left, 7)
    out = []
    for _ in range(2):
        rbuf[:] = -1
        rreq.Start()
        sreq.Start()
        out.append(rreq.Parrived(0))
        sreq.Pready(2)
        sreq.Pready_list([0])
        sreq.Pready_range(1, 1)
        while not rreq.Parrived(1):
            pass
        MPI.Request.Waitall([sreq, rreq])
        out.append(rbuf.tolist())
    sreq.Free()
    rreq.Free()
    out.append(sreq == MPI.REQUEST_NULL)
    return out


def test_partitioned_send_leaves_when_every_partition_is_ready() -> None:
    got = sc.run(partitioned_ring, world_size=2)
    assert got[0] == [False, [1] * 6, False, [1] * 6, True]
    assert got[1] == [False, [0] * 6, False, [0] * 6, True]


def partitioned_errors(comm: MPI.Intracomm) -> list[str]:
    out = []
    sreq = comm.Psend_init(bytearray(4), 2, comm.rank, 0)
    rreq = comm.Precv_init(bytearray(4), 2, comm.rank, 0)
    for bad in (lambda: sreq.Pready(0), lambda: sreq.Start() or sreq.Pready(2),
                lambda: rreq.Pready(0), lambda: sreq.Parrived(0),
                lambda: comm.Psend_init(bytearray(5), 2, 0), lambda: sreq.Wait()):
        try:
            bad()
        except MPI.Exception as exc:
            out.append(f"{exc.Get_error_class()}: {exc}")
    return out


def test_partitioned_misuse_says_what_to_do() -> None:
    got = sc.run(partitioned_errors, world_size=1)[0]
    assert got == [
        f"{MPI.ERR_REQUEST}: rank 0: Prequest.Pready(0): the partitioned send is not started, or "
        "all its partitions are ready already; Start() it first",
        f"{MPI.ERR_ARG}: rank 0: Prequest.Pready(2): partition 2 is not in range(2); number "
        "partitions from 0",
        f"{MPI.ERR_REQUEST}: rank 0: Prequest.Pready(0): the request is not a partitioned send "
        "(Precv_init(buf=bytearray[4], source=0, tag=0)); call it on a request Psend_init returned",
        f"{MPI.ERR_REQUEST}: rank 0: Prequest.Parrived(0): the request is not a partitioned "
        "receive (Psend_init(buf=bytearray[4], dest=0, tag=0)); call it on a request Precv_init "
        "returned",
        f"{MPI.ERR_COUNT}: rank 0: Psend_init(buf=bytearray[5], dest=0, tag=0): 5 items do not "
        "split into 2 equal partitions; pass a buffer whose item count partitions divides",
        f"{MPI.ERR_REQUEST}: rank 0: Wait() of Psend_init(buf=bytearray[4], dest=0, tag=0): the "
        "partitioned send has partitions [0, 1] not marked ready, so it would wait forever; call "
        "Pready (or Pready_range, Pready_list) for every partition before waiting",
    ]


# ---- generalized requests ----


def generalized(comm: MPI.Intracomm) -> list[Any]:
    calls: list[Any] = []
    greq = MPI.Grequest.Start(lambda status, tag: (calls.append("query"), status.Set_tag(tag)),
                              lambda tag: calls.append("free"),
                              lambda completed, tag: calls.append(("cancel", completed)),
                              args=(comm.rank + 10,))
    out: list[Any] = [greq.Test(), type(MPI.Request(greq)).__name__]
    greq.Cancel()
    greq.complete("done")
    status = MPI.Status()
    out += [greq.test(status), status.tag, greq == MPI.REQUEST_NULL, calls]
    try:
        MPI.Prequest(MPI.Grequest.Start())
    except TypeError as exc:
        out.append(str(exc))
    return out


def test_grequest_calls_query_and_free_once_completed() -> None:
    got = sc.run(generalized, world_size=2)
    for rank, out in enumerate(got):
        assert out == [False, "Request", (True, "done"), rank + 10, True,
                       [("cancel", False), "query", "free"],
                       "MPI.Prequest(request): cannot convert an MPI.Grequest to an MPI.Prequest"]


def grequest_errors(comm: MPI.Intracomm) -> list[str]:
    out = []

    def query(status: MPI.Status) -> None:
        raise KeyError("boom")

    greq = MPI.Grequest.Start(query)
    try:
        greq.Wait()
    except MPI.Exception as exc:
        out.append(f"{exc.Get_error_class()}: {exc}")
    greq.Complete()
    try:
        greq.Wait()
    except MPI.Exception as exc:
        out.append(f"{exc.Get_error_class()}: {exc}")
    out.append(str(bool(greq)))
    return out


def test_grequest_errors_name_the_callback(capsys: pytest.CaptureFixture[str]) -> None:
    got = sc.run(grequest_errors, world_size=1)[0]
    assert got == [
        f"{MPI.ERR_REQUEST}: rank 0: Grequest.Wait(): the generalized request was not completed, "
        "and nothing can complete it while this rank waits; call Complete() (or complete(obj)) "
        "before waiting",
        f"{MPI.ERR_OTHER}: rank 0: Grequest.Wait(): the callback query raised KeyError: 'boom'; "
        "see its traceback above",
        "False",
    ]
    assert "Traceback (most recent call last)" in capsys.readouterr().err


# ---- statuses ----


def test_status_is_mpich_s_five_ints() -> None:
    status = MPI.Status()
    assert status.py2f() == [0, 0, MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS]
    status.source, status.tag, status.error = 3, 4, 5
    status.count = 2**33 + 5
    status.cancelled = True
    assert status.py2f() == [5, 5, 3, 4, 5]
    mem = status.tomemory()
    mem[MPI.F_SOURCE] = 11
    assert (mem.format, len(mem), status.source, status.count) == ("i", 5, 11, 2**33 + 5)
    copy = MPI.Status.f2py(status.py2f())
    assert copy == status and pickle.loads(pickle.dumps(copy)) == status
    with pytest.raises(TypeError):
        MPI.Status(123)  # type: ignore[arg-type]
    with pytest.raises(MPI.Exception, match=r"^Status.Set_elements\(count=-1\): the count must "
                       r"not be negative; pass 0 or more items$"):
        status.Set_elements(MPI.BYTE, -1)


def statuses_of_requests(comm: MPI.Intracomm) -> list[Any]:
    status = MPI.Status()
    status.source = 9
    out: list[Any] = [MPI.Request.Get_status_any([MPI.REQUEST_NULL], status), status.source]
    reqs = [comm.Irecv(bytearray(4), comm.rank, t) for t in (1, 2)]
    comm.Send(b"ab", comm.rank, 2)
    got: list[MPI.Status] = []
    out.append(MPI.Request.Get_status_some(reqs, got))
    out.append([(s.tag, s.count) for s in got])
    fixed = (MPI.Status(),)
    comm.Send(b"abc", comm.rank, 1)
    MPI.Request.Waitall(reqs, fixed)  # a tuple is filled as far as it goes
    out.append((fixed[0].tag, fixed[0].count))
    return out


def test_request_status_calls_fill_statuses_like_mpi4py() -> None:
    got = sc.run(statuses_of_requests, world_size=2)
    for out in got:
        assert out == [(MPI.UNDEFINED, True), MPI.ANY_SOURCE, [1], [(2, 2)], (1, 3)]


# ---- handles ----


def handles(comm: MPI.Intracomm) -> list[Any]:
    dup = comm.Dup()
    preq = comm.Recv_init(bytearray(0), 0, 0)
    out: list[Any] = []
    for obj in (MPI.COMM_WORLD, MPI.COMM_SELF, MPI.COMM_NULL, MPI.INT, MPI.SUM, MPI.REQUEST_NULL,
                MPI.MESSAGE_NULL, MPI.MESSAGE_NO_PROC, MPI.GROUP_EMPTY, MPI.ERRORS_RETURN, dup,
                preq):
        cls = type(obj)
        out.append((hex(obj.handle), cls.fromhandle(obj.handle) == obj,
                    cls.fromint(obj.toint()) == obj, cls.f2py(obj.py2f()) == obj))
    out.append(type(MPI.Comm.fromhandle(comm.handle)).__name__)
    try:
        MPI.Comm.fromint(12345)
    except MPI.Exception as exc:
        out.append(f"{exc.Get_error_class()}: {exc}")
    preq.Free()
    dup.Free()
    return out


def test_handles_have_mpich_s_values_and_come_back() -> None:
    got = sc.run(handles, world_size=2)
    for rank, out in enumerate(got):
        values = [h for h, *_ in out[:12]]
        assert values == ["0x44000000", "0x44000001", "0x4000000", "0x4c000405", "0x58000003",
                          "0x2c000000", "0x2c000000", "0x6c000000", "0x48000000", "0x54000001",
                          values[10], values[11]]
        assert values[10].startswith("0xffffffff84") and values[11].startswith("0xffffffffac")
        assert all(all(flags) for _, *flags in out[:12])
        assert out[12:] == ["Intracomm", f"{MPI.ERR_COMM}: Comm.fromint(12345): no Comm has "
                            "handle 0x3039 in this process; pass a handle that a live Comm of "
                            "this rank gave (obj.handle, obj.toint())"]


# ---- lowercase receives ----


def lowercase_buf(comm: MPI.Intracomm) -> list[Any]:
    out: list[Any] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        req = comm.isend(list(range(10)), comm.rank)
        try:
            comm.recv(bytearray(8), comm.rank)
        except MPI.Exception as exc:
            out.append(f"{exc.Get_error_class()}: {exc}")
        req.wait()
        req = comm.isend("ok", comm.rank)
        out.append(comm.irecv(1024, comm.rank).wait())  # irecv does not warn
        req.wait()
        out.append([str(w.message) for w in caught])
    req = comm.Isend([b"", MPI.BYTE], comm.rank)
    out.append(comm.recv(None, comm.rank))  # an empty message is None
    req.Wait()
    return out


def test_lowercase_recv_buf_is_deprecated_and_bounds_the_message() -> None:
    got = sc.run(lowercase_buf, world_size=2)
    for rank, out in enumerate(got):
        assert out == [f"{MPI.ERR_TRUNCATE}: rank {rank}: recv(source={rank}, tag=-1): the "
                       "message is 36 bytes but buf holds 8; leave buf out: pickles are sized on "
                       "arrival", "ok", ["the 'buf' argument is deprecated"], None]


def test_pending_requests_and_messages_do_not_pickle() -> None:
    assert pickle.loads(pickle.dumps(MPI.REQUEST_NULL)) is MPI.REQUEST_NULL
    assert pickle.loads(pickle.dumps(MPI.MESSAGE_NO_PROC)) is MPI.MESSAGE_NO_PROC
    copy = pickle.loads(pickle.dumps(MPI.Message(MPI.MESSAGE_NO_PROC)))
    assert copy == MPI.MESSAGE_NO_PROC and copy is not MPI.MESSAGE_NO_PROC

    def pending(comm: MPI.Intracomm) -> str:
        req = comm.Irecv(bytearray(1), 0, 0)
        try:
            pickle.dumps(req)
        except ValueError as exc:
            return str(exc).split(":", 1)[1]
        finally:
            req.Cancel()
            req.Wait()
        return "pickled"

    assert sc.run(pending, world_size=1)[0] == (
        " a pending request belongs to the rank that started it; wait for it and send its result "
        "instead")
