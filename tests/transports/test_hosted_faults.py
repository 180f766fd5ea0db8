"""Fault plans across hosting processes: shm, tcp and mpi give the memory transport's run.

Each program below runs under a fault plan on the memory transport and on
shm and tcp (2 and 4 hosting processes), and every rank's values, virtual
times and crashes must be equal. The latency model has a lookahead, so the
hosted runs use windows (``hosting.rounds``): a crash, a revocation or an
agreement made inside one must still reach the other processes at the times
one process gives. Under ``mpiexec`` (``__main__`` below) the same programs
run on the mpi transport; that test needs the real mpi4py and MPICH.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc

AB = sc.latency.AlphaBeta(alpha=1e-6, beta=1e-9)  # one hop: 1 us
import mpi_jobs

HERE = Path(__file__).resolve()


# ---- the programs ----


async def resilient_sum(comm: sc.Comm) -> Any:
    """Rounds of all_reduce; on a failure: revoke, acknowledge, shrink, go on."""
    seen: list[Any] = []
    for _ in range(4):
        try:
            seen.append(await comm.all_reduce(comm.rank + 1))
        except sc.ProcessFailedError as exc:
            seen.append(("failed", exc.failed, exc.time))
            comm.revoke()
            comm.ack_failed()
            comm = await comm.shrink()
        await comm.sleep(1e-4)
    return seen, comm.size, comm.now


async def point_to_point(comm: sc.Comm) -> Any:
    """The last rank crashes at 1 ms (the plan): what each survivor's point-to-point calls see."""
    last = comm.size - 1
    if comm.rank == last:
        await comm.send("sent before", dst=0)
        await comm.sleep(1.0)
        return None
    seen: list[Any] = []
    if comm.rank == 0:
        seen.append(await comm.recv(src=last))  # sent before the crash: still received
        try:
            await comm.recv(src=last)
        except sc.ProcessFailedError as exc:
            seen.append(("recv", exc.failed, exc.time, comm.now))
        await comm.send("after", dst=2)
    elif comm.rank == 1:
        try:
            await comm.send(np.zeros(50_000), dst=last)  # rendezvous: waits for the receiver
        except sc.ProcessFailedError as exc:
            seen.append(("rendezvous", exc.failed, comm.now))
    elif comm.rank == 2:
        try:
            await comm.recv()  # any source: the failed rank might have been the one
        except sc.ProcessFailedError as exc:
            seen.append(("any source", exc.pending, comm.now))
        seen.append(comm.ack_failed())
        seen.append(await comm.recv())
    return seen, comm.now


async def revocation(comm: sc.Comm) -> Any:
    """Rank 0 revokes the world at 1 ms; the others see it one hop (1 us) later."""
    if comm.rank == 0:
        await comm.sleep(1e-3)
        comm.revoke()
        return comm.is_revoked, comm.now
    await comm.sleep(1e-3 - 1e-6)
    seen: list[Any] = []
    for _ in range(6):
        seen.append((comm.now, comm.is_revoked))
        await comm.sleep(0.4e-6)
    try:
        await comm.recv(src=0)
    except sc.RevokedError as exc:
        seen.append(("revoked", exc.by, exc.time, comm.now))
    return seen


async def pending_when_revoked(comm: sc.Comm) -> Any:
    """A receive posted before the revocation reaches its rank fails when it does."""
    if comm.rank == 1:
        await comm.sleep(2e-3)
        comm.revoke()
        return comm.now
    try:
        await comm.recv(src=1)
    except sc.RevokedError as exc:
        return exc.by, exc.time, comm.now
    return "received"


async def agree_and_shrink(comm: sc.Comm) -> Any:
    """Agreements before and after rank 1 fails (the plan), then shrink."""
    out: list[Any] = [await comm.agree(0b1111 if comm.rank else 0b0111), comm.now]
    await comm.sleep(2e-3)
    try:
        out.append(await comm.agree(0b0011))
    except sc.ProcessFailedError as exc:
        out.append(("agree", exc.failed, comm.now))
    out.append(comm.ack_failed())
    out.append(await comm.agree(comm.rank | 0b100))
    small = await comm.shrink()
    out.append((small.size, small.rank, await small.all_reduce(comm.rank), comm.now))
    return out


