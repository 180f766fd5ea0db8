"""Collectives are verified at the call: a member whose call differs from the first member's fails at once.

When a rank enters collective number k on a communicator, what every member
must agree on (the call, its root and op, a user op's definition, the array
shape and dtype where every rank passes one, a forced algorithm) is compared
with what the first member to enter number k passed. A difference raises
``CollectiveMismatchError`` on that rank at the call, naming both calls and
both ranks; across processes (shm, tcp) the comparison happens at the next
synchronisation round and gives the same report. What may legitimately differ
(all_gather, gather, scatter and all_to_all payloads, broadcast placeholders)
never raises. Rank functions are module-level so that the shm and tcp
hosting processes import them by name.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI


def _run(fn: Any, world_size: int, transport: str, procs: int | None = None, **keywords: Any) -> Any:
    """``sc.run`` with ``procs`` hosting processes on the shm and tcp transports.

    The memory transport has one process; on mpi the job decides (one per MPI process).
    """
    if transport in ("shm", "tcp"):
        keywords["procs"] = procs if procs is not None else world_size
    return sc.run(fn, world_size, transport=transport, **keywords)


async def _in_rank_order(comm: sc.Comm) -> None:
    """Make members enter the next collective one after the other, rank 0 first.

    Members that enter together run in the run's seeded order (on the shm and
    tcp transports, the lowest process first), so which one is *first* and
    which one fails would depend on the seed and transport.
    """
    await comm.sleep(float(comm.rank))


def _mismatch(fn: Any, world_size: int, transport: str, procs: int | None = None,
              **keywords: Any) -> sc.CollectiveMismatchError:
    """Run ``fn``, which must fail with a collective mismatch, and return the mismatch."""
    with pytest.raises(sc.RankError) as info:
        _run(fn, world_size, transport, procs, **keywords)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError), repr(error)
    assert info.value.rank == error.rank  # on the world, the comm rank is the world rank
    return error


# ---- root ----


async def broadcast_from_two_roots(comm: sc.Comm) -> Any:
    x = f"from {comm.rank}"
    return await comm.broadcast(x, src=0 if comm.rank == 0 else 1)


def _two_roots_report(error: sc.CollectiveMismatchError) -> str:
    """What ``broadcast_from_two_roots`` reports on the member that failed, whichever entered first."""
    if error.rank == 0:  # ranks 1 or 2 entered first: rank 0 differs from them
        return ("rank 0: broadcast(src=0): this is collective #1 on comm 'world', but rank "
                f"{str(error).split('but rank ')[1][0]} called broadcast(src=1); every rank must pass "
                "the same src")
    return (f"rank {error.rank}: broadcast(src=1): this is collective #1 on comm 'world', but rank 0 "
            "called broadcast(src=0); every rank must pass the same src")


@pytest.mark.parametrize("procs", [None, 2])
def test_a_broadcast_with_another_root_raises_at_the_call(transport: str, procs: int | None) -> None:
    if transport == "memory" and procs is not None:
        pytest.skip("the memory transport hosts every rank in one process")
    error = _mismatch(broadcast_from_two_roots, 3, transport, procs)
    assert str(error) == _two_roots_report(error)
    assert error.op == ("broadcast(src=0)" if error.rank == 0 else "broadcast(src=1)")
    assert str(error).split("but rank ")[1][0] in ("12" if error.rank == 0 else "0")


BROADCAST_ROOTS = ("rank 1: broadcast(src=1): this is collective #1 on comm 'world', but rank 0 called "
                   "broadcast(src=0); every rank must pass the same src")


async def broadcast_from_two_roots_in_rank_order(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await broadcast_from_two_roots(comm)


def test_a_broadcast_with_another_root_names_both_calls_and_both_ranks(transport: str) -> None:
    error = _mismatch(broadcast_from_two_roots_in_rank_order, 3, transport)
    assert (error.rank, error.op) == (1, "broadcast(src=1)")
    assert str(error) == BROADCAST_ROOTS


def test_members_that_enter_in_one_round_are_compared_at_its_end(transport: str) -> None:
    if transport in ("memory", "mpi"):
        pytest.skip("needs one rank per process (memory: one process; mpi: the job decides)")
    # one rank per process, all entering at time 0: the coordinator compares them at the end
    # of that round; the lowest process counts as first and the lowest rank that differs fails
    error = _mismatch(broadcast_from_two_roots, 3, transport, procs=3)
    assert str(error) == BROADCAST_ROOTS


async def broadcast_with_a_late_odd_root(comm: sc.Comm) -> Any:
    if comm.rank == 2:
        await comm.sleep(1.0)  # enters long after the others: compared with what rank 0 passed
    return await comm.broadcast(comm.rank, src=2 if comm.rank == 2 else 0)


def test_a_late_member_with_another_root_is_compared_with_the_first(transport: str) -> None:
    if transport == "mpi":  # ranks 0 and 1 share process 0 there, and enter together
        pytest.skip("which of two members entering together is first depends on the process layout")
    error = _mismatch(broadcast_with_a_late_odd_root, 3, transport)
    assert str(error) == ("rank 2: broadcast(src=2): this is collective #1 on comm 'world', but rank 0 "
                          "called broadcast(src=0); every rank must pass the same src")


async def reduce_to_two_roots(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.reduce(comm.rank, dst=comm.rank % 2)


def test_a_reduce_with_another_root_raises(transport: str) -> None:
    error = _mismatch(reduce_to_two_roots, 2, transport)
    assert str(error) == ("rank 1: reduce(dst=1, op=SUM): this is collective #1 on comm 'world', but "
                          "rank 0 called reduce(dst=0, op=SUM); every rank must pass the same dst")


# ---- op ----


async def all_reduce_max_and_sum(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(comm.rank, op=sc.ReduceOp.MAX if comm.rank == 0 else sc.ReduceOp.SUM)


def test_an_all_reduce_with_another_op_raises(transport: str) -> None:
    error = _mismatch(all_reduce_max_and_sum, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=SUM): this is collective #1 on comm 'world', but rank 0 "
                          "called all_reduce(op=MAX); every rank must pass the same op")


def _plus(a: Any, b: Any) -> Any:
    return a + b


def _join(a: Any, b: Any) -> Any:
    return a + b


def _also_plus(a: Any, b: Any) -> Any:
    return a + b


_also_plus.__name__ = _also_plus.__qualname__ = "_plus"  # same name, another definition


async def user_ops_made_on_each_rank(comm: sc.Comm) -> list[Any]:
    # every rank makes its own op objects from the same definitions: they agree
    plus = sc.ReduceOp.custom(_plus)
    concat = sc.ReduceOp.custom(lambda a, b: a + b, commutative=False, name="concat")
    return [await comm.all_reduce(comm.rank, op=plus),
            await comm.all_reduce(str(comm.rank), op=concat),
            await comm.scan(comm.rank + 1, op=sc.ReduceOp.custom(_plus)),
            await comm.reduce(np.full(2, comm.rank), dst=1, op=sc.ReduceOp.custom(_plus))]


def test_user_ops_made_on_each_rank_from_one_function_agree(transport: str) -> None:
    got = list(_run(user_ops_made_on_each_rank, 3, transport))
    assert [g[:3] for g in got] == [[3, "012", 1], [3, "012", 3], [3, "012", 6]]
    assert got[0][3] is None and got[1][3].tolist() == [3, 3]


async def user_ops_of_two_functions(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(comm.rank, op=sc.ReduceOp.custom(_join if comm.rank else _plus))


def test_user_ops_of_two_functions_raise_naming_both(transport: str) -> None:
    error = _mismatch(user_ops_of_two_functions, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=_join): this is collective #1 on comm 'world', but "
                          "rank 0 called all_reduce(op=_plus); every rank must pass the same op")


async def user_ops_of_one_name(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(comm.rank, op=sc.ReduceOp.custom(_also_plus if comm.rank else _plus))


def test_user_ops_with_one_name_but_two_definitions_raise(transport: str) -> None:
    error = _mismatch(user_ops_of_one_name, 2, transport)
    line_plus = _plus.__code__.co_firstlineno
    line_also = _also_plus.__code__.co_firstlineno
    assert str(error) == (
        "rank 1: all_reduce(op=_plus): rank 0 passed op _plus defined at "
        f"test_coll_verification.py:{line_plus} but this rank passed op _plus defined at "
        f"test_coll_verification.py:{line_also}; every rank must pass an op made from the same function")


async def user_ops_commutative_or_not(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(comm.rank, op=sc.ReduceOp.custom(_plus, commutative=comm.rank == 0))


def test_a_user_op_commutative_on_one_rank_only_raises(transport: str) -> None:
    error = _mismatch(user_ops_commutative_or_not, 2, transport)
    line = _plus.__code__.co_firstlineno
    assert str(error) == (
        f"rank 1: all_reduce(op=_plus): rank 0 passed op _plus defined at test_coll_verification.py:{line} "
        f"but this rank passed op _plus defined at test_coll_verification.py:{line}, not commutative; "
        "every rank must pass an op made from the same function")


def _mpi_sum(invec: Any, inoutvec: Any, datatype: Any) -> None:
    out = np.frombuffer(inoutvec, dtype=np.float64)
    out += np.frombuffer(invec, dtype=np.float64)


def _mpi_max(invec: Any, inoutvec: Any, datatype: Any) -> None:
    out = np.frombuffer(inoutvec, dtype=np.float64)
    np.maximum(out, np.frombuffer(invec, dtype=np.float64), out=out)


def mpi_ops_created_on_each_rank(comm: MPI.Intracomm) -> list[float]:
    op = MPI.Op.Create(_mpi_sum, commute=True)  # each rank's own Op object
    buf = np.full(2, float(comm.Get_rank() + 1))
    comm.Allreduce(MPI.IN_PLACE, buf, op=op)
    op.Free()
    return buf.tolist()


def test_mpi_ops_created_on_each_rank_from_one_function_agree(transport: str) -> None:
    assert list(_run(mpi_ops_created_on_each_rank, 3, transport)) == [[6.0, 6.0]] * 3


def mpi_ops_of_two_functions(comm: MPI.Intracomm) -> None:
    time.sleep(float(comm.Get_rank()))  # virtual in a synchronous rank: rank 0 enters first
    op = MPI.Op.Create(_mpi_sum if comm.Get_rank() == 0 else _mpi_max, commute=True)
    buf = np.ones(2)
    comm.Allreduce(MPI.IN_PLACE, buf, op=op)


def test_mpi_ops_of_two_functions_raise(transport: str) -> None:
    with pytest.raises((sc.RankError, sc.CollectiveMismatchError)) as info:
        _run(mpi_ops_of_two_functions, 2, transport)
    error = info.value.__cause__ if isinstance(info.value, sc.RankError) else info.value
    assert isinstance(error, sc.CollectiveMismatchError)
    # the calls as the user wrote them, and the first rank's line (rank 0's process, on shm and tcp)
    line = inspect.getsourcelines(mpi_ops_of_two_functions)[1] + 4  # its Allreduce
    assert str(error) == ("rank 1: Allreduce(op=_mpi_max): this is collective #1 on comm "
                          "'MPI_COMM_WORLD', but rank 0 called Allreduce(op=_mpi_sum) at "
                          f"test_coll_verification.py:{line}; every rank must pass the same op")


# ---- call ----


async def barrier_against_all_gather(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    if comm.rank == 0:
        return await comm.barrier()
    return await comm.all_gather(comm.rank)


def test_another_collective_raises(transport: str) -> None:
    error = _mismatch(barrier_against_all_gather, 3, transport)
    assert (error.rank, error.op) == (1, "all_gather()")
    assert str(error) == ("rank 1: all_gather(): this is collective #1 on comm 'world', but rank 0 called "
                          "barrier(); every rank must call collectives in the same order")


async def one_collective_more(comm: sc.Comm) -> Any:
    await comm.all_reduce(1)
    if comm.rank == 1:
        await comm.sleep(1.0)  # rank 0 enters #2 first
        await comm.barrier()  # one call more than the others: its #2 meets their broadcast
    return await comm.broadcast(comm.rank, src=0)


def test_a_skipped_collective_is_caught_at_the_next_call(transport: str) -> None:
    error = _mismatch(one_collective_more, 2, transport)
    assert str(error) == ("rank 1: barrier(): this is collective #2 on comm 'world', but rank 0 called "
                          "broadcast(src=0); every rank must call collectives in the same order")


async def nonblocking_with_two_roots(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    req = comm.ibroadcast(comm.rank, src=0 if comm.rank == 0 else 1)
    return await req


def test_a_nonblocking_collective_is_verified_when_it_starts(transport: str) -> None:
    error = _mismatch(nonblocking_with_two_roots, 2, transport)
    assert str(error) == ("rank 1: broadcast(src=1): this is collective #1 on comm 'world', but rank 0 "
                          "called broadcast(src=0); every rank must pass the same src")


async def mismatch_on_a_split_comm(comm: sc.Comm) -> Any:
    sub = await comm.split(color=comm.rank % 2)
    assert sub is not None
    await _in_rank_order(comm)
    if sub.rank == 0:
        return await sub.barrier()
    return await sub.broadcast(comm.rank, src=0)


def test_a_mismatch_on_a_split_comm_names_that_comm(transport: str) -> None:
    with pytest.raises(sc.RankError) as info:
        _run(mismatch_on_a_split_comm, 4, transport)
    error = info.value.__cause__
    assert isinstance(error, sc.CollectiveMismatchError)
    assert info.value.rank in (2, 3)
    assert str(error) == (f"rank 1: broadcast(src=0): this is collective #1 on comm "
                          f"'split({info.value.rank % 2})', but rank 0 called barrier(); every rank "
                          "must call collectives in the same order")


# ---- count and dtype ----


async def all_reduce_of_two_lengths(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(np.ones(3 + comm.rank))


async def all_reduce_of_another_length_after_agreeing_calls(comm: sc.Comm) -> Any:
    # the first calls' setup is remembered on the comm; the last call is still compared
    for _ in range(2):
        await comm.all_reduce(np.ones(3))
        await comm.all_reduce(1.0)
    return await all_reduce_of_two_lengths(comm)


@pytest.mark.parametrize("program", [all_reduce_of_two_lengths, all_reduce_of_another_length_after_agreeing_calls])
def test_an_all_reduce_of_another_length_raises(transport: str, program: Any) -> None:
    error = _mismatch(program, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=SUM): rank 0 passed float64[3] but this rank passed "
                          "float64[4]; every rank must pass arrays of one shape and dtype")


async def forced_algorithm_after_the_default(comm: sc.Comm) -> Any:
    await comm.all_reduce(np.ones(4))
    await _in_rank_order(comm)
    return await comm.all_reduce(np.ones(4), algorithm="ring" if comm.rank == 1 else None)


def test_a_forced_algorithm_after_a_remembered_default_raises(transport: str) -> None:
    error = _mismatch(forced_algorithm_after_the_default, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=SUM): rank 0 runs collective #2 with algorithm "
                          "'recursive_doubling' but this rank chose 'ring'; pass the same algorithm= on "
                          "every rank")


async def all_reduce_of_two_dtypes(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(np.ones(3, dtype=np.float32 if comm.rank else np.float64))


def test_an_all_reduce_of_another_dtype_raises(transport: str) -> None:
    error = _mismatch(all_reduce_of_two_dtypes, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=SUM): rank 0 passed float64[3] but this rank passed "
                          "float32[3]; every rank must pass arrays of one shape and dtype")


async def all_reduce_of_an_array_and_a_number(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(np.ones(2) if comm.rank == 0 else 1.0)


def test_an_all_reduce_of_an_array_against_a_number_raises(transport: str) -> None:
    error = _mismatch(all_reduce_of_an_array_and_a_number, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=SUM): rank 0 passed float64[2] but this rank passed "
                          "an object; every rank must pass arrays of one shape and dtype")


async def reduce_and_scan_of_two_shapes(comm: sc.Comm, which: str) -> Any:
    await _in_rank_order(comm)
    x = np.zeros((2, 3) if comm.rank == 0 else (3, 2), dtype=np.int64)
    if which == "reduce":
        return await comm.reduce(x, dst=0)
    return await comm.scan(x)


@pytest.mark.parametrize("which", ["reduce", "scan"])
def test_reduce_and_scan_of_another_shape_raise(transport: str, which: str) -> None:
    error = _mismatch(reduce_and_scan_of_two_shapes, 2, transport, args=(which,))
    call = "reduce(dst=0, op=SUM)" if which == "reduce" else "scan(op=SUM)"
    assert str(error) == (f"rank 1: {call}: rank 0 passed int64[2, 3] but this rank passed int64[3, 2]; "
                          "every rank must pass arrays of one shape and dtype")


async def reduce_scatter_of_two_shapes(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.reduce_scatter([np.ones(2), np.ones(2 + comm.rank)])


def test_a_reduce_scatter_of_another_item_shape_raises(transport: str) -> None:
    error = _mismatch(reduce_scatter_of_two_shapes, 2, transport)
    assert str(error) == ("rank 1: reduce_scatter(op=SUM): rank 0 passed [float64[2], float64[2]] but "
                          "this rank passed [float64[2], float64[3]]; every rank must pass arrays of "
                          "one shape and dtype")


async def broadcast_buffers_of_two_shapes(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    if comm.rank == 0:
        return await comm.broadcast(None, src=1)  # no placeholder: nothing to compare
    return await comm.broadcast(np.zeros(2 + comm.rank), src=1)


@pytest.mark.parametrize("procs", [None, 2])
def test_a_broadcast_buffer_of_another_shape_raises(transport: str, procs: int | None) -> None:
    if transport == "memory" and procs is not None:
        pytest.skip("the memory transport hosts every rank in one process")
    error = _mismatch(broadcast_buffers_of_two_shapes, 3, transport, procs)
    assert str(error) == ("rank 2: broadcast(src=1): rank 1 passed float64[3] but this rank passed "
                          "float64[4]; every rank must pass arrays of one shape and dtype")


async def broadcast_placeholders(comm: sc.Comm, times: list[float], sizes: list[int | None],
                                 src: int) -> Any:
    await comm.sleep(times[comm.rank])
    size = sizes[comm.rank]
    return await comm.broadcast(None if size is None else np.zeros(size), src=src)


def test_broadcast_buffers_entering_together_after_a_placeholder_are_compared(transport: str) -> None:
    # rank 0 passes no placeholder; ranks 1 and 2 enter in the same round (one process each)
    error = _mismatch(broadcast_placeholders, 3, transport, args=([0.0] * 3, [None, 3, 4], 1))
    other = 3 - error.rank
    assert str(error) == (f"rank {error.rank}: broadcast(src=1): rank {other} passed float64[{other + 2}] "
                          f"but this rank passed float64[{error.rank + 2}]; every rank must pass "
                          "arrays of one shape and dtype")


def test_a_broadcast_buffer_is_compared_with_one_another_process_saw(transport: str) -> None:
    # rank 0 (a placeholder) and rank 2 (the root's array) enter together in two processes;
    # rank 1, in rank 0's process, enters later with another shape
    error = _mismatch(broadcast_placeholders, 4, transport, procs=2,
                      args=([0.0, 1.0, 0.0, 2.0], [None, 4, 3, None], 2))
    assert str(error) == ("rank 1: broadcast(src=2): rank 2 passed float64[3] but this rank passed "
                          "float64[4]; every rank must pass arrays of one shape and dtype")


# ---- algorithm ----


async def two_forced_algorithms(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.all_reduce(np.ones(4), algorithm="ring" if comm.rank == 0 else "recursive_doubling")


def test_two_forced_algorithms_raise(transport: str) -> None:
    error = _mismatch(two_forced_algorithms, 2, transport)
    assert str(error) == ("rank 1: all_reduce(op=SUM): rank 0 runs collective #1 with algorithm 'ring' "
                          "but this rank chose 'recursive_doubling'; pass the same algorithm= on "
                          "every rank")


async def forced_against_default(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.barrier(algorithm="tree" if comm.rank == 1 else None)


def test_a_forced_algorithm_against_the_default_raises(transport: str) -> None:
    error = _mismatch(forced_against_default, 2, transport)
    assert str(error) == ("rank 1: barrier(): rank 0 runs collective #1 with algorithm 'dissemination' "
                          "but this rank chose 'tree'; pass the same algorithm= on every rank")


async def forced_equal_to_the_default(comm: sc.Comm) -> Any:
    return await comm.barrier(algorithm="dissemination" if comm.rank == 1 else None)


def test_a_forced_algorithm_equal_to_the_default_agrees(transport: str) -> None:
    assert list(_run(forced_equal_to_the_default, 2, transport)) == [None, None]


async def large_broadcast_against_none(comm: sc.Comm) -> Any:
    await _in_rank_order(comm)
    return await comm.broadcast(np.zeros(8192) if comm.rank == 0 else None, src=0)


def test_a_large_broadcast_against_none_says_how_to_fix_it(transport: str) -> None:
    error = _mismatch(large_broadcast_against_none, 8, transport, procs=2)
    assert str(error) == ("rank 1: broadcast(src=0): rank 0 runs collective #1 with algorithm "
                          "'scatter_allgather' but this rank chose 'binomial'; pass the same kind of "
                          "payload (array or object) on every rank, or force algorithm=")


# ---- no false positives ----


async def legitimately_different(comm: sc.Comm) -> dict[str, Any]:
    rank, size = comm.rank, comm.size
    out: dict[str, Any] = {}
    out["all_gather"] = [a.shape for a in await comm.all_gather(np.zeros((rank + 1, 2)))]
    out["all_gather_obj"] = await comm.all_gather("x" * rank)
    out["gather"] = await comm.gather(list(range(rank * 100)), dst=1)
    objs = [list(range(i * 50)) for i in range(size)] if rank == 2 else None
    out["scatter"] = len(await comm.scatter(objs, src=2))
    arrays = [np.arange(i + 1.0) for i in range(size)] if rank == 0 else None
    buf = np.zeros(rank + 1)
    out["scatter_buf"] = (await comm.scatter(arrays, src=0, buf=buf)).tolist()
    out["all_to_all"] = await comm.all_to_all(["y" * (rank + j) for j in range(size)])
    out["broadcast"] = await comm.broadcast({"big": list(range(1000))} if rank == 0 else None, src=0)
    out["broadcast_arr"] = (await comm.broadcast(np.arange(3.0) if rank == 1 else None, src=1)).tolist()
    placeholder = np.arange(4.0) if rank == 2 else (np.empty(4) if rank == 0 else None)
    out["broadcast_mixed"] = (await comm.broadcast(placeholder, src=2)).tolist()
    out["all_reduce_objects"] = await comm.all_reduce(rank if rank % 2 else float(rank))
    out["irequests"] = [await r for r in [comm.iall_reduce(np.ones(2)), comm.ibarrier(),
                                          comm.iall_gather(rank)]][2]
    return out


def test_what_may_differ_per_rank_never_raises(transport: str) -> None:
    results = list(_run(legitimately_different, 3, transport, procs=2))
    for rank, out in enumerate(results):
        assert out["all_gather"] == [(1, 2), (2, 2), (3, 2)]
        assert out["all_gather_obj"] == ["", "x", "xx"]
        assert out["gather"] == ([list(range(r * 100)) for r in range(3)] if rank == 1 else None)
        assert out["scatter"] == rank * 50
        assert out["scatter_buf"] == list(np.arange(rank + 1.0))
        assert out["all_to_all"] == ["y" * (r + rank) for r in range(3)]
        assert out["broadcast"] == {"big": list(range(1000))}
        assert out["broadcast_arr"] == [0.0, 1.0, 2.0]
        assert out["broadcast_mixed"] == [0.0, 1.0, 2.0, 3.0]
        assert out["all_reduce_objects"] == 3.0
        assert out["irequests"] == [0, 1, 2]


async def many_calls_in_a_loop(comm: sc.Comm) -> int:
    total = 0
    for i in range(50):
        total += await comm.all_reduce(i, op=sc.ReduceOp.custom(_plus) if i % 2 else None)
        if i % 10 == 0:
            await comm.barrier()
    return total


def test_many_agreeing_calls_run_through(transport: str) -> None:
    assert list(_run(many_calls_in_a_loop, 4, transport, procs=2)) == [4 * sum(range(50))] * 4


# ---- analytic fidelity ----


def test_analytic_collectives_are_verified_at_the_call_too() -> None:
    error = _mismatch(broadcast_from_two_roots, 3, "memory", fidelity="analytic")
    assert str(error) == _two_roots_report(error)
    error = _mismatch(broadcast_from_two_roots_in_rank_order, 3, "memory", fidelity="analytic")
    assert str(error) == BROADCAST_ROOTS
    error = _mismatch(all_reduce_of_two_lengths, 2, "memory", fidelity="analytic")
    assert str(error) == ("rank 1: all_reduce(op=SUM): rank 0 passed float64[3] but this rank passed "
                          "float64[4]; every rank must pass arrays of one shape and dtype")
    error = _mismatch(user_ops_of_two_functions, 2, "memory", fidelity="analytic")
    assert "but rank 0 called all_reduce(op=_plus)" in str(error)
    assert list(_run(user_ops_made_on_each_rank, 3, "memory", fidelity="analytic"))[2][:3] == [3, "012", 6]
