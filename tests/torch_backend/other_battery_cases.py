"""What pytorch's ``test_c10d_gloo.py`` asks of a gloo group beyond its collectives, as cases.

Each ``case(rank, size)`` runs after ``init_process_group("gloo")`` on real
gloo processes and on simcluster ranks whose program asks for gloo
(``test_other_battery_differential.py``). They are the causes pytorch's
``CommTest``, ``DistributedDataParallelTest`` and
``GlooProcessGroupWithDispatchedCollectivesTests`` found
(docs/torch.md, "Other batteries").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

SIZE = 3


def backend_for_cpu(rank: int, size: int) -> Any:
    """The group's CPU backend: gloo's ``create_device`` on it, then a collective through it."""
    backend = c10d._get_default_group()._get_backend(torch.device("cpu"))
    backend.create_device(interface="lo")
    t = torch.tensor([float(rank + 1)])
    backend.allreduce([t]).wait()
    return t


def broadcast_coalesced(rank: int, size: int) -> Any:
    """``_broadcast_coalesced`` of tensors of three dtypes from each root, 256-byte buckets."""
    seen = []
    for root in range(size):
        target = [torch.arange(12, dtype=dtype) * (root + 1)
                  for dtype in (torch.float32, torch.float64, torch.int64)]
        tensors = [t.clone() if rank == root else torch.zeros_like(t) for t in target]
        c10d._broadcast_coalesced(c10d._get_default_group(), tensors, buffer_size=256, src=root)
        seen.append(tensors)
    return seen


def all_to_all_single_noncontiguous_input(rank: int, size: int) -> Any:
    """gloo refuses a non-contiguous input, with a ValueError."""
    out = torch.zeros(size, 2)
    dist.all_to_all_single(out, torch.ones(2, size).t())
    return out


def all_to_all_single_noncontiguous_output(rank: int, size: int) -> Any:
    """A non-contiguous output is filled."""
    out = torch.zeros(2, size).t()
    dist.all_to_all_single(out, torch.full((size, 2), float(rank)))
    return out


CASES: dict[str, Callable[[int, int], Any]] = {
    "backend_for_cpu": backend_for_cpu,
    "broadcast_coalesced": broadcast_coalesced,
    "all_to_all_single_noncontiguous_input": all_to_all_single_noncontiguous_input,
    "all_to_all_single_noncontiguous_output": all_to_all_single_noncontiguous_output,
}
