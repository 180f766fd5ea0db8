"""What a newcomer sees when a run goes wrong: missing awaits, asyncio.gather, skipped
collectives, bad keywords and runaway ranks end with errors that name the rank, the
call, the line and the fix."""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI


async def _first_to_arrive(comm: sc.Comm) -> list[int] | None:
    """Rank 0 receives from everyone with ANY_SOURCE: the order is what the seed decides."""
    if comm.rank == 0:
        return [(await comm.recv(src=sc.ANY_SOURCE)) for _ in range(comm.size - 1)]
    await comm.send(comm.rank, dst=0)
    return None


# ---- keywords: seed and timeout ----


@pytest.mark.parametrize("seed", ["x", 1.5, True, [1]])
def test_seed_that_is_not_an_int_names_the_keyword_and_the_fix(seed: object) -> None:
    with pytest.raises(TypeError) as info:
        sc.run(_first_to_arrive, world_size=2, seed=seed)
    assert str(info.value) == (f"run(seed={seed!r}): seed must be an int; pass an integer such as "
                               "seed=1, or leave it out for the default (0)")


def test_seed_none_is_the_default_seed() -> None:
    default = sc.run(_first_to_arrive, world_size=6)
    assert [sc.run(_first_to_arrive, world_size=6, seed=None)[0] for _ in range(3)] == [default[0]] * 3


def test_seed_may_be_a_numpy_integer() -> None:
    expected = sc.run(_first_to_arrive, world_size=6, seed=3)[0]
    assert sc.run(_first_to_arrive, world_size=6, seed=np.int64(3))[0] == expected


@pytest.mark.parametrize("timeout", ["5", [5], True])
def test_timeout_that_is_not_a_number_names_the_keyword_and_the_fix(timeout: object) -> None:
    with pytest.raises(TypeError) as info:
        sc.run(_first_to_arrive, world_size=2, timeout=timeout)
    assert str(info.value) == (f"run(timeout={timeout!r}): timeout must be a positive number of "
                               "seconds; pass a number such as timeout=5, or None for no limit")


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_timeout_that_is_not_positive_is_a_value_error(timeout: float) -> None:
    with pytest.raises(ValueError, match=r"^run\(timeout=.*\): timeout must be a positive number of "
                                         r"seconds; pass a number such as timeout=5, or None for no "
                                         r"limit$"):
        sc.run(_first_to_arrive, world_size=2, timeout=timeout)


def test_timeout_may_be_an_int_or_a_numpy_float() -> None:
    assert sc.run(_first_to_arrive, world_size=2, timeout=5)[0] == [1]
    assert sc.run(_first_to_arrive, world_size=2, timeout=np.float64(5.0))[0] == [1]


def test_launch_checks_the_same_keywords() -> None:
    import asyncio

    with pytest.raises(TypeError, match=re.escape("run(seed='x'): seed must be an int")):
        asyncio.run(sc.launch(_first_to_arrive, world_size=2, seed="x"))


# ---- deadlock: a collective that some ranks never entered ----


def _line() -> int:
    """Return the line number of the caller."""
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def test_deadlock_names_the_rank_that_skipped_a_collective_and_finished() -> None:
    lines: list[int] = []

    async def main(comm: sc.Comm) -> None:
        if comm.rank != 1:
            lines.append(_line() + 1)
            await comm.all_reduce(np.ones(4))

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=3)
    rows = str(info.value).splitlines()
    assert rows[0] == "deadlock: 2 ranks blocked and no message in flight at virtual time 0s"
    assert [row.split(" waiting in ")[0] for row in rows[1:3]] == ["  rank 0", "  rank 2"]
    assert all(row.endswith(f"inside all_reduce(op=SUM) (collective #1 on comm 'world') at "
                            f"test_reports.py:{lines[0]}") for row in rows[1:3]), rows
    assert rows[3:] == [
        "ranks 0, 2 are inside all_reduce(op=SUM) (collective #1 on comm 'world'), which rank 1 "
        "never entered: rank 1 finished",
        "no wait-for cycle: ranks wait inside a collective that other members never entered; every "
        "member of a comm must call its collectives, in the same order",
    ]
    assert info.value.cycle is None


