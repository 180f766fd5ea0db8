"""``comm.send``/``comm.recv`` behave the same under both check modes.

Under ``checks="off"`` they return compiled awaitables (``Send``, ``Recv``)
rather than coroutines; the results, times, errors and traces must not move.
"""

from __future__ import annotations

import numpy as np
import pytest

import simcluster as sc

CHECKS = ["strict", "off"]
AB = sc.latency.AlphaBeta(2.0**-20, 2.0**-30)


@pytest.mark.parametrize("checks", CHECKS)
def test_a_kept_call_starts_when_awaited_not_when_made(checks: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            late = comm.send("second", dst=1)  # made first, awaited after the other send
            await comm.sleep(1.0)
            await comm.send("first", dst=1)
            await late
            return comm.now
        kept = comm.recv(src=0)  # posted only when awaited, behind the next receive
        got = await comm.recv(src=0)
        return [got, await kept, comm.now]

    result = sc.run(main, 2, checks=checks, latency=AB)
    assert result[0] == 1.0
    assert result[1][:2] == ["first", "second"]
    assert result[1][2] > 1.0  # both sends left at t=1, when they were awaited
    assert result.times == sc.run(main, 2, checks="strict", latency=AB).times


@pytest.mark.parametrize("checks", CHECKS)
@pytest.mark.parametrize("which", ["send", "recv"])
def test_awaiting_a_call_twice_is_an_error(checks: str, which: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            call = comm.send(1, dst=1) if which == "send" else comm.recv(src=1)
            await call
            await call
        else:
            await (comm.recv(src=0) if which == "send" else comm.send(2, dst=0))

    with pytest.raises(sc.RankError) as info:
        sc.run(main, 2, checks=checks)
    assert info.value.rank == 0
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "awaited" in str(info.value.__cause__)


async def _kinds_of_arguments(comm: sc.Comm) -> list[object]:
    """Ranks and tags as numpy integers and wildcards, and a receive into a buffer."""
    got: list[object] = []
    if comm.rank == 0:
        await comm.send(1.5, dst=np.int64(1), tag=np.int32(7))
        await comm.send(np.arange(3.0), dst=1, tag=2)
        await comm.send("x", dst=1)
    else:
        got.append(await comm.recv(src=np.int16(0), tag=np.uint8(7)))
        got.append((await comm.recv(np.zeros(3), src=0, tag=2)).tolist())
        got.append(await comm.recv())
    got.append(comm.now)
    return got


@pytest.mark.parametrize("trace", [False, True])
def test_numpy_ranks_buffers_and_wildcards_give_the_same_results_in_both_modes(trace: bool) -> None:
    runs = [sc.run(_kinds_of_arguments, 2, checks=checks, latency=AB, trace=trace) for checks in CHECKS]
    assert list(runs[0]) == list(runs[1])
    assert runs[1][1][:3] == [1.5, [0.0, 1.0, 2.0], "x"]
    assert runs[0].times == runs[1].times
    assert runs[0].stats == runs[1].stats
    if trace:
        assert runs[0].trace.dumps() == runs[1].trace.dumps()
        names = {e["name"] for e in runs[1].trace.to_chrome()["traceEvents"]}
        assert {"send", "recv"} <= names


@pytest.mark.parametrize("call", ["send(1, dst=5)", "send(1, dst=1, tag=-1)", "recv(src=9)",
                                  "recv(src=0, tag=2**31)", "send(1, dst=True)"])
def test_bad_arguments_give_the_same_error_in_both_modes(call: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await eval(f"comm.{call}")  # noqa: S307 - the calls are this test's own

    errors = []
    for checks in CHECKS:
        with pytest.raises(sc.RankError) as info:
            sc.run(main, 2, checks=checks)
        errors.append(str(info.value.__cause__))
    assert errors[0] == errors[1]
    assert errors[0].startswith("rank 0: ")
    assert "must be in" in errors[0]


def test_off_mode_sends_are_not_coroutines_and_strict_ones_are() -> None:
    async def main(comm: sc.Comm) -> str:
        call = comm.send(None, dst=comm.rank)
        kind = type(call).__name__
        await call
        await comm.recv(src=comm.rank)
        return kind

    assert sc.run(main, 1, checks="strict")[0] == "coroutine"
    assert sc.run(main, 1, checks="off")[0] == "Send"


def test_synchronous_ranks_block_on_the_call_objects() -> None:
    from simcluster.bench import p2p

    for checks in CHECKS:  # the benchmark's synchronous ping-pong: blocking calls, no await
        result = sc.run(p2p._sync_pingpong, 2, args=(50,), checks=checks, latency=AB)
        assert result.stats.total_messages == 100
        assert result.elapsed == 100 * (2.0**-20 + 2.0**-30)  # 100 hops of a one-byte int


def test_plain_calls_take_the_fast_path_and_the_rest_the_coroutine(monkeypatch: pytest.MonkeyPatch) -> None:
    slow: list[str] = []
    send, recv = sc.Comm.send_coroutine, sc.Comm.recv_coroutine

    def counting_send(self: sc.Comm, *args: object) -> object:
        slow.append("send")
        return send(self, *args)

    def counting_recv(self: sc.Comm, *args: object) -> object:
        slow.append("recv")
        return recv(self, *args)

    monkeypatch.setattr(sc.Comm, "send_coroutine", counting_send)
    monkeypatch.setattr(sc.Comm, "recv_coroutine", counting_recv)

    async def plain(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(1, 1)
            await comm.send(2, dst=1, tag=5)
            return None
        return [await comm.recv(src=0), await comm.recv(src=sc.ANY_SOURCE, tag=5)]

    assert list(sc.run(plain, 2, checks="off")) == [None, [1, 2]]
    assert slow == []
    assert list(sc.run(_kinds_of_arguments, 2, checks="off"))[1][:3] == [1.5, [0.0, 1.0, 2.0], "x"]
    assert sorted(slow) == ["recv", "recv", "send"]  # numpy ints on both sides, and a receive into buf


@pytest.mark.parametrize("checks", CHECKS)
def test_minus_one_is_the_wildcard_in_both_modes(checks: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send("a", dst=1, tag=3)
            return None
        got = await comm.recv(src=-1, tag=-1)
        return got

    assert list(sc.run(main, 2, checks=checks)) == [None, "a"]
