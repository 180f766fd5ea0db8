"""Broadcast: every algorithm, every root, arrays in place, objects by value, exact virtual time."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import broadcast
from coll_helpers import ALPHA, BETA, WORLD_SIZES

ALGORITHMS = sorted(broadcast.ALGORITHMS)

MESSAGES: list[Any] = [
    None, True, -7, 2**100, 3.5, 1 + 2j, "héllo", b"\x00\xff", [1, [2, "x"]], (1, (2.5, None)),
    {"a": 1, "b": [1, 2]}, np.float32(1.5), [np.arange(3), "mixed"],
]

ARRAYS: list[np.ndarray] = [
    np.arange(6, dtype=np.float64),
    np.arange(12, dtype=np.int32).reshape(3, 4),
    np.array(5.0),
    np.zeros(0, dtype=np.float32),
    np.arange(60, dtype=np.int16)[::3],
    np.asfortranarray(np.arange(24, dtype=np.float32).reshape(4, 6)),
    (np.arange(40) + 1j).astype(np.complex128).reshape(5, 8),
    np.arange(20_000, dtype=np.float64).reshape(100, 200),  # 160 kB: rendezvous, and split in pieces
]


def _root_value(smsg: np.ndarray, root: int) -> np.ndarray:
    return np.asarray(smsg * (root + 1))  # asarray: a 0-d product is a numpy scalar


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_broadcast_fills_every_ranks_array_from_every_root(transport: str, algorithm: str,
                                                           world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[str]:
        wrong = []  # checked here: the big arrays would make returning copies slow
        for root in range(comm.size):
            for smsg in ARRAYS:
                expected = _root_value(smsg, root)
                rmsg = expected.copy() if comm.rank == root else np.zeros_like(smsg)
                out = await comm.broadcast(rmsg, src=root, algorithm=algorithm)
                assert out is rmsg  # in place, and the same object returned
                if not (rmsg.dtype == expected.dtype and rmsg.shape == expected.shape
                        and np.array_equal(rmsg, expected)):
                    wrong.append(f"root {root}: {smsg.dtype}{smsg.shape} got {rmsg!r}")
        return wrong

    assert list(sc.run(main, world_size=world_size, transport=transport)) == [[]] * world_size


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_broadcast_returns_the_roots_object_from_every_root(transport: str, algorithm: str,
                                                            world_size: int) -> None:
    async def main(comm: sc.Comm) -> list[Any]:
        got = []
        for root in range(comm.size):
            for smsg in MESSAGES:
                placeholder = smsg if comm.rank == root else "placeholder"
                got.append(await comm.broadcast(placeholder, src=root, algorithm=algorithm))
        return got

    for rank_got in sc.run(main, world_size=world_size, transport=transport):
        for rmsg, smsg in zip(rank_got, MESSAGES * world_size):
            assert type(rmsg) is type(smsg)
            assert repr(rmsg) == repr(smsg)  # repr: compares the array inside a list too


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_broadcast_to_ranks_without_a_buffer_returns_fresh_arrays(transport: str, algorithm: str) -> None:
    async def main(comm: sc.Comm) -> bool:
        smsg = np.arange(8.0).reshape(2, 4)
        if comm.rank == 0:
            value = await comm.broadcast(smsg, src=0, algorithm=algorithm)
            return value is smsg and bool(np.array_equal(smsg, np.arange(8.0).reshape(2, 4)))
        value = await comm.broadcast(None, src=0, algorithm=algorithm)  # mpi4py style: no placeholder
        ok = value.shape == (2, 4) and bool(np.array_equal(value, smsg)) and value.flags.writeable
        value[0, 0] = -1.0  # an owned copy: changing it touches nothing else
        return ok

    assert list(sc.run(main, world_size=3, transport=transport)) == [True, True, True]


def test_broadcast_of_a_large_array_with_the_default_on_many_ranks(transport: str) -> None:
    smsg = np.arange(50_000, dtype=np.int64)

    async def main(comm: sc.Comm) -> int:
        buf = smsg.copy() if comm.rank == 3 else np.empty_like(smsg)
        await comm.broadcast(buf, src=3)
        return int(buf.sum())

    assert broadcast.default(9, smsg.nbytes) == "scatter_allgather"
    assert list(sc.run(main, world_size=9, transport=transport)) == [int(smsg.sum())] * 9


def test_default_broadcast_depends_on_size_only_for_arrays() -> None:
    assert broadcast.default(8, 65536) == "scatter_allgather"  # 8 KiB per rank
    assert broadcast.default(8, 65535) == "binomial"
    assert broadcast.default(1000, 8192 * 1000) == "scatter_allgather"
    assert broadcast.default(1000, 8192 * 1000 - 1) == "binomial"
    assert broadcast.default(7, 1 << 30) == "binomial"
    assert broadcast.default(8, 1 << 30, arrays=False) == "binomial"
    assert broadcast.default(8, 0, arrays=False) == "binomial"


@pytest.mark.parametrize("nbytes", [4096, 1 << 17], ids=["eager", "rendezvous"])
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_binomial_broadcast_on_2_to_the_k_ranks_costs_k_alpha_plus_n_beta(transport: str, k: int,
                                                                        nbytes: int) -> None:
    world_size = 2**k
    root = world_size // 2  # any root: ranks are renumbered from it

    async def main(comm: sc.Comm) -> None:
        await comm.broadcast(np.ones(nbytes // 8), src=root, algorithm="binomial")

    result = sc.run(main, world_size=world_size, transport=transport,
                    latency=sc.latency.AlphaBeta(ALPHA, BETA))
    total = k * (ALPHA + nbytes * BETA)
    assert math.isclose(result.elapsed, total, rel_tol=1e-9, abs_tol=0.0)
    for rank, t in enumerate(result.times):
        rel = (rank - root) % world_size
        if nbytes > 65536:  # rendezvous: each send waits for its transfer, so every rank ends last
            expected = total
        else:  # eager: a rank is done once its copy arrives (the root at once)
            hops = bin(rel).count("1")  # the path from the root sets one bit per hop
            trailing = (rel & -rel).bit_length() - 1 if rel else k
            expected = hops * ALPHA + (k - trailing) * nbytes * BETA  # copies ahead of it on each port
        assert math.isclose(t, expected, rel_tol=1e-9, abs_tol=0.0), rank


def test_linear_broadcast_serializes_on_the_roots_port(transport: str) -> None:
    nbytes = 4096

    async def main(comm: sc.Comm) -> None:
        await comm.broadcast(np.ones(nbytes // 8), src=2, algorithm="linear")

    result = sc.run(main, world_size=5, transport=transport, latency=sc.latency.AlphaBeta(ALPHA, BETA))
    assert math.isclose(result.elapsed, ALPHA + 4 * nbytes * BETA, rel_tol=1e-9, abs_tol=0.0)


def test_two_ibroadcasts_outstanding_at_once(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[list[int], str]:
        buf = np.arange(4) if comm.rank == 0 else np.zeros(4, dtype=np.int64)
        first = comm.ibroadcast(buf, src=0)
        second = comm.ibroadcast(f"from {comm.rank}", src=comm.size - 1, algorithm="linear")
        word = await second
        assert await first is buf
        return buf.tolist(), word

    assert list(sc.run(main, world_size=4, transport=transport)) == [([0, 1, 2, 3], "from 3")] * 4


@pytest.mark.parametrize("src", [3, -1])
def test_broadcast_src_out_of_range_names_rank_and_call(transport: str, src: int) -> None:
    async def main(comm: sc.Comm) -> None:
        expected = (f"rank {comm.rank}: broadcast(src={src}): src must be in range(3) for this comm; "
                    "pass the rank that holds the data")
        with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
            await comm.broadcast(1, src=src)
        with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
            comm.ibroadcast(1, src=src)  # refused at the call, before any request exists

    sc.run(main, world_size=3, transport=transport)


def test_broadcast_with_unknown_algorithm_lists_the_valid_ones(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        with pytest.raises(ValueError, match=r"^broadcast\(algorithm='nope'\): unknown algorithm; "
                                             r"valid: binomial, linear, scatter_allgather, smp$"):
            await comm.broadcast(1, algorithm="nope")

    sc.run(main, world_size=2, transport=transport)
    with pytest.raises(ValueError, match=r"^broadcast\(algorithm='nope'\): unknown algorithm"):
        sc.run(main, world_size=2, transport=transport, algorithms={"broadcast": "nope"})


def test_broadcast_against_all_gather_is_a_collective_mismatch(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.broadcast("x", src=0)
        else:
            await comm.all_gather("y")

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    assert info.value.rank == error.rank
    # checked at the call: the member that enters second fails (which one: the run's seeded order)
    assert str(error) == {
        0: "rank 0: broadcast(src=0): this is collective #1 on comm 'world', but rank 1 called "
           "all_gather(); every rank must call collectives in the same order",
        1: "rank 1: all_gather(): this is collective #1 on comm 'world', but rank 0 called "
           "broadcast(src=0); every rank must call collectives in the same order"}[error.rank]


def test_default_broadcast_with_a_large_array_against_none_says_how_to_fix_it(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.broadcast(np.zeros(8192) if comm.rank == 0 else None, src=0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=8, transport=transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    # rank 0 (scatter_allgather, from its array's size) against a rank that passed None
    # (binomial), whichever entered first
    chosen = ("binomial", "scatter_allgather") if error.rank == 0 else ("scatter_allgather", "binomial")
    assert re.fullmatch(rf"rank {error.rank}: broadcast\(src=0\): rank \d runs collective #1 with "
                        rf"algorithm '{chosen[0]}' but this rank chose '{chosen[1]}'; pass the same kind "
                        r"of payload \(array or object\) on every rank, or force algorithm=", str(error))
    assert error.rank == 0 or "rank 0 runs" in str(error)


def test_broadcast_on_a_split_comm_stays_inside_it(transport: str) -> None:
    async def main(comm: sc.Comm) -> tuple[int, int]:
        sub = await comm.split(color=comm.rank % 2, key=-comm.rank)
        assert sub is not None
        buf = np.full(3, comm.rank)
        await sub.broadcast(buf, src=sub.size - 1)
        word = await sub.broadcast(f"w{comm.rank}" if sub.rank == 0 else None, src=0)
        return int(buf[0]), int(word[1:])

    # evens are ordered 6, 4, 2, 0 and odds 5, 3, 1 (key=-rank)
    assert list(sc.run(main, world_size=7, transport=transport)) == [
        (0, 6), (1, 5), (0, 6), (1, 5), (0, 6), (1, 5), (0, 6)]
