"""torch.distributed code written as a torch user writes it, run under gloo and under simcluster.

Each case is ``case(rank, size) -> value`` called on every rank after
``init_process_group``; values are plain Python (tensors become
``(dtype, tolist())``) so results from gloo's processes and simcluster's
ranks compare exactly. This module imports only torch: gloo's processes
import it by name (``torch.multiprocessing.spawn``).

Values are small integers, so every reduction is exact in every dtype and
in any order of operands.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

SIZE = 3
"""World size of the differential run (not a power of two)."""

OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPLEX = (torch.complex64, torch.complex128)


def gloo_accepts(op: str, dtype: torch.dtype) -> bool:
    """Whether gloo (torch 2.13) runs all_reduce with ``op`` on ``dtype`` (int16 never)."""
    if dtype in _COMPLEX:
        return op in ("SUM", "AVG")
    if op in ("BAND", "BOR", "BXOR"):
        return dtype not in _FLOATS
    if op == "AVG":
        return dtype in _FLOATS
    return True


def show(value: Any) -> Any:
    """Return ``value`` with tensors as ``(dtype name, nested lists)``."""
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), value.tolist())
    if isinstance(value, (list, tuple)):
        return [show(v) for v in value]
    if isinstance(value, dict):
        return {k: show(v) for k, v in value.items()}
    return value


def _values(rank: int, dtype: torch.dtype, n: int = 4) -> torch.Tensor:
    base = torch.arange(n) + 1 + rank
    if dtype is torch.bool:
        return (base % 2 == 0) | (torch.arange(n) == rank)
    if dtype in _COMPLEX:
        return base.to(dtype) * (1 + 1j) - 1j
    return base.to(dtype)


# ---- cases ----


def all_reduce_every_op_and_dtype(rank: int, size: int) -> Any:
    out = {}
    for op in OPS:
        for dtype in DTYPES:
            if gloo_accepts(op, dtype):
                t = _values(rank, dtype)
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                out[f"{op}/{dtype}"] = show(t)
    return out


def broadcast_from_every_root(rank: int, size: int) -> Any:
    out = []
    for src in range(size):
        for dtype in (torch.float32, torch.int64, torch.bool, torch.complex64):
            t = _values(rank, dtype) if rank == src else torch.zeros(4, dtype=dtype)
            dist.broadcast(t, src=src)
            out.append(show(t))
    return out


def reduce_to_every_root(rank: int, size: int) -> Any:
    out = []  # gloo leaves scratch values in the other ranks' tensors: compare the root's only
    for dst in range(size):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
            t = _values(rank, torch.float32)
            dist.reduce(t, dst=dst, op=op)
            out.append(show(t) if rank == dst else None)
    return out


def all_gather_lists_and_tensors(rank: int, size: int) -> Any:
    t = _values(rank, torch.float64)
    gathered = [torch.zeros(4, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(gathered, t)
    c = _values(rank, torch.complex64, 2)
    cgathered = [torch.zeros(2, dtype=torch.complex64) for _ in range(size)]
    dist.all_gather(cgathered, c)
    flat = torch.zeros(4 * size, dtype=torch.int32)  # all_gather_into_tensor, as torch 2.13 names it
    dist.all_gather_single(flat, _values(rank, torch.int32))
    return show([gathered, cgathered, flat])


def gather_and_scatter(rank: int, size: int) -> Any:
    out = []
    for root in range(size):
        t = _values(rank, torch.float32)
        gathered = [torch.zeros(4) for _ in range(size)] if rank == root else None
        dist.gather(t, gathered, dst=root)
        out.append(show(gathered))
        mine = torch.zeros(3, dtype=torch.int64)
        parts = [torch.full((3,), 10 * root + i) for i in range(size)] if rank == root else None
        dist.scatter(mine, parts, src=root)
        out.append(show(mine))
    return out


def reduce_scatter_lists_and_tensors(rank: int, size: int) -> Any:
    out = []
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        mine = torch.zeros(2)
        dist.reduce_scatter(mine, [torch.full((2,), float(rank * size + i)) for i in range(size)], op=op)
        out.append(show(mine))
    mine = torch.zeros(2, dtype=torch.int64)
    dist.reduce_scatter_single(mine, torch.arange(2 * size) * (rank + 1))  # reduce_scatter_tensor
    out.append(show(mine))
    return out


def all_to_all_even_and_uneven(rank: int, size: int) -> Any:
    sent = [torch.full((2,), float(10 * rank + i)) for i in range(size)]
    got = [torch.zeros(2) for _ in range(size)]
    dist.all_to_all(got, sent)
    single = torch.zeros(size, dtype=torch.int64)
    dist.all_to_all_single(single, torch.arange(size) + 10 * rank)
    # uneven: rank r sends r+1+i rows to rank i... every row is 10*r + i
    in_splits = [rank + 1 + i for i in range(size)]
    out_splits = [r + 1 + rank for r in range(size)]
    src = torch.cat([torch.full((n,), 10 * rank + i) for i, n in enumerate(in_splits)])
    uneven = torch.zeros(sum(out_splits), dtype=torch.int64)
    dist.all_to_all_single(uneven, src, out_splits, in_splits)
    return show([got, single, uneven])


def point_to_point_ring(rank: int, size: int) -> Any:
    right, left = (rank + 1) % size, (rank - 1) % size
    out = []
    buf = torch.zeros(3)
    if rank % 2 == 0:
        dist.send(torch.full((3,), float(rank)), dst=right, tag=7)
        dist.recv(buf, src=left, tag=7)
    else:
        dist.recv(buf, src=left, tag=7)
        dist.send(torch.full((3,), float(rank)), dst=right, tag=7)
    out.append(show(buf))
    rbuf = torch.zeros(2, dtype=torch.int64)
    reqs = [dist.isend(torch.tensor([rank, 1]), dst=right, tag=3),
            dist.irecv(rbuf, src=left, tag=3)]
    for req in reqs:
        req.wait()
    out.append(show(rbuf))
    ops = [dist.P2POp(dist.isend, torch.tensor([rank * 2.0]), right),
           dist.P2POp(dist.irecv, pbuf := torch.zeros(1), left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    out.append(show(pbuf))
    if rank == 0:  # a receive from any source says who sent
        senders = []
        for _ in range(size - 1):
            anybuf = torch.zeros(1)
            senders.append(dist.recv(anybuf, tag=9))
            senders.append(anybuf.item())
        out.append(sorted(senders))
    else:
        dist.send(torch.tensor([float(rank)]), dst=0, tag=9)
    return out


def object_collectives(rank: int, size: int) -> Any:
    everyone: list[Any] = [None] * size
    dist.all_gather_object(everyone, {"rank": rank, "name": f"r{rank}", "list": list(range(rank))})
    objs: list[Any] = [f"from {rank}", {"x": rank}] if rank == 1 else [None, None]
    dist.broadcast_object_list(objs, src=1)
    gathered: list[Any] | None = [None] * size if rank == 2 else None
    dist.gather_object(("g", rank), gathered, dst=2)
    mine: list[Any] = [None]
    dist.scatter_object_list(mine, [[i, "s"] for i in range(size)] if rank == 0 else None, src=0)
    received: list[Any] = [None, None]
    if rank == 0:
        dist.send_object_list([{"a": 1}, "two"], dst=size - 1)
    elif rank == size - 1:
        dist.recv_object_list(received, src=0)
    return [everyone, objs, gathered, mine, received]


def groups_and_group_ranks(rank: int, size: int) -> Any:
    members = [0, size - 1]
    group = dist.new_group(members)
    out: list[Any] = [dist.get_world_size(), dist.get_rank()]
    if rank in members:
        t = torch.full((2,), float(rank + 1))
        dist.all_reduce(t, group=group)
        b = torch.full((1,), float(rank))
        dist.broadcast(b, group=group, group_src=1)
        out += [show(t), show(b), dist.get_rank(group), dist.get_world_size(group),
                dist.get_group_rank(group, rank), dist.get_global_rank(group, 1)]
        if rank == members[0]:
            dist.send(torch.tensor([5.0]), group=group, group_dst=1, tag=2)
        else:
            got = torch.zeros(1)
            dist.recv(got, group=group, group_src=0, tag=2)
            out.append(show(got))
    whole = dist.new_group(list(range(size)))
    t = torch.ones(1)
    dist.all_reduce(t, group=whole)
    out.append(show(t))
    return out


def async_work_handles(rank: int, size: int) -> Any:
    a = torch.full((2,), float(rank))
    b = torch.full((2,), float(rank + 1))
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, op=dist.ReduceOp.MAX, async_op=True)
    wa.wait()
    future_value = wb.get_future().wait()
    wc = dist.broadcast(c := torch.full((1,), float(rank)), src=2, async_op=True)
    wc.wait()
    dist.barrier()
    return [show(a), show(b), show(future_value), show(c), wa.is_completed()]


CASES: dict[str, Callable[[int, int], Any]] = {fn.__name__: fn for fn in (
    all_reduce_every_op_and_dtype, broadcast_from_every_root, reduce_to_every_root,
    all_gather_lists_and_tensors, gather_and_scatter, reduce_scatter_lists_and_tensors,
    all_to_all_even_and_uneven, point_to_point_ring, object_collectives, groups_and_group_ranks,
    async_work_handles)}


def run_cases(rank: int, size: int) -> dict[str, Any]:
    """Run every case on this rank; return their values by name."""
    return {name: case(rank, size) for name, case in CASES.items()}


def gloo_rank(rank: int, size: int, port: int, out_dir: str) -> None:
    """One gloo process: rendezvous on 127.0.0.1:port, run the cases, pickle the values."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timedelta(seconds=60))
    try:
        values = run_cases(rank, size)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pickle"), "wb") as f:
        pickle.dump(values, f)


def simcluster_rank(rank: int, size: int) -> dict[str, Any]:
    """One simcluster rank: the same cases on the "simcluster" backend."""
    dist.init_process_group("simcluster", rank=rank, world_size=size)
    try:
        return run_cases(rank, size)
    finally:
        dist.destroy_process_group()