def test_deadlock_says_what_the_ranks_outside_the_collective_do_instead() -> None:
    where: dict[int, int] = {}

    async def main(comm: sc.Comm) -> None:
        if comm.rank in (1, 3):
            where[comm.rank] = _line() + 1
            await comm.recv(src=2, tag=5)
            return
        await comm.barrier()

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=4)
    rows = str(info.value).splitlines()
    assert rows[-2] == (
        "ranks 0, 2 are inside barrier() (collective #1 on comm 'world'), which ranks 1, 3 never "
        f"entered: rank 1 is waiting in recv(src=2, tag=5) at test_reports.py:{where[1]}; "
        f"rank 3 is waiting in recv(src=2, tag=5) at test_reports.py:{where[3]}")


def test_deadlock_in_a_sub_communicator_names_world_ranks() -> None:
    async def main(comm: sc.Comm) -> None:
        evens = await comm.split(comm.rank % 2)
        assert evens is not None
        if comm.rank != 4:
            await evens.all_gather(comm.rank)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=6)
    gaps = [row for row in str(info.value).splitlines() if " never entered: " in row]
    assert gaps == ["ranks 0, 2 are inside all_gather() (collective #1 on comm 'split(0)'), which "
                    "rank 4 never entered: rank 4 finished"]


def test_deadlock_names_a_nonblocking_collective_nobody_else_started() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.iall_reduce(1.0)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=2)
    gaps = [row for row in str(info.value).splitlines() if " never entered: " in row]
    assert gaps == ["rank 0 is inside all_reduce(op=SUM) (collective #1 on comm 'world'), which "
                    "rank 1 never entered: rank 1 finished"]


def test_deadlock_without_collectives_keeps_the_message_nobody_sends() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.recv(src=1)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=2)
    assert str(info.value).splitlines()[-1] == \
        "no wait-for cycle: some rank waits for a message nobody sends"


def test_deadlock_in_a_large_world_counts_the_ranks_it_does_not_name() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.barrier()

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=12)
    finished = "; ".join(f"rank {r} finished" for r in range(1, 9))
    assert str(info.value).splitlines()[-2] == (
        "rank 0 is inside barrier() (collective #1 on comm 'world'), which ranks 1, 2, 3, 4, 5, 6, "
        f"7, 8, ... (11 in all) never entered: {finished}; ...")


def test_a_deadlock_of_many_ranks_in_one_place_is_a_few_short_lines() -> None:
    lines: dict[str, int] = {}

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            lines["barrier"] = _line() + 1
            await comm.barrier()
        else:
            lines["recv"] = _line() + 1
            await comm.recv(src=(comm.rank + 1) % comm.size)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=3000)
    report = str(info.value).splitlines()
    assert len(report) == 5 and max(map(len, report)) < 400
    assert report[0] == "deadlock: 3000 ranks blocked and no message in flight at virtual time 0s"
    here = f"test_reports.py:{lines['recv']}"
    assert report[2] == (f"  2999 ranks waiting in recv(...) at {here}: ranks 1-2999; e.g. rank 1 "
                         f"waiting in recv(src=2, tag=ANY_TAG) at {here}")
    assert report[3].endswith(f"never entered: rank 1 is waiting in recv(src=2, tag=ANY_TAG) at "
                              f"{here}; rank 2 is waiting in recv(src=3, tag=ANY_TAG) at {here}; "
                              f"rank 3 is waiting in recv(src=4, tag=ANY_TAG) at {here}; ...")
    assert len(info.value.blocked) == 3000  # the whole picture stays on the error


def test_a_long_wait_for_cycle_shows_its_ends() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.recv(src=(comm.rank + 1) % comm.size)

    with pytest.raises(sc.DeadlockError) as info:
        sc.run(main, world_size=500)
    report = str(info.value).splitlines()
    assert len(report) == 3
    assert report[-1] == ("wait-for cycle: 0 -> 1 -> 2 -> 3 -> 4 -> 5 -> 6 -> 7 -> ... -> 497 -> "
                          "498 -> 499 -> 0 (500 ranks)")
    assert info.value.cycle == [*range(500), 0]


