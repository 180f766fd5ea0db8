"""Collectives through ``simcluster.MPI`` from synchronous ranks, on every transport.

The behaviours of the test_coll_*.py files, called the way mpi4py code calls
them: the lowercase methods on Python objects (pickled) and the uppercase
methods on buffers with mpi4py's buffer specs, every root, ``IN_PLACE``, the
``v`` forms, the ``I`` forms with ``Wait``/``Waitall``, every op on every
datatype MPI defines it for, and virtual times equal to those of the same
collective called from an async rank. Rank functions are module-level so that
the shm and tcp transports' hosting processes import them by name.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI
from simcluster.collectives import all_reduce
from mpi_helpers import ALPHA, BETA, DTYPES, WORLD_SIZES, kw, mpi_errors, sentinel, values

# ---- lowercase: Python objects ----


def concat(x: Any, y: Any) -> Any:
    """A plain function as op: MPI applies it in rank order (``x`` from the lower ranks)."""
    return x + y


def _created_concat(x: Any, y: Any, datatype: Any) -> Any:
    return x + y


CREATED_CONCAT = MPI.Op.Create(_created_concat, commute=False)

OBJECTS: list[Any] = [None, True, 2**70, -1.5, 2j, "s", b"b", [1, "x"], (1, None), {"k": [1.0]}, {3, 4},
                      np.arange(3.0), np.zeros((0, 2), dtype=np.int32)]


def _obj(*key: int) -> Any:
    return OBJECTS[sum(k * 7**i for i, k in enumerate(key)) % len(OBJECTS)]


def object_collectives(comm: MPI.Intracomm) -> dict[str, Any]:
    rank, size = comm.Get_rank(), comm.Get_size()
    out: dict[str, Any] = {}
    out["bcast"] = [comm.bcast(_obj(root) if rank == root else None, root=root) for root in range(size)]
    out["scatter"] = [comm.scatter([_obj(root, i) for i in range(size)] if rank == root else None, root=root)
                      for root in range(size)]
    out["gather"] = [comm.gather(_obj(rank, root), root=root) for root in range(size)]
    out["reduce"] = [comm.reduce(rank + root, op=MPI.SUM, root=root) for root in range(size)]
    out["reduce_concat"] = [comm.reduce(f"{rank},", op=concat, root=root) for root in range(size)]
    out["allgather"] = comm.allgather(_obj(rank, 1))
    out["alltoall"] = comm.alltoall([(rank, j) for j in range(size)])
    out["allreduce"] = [comm.allreduce(rank + 1), comm.allreduce(rank * 0.5, op=MPI.MAX),
                        comm.allreduce(rank % 3 != 2, op=MPI.LAND), comm.allreduce(f"{rank},", op=concat),
                        comm.allreduce([rank], op=CREATED_CONCAT),
                        comm.allreduce((rank * 7 % 5, rank), op=MPI.MAXLOC),
                        comm.allreduce(np.full(2, rank), op=MPI.SUM)]
    out["scan"] = [comm.scan(rank + 1), comm.scan(f"{rank},", op=concat), comm.scan(rank + 1, op=MPI.PROD)]
    out["exscan"] = [comm.exscan(rank + 1), comm.exscan(f"{rank},", op=concat)]
    comm.barrier()
    return out


def _maxloc(pairs: list[tuple[int, int]]) -> tuple[int, int]:
    best = max(v for v, _ in pairs)
    return best, min(i for v, i in pairs if v == best)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_object_collectives_from_every_root(transport: str, world_size: int) -> None:
    result = sc.run(object_collectives, world_size, **kw(transport))
    p = world_size
    words = [f"{r}," for r in range(p)]
    for rank, got in enumerate(result):
        assert set(got) == {"bcast", "scatter", "gather", "reduce", "reduce_concat", "allgather", "alltoall",
                            "allreduce", "scan", "exscan"}
        assert [repr(x) for x in got["bcast"]] == [repr(_obj(root)) for root in range(p)]
        assert [repr(x) for x in got["scatter"]] == [repr(_obj(root, rank)) for root in range(p)]
        for root, gathered in enumerate(got["gather"]):
            want = [repr(_obj(r, root)) for r in range(p)] if rank == root else None
            assert (None if gathered is None else [repr(x) for x in gathered]) == want
        assert got["reduce"] == [sum(range(p)) + p * root if rank == root else None for root in range(p)]
        assert got["reduce_concat"] == ["".join(words) if rank == root else None for root in range(p)]
        assert [repr(x) for x in got["allgather"]] == [repr(_obj(r, 1)) for r in range(p)]
        assert got["alltoall"] == [(r, rank) for r in range(p)]
        total, top, every, line, listed, loc, arr = got["allreduce"]
        assert (total, top, every, line, listed) == (
            p * (p + 1) // 2, (p - 1) * 0.5, all(r % 3 != 2 for r in range(p)), "".join(words),
            list(range(p)))
        assert loc == _maxloc([(r * 7 % 5, r) for r in range(p)])
        np.testing.assert_array_equal(arr, np.full(2, sum(range(p))))
        assert got["scan"] == [(rank + 1) * (rank + 2) // 2, "".join(words[:rank + 1]),
                               math.factorial(rank + 1)]
        assert got["exscan"] == ([None, None] if rank == 0 else
                                 [rank * (rank + 1) // 2, "".join(words[:rank])])


def object_collective_copies(comm: MPI.Intracomm) -> Any:
    smsg = {"list": [1, 2]}
    got = comm.bcast(smsg, root=0)
    fresh = got is not smsg  # every rank, the root too, gets a fresh object (as mpi4py)
    got["list"].append(3)
    items = [[i] for i in range(comm.Get_size())] if comm.Get_rank() == 0 else None
    mine = comm.scatter(items, root=0)
    mine.append(-1)
    return fresh, smsg, items


def test_object_collectives_return_fresh_objects(transport: str) -> None:
    result = sc.run(object_collective_copies, 3, **kw(transport))
    assert list(result) == [(True, {"list": [1, 2]}, [[0], [1], [2]]),
                            (True, {"list": [1, 2]}, None), (True, {"list": [1, 2]}, None)]


# ---- uppercase: buffers ----

OPS: dict[str, list[str]] = {
    "int32": ["SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"],
    "float64": ["SUM", "PROD", "MIN", "MAX"],
    "complex128": ["SUM", "PROD"],
    "bool": ["LAND", "LOR", "LXOR"],
}
"""The predefined ops MPI defines for each datatype (C integer, floating point, complex, logical)."""

UFUNCS: dict[str, np.ufunc] = {
    "SUM": np.add, "PROD": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
    "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
    "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor,
}
N = 3
"""Items per block."""


def operand(kind: str, rank: int, n: int = N) -> np.ndarray:
    """A reduction operand small enough that every op's result is exact in the dtype."""
    i = np.arange(n)
    if kind == "int32":
        return ((i * 5 + rank * 3) % 7 - 3).astype(np.int32)
    if kind == "float64":
        return ((i * 3 + rank) % 5 - 2) * 0.5
    if kind == "complex128":
        return (((i + rank) % 3 - 1) + 1j * ((i * 2 + rank) % 3 - 1)).astype(np.complex128)
    return (i + rank) % 3 == 0


