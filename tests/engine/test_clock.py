"""Virtual time follows the latency model exactly, checked against hand-computed formulas.

Alpha, beta and message sizes are powers of two, so every sum is exact in
binary floating point and times are compared with ``==``.
"""

from __future__ import annotations

import asyncio

import msgpack
import numpy as np
import pytest

import simcluster as sc

ALPHA = 2.0**-20  # about 1 us
BETA = 2.0**-30  # about 1 GB/s
N = 4096  # bytes (float64[512]); N * BETA == 2**-18 exactly


async def ping_pong(comm: sc.Comm) -> float:
    if comm.rank == 0:
        await comm.send("ping", dst=1)
        await comm.recv(src=1)
    elif comm.rank == 1:
        await comm.recv(src=0)
        await comm.send("pong", dst=0)
    return comm.now


def test_zero_latency_keeps_time_at_zero() -> None:
    result = sc.run(ping_pong, world_size=3, latency=sc.latency.Zero())
    assert result.times == [0.0, 0.0, 0.0]
    assert result.elapsed == 0.0
    assert list(result) == [0.0, 0.0, 0.0]


def test_default_latency_is_zero() -> None:
    assert sc.run(ping_pong, world_size=2).elapsed == 0.0


def test_constant_latency_ping_pong_takes_two_delays() -> None:
    result = sc.run(ping_pong, world_size=2, latency=sc.latency.Constant(5e-6))
    assert result[1] == 5e-6  # rank 1 got the ping after one delay
    assert result[0] == 1e-5  # rank 0 got the pong after two
    assert result.elapsed == 1e-5