def test_a_report_groups_ranks_by_place_and_counts_the_places_beyond_its_limit() -> None:
    from simcluster.engine.diagnostics import summarise

    few = [(r, f"rank {r} waiting in recv(src={r + 1}) at a.py:{r}") for r in range(16)]
    assert summarise(few) == ["  " + line for _, line in few]  # few ranks: a line each
    many = [(r, f"rank {r} waiting in recv(src={r + 1}) at a.py:{r % 50}") for r in range(1000)]
    lines = summarise(many)
    assert len(lines) == 41
    assert lines[0] == ("  20 ranks waiting in recv(...) at a.py:0: ranks 0, 50, 100, 150, 200, "
                        "250, 300, 350, ... (12 more runs); e.g. rank 0 waiting in recv(src=1) at "
                        "a.py:0")
    assert lines[-1] == "  ... and 200 more ranks in 10 other places"


# ---- timeout: a rank that spins without awaiting ----


def _spin_forever() -> None:
    while True: pass  # noqa: E701 - one line, so the interrupt lands on it whatever the bytecode


def test_timeout_stops_a_rank_that_spins_without_yielding() -> None:
    where: list[int] = []

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 1:
            where.append(_line() + 1)
            await comm.recv(src=0)
        else:
            await comm.sleep(1.0)
            where.append(_line() + 1)
            _spin_forever()

    with pytest.raises(sc.RunTimeoutError) as info:
        sc.run(main, world_size=2, timeout=0.3)
    spin_line = _spin_forever.__code__.co_firstlineno + 1
    assert str(info.value).splitlines()[:3] == [
        "run: timed out after 0.3s of wall time at virtual time 1s",
        f"  rank 0 running at test_reports.py:{spin_line}",
        f"  rank 1 waiting in recv(src=0, tag=ANY_TAG) at test_reports.py:{where[0]}",
    ]


def test_timeout_report_shows_the_nonblocking_call_not_its_unstarted_helpers() -> None:
    where: list[int] = []

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 1:
            await comm.sleep(1.0)
            _spin_forever()
        where.append(_line() + 1)
        await comm.ibarrier()

    with pytest.raises(sc.RunTimeoutError) as info:
        sc.run(main, world_size=3, timeout=0.3)
    gc.collect()  # an unstarted helper left unclosed would warn now (an error under pytest's config)
    spin_line = _spin_forever.__code__.co_firstlineno + 1
    assert str(info.value).splitlines() == [
        "run: timed out after 0.3s of wall time at virtual time 1s",
        f"  rank 0 waiting in ibarrier() at test_reports.py:{where[0]}",
        f"  rank 1 running at test_reports.py:{spin_line}",
        f"  rank 2 waiting in ibarrier() at test_reports.py:{where[0]}",
        "look for a rank that loops without awaiting, or awaits real I/O that never ends",
    ]


def test_timeout_stops_a_synchronous_rank_that_spins() -> None:
    def main(comm: MPI.Intracomm) -> None:
        if comm.rank == 1:
            _spin_forever()
        comm.Barrier()

    with pytest.raises(sc.RunTimeoutError) as info:
        sc.run(main, world_size=2, timeout=0.3)
    assert f"  rank 1 running at test_reports.py:{_spin_forever.__code__.co_firstlineno + 1}" in (
        str(info.value).splitlines())


def test_timeout_stops_a_rank_that_swallows_the_first_interrupt() -> None:
    async def main(comm: sc.Comm) -> None:
        try:
            _spin_forever()
        except BaseException:  # noqa: BLE001 - what a careless rank does
            pass
        _spin_forever()

    with pytest.raises(sc.RunTimeoutError, match=r"rank 0 running at test_reports\.py:"):
        sc.run(main, world_size=1, timeout=0.2)


