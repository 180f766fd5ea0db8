"""Point-to-point through ``simcluster.MPI`` from synchronous ranks, on every transport.

The behaviours of test_p2p.py, test_errors.py and test_requests.py, called the way
mpi4py code calls them: lowercase methods for pickled objects, uppercase methods
for buffers with mpi4py's buffer specs, Status, ANY_SOURCE/ANY_TAG/PROC_NULL and
MPI error classes. Rank functions are module-level so that the shm and tcp
transports' hosting processes import them by name; the lowercase methods need
``serializer="pickle"`` on tcp (``kw``).
"""

from __future__ import annotations

import math
import pickle
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI
from mpi_helpers import ALPHA, BETA, DTYPES, WORLD_SIZES, kw, mpi_errors, marked, rank_error, sentinel, values


@dataclass(frozen=True)
class Point:
    """A user class: the lowercase methods pickle it (msgpack could not carry it)."""

    x: int
    y: float


MESSAGES: list[Any] = [
    None, True, 0, -7, 2**100, 3.5, 1 + 2j, "héllo", b"\x00\xff", [1, [2, "x"]], (1, (2.5, None)),
    {"a": 1, "b": [1, 2]}, {1: "one", (2, 3): "pair"}, {1, 2, 3}, frozenset({"f"}), Point(1, 2.5),
    np.float32(1.5), np.int64(-3), np.arange(6.0).reshape(2, 3), np.zeros(0, dtype=np.int32), [],
]


def _pickled_size(obj: Any) -> int:
    return len(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))


# ---- lowercase: Python objects ----


def objects_round_trip(comm: MPI.Intracomm, messages: list[Any]) -> Any:
    if comm.Get_rank() == 0:
        for tag, smsg in enumerate(messages):
            comm.send(smsg, dest=1, tag=tag)
        return None
    got = []
    for tag in range(len(messages)):
        status = MPI.Status()
        rmsg = comm.recv(source=0, tag=tag, status=status)
        got.append((type(rmsg).__name__, repr(rmsg), status.Get_source(), status.Get_tag(),
                    status.Get_count()))
    return got


def test_send_recv_objects_round_trip_with_status(transport: str) -> None:
    result = sc.run(objects_round_trip, 2, args=(MESSAGES,), **kw(transport))
    assert result[0] is None
    assert result[1] == [(type(m).__name__, repr(m), 0, tag, _pickled_size(m))
                         for tag, m in enumerate(MESSAGES)]


def lowercase_without_pickle(comm: MPI.Intracomm) -> list[Any]:
    calls = [
        lambda: comm.send({"k": 1}, dest=0, tag=2),
        lambda: comm.isend([1], dest=0),
        lambda: comm.recv(source=0, tag=2),
        lambda: comm.irecv(source=MPI.ANY_SOURCE),
        lambda: comm.bcast("x", root=0),
        lambda: comm.allreduce(1),
    ]
    got: list[Any] = []
    for call in calls:
        try:
            out = call()
        except TypeError as exc:
            got.append(str(exc))
        else:
            got.append(out.wait() if isinstance(out, MPI.Request) else out)
    comm.barrier()  # no payload: fine on tcp without pickles
    buf = np.zeros(2)
    comm.Sendrecv(np.ones(2), dest=0, recvbuf=buf, source=0)  # the buffer methods need no pickles
    got.append(f"Sendrecv {buf.tolist()}")
    return got


def test_lowercase_methods_on_tcp_need_serializer_pickle(transport: str) -> None:
    works = [None, None, {"k": 1}, [1], "x", 1, "Sendrecv [1.0, 1.0]"]
    result = sc.run(lowercase_without_pickle, 1, transport=transport)
    if transport != "tcp":  # pickles travel on the memory and shm transports as they are
        assert list(result) == [works]
        return
    fix = ('the lowercase methods send pickled objects, and the tcp transport accepts pickles only in '
           'runs made with serializer="pickle"; pass sc.run(..., serializer="pickle") (peers you '
           'trust only: unpickling runs their code), or use the uppercase buffer methods (Send/Recv)')
    assert result[0] == [f"rank 0: {call}: {fix}" for call in (
        "send(obj=dict, dest=0, tag=2)", "isend(obj=list, dest=0, tag=0)", "recv(source=0, tag=2)",
        "irecv(source=-2, tag=-1)", "bcast(root=0)", "allreduce()")] + ["Sendrecv [1.0, 1.0]"]
    assert list(sc.run(lowercase_without_pickle, 1, transport=transport, serializer="pickle")) == [works]