def reduced(kind: str, op: str, ranks: range, n: int = N) -> np.ndarray:
    """``x0 op x1 op ...`` over the operands of ``ranks``, in rank order (one operand: itself, as MPI)."""
    dtype = DTYPES[kind][0]
    return functools.reduce(lambda x, y: UFUNCS[op](x, y).astype(dtype), [operand(kind, r, n) for r in ranks])


def vcounts(size: int) -> list[int]:
    """Counts per rank for the v forms: some 0."""
    return [(r * 2 + 1) % 3 for r in range(size)]


def vdispls(counts: list[int]) -> list[int]:
    """Displacements that lay the blocks out in reverse rank order, with a gap of one item."""
    displs, at = [0] * len(counts), 0
    for r in reversed(range(len(counts))):
        displs[r] = at
        at += counts[r] + 1
    return displs


def buffer_collectives(comm: MPI.Intracomm, kind: str) -> dict[str, Any]:
    dtype, dt = DTYPES[kind]
    rank, size = comm.Get_rank(), comm.Get_size()
    fill = sentinel(kind)
    out: dict[str, Any] = {}

    def full(n: int) -> np.ndarray:
        return np.full(n, fill, dtype)

    for root in range(size):
        # Bcast
        buf = values(kind, N, root) if rank == root else full(N)
        comm.Bcast([buf, dt] if root % 2 else buf, root=root)
        out[f"Bcast {root}"] = buf
        # Scatter, and Scatter with IN_PLACE at the root
        send = np.concatenate([values(kind, N, 10 * root + i) for i in range(size)]) if rank == root else None
        recv = full(N)
        comm.Scatter([send, N, dt] if rank == root else None, [recv, dt], root=root)
        out[f"Scatter {root}"] = recv
        recv = full(N)
        comm.Scatter(send, MPI.IN_PLACE if rank == root else recv, root=root)
        out[f"Scatter in place {root}"] = recv
        # Scatterv: blocks of different sizes, laid out in reverse order
        counts = vcounts(size)
        displs = vdispls(counts)
        vsend = None
        if rank == root:
            vsend = full(sum(counts) + size)
            for r in range(size):
                vsend[displs[r]:displs[r] + counts[r]] = values(kind, counts[r], 10 * root + r)
        recv = full(counts[rank])
        comm.Scatterv([vsend, (counts, displs), dt] if rank == root else None, [recv, dt], root=root)
        out[f"Scatterv {root}"] = recv
        # Gather, Gather with IN_PLACE, Gatherv
        gathered = full(N * size) if rank == root else None
        comm.Gather(values(kind, N, 10 * root + rank), [gathered, dt] if rank == root else None, root=root)
        out[f"Gather {root}"] = gathered
        gathered = full(N * size) if rank == root else None
        if rank == root:
            assert gathered is not None
            gathered[N * rank:N * (rank + 1)] = values(kind, N, 10 * root + rank)
            comm.Gather(MPI.IN_PLACE, gathered, root=root)
        else:
            comm.Gather(values(kind, N, 10 * root + rank), None, root=root)
        out[f"Gather in place {root}"] = gathered
        vgathered = full(sum(counts) + size) if rank == root else None
        comm.Gatherv(values(kind, counts[rank], 10 * root + rank),
                     [vgathered, (counts, displs), dt] if rank == root else None, root=root)
        out[f"Gatherv {root}"] = vgathered
        # Reduce with every op, and IN_PLACE at the root
        for op in OPS[kind]:
            recv = full(N) if rank == root else None
            comm.Reduce([operand(kind, rank), dt], [recv, dt] if rank == root else None, op=getattr(MPI, op),
                        root=root)
            out[f"Reduce {op} {root}"] = recv
        recv = operand(kind, rank)
        comm.Reduce(MPI.IN_PLACE if rank == root else recv, recv if rank == root else None,
                    op=getattr(MPI, OPS[kind][0]), root=root)
        out[f"Reduce in place {root}"] = recv if rank == root else None

    # Allgather, in place, Allgatherv
    recv = full(N * size)
    comm.Allgather([values(kind, N, rank), dt], [recv, dt])
    out["Allgather"] = recv
    recv = full(N * size)
    recv[N * rank:N * (rank + 1)] = values(kind, N, rank)
    comm.Allgather(MPI.IN_PLACE, [recv, N, dt])
    out["Allgather in place"] = recv
    counts = vcounts(size)
    displs = vdispls(counts)
    recv = full(sum(counts) + size)
    comm.Allgatherv(values(kind, counts[rank], rank), [recv, (counts, displs), dt])
    out["Allgatherv"] = recv
    # Alltoall, in place, Alltoallv: rank r sends (r + j) % 3 items to rank j
    send = np.concatenate([values(kind, N, 10 * rank + j) for j in range(size)])
    recv = full(N * size)
    comm.Alltoall([send, dt], [recv, dt])
    out["Alltoall"] = recv
    inplace = send.copy()
    comm.Alltoall(MPI.IN_PLACE, inplace)
    out["Alltoall in place"] = inplace
    scounts = [(rank + j) % 3 for j in range(size)]
    rcounts = [(r + rank) % 3 for r in range(size)]
    sdispls = [sum(scounts[:j]) for j in range(size)]
    rdispls = vdispls(rcounts)
    vsend = np.concatenate([values(kind, scounts[j], 10 * rank + j) for j in range(size)])
    recv = full(sum(rcounts) + size)
    comm.Alltoallv([vsend, (scounts, sdispls), dt], [recv, (rcounts, rdispls), dt])
    out["Alltoallv"] = recv
    # Allreduce, Scan, Exscan with every op; Allreduce in place
    for op in OPS[kind]:
        mpi_op = getattr(MPI, op)
        for name in ("Allreduce", "Scan", "Exscan"):
            recv = full(N)
            getattr(comm, name)([operand(kind, rank), dt], [recv, dt], op=mpi_op)
            out[f"{name} {op}"] = recv
    recv = operand(kind, rank)
    comm.Allreduce(MPI.IN_PLACE, [recv, dt], op=getattr(MPI, OPS[kind][-1]))
    out["Allreduce in place"] = recv
    # Reduce_scatter_block, Reduce_scatter with and without recvcounts
    op = getattr(MPI, OPS[kind][0])
    recv = full(N)
    comm.Reduce_scatter_block([operand(kind, rank, N * size), dt], [recv, dt], op=op)
    out["Reduce_scatter_block"] = recv
    recv = full(counts[rank])
    comm.Reduce_scatter(operand(kind, rank, sum(counts)), recv, counts, op=op)
    out["Reduce_scatter"] = recv
    recv = full(counts[rank])
    comm.Reduce_scatter(operand(kind, rank, sum(counts)), [recv, dt], op=op)
    out["Reduce_scatter gathered counts"] = recv
    # empty buffers
    empty = np.zeros(0, dtype)
    comm.Bcast(empty, root=size - 1)
    comm.Allreduce(empty, np.zeros(0, dtype), op=op)
    comm.Allgather(empty, np.zeros(0, dtype))
    comm.Alltoall(empty, np.zeros(0, dtype))
    comm.Barrier()
    out["Wtime"] = MPI.Wtime()
    return out


