"""Requests: awaiting, testing, cancelling, and the wait/test helpers, on every transport."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

import simcluster as sc

# ---- await, test, done ----


def test_awaiting_a_request_equals_calling_wait(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            first = comm.isend("a", dst=1, tag=1)
            second = comm.isend("b", dst=1, tag=2)
            return await first, await second.wait()
        by_await = await comm.irecv(src=0, tag=1)
        by_wait = await comm.irecv(src=0, tag=2).wait()
        return by_await, by_wait

    assert list(sc.run(main, world_size=2, transport=transport)) == [(None, None), ("a", "b")]


def test_a_request_reports_its_state_in_its_repr(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1e-6)
            await comm.send("x", dst=1)
            return None
        req = comm.irecv(src=0)
        pending = repr(req)
        await req
        return pending, repr(req), req.done(), req.cancelled

    got = sc.run(main, world_size=2, transport=transport)[1]
    assert got == ("<Request irecv(src=0, tag=ANY_TAG) pending>",
                   "<Request irecv(src=0, tag=ANY_TAG) done>", True, False)


def test_test_is_false_before_arrival_and_true_after(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1.0)
            await comm.send("late", dst=1)
            return None
        req = comm.irecv(src=0)
        at_start = (req.test(), req.done())
        await comm.sleep(0.5)
        at_half = (comm.now, req.test(), req.done())
        await comm.sleep(1.5)
        at_two = (comm.now, req.done(), req.test())
        return at_start, at_half, at_two, await req

    got = sc.run(main, world_size=2, transport=transport)[1]
    assert got == ((False, False), (0.5, False, False), (2.0, True, True), "late")


def test_test_true_counts_as_waiting_so_nothing_leaks(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            req = comm.isend("x", dst=1)
            return req.test()
        req = comm.irecv(src=0)
        while not req.test():
            await comm.sleep(0.1)
        return req.status

    result = sc.run(main, world_size=2, transport=transport)
    assert result[0] is True
    assert result[1] == sc.Status(source=0, tag=0, nbytes=2)
    assert result.leaks == []


def test_isend_of_small_message_is_done_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            req = comm.isend(np.arange(4.0), dst=1)
            done_at_post = req.done()
            value = await req
            return done_at_post, value, comm.now
        await comm.sleep(2.0)
        await comm.recv(src=0)
        return None

    assert sc.run(main, world_size=2, transport=transport)[0] == (True, None, 0.0)


def test_issend_completes_only_when_matched(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            req = comm.issend("sync", dst=1)
            done_at_post = req.done()
            await req
            return done_at_post, comm.now
        await comm.sleep(2.0)
        return await comm.recv(src=0)

    result = sc.run(main, world_size=2, transport=transport, latency=sc.latency.Zero())
    assert list(result) == [(False, 2.0), "sync"]


# ---- cancel ----


def test_cancel_unmatched_irecv(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        req = comm.irecv(src=sc.ANY_SOURCE, tag=5)
        cancelled = req.cancel()
        value = await req
        return cancelled, req.done(), req.cancelled, value, req.status

    result = sc.run(main, world_size=2, transport=transport)  # filterwarnings=error: no leak warning
    assert list(result) == [(True, True, True, None, None)] * 2
    assert result.leaks == []


def test_cancelled_irecv_does_not_take_a_later_message(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1.0)
            await comm.send("for the second receive", dst=1)
            return None
        stale = comm.irecv(src=0)
        assert stale.cancel()
        fresh = comm.irecv(src=0)
        return await fresh, await stale

    assert sc.run(main, world_size=2, transport=transport)[1] == ("for the second receive", None)


def test_cancel_of_matched_irecv_returns_false(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send("here", dst=1)
            return None
        await comm.sleep(1.0)  # the message is waiting as unexpected
        req = comm.irecv(src=0)
        cancelled = req.cancel()
        return cancelled, req.cancelled, await req

    assert sc.run(main, world_size=2, transport=transport)[1] == (False, False, "here")


def test_cancel_of_rendezvous_irecv_matched_but_in_flight_returns_false(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.ones(1 << 14), dst=1)  # 128 KiB > eager_limit
            return None
        await comm.sleep(1.0)  # the RTS is waiting; irecv matches it, data still in flight
        req = comm.irecv(src=0)
        pending = not req.done()
        cancelled = req.cancel()
        got = await req
        return pending, cancelled, float(got.sum())

    lat = sc.latency.AlphaBeta(2.0**-20, 2.0**-30)
    got = sc.run(main, world_size=2, transport=transport, latency=lat)[1]
    assert got == (True, False, float(1 << 14))


def test_cancel_of_a_send_returns_false(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            req = comm.issend("x", dst=1)
            cancelled = req.cancel()
            await req
            return cancelled
        await comm.sleep(1.0)
        return await comm.recv(src=0)

    assert list(sc.run(main, world_size=2, transport=transport)) == [False, "x"]


# ---- status ----


def test_status_after_receive_of_array_and_object(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 1:
            await comm.sleep(1.0)  # so the first receive is posted before anything arrives
            await comm.send(np.arange(5, dtype=np.int16), dst=0, tag=11)
            await comm.send("hello", dst=0, tag=12)
            return None
        areq = comm.irecv(src=sc.ANY_SOURCE, tag=sc.ANY_TAG)
        before = areq.status
        await areq
        oreq = comm.irecv(src=1, tag=sc.ANY_TAG)
        await oreq
        return before, areq.status, oreq.status

    before, astatus, ostatus = sc.run(main, world_size=2, transport=transport)[0]
    assert before is None
    assert astatus == sc.Status(source=1, tag=11, nbytes=10)
    assert ostatus == sc.Status(source=1, tag=12, nbytes=6)  # msgpack 'hello' is 6 bytes
    assert (astatus.source, astatus.tag, astatus.nbytes) == (1, 11, 10)


# ---- wait_all / wait_any / wait_some / test_all / test_any ----


def test_wait_all_returns_results_in_request_order_not_completion_order(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=r) for r in (1, 2, 3)] + [comm.isend("from 0", dst=1, tag=9)]
            got = await sc.wait_all(reqs)
            return got, comm.now
        if comm.rank == 1:
            await comm.recv(src=0, tag=9)
        await comm.sleep(float(4 - comm.rank))  # rank 3 sends first, rank 1 last
        await comm.send(comm.rank * 100, dst=0)
        return None

    got = sc.run(main, world_size=4, transport=transport)[0]
    assert got == ([100, 200, 300, None], 3.0)


def test_wait_all_of_nothing_is_an_empty_list(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        return await sc.wait_all([])

    assert list(sc.run(main, world_size=1, transport=transport)) == [[]]


def test_wait_any_returns_the_first_to_complete_in_virtual_time(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=1), comm.irecv(src=2)]
            first = await sc.wait_any(reqs)
            at = comm.now
            second = await reqs[0]
            return first, at, second
        await comm.sleep(3.0 if comm.rank == 1 else 1.0)
        await comm.send(f"from {comm.rank}", dst=0)
        return None

    for seed in range(3):
        got = sc.run(main, world_size=3, transport=transport, seed=seed)[0]
        assert got == ((1, "from 2"), 1.0, "from 1")


def test_wait_any_picks_lowest_index_among_already_complete(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=2), comm.irecv(src=1)]
            await comm.sleep(5.0)  # both have arrived by now
            first = await sc.wait_any(reqs)
            rest = await reqs[1]
            return first, comm.now, rest
        await comm.sleep(3.0 if comm.rank == 2 else 1.0)  # rank 1 (index 1) arrives first
        await comm.send(f"from {comm.rank}", dst=0)
        return None

    assert sc.run(main, world_size=3, transport=transport)[0] == ((0, "from 2"), 5.0, "from 1")


def test_request_left_pending_by_wait_any_does_not_wake_a_later_await(transport: str) -> None:
    # After wait_any returns, the requests it did not take are still pending; when one of
    # them completes later it must not resume the rank from an await on another request.
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=1), comm.irecv(src=2)]
            first = await sc.wait_any(reqs)  # rank 2's message, at t=1
            later = comm.irecv(src=3)
            value = await later  # rank 3's message arrives at t=5; rank 1's at t=3 must not wake us
            at = comm.now
            rest = await reqs[0]
            return first, value, at, rest
        await comm.sleep({1: 3.0, 2: 1.0, 3: 5.0}[comm.rank])
        await comm.send(f"from {comm.rank}", dst=0)
        return None

    got = sc.run(main, world_size=4, transport=transport)[0]
    assert got == ((1, "from 2"), "from 3", 5.0, "from 1")


def test_request_left_pending_by_wait_some_does_not_wake_a_later_sleep(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=1), comm.irecv(src=2)]
            some = await sc.wait_some(reqs)  # rank 1's message, at t=1
            await comm.sleep(10.0)  # rank 2's message at t=2 must not cut the sleep short
            at = comm.now
            rest = await sc.wait_some(reqs)
            return some, at, rest
        await comm.sleep(float(comm.rank))
        await comm.send(comm.rank, dst=0)
        return None

    assert sc.run(main, world_size=3, transport=transport)[0] == ([(0, 1)], 11.0, [(1, 2)])


def test_wait_any_of_empty_list_raises(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        with pytest.raises(ValueError, match=r"^wait_any\(\[\]\): "):
            await sc.wait_any([])
        return "ok"

    assert list(sc.run(main, world_size=1, transport=transport)) == ["ok"]


def test_wait_some_returns_every_completed_request(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=1), comm.irecv(src=2), comm.irecv(src=3)]
            await comm.sleep(1.5)  # ranks 1 and 2 have arrived, rank 3 has not
            some = await sc.wait_some(reqs)
            at_some = comm.now
            rest = await sc.wait_some(reqs)
            at_rest = comm.now
            none_left = await sc.wait_some(reqs)
            return some, at_some, rest, at_rest, none_left
        await comm.sleep(3.0 if comm.rank == 3 else 1.0)
        await comm.send(comm.rank, dst=0)
        return None

    got = sc.run(main, world_size=4, transport=transport)[0]
    assert got == ([(0, 1), (1, 2)], 1.5, [(2, 3)], 3.0, [])


def test_wait_some_blocks_until_at_least_one_completes(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=1), comm.irecv(src=2)]
            some = await sc.wait_some(reqs)
            at = comm.now
            rest = await sc.wait_some(reqs)
            return some, at, rest, comm.now
        await comm.sleep(2.0 if comm.rank == 1 else 4.0)
        await comm.send(comm.rank * 10, dst=0)
        return None

    assert sc.run(main, world_size=3, transport=transport)[0] == ([(0, 10)], 2.0, [(1, 20)], 4.0)


def test_test_all_and_test_any_never_block(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.irecv(src=1), comm.irecv(src=2)]
            seen = [(comm.now, sc.test_all(reqs), sc.test_any(reqs))]
            await comm.sleep(1.5)  # rank 2 arrived at 1.0, rank 1 not yet
            seen.append((comm.now, sc.test_all(reqs), sc.test_any(reqs)))
            await comm.sleep(2.0)  # both arrived
            seen.append((comm.now, sc.test_all(reqs), sc.test_any(reqs)))
            return seen
        await comm.sleep(3.0 if comm.rank == 1 else 1.0)
        await comm.send(f"from {comm.rank}", dst=0)
        return None

    got = sc.run(main, world_size=3, transport=transport)[0]
    assert got == [
        (0.0, False, None),
        (1.5, False, (1, "from 2")),
        (3.5, True, (0, "from 1")),
    ]


def test_wait_helpers_reject_things_that_are_not_requests(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        with pytest.raises(TypeError, match=r"got int"):
            await sc.wait_all([1])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"got str"):
            sc.test_any(["req"])  # type: ignore[list-item]
        return "ok"

    assert list(sc.run(main, world_size=1, transport=transport)) == ["ok"]


# ---- misuse: gather, polling ----


@pytest.mark.parametrize("messages_waiting", [False, True])
def test_asyncio_gather_of_comm_calls_is_a_clear_error(transport: str, messages_waiting: bool) -> None:
    # request.py Rule 2: "an asyncio.gather of simcluster calls inside a rank is refused with a
    # clear error". Whether it is refused must not depend on whether the messages happen to
    # have arrived already (that would make the error schedule-dependent).
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            if messages_waiting:
                await comm.sleep(1.0)  # both messages are waiting as unexpected
            return await asyncio.gather(comm.recv(src=1), comm.recv(src=2))
        if not messages_waiting:
            await comm.sleep(1.0)  # the receives are still pending when gather's tasks await them
        await comm.send(comm.rank, dst=0)
        return None

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=3, transport=transport)
    assert info.value.rank == 0
    cause = info.value.__cause__
    assert isinstance(cause, RuntimeError)
    message = str(cause)
    # the shape is `rank R: op(args): what happened; what to do` (STYLE.md section 5)
    assert re.match(r"^rank 0: recv\(src=[12], tag=ANY_TAG\): ", message), message
    assert "asyncio.gather" in message and "sc.wait_all" in message


def test_polling_test_without_awaiting_is_stopped_not_a_hang(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1.0)
            await comm.send("never seen", dst=1)
            return None
        req = comm.irecv(src=0)
        while not req.test():  # virtual time cannot advance: no await
            pass
        return None

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    assert info.value.rank == 1
    cause = info.value.__cause__
    assert isinstance(cause, sc.SimclusterError)
    assert cause.rank == 1
    assert re.match(
        r"^rank 1: irecv\(src=0, tag=ANY_TAG\)\.test\(\): polled 1000000 times without awaiting, "
        r"so virtual time cannot advance; await the request, or await comm\.sleep\(dt\) between tests$",
        str(cause)), str(cause)
    assert info.value.__cause__.__traceback__ is not None


def test_polling_with_asyncio_sleep_zero_is_an_error_not_a_hang(transport: str) -> None:
    import asyncio

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 1:
            req = comm.irecv(src=0)  # rank 0 never sends
            while not req.test():
                await asyncio.sleep(0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport, timeout=60)
    assert info.value.rank == 1
    assert "virtual time cannot advance" in str(info.value.__cause__)


def test_a_failed_request_fails_on_every_wait(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.ones(8), dst=1)
            return None
        req = comm.irecv(np.zeros(4), src=0)
        errors = []
        for _ in range(2):
            try:
                await req
            except sc.TruncationError as exc:
                errors.append(type(exc).__name__)
        return errors

    assert sc.run(main, world_size=2, transport=transport)[1] == ["TruncationError"] * 2


def test_test_all_completes_nothing_unless_all_are_done(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send("a", dst=1, tag=1)
            await comm.sleep(1.0)
            await comm.send("b", dst=1, tag=2)
            return None
        reqs = [comm.irecv(src=0, tag=1), comm.irecv(src=0, tag=2)]
        await comm.sleep(0.5)
        early = sc.test_all(reqs)
        first_retrieved = reqs[0]._retrieved
        await comm.sleep(1.0)
        return early, first_retrieved, sc.test_all(reqs), await sc.wait_all(reqs)

    assert sc.run(main, world_size=2, transport=transport)[1] == (False, False, True, ["a", "b"])
