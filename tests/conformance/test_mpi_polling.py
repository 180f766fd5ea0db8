"""Polling loops of synchronous ranks: each fruitless Test or Iprobe costs virtual time.

``while not req.Test(): pass`` is everyday MPI; here each fruitless poll costs
the run's ``poll_cost`` of virtual time (1e-6 s by default), so the loop ends
when the message arrives, and a run where every live rank polls for something
that never comes ends in a deadlock report.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI


def polling_test_loop(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        time.sleep(0.001)
        comm.Send(np.arange(2.0), dest=1, tag=3)
        return None
    buf = np.zeros(2)
    req = comm.Irecv(buf, source=0, tag=3)
    polls = 0
    while not req.Test():
        polls += 1
    return polls, MPI.Wtime(), buf.tolist()


def test_a_test_loop_advances_virtual_time_until_the_message_arrives(transport: str) -> None:
    polls, now, got = sc.run(polling_test_loop, 2, transport=transport)[1]
    assert got == [0.0, 1.0]
    assert polls == 1000  # 1 ms at 1 us a poll
    assert now == pytest.approx(0.001)


def test_poll_cost_sets_what_a_fruitless_poll_costs() -> None:
    polls, now, _ = sc.run(polling_test_loop, 2, poll_cost=1e-4)[1]
    assert polls == 10
    assert now == pytest.approx(0.001)


def iprobe_loop(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 1:
        time.sleep(0.0005)
        comm.send("late", dest=0, tag=7)
        return None
    polls = 0
    status = MPI.Status()
    while not comm.Iprobe(source=MPI.ANY_SOURCE, tag=7, status=status):
        polls += 1
    return polls, status.Get_source(), comm.recv(source=1, tag=7), MPI.Wtime()


def test_an_iprobe_loop_ends_when_the_message_arrives(transport: str) -> None:
    polls, source, got, now = sc.run(iprobe_loop, 2, transport=transport)[0]
    assert (polls, source, got) == (500, 1, "late")
    assert now == pytest.approx(0.0005)


def polling_testany_loop(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() > 0:
        time.sleep(0.0001 * comm.Get_rank())
        comm.send(comm.Get_rank(), dest=0)
        return None
    reqs = [comm.irecv(source=r) for r in range(1, comm.Get_size())]
    order = []
    while len(order) < len(reqs):
        index, flag, msg = MPI.Request.testany(reqs)
        if flag and index != MPI.UNDEFINED:
            order.append(msg)
    return order


def test_a_testany_loop_sees_messages_in_arrival_order() -> None:
    assert sc.run(polling_testany_loop, 4)[0] == [1, 2, 3]


def everyone_polls(comm: MPI.Intracomm) -> None:
    other = 1 - comm.Get_rank()
    req = comm.irecv(source=other, tag=1)  # nobody ever sends it
    while not req.test()[0]:
        pass


def test_every_rank_polling_for_what_never_comes_is_a_deadlock() -> None:
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(everyone_polls, 2, timeout=60)
    text = str(info.value)
    assert "deadlock: 2 ranks blocked and no message in flight" in text
    assert "rank 0 waiting in irecv(src=1, tag=1)" in text
    assert "rank 1 waiting in irecv(src=0, tag=1)" in text


def polls_then_gives_up(comm: MPI.Intracomm) -> Any:
    """A bounded poll loop: it gives up and sends, and then the other side's message comes."""
    other = 1 - comm.Get_rank()
    req = comm.irecv(source=other, tag=1)
    if comm.Get_rank() == 0:
        for _ in range(100):
            if req.test()[0]:
                break
        comm.send("from 0", dest=1, tag=1)
        return req.wait()
    got = req.wait()
    comm.send("from 1", dest=0, tag=1)
    return got


def test_a_bounded_poll_loop_that_gives_up_is_not_a_deadlock() -> None:
    assert list(sc.run(polls_then_gives_up, 2)) == ["from 1", "from 0"]


@pytest.mark.parametrize("bad", [0, -1e-6, float("inf"), "1us", True])
def test_a_bad_poll_cost_is_refused_up_front(bad: Any) -> None:
    with pytest.raises(sc.UsageError, match=r"run\(poll_cost=.*\): poll_cost must be a positive number"):
        sc.run(polling_test_loop, 2, poll_cost=bad)