def uncaught_lowercase_send(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.send("x", dest=1)
        return None
    time.sleep(1.0)  # rank 0 fails first on tcp
    return comm.recv(source=0)


def test_uncaught_lowercase_error_on_tcp_stops_the_run(transport: str) -> None:
    if transport != "tcp":
        assert list(sc.run(uncaught_lowercase_send, 2, transport=transport)) == [None, "x"]
        return
    err = rank_error(uncaught_lowercase_send, 2, transport=transport)
    assert err.rank == 0
    assert type(err.__cause__) is TypeError
    assert str(err.__cause__).startswith('rank 0: send(obj=str, dest=1, tag=0): the lowercase methods '
                                         'send pickled objects, and the tcp transport accepts pickles '
                                         'only in runs made with serializer="pickle"; ')


# ---- uppercase: buffers and buffer specs ----


def buffer_specs(comm: MPI.Intracomm, kind: str) -> Any:
    dtype, dt = DTYPES[kind]
    smsg = values(kind, 6, seed=1)
    if comm.Get_rank() == 0:
        comm.Send(smsg, dest=1, tag=0)
        comm.Send([smsg, dt], dest=1, tag=1)
        comm.Send([smsg, 4, dt], dest=1, tag=2)
        comm.Send([smsg, (3, 2), dt], dest=1, tag=3)
        comm.Send(np.zeros(0, dtype), dest=1, tag=4)
        comm.Send([smsg.reshape(2, 3), dt], dest=1, tag=5)
        comm.Send([smsg, 0, dt], dest=1, tag=6)
        return None
    fill = sentinel(kind)
    recvs = [
        (np.full(6, fill, dtype), lambda b: b),
        (np.full(6, fill, dtype), lambda b: [b, dt]),
        (np.full(8, fill, dtype), lambda b: [b, 4, dt]),
        (np.full(8, fill, dtype), lambda b: [b, (3, 1), dt]),
        (np.full(3, fill, dtype), lambda b: b),
        (np.full((2, 3), fill, dtype), lambda b: [b, dt]),
        (np.full(2, fill, dtype), lambda b: [b, 2, dt]),
    ]
    got = []
    for tag, (buf, spec) in enumerate(recvs):
        status = MPI.Status()
        comm.Recv(spec(buf), source=0, tag=tag, status=status)
        got.append((buf, status.Get_source(), status.Get_tag(), status.Get_count(dt), status.Get_count()))
    return got


@pytest.mark.parametrize("kind", sorted(DTYPES))
def test_send_recv_buffer_specs_fill_in_place_with_status(transport: str, kind: str) -> None:
    dtype, _ = DTYPES[kind]
    smsg, fill = values(kind, 6, seed=1), sentinel(kind)

    def filled(n: int, at: int, items: np.ndarray) -> np.ndarray:
        out = np.full(n, fill, dtype)
        out[at:at + items.size] = items
        return out

    expected = [smsg, smsg, filled(8, 0, smsg[:4]), filled(8, 1, smsg[2:5]), np.full(3, fill, dtype),
                smsg.reshape(2, 3), filled(2, 0, smsg[:0])]
    counts = [6, 6, 4, 3, 0, 6, 0]
    got = sc.run(buffer_specs, 2, args=(kind,), transport=transport)[1]
    assert len(got) == len(expected)
    for tag, ((buf, source, rtag, count, nbytes), want, n) in enumerate(zip(got, expected, counts)):
        assert buf.dtype == dtype and buf.shape == want.shape, tag
        np.testing.assert_array_equal(buf, want)
        assert (source, rtag, count, nbytes) == (0, tag, n, n * dtype.itemsize), tag


def shorter_message(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.array([1.0, 2.0]), dest=1)
        return None
    buf = np.full(4, -1.0)
    status = MPI.Status()
    comm.Recv(buf, source=0, status=status)
    return buf.tolist(), status.Get_count(MPI.DOUBLE), status.Get_elements(MPI.DOUBLE)


def test_shorter_message_fills_the_front_of_the_buffer(transport: str) -> None:
    assert sc.run(shorter_message, 2, transport=transport)[1] == ([1.0, 2.0, -1.0, -1.0], 2, 2)


def receiver_owns_its_copy(comm: MPI.Intracomm) -> Any:
    small, big = np.ones(4), np.ones(20_000)
    if comm.Get_rank() == 0:
        comm.Send(small, dest=1)
        comm.Send(big, dest=1)
        small[:] = 5
        big[:] = 5
        comm.Send(np.zeros(1), dest=1)
        return None
    a, b = np.zeros(4), np.zeros(20_000)
    comm.Recv(a, source=0)
    comm.Recv(b, source=0)
    comm.Recv(np.zeros(1), source=0)
    return float(a.sum()), float(b.sum())


def test_receiver_keeps_what_was_sent_when_the_sender_reuses_its_buffer(transport: str) -> None:
    assert sc.run(receiver_owns_its_copy, 2, transport=transport)[1] == (4.0, 20_000.0)


def pair_specs(comm: MPI.Intracomm) -> Any:
    rank = comm.Get_rank()
    got = []
    for send, recv_of in [
        ([np.arange(6.0), (2, 3)], lambda b: [b, (2, 1)]),  # [buf, (count, displ)]
        ([np.arange(6.0), [3, 1], MPI.DOUBLE], lambda b: [b, [3, 2], MPI.DOUBLE]),  # a list: (count, displ)
        ([np.arange(6.0), 2, 4, MPI.DOUBLE], lambda b: [b, 2, 0, MPI.DOUBLE]),
    ]:
        buf = np.full(6, -1.0)
        comm.Sendrecv(send, dest=rank, recvbuf=recv_of(buf), source=rank)
        got.append(buf.tolist())
    errors = []
    for spec in ([np.ones(2), 1, 0, MPI.DOUBLE, 3], [np.ones(2), (1, 0, 0), MPI.DOUBLE], [np.ones(2), 3]):
        try:
            comm.Send(spec, dest=rank)
        except ValueError as exc:
            errors.append(str(exc))
    return got, errors


def test_simple_specs_take_count_and_displacement_pairs(transport: str) -> None:
    got, errors = sc.run(pair_specs, 1, transport=transport)[0]
    assert got == [[-1.0, 3.0, 4.0, -1.0, -1.0, -1.0], [-1.0, -1.0, 1.0, 2.0, 3.0, -1.0],
                   [4.0, 5.0, -1.0, -1.0, -1.0, -1.0]]
    assert errors == [
        "rank 0: Send(dest=0, tag=0): a buffer spec of 5 items is not understood; pass buf, [buf, datatype], "
        "[buf, count, datatype] or [buf, (count, displ), datatype]",
        "rank 0: Send(dest=0, tag=0): (1, 0, 0) in a buffer spec is read as (count, displ) but has 3 items; "
        "pass [buf, count, datatype] or [buf, (count, displ), datatype]",
        "rank 0: Send(dest=0, tag=0): 3 items of MPI_DOUBLE from item 0 do not fit in the buffer float64[2]; "
        "pass a smaller count or a larger buffer",
    ]


def proc_null_ignores_the_buffer(comm: MPI.Intracomm) -> Any:
    status = MPI.Status()
    comm.Send(None, dest=MPI.PROC_NULL)  # as mpi4py: the spec is not even read
    comm.Send([1, 2, 3], dest=MPI.PROC_NULL)
    comm.Recv(None, source=MPI.PROC_NULL, status=status)
    comm.Isend(np.ones(6)[::2], dest=MPI.PROC_NULL).Wait()
    buf = np.full(2, -1.0)
    comm.Sendrecv(np.ones(2), dest=MPI.PROC_NULL, recvbuf=None, source=MPI.PROC_NULL)
    comm.Sendrecv_replace(buf, dest=MPI.PROC_NULL, source=MPI.PROC_NULL)
    return status.Get_source(), status.Get_count(), buf.tolist()


def test_proc_null_peer_ignores_the_buffer_spec(transport: str) -> None:
    assert list(sc.run(proc_null_ignores_the_buffer, 2, transport=transport)) == [
        (MPI.PROC_NULL, 0, [-1.0, -1.0])] * 2


# ---- order, tags, sources ----


def no_overtaking(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        for i in range(30):
            comm.Send(np.array([i], dtype=np.int32), dest=1, tag=1)
        for i in range(30):
            comm.send(i, dest=1, tag=2)
        big = np.ones(1 << 17)  # 1 MiB: rendezvous
        reqs = [comm.Isend(big, dest=1, tag=3), comm.Isend(np.full(1, 2.0), dest=1, tag=3)]
        MPI.Request.Waitall(reqs)
        return None
    buf = np.zeros(1, dtype=np.int32)
    ups = []
    for _ in range(30):
        comm.Recv(buf, source=0, tag=1)
        ups.append(int(buf[0]))
    lows = [comm.recv(source=0, tag=2) for _ in range(30)]
    first, second = np.zeros(1 << 17), np.zeros(1 << 17)
    s1, s2 = MPI.Status(), MPI.Status()
    comm.Recv(first, source=0, tag=MPI.ANY_TAG, status=s1)
    comm.Recv(second, source=MPI.ANY_SOURCE, tag=3, status=s2)
    return ups, lows, s1.Get_count(MPI.DOUBLE), s2.Get_count(MPI.DOUBLE), float(first.sum()), float(second[0])


def test_messages_from_one_sender_do_not_overtake(transport: str) -> None:
    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    for seed in range(3):
        got = sc.run(no_overtaking, 2, seed=seed, latency=lat, **kw(transport))[1]
        assert got == (list(range(30)), list(range(30)), 1 << 17, 1, float(1 << 17), 2.0)


def recv_by_tag(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.send("a", dest=1, tag=1)
        comm.send("b", dest=1, tag=2)
        comm.Send(np.array([1], dtype=np.int32), dest=1, tag=1)
        comm.Send(np.array([2], dtype=np.int32), dest=1, tag=2)
        return None
    b = comm.recv(source=0, tag=2)
    a = comm.recv(source=0, tag=1)
    buf = np.zeros(1, dtype=np.int32)
    comm.Recv(buf, source=0, tag=2)
    second = int(buf[0])
    comm.Recv(buf, source=0, tag=1)
    return a, b, int(buf[0]), second


def test_recv_by_tag_skips_other_tags(transport: str) -> None:
    assert sc.run(recv_by_tag, 2, **kw(transport))[1] == ("a", "b", 1, 2)


def any_source(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    sreq = comm.Isend(np.array([rank * 10], dtype=np.int32), dest=0, tag=rank)  # rank 0 too, to itself
    got: list[Any] = []
    if rank == 0:
        for _ in range(size):
            buf, status = np.zeros(1, dtype=np.int32), MPI.Status()
            comm.Recv([buf, MPI.INT], source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            got.append((status.Get_source(), status.Get_tag(), int(buf[0])))
    comm.Barrier()  # ANY_TAG would take the pickles below too
    oreq = comm.isend(f"r{rank}", dest=0, tag=100 + rank)
    if rank == 0:
        for _ in range(size):
            status = MPI.Status()
            word = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            got.append((status.source, status.tag, word))
    sreq.Wait()
    oreq.wait()
    return sorted(got, key=repr)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_recv_any_source_any_tag_reports_status(transport: str, world_size: int) -> None:
    result = sc.run(any_source, world_size, **kw(transport))
    expected = [(r, r, r * 10) for r in range(world_size)]
    expected += [(r, 100 + r, f"r{r}") for r in range(world_size)]
    assert result[0] == sorted(expected, key=repr)
    assert list(result)[1:] == [[]] * (world_size - 1)


# ---- nonblocking, sendrecv ----


def ring_nonblocking(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    rbuf = np.full(5, -1, dtype=np.int32)
    reqs = [comm.Irecv([rbuf, MPI.INT], source=left, tag=1),
            comm.Isend(np.arange(5, dtype=np.int32) + rank * 10, dest=right, tag=1)]
    statuses = [MPI.Status(), MPI.Status()]
    done = MPI.Request.Waitall(reqs, statuses)
    objs = MPI.Request.waitall([comm.irecv(source=left, tag=2),
                                comm.isend({"from": rank}, dest=right, tag=2)])
    return (done, rbuf.tolist(), statuses[0].Get_source(), statuses[0].Get_tag(),
            statuses[0].Get_count(MPI.INT), [bool(r) for r in reqs], reqs[0] == MPI.REQUEST_NULL, objs)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_isend_irecv_waitall_exchange_in_a_ring(transport: str, world_size: int) -> None:
    result = sc.run(ring_nonblocking, world_size, **kw(transport))
    for rank, got in enumerate(result):
        left = (rank - 1) % world_size
        assert got == (True, [left * 10 + i for i in range(5)], left, 1, 5, [False, False], True,
                       [{"from": left}, None])


def sendrecv_shift(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    word = comm.sendrecv(f"w{rank}", dest=right, sendtag=1, source=left, recvtag=1)
    rbuf = np.zeros(30_000)  # 240 kB: rendezvous both ways
    status = MPI.Status()
    comm.Sendrecv(np.full(30_000, float(rank)), dest=right, sendtag=2, recvbuf=rbuf, source=left,
                  recvtag=2, status=status)
    replaced = np.full(3, rank, dtype=np.int32)
    comm.Sendrecv_replace([replaced, MPI.INT], dest=right, sendtag=3, source=left, recvtag=3)
    # a non-periodic shift: the ends talk to PROC_NULL
    up = rank + 1 if rank + 1 < size else MPI.PROC_NULL
    down = rank - 1 if rank > 0 else MPI.PROC_NULL
    edge, edge_status = np.full(2, -1.0), MPI.Status()
    comm.Sendrecv(np.full(2, float(rank)), dest=up, recvbuf=edge, source=down, status=edge_status)
    return (word, float(rbuf.min()), float(rbuf.max()), status.Get_source(), status.Get_tag(),
            status.Get_count(MPI.DOUBLE), replaced.tolist(), edge.tolist(), edge_status.Get_source(),
            edge_status.Get_count())


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_sendrecv_shifts_values_without_deadlock(transport: str, world_size: int) -> None:
    result = sc.run(sendrecv_shift, world_size, **kw(transport))
    for rank, got in enumerate(result):
        left = (rank - 1) % world_size
        edge = ([-1.0, -1.0], MPI.PROC_NULL, 0) if rank == 0 else ([float(rank - 1)] * 2, rank - 1, 16)
        assert got == (f"w{left}", float(left), float(left), left, 2, 30_000, [left] * 3, *edge)


def self_messages(comm: MPI.Intracomm) -> Any:
    req = comm.irecv(source=0)
    comm.send({"me": comm.Get_rank()}, dest=0)
    buf = np.zeros(3)
    rreq = comm.Irecv(buf, source=0, tag=4)
    comm.Send(np.arange(3.0), dest=0, tag=4)
    rreq.Wait()
    return req.wait(), buf.tolist()


def test_one_rank_world_can_send_to_itself(transport: str) -> None:
    assert list(sc.run(self_messages, 1, **kw(transport))) == [({"me": 0}, [0.0, 1.0, 2.0])]


# ---- probe ----


def probe_then_recv(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.arange(7, dtype=np.int32), dest=1, tag=4)
        comm.send("obj", dest=1, tag=5)
        return None
    status = MPI.Status()
    found = comm.Probe(source=MPI.ANY_SOURCE, tag=4, status=status)
    buf = np.empty(status.Get_count(MPI.INT), dtype=np.int32)
    comm.Recv([buf, MPI.INT], source=status.Get_source(), tag=status.Get_tag())
    ostatus = MPI.Status()
    ofound = comm.probe(source=0, tag=MPI.ANY_TAG, status=ostatus)
    obj = comm.recv(source=ostatus.Get_source(), tag=ostatus.Get_tag())
    return (found, status.Get_source(), status.Get_tag(), status.Get_count(), buf.tolist(), ofound,
            ostatus.Get_tag(), ostatus.Get_count(), obj)


def test_probe_then_recv_a_sized_buffer(transport: str) -> None:
    got = sc.run(probe_then_recv, 2, **kw(transport))[1]
    assert got == (True, 0, 4, 28, list(range(7)), True, 5, _pickled_size("obj"), "obj")


def iprobe_until_arrival(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        time.sleep(1.0)  # virtual: a synchronous rank's time.sleep advances its clock
        comm.Send(np.ones(2), dest=1)
        return None
    before = (comm.Iprobe(source=0), comm.iprobe(source=0))
    time.sleep(2.0)
    status = MPI.Status()
    after = (comm.Iprobe(source=0, status=status), comm.iprobe(source=MPI.ANY_SOURCE))
    comm.Recv(np.zeros(2), source=0)
    return before, after, status.Get_count(MPI.DOUBLE), comm.Iprobe(), round(MPI.Wtime(), 9)


def test_iprobe_is_false_until_the_message_arrives(transport: str) -> None:
    got = sc.run(iprobe_until_arrival, 2, transport=transport)[1]
    assert got == ((False, False), (True, True), 2, False, 2.000003)  # three fruitless polls: 3 us


def matched_probe(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    comm.send(("m", rank), dest=right, tag=7)
    comm.Send(np.full(3, rank, dtype=np.int64), dest=right, tag=8)
    status = MPI.Status()
    msg = comm.mprobe(source=left, tag=7, status=status)
    obj = msg.recv()
    bstatus = MPI.Status()
    bmsg = comm.Mprobe(source=MPI.ANY_SOURCE, tag=8, status=bstatus)
    buf = np.empty(bstatus.Get_count(MPI.INT64_T), dtype=np.int64)
    bmsg.Recv([buf, MPI.INT64_T])
    nothing = (comm.improbe(source=left, tag=99), comm.Improbe(source=left, tag=99))
    null = comm.Mprobe(source=MPI.PROC_NULL)
    nstatus = MPI.Status()
    null.Recv(None, status=nstatus)  # received: the handle becomes MESSAGE_NULL
    return (obj, status.Get_source(), buf.tolist(), bstatus.Get_source(), nothing, bool(msg), bool(bmsg),
            nstatus.Get_source(), null == MPI.MESSAGE_NULL, bool(MPI.MESSAGE_NO_PROC))


@pytest.mark.parametrize("world_size", [1, 3])
def test_matched_probe_takes_the_message_out_of_matching(transport: str, world_size: int) -> None:
    for rank, got in enumerate(sc.run(matched_probe, world_size, **kw(transport))):
        left = (rank - 1) % world_size
        assert got == (("m", left), left, [left] * 3, left, (None, None), False, False, MPI.PROC_NULL, True,
                       True)


# ---- PROC_NULL ----


def proc_null(comm: MPI.Intracomm) -> Any:
    buf = np.full(3, 7.0)
    comm.Send(np.ones(3), dest=MPI.PROC_NULL)
    comm.send("x", dest=MPI.PROC_NULL)
    comm.Ssend(np.ones(3), dest=MPI.PROC_NULL)
    statuses = [MPI.Status() for _ in range(4)]
    comm.Recv(buf, source=MPI.PROC_NULL, status=statuses[0])
    obj = comm.recv(source=MPI.PROC_NULL, status=statuses[1])
    req = comm.Irecv(buf, source=MPI.PROC_NULL, tag=3)
    req.Wait(statuses[2])
    found = comm.Probe(source=MPI.PROC_NULL, status=statuses[3])
    sreq = comm.Isend(buf, dest=MPI.PROC_NULL)
    done = sreq.Test()
    return (buf.tolist(), obj, found, done, [(s.Get_source(), s.Get_tag(), s.Get_count()) for s in statuses],
            MPI.Wtime())


def test_proc_null_sends_and_receives_complete_at_once_and_move_nothing(transport: str) -> None:
    result = sc.run(proc_null, 2, latency=sc.latency.AlphaBeta(ALPHA, BETA), **kw(transport))
    null = (MPI.PROC_NULL, MPI.ANY_TAG, 0)
    assert list(result) == [([7.0] * 3, None, True, True, [null] * 4, 0.0)] * 2
    assert result.stats.total_messages == 0


# ---- modes ----


def ssend_waits_for_the_match(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.ones(2), dest=1, tag=0)  # eager: returns at once
        t_send = MPI.Wtime()
        comm.Ssend(np.ones(2), dest=1, tag=1)
        t_ssend = MPI.Wtime()
        req = comm.issend("sync", dest=1, tag=2)
        early = req.Test()
        req.wait()
        return t_send, t_ssend, early, MPI.Wtime()
    time.sleep(2.0)
    comm.Recv(np.zeros(2), source=0, tag=0)
    comm.Recv(np.zeros(2), source=0, tag=1)
    time.sleep(1.0)
    return comm.recv(source=0, tag=2), MPI.Wtime()


def test_ssend_and_issend_complete_only_when_matched(transport: str) -> None:
    result = sc.run(ssend_waits_for_the_match, 2, latency=sc.latency.Zero(), **kw(transport))
    assert list(result) == [(0.0, 2.0, False, 3.0), ("sync", 3.0)]


# ---- virtual time ----


def timed_send(comm: MPI.Intracomm, n: int, upper: bool) -> float:
    if comm.Get_rank() == 0:
        if upper:
            comm.Send([np.ones(n // 8), MPI.DOUBLE], dest=1, tag=1)
        else:
            comm.send(bytes(n), dest=1, tag=1)
    elif upper:
        comm.Recv(np.empty(n // 8), source=0, tag=1)
    else:
        comm.recv(source=0, tag=1)
    return MPI.Wtime()


async def timed_send_async(comm: sc.Comm, n: int) -> float:
    if comm.rank == 0:
        await comm.send(np.ones(n // 8), dst=1, tag=1)
    else:
        await comm.recv(np.empty(n // 8), src=0, tag=1)
    return comm.now


@pytest.mark.parametrize("n", [1024, 1 << 20], ids=["eager-1KiB", "rendezvous-1MiB"])
def test_send_costs_alpha_plus_n_beta_as_from_an_async_rank(transport: str, n: int) -> None:
    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    sync = sc.run(timed_send, 2, args=(n, True), latency=lat, transport=transport)
    ref = sc.run(timed_send_async, 2, args=(n,), latency=lat, transport=transport)
    assert sync.times == ref.times == list(sync)  # MPI.Wtime() is the rank's virtual clock
    cost = ALPHA + n * BETA
    assert math.isclose(sync.times[1], cost, rel_tol=1e-12, abs_tol=0.0)
    assert sync.times[0] == (0.0 if n <= 65536 else sync.times[1])  # eager returns at once
    assert sync.stats == ref.stats
    pickled = sc.run(timed_send, 2, args=(n, False), latency=lat, **kw(transport))
    size = _pickled_size(bytes(n))  # an object costs its pickle's bytes
    assert math.isclose(pickled.times[1], ALPHA + size * BETA, rel_tol=1e-12, abs_tol=0.0)
    assert pickled.stats.total_bytes == size


def timed_exchange(comm: MPI.Intracomm, n: int) -> float:
    rank, size = comm.Get_rank(), comm.Get_size()
    rbuf = np.empty(n // 8)
    comm.Sendrecv(np.ones(n // 8), dest=(rank + 1) % size, recvbuf=rbuf, source=(rank - 1) % size)
    reqs = [comm.Irecv(rbuf, source=(rank + 1) % size, tag=1),
            comm.Isend(np.ones(n // 8), dest=(rank - 1) % size, tag=1)]
    MPI.Request.Waitall(reqs)
    return MPI.Wtime()


async def timed_exchange_async(comm: sc.Comm, n: int) -> float:
    rank, size = comm.rank, comm.size
    rbuf = np.empty(n // 8)
    await comm.sendrecv(np.ones(n // 8), (rank + 1) % size, rbuf, src=(rank - 1) % size)
    reqs = [comm.irecv(rbuf, src=(rank + 1) % size, tag=1),
            comm.isend(np.ones(n // 8), (rank - 1) % size, tag=1)]
    await sc.wait_all(reqs)
    return comm.now


@pytest.mark.parametrize("world_size", [2, 3, 7])
def test_sendrecv_and_waitall_times_equal_the_async_ones(transport: str, world_size: int) -> None:
    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    n = 1 << 17
    sync = sc.run(timed_exchange, world_size, args=(n,), latency=lat, transport=transport)
    ref = sc.run(timed_exchange_async, world_size, args=(n,), latency=lat, transport=transport)
    assert sync.times == ref.times == list(sync)
    for t in sync.times:
        assert math.isclose(t, 2 * (ALPHA + n * BETA), rel_tol=1e-12, abs_tol=0.0)


# ---- determinism ----


def racing_senders(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank != 0:
        comm.Send(np.full(100 * rank, rank, dtype=np.int64), dest=0)
        return MPI.Wtime()
    order = []
    for _ in range(size - 1):
        status = MPI.Status()
        comm.Probe(source=MPI.ANY_SOURCE, status=status)
        buf = np.empty(status.Get_count(MPI.INT64_T), dtype=np.int64)
        comm.Recv(buf, source=status.Get_source())
        order.append((status.Get_source(), int(buf[0]), MPI.Wtime()))
    return order


def test_same_seed_gives_the_same_results_and_times(transport: str) -> None:
    lat = sc.latency.Jitter(sc.latency.AlphaBeta(ALPHA, BETA), rel=0.5)
    for seed in (0, 1, 2):
        first = sc.run(racing_senders, 5, seed=seed, latency=lat, transport=transport)
        again = sc.run(racing_senders, 5, seed=seed, latency=lat, transport=transport)
        assert list(first) == list(again)
        assert first.times == again.times
        assert sorted(source for source, _, _ in first[0]) == [1, 2, 3, 4]
        assert all(source == value for source, value, _ in first[0])


# ---- errors: MPI error classes ----


def truncated_recv(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.arange(8, dtype=np.float64), dest=1, tag=7)
        comm.Send(np.arange(8, dtype=np.float64), dest=1, tag=8)
        return None
    got = []
    buf = np.zeros(4)
    try:
        comm.Recv(buf, source=0, tag=7)
    except MPI.Exception as exc:
        got.append((exc.Get_error_class(), exc.Get_error_string(), str(exc),
                    isinstance(exc, sc.TruncationError)))
    req = comm.Irecv([buf, 4, MPI.DOUBLE], source=0, tag=8)
    try:
        req.Wait()
    except sc.TruncationError as exc:
        assert isinstance(exc, MPI.Exception)
        got.append((exc.Get_error_class(), exc.Get_error_string(), str(exc), bool(req)))
    return got, buf.tolist()


def test_recv_into_too_small_buffer_is_err_truncate(transport: str) -> None:
    got, buf = sc.run(truncated_recv, 2, transport=transport)[1]
    problem = ("message from rank 0 is 64 bytes but buf holds 32; pass a larger buffer, or size it "
               "with Probe() and Status.Get_count() first")
    assert got == [
        (MPI.ERR_TRUNCATE, "Message truncated", f"rank 1: Recv(buf=float64[4], source=0, tag=7): {problem}",
         True),
        (MPI.ERR_TRUNCATE, "Message truncated", f"rank 1: Irecv(buf=float64[4], source=0, tag=8): {problem}",
         False),
    ]
    assert buf == [0.0] * 4


def uncaught_truncation(comm: MPI.Intracomm) -> None:
    if comm.Get_rank() == 0:
        comm.Send(np.arange(8, dtype=np.float64), dest=1, tag=7)
    else:
        comm.Recv(np.zeros(4), source=0, tag=7)


def test_uncaught_truncation_stops_the_run_as_the_ranks_mpi_error(transport: str) -> None:
    err = rank_error(uncaught_truncation, 2, transport=transport)
    assert err.rank == 1
    cause = err.__cause__
    assert isinstance(cause, MPI.Exception) and isinstance(cause, sc.TruncationError)
    assert cause.Get_error_class() == MPI.ERR_TRUNCATE
    assert str(cause).startswith("rank 1: Recv(buf=float64[4], source=0, tag=7): message from rank 0 "
                                 "is 64 bytes but buf holds 32; ")


def bad_arguments(comm: MPI.Intracomm) -> Any:
    size = comm.Get_size()
    calls = [
        lambda: comm.Send(np.ones(3), dest=size),
        lambda: comm.send("x", dest=-5),
        lambda: comm.Isend(np.ones(3), dest=size + 1, tag=2),
        lambda: comm.Recv(np.ones(3), source=size),
        lambda: comm.irecv(source=-7, tag=1),
        lambda: comm.Send(np.ones(3), dest=0, tag=-3),
        lambda: comm.recv(source=0, tag=-5),
        lambda: comm.Probe(source=size),
    ]
    return mpi_errors(calls)


def test_bad_ranks_and_tags_are_err_rank_and_err_tag(transport: str) -> None:
    result = sc.run(bad_arguments, 2, **kw(transport))
    for rank, got in enumerate(result):
        ring = "for a ring use (comm.rank + 1) % comm.size"
        src = ("source must be in range(2), ANY_SOURCE or PROC_NULL for this comm; pass a rank of this comm, "
               "or ANY_SOURCE")
        assert got == [
            (MPI.ERR_RANK, f"rank {rank}: Send(buf=float64[3], dest=2, tag=0): dest must be in range(2) or "
                           f"PROC_NULL for this comm; {ring}", True),
            (MPI.ERR_RANK, f"rank {rank}: send(obj=str, dest=-5, tag=0): dest must be in range(2) or "
                           f"PROC_NULL for this comm; {ring}", True),
            (MPI.ERR_RANK, f"rank {rank}: Isend(buf=float64[3], dest=3, tag=2): dest must be in range(2) or "
                           f"PROC_NULL for this comm; {ring}", True),
            (MPI.ERR_RANK, f"rank {rank}: Recv(buf=float64[3], source=2, tag=-1): {src}", True),
            (MPI.ERR_RANK, f"rank {rank}: irecv(source=-7, tag=1): {src}", True),
            (MPI.ERR_TAG, f"rank {rank}: Send(buf=float64[3], dest=0, tag=-3): tag must be in "
                          "range(0, 2**31) (MPI.TAG_UB is 2147483647); use a non-negative int below 2**31",
             True),
            (MPI.ERR_TAG, f"rank {rank}: recv(source=0, tag=-5): tag must be in range(0, 2**31) or "
                          "ANY_TAG; use a non-negative int below 2**31, or ANY_TAG", True),
            (MPI.ERR_RANK, f"rank {rank}: Probe(source=2, tag=-1): {src}", True),
        ]


def uncaught_bad_dest(comm: MPI.Intracomm) -> None:
    if comm.Get_rank() == 2:
        comm.Send(np.ones(3, dtype=np.int32), dest=3)


def test_uncaught_bad_dest_stops_the_run_with_err_rank(transport: str) -> None:
    err = rank_error(uncaught_bad_dest, 3, transport=transport)
    assert err.rank == 2
    cause = err.__cause__
    assert isinstance(cause, MPI.Exception) and isinstance(cause, ValueError)
    assert cause.Get_error_class() == MPI.ERR_RANK
    assert str(cause) == ("rank 2: Send(buf=int32[3], dest=3, tag=0): dest must be in range(3) or PROC_NULL "
                          "for this comm; for a ring use (comm.rank + 1) % comm.size")


def type_mismatch(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.arange(4, dtype=np.float64), dest=1, tag=3)
        return None
    buf = np.zeros(4, dtype=np.float32)
    try:
        comm.Recv(buf, source=0, tag=3)
    except MPI.Exception as exc:
        return exc.Get_error_class(), str(exc), isinstance(exc, TypeError), buf.tolist()
    return "no error"


def test_recv_of_another_datatype_is_err_type(transport: str) -> None:
    got = sc.run(type_mismatch, 2, transport=transport)[1]
    assert got[0] == MPI.ERR_TYPE
    assert got[1].startswith("rank 1: Recv(buf=float32[4], source=0, tag=3): ")
    assert "float64" in got[1] and "float32" in got[1] and "from rank 0" in got[1]
    assert got[1].endswith("; receive with the datatype the sender used (MPI type matching)")
    assert got[2:] == (True, [0.0] * 4)


# ---- deadlock ----


def recv_deadlock(comm: MPI.Intracomm) -> None:
    buf = np.zeros(3)
    comm.Recv(buf, source=1 - comm.Get_rank(), tag=5)  # <- recv-deadlock


def ssend_deadlock(comm: MPI.Intracomm) -> None:
    comm.Ssend(np.zeros(3), dest=1 - comm.Get_rank(), tag=6)  # <- ssend-deadlock
    comm.Recv(np.zeros(3), source=1 - comm.Get_rank(), tag=6)


def test_both_ranks_blocking_in_recv_is_a_deadlock_naming_the_line(transport: str) -> None:
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(recv_deadlock, 2, transport=transport)
    line = marked(__file__, "recv-deadlock")
    message = str(info.value)
    assert message.startswith("deadlock: 2 ranks blocked and no message in flight at virtual time 0s\n")
    for rank in (0, 1):
        assert f"rank {rank} waiting in " in message
        assert f"src={1 - rank}, tag=5) at test_mpi_p2p.py:{line}" in message
    assert message.endswith("wait-for cycle: 0 -> 1 -> 0")


def test_both_ranks_blocking_in_ssend_is_a_deadlock_naming_the_line(transport: str) -> None:
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(ssend_deadlock, 2, transport=transport)
    line = marked(__file__, "ssend-deadlock")
    message = str(info.value)
    for rank in (0, 1):
        assert f"rank {rank} waiting in " in message
        assert f"at test_mpi_p2p.py:{line}" in message
