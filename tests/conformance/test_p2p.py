"""Point-to-point behaviour that every transport must show."""

from __future__ import annotations

import numpy as np
import pytest

import simcluster as sc

MESSAGES = [
    None, True, False, 0, -7, 2**100, 3.5, 1 + 2j, "héllo", b"\x00\xff", [1, [2, "x"]],
    (1, (2.5, None)), {"a": 1, "b": [1, 2]}, {1: "one", (2, 3): "pair"},
    np.float32(1.5), np.int64(-3),
]

ARRAYS = [
    np.arange(6, dtype=np.float64),
    np.arange(12, dtype=np.int32).reshape(3, 4),
    np.array(5.0),
    np.zeros(0, dtype=np.float32),
    np.array([True, False]),
    np.arange(20, dtype=np.int16)[::3],
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    (np.arange(4) + 1j).astype(np.complex128),
]


@pytest.mark.parametrize("smsg", MESSAGES, ids=repr)
def test_send_recv_objects_round_trip(transport: str, smsg: object) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(smsg, dst=1, tag=3)
            return None
        return await comm.recv(src=0, tag=3)

    rmsg = sc.run(main, world_size=2, transport=transport)[1]
    assert rmsg == smsg
    assert type(rmsg) is type(smsg)


@pytest.mark.parametrize("smsg", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_send_recv_arrays_keep_dtype_shape_and_values(transport: str, smsg: np.ndarray) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(smsg, dst=1)
            return None
        return await comm.recv(src=0)

    rmsg = sc.run(main, world_size=2, transport=transport)[1]
    assert rmsg.dtype == smsg.dtype and rmsg.shape == smsg.shape
    np.testing.assert_array_equal(rmsg, smsg)
    assert rmsg.flags.writeable


def test_recv_into_buf_fills_in_place(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        buf = np.zeros(4)
        if comm.rank == 0:
            await comm.send(np.arange(4.0), dst=1)
            return buf.tolist()
        got = await comm.recv(buf, src=0)
        assert got is buf
        return buf.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == [0.0, 1.0, 2.0, 3.0]


def test_receiver_owns_its_copy_of_eager_and_rendezvous_arrays(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        small, big = np.ones(4), np.ones(20_000)
        if comm.rank == 0:
            await comm.send(small, dst=1)
            await comm.send(big, dst=1)
            small[:] = 5
            big[:] = 5
            await comm.send("done", dst=1)
            return None
        a = await comm.recv(src=0)
        b = await comm.recv(src=0)
        await comm.recv(src=0)
        return float(a.sum()), float(b.sum())

    assert sc.run(main, world_size=2, transport=transport)[1] == (4.0, 20_000.0)


def test_messages_from_one_sender_do_not_overtake(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            for i in range(50):
                await comm.send(i, dst=1, tag=1)
            return None
        return [await comm.recv(src=0, tag=1) for _ in range(50)]

    for seed in range(5):
        assert sc.run(main, world_size=2, transport=transport, seed=seed)[1] == list(range(50))


@pytest.mark.parametrize("latency", [sc.latency.Zero(), sc.latency.Constant(1e-6),
                                     sc.latency.AlphaBeta(1e-6, 1e-9)], ids=["zero", "constant", "alphabeta"])
def test_one_sender_to_several_destinations_keeps_each_channel_in_order(transport: str,
                                                                        latency: sc.latency.LatencyModel) -> None:
    """Messages to several destinations in flight at once, some at one virtual time: each in order."""
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            for i in range(24):  # sizes vary, so arrival times interleave across destinations
                payload = np.full(1 + 37 * (i % 5), i) if i % 3 else i
                await comm.send(payload, dst=1 + i % 3, tag=i % 2)
            return None
        if comm.rank == 3:
            await comm.sleep(1e-3)  # everything is unexpected by then
        got = []
        for _ in range(8):
            value = await comm.recv(src=0)
            got.append(int(value) if not isinstance(value, np.ndarray) else int(value[0]))
        return got

    expected = [None, list(range(0, 24, 3)), list(range(1, 24, 3)), list(range(2, 24, 3))]
    for seed in range(4):
        for schedule in ("batch", "shuffle"):
            result = sc.run(main, world_size=4, transport=transport, seed=seed, latency=latency,
                            schedule=schedule)
            assert list(result) == expected


def test_small_message_after_large_does_not_overtake(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            reqs = [comm.isend(np.ones(100_000), dst=1), comm.isend("small", dst=1)]
            await sc.wait_all(reqs)
            return None
        first = await comm.recv(src=0)
        second = await comm.recv(src=0)
        return type(first).__name__, second

    lat = sc.latency.AlphaBeta(1e-6, 1e-9)
    assert sc.run(main, world_size=2, transport=transport, latency=lat)[1] == ("ndarray", "small")


def test_recv_by_tag_skips_other_tags(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send("a", dst=1, tag=1)
            await comm.send("b", dst=1, tag=2)
            return None
        b = await comm.recv(src=0, tag=2)
        a = await comm.recv(src=0, tag=1)
        return a, b

    assert sc.run(main, world_size=2, transport=transport)[1] == ("a", "b")


def test_recv_any_source_reports_status(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            got = []
            for _ in range(comm.size - 1):
                req = comm.irecv(src=sc.ANY_SOURCE, tag=sc.ANY_TAG)
                value = await req
                assert req.status is not None
                got.append((req.status.source, req.status.tag, value))
            return sorted(got)
        await comm.send(comm.rank * 10, dst=0, tag=comm.rank)
        return None

    assert sc.run(main, world_size=4, transport=transport)[0] == [(1, 1, 10), (2, 2, 20), (3, 3, 30)]


def test_a_split_comms_receive_reports_status_in_its_own_ranks(transport: str) -> None:
    # a collective ran first on both comms, whose own receives keep no status
    async def main(comm: sc.Comm) -> object:
        await comm.barrier()
        odd = await comm.split(comm.rank % 2)
        assert odd is not None
        await odd.all_reduce(1.0)
        if odd.rank == 0:
            req = odd.irecv(src=sc.ANY_SOURCE, tag=sc.ANY_TAG)
            value = await req
            assert req.status is not None
            return (req.status.source, req.status.tag, req.status.nbytes, value)
        if odd.rank == 1:
            await odd.send(comm.rank * 10, dst=0, tag=7)
        return None

    result = sc.run(main, world_size=4, transport=transport)
    assert (result[0], result[1]) == ((1, 7, 1, 20), (1, 7, 1, 30))


def test_isend_irecv_wait_all_exchange_in_a_ring(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        reqs = [comm.irecv(src=left), comm.isend(comm.rank, dst=right)]
        got, none = await sc.wait_all(reqs)
        assert none is None
        return got

    for size in (1, 2, 3, 7):
        assert list(sc.run(main, world_size=size, transport=transport)) == [
            (r - 1) % size for r in range(size)]


def test_sendrecv_shifts_values_without_deadlock(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        return await comm.sendrecv(np.full(30_000, comm.rank), right, src=left)

    result = sc.run(main, world_size=3, transport=transport)
    assert [int(r[0]) for r in result] == [2, 0, 1]


def test_probe_then_recv_sized_buffer(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.arange(7, dtype=np.int32), dst=1, tag=4)
            return None
        status = await comm.probe(src=sc.ANY_SOURCE, tag=4)
        buf = np.empty(status.nbytes // 4, dtype=np.int32)
        await comm.recv(buf, src=status.source, tag=status.tag)
        return status.source, status.tag, status.nbytes, buf.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == (0, 4, 28, list(range(7)))


def test_iprobe_is_none_until_the_message_arrives(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.sleep(1.0)
            await comm.send("x", dst=1)
            return None
        before = comm.iprobe(src=0)
        await comm.sleep(2.0)
        after = comm.iprobe(src=0)
        await comm.recv(src=0)
        return before, after is not None

    assert sc.run(main, world_size=2, transport=transport)[1] == (None, True)


def test_one_rank_world_can_send_to_itself(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        req = comm.irecv(src=0)
        await comm.send({"me": comm.rank}, dst=0)
        return await req

    assert list(sc.run(main, world_size=1, transport=transport)) == [{"me": 0}]


def test_empty_array_message(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.zeros((0, 3), dtype=np.float32), dst=1)
            return None
        return (await comm.recv(src=0)).shape

    assert sc.run(main, world_size=2, transport=transport)[1] == (0, 3)