def test_the_watchdog_never_fires_after_the_run_ended() -> None:
    import time

    async def main(comm: sc.Comm) -> int:
        return comm.rank

    for _ in range(20):  # each run takes about a millisecond: its deadline leaves room for load
        assert list(sc.run(main, world_size=2, timeout=0.25)) == [0, 1]
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # a spin of our own, past every deadline above
        pass


def test_a_real_ctrl_c_is_still_a_keyboard_interrupt_under_a_timeout() -> None:
    import _thread

    async def main(comm: sc.Comm) -> None:
        _thread.interrupt_main()  # what Ctrl-C does
        for _ in range(100):
            await comm.sleep(1.0)

    with pytest.raises(KeyboardInterrupt):
        sc.run(main, world_size=1, timeout=5)


# ---- a simcluster call without await ----


def _cause(info: pytest.ExceptionInfo[sc.RankError]) -> BaseException:
    cause = info.value.__cause__
    assert cause is not None
    return cause


def test_dist_all_reduce_without_await_names_the_rank_the_call_and_the_line() -> None:
    import simcluster.dist as dist

    where: list[int] = []

    async def main(comm: sc.Comm) -> list[float]:
        t = np.ones(2)
        if comm.rank == 1:
            where.append(_line() + 1)
            dist.all_reduce(t)  # the torch habit: no await
        await comm.barrier()
        return t.tolist()

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert info.value.rank == 1
    cause = _cause(info)
    assert isinstance(cause, sc.SimclusterError)
    assert (cause.rank, cause.op) == (1, "dist.all_reduce(op=SUM)")
    assert str(cause) == (
        f"rank 1: dist.all_reduce(op=SUM): the call at test_reports.py:{where[0]} was never awaited, "
        "so it never ran; add await: await dist.all_reduce(...), as every simcluster.dist call is a "
        "coroutine (torch.distributed's return at once); to run torch code unchanged, use "
        "torch.distributed with the 'simcluster' backend (simcluster.torch)")


def _reduce_in_a_helper(t: np.ndarray) -> None:
    import simcluster.dist as dist

    dist.all_reduce(t, op="MAX")  # a synchronous helper that forgot the await


def test_a_missing_await_in_a_synchronous_helper_names_the_helper_line() -> None:
    async def main(comm: sc.Comm) -> None:
        _reduce_in_a_helper(np.ones(2))

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    line = _reduce_in_a_helper.__code__.co_firstlineno + 3
    assert re.match(rf"^rank [01]: dist\.all_reduce\(op=MAX\): the call at test_reports\.py:{line} "
                    "was never awaited, so it never ran; add await", str(_cause(info)))


def test_a_comm_call_without_await_fails_its_rank_when_it_finishes() -> None:
    where: list[int] = []

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            where.append(_line() + 1)
            comm.send("hello", dst=1)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert info.value.rank == 0
    assert str(_cause(info)) == (
        f"rank 0: send(dst=1, tag=0): the call at test_reports.py:{where[0]} was never awaited, so it "
        "never ran; write await comm.send(...), or start it with comm.isend(...) and wait on the "
        "request")


