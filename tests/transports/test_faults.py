"""Faults end a multi-process run with a clear error within seconds, never a hang."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.transports.tcp import TcpTransport

# Every failure is reported within seconds; pytest-timeout fails a test that runs past this
# (room for a loaded CI machine); no test reads the wall clock.
FAST = 60  # seconds


class Point:
    """Not sendable by msgpack: needs serializer="pickle"."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x


async def raises_on_rank_2(comm: sc.Comm) -> None:
    await comm.barrier()
    if comm.rank == 2:
        await comm.sleep(1.0)
        raise ValueError("bad input on rank 2")
    await comm.recv(src=2)  # never satisfied


async def killed_on_rank_1(comm: sc.Comm) -> None:
    await comm.barrier()
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    await comm.barrier()


async def ring_deadlock(comm: sc.Comm) -> None:
    await comm.recv(src=(comm.rank + 1) % comm.size, tag=3)  # everyone waits, nobody sends


async def unreceived_rendezvous(comm: sc.Comm) -> None:
    if comm.rank == 0:
        comm.isend(np.zeros(50_000), dst=1, tag=7)  # 400 kB: a rendezvous, never received
    await comm.recv(src=1 - comm.rank, tag=8)  # nobody sends


async def finished_sender(comm: sc.Comm) -> None:
    if comm.rank == 0:
        comm.isend(np.zeros(50_000), dst=1, tag=7)  # its process has no rank left blocked
        return
    await comm.recv(src=0, tag=8)


async def many_unreceived(comm: sc.Comm) -> None:
    after = (comm.rank + 1) % comm.size
    for tag in range(9):  # 18 handshakes in each of 2 processes: more than the report lists
        comm.isend(np.zeros(50_000), dst=after, tag=tag)
    await comm.recv(src=after, tag=9)


async def spins(comm: sc.Comm) -> None:
    if comm.rank == 1:
        while True:  # never awaits: virtual time cannot advance
            pass
    await comm.recv(src=1)


async def returns_a_set_of_points(comm: sc.Comm) -> object:
    return {comm.rank} if comm.rank else Point(0)


async def sends_a_point(comm: sc.Comm) -> object:
    if comm.rank == 0:
        await comm.send(Point(7), dst=1)
        return None
    return await comm.recv(src=0)


@pytest.mark.parametrize("name", ["shm", "tcp"])
@pytest.mark.timeout(FAST)
def test_rank_that_raises_is_a_rank_error_with_the_remote_traceback(name: str) -> None:
    with pytest.raises(sc.RankError) as info:
        sc.run(raises_on_rank_2, world_size=4, transport=name, procs=2)
    err = info.value
    assert err.rank == 2
    assert str(err).startswith("rank 2: run: raised ValueError: bad input on rank 2")
    cause = err.__cause__
    assert type(cause) is ValueError and cause.args == ("bad input on rank 2",)
    text = cause.remote_traceback  # type: ignore[attr-defined]
    assert "Traceback (most recent call last)" in text
    assert 'raise ValueError("bad input on rank 2")' in text
    assert "process 1" in cause.remote_where  # type: ignore[attr-defined]
    import traceback

    frames = traceback.extract_tb(cause.__traceback__)  # rebuilt: it points at the source line
    assert frames[-1].name == "raises_on_rank_2"
    assert frames[-1].line == 'raise ValueError("bad input on rank 2")'


@pytest.mark.parametrize("name", ["shm", "tcp"])
@pytest.mark.timeout(FAST)
def test_killed_hosting_process_is_a_transport_error_naming_the_lost_ranks(name: str) -> None:
    with pytest.raises(sc.TransportError) as info:
        sc.run(killed_on_rank_1, world_size=4, transport=name, procs=4)
    message = str(info.value)
    assert message.startswith("run: process 1 (rank 1, pid ")
    assert "was killed by SIGKILL; rank 1 lost" in message
    assert info.value.ranks == [1]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["shm", "tcp"])
@pytest.mark.timeout(FAST)
def test_deadlock_across_processes_has_the_memory_transports_report(name: str) -> None:
    with pytest.raises(sc.DeadlockError) as ref:
        sc.run(ring_deadlock, world_size=4)
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(ring_deadlock, world_size=4, transport=name, procs=3)
    assert str(info.value) == str(ref.value)
    assert info.value.cycle == ref.value.cycle == [0, 1, 2, 3, 0]
    assert info.value.blocked == ref.value.blocked


@pytest.mark.timeout(FAST)
def test_deadlock_across_processes_says_where_each_handshake_stands() -> None:
    with pytest.raises(sc.DeadlockError) as ref:
        sc.run(unreceived_rendezvous, world_size=2)
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(unreceived_rendezvous, world_size=2, transport="shm", procs=2)
    line = ("  rank 0's send of 400,000 bytes to rank 1 (tag 7): request to send sent, "
            "waiting for clear to send")
    assert line in str(ref.value).splitlines()
    assert str(info.value) == str(ref.value)


