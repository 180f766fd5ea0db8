"""Fault plans: crashes by time and by call, what survivors see, ULFM's recovery, slow ranks and cuts."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import simcluster as sc
from simcluster.faults import Crash, Cut, Delay, FaultPlan, RandomCrashes, Slow, parse

AB = sc.latency.AlphaBeta(1e-6, 1e-9)


async def resilient_sum(comm: sc.Comm) -> tuple[list[object], int, float]:
    """Four rounds of all_reduce; on a failure: revoke, acknowledge, shrink, go on."""
    seen: list[object] = []
    for _ in range(4):
        try:
            seen.append(await comm.all_reduce(comm.rank + 1))
        except sc.ProcessFailedError as exc:
            seen.append(("failed", exc.failed, exc.time))
            comm.revoke()
            comm.ack_failed()
            comm = await comm.shrink()
        await comm.sleep(0.1)
    return seen, comm.size, comm.now


# ---- crashes and what survivors see ----

def test_a_crash_at_a_time_fails_the_survivors_next_collective_and_shrink_goes_on() -> None:
    result = sc.run(resilient_sum, 4, faults=[Crash(2, at=0.15)], latency=AB)
    assert result.crashed == {2: 0.15}
    assert result[2] is None
    for rank in (0, 1, 3):
        seen, size, _ = result[rank]
        assert seen == [10, 10, ("failed", [2], 0.15), 6]  # 6: ranks 0..2 of the shrunk comm, plus one
        assert size == 3
    assert result.times[2] == 0.15
    assert result.leaks == []


def test_a_crash_at_a_call_happens_at_that_call_and_the_call_does_not() -> None:
    result = sc.run(resilient_sum, 4, faults="crash:1@all_reduce#3", latency=AB)
    assert set(result.crashed) == {1}
    assert result.crashed[1] == pytest.approx(0.2, abs=1e-3)  # at its third all_reduce
    assert [result[r][0][2][:2] for r in (0, 2, 3)] == [("failed", [1])] * 3


def test_a_receive_from_a_crashed_rank_gets_what_it_sent_before_then_fails() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 1:
            await comm.send("before", dst=0)
            await comm.sleep(10.0)  # crashes meanwhile
            await comm.send("never", dst=0)
            return "not reached"
        await comm.sleep(2.0)  # after the crash: the first message arrived before it
        first = await comm.recv(src=1)
        with pytest.raises(sc.ProcessFailedError) as info:
            await comm.recv(src=1)
        return first, info.value.failed, info.value.time, str(info.value)

    result = sc.run(main, 2, faults=[Crash(1, at=1.0)], latency=AB)
    first, failed, when, text = result[0]
    assert (first, failed, when) == ("before", [1], 1.0)
    assert text.startswith("rank 0: recv(src=1, tag=ANY_TAG): world rank 1 failed (at virtual time 1 s)")
    assert "comm.shrink()" in text


def test_a_receive_blocked_on_the_crashed_rank_fails_just_after_the_crash() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 1:
            await comm.sleep(5.0)
            return None
        try:
            await comm.recv(src=1)
        except sc.ProcessFailedError as exc:
            return exc.failed, comm.now
        return "no error"

    result = sc.run(main, 2, faults=[Crash(1, at=0.5)])
    failed, now = result[0]
    assert failed == [1]
    assert now == math.nextafter(0.5, math.inf)  # detection: the next instant after the crash


def test_a_send_to_a_crashed_rank_fails_and_a_rendezvous_send_waiting_for_it_too() -> None:
    big = np.zeros(100_000)  # above the eager limit: waits for the receiver

    async def main(comm: sc.Comm) -> object:
        if comm.rank == 1:
            await comm.sleep(5.0)
            return None
        errors = []
        try:
            await comm.send(big, dst=1)  # waits for a receive rank 1 never posts
        except sc.ProcessFailedError as exc:
            errors.append(("rendezvous", exc.failed, comm.now))
        try:
            await comm.send("small", dst=1)
        except sc.ProcessFailedError as exc:
            errors.append(("eager", exc.failed))
        return errors

    result = sc.run(main, 2, faults=[Crash(1, at=0.5)])
    assert result[0] == [("rendezvous", [1], math.nextafter(0.5, math.inf)), ("eager", [1])]


def test_any_source_receives_fail_pending_until_the_failure_is_acknowledged() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 2:
            await comm.sleep(5.0)
            return None
        if comm.rank == 1:
            await comm.sleep(2.0)
            await comm.send("from 1", dst=0)
            return None
        try:
            await comm.recv()  # any source: rank 2 might have been the one to send
        except sc.ProcessFailedError as exc:
            pending = exc.pending
        acked = comm.ack_failed()
        return pending, acked, comm.get_failed(), await comm.recv()

    result = sc.run(main, 3, faults=[Crash(2, at=1.0)])
    assert result[0] == (True, 1, [2], "from 1")


def test_revoke_fails_what_every_member_has_pending_and_shrink_still_works() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1.0)
            comm.revoke()
            revoked = comm.is_revoked
        else:
            try:
                await comm.recv(src=0)  # never sent: the revocation ends it
            except sc.RevokedError as exc:
                revoked = (exc.by, exc.time, comm.now)
        with pytest.raises(sc.RevokedError):
            await comm.barrier()
        smaller = await comm.shrink()
        return revoked, smaller.size, smaller.rank, await smaller.all_reduce(1)

    result = sc.run(main, 3)
    assert result[0] == (True, 3, 0, 3)
    assert result[1] == ((0, 1.0, 1.0), 3, 1, 3)
    assert result[2] == ((0, 1.0, 1.0), 3, 2, 3)


def test_agree_ands_the_live_flags_and_raises_for_an_unacknowledged_failure() -> None:
    async def main(comm: sc.Comm) -> object:
        healthy = await comm.agree(0b1111 if comm.rank else 0b0111)
        if comm.rank == 3:
            await comm.sleep(5.0)
            return None
        await comm.sleep(2.0)  # rank 3 has crashed by now
        with pytest.raises(sc.ProcessFailedError) as info:
            await comm.agree(0b0110)
        comm.ack_failed()
        return healthy, info.value.failed, await comm.agree(0b0110 | comm.rank)

    result = sc.run(main, 4, faults=[Crash(3, at=1.0)])
    assert [result[r] for r in range(3)] == [(0b0111, [3], 0b0110)] * 3


def test_a_member_that_fails_during_an_agreement_is_left_out_of_it() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 2:
            await comm.sleep(5.0)  # never agrees: crashes first
            return None
        await comm.sleep(0.1 * comm.rank)
        comm.ack_failed()
        try:
            return await comm.agree(7)
        except sc.ProcessFailedError:  # the crash came after this rank acknowledged
            comm.ack_failed()
            return await comm.agree(7)

    result = sc.run(main, 3, faults=[Crash(2, at=1.0)])
    assert result[0] == result[1] == 7


def test_a_message_level_collective_in_progress_fails_on_every_survivor() -> None:
    data = np.arange(1000, dtype=np.float64)

    async def main(comm: sc.Comm) -> object:
        if comm.rank == 3:
            await comm.sleep(1e-6)  # late: the others are inside the all_reduce when it crashes
        try:
            await comm.all_reduce(data, algorithm="ring")
        except sc.ProcessFailedError as exc:
            return exc.failed
        return "completed"

    result = sc.run(main, 4, faults=[Crash(3, at=5e-7)], latency=AB)
    assert [result[r] for r in range(3)] == [[3]] * 3


def test_analytic_collectives_waiting_for_a_crashed_rank_fail_too() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 1:
            await comm.sleep(1.0)
        try:
            return await comm.all_reduce(1)
        except sc.ProcessFailedError as exc:
            return exc.failed

    result = sc.run(main, 3, faults=[Crash(1, at=0.5)], fidelity="analytic")
    assert result[0] == result[2] == [1]


def test_a_rank_that_finished_before_its_crash_time_does_not_crash() -> None:
    async def main(comm: sc.Comm) -> int:
        return await comm.all_reduce(1)

    result = sc.run(main, 2, faults=[Crash(1, at=1.0)])
    assert list(result) == [2, 2] and result.crashed == {}


def test_except_exception_in_the_rank_does_not_catch_its_crash() -> None:
    async def main(comm: sc.Comm) -> str:
        try:
            await comm.barrier()
        except Exception:  # noqa: BLE001 - the crash must pass through this
            return "caught"
        return "went on"

    result = sc.run(main, 2, faults="crash:0@barrier#1")
    assert result.crashed == {0: 0.0} and result[0] is None
    assert result[1] == "caught"  # the survivor's barrier fails, and its program handles that


def test_synchronous_mpi_ranks_survive_with_shrink() -> None:
    def main(comm: object) -> object:
        from simcluster import MPI

        world = MPI.COMM_WORLD
        total = None
        for step in range(3):
            try:
                total = world.allreduce(world.Get_rank() + 1)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_PROC_FAILED
                world.Revoke()
                world.Ack_failed()
                failed = world.Get_failed()
                lost = failed.Get_size()
                failed.Free()
                world = world.Shrink()
                total = ("shrunk", lost, world.Get_size(), world.allreduce(1))
            MPI.Wtime()
        return total

    result = sc.run(main, 4, faults="crash:2@all_reduce#2")
    assert [result[r] for r in (0, 1, 3)] == [6] * 3  # the third allreduce: ranks 0..2 of three, +1
    result = sc.run(main, 4, faults="crash:2@all_reduce#3")
    assert [result[r] for r in (0, 1, 3)] == [("shrunk", 1, 3, 3)] * 3


def test_the_mpi_facade_reports_ulfm_error_classes() -> None:
    def main(comm: object) -> object:
        from simcluster import MPI

        world = MPI.COMM_WORLD
        if world.Get_rank() == 1:
            MPI.COMM_WORLD.Barrier()  # crashes here
        codes = []
        for call in (lambda: world.recv(source=1), lambda: world.recv(source=MPI.ANY_SOURCE)):
            try:
                call()
            except MPI.Exception as exc:
                codes.append(exc.Get_error_class())
        world.Revoke()
        try:
            world.Send([None, 0, MPI.BYTE], MPI.PROC_NULL)
        except MPI.Exception as exc:
            codes.append(exc.Get_error_class())
        return codes

    result = sc.run(main, 2, faults="crash:1@barrier#1")
    from simcluster import MPI

    assert result[0] == [MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED]
    assert (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED) == (101, 102, 103)


# ---- determinism ----

def test_the_same_plan_and_seed_give_the_same_run_and_another_seed_the_same_times() -> None:
    plan = "crash:2@0.15;slow:1x3@0..0.3"
    runs = [sc.run(resilient_sum, 4, faults=plan, latency=AB, seed=seed, trace=True) for seed in (1, 1, 2)]
    assert list(runs[0]) == list(runs[1]) and runs[0].times == runs[1].times
    assert runs[0].trace.dumps() == runs[1].trace.dumps()
    assert runs[2].times == runs[0].times and list(runs[2]) == list(runs[0])


def test_random_crashes_are_drawn_by_the_seed() -> None:
    plan = RandomCrashes(rate=2.0, limit=2)
    assert plan.crashes(8, seed=5) == plan.crashes(8, seed=5)
    assert plan.crashes(8, seed=5) != plan.crashes(8, seed=6)
    assert all(c.rank != 0 for c in plan.crashes(8, seed=5)) and len(plan.crashes(8, seed=5)) == 2
    a = sc.run(resilient_sum, 6, faults=[plan], seed=3, latency=AB)
    b = sc.run(resilient_sum, 6, faults="random:2:2", seed=3, latency=AB)
    assert a.crashed == b.crashed and len(a.crashed) == 2 and list(a) == list(b)


# ---- slow ranks, cuts and delays ----

def test_a_slow_rank_computes_and_talks_factor_times_slower_in_its_window() -> None:
    async def main(comm: sc.Comm) -> list[float]:
        times = []
        for _ in range(3):
            await comm.sleep(1.0)
            times.append(comm.now)
        return times

    result = sc.run(main, 2, faults=[Slow(1, 4.0, start=1.0, end=2.0)])
    assert result[0] == [1.0, 2.0, 3.0]
    assert result[1] == [1.0, 5.0, 6.0]  # the sleep started at 1.0 took 4 seconds

    async def ping(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send(np.zeros(1000), dst=1)
        else:
            await comm.recv(src=0)
        return comm.now

    plain = sc.run(ping, 2, latency=AB)[1]
    slowed = sc.run(ping, 2, latency=AB, faults=[Slow(1, 10.0)])[1]
    assert slowed == pytest.approx(10 * plain)


def test_a_cut_holds_messages_until_it_ends_and_a_delay_adds_its_seconds() -> None:
    async def ping(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send(1.5, dst=1)
        elif comm.rank == 1:
            await comm.recv(src=0)
        return comm.now

    plain = sc.run(ping, 2, latency=AB)[1]
    cut = sc.run(ping, 2, latency=AB, faults=[Cut([0], [1], 0.0, 0.25)])[1]
    assert cut == pytest.approx(0.25 + plain)
    delayed = sc.run(ping, 2, latency=AB, faults="delay:0|1+2ms")[1]
    assert delayed == pytest.approx(plain + 2e-3)
    elsewhere = sc.run(ping, 3, latency=AB, faults=[Delay([2], [0, 1], 1.0)])[1]
    assert elsewhere == plain


# ---- the plan's text and bad input ----

def test_a_plan_reads_from_its_text_and_describes_itself_the_same_way() -> None:
    text = "crash:1@0.5;crash:2@all_reduce#3;random:0.5:2;slow:3x4@0.1..0.2;cut:0,1|2-3@0..0.001;delay:0|1+2e-06"
    plan = parse(text)
    assert plan == FaultPlan((Crash(1, at=0.5), Crash(2, call="all_reduce", nth=3), RandomCrashes(0.5, 2),
                              Slow(3, 4.0, 0.1, 0.2), Cut([0, 1], [2, 3], 0.0, 0.001), Delay([0], [1], 2e-6)))
    assert parse(plan.describe()) == plan
    assert parse("crash:1@1.5ms").faults[0].at == pytest.approx(1.5e-3)


@pytest.mark.parametrize(("faults", "message"), [
    ("crash:9@1", "names rank 9, but the world has 4 ranks"),
    ("crash:1", "cannot read 'crash:1'"),
    ("explode:1@2", "is no fault this knows"),
    ("crash:1@all_reduc#3", "no call is of kind 'all_reduc'; name one of send, recv, probe, barrier"),
    ([Crash(1, call="allreduce", nth=2), Crash(2, call="Sendrecv", nth=1)], None),
    ([Crash(1, at=0.5), "crash:2@1"], "is not a fault"),
])
def test_a_bad_plan_is_refused_before_anything_runs(faults: object, message: str | None) -> None:
    if message is None:  # call kinds in mpi4py's spelling are kinds
        sc.run(resilient_sum, 4, faults=faults)
        return
    with pytest.raises(sc.UsageError, match=message):
        sc.run(resilient_sum, 4, faults=faults)


@pytest.mark.parametrize("spelling", ["all_reduce", "allreduce", "Allreduce", "Iallreduce"])
def test_a_crash_at_a_call_takes_any_api_s_name_for_it(spelling: str) -> None:
    def main(comm: object) -> object:
        from simcluster import MPI

        world = MPI.COMM_WORLD
        got = []
        for step in range(3):
            try:
                if step % 2:
                    got.append(world.allreduce(1))
                else:
                    buf = np.zeros(1)
                    world.Iallreduce(np.ones(1), buf).Wait()
                    got.append(int(buf[0]))
            except MPI.Exception as exc:
                got.append(exc.Get_error_class() == MPI.ERR_PROC_FAILED)
                break
        return got

    result = sc.run(main, 3, faults=f"crash:1@{spelling}#2")
    assert set(result.crashed) == {1}
    assert [result[r] for r in (0, 2)] == [[3, True]] * 2


def test_every_kind_a_run_counts_is_one_a_plan_can_name() -> None:
    def main(comm: object) -> None:
        from simcluster import MPI

        world = MPI.COMM_WORLD
        a, b = np.ones(4), np.zeros(4)
        world.Barrier()
        world.Bcast(a)
        world.Reduce(a, b)
        world.Allreduce(a, b)
        world.Gather(a[:1], b[:3])
        world.Allgather(a[:1], b[:3])
        world.Scatter(a[:3], b[:1])
        world.Alltoall(a[:3], b[:3])
        world.Reduce_scatter_block(a[:3], b[:1])
        world.Scan(a, b)
        world.Exscan(a, b)
        world.sendrecv(1, (world.rank + 1) % 3, source=(world.rank - 1) % 3)
        world.Iprobe()
        cart = world.Create_cart([3], periods=[True])
        cart.Neighbor_allgather(a[:1], b[:2])
        cart.Neighbor_alltoall(a[:2], b[:2])
        inter = world.Split(int(world.rank == 0)).Create_intercomm(0, world, 1 if world.rank == 0 else 0)
        inter.Barrier()
        inter.bcast(1, root=0 if world.rank else MPI.ROOT)

    result = sc.run(main, 3, faults=FaultPlan((), count_calls=True))
    kinds = {kind for _, kind in result.calls}
    assert kinds <= set(sc.faults.CALL_KINDS), kinds - set(sc.faults.CALL_KINDS)
    assert len(kinds) >= 14


def test_an_empty_plan_is_no_plan() -> None:
    async def main(comm: sc.Comm) -> int:
        return await comm.all_reduce(1)

    for empty in ([], FaultPlan(())):
        assert list(sc.run(main, 2, faults=empty)) == [2, 2]
        assert sc.run(main, 2, faults=empty, compute="wall").crashed == {}  # nothing to replay


def test_a_crash_plan_on_a_healthy_run_warns_of_nothing() -> None:
    async def main(comm: sc.Comm) -> int:
        return await comm.all_reduce(comm.rank)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = sc.run(main, 4, faults=[Crash(3, at=5.0)])
    assert list(result) == [6] * 4


# ---- exploring crash points ----

def test_explore_tries_every_crash_point_and_a_resilient_program_survives_each() -> None:
    done = sc.testing.explore(resilient_sum, 3, crashes="each", latency=AB)
    # one run without a crash, then each rank at each of its calls (all_reduce x4 ... shrink's)
    assert done.complete and done.runs == len(done) > 1 + 3 * 3
    assert all(len(r.crashed) == 1 for r in done[1:])


def test_explore_reports_the_first_crash_point_a_program_does_not_survive() -> None:
    async def fragile(comm: sc.Comm) -> int:
        await comm.barrier()
        return await comm.all_reduce(1)

    with pytest.raises(sc.testing.ExploreFailure) as info:
        sc.testing.explore(fragile, 2, crashes="each")
    failure = info.value
    assert "faults='crash:0@all_reduce#1'" in failure.reproduction
    assert "ProcessFailedError" in str(failure)
    with pytest.raises(sc.RankError, match="world rank 0 failed"):  # the line replays it
        sc.run(fragile, 2, seed=failure.seed, schedule="shuffle", faults="crash:0@all_reduce#1")


async def rendezvous_exchange(comm: sc.Comm) -> tuple[object, ...]:
    """400 kB each way (rendezvous handshakes), rank 1 posting its receive late, then a
    synchronous send back."""
    got = []
    try:
        if comm.rank == 0:
            await comm.send(np.zeros(50_000), dst=1)
            got.append(len(await comm.recv(src=1)))
        else:
            await comm.sleep(5e-6)
            got.append(len(await comm.recv(src=0)))
            await comm.ssend(np.zeros(50_000), dst=0)
    except sc.ProcessFailedError as exc:
        return ("failed", exc.failed, exc.time)
    return ("done", got)


def test_explore_crashing_each_call_of_a_rendezvous_finds_only_failures_of_the_survivor() -> None:
    def survivor_failed_or_done(result: sc.RunResult) -> bool:
        if not result.crashed:
            return list(result) == [("done", [50_000])] * 2
        (crashed, at), = result.crashed.items()
        return result[crashed] is None and result[1 - crashed] == ("failed", [crashed], at)

    done = sc.testing.explore(rendezvous_exchange, 2, crashes="each", latency=AB,
                              check=survivor_failed_or_done)
    # the run without a crash, then each rank at each of its two calls
    assert done.complete and done.runs == len(done) == 5
    assert sorted(rank for r in done for rank in r.crashed) == [0, 0, 1, 1]


def test_explore_samples_one_crash_point_per_seed() -> None:
    done = sc.testing.explore(resilient_sum, 4, seeds=range(5), crashes="sample", latency=AB)
    assert len(done) == 6 and not done.complete
    again = sc.testing.explore(resilient_sum, 4, seeds=range(5), crashes="sample", latency=AB)
    assert [r.crashed for r in done] == [r.crashed for r in again]


# ---- in traces ----

def test_crashes_revocations_slow_windows_and_cuts_show_in_the_trace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.json"
    sc.run(resilient_sum, 4, faults="crash:2@0.15;slow:1x2@0..0.05;cut:0|3@0.3..0.35", latency=AB,
           trace=str(path))
    shown = sc.trace.show(path).splitlines()
    faults = [line.split("   ")[-1].strip() for line in shown if " X " in line]
    # ranks 0 and 3 revoke before the revocation reaches them (one hop); rank 1, late, finds it revoked
    assert faults == ["rank 1 slow x2 until 50.000", "rank 2 crashed", "rank 0 revoked world",
                      "rank 3 revoked world", "rank 0 cut between 0 and 3 until 350.000",
                      "rank 3 cut between 0 and 3 until 350.000"]


# ---- the command line ----

SCRIPT = '''
import simcluster as sc

async def main(comm):
    try:
        await comm.sleep(1.0)
        return await comm.all_reduce(1)
    except sc.ProcessFailedError:
        if RECOVER:
            comm.ack_failed()
            return await (await comm.shrink()).all_reduce(1)
        raise
'''


@pytest.mark.parametrize("recover", [True, False])
def test_simcluster_run_takes_a_plan_and_names_the_crashed_rank(tmp_path, capsys, recover) -> None:  # type: ignore[no-untyped-def]
    from simcluster import cli

    path = tmp_path / "survive.py"
    path.write_text(f"RECOVER = {recover}\n{SCRIPT}", encoding="utf-8")
    status = cli.main(["run", str(path), "-n", "3", "--faults", "crash:1@0.5"])
    out, err = capsys.readouterr()
    if recover:
        assert status == 0
        assert out.splitlines()[:3] == ["rank 0: 2", "rank 1: crashed at virtual time 500 ms (the fault plan)",
                                        "rank 2: 2"]
    else:
        assert status == 1
        assert "simcluster run: rank 1 crashed at virtual time 500 ms (the fault plan)" in err
        assert "world rank 1 failed (at virtual time 0.5 s)" in err


# ---- edges ----

def test_a_crash_at_the_instant_a_rank_acts_comes_before_what_it_does_whatever_the_seed() -> None:
    async def main(comm: sc.Comm) -> object:
        await comm.sleep(1.0)  # every rank acts at t = 1, when rank 3 crashes
        try:
            return await comm.all_reduce(1)
        except sc.ProcessFailedError as exc:
            return exc.failed

    for when in (0.0, 1.0):
        seen = [list(sc.run(main, 4, faults=[Crash(3, at=when)], seed=seed, schedule="shuffle"))
                for seed in range(6)]
        assert seen == [[[3], [3], [3], None]] * 6, when


def test_a_rendezvous_send_to_a_rank_that_crashes_before_its_data_lands_fails() -> None:
    big = np.ones(200_000)

    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            try:
                await comm.send(big, dst=1)
            except sc.ProcessFailedError as exc:
                return exc.failed
            return "sent"
        comm.irecv(np.empty(200_000), src=0)
        await comm.sleep(10.0)
        return None

    result = sc.run(main, 2, faults=[Crash(1, at=1e-4)], latency=AB)
    assert result[0] == [1] and result.leaks == []


def test_a_probe_and_a_collective_waiting_on_the_crashed_rank_fail_and_revoke_ends_one_in_progress() -> None:
    async def probing(comm: sc.Comm) -> object:
        if comm.rank == 1:
            await comm.sleep(5.0)
            return None
        with pytest.raises(sc.ProcessFailedError):
            await comm.probe(src=1)
        return "probe failed"

    assert sc.run(probing, 2, faults=[Crash(1, at=0.5)])[0] == "probe failed"

    async def revoking(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1.0)
            comm.revoke()
            return "revoked"
        try:
            await comm.all_reduce(np.ones(1000))
        except sc.RevokedError as exc:
            return exc.by
        return "completed"

    assert list(sc.run(revoking, 3, latency=AB)) == ["revoked", 0, 0]


def test_the_last_survivor_shrinks_to_a_world_of_one() -> None:
    async def main(comm: sc.Comm) -> object:
        with pytest.raises(sc.ProcessFailedError):
            await comm.barrier()
        comm.ack_failed()
        alone = await comm.shrink()
        return alone.size, await alone.all_reduce(5)

    result = sc.run(main, 3, faults="crash:1@barrier#1;crash:2@barrier#1")
    assert result[0] == (1, 5) and result.crashed == {1: 0.0, 2: 0.0}


def test_ishrink_lets_a_rank_do_what_the_others_wait_for_before_it_completes() -> None:
    def main(comm: object) -> object:
        from simcluster import MPI

        world = MPI.COMM_WORLD
        try:
            world.Barrier()
        except MPI.Exception:
            world.Ack_failed()
        rank = world.Get_rank()
        if rank == 0:
            new, req = world.Ishrink()
            world.send("go", dest=1, tag=7)  # rank 1 shrinks only after this
            req.Wait()
        else:
            if rank == 1:
                world.recv(source=0, tag=7)
            new, req = world.Ishrink()
            req.Wait()
        return new.Get_size(), new.Get_rank(), new.allreduce(1), round(MPI.Wtime() * 1e6, 3)

    result = sc.run(main, 4, faults="crash:2@0", latency=AB)
    assert [result[r][:3] for r in (0, 1, 3)] == [(3, 0, 3), (3, 1, 3), (3, 2, 3)]
    assert sc.run(main, 4, faults="crash:2@0", latency=AB, seed=5).times == result.times
