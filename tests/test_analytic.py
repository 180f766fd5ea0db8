"""Analytic fidelity: the same results as message level, exact times where the formula is exact.

``run(fidelity="analytic")`` resolves each collective in one step from the
algorithm's cost formula; these tests run the same programs at both
fidelities and compare what every rank got (values, types, dtypes, shapes,
in-place identity) and the virtual time.
"""

from __future__ import annotations

import operator
import re
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import FAMILIES, algorithms
from simcluster.ops import ReduceOp

WORLD_SIZES = [1, 2, 3, 5, 8]
AB = sc.latency.AlphaBeta(2.0**-20, 2.0**-30, 2.0**-33)

CONCAT = ReduceOp.custom(operator.add, commutative=False, name="concat")
MATMUL = ReduceOp.custom(np.matmul, commutative=False)
MIX = ReduceOp.custom(lambda a, b: 0.5 * a + 1.5 * b, commutative=False, name="mix", elementwise=True)


def _canon(value: Any) -> Any:
    """Describe a value exactly: type, dtype, shape and content (bit for bit for floats)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_canon(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((k, _canon(v)) for k, v in value.items()))
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, repr(value))


def _configs() -> list[dict[str, str]]:
    """Algorithm choices that, together, use every algorithm of every family at least once."""
    longest = max(len(algorithms(name)) for name in FAMILIES)
    return [{name: sorted(algorithms(name))[i % len(algorithms(name))] for name in FAMILIES}
            for i in range(longest)]


async def _everything(comm: sc.Comm, seed: int) -> list[Any]:
    """Call every collective on arrays and objects, with several roots; describe what came back."""
    p, r = comm.size, comm.rank
    rng = np.random.default_rng(seed * 100 + r)
    x = rng.standard_normal(2 * p + 3)  # random floats: reduction order shows in the last bits
    f = float(rng.standard_normal())
    out: list[Any] = []
    await comm.barrier()
    for root in sorted({0, p // 2, p - 1}):
        out.append(await comm.broadcast(x.copy() if r == root else np.empty_like(x), src=root))
        out.append(await comm.broadcast({"from": r, "v": [f, (r, "x")]}, src=root))
        out.append(await comm.scatter([x * i for i in range(p)] if r == root else None, src=root))
        out.append(await comm.scatter([(i, f"s{i}") for i in range(p)] if r == root else None,
                                      src=root, buf=None))
        out.append(await comm.gather(x, dst=root))
        out.append(await comm.gather([r, f], dst=root))
        buf = x.copy()
        got = await comm.reduce(buf, dst=root)
        out.append((got, got is buf, buf))
        out.append(await comm.reduce(f, dst=root, op=ReduceOp.MAX))
        out.append(await comm.reduce(np.arange(3) + r, dst=root, op=ReduceOp.BXOR))
    buf = x.copy()
    got = await comm.all_reduce(buf)
    out.append((got, got is buf))
    out.append(await comm.all_reduce(x.astype(np.float32), op=ReduceOp.AVG))
    out.append(await comm.all_reduce(f))
    out.append(await comm.all_reduce(10**20 + r))
    out.append(await comm.all_reduce(f"{r},", op=CONCAT))
    out.append(await comm.all_reduce(np.array([[1, 1], [0, 1]]) + r, op=MATMUL))
    out.append(await comm.all_reduce(x, op=MIX))
    out.append(await comm.all_reduce(np.array(f), op=ReduceOp.MIN))
    out.append(await comm.all_reduce(np.zeros(0, dtype=np.int8)))
    out.append(await comm.all_gather(x[: r + 1]))
    out.append(await comm.all_gather({"rank": r}))
    out.append(await comm.reduce_scatter([x[:3] * i for i in range(p)]))
    out.append(await comm.reduce_scatter([f * i for i in range(p)], op=MIX))
    out.append(await comm.all_to_all([x[:2] + i for i in range(p)]))
    out.append(await comm.all_to_all([f"{r}->{i}" for i in range(p)]))
    out.append(await comm.scan(x))
    out.append(await comm.scan(f, op=ReduceOp.AVG))
    out.append(await comm.scan(f"{r}", op=CONCAT))
    out.append(await comm.exscan(x, op=MIX))
    out.append(await comm.exscan(r + 1, op=ReduceOp.PRODUCT))
    return [_canon(item) for item in out]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("config", range(len(_configs())))
def test_every_collective_gives_the_message_level_result(world_size: int, config: int) -> None:
    forced = _configs()[config]
    message = sc.run(_everything, world_size, args=(config,), algorithms=forced)
    analytic = sc.run(_everything, world_size, args=(config,), algorithms=forced, fidelity="analytic")
    for rank in range(world_size):
        for i, (want, got) in enumerate(zip(message[rank], analytic[rank], strict=True)):
            assert got == want, f"rank {rank}, call {i}, algorithms {forced}"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_default_algorithms_give_the_message_level_result(world_size: int) -> None:
    message = sc.run(_everything, world_size, args=(7,))
    analytic = sc.run(_everything, world_size, args=(7,), fidelity="analytic")
    assert list(analytic) == list(message)


async def _received_copies_are_independent(comm: sc.Comm) -> list[Any]:
    items = await comm.all_gather([comm.rank])
    items[0].append("mine")  # must not show up on another rank
    value = await comm.all_reduce([comm.rank], op=CONCAT)
    value.append("mine")
    arr = await comm.broadcast(np.arange(3.0) if comm.rank == 0 else None, src=0)
    arr[0] = -1.0
    await comm.barrier()
    return [items, value, arr.tolist()]


def test_what_a_rank_receives_is_its_own_copy() -> None:
    message = sc.run(_received_copies_are_independent, 4)
    analytic = sc.run(_received_copies_are_independent, 4, fidelity="analytic")
    assert list(analytic) == list(message)


# ---- virtual time ----


async def _all_reduce_array(comm: sc.Comm, n: int, algorithm: str) -> None:
    await comm.all_reduce(np.arange(n, dtype=np.float64) + comm.rank, algorithm=algorithm)


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 8])
def test_ring_all_reduce_takes_the_same_virtual_time(world_size: int) -> None:
    args = (16 * world_size, "ring")  # pieces of equal size: the formula is exact
    message = sc.run(_all_reduce_array, world_size, args=args, latency=AB)
    analytic = sc.run(_all_reduce_array, world_size, args=args, latency=AB, fidelity="analytic")
    p, n = world_size, 16 * world_size * 8
    assert analytic.elapsed == message.elapsed
    assert analytic.elapsed == pytest.approx(
        2 * (p - 1) * (AB.alpha + n / p * AB.beta) + (p - 1) * n / p * AB.gamma)


@pytest.mark.parametrize("world_size", [2, 4, 8, 16])
@pytest.mark.parametrize("payload", ["array", "float"])
def test_recursive_doubling_takes_the_same_virtual_time_on_powers_of_two(world_size: int,
                                                                          payload: str) -> None:
    async def main(comm: sc.Comm) -> None:
        obj = np.arange(5.0) if payload == "array" else 1.5
        await comm.all_reduce(obj, algorithm="recursive_doubling")

    message = sc.run(main, world_size, latency=AB)
    analytic = sc.run(main, world_size, latency=AB, fidelity="analytic")
    assert analytic.elapsed == message.elapsed > 0


@pytest.mark.parametrize("world_size", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("model", [AB, sc.latency.Constant(3e-6), sc.latency.Zero()], ids=repr)
def test_dissemination_barrier_takes_the_same_virtual_time(world_size: int,
                                                           model: sc.latency.LatencyModel) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.barrier()
        await comm.barrier()

    message = sc.run(main, world_size, latency=model)
    analytic = sc.run(main, world_size, latency=model, fidelity="analytic")
    assert analytic.elapsed == message.elapsed


def test_a_collective_completes_after_the_last_member_arrives() -> None:
    async def main(comm: sc.Comm) -> float:
        await comm.sleep(1e-3 * comm.rank)
        await comm.barrier()
        return comm.now

    result = sc.run(main, 4, latency=AB, fidelity="analytic")
    assert list(result) == [3e-3 + 2 * AB.alpha] * 4


def test_jitter_is_charged_as_its_inner_model() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.barrier()

    jitter = sc.run(main, 8, latency=sc.latency.Jitter(AB, 0.5), fidelity="analytic")
    plain = sc.run(main, 8, latency=AB, fidelity="analytic")
    assert jitter.elapsed == plain.elapsed == 3 * AB.alpha


# ---- errors, nonblocking, point-to-point ----


def test_collectives_called_in_another_order_are_a_collective_mismatch() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.barrier()
        else:
            await comm.broadcast("x", src=1)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, 3, fidelity="analytic")
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    assert error.rank == info.value.rank
    if error.rank == 0:  # rank 1 or 2 entered first (the run's seeded order)
        assert re.fullmatch(r"rank 0: barrier\(\): this is collective #1 on comm 'world', but rank [12] "
                            r"called broadcast\(src=1\); every rank must call collectives in the same "
                            r"order", str(error))
    else:
        assert str(error) == (f"rank {error.rank}: broadcast(src=1): this is collective #1 on comm "
                              "'world', but rank 0 called barrier(); every rank must call collectives "
                              "in the same order")


def test_ranks_that_choose_different_algorithms_are_told_how_to_fix_it() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.broadcast(np.zeros(8192) if comm.rank == 0 else None, src=0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, 8, fidelity="analytic")
    assert re.fullmatch(r"rank \d: broadcast\(src=0\): rank \d runs collective #1 with algorithm "
                        r"'(binomial|scatter_allgather)' but this rank chose '(binomial|scatter_allgather)'; "
                        r"pass the same kind of payload \(array or object\) on every rank, or force "
                        r"algorithm=", str(info.value.__cause__))


def test_an_op_that_fails_is_the_members_error_not_the_engines() -> None:
    def explode(a: Any, b: Any) -> Any:
        raise ZeroDivisionError("no")

    async def main(comm: sc.Comm) -> None:
        await comm.all_reduce(comm.rank, op=ReduceOp.custom(explode))

    for fidelity in ("message", "analytic"):
        with pytest.raises(sc.RankError) as info:
            sc.run(main, 4, fidelity=fidelity)
        assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_an_unsendable_payload_is_refused_at_the_call() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.all_gather({comm.rank})

    with pytest.raises(sc.RankError) as info:
        sc.run(main, 2, fidelity="analytic")
    assert isinstance(info.value.__cause__, TypeError)
    assert re.fullmatch(r"rank \d: all_gather\(\): set is not sendable; .*", str(info.value.__cause__))


def test_a_rank_that_skips_a_collective_is_a_deadlock_naming_it() -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank:
            await comm.barrier()

    with pytest.raises(sc.DeadlockError, match=r"rank 1 waiting in analytic meeting inside barrier\(\) "
                                               r"\(collective #1 on comm 'world'\)"):
        sc.run(main, 3, fidelity="analytic")


async def _nonblocking(comm: sc.Comm) -> list[Any]:
    x = np.arange(4.0) + comm.rank
    reqs = [comm.iall_reduce(x), comm.ibarrier(), comm.iall_gather(comm.rank),
            comm.ibroadcast("hi" if comm.rank == 1 else None, src=1)]
    await comm.sleep(1e-6)
    got = await sc.wait_all(reqs)
    return [got[0] is x, x.tolist(), got[2], got[3], comm.now]


def test_nonblocking_twins_complete_with_the_same_results() -> None:
    message = sc.run(_nonblocking, 5, latency=AB)
    analytic = sc.run(_nonblocking, 5, latency=AB, fidelity="analytic")
    assert [r[:4] for r in analytic] == [r[:4] for r in message]
    assert analytic[0][0] is True


async def _ping_pong(comm: sc.Comm) -> list[Any]:
    got = []
    sub = await comm.split(comm.rank % 2)
    assert sub is not None
    for step in range(3):
        if comm.rank == 0:
            await comm.send(np.full(100, step), dst=1)
            got.append(await comm.recv(src=1))
        elif comm.rank == 1:
            got.append((await comm.recv(src=0)).sum())
            await comm.send(step, dst=0)
    got.append(await sub.all_reduce(comm.rank))
    return got


def test_point_to_point_stays_message_level() -> None:
    message = sc.run(_ping_pong, 4, latency=AB)
    analytic = sc.run(_ping_pong, 4, latency=AB, fidelity="analytic")
    assert list(analytic) == list(message)
    # only the collectives lose their messages: the 6 point-to-point ones remain
    assert analytic.stats.total_messages == 6 < message.stats.total_messages


def test_unknown_fidelity_lists_the_valid_ones() -> None:
    async def main(comm: sc.Comm) -> None:
        pass

    with pytest.raises(ValueError, match=r"^run\(fidelity='fast'\): unknown fidelity; valid: 'analytic' "
                                         r".*'message'"):
        sc.run(main, 2, fidelity="fast")


@pytest.mark.parametrize("fidelity", ["message", "analytic"])
def test_the_first_rank_to_fail_after_a_collective_is_reported_and_time_stops_there(fidelity: str) -> None:
    ran: list[int] = []
    later: list[int] = []

    async def main(comm: sc.Comm) -> None:
        await comm.barrier()
        ran.append(comm.rank)
        if comm.rank % 2:
            await comm.sleep(1.0)
            later.append(comm.rank)
        raise ValueError(f"rank {comm.rank} gives up")

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=8, fidelity=fidelity)
    # the run ends at the first failure's instant: every rank still runs what is due then
    # (as other processes run on under mpiexec until the job is killed), and no later event runs
    assert sorted(ran) == list(range(8)) and later == []
    assert info.value.rank == ran[0]