def test_alpha_beta_eager_message_charges_receiver_not_sender() -> None:
    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send(np.zeros(N // 8), dst=1)
        else:
            await comm.recv(src=0)
        return comm.now

    result = sc.run(main, world_size=2, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    assert list(result) == [0.0, ALPHA + N * BETA]


@pytest.mark.parametrize("late", ["receiver", "sender"])
def test_rendezvous_transfer_is_charged_from_the_later_post(late: str) -> None:
    nbytes = 1 << 17  # 128 KiB > eager_limit 64 KiB

    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            if late == "sender":
                await comm.sleep(1.0)
            await comm.send(np.zeros(nbytes // 8), dst=1)
        else:
            if late == "receiver":
                await comm.sleep(1.0)
            await comm.recv(src=0)
        return comm.now

    result = sc.run(main, world_size=2, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    arrive = 1.0 + ALPHA + nbytes * BETA
    assert list(result) == [arrive, arrive]  # the sender completes when the data has arrived


def test_eager_limit_decides_between_eager_and_rendezvous() -> None:
    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send(np.zeros(N // 8), dst=1)
        else:
            await comm.sleep(1.0)
            await comm.recv(src=0)
        return comm.now

    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    assert list(sc.run(main, world_size=2, latency=lat, eager_limit=N)) == [0.0, 1.0]
    late = 1.0 + ALPHA + N * BETA
    assert list(sc.run(main, world_size=2, latency=lat, eager_limit=N - 1)) == [late, late]


def test_incast_of_three_messages_serialises_on_the_receive_port() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            times = []
            for _ in range(3):
                await comm.recv(src=sc.ANY_SOURCE)
                times.append(comm.now)
            return times
        await comm.send(np.zeros(N // 8), dst=0)
        return comm.now

    result = sc.run(main, world_size=4, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    assert result[0] == [ALPHA + N * BETA, ALPHA + 2 * N * BETA, ALPHA + 3 * N * BETA]
    assert list(result)[1:] == [0.0, 0.0, 0.0]  # eager sends complete at once
    assert result.elapsed == ALPHA + 3 * N * BETA


def test_same_instant_messages_take_the_receive_port_in_the_order_they_reach_it() -> None:
    # one message per sender, two for rank 0: the small one reaches rank 0's port first
    # although its sender's rank is higher, so the big one queues behind it
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            got = []
            for _ in range(2):
                req = comm.irecv(src=sc.ANY_SOURCE)
                await req
                got.append((req.status.source, comm.now))
            return got
        if comm.rank in (1, 2):
            await comm.send(np.zeros(N // 8 if comm.rank == 1 else 1), dst=0)
        return comm.now

    for world_size in (3, 4, 8):  # one message per receiver or not, in a round or not
        result = sc.run(main, world_size=world_size, latency=sc.latency.AlphaBeta(ALPHA, BETA))
        assert result[0] == [(2, ALPHA + 8 * BETA), (1, ALPHA + (N + 8) * BETA)]


def test_fan_out_serialises_on_the_send_port() -> None:
    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await sc.wait_all([comm.isend(np.zeros(N // 8), dst=d) for d in (1, 2, 3)])
        else:
            await comm.recv(src=0)
        return comm.now

    result = sc.run(main, world_size=4, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    assert sorted(result[1:]) == [ALPHA + N * BETA, ALPHA + 2 * N * BETA, ALPHA + 3 * N * BETA]


def test_sleep_adds_exactly() -> None:
    async def main(comm: sc.Comm) -> float:
        await comm.sleep(0.25)
        await comm.sleep(0.5)
        await comm.sleep(0)
        await comm.sleep(0.1 * comm.rank)
        return comm.now

    result = sc.run(main, world_size=3)
    assert list(result) == [0.75, 0.75 + 0.1, 0.75 + 0.1 * 2]


def test_negative_sleep_is_value_error() -> None:
    async def main(comm: sc.Comm) -> str:
        with pytest.raises(ValueError, match=r"^rank 0: sleep\(-1\.0\): seconds must be >= 0"):
            await comm.sleep(-1.0)
        return "ok"

    assert list(sc.run(main, world_size=1)) == ["ok"]


def test_elapsed_is_the_latest_rank_time() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.sleep([0.5, 2.0, 1.25][comm.rank])

    result = sc.run(main, world_size=3)
    assert result.times == [0.5, 2.0, 1.25]
    assert result.elapsed == max(result.times) == 2.0


def test_receive_completes_at_later_of_post_and_arrival() -> None:
    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send("x", dst=1)
        else:
            await comm.sleep(1.0)  # the message arrived at 1 us; receiving it costs no more
            await comm.recv(src=0)
        return comm.now

    assert list(sc.run(main, world_size=2, latency=sc.latency.Constant(1e-6))) == [0.0, 1.0]


def test_stats_count_array_nbytes_object_encoded_length_and_zero_for_none() -> None:
    payloads = [np.zeros(5, dtype=np.float32), "hello", [1, 2, 3], None]
    expected = 5 * 4 + len(msgpack.packb("hello")) + len(msgpack.packb([1, 2, 3])) + 0

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            for p in payloads:
                await comm.send(p, dst=2)
        elif comm.rank == 2:
            for _ in payloads:
                await comm.recv(src=0)

    stats = sc.run(main, world_size=3).stats
    assert expected == 20 + 6 + 4
    assert stats.messages_sent == (4, 0, 0)
    assert stats.bytes_sent == (expected, 0, 0)
    assert stats.messages_received == (0, 0, 4)
    assert stats.bytes_received == (0, 0, expected)
    assert (stats.total_messages, stats.total_bytes) == (4, expected)


@pytest.mark.parametrize(("payload", "nbytes"), [
    (np.zeros(5, dtype=np.float32), 20),
    (np.zeros((3, 4), dtype=np.int16), 24),
    ("hello", 6),
    ([1, 2, 3], 4),
    (None, 0),
    (1.5, 9),  # scalars travel as themselves within a process but count their encoding
    (7, 1),
    (300, 3),
    (-(2**40), 9),
    (True, 1),
])
def test_stats_bytes_per_payload(payload: object, nbytes: int) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send(payload, dst=1)
        else:
            await comm.recv(src=0)

    stats = sc.run(main, world_size=2).stats
    assert stats.bytes_sent == (nbytes, 0)
    assert stats.bytes_received == (0, nbytes)
    assert (stats.total_messages, stats.total_bytes) == (1, nbytes)


@pytest.mark.parametrize("checks", ["strict", "off"])
@pytest.mark.parametrize("eager_limit", [0, 65536])
def test_scalars_arrive_as_sent_eager_or_rendezvous(eager_limit: int, checks: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.isend(2.5, dst=1)
            await comm.send(7, dst=1)
            await comm.send(True, dst=1)
            return None
        return [await comm.recv(src=0) for _ in range(3)]

    result = sc.run(main, world_size=2, eager_limit=eager_limit, checks=checks,
                    latency=sc.latency.AlphaBeta(1e-6, 1e-9))
    assert result[1] == [2.5, 7, True]
    assert [type(x) for x in result[1]] == [float, int, bool]
    assert result.stats.bytes_sent == (9 + 1 + 1, 0)
    # the bytes they count are what they cost: eager, the three share the sender's port
    # (the last lands at 1 us + 11 ns); rendezvous, each waits for its receive, a
    # 1 us handshake apart (3 us + the same 11 ns)
    assert result.times[1] == pytest.approx(3.011e-6 if eager_limit == 0 else 1.011e-6, abs=1e-15)


def test_foreign_await_works_and_does_not_advance_virtual_time() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            before = comm.now
            await asyncio.sleep(0.01)  # real time passes, virtual time does not
            after = comm.now
            await comm.send("after the foreign await", dst=1)
            return before, after
        got = await comm.recv(src=0)
        return got, comm.now

    result = sc.run(main, world_size=2, latency=sc.latency.Zero())
    assert list(result) == [(0.0, 0.0), ("after the foreign await", 0.0)]
    assert result.wall >= 0.01


def test_foreign_await_holds_virtual_time_for_the_others() -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await asyncio.sleep(0.01)
            await comm.send("x", dst=1)  # posted at virtual time 0
            return comm.now
        await comm.sleep(5.0)  # time must not have jumped past rank 0's send
        await comm.recv(src=0)
        return comm.now

    assert list(sc.run(main, world_size=2, latency=sc.latency.Constant(1.0))) == [0.0, 5.0]