@pytest.mark.parametrize("program, world_size", [(finished_sender, 2), (many_unreceived, 4)])
@pytest.mark.timeout(FAST)
def test_the_handshakes_of_every_process_are_listed_as_in_one(program: Any, world_size: int) -> None:
    with pytest.raises(sc.DeadlockError) as ref:
        sc.run(program, world_size=world_size)
    with pytest.raises(sc.DeadlockError) as info:
        sc.run(program, world_size=world_size, transport="shm", procs=2)
    assert "rank 0's send of 400,000 bytes to rank 1 (tag" in str(ref.value)
    assert str(info.value) == str(ref.value)


@pytest.mark.slow
@pytest.mark.timeout(FAST)
def test_rank_that_never_awaits_times_out_and_its_process_is_killed() -> None:
    with pytest.raises(sc.RunTimeoutError) as info:
        sc.run(spins, world_size=2, transport="tcp", timeout=1.0)
    message = str(info.value)
    assert message.startswith("run: timed out after 1.0s of wall time")
    assert "process 1 (rank 1, pid" in message and "did not answer" in message
    # process 0 waits in a round's exchange, and answers from there
    assert f"  rank 0 waiting in recv(src=1, tag=ANY_TAG) at test_faults.py:{spins.__code__.co_firstlineno + 4}\n" in message


@pytest.mark.timeout(FAST)
def test_peer_that_never_connects_is_a_clear_error_after_the_connect_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(sc.TransportError) as info:
        sc.run(ring_deadlock, world_size=2, transport=TcpTransport(connect_timeout=1.0),
               nnodes=2, node_rank=0, master_addr="127.0.0.1", master_port=port)
    assert str(info.value) == (
        "run: process 1 (rank 1) did not connect within 1s; look for its own error output, "
        "or raise connect_timeout")


@pytest.mark.parametrize("name", ["shm", "tcp"])
def test_return_value_msgpack_cannot_carry_is_a_rank_error_naming_the_fix(name: str) -> None:
    with pytest.raises(sc.RankError) as info:
        sc.run(returns_a_set_of_points, world_size=2, transport=name)
    assert info.value.rank == 0
    assert str(info.value.__cause__) == (
        "rank 0: run: the return value cannot be sent back from its hosting process (Point is "
        'not sendable); return a dict/list/array instead, or run(..., serializer="pickle")')


@pytest.mark.parametrize("name", ["memory", "shm", "tcp"])
def test_serializer_pickle_carries_what_msgpack_cannot(name: str) -> None:
    assert list(sc.run(sends_a_point, world_size=2, transport=name, serializer="pickle")) == [
        None, Point(7)]
    assert list(sc.run(returns_a_set_of_points, world_size=2, transport=name,
                       serializer="pickle")) == [Point(0), {1}]
    with pytest.raises(sc.RankError) as info:
        sc.run(sends_a_point, world_size=2, transport=name)
    assert str(info.value.__cause__) == (
        'rank 0: send(obj=Point): Point is not sendable; send a dict/list/array instead, or '
        'run(..., serializer="pickle")')


UNGUARDED = textwrap.dedent('''
    import simcluster as sc

    async def main(comm):
        return comm.rank

    print(sc.run(main, world_size=2, transport=TRANSPORT))  # no `if __name__ == "__main__":`
''')


def _run_unguarded(tmp_path: Path, name: str, verbose: bool) -> tuple[int, str, Path]:
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED.replace("TRANSPORT", repr(name)))
    env = {k: v for k, v in os.environ.items() if k != "SIMCLUSTER_VERBOSE"}
    if verbose:
        env["SIMCLUSTER_VERBOSE"] = "1"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    return done.returncode, done.stderr, script


@pytest.mark.parametrize("name", ["shm", pytest.param("tcp", marks=pytest.mark.slow)])
def test_script_without_main_guard_gets_one_clear_message(tmp_path: Path, name: str) -> None:
    code, err, script = _run_unguarded(tmp_path, name, verbose=False)
    assert code == 1, err
    last = err.rstrip().splitlines()[-1]
    assert last.startswith("simcluster.transports.base.TransportError: run: process "), err
    assert (f"could not start: {script} calls run() when it is imported, and every hosting "
            "process imports it again; put the sc.run(...) call under "
            '`if __name__ == "__main__":` (SIMCLUSTER_VERBOSE=1 shows the hosting processes\' '
            "tracebacks)") in last, err
    assert err.count("Traceback (most recent call last)") == 1, err  # the caller's own, only
    assert "multiprocessing" not in err and "RuntimeError" not in err, err


def test_script_without_main_guard_shows_child_tracebacks_when_verbose(tmp_path: Path) -> None:
    code, err, script = _run_unguarded(tmp_path, "shm", verbose=True)
    assert code == 1, err
    assert f"could not start: {script} calls run() when it is imported" in err, err
    assert "multiprocessing" in err, err  # a hosting process's stack: multiprocessing started it
    assert f'File "{script}", line 7, in <module>' in err, err
