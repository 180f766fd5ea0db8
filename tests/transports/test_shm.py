"""The shm transport moves big arrays through shared memory and never leaves a segment behind."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import simcluster as sc
from simcluster.transports import shm

BIG = 1 << 20  # bytes: well above the shared-memory threshold


async def big_arrays(comm: sc.Comm) -> object:
    """A 1 MiB rendezvous send, a 32 KiB eager send, and an all_reduce of 1 MiB."""
    x = np.full(BIG // 8, float(comm.rank))
    if comm.rank == 0:
        await comm.send(x, dst=1)
        await comm.send(np.arange(4096.0), dst=1)
    elif comm.rank == 1:
        got = await comm.recv(src=0)
        small = await comm.recv(src=0)
        assert got.flags.writeable and small.flags.writeable
        x += got + small[:1]
    await comm.all_reduce(x)
    return float(x[0])


async def crashes_while_arrays_are_in_flight(comm: sc.Comm) -> None:
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    for i in range(8):
        comm.isend(np.full(4096, float(i)), dst=1)  # eager, through a segment each
    await comm.recv(src=1)


async def stream_of_big_messages(comm: sc.Comm, before: list[str]) -> object:
    """Twenty 256 KiB messages into one buffer, then five kept without one: values and segments."""
    size = 1 << 15
    if comm.rank == 0:
        for i in range(20):
            await comm.send(np.full(size, float(i)), dst=1)
        for i in range(5):
            await comm.send(np.full(size, 100.0 + i), dst=1)
        return None
    buf = np.empty(size)
    sums = []
    for _ in range(20):
        await comm.recv(buf, src=0)
        sums.append(float(buf.sum()))
    during = len(set(shm.leftovers()) - set(before))
    kept = [await comm.recv(src=0) for _ in range(5)]  # arrays over segments, still in use
    return sums, during, [float(a.min()) for a in kept], [float(a.max()) for a in kept]


def _new_segments(before: set[str]) -> list[str]:
    return sorted(set(shm.leftovers()) - before)


def test_big_arrays_arrive_intact_and_leave_no_segment() -> None:
    before = set(shm.leftovers())
    result = sc.run(big_arrays, world_size=3, transport=shm.ShmTransport(threshold=1024), procs=3)
    assert list(result) == list(sc.run(big_arrays, world_size=3))
    assert _new_segments(before) == []


def test_segments_are_pooled_and_never_reused_while_an_array_holds_one() -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this system")
    before = shm.leftovers()
    result = sc.run(stream_of_big_messages, world_size=2, args=(before,), transport="shm")
    sums, during, lows, highs = result[1]
    assert sums == [float(i * (1 << 15)) for i in range(20)]
    # twenty messages went through one or two pooled segments, not twenty fresh ones
    assert 1 <= during <= 3
    # each kept array still holds its own message: no segment was lent again under it
    assert lows == highs == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert _new_segments(set(before)) == []


@pytest.mark.timeout(60)  # a crash is reported at once, never waited out
def test_crashed_process_leaves_no_segment_in_dev_shm() -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this system")
    before = set(shm.leftovers())
    with pytest.raises(sc.TransportError, match=r"^run: process 1 \(rank 1, pid \d+\) was killed "
                       r"by SIGKILL; rank 1 lost"):
        sc.run(crashes_while_arrays_are_in_flight, world_size=2, checks="off",
               transport=shm.ShmTransport(threshold=1024))
    assert _new_segments(before) == []


def test_cleanup_unlinks_only_the_runs_own_segments() -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this system")
    mine = shm._segment("simcluster_testrun1_0_1", 16)
    other = shm._segment("simcluster_testrun2_0_1", 16)
    mine.close()
    other.close()
    try:
        assert shm.cleanup("testrun1") == 1
        assert "simcluster_testrun1_0_1" not in shm.leftovers()
        assert "simcluster_testrun2_0_1" in shm.leftovers()
    finally:
        shm.cleanup("testrun2")