async def stragglers(comm: sc.Comm) -> Any:
    """A ring all_reduce under slow ranks, a cut and a delay (no crash)."""
    x = np.full(1000, float(comm.rank))
    times = []
    for _ in range(3):
        await comm.all_reduce(x, algorithm="ring")
        times.append(comm.now)
        await comm.sleep(1e-3)
    return times


async def handshake(comm: sc.Comm) -> Any:
    """Rank 0 sends rank 1 400 kB (a rendezvous: request to send, clear to send, data); rank 1
    posts its receive at 5 us. The plans crash either side at each point of the handshake."""
    if comm.rank == 0:
        req = comm.isend(np.zeros(50_000), 1)
        try:
            await req
        except sc.ProcessFailedError as exc:
            return ("send failed", exc.failed, exc.time, comm.now)
        return ("sent", comm.now)
    if comm.rank == 1:
        await comm.sleep(5e-6)
        try:
            got = await comm.recv(src=0)
        except sc.ProcessFailedError as exc:
            return ("recv failed", exc.failed, exc.time, comm.now)
        return ("received", len(got), comm.now)
    return None


HANDSHAKE = {  # where the crash falls: 0 posts its request to send at 0, 1 its receive at 5 us
    "before the receive matched": "crash:0@3us",
    "with the data on its way": "crash:0@7us",
    "before the request to send was matched": "crash:1@3us",
    "after the clear to send": "crash:1@5.5us",
    "while the data lands": "crash:1@300us",
}

CASES = {
    "resilient_sum at a time": (resilient_sum, "crash:2@0.15ms"),
    "resilient_sum at a call": (resilient_sum, "crash:1@all_reduce#3"),
    "resilient_sum from the start": (resilient_sum, "crash:3@0"),
    "resilient_sum at random": (resilient_sum, "random:4000:2"),
    "resilient_sum after it finished": (resilient_sum, "crash:2@1"),  # a finished rank does not crash
    "point_to_point": (point_to_point, "crash:3@1ms"),
    "revocation": (revocation, None),
    "pending_when_revoked": (pending_when_revoked, None),
    "agree_and_shrink": (agree_and_shrink, "crash:1@1ms"),
    "stragglers": (stragglers, "slow:1x3@0..1.5ms;cut:0|2-3@2ms..3ms;delay:3|0+50us"),
    **{f"handshake: {where}": (handshake, plan) for where, plan in HANDSHAKE.items()},
}


def _outcome(result: sc.RunResult) -> dict[str, Any]:
    """What must be equal on every transport, as JSON has it."""
    return json.loads(json.dumps({"values": list(result), "times": list(result.times),
                                  "crashed": sorted(result.crashed.items())}, default=repr))


def _run(name: str, transport: str, procs: int = 1, seed: int = 3) -> dict[str, Any]:
    fn, plan = CASES[name]
    hosted: dict[str, Any] = {} if transport == "memory" else {"transport": transport}
    if transport in ("shm", "tcp"):
        hosted["procs"] = procs
    return _outcome(sc.run(fn, 4, latency=AB, seed=seed, faults=plan, **hosted))


@pytest.mark.parametrize("name", list(CASES))
def test_shm_and_tcp_give_the_memory_transports_run(name: str) -> None:
    expected = _run(name, "memory")
    assert _run(name, "shm", 2) == expected
    assert _run(name, "tcp", 4) == expected


def test_the_programs_see_what_the_rules_say() -> None:
    """The expectations themselves, on the memory transport (the others equal it, above)."""
    p2p = _run("point_to_point", "memory")["values"]
    hop = 1e-6
    assert p2p[0][0][0] == "sent before"
    assert p2p[0][0][1] == ["recv", [3], 1e-3, pytest.approx(1e-3 + hop)]
    assert p2p[1][0] == [["rendezvous", [3], pytest.approx(1e-3 + hop)]]
    assert p2p[2][0][:2] == [["any source", True, pytest.approx(1e-3 + hop)], 1]
    assert p2p[2][0][2] == "after"
    assert p2p[3] is None

    revoked = _run("revocation", "memory")["values"]
    assert revoked[0] == [True, 1e-3]
    for seen in revoked[1:]:
        flags = [flag for now, flag in seen[:6]]
        nows = [now for now, flag in seen[:6]]
        assert flags == [now >= 1e-3 + hop for now in nows] and True in flags and False in flags
        assert seen[6][:3] == ["revoked", 0, 1e-3]

    pending = _run("pending_when_revoked", "memory")["values"]
    for got in (pending[0], pending[2], pending[3]):
        assert got == [1, 2e-3, pytest.approx(2e-3 + hop)]

    agreed = _run("agree_and_shrink", "memory")["values"]
    assert agreed[1] is None
    for rank in (0, 2, 3):
        out = agreed[rank]
        assert out[0] == 0b0111
        assert out[2][:2] == ["agree", [1]]
        assert out[3] == 1
        assert out[4] == 0b100  # 0|4 & 2|4 & 3|4
        size, small_rank, total, _ = out[5]
        assert (size, small_rank, total) == (3, [0, 2, 3].index(rank), 5)


