"""What gloo gives a program beyond plain collectives, written as torch users write them.

Each case is ``case(rank, size) -> value`` called on every rank after
``init_process_group("gloo")`` (``differential.py``; under simcluster the
program's "gloo" runs on simcluster's backend, as under ``simcluster
torchrun``): ``all_gather_coalesced``, sparse ``all_reduce`` (and
DistributedDataParallel's sparse gradients), the timeouts of barriers,
collectives, ``Work.wait`` and ``monitored_barrier`` (each on a group of its
own, since a timed-out gloo group is closed for good), and what
DistributedDataParallel's logging data says of the backend. An error is a
value: its message, up to the C++ backtrace gloo appends to some.
This module imports only torch: gloo's processes import it by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

SIZE = 3
WAIT = 1.5
"""Seconds the ranks that stay out of a timed-out operation wait before going on (timeouts are 1 s)."""


def _error(call: Callable[[], Any]) -> Any:
    """``call()``'s value, or its error as (type name, message up to a C++ backtrace)."""
    try:
        return call()
    except (RuntimeError, ValueError) as exc:
        return (type(exc).__name__, str(exc).split("\nException raised from")[0])


def all_gather_coalesced(rank: int, size: int) -> Any:
    inputs = [torch.full((2,), float(rank)), torch.arange(3.0).reshape(1, 3) + 10 * rank,
              torch.empty(0)]
    outputs = [[torch.zeros(2), torch.zeros(1, 3), torch.empty(0)] for _ in range(size)]
    dist.all_gather_coalesced(outputs, inputs)
    return outputs


def all_gather_coalesced_bad_size(rank: int, size: int) -> Any:
    outputs = [[torch.zeros(3)] for _ in range(size)]
    return _error(lambda: dist.all_gather_coalesced(outputs, [torch.ones(2)]))


def _sparse(rank: int, dense_dims: int = 0) -> torch.Tensor:
    indices = torch.tensor([[0, rank + 1, 0]])
    values = torch.arange(1.0, 4.0).reshape([3] + [1] * dense_dims).expand([3] + [2] * dense_dims)
    return torch.sparse_coo_tensor(indices, values * (rank + 1), [4] + [2] * dense_dims,
                                   check_invariants=True)


def sparse_all_reduce(rank: int, size: int) -> Any:
    out = []
    for dense_dims in (0, 1):
        tensor = _sparse(rank, dense_dims)
        dist.all_reduce(tensor)
        out.append((tensor.is_coalesced(), tensor.indices(), tensor.values()))
    work = dist.all_reduce(_sparse(rank), async_op=True)
    work.wait()
    return out, work.result()[0].to_dense()


def sparse_all_reduce_max(rank: int, size: int) -> Any:
    return _error(lambda: dist.all_reduce(_sparse(rank), op=dist.ReduceOp.MAX))


def _timed_group(seconds: float) -> Any:
    """A new group with a timeout of ``seconds``, made with every rank in step (gloo connects its
    ranks within that timeout, and the ranks come from cases that kept some waiting)."""
    dist.barrier()
    return dist.new_group(timeout=timedelta(seconds=seconds))


def _alone(rank: int, call: Callable[[], Any]) -> Any:
    """Rank 0 calls ``call`` alone; the others wait ``WAIT`` s, then go on."""
    if rank == 0:
        return _error(call)
    time.sleep(WAIT)
    return None


def barrier_timeout(rank: int, size: int) -> Any:
    group = _timed_group(1)
    first = _alone(rank, lambda: dist.barrier(group))
    then = _alone(rank, lambda: dist.all_reduce(torch.ones(2), group=group))  # gloo closed it
    return first, then


def all_reduce_timeout(rank: int, size: int) -> Any:
    group = _timed_group(1)
    return _alone(rank, lambda: dist.all_reduce(torch.ones(3), group=group))


def barrier_call_timeout(rank: int, size: int) -> Any:
    group = _timed_group(300)
    return _alone(rank, lambda: dist.barrier(group, timeout=timedelta(milliseconds=1)))


def wait_timeout(rank: int, size: int) -> Any:
    group = _timed_group(60)
    tensor = torch.ones(3) * (rank + 1)
    if rank == 0:
        work = dist.all_reduce(tensor, group=group, async_op=True)
        late = _error(lambda: work.wait(timedelta(seconds=0.3)))
        work.wait()  # the operation went on; the others join it
        return late, tensor
    time.sleep(WAIT)
    dist.all_reduce(tensor, group=group)
    return None, tensor


def monitored_barrier_passes(rank: int, size: int) -> Any:
    group = _timed_group(60)
    dist.monitored_barrier(group, timeout=timedelta(seconds=1))
    dist.monitored_barrier(group, timeout=timedelta(seconds=1), wait_all_ranks=True)
    return "passed"


def monitored_barrier_rank_absent(rank: int, size: int) -> Any:
    group = _timed_group(60)
    if rank == 1:
        time.sleep(WAIT)
        return None
    # rank 0 names the rank that did not come, the others learn that it failed; then gloo says
    # what its socket saw (a remaining time in ms, an address): the first line is compared
    error = _error(lambda: dist.monitored_barrier(group, timedelta(seconds=1)))
    return error[0], error[1].split("\n")[0]


def monitored_barrier_wait_all(rank: int, size: int) -> Any:
    group = _timed_group(60)
    return _alone(rank, lambda: dist.monitored_barrier(group, timedelta(seconds=1),
                                                       wait_all_ranks=True))


def monitored_barrier_no_time(rank: int, size: int) -> Any:
    group = _timed_group(60)
    return _alone(rank, lambda: group.monitored_barrier(timedelta(seconds=0)))


def ddp_sparse_gradients(rank: int, size: int) -> Any:
    """DistributedDataParallel over a sparse embedding: its gradients are sparse all_reduces."""
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    model = torch.nn.parallel.DistributedDataParallel(embedding)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.tensor([rank, (rank + step) % 10, 7])).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return embedding.weight


def ddp_logging_backend(rank: int, size: int) -> Any:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    data = model._get_ddp_logging_data()
    return {key: data.get(key) for key in ("backend_name", "gloo_socket_ifname",
                                            "gloo_device_transport", "gloo_num_threads")}


def get_backend(rank: int, size: int) -> Any:
    return dist.get_backend(), dist.get_backend(dist.new_group())


CASES: dict[str, Callable[[int, int], Any]] = {
    "all_gather_coalesced": all_gather_coalesced,
    "all_gather_coalesced_bad_size": all_gather_coalesced_bad_size,
    "sparse_all_reduce": sparse_all_reduce,
    "sparse_all_reduce_max": sparse_all_reduce_max,
    "barrier_timeout": barrier_timeout,
    "all_reduce_timeout": all_reduce_timeout,
    "barrier_call_timeout": barrier_call_timeout,
    "wait_timeout": wait_timeout,
    "monitored_barrier_passes": monitored_barrier_passes,
    "monitored_barrier_rank_absent": monitored_barrier_rank_absent,
    "monitored_barrier_wait_all": monitored_barrier_wait_all,
    "monitored_barrier_no_time": monitored_barrier_no_time,
    "ddp_sparse_gradients": ddp_sparse_gradients,
    "ddp_logging_backend": ddp_logging_backend,
    "get_backend": get_backend,
}