@pytest.mark.parametrize(("call", "text", "fix"), [
    (lambda comm: comm.all_reduce(np.ones(3)), "all_reduce(op=SUM)",
     "write await comm.all_reduce(...), or start it with comm.iall_reduce(...) and wait on the request"),
    (lambda comm: comm.reduce(1, dst=1, op=sc.ReduceOp.MAX), "reduce(dst=1, op=MAX)",
     "write await comm.reduce(...), or start it with comm.ireduce(...) and wait on the request"),
    (lambda comm: comm.recv(np.zeros(4), src=1, tag=3), "recv(buf=float64[4], src=1, tag=3)",
     "write await comm.recv(...), or start it with comm.irecv(...) and wait on the request"),
    (lambda comm: comm.sleep(2.5), "sleep(seconds=2.5)", "write await comm.sleep(...)"),
    (lambda comm: comm.isend(1, dst=1).wait(), "isend(dst=1, tag=0).wait()",
     "write await req.wait(), or await req"),
    (lambda comm: sc.wait_all([comm.isend(1, dst=1), comm.isend(2, dst=1)]), "wait_all(2 requests)",
     "write await sc.wait_all(...)"),
], ids=["all_reduce", "reduce", "recv", "sleep", "wait", "wait_all"])
def test_each_kind_of_call_without_await_is_named(call: object, text: str, fix: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            call(comm)  # type: ignore[operator]
            await comm.sleep(1.0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    cause = _cause(info)
    assert isinstance(cause, sc.SimclusterError)
    assert cause.op == text
    assert re.match(rf"^rank 0: {re.escape(text)}: the call at test_reports\.py:\d+ was never "
                    rf"awaited, so it never ran; {re.escape(fix)}$", str(cause)), str(cause)


def test_a_call_kept_and_awaited_later_is_fine() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            later = comm.recv(src=1)
            await comm.sleep(1.0)  # back to the engine while `later` has not started
            sends = [comm.send(np.full(4, i), dst=1) for i in range(3)]
            for send in sends:  # rendezvous sends (eager_limit=0): each one parks the rank
                await send
            return await later
        got = [int((await comm.recv(src=0))[0]) for _ in range(3)]
        await comm.send("late", dst=0)
        return got

    assert list(sc.run(main, world_size=2, eager_limit=0)) == ["late", [0, 1, 2]]


def test_a_call_kept_but_never_awaited_fails_when_its_rank_finishes() -> None:
    async def main(comm: sc.Comm) -> None:
        kept = comm.barrier()
        await comm.sleep(1.0)
        assert kept is not None

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=1)
    assert re.match(r"^rank 0: barrier\(\): the call at test_reports\.py:\d+ was never awaited",
                    str(_cause(info)))


def test_a_started_request_never_waited_is_still_a_leak_report() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            comm.isend("x", dst=1)
        else:
            await comm.recv(src=0)

    with pytest.warns(sc.SimclusterWarning, match=r"rank 0: isend\(dst=1, tag=0\) completed but was "
                                                  r"never waited or tested"):
        sc.run(main, world_size=2)


def test_checks_off_notes_nothing() -> None:
    async def main(comm: sc.Comm) -> str:
        await comm.barrier()
        return type(comm).__name__

    assert list(sc.run(main, world_size=2, checks="off")) == ["Comm", "Comm"]


# ---- collectives inside asyncio.gather / create_task ----


@pytest.mark.parametrize("checks", ["strict", "off"])
def test_collectives_in_asyncio_gather_get_the_nonblocking_advice(
        checks: str, caplog: pytest.LogCaptureFixture) -> None:
    import asyncio
    import gc

    async def main(comm: sc.Comm) -> object:
        return await asyncio.gather(comm.all_reduce(1), comm.all_reduce(2))

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=3, checks=checks)
    cause = _cause(info)
    assert isinstance(cause, RuntimeError)
    assert re.match(r"^rank \d: all_reduce\(op=SUM\): ", str(cause)), str(cause)
    assert str(cause).endswith("(asyncio.gather/create_task run coroutines outside the simulator); use "
                               "the nonblocking form comm.iall_reduce(...) and sc.wait_all instead"
                               if checks == "off" else
                               "was handed to asyncio.gather/create_task, which run coroutines outside "
                               "the simulator; use the nonblocking form comm.iall_reduce(...) and "
                               "sc.wait_all instead")
    gc.collect()  # a future whose exception nobody retrieved logs it when collected
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_call_given_to_create_task_is_refused_at_once() -> None:
    import asyncio

    async def main(comm: sc.Comm) -> None:
        asyncio.create_task(comm.send(1, dst=0))  # fire and forget
        await comm.sleep(1.0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=1)
    assert re.match(r"^rank 0: send\(dst=0, tag=0\): the call at test_reports\.py:\d+ was handed to "
                    r"asyncio\.gather/create_task, which run coroutines outside the simulator; use "
                    r"the nonblocking form comm\.isend\(\.\.\.\) and sc\.wait_all instead$",
                    str(_cause(info)))