def expected_buffer_collectives(kind: str, size: int, rank: int) -> dict[str, Any]:
    """What ``buffer_collectives`` must return on ``rank``, worked out with numpy alone."""
    dtype, _ = DTYPES[kind]
    fill = sentinel(kind)

    def full(n: int) -> np.ndarray:
        return np.full(n, fill, dtype)

    out: dict[str, Any] = {}
    counts = vcounts(size)
    displs = vdispls(counts)

    def laid_out(blocks: list[np.ndarray], starts: list[int], n: int) -> np.ndarray:
        buf = full(n)
        for block, at in zip(blocks, starts):
            buf[at:at + block.size] = block
        return buf

    everyone = range(size)
    for root in everyone:
        out[f"Bcast {root}"] = values(kind, N, root)
        out[f"Scatter {root}"] = values(kind, N, 10 * root + rank)
        out[f"Scatter in place {root}"] = full(N) if rank == root else values(kind, N, 10 * root + rank)
        out[f"Scatterv {root}"] = values(kind, counts[rank], 10 * root + rank)
        gathered = np.concatenate([values(kind, N, 10 * root + r) for r in everyone])
        out[f"Gather {root}"] = gathered if rank == root else None
        out[f"Gather in place {root}"] = gathered if rank == root else None
        out[f"Gatherv {root}"] = laid_out([values(kind, counts[r], 10 * root + r) for r in everyone], displs,
                                          sum(counts) + size) if rank == root else None
        for op in OPS[kind]:
            out[f"Reduce {op} {root}"] = reduced(kind, op, everyone) if rank == root else None
        out[f"Reduce in place {root}"] = reduced(kind, OPS[kind][0], everyone) if rank == root else None
    allgathered = np.concatenate([values(kind, N, r) for r in everyone])
    out["Allgather"] = out["Allgather in place"] = allgathered
    out["Allgatherv"] = laid_out([values(kind, counts[r], r) for r in everyone], displs, sum(counts) + size)
    out["Alltoall"] = out["Alltoall in place"] = np.concatenate(
        [values(kind, N, 10 * r + rank) for r in everyone])
    rcounts = [(r + rank) % 3 for r in everyone]
    out["Alltoallv"] = laid_out([values(kind, rcounts[r], 10 * r + rank) for r in everyone], vdispls(rcounts),
                                sum(rcounts) + size)
    for op in OPS[kind]:
        out[f"Allreduce {op}"] = reduced(kind, op, everyone)
        out[f"Scan {op}"] = reduced(kind, op, range(rank + 1))
        out[f"Exscan {op}"] = reduced(kind, op, range(rank)) if rank else None  # rank 0's is undefined
    out["Allreduce in place"] = reduced(kind, OPS[kind][-1], everyone)
    first = OPS[kind][0]
    out["Reduce_scatter_block"] = reduced(kind, first, everyone, N * size)[N * rank:N * (rank + 1)]
    start = sum(counts[:rank])
    out["Reduce_scatter"] = out["Reduce_scatter gathered counts"] = \
        reduced(kind, first, everyone, sum(counts))[start:start + counts[rank]]
    out["Wtime"] = 0.0
    return out


