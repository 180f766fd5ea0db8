"""The torch.distributed / ignite-style facade, ``simcluster.dist``."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import dist
from simcluster.ops import ReduceOp

SIZES = [1, 3, 4]


def start(rank: int) -> np.ndarray:
    """Rank r's pair ``[2r + 1, 2r + 2]`` (the tutorials' data)."""
    return np.arange(2, dtype=np.int64) + 1 + 2 * rank


def pair_sum(size: int) -> list[int]:
    return [sum(2 * r + 1 for r in range(size)), sum(2 * r + 2 for r in range(size))]


# ---- outside a rank, facts ----

def test_get_rank_outside_a_rank_says_where_to_call_it() -> None:
    msg = ("simcluster.dist.get_rank(): called outside a rank; call it from the function "
           "passed to sc.run")
    with pytest.raises(RuntimeError, match=f"^{re.escape(msg)}$"):
        dist.get_rank()


@pytest.mark.parametrize("call", [
    lambda: dist.get_world_size(),
    lambda: dist.all_reduce(np.ones(1)),
    lambda: dist.broadcast(np.ones(1), src=0, async_op=True),
    lambda: dist.barrier(),
    lambda: dist.send(1, dst=0),
    lambda: dist.irecv(src=0),
    lambda: dist.new_group([0]),
], ids=["get_world_size", "all_reduce", "broadcast", "barrier", "send", "irecv", "new_group"])
def test_every_call_outside_a_rank_raises_at_the_call(call: Any) -> None:
    with pytest.raises(RuntimeError, match=r"^simcluster\.dist\.\w+\(\): called outside a rank; "):
        call()


def test_is_initialized_only_inside_a_rank() -> None:
    async def main(comm: sc.Comm) -> bool:
        return dist.is_initialized()

    assert not dist.is_initialized()
    assert list(sc.run(main, world_size=2)) == [True, True]


def test_reduce_op_is_reexported() -> None:
    assert dist.ReduceOp is ReduceOp
    assert dist.ReduceOp.SUM is ReduceOp.SUM


@pytest.mark.parametrize("size", SIZES)
def test_rank_and_world_size_match_the_comm(size: int) -> None:
    async def main(comm: sc.Comm) -> tuple[int, int]:
        return dist.get_rank(), dist.get_world_size()

    assert list(sc.run(main, world_size=size)) == [(r, size) for r in range(size)]


def test_group_rank_size_and_translation() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([3, 1])  # torch orders members by world rank
        if group is None:
            return None
        return (dist.get_rank(group), dist.get_world_size(group),
                dist.get_global_rank(group, 1), dist.get_group_rank(group, 1))

    assert list(sc.run(main, world_size=4)) == [None, (0, 2, 3, 0), None, (1, 2, 3, 0)]


def test_get_group_rank_of_a_non_member_names_the_members() -> None:
    async def main(comm: sc.Comm) -> None:
        group = await dist.new_group([0, 2])
        if comm.rank == 0:
            assert group is not None
            dist.get_group_rank(group, 1)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=3)
    assert str(info.value.__cause__) == (
        "rank 0: get_group_rank(global_rank=1): world rank 1 is not a member of this group "
        "(world ranks [0, 2]); src/dst are world ranks, as in torch.distributed")


def test_new_group_of_none_is_every_rank() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group()
        assert group is not None
        return group.world_ranks

    assert list(sc.run(main, world_size=3)) == [[0, 1, 2]] * 3


def test_group_must_be_a_comm() -> None:
    async def main(comm: sc.Comm) -> None:
        await dist.all_reduce(np.ones(1), group="world")  # type: ignore[call-overload]

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=1)
    assert isinstance(info.value.__cause__, TypeError)
    assert str(info.value.__cause__) == (
        "rank 0: all_reduce(group='world'): group must be a Comm from dist.new_group(), or None "
        "for the world")


def test_another_ranks_group_handle_is_refused() -> None:
    handles: dict[int, sc.Comm] = {}

    async def main(comm: sc.Comm) -> None:
        group = await dist.new_group()
        assert group is not None
        handles[comm.rank] = group
        await dist.barrier()
        if comm.rank == 1:
            dist.get_rank(handles[0])

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert isinstance(info.value.__cause__, ValueError)
    assert "this group handle belongs to world rank 0" in str(info.value.__cause__)


# ---- reductions ----

@pytest.mark.parametrize("size", SIZES)
def test_all_reduce_array_in_place_on_world(size: int) -> None:
    async def main(comm: sc.Comm) -> Any:
        t = start(comm.rank)
        out = await dist.all_reduce(t, op=dist.ReduceOp.SUM)
        assert out is t
        return t.tolist()

    assert list(sc.run(main, world_size=size)) == [pair_sum(size)] * size


def test_all_reduce_ignite_string_op_and_python_value() -> None:
    async def main(comm: sc.Comm) -> Any:
        biggest = await dist.all_reduce(comm.rank * 10, op="MAX")
        total = await dist.all_reduce(comm.rank + 0.5)
        return biggest, total

    assert list(sc.run(main, world_size=3)) == [(20, 4.5)] * 3


def test_all_reduce_async_op_returns_a_started_request() -> None:
    async def main(comm: sc.Comm) -> Any:
        t = start(comm.rank)
        req = dist.all_reduce(t, async_op=True)
        assert isinstance(req, sc.Request)
        await req.wait()
        return t.tolist()

    assert list(sc.run(main, world_size=4)) == [[16, 20]] * 4


def test_all_reduce_on_a_group_leaves_the_others_alone() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([1, 3])
        t = start(comm.rank)
        if group is not None:
            await dist.all_reduce(t, group=group)
            req = dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group, async_op=True)
            await req
        return t.tolist()

    assert list(sc.run(main, world_size=4)) == [[1, 2], [10, 12], [5, 6], [10, 12]]


@pytest.mark.parametrize("size", SIZES)
def test_reduce_onto_dst_only(size: int) -> None:
    dst = size - 1

    async def main(comm: sc.Comm) -> Any:
        t = start(comm.rank)
        out = await dist.reduce(t, dst=dst, op=dist.ReduceOp.SUM)
        return (out is t) if comm.rank == dst else out, t.tolist()

    expected: list[Any] = [(None, start(r).tolist()) for r in range(size)]
    expected[dst] = (True, pair_sum(size))
    assert list(sc.run(main, world_size=size)) == expected


def test_reduce_on_a_group_takes_a_world_rank_dst_and_async_op() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([0, 2, 3])
        t = start(comm.rank)
        if group is not None:
            await dist.reduce(t, dst=2, group=group, async_op=True).wait()
        return t.tolist()

    assert list(sc.run(main, world_size=4)) == [[1, 2], [3, 4], [13, 16], [7, 8]]


def test_src_outside_the_group_is_refused_at_the_call() -> None:
    async def main(comm: sc.Comm) -> None:
        group = await dist.new_group([0, 2])
        if comm.rank == 0:
            assert group is not None
            dist.broadcast(np.ones(1), src=1, group=group)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=3)
    assert str(info.value.__cause__) == (
        "rank 0: broadcast(src=1): world rank 1 is not a member of this group (world ranks "
        "[0, 2]); src/dst are world ranks, as in torch.distributed")


def test_reduce_scatter_fills_output() -> None:
    async def main(comm: sc.Comm) -> Any:
        inputs = [np.full(2, comm.rank + 10 * i) for i in range(comm.size)]
        out = np.zeros(2, dtype=np.int64)
        got = await dist.reduce_scatter(out, inputs)
        assert got is out
        req = dist.reduce_scatter(None, inputs, op="MAX", async_op=True)
        return out.tolist(), (await req).tolist()

    # sum over ranks of (r + 10*i) for size 3: 3 + 30*i; max: 2 + 10*i
    assert list(sc.run(main, world_size=3)) == [
        ([3 + 30 * i] * 2, [2 + 10 * i] * 2) for i in range(3)]


# ---- broadcast, scatter, gather ----

@pytest.mark.parametrize("size", SIZES)
def test_broadcast_array_in_place_and_object_returned(size: int) -> None:
    src = size // 2

    async def main(comm: sc.Comm) -> Any:
        t = start(comm.rank)
        await dist.broadcast(t, src=src)
        message = await dist.broadcast(f"hello from rank {comm.rank}", src=src)
        return t.tolist(), message

    assert list(sc.run(main, world_size=size)) == [(start(src).tolist(), f"hello from rank {src}")] * size


def test_broadcast_on_a_group_with_world_src_and_async_op() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([1, 2])
        t = start(comm.rank)
        if group is not None:
            req = dist.broadcast(t, src=2, group=group, async_op=True)
            await req
        return t.tolist()

    assert list(sc.run(main, world_size=3)) == [[1, 2], [5, 6], [5, 6]]


def test_broadcast_accepts_ignite_safe_mode() -> None:
    async def main(comm: sc.Comm) -> Any:
        return await dist.broadcast(None if comm.rank else 42, src=0, safe_mode=True)

    assert list(sc.run(main, world_size=2)) == [42, 42]


@pytest.mark.parametrize("size", SIZES)
def test_scatter_fills_tensor_and_reads_only_src_list(size: int) -> None:
    async def main(comm: sc.Comm) -> Any:
        t = np.zeros(2, dtype=np.int64)
        items = [np.full(2, i, dtype=np.int64) for i in range(size)] if comm.rank == 0 else []
        out = await dist.scatter(t, scatter_list=items, src=0)
        assert out is t
        item = await dist.scatter(None, [f"item {i}" for i in range(size)], src=size - 1)
        return t.tolist(), item

    assert list(sc.run(main, world_size=size)) == [([r, r], f"item {r}") for r in range(size)]


def test_scatter_on_a_group_async_op() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([0, 2])
        t = np.zeros(1)
        if group is not None:
            req = dist.scatter(t, [np.array([5.0]), np.array([7.0])] if comm.rank == 2 else None,
                               src=2, group=group, async_op=True)
            await req
        return t.tolist()

    assert list(sc.run(main, world_size=3)) == [[5.0], [0.0], [7.0]]


def test_scatter_list_of_wrong_length_fails_on_src() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            dist.scatter(np.zeros(1), [np.ones(1)], src=0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert str(info.value.__cause__) == (
        "rank 0: scatter(src=0): scatter_list must be a list with one item per rank of the group "
        "(2), got 1 items")


@pytest.mark.parametrize("size", SIZES)
def test_gather_fills_gather_list_on_dst(size: int) -> None:
    async def main(comm: sc.Comm) -> Any:
        t = start(comm.rank)
        if comm.rank == 0:
            slots = [np.zeros(2, dtype=np.int64) for _ in range(size)]
            kept = list(slots)
            out = await dist.gather(t, gather_list=slots, dst=0)
            assert out is slots and all(a is b for a, b in zip(slots, kept))
            return [s.tolist() for s in slots]
        return await dist.gather(t, gather_list=[], dst=0)

    expected: list[Any] = [None] * size
    expected[0] = [start(r).tolist() for r in range(size)]
    assert list(sc.run(main, world_size=size)) == expected


def test_gather_without_list_returns_one_and_async_on_group() -> None:
    async def main(comm: sc.Comm) -> Any:
        plain = await dist.gather(comm.rank * 2, dst=1)
        group = await dist.new_group([1, 2])
        filled = None
        if group is not None:
            slots = [None, None]
            req = dist.gather(f"r{comm.rank}", slots if comm.rank == 2 else None, dst=2,
                              group=group, async_op=True)
            filled = await req
        return plain, filled

    assert list(sc.run(main, world_size=3)) == [
        (None, None), ([0, 2, 4], None), (None, ["r1", "r2"])]


# ---- all_gather, all_to_all ----

@pytest.mark.parametrize("size", SIZES)
def test_all_gather_torch_form_fills_the_list_in_place(size: int) -> None:
    async def main(comm: sc.Comm) -> Any:
        slots = [np.zeros(2, dtype=np.int64) for _ in range(size)]
        kept = list(slots)
        out = await dist.all_gather(slots, start(comm.rank))
        assert out is slots and all(a is b for a, b in zip(slots, kept))
        return [s.tolist() for s in slots]

    assert list(sc.run(main, world_size=size)) == [[start(r).tolist() for r in range(size)]] * size


@pytest.mark.parametrize("size", SIZES)
def test_all_gather_ignite_form_returns_a_list(size: int) -> None:
    async def main(comm: sc.Comm) -> Any:
        return await dist.all_gather(2.0 * dist.get_rank())

    assert list(sc.run(main, world_size=size)) == [[2.0 * r for r in range(size)]] * size


def test_all_gather_both_forms_async_on_a_group() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([0, 1])
        if group is None:
            return None
        slots = [np.zeros(1), np.zeros(1)]
        torch_req = dist.all_gather(slots, np.array([comm.rank + 0.5]), group=group, async_op=True)
        ignite_req = dist.all_gather(comm.rank, group=group, async_op=True)
        assert isinstance(torch_req, sc.Request) and isinstance(ignite_req, sc.Request)
        names = await ignite_req
        filled = await torch_req.wait()
        assert filled is slots
        return [s.tolist() for s in slots], names

    assert list(sc.run(main, world_size=3)) == [([[0.5], [1.5]], [0, 1])] * 2 + [None]


def test_async_all_gather_keeps_collective_order() -> None:
    """The collective starts at the call, so ranks may wait for it at different points."""
    async def main(comm: sc.Comm) -> Any:
        slots = [np.zeros(1) for _ in range(comm.size)]
        req = dist.all_gather(slots, np.array([float(comm.rank)]), async_op=True)
        if comm.rank == 0:
            total = await dist.all_reduce(comm.rank + 1)
            await req
        else:
            await req
            total = await dist.all_reduce(comm.rank + 1)
        return total, [s[0] for s in slots]

    assert list(sc.run(main, world_size=3)) == [(6, [0.0, 1.0, 2.0])] * 3


def test_all_gather_list_of_wrong_length_fails_at_the_call() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            dist.all_gather([np.zeros(1)], np.ones(1))

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert str(info.value.__cause__) == (
        "rank 0: all_gather(tensor_list, tensor): tensor_list must be a list with one item per "
        "rank of the group (2), got 1 items")


def test_all_gather_output_of_wrong_shape_names_both_shapes() -> None:
    async def main(comm: sc.Comm) -> None:
        await dist.all_gather([np.zeros(3), np.zeros(3)], np.ones(2))

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert "received shape (2,) does not fit the output array of shape (3,)" in str(
        info.value.__cause__)


def test_unwaited_async_op_request_is_reported() -> None:
    async def main(comm: sc.Comm) -> None:
        dist.all_gather([None] * comm.size, comm.rank, async_op=True)

    with pytest.warns(sc.SimclusterWarning, match="never waited"):
        sc.run(main, world_size=2)


@pytest.mark.parametrize("size", SIZES)
def test_all_to_all_fills_output_list(size: int) -> None:
    async def main(comm: sc.Comm) -> Any:
        inputs = [np.array([10 * comm.rank + j]) for j in range(size)]
        out = [np.zeros(1, dtype=np.int64) for _ in range(size)]
        got = await dist.all_to_all(out, inputs)
        assert got is out
        fresh = await dist.all_to_all(None, [f"{comm.rank}->{j}" for j in range(size)],
                                      async_op=True)
        return [int(o[0]) for o in out], fresh

    assert list(sc.run(main, world_size=size)) == [
        ([10 * i + r for i in range(size)], [f"{i}->{r}" for i in range(size)]) for r in range(size)]


# ---- barrier ----

def test_barrier_world_group_and_async_op() -> None:
    async def main(comm: sc.Comm) -> float:
        await comm.sleep(comm.rank)
        await dist.barrier()
        group = await dist.new_group([0, 1])
        if group is not None:
            req = dist.barrier(group=group, async_op=True)
            assert isinstance(req, sc.Request)
            await req
        return comm.now

    times = sc.run(main, world_size=3)
    assert all(t >= 2 for t in times)


# ---- object collectives ----

def test_object_collectives() -> None:
    async def main(comm: sc.Comm) -> Any:
        gathered: list[Any] = [None] * comm.size
        await dist.all_gather_object(gathered, {"rank": comm.rank})
        objs = [f"from {comm.rank}", comm.rank]
        await dist.broadcast_object_list(objs, src=2)
        slots: list[Any] = [None] * comm.size
        at_dst = await dist.gather_object(comm.rank ** 2, slots if comm.rank == 1 else None, dst=1)
        mine: list[Any] = [None]
        await dist.scatter_object_list(mine, [f"x{i}" for i in range(comm.size)], src=0)
        return gathered, objs, at_dst, mine

    result = sc.run(main, world_size=3)
    for rank, (gathered, objs, at_dst, mine) in enumerate(result):
        assert gathered == [{"rank": r} for r in range(3)]
        assert objs == ["from 2", 2]
        assert at_dst == ([0, 1, 4] if rank == 1 else None)
        assert mine == [f"x{rank}"]


# ---- point-to-point ----

def test_send_recv_with_tensor_returns_sender_rank() -> None:
    async def main(comm: sc.Comm) -> Any:
        t = np.zeros(1)
        if comm.rank == 0:
            t += 1
            await dist.send(t, dst=1)
            return None
        sender = await dist.recv(t, src=0)
        return sender, t.tolist()

    assert list(sc.run(main, world_size=2)) == [None, (0, [1.0])]


def test_recv_without_tensor_returns_payload_and_any_source() -> None:
    async def main(comm: sc.Comm) -> Any:
        if comm.rank == 2:
            first = await dist.recv(src=None, tag=4)
            buf = np.zeros(2)
            sender = await dist.recv(buf)  # any source, tag 0
            return first, sender, buf.tolist()
        if comm.rank == 0:
            await dist.send({"hi": 0}, dst=2, tag=4)
        else:
            await comm.sleep(1.0)
            await dist.send(np.array([3.0, 4.0]), dst=2)
        return None

    assert sc.run(main, world_size=3)[2] == ({"hi": 0}, 1, [3.0, 4.0])


def test_isend_irecv_requests() -> None:
    async def main(comm: sc.Comm) -> Any:
        t = np.zeros(1)
        if comm.rank == 0:
            t += 1
            req = dist.isend(t, dst=1, tag=9)
            assert isinstance(req, sc.Request)
            assert await req.wait() is None
            return None
        req = dist.irecv(t, src=0, tag=9)
        got = await req
        assert got is t and req.status is not None
        return req.status.source, req.status.tag, t.tolist()

    assert list(sc.run(main, world_size=2)) == [None, (0, 9, [1.0])]


def test_p2p_on_a_group_uses_world_ranks() -> None:
    async def main(comm: sc.Comm) -> Any:
        group = await dist.new_group([3, 1])
        if group is None:
            return None
        if comm.rank == 3:
            await dist.send("to 1", dst=1, group=group)
            await dist.isend(np.array([7.0]), dst=1, group=group, tag=2)
            await dist.send("last", dst=1, group=group, tag=5)
            return None
        first = await dist.recv(src=3, group=group)
        buf = np.zeros(1)
        sender = await dist.recv(buf, group=group, tag=2)  # any source: a world rank back
        req = dist.irecv(src=None, group=group, tag=5)
        last = await req
        assert req.status is not None
        return first, sender, buf.tolist(), last, req.status.source  # status: the group's rank

    assert sc.run(main, world_size=4)[1] == ("to 1", 3, [7.0], "last", 1)


def test_dst_outside_the_group_is_refused() -> None:
    async def main(comm: sc.Comm) -> None:
        group = await dist.new_group([0, 1])
        if group is not None and comm.rank == 0:
            dist.isend(1, dst=2, group=group)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=3)
    assert str(info.value.__cause__) == (
        "rank 0: isend(dst=2): world rank 2 is not a member of this group (world ranks [0, 1]); "
        "src/dst are world ranks, as in torch.distributed")
