"""Deadlocks and runaway runs end with clear errors, quickly, never a hang."""

from __future__ import annotations

import asyncio
import inspect
import re

import numpy as np
import pytest

import simcluster as sc

MIB = 1 << 20
# A hang never ends; a report comes at once. pytest-timeout fails a test that runs past this
# (the bound leaves room for a loaded CI machine); no test reads the wall clock.
PROMPT = 30  # seconds


def _line() -> int:
    """Return the line number of the caller."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


@pytest.mark.timeout(PROMPT)
def test_head_to_head_rendezvous_sends_deadlock_with_cycle() -> None:
    lines: dict[int, int] = {}

    async def main(comm: sc.Comm) -> None:
        other = 1 - comm.rank
        lines[comm.rank] = _line() + 1
        await comm.send(np.zeros(MIB // 8), dst=other)
        await comm.recv(src=other)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=2)
    err = info.value
    assert isinstance(err, sc.SimclusterError)
    assert err.cycle == [0, 1, 0]
    note = f"[rendezvous: {MIB} bytes > eager_limit 65536]"
    message = str(err)
    rows = message.splitlines()
    assert rows[0] == "deadlock: 2 ranks blocked and no message in flight at virtual time 0s"
    assert rows[1] == f"  rank 0 waiting in send(dst=1, tag=0) {note} at test_deadlock.py:{lines[0]}"
    assert rows[2] == f"  rank 1 waiting in send(dst=0, tag=0) {note} at test_deadlock.py:{lines[1]}"
    assert rows[-1] == "wait-for cycle: 0 -> 1 -> 0"
    assert sorted(err.blocked) == [0, 1]
    assert "send(dst=1, tag=0)" in err.blocked[0]


@pytest.mark.timeout(PROMPT)
def test_the_report_says_where_each_handshake_stands() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send(np.zeros(50_000), dst=1, tag=7)  # 400 kB: a rendezvous
        elif comm.rank == 1:
            await comm.recv(src=0, tag=8)  # matches neither
        else:
            await comm.ssend(np.zeros(4), dst=1, tag=9)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=3)
    rows = str(info.value).splitlines()
    at = rows.index("handshakes under way:")
    assert rows[at + 1:at + 3] == [
        "  rank 0's send of 400,000 bytes to rank 1 (tag 7): request to send sent, waiting for clear to send",
        "  rank 2's synchronous send of 32 bytes to rank 1 (tag 9): message sent, waiting for its "
        "receive to match it",
    ]
    assert rows[at + 3].startswith("wait-for cycle: ")


def test_head_to_head_small_sends_do_not_deadlock() -> None:
    async def main(comm: sc.Comm) -> object:
        other = 1 - comm.rank
        await comm.send(np.full(8, comm.rank), dst=other)
        return int((await comm.recv(src=other))[0])

    assert list(sc.run(main, world_size=2)) == [1, 0]


def test_head_to_head_ssend_deadlocks_even_when_small() -> None:
    async def main(comm: sc.Comm) -> None:
        other = 1 - comm.rank
        await comm.ssend("tiny", dst=other)
        await comm.recv(src=other)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=2)
    assert info.value.cycle == [0, 1, 0]
    assert "ssend(dst=1, tag=0)" in str(info.value)


def test_recv_from_a_finished_rank_is_deadlock_without_cycle() -> None:
    lines: dict[int, int] = {}

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            lines[0] = _line() + 1
            await comm.recv(src=1, tag=3)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=2)
    err = info.value
    assert err.cycle is None
    assert list(err.blocked) == [0]
    assert str(err).splitlines() == [
        "deadlock: 1 rank blocked and no message in flight at virtual time 0s",
        f"  rank 0 waiting in recv(src=1, tag=3) at test_deadlock.py:{lines[0]}",
        "no wait-for cycle: some rank waits for a message nobody sends",
    ]


def test_deadlock_reports_the_virtual_time_it_happened_at() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.sleep(2.5)
        await comm.recv(src=0)

    with pytest.raises(sc.DeadlockError, match=r"^deadlock: 1 rank blocked .* at virtual time 2\.5s\n"):
        sc.run(main, world_size=1)


@pytest.mark.timeout(PROMPT)
def test_three_rank_cycle_of_receives() -> None:
    async def main(comm: sc.Comm) -> None:
        right = (comm.rank + 1) % comm.size
        await comm.recv(src=right)
        await comm.send("never", dst=right)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=3)
    err = info.value
    assert err.cycle == [0, 1, 2, 0]
    assert str(err).splitlines()[-1] == "wait-for cycle: 0 -> 1 -> 2 -> 0"
    for rank in range(3):
        assert f"rank {rank} waiting in recv(src={(rank + 1) % 3}, tag=ANY_TAG) at test_deadlock.py:" in str(err)


def test_cycle_among_some_ranks_while_others_finished() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank in (1, 3):
            other = 4 - comm.rank
            await comm.recv(src=other)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=4)
    assert info.value.cycle == [1, 3, 1]
    assert sorted(info.value.blocked) == [1, 3]


@pytest.mark.timeout(PROMPT)
def test_timeout_stops_a_rank_stuck_in_a_foreign_await() -> None:
    lines: dict[int, int] = {}

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            lines[0] = _line() + 1
            await asyncio.sleep(100)
        else:
            lines[1] = _line() + 1
            await comm.recv(src=0, tag=1)

    with pytest.raises(sc.RunTimeoutError) as info:
        sc.run(main, world_size=2, timeout=0.2)
    err = info.value
    assert isinstance(err, sc.SimclusterError)
    message = str(err)
    assert re.search(r"timed out after 0\.2s of wall time at virtual time 0s", message), message
    assert f"rank 1 waiting in recv(src=0, tag=1) at test_deadlock.py:{lines[1]}" in message
    rank0 = [row for row in message.splitlines() if row.strip().startswith("rank 0 ")]
    assert len(rank0) == 1, message
    assert "awaiting a foreign future" in rank0[0]
    assert rank0[0].endswith(f"at test_deadlock.py:{lines[0]}"), rank0[0]


@pytest.mark.timeout(PROMPT)
def test_timeout_stops_a_rank_that_never_awaits_the_simulator() -> None:
    async def main(comm: sc.Comm) -> None:
        while True:
            await asyncio.sleep(0)  # a busy loop that yields only to asyncio

    with pytest.raises(sc.RunTimeoutError):
        sc.run(main, world_size=2, timeout=0.2)


def test_timeout_must_be_positive() -> None:
    async def main(comm: sc.Comm) -> None:
        pass

    with pytest.raises(ValueError, match=r"^run\(timeout=0\): timeout must be a positive number"):
        sc.run(main, world_size=1, timeout=0)


def test_run_within_timeout_is_unaffected() -> None:
    async def main(comm: sc.Comm) -> int:
        await asyncio.sleep(0.01)
        await comm.sleep(1.0)
        return comm.rank

    result = sc.run(main, world_size=2, timeout=5.0)
    assert list(result) == [0, 1]
    assert result.elapsed == 1.0