@pytest.mark.parametrize("where", list(HANDSHAKE))
def test_a_crash_at_any_point_of_a_rendezvous_fails_the_survivor(where: str) -> None:
    got = _run(f"handshake: {where}", "memory")
    crashed = int(HANDSHAKE[where][6])
    survivor = got["values"][1 - crashed]
    assert survivor[0] == ("recv failed" if crashed == 0 else "send failed"), survivor
    assert survivor[1] == [crashed] and got["crashed"][0][0] == crashed


def test_hosted_runs_still_use_windows_under_a_fault_plan() -> None:
    """Faults need no lockstep: every effect comes a hop after its cause (hosting.rounds)."""
    result = sc.run(resilient_sum, 4, latency=AB, faults="crash:2@0.15ms", transport="shm", procs=2)
    rounds, windows = result.rounds
    assert windows > 0 and windows * 2 > rounds


def test_the_same_plan_and_seed_replay_and_another_seed_gives_the_same_times() -> None:
    first = _run("resilient_sum at random", "shm", 2, seed=5)
    assert _run("resilient_sum at random", "shm", 2, seed=5) == first
    other = _run("resilient_sum at a time", "shm", 2, seed=9)
    assert other["times"] == _run("resilient_sum at a time", "memory", seed=1)["times"]


def test_counted_calls_and_crashes_reach_the_result_from_every_process() -> None:
    plan = sc.faults.FaultPlan([sc.faults.Crash(1, call="all_reduce", nth=3)], count_calls=True)
    memory = sc.run(resilient_sum, 4, latency=AB, faults=plan)
    shm = sc.run(resilient_sum, 4, latency=AB, faults=plan, transport="shm", procs=2)
    assert shm.calls == memory.calls and shm.calls is not None
    assert shm.calls[(1, "all_reduce")] == 3
    assert shm.crashed == memory.crashed == {1: memory.crashed[1]}


async def unhandled(comm: sc.Comm) -> Any:
    return await comm.all_reduce(comm.rank)


def test_an_unhandled_failure_ends_a_hosted_run_naming_the_rank_and_the_crash() -> None:
    with pytest.raises(sc.RankError) as info:
        sc.run(unhandled, 4, latency=AB, faults="crash:3@0", transport="tcp", procs=2)
    assert isinstance(info.value.__cause__, sc.ProcessFailedError)
    assert info.value.crashed == {3: 0.0}
    assert "world rank 3 failed" in str(info.value)


def test_crash_revoke_and_slow_spans_come_back_in_a_hosted_runs_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    sc.run(resilient_sum, 4, latency=AB, faults="crash:2@0.15ms;slow:1x2@0..0.05ms", transport="shm",
           procs=2, trace=str(path))
    marks = [line.split("   ")[-1].strip() for line in sc.trace.show(path).splitlines() if " X " in line]
    assert marks[:2] == ["rank 1 slow x2 until 50.000", "rank 2 crashed"]
    assert "rank 0 revoked world" in marks


# ---- the mpi transport, under mpiexec ----


@mpi_jobs.needs_mpiexec
def test_an_mpi_job_gives_the_memory_transports_run_under_every_plan(tmp_path: Path) -> None:
    for view in mpi_jobs.run(HERE, tmp_path):
        for name in CASES:
            assert view[name] == _run(name, "memory"), name


if __name__ == "__main__":
    mpi_jobs.write(Path(sys.argv[1]), {name: _run(name, "mpi") for name in CASES})
