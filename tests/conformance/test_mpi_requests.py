"""Requests through ``simcluster.MPI`` from synchronous ranks, on every transport.

The behaviours of test_requests.py with mpi4py's calls: ``Wait``/``Test``/``Cancel``/
``Free``/``Get_status``, the ``Waitall``/``Waitany``/``Waitsome``/``Test*`` class methods,
their lowercase forms returning objects, statuses, and persistent requests. A
synchronous rank's ``time.sleep`` is virtual, so waits below are exact virtual times.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI
from mpi_helpers import kw

EMPTY = (MPI.ANY_SOURCE, MPI.ANY_TAG, 0)
"""What an empty status says: a completed send, a null request."""


def _status(status: MPI.Status) -> tuple[int, int, int]:
    return status.Get_source(), status.Get_tag(), status.Get_count()


# ---- Wait, Test, REQUEST_NULL ----


def wait_and_test(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        time.sleep(1.0)
        comm.Send(np.arange(3.0), dest=1, tag=4)
        comm.send("late", dest=1, tag=5)
        return None
    buf = np.zeros(3)
    req = comm.Irecv(buf, source=0, tag=4)
    oreq = comm.irecv(source=0, tag=5)
    at_start = (req.Test(), oreq.test(), bool(req))
    time.sleep(0.5)
    at_half = (round(MPI.Wtime(), 9), req.Test(), buf.tolist())  # two fruitless polls: 2 us
    time.sleep(1.0)
    status = MPI.Status()
    at_end = (round(MPI.Wtime(), 9), req.Test(status), _status(status), buf.tolist(), bool(req),
              req == MPI.REQUEST_NULL)
    again = MPI.Status()
    again.Set_source(7)
    waited = req.Wait(again)  # a completed request is REQUEST_NULL: returns at once, empty status
    return at_start, at_half, at_end, (waited, _status(again)), oreq.test(), oreq.test()


def test_test_is_false_before_arrival_and_a_completed_request_is_request_null(transport: str) -> None:
    got = sc.run(wait_and_test, 2, **kw(transport))[1]
    assert got == ((False, (False, None), True), (0.500002, False, [0.0] * 3),
                   (1.500003, True, (0, 4, 24), [0.0, 1.0, 2.0], False, True), (True, EMPTY),
                   (True, "late"), (True, None))


def small_isend_completes_at_once(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        req = comm.Isend(np.arange(4.0), dest=1)
        done_at_post = req.Test()
        sreq = comm.Issend(np.arange(4.0), dest=1, tag=1)
        sync_at_post = sreq.Test()
        sreq.Wait()
        return done_at_post, sync_at_post, MPI.Wtime()
    time.sleep(2.0)
    comm.Recv(np.zeros(4), source=0)
    comm.Recv(np.zeros(4), source=0, tag=1)
    return MPI.Wtime()


def test_small_isend_is_done_at_once_and_issend_when_matched(transport: str) -> None:
    result = sc.run(small_isend_completes_at_once, 2, transport=transport, latency=sc.latency.Zero())
    assert list(result) == [(True, False, 2.0), 2.0]


# ---- cancel ----


def cancel_unmatched(comm: MPI.Intracomm) -> Any:
    req = comm.Irecv(np.zeros(2), source=MPI.ANY_SOURCE, tag=5)
    req.Cancel()
    status = MPI.Status()
    req.Wait(status)
    oreq = comm.irecv(source=MPI.ANY_SOURCE, tag=6)
    oreq.cancel()
    ostatus = MPI.Status()
    value = oreq.wait(ostatus)
    return status.Is_cancelled(), bool(req), value, ostatus.Is_cancelled()


def test_cancel_of_an_unmatched_irecv(transport: str) -> None:
    result = sc.run(cancel_unmatched, 2, **kw(transport))
    assert list(result) == [(True, False, None, True)] * 2
    assert result.leaks == []


def cancel_then_receive(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.full(2, 1.0), dest=1, tag=1)  # waits as unexpected at rank 1
        time.sleep(1.0)
        comm.Send(np.full(2, 2.0), dest=1, tag=2)
        return None
    time.sleep(0.5)
    matched_buf = np.zeros(2)
    matched = comm.Irecv(matched_buf, source=0, tag=1)
    matched.Cancel()  # too late: it matched the waiting message at once
    s1 = MPI.Status()
    matched.Wait(s1)
    stale_buf, fresh_buf = np.zeros(2), np.zeros(2)
    stale = comm.Irecv(stale_buf, source=0, tag=2)
    stale.Cancel()
    fresh = comm.Irecv(fresh_buf, source=0, tag=2)
    statuses = [MPI.Status(), MPI.Status()]
    MPI.Request.Waitall([stale, fresh], statuses)
    return (s1.Is_cancelled(), matched_buf.tolist(), statuses[0].Is_cancelled(), stale_buf.tolist(),
            statuses[1].Is_cancelled(), fresh_buf.tolist(), MPI.Wtime())


def test_cancel_is_too_late_once_matched_and_a_cancelled_irecv_takes_nothing(transport: str) -> None:
    got = sc.run(cancel_then_receive, 2, transport=transport, latency=sc.latency.Zero())[1]
    assert got == (False, [1.0, 1.0], True, [0.0, 0.0], False, [2.0, 2.0], 1.0)


# ---- Waitall, Waitany, Waitsome ----


def wait_all_in_request_order(comm: MPI.Intracomm) -> Any:
    rank = comm.Get_rank()
    if rank == 0:
        bufs = [np.zeros(1) for _ in range(3)]
        reqs = [comm.Irecv(bufs[r - 1], source=r) for r in (1, 2, 3)]
        reqs.append(comm.Isend(np.array([-1.0]), dest=1, tag=9))
        statuses: list[MPI.Status] = []
        done = MPI.Request.Waitall(reqs, statuses)
        objs = MPI.Request.waitall([comm.irecv(source=r, tag=2) for r in (3, 1, 2)])
        return done, [b.tolist() for b in bufs], [_status(s) for s in statuses], objs, MPI.Wtime()
    if rank == 1:
        comm.Recv(np.zeros(1), source=0, tag=9)
    time.sleep(float(4 - rank))  # rank 3 sends first, rank 1 last
    comm.Send(np.array([rank * 100.0]), dest=0)
    comm.send(f"from {rank}", dest=0, tag=2)
    return None


def test_waitall_fills_buffers_and_statuses_in_request_order(transport: str) -> None:
    got = sc.run(wait_all_in_request_order, 4, latency=sc.latency.Zero(), **kw(transport))[0]
    assert got == (True, [[100.0], [200.0], [300.0]], [(1, 0, 8), (2, 0, 8), (3, 0, 8), EMPTY],
                   ["from 3", "from 1", "from 2"], 3.0)


def wait_nothing(comm: MPI.Intracomm) -> Any:
    nulls = [MPI.REQUEST_NULL, MPI.Request()]
    return (MPI.Request.Waitall([]), MPI.Request.waitall([]), MPI.Request.Waitany(nulls),
            MPI.Request.waitany(nulls), MPI.Request.Waitsome(nulls), MPI.Request.Testall([]),
            MPI.Request.Testany(nulls), MPI.Request.Testsome(nulls))


def test_waiting_on_no_active_request_returns_at_once(transport: str) -> None:
    assert list(sc.run(wait_nothing, 1, transport=transport)) == [
        (True, [], MPI.UNDEFINED, (MPI.UNDEFINED, None), None, True, (MPI.UNDEFINED, True), None)]


def wait_any_first_in_virtual_time(comm: MPI.Intracomm) -> Any:
    rank = comm.Get_rank()
    if rank == 0:
        reqs = [comm.irecv(source=1), comm.irecv(source=2)]
        status = MPI.Status()
        first = MPI.Request.waitany(reqs, status)
        at = MPI.Wtime()
        rest = reqs[0].wait()
        bufs = [np.zeros(1), np.zeros(1)]
        breqs = [comm.Irecv(bufs[0], source=2, tag=1), comm.Irecv(bufs[1], source=1, tag=1)]
        time.sleep(5.0)  # both have arrived by now
        index = MPI.Request.Waitany(breqs)  # the lowest index among the complete ones
        MPI.Request.Waitall(breqs)
        return first, status.Get_source(), at, rest, index, [b.tolist() for b in bufs], MPI.Wtime()
    time.sleep(3.0 if rank == 1 else 1.0)
    comm.send(f"from {rank}", dest=0)
    comm.Send(np.array([float(rank)]), dest=0, tag=1)
    return None


def test_waitany_returns_the_first_to_complete_in_virtual_time(transport: str) -> None:
    for seed in range(3):
        result = sc.run(wait_any_first_in_virtual_time, 3, seed=seed, latency=sc.latency.Zero(),
                        **kw(transport))
        got = result[0]
        assert got == ((1, "from 2"), 2, 1.0, "from 1", 0, [[2.0], [1.0]], 8.0)


def wait_some(comm: MPI.Intracomm) -> Any:
    rank = comm.Get_rank()
    if rank == 0:
        bufs = [np.zeros(1) for _ in range(3)]
        reqs = [comm.Irecv(bufs[i], source=i + 1) for i in range(3)]
        time.sleep(1.5)  # ranks 1 and 2 have arrived, rank 3 has not
        statuses: list[MPI.Status] = []
        some = MPI.Request.Waitsome(reqs, statuses)
        at_some = (MPI.Wtime(), [s.Get_source() for s in statuses])
        rest = MPI.Request.Waitsome(reqs)
        at_rest = MPI.Wtime()
        none_left = MPI.Request.Waitsome(reqs)
        return some, at_some, rest, at_rest, none_left, [b.tolist() for b in bufs]
    time.sleep(3.0 if rank == 3 else 1.0)
    comm.Send(np.array([float(rank)]), dest=0)
    return None


def test_waitsome_returns_every_completed_request(transport: str) -> None:
    got = sc.run(wait_some, 4, transport=transport, latency=sc.latency.Zero())[0]
    assert got == ([0, 1], (1.5, [1, 2]), [2], 3.0, None, [[1.0], [2.0], [3.0]])


def nonblocking_checks(comm: MPI.Intracomm) -> Any:
    rank = comm.Get_rank()
    if rank == 0:
        reqs = [comm.irecv(source=1), comm.irecv(source=2)]
        seen = [(MPI.Wtime(), MPI.Request.Testall(reqs), MPI.Request.testany(reqs),
                 MPI.Request.Testsome(reqs))]
        time.sleep(1.5)  # rank 2 arrived at 1.0, rank 1 not yet (fruitless polls add microseconds)
        status = MPI.Status()
        seen.append((round(MPI.Wtime(), 4), MPI.Request.Get_status_all(reqs), reqs[1].Get_status(status),
                     status.Get_source(), bool(reqs[1]), MPI.Request.testall(reqs),
                     MPI.Request.testany(reqs)))
        time.sleep(2.0)  # both arrived
        seen.append((round(MPI.Wtime(), 4), MPI.Request.testsome(reqs), MPI.Request.testall(reqs)))
        return seen
    time.sleep(3.0 if rank == 1 else 1.0)
    comm.send(f"from {rank}", dest=0)
    return None


def test_test_calls_never_block_and_get_status_completes_nothing(transport: str) -> None:
    got = sc.run(nonblocking_checks, 3, latency=sc.latency.Zero(), **kw(transport))[0]
    assert got == [
        (0.0, False, (MPI.UNDEFINED, False, None), []),
        (1.5, False, True, 2, True, (False, None), (1, True, "from 2")),
        (3.5, ([0], ["from 1"]), (True, [None, None])),
    ]


# ---- free, failures, persistent requests ----


def free_a_pending_send(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        data = np.ones(1 << 14)  # rendezvous: still pending when freed; kept alive until acknowledged
        req = comm.Isend(data, dest=1)
        req.Free()
        comm.Barrier()
        comm.Recv(np.zeros(1), source=1, tag=1)  # MPI's way to learn a freed send has completed
        return bool(req), req == MPI.REQUEST_NULL
    comm.Barrier()
    buf = np.zeros(1 << 14)
    comm.Recv(buf, source=0)
    comm.Send(np.zeros(1), dest=0, tag=1)
    return float(buf.sum())


def test_a_freed_request_still_completes_and_is_no_leak(transport: str) -> None:
    result = sc.run(free_a_pending_send, 2, transport=transport)  # warnings are errors: no leak reported
    assert list(result) == [(False, True), float(1 << 14)]
    assert result.leaks == []


def failed_request(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        comm.Send(np.ones(8), dest=1)
        return None
    req = comm.Irecv(np.zeros(4), source=0)
    try:
        req.Wait()
    except MPI.Exception as exc:
        first = (exc.Get_error_class(), isinstance(exc, sc.TruncationError))
    status = MPI.Status()
    return first, bool(req), req.Wait(status), _status(status)


def test_a_failed_request_raises_once_then_is_request_null(transport: str) -> None:
    got = sc.run(failed_request, 2, transport=transport)[1]
    assert got == ((MPI.ERR_TRUNCATE, True), False, True, EMPTY)


def persistent(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    sbuf, rbuf = np.zeros(2), np.zeros(2)
    sreq = comm.Send_init(sbuf, dest=(rank + 1) % size, tag=3)
    rreq = comm.Recv_init(rbuf, source=(rank - 1) % size, tag=3)
    got = []
    for step in range(3):
        sbuf[:] = 10 * rank + step  # each Start sends the buffer's current contents
        MPI.Prequest.Startall([rreq, sreq])
        MPI.Request.Waitall([rreq, sreq])
        got.append(rbuf.tolist())
    active = (bool(sreq), bool(rreq))
    sreq.Free()
    rreq.Free()
    return got, active, bool(sreq)


@pytest.mark.parametrize("world_size", [1, 3])
def test_persistent_requests_start_again_after_each_wait(transport: str, world_size: int) -> None:
    for rank, got in enumerate(sc.run(persistent, world_size, transport=transport)):
        left = (rank - 1) % world_size
        assert got == ([[10.0 * left + step] * 2 for step in range(3)], (True, True), False)


# ---- misuse ----


def polling_with_sleep(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        time.sleep(0.9)
        comm.Send(np.ones(2), dest=1)
        return None
    req = comm.Irecv(np.zeros(2), source=0)
    polls = 0
    while not req.Test():
        time.sleep(0.25)  # virtual: time advances, and the message arrives
        polls += 1
    return polls, round(MPI.Wtime(), 9)


def test_polling_with_time_sleep_works(transport: str) -> None:
    assert sc.run(polling_with_sleep, 2, transport=transport, latency=sc.latency.Zero())[1] == (4, 1.000004)


def not_requests(comm: MPI.Intracomm) -> Any:
    got = []
    for call in (lambda: MPI.Request.Waitall([1]), lambda: MPI.Request.testany(["req"])):
        try:
            call()
        except TypeError as exc:
            got.append(str(exc))
    return got


def test_wait_helpers_reject_things_that_are_not_requests(transport: str) -> None:
    assert list(sc.run(not_requests, 1, transport=transport)) == [[
        "Request.waitall(): 1 is not an MPI.Request; pass the requests that Isend/Irecv/I<collective> "
        "returned",
        "Request.testany(): 'req' is not an MPI.Request; pass the requests that Isend/Irecv/I<collective> "
        "returned"]]