@pytest.mark.parametrize("kind", sorted(DTYPES))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_buffer_collectives_every_root_op_and_layout(transport: str, world_size: int, kind: str) -> None:
    dtype, _ = DTYPES[kind]
    result = sc.run(buffer_collectives, world_size, args=(kind,), transport=transport)
    for rank, got in enumerate(result):
        expected = expected_buffer_collectives(kind, world_size, rank)
        assert sorted(got) == sorted(expected)
        for key, want in expected.items():
            if want is None:
                if not key.startswith("Exscan"):
                    assert got[key] is None, (rank, key)
                continue
            if isinstance(want, float):
                assert got[key] == want, (rank, key)
                continue
            assert isinstance(got[key], np.ndarray) and got[key].dtype == dtype, (rank, key)
            assert got[key].shape == want.shape, (rank, key)
            assert np.array_equal(got[key], want), (rank, key, got[key], want)


def v_specs(comm: MPI.Intracomm) -> dict[str, Any]:
    rank, size = comm.Get_rank(), comm.Get_size()
    counts = [r % 3 + 1 for r in range(size)]
    displs = vdispls(counts)
    mine = np.full(counts[rank], float(rank))
    out: dict[str, Any] = {}
    recv = np.full(sum(counts), -1.0)
    comm.Allgatherv(mine, [recv, counts, MPI.DOUBLE])  # a list is the counts (a tuple: counts, displs)
    out["list"] = recv
    recv = np.full(sum(counts) + size, -1.0)
    comm.Allgatherv(mine, [recv, (counts, displs)])
    out["pair"] = recv
    recv = np.full(sum(counts) + size, -1.0)
    comm.Allgatherv([mine, MPI.DOUBLE], [recv, counts, displs, MPI.DOUBLE])
    out["four"] = recv
    recv = np.full(3 * size, -1.0)
    comm.Allgatherv(np.full(2, float(rank)), [recv, 2, 3, MPI.DOUBLE])  # int count; int displ: a stride
    out["stride"] = recv
    total = 2 * size + 1  # not a multiple of the size: the first ranks get one item more
    inferred = [total // size + (r < total % size) for r in range(size)]
    recv = np.full(inferred[rank], -1.0)
    comm.Scatterv(np.arange(float(total)) if rank == 0 else None, recv, root=0)
    out["inferred"] = recv
    gathered = np.full(sum(counts), -1.0) if rank == size - 1 else None
    comm.Gatherv(mine, [gathered, counts, MPI.DOUBLE] if rank == size - 1 else None, root=size - 1)
    out["Gatherv list"] = gathered
    scounts = [(rank + j) % 2 + 1 for j in range(size)]
    rcounts = [(r + rank) % 2 + 1 for r in range(size)]
    send = np.concatenate([np.full(scounts[j], 10.0 * rank + j) for j in range(size)])
    recv = np.full(sum(rcounts), -1.0)
    comm.Alltoallv([send, scounts, MPI.DOUBLE], [recv, rcounts, MPI.DOUBLE])
    out["Alltoallv list"] = recv
    return out


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_v_specs_take_counts_as_mpi4py_does(transport: str, world_size: int) -> None:
    p = world_size
    counts = [r % 3 + 1 for r in range(p)]
    packed = np.concatenate([np.full(c, float(r)) for r, c in enumerate(counts)])
    laid_out = np.full(sum(counts) + p, -1.0)
    for r, at in enumerate(vdispls(counts)):
        laid_out[at:at + counts[r]] = float(r)
    strided = np.full(3 * p, -1.0)
    for r in range(p):
        strided[3 * r:3 * r + 2] = float(r)
    total = 2 * p + 1
    starts = np.cumsum([0] + [total // p + (r < total % p) for r in range(p)])
    for rank, got in enumerate(sc.run(v_specs, world_size, transport=transport)):
        rcounts = [(r + rank) % 2 + 1 for r in range(p)]
        expected = {
            "list": packed, "pair": laid_out, "four": laid_out, "stride": strided,
            "inferred": np.arange(float(starts[rank]), float(starts[rank + 1])),
            "Gatherv list": packed if rank == p - 1 else None,
            "Alltoallv list": np.concatenate([np.full(rcounts[r], 10.0 * r + rank) for r in range(p)]),
        }
        assert sorted(got) == sorted(expected)
        for key, want in expected.items():
            if want is None:
                assert got[key] is None, (rank, key)
            else:
                np.testing.assert_array_equal(got[key], want, err_msg=f"rank {rank}: {key}")


def none_is_in_place(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    summed = np.full(2, float(rank + 1))
    comm.Allreduce(None, summed)  # mpi4py: None is IN_PLACE
    everyone = np.full(size, -1.0)
    everyone[rank] = float(rank)
    comm.Allgather(None, everyone)
    gathered = np.full(size, -1.0) if rank == 0 else None
    if gathered is not None:
        gathered[0] = 100.0
    comm.Gather(None if rank == 0 else np.array([float(rank)]), gathered, root=0)
    scattered = np.full(1, -1.0)
    comm.Scatter(np.arange(float(size)) * 10 if rank == 0 else None, None if rank == 0 else scattered, root=0)
    return (summed.tolist(), everyone.tolist(), None if gathered is None else gathered.tolist(),
            scattered.tolist())


@pytest.mark.parametrize("world_size", [1, 3])
def test_none_as_send_buffer_is_in_place(transport: str, world_size: int) -> None:
    p = world_size
    result = sc.run(none_is_in_place, world_size, transport=transport)
    for rank, got in enumerate(result):
        assert got == ([float(p * (p + 1) // 2)] * 2, [float(r) for r in range(p)],
                       [100.0] + [float(r) for r in range(1, p)] if rank == 0 else None,
                       [-1.0] if rank == 0 else [10.0 * rank])


def zero_count_messages(comm: MPI.Intracomm) -> Any:
    null_b, null_v = [None, MPI.INT], [None, (0, None), MPI.INT]  # mpi4py's empty messages
    rank = comm.Get_rank()
    status = MPI.Status()
    comm.Sendrecv(sendbuf=null_b, dest=rank, recvbuf=null_b, source=rank, status=status)
    reqs = [comm.Irecv(null_b, rank), comm.Isend(null_b, rank)]
    MPI.Request.Waitall(reqs)
    comm.Bcast(null_b)
    comm.Gather(null_b, null_b)
    comm.Scatter(null_b, null_b)
    comm.Allgather(null_b, null_b)
    comm.Alltoall(null_b, null_b)
    comm.Gatherv(null_b, null_v)
    comm.Scatterv(null_v, null_b)
    comm.Allgatherv(null_b, null_v)
    comm.Alltoallv(null_v, null_v)
    comm.Reduce(null_b, null_b)
    comm.Allreduce(null_b, null_b)
    comm.Reduce_scatter_block(null_b, null_b)
    comm.Scan(null_b, null_b)
    comm.Exscan(null_b, null_b)
    try:
        comm.Send([None, 3, MPI.INT], dest=rank)
    except ValueError as exc:
        error = str(exc)
    return status.Get_source(), status.Get_count(MPI.INT), error, MPI.Wtime()


@pytest.mark.parametrize("world_size", [1, 4])
def test_none_with_a_datatype_is_an_empty_message(transport: str, world_size: int) -> None:
    result = sc.run(zero_count_messages, world_size, transport=transport)
    for rank, got in enumerate(result):
        assert got == (rank, 0, f"rank {rank}: Send(dest={rank}, tag=0): 3 items of MPI_INT from item 0 do "
                                "not fit in the buffer None; pass a smaller count or a larger buffer", 0.0)


# ---- nonblocking ----


def nonblocking_collectives(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    bcast = np.arange(4, dtype=np.int32) if rank == 0 else np.zeros(4, dtype=np.int32)
    summed = np.zeros(2)
    gathered = np.zeros(2 * size) if rank == size - 1 else None
    allgathered = np.zeros(size, dtype=np.int32)
    swapped = np.zeros(size, dtype=np.int32)
    scattered = np.zeros(1, dtype=np.int32)
    reduced_ = np.zeros(2) if rank == 0 else None
    scanned, exscanned = np.zeros(1, dtype=np.int32), np.full(1, -1, dtype=np.int32)
    block = np.zeros(2)
    reqs = [
        comm.Ibcast([bcast, MPI.INT], root=0),
        comm.Iallreduce(np.full(2, float(rank)), summed, op=MPI.SUM),
        comm.Igather(np.full(2, float(rank)), gathered, root=size - 1),
        comm.Iallgather(np.array([rank], dtype=np.int32), allgathered),
        comm.Ialltoall(np.arange(size, dtype=np.int32) + 10 * rank, swapped),
        comm.Iscatter(np.arange(size, dtype=np.int32) * 3 if rank == 1 % size else None, scattered,
                      root=1 % size),
        comm.Ireduce(np.full(2, float(rank + 1)), reduced_, op=MPI.PROD, root=0),
        comm.Iscan(np.array([rank + 1], dtype=np.int32), scanned),
        comm.Iexscan(np.array([rank + 1], dtype=np.int32), exscanned, op=MPI.SUM),
        comm.Ireduce_scatter_block(np.ones(2 * size), block),
        comm.Ibarrier(),
    ]
    untouched = summed.tolist()  # nothing is written before the collective completes
    first = MPI.Request.Waitany(reqs)
    done = MPI.Request.Waitall(reqs)
    return (untouched, done, [bool(r) for r in reqs], bcast.tolist(), summed.tolist(),
            None if gathered is None else gathered.tolist(), allgathered.tolist(), swapped.tolist(),
            int(scattered[0]), None if reduced_ is None else reduced_.tolist(), int(scanned[0]),
            int(exscanned[0]), block.tolist(), first in range(len(reqs)))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_i_collectives_outstanding_at_once_complete_with_waitall(transport: str, world_size: int) -> None:
    result = sc.run(nonblocking_collectives, world_size, transport=transport)
    p = world_size
    for rank, got in enumerate(result):
        assert got == (
            [0.0, 0.0], True, [False] * 11, [0, 1, 2, 3], [float(sum(range(p)))] * 2,
            [float(r) for r in range(p) for _ in range(2)] if rank == p - 1 else None,
            list(range(p)), [10 * r + rank for r in range(p)], 3 * rank,
            [float(math.factorial(p))] * 2 if rank == 0 else None, (rank + 1) * (rank + 2) // 2,
            rank * (rank + 1) // 2 if rank else -1, [float(p)] * 2, True)


def wait_each(comm: MPI.Intracomm) -> Any:
    buf = np.full(3, float(comm.Get_rank()))
    req = comm.Iallreduce(MPI.IN_PLACE, buf)
    done = req.Wait()
    again = buf.copy()
    status = MPI.Status()
    second = req.Wait(status)  # a completed request is REQUEST_NULL: Wait returns at once
    return done, again.tolist(), bool(req), second, buf.tolist()


def test_wait_on_each_i_collective_request(transport: str) -> None:
    result = sc.run(wait_each, 4, transport=transport)
    assert list(result) == [(True, [6.0] * 3, False, True, [6.0] * 3)] * 4


# ---- virtual time: the same as from an async rank ----


def timed_allreduce(comm: MPI.Intracomm, n: int) -> float:
    send, recv = np.ones(n // 8), np.empty(n // 8)
    comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE], op=MPI.SUM)
    assert float(recv[0]) == comm.Get_size()
    return MPI.Wtime()


async def timed_all_reduce_async(comm: sc.Comm, n: int) -> float:
    await comm.all_reduce(np.ones(n // 8))
    return comm.now


@pytest.mark.parametrize("world_size", [2, 3, 8])
@pytest.mark.parametrize("algorithm", sorted(all_reduce.ALGORITHMS))
def test_allreduce_time_equals_async_all_reduce_time(transport: str, algorithm: str, world_size: int) -> None:
    n = 8 * 1024 * world_size
    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    sync = sc.run(timed_allreduce, world_size, args=(n,), latency=lat, transport=transport,
                  algorithms={"all_reduce": algorithm})
    ref = sc.run(timed_all_reduce_async, world_size, args=(n,), latency=lat, transport=transport,
                 algorithms={"all_reduce": algorithm})
    assert sync.times == ref.times == list(sync)
    assert sync.stats == ref.stats
    if algorithm == "ring":
        expected = 2 * (world_size - 1) * (ALPHA + n / world_size * BETA)
        for t in sync.times:
            assert math.isclose(t, expected, rel_tol=1e-9, abs_tol=0.0)


def timed_collective(comm: MPI.Intracomm, name: str, n: int) -> float:
    rank, size = comm.Get_rank(), comm.Get_size()
    k = n // 8
    root = size // 2
    if name == "Bcast":
        comm.Bcast(np.ones(k), root=root)
    elif name == "Reduce":
        comm.Reduce(np.ones(k), np.empty(k) if rank == root else None, op=MPI.MAX, root=root)
    elif name == "Scatter":
        comm.Scatter(np.ones(k * size) if rank == root else None, np.empty(k), root=root)
    elif name == "Gather":
        comm.Gather(np.ones(k), np.empty(k * size) if rank == root else None, root=root)
    elif name == "Allgather":
        comm.Allgather(np.ones(k), np.empty(k * size))
    elif name == "Alltoall":
        comm.Alltoall(np.ones(k * size), np.empty(k * size))
    elif name == "Reduce_scatter_block":
        comm.Reduce_scatter_block(np.ones(k * size), np.empty(k))
    elif name == "Scan":
        comm.Scan(np.ones(k), np.empty(k))
    elif name == "Exscan":
        comm.Exscan(np.ones(k), np.empty(k))
    else:
        comm.Barrier()
    return MPI.Wtime()


async def timed_collective_async(comm: sc.Comm, name: str, n: int) -> float:
    size, k, root = comm.size, n // 8, comm.size // 2
    if name == "Bcast":
        await comm.broadcast(np.ones(k), src=root)
    elif name == "Reduce":
        await comm.reduce(np.ones(k), root, op="max")
    elif name == "Scatter":
        await comm.scatter([np.ones(k) for _ in range(size)] if comm.rank == root else None, src=root)
    elif name == "Gather":
        await comm.gather(np.ones(k), dst=root)
    elif name == "Allgather":
        await comm.all_gather(np.ones(k))
    elif name == "Alltoall":
        await comm.all_to_all([np.ones(k) for _ in range(size)])
    elif name == "Reduce_scatter_block":
        await comm.reduce_scatter([np.ones(k) for _ in range(size)])
    elif name == "Scan":
        await comm.scan(np.ones(k))
    elif name == "Exscan":
        await comm.exscan(np.ones(k))
    else:
        await comm.barrier()
    return comm.now


TIMED = ["Bcast", "Reduce", "Scatter", "Gather", "Allgather", "Alltoall", "Reduce_scatter_block", "Scan",
         "Exscan", "Barrier"]


@pytest.mark.parametrize("world_size", [1, 3, 8])
@pytest.mark.parametrize("name", TIMED)
def test_buffer_collective_times_equal_the_async_ones(transport: str, name: str, world_size: int) -> None:
    lat = sc.latency.AlphaBeta(ALPHA, BETA)
    for n in (8 * 64, 8 * 12_000):  # eager and rendezvous
        sync = sc.run(timed_collective, world_size, args=(name, n), latency=lat, transport=transport)
        ref = sc.run(timed_collective_async, world_size, args=(name, n), latency=lat, transport=transport)
        assert sync.times == ref.times == list(sync), n
        assert sync.stats == ref.stats, n
        if world_size == 1:
            assert sync.times == [0.0]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_barrier_costs_ceil_log2_p_alphas(transport: str, world_size: int) -> None:
    result = sc.run(timed_collective, world_size, args=("Barrier", 0), transport=transport,
                    latency=sc.latency.AlphaBeta(ALPHA, BETA))
    expected = math.ceil(math.log2(world_size)) * ALPHA
    assert list(result) == result.times
    for t in result.times:
        assert math.isclose(t, expected, rel_tol=1e-12, abs_tol=0.0)


def late_barrier(comm: MPI.Intracomm, lower: bool) -> float:
    if comm.Get_rank() == comm.Get_size() // 2:
        time.sleep(5.0)  # virtual
    if lower:
        comm.barrier()
    else:
        comm.Barrier()
    return MPI.Wtime()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_barrier_waits_for_the_last_rank_to_arrive(transport: str, world_size: int) -> None:
    for lower in (False, True):
        result = sc.run(late_barrier, world_size, args=(lower,), transport=transport)
        assert list(result) == result.times == [5.0] * world_size


# ---- determinism ----


def mixed_collectives(comm: MPI.Intracomm) -> Any:
    rank, size = comm.Get_rank(), comm.Get_size()
    buf = np.arange(4000.0) + rank
    comm.Allreduce(MPI.IN_PLACE, buf)
    out = np.empty(4000 * size)
    comm.Allgather(buf, out)
    comm.Bcast(buf, root=size - 1)
    word = comm.allreduce(f"{rank},", op=concat)
    return float(buf.sum()), float(out.sum()), word, MPI.Wtime()


def test_same_seed_gives_the_same_results_and_times(transport: str) -> None:
    lat = sc.latency.Jitter(sc.latency.AlphaBeta(ALPHA, BETA), rel=0.5)
    for seed in (0, 1):
        first = sc.run(mixed_collectives, 5, seed=seed, latency=lat, **kw(transport))
        again = sc.run(mixed_collectives, 5, seed=seed, latency=lat, **kw(transport))
        assert list(first) == list(again)
        assert first.times == again.times
        assert [t for *_, t in first] == first.times
        expected_sum = float(sum(np.arange(4000.0) * 5 + 10))
        assert all(got[:3] == (expected_sum, expected_sum * 5, "0,1,2,3,4,") for got in first)


# ---- errors ----


def bad_roots(comm: MPI.Intracomm) -> Any:
    size = comm.Get_size()
    calls: list[Callable[[], Any]] = [
        lambda: comm.Bcast(np.ones(2), root=size),
        lambda: comm.Reduce(np.ones(2), np.ones(2), root=-1),
        lambda: comm.Gather(np.ones(2), np.ones(2 * size), root=size + 2),
        lambda: comm.bcast("x", root=size),
        lambda: comm.scatter(None, root=-3),
    ]
    return mpi_errors(calls)


def test_root_out_of_range_is_err_root(transport: str) -> None:
    result = sc.run(bad_roots, 3, **kw(transport))
    fix = "root must be in range(3) for this comm; pass the rank that holds the data (the same on every rank)"
    for rank, got in enumerate(result):
        assert got == [
            (MPI.ERR_ROOT, f"rank {rank}: Bcast(root=3): {fix}", True),
            (MPI.ERR_ROOT, f"rank {rank}: Reduce(op=SUM, root=-1): {fix}", True),
            (MPI.ERR_ROOT, f"rank {rank}: Gather(root=5): {fix}", True),
            (MPI.ERR_ROOT, f"rank {rank}: bcast(root=3): {fix}", True),
            (MPI.ERR_ROOT, f"rank {rank}: scatter(root=-3): {fix}", True),
        ]


ALL_OPS = ["SUM", "PROD", "MIN", "MAX", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"]
CATEGORY = {"int32": "integer", "float64": "floating point", "complex128": "complex", "bool": "logical"}
FITS_CATEGORY = {  # the table MPICH checks: which ops each category of datatype takes
    "integer": ALL_OPS, "floating point": ["MAX", "MIN", "SUM", "PROD"], "complex": ["SUM", "PROD"],
    "logical": ["LAND", "LOR", "LXOR"], "byte": ["BAND", "BOR", "BXOR"],
}


def op_table(comm: MPI.Intracomm) -> dict[str, Any]:
    got: dict[str, Any] = {}
    cases = [(kind, DTYPES[kind][1]) for kind in sorted(DTYPES)] + [("byte", MPI.BYTE)]
    for kind, dt in cases:
        dtype = np.dtype(np.uint8) if kind == "byte" else DTYPES[kind][0]
        for op in ALL_OPS:
            recv = np.zeros(2, dtype)
            try:
                comm.Allreduce([np.ones(2, dtype), dt], [recv, dt], op=getattr(MPI, op))
            except MPI.Exception as exc:
                got[f"{op} {kind}"] = (exc.Get_error_class(), str(exc), isinstance(exc, TypeError))
            else:
                got[f"{op} {kind}"] = recv
    return got


def test_each_op_takes_the_datatypes_mpi_defines_it_for(transport: str) -> None:
    result = sc.run(op_table, 2, transport=transport)
    names = {"int32": "MPI_INT", "float64": "MPI_DOUBLE", "complex128": "MPI_C_DOUBLE_COMPLEX",
             "bool": "MPI_C_BOOL", "byte": "MPI_BYTE"}
    for rank, got in enumerate(result):
        for kind, name in names.items():
            category = CATEGORY.get(kind, "byte")
            fits = FITS_CATEGORY[category]
            use = f"{', '.join(fits[:-1])} or {fits[-1]}"
            for op in ALL_OPS:
                if op in fits:
                    assert isinstance(got[f"{op} {kind}"], np.ndarray), (op, kind)
                    continue
                assert got[f"{op} {kind}"] == (
                    MPI.ERR_OP, f"rank {rank}: Allreduce(op={op}): {op} is not defined for {name}, a "
                                f"{category} datatype; use {use} on {category} data, or another datatype",
                    True), (op, kind)


def bad_buffers(comm: MPI.Intracomm) -> Any:
    size = comm.Get_size()
    calls: list[Callable[[], Any]] = [
        lambda: comm.Allreduce(np.ones(2), np.ones(2, dtype=np.int32)),
        lambda: comm.Allreduce(np.ones(2), np.ones(3)),
        lambda: comm.Scan(np.ones(2, dtype=np.int32), np.ones(2)),
        lambda: comm.Reduce(np.ones(2), np.ones(2, dtype=np.float32), root=comm.Get_rank()),
        lambda: comm.Reduce_scatter_block(np.ones(3 * size), np.ones(2)),
        lambda: comm.Reduce_scatter(np.ones(5), np.ones(2), [2] * size),
        lambda: comm.Reduce_scatter(np.ones(2 * size), np.ones(3), [2] * size),
        lambda: comm.Reduce(np.ones(2), np.ones(2), op=MPI.MINLOC, root=0),
    ]
    got = mpi_errors(calls)
    comm.Barrier()  # every call above failed on every rank before communicating
    return got


def test_buffers_that_do_not_fit_each_other_are_value_errors_as_in_mpi4py(transport: str) -> None:
    result = sc.run(bad_buffers, 2, transport=transport)
    for rank, got in enumerate(result):
        assert got == [
            (MPI.ERR_TYPE, f"rank {rank}: Allreduce(op=SUM): the send buffer holds MPI_DOUBLE but the "
                           "receive buffer MPI_INT; pass buffers of the same datatype", True),
            (MPI.ERR_COUNT, f"rank {rank}: Allreduce(op=SUM): the send buffer has 2 items but the receive "
                            "buffer 3; pass buffers of the same count", True),
            (MPI.ERR_TYPE, f"rank {rank}: Scan(op=SUM): the send buffer holds MPI_INT but the receive "
                           "buffer MPI_DOUBLE; pass buffers of the same datatype", True),
            (MPI.ERR_TYPE, f"rank {rank}: Reduce(op=SUM, root={rank}): the send buffer holds MPI_DOUBLE but "
                           "the receive buffer MPI_FLOAT; pass buffers of the same datatype", True),
            (MPI.ERR_COUNT, f"rank {rank}: Reduce_scatter_block(op=SUM): the send buffer has 6 items but the "
                            "receive counts add up to 4; pass a buffer of exactly every rank's block", True),
            (MPI.ERR_COUNT, f"rank {rank}: Reduce_scatter(op=SUM): the send buffer has 5 items but the "
                            "receive counts add up to 4; pass a buffer of exactly every rank's block", True),
            (MPI.ERR_COUNT, f"rank {rank}: Reduce_scatter(op=SUM): the receive buffer has 3 items but "
                            f"recvcounts[{rank}] is 2; pass a receive buffer of this rank's count", True),
            (MPI.ERR_OP, f"rank {rank}: Reduce(op=MINLOC, root=0): MINLOC reduces (value, index) pairs, not "
                         "MPI_DOUBLE; pass [buf, MPI.DOUBLE_INT] (or FLOAT_INT, LONG_INT, TWOINT, SHORT_INT) "
                         "with pairs", False),
        ]


def mismatched_collectives(comm: MPI.Intracomm) -> None:
    if comm.Get_rank() == 0:
        comm.Bcast(np.ones(2), root=0)
    else:
        comm.Allreduce(MPI.IN_PLACE, np.ones(2))


def test_different_collectives_on_different_ranks_is_a_collective_mismatch(transport: str) -> None:
    with pytest.raises((sc.RankError, sc.CollectiveMismatchError)) as info:
        sc.run(mismatched_collectives, 2, transport=transport)
    error = info.value.__cause__ if isinstance(info.value, sc.RankError) else info.value
    assert isinstance(error, sc.CollectiveMismatchError)
    # in the words of the calls the ranks made (which enters first depends on the transport)
    assert "this is collective #1 on comm 'MPI_COMM_WORLD', but rank" in str(error)
    assert {"Bcast(root=0)", "Allreduce(op=SUM)"} <= set(re.findall(r"\w+\([^)]*\)", str(error)))
    assert str(error).endswith("every rank must call collectives in the same order")


def bad_object_collective_args(comm: MPI.Intracomm) -> Any:
    got = []
    calls = [lambda: comm.scatter([1, 2, 3], root=0)] if comm.Get_rank() == 0 else []  # checked at the root
    for call in [*calls, lambda: comm.alltoall([1])]:
        try:
            call()
        except ValueError as exc:
            got.append(str(exc))
    return got


def test_object_scatter_and_alltoall_need_one_item_per_rank(transport: str) -> None:
    result = sc.run(bad_object_collective_args, 2, **kw(transport))
    assert result[0] == ["rank 0: scatter(root=0): expecting 2 items, got 3; pass one object per rank",
                         "rank 0: alltoall(): expecting 2 items, got 1; pass one object per rank"]
    assert result[1] == ["rank 1: alltoall(): expecting 2 items, got 1; pass one object per rank"]


def tcp_object_bcast(comm: MPI.Intracomm) -> Any:
    try:
        return comm.bcast({"k": comm.Get_rank()}, root=0)
    except TypeError as exc:
        return str(exc)


def test_lowercase_collectives_on_tcp_need_serializer_pickle(transport: str) -> None:
    result = sc.run(tcp_object_bcast, 2, transport=transport)
    if transport != "tcp":
        assert list(result) == [{"k": 0}] * 2
        return
    for rank, got in enumerate(result):
        assert got.startswith(f"rank {rank}: bcast(root=0): the lowercase methods send pickled objects, "
                              "and the tcp transport accepts pickles only in runs made with "
                              'serializer="pickle"; ')
    assert list(sc.run(tcp_object_bcast, 2, transport=transport, serializer="pickle")) == [{"k": 0}] * 2



def ibcast_waits(comm: MPI.Intracomm) -> Any:
    plain = np.arange(3.0) if comm.Get_rank() == 0 else np.zeros(3)
    spec = np.arange(4, dtype=np.int32) if comm.Get_rank() == 0 else np.zeros(4, dtype=np.int32)
    return (comm.Ibcast(plain, root=0).wait(), comm.Ibcast([spec, 2, MPI.INT], root=0).wait(),
            plain.tolist(), spec.tolist())


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_ibcast_wait_returns_none_on_every_rank_as_mpi4py(transport: str, world_size: int) -> None:
    result = sc.run(ibcast_waits, world_size, transport=transport)
    for rank, got in enumerate(result):
        assert got == (None, None, [0.0, 1.0, 2.0], [0, 1] + ([2, 3] if rank == 0 else [0, 0])), rank
