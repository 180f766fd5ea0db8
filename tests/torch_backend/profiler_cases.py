"""A program that profiles its own collectives, as torch users profile them.

Each case is ``case(rank, size) -> value`` called on every rank after
``init_process_group("gloo")`` (``differential.py``): it profiles some
collectives or point-to-point calls with ``torch.autograd.profiler.profile``
or ``torch.profiler.profile`` and returns what a user reads off the trace —
the backend's events (name, async or not, input shapes, count), the user's
own ``record_function`` spans, the table and the exported chrome trace. A
process profiles its own work only: under simcluster each rank's trace must
hold that rank's events and nothing of the other ranks running beside it.
This module imports only torch: gloo's processes import it by name.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity

SIZE = 3


def _backend_events(events: Any) -> list[tuple[str, bool, Any, int]]:
    """The backend's spans: ``(name, is_async, input_shapes, count)``, sorted."""
    prefix = dist.get_backend() + ":"
    return sorted((e.name, bool(e.is_async), e.input_shapes, e.count)
                  for e in events if e.name.startswith(prefix))


def _autograd(body: Callable[[], Any]) -> list[tuple[str, bool, Any, int]]:
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        body()
    return _backend_events(prof.function_events)


def _tensor(rank: int, n: int = 3) -> torch.Tensor:
    return torch.arange(float(n)) + rank


def all_reduce(rank: int, size: int) -> Any:
    return _autograd(lambda: dist.all_reduce(_tensor(rank)))


def all_reduce_async(rank: int, size: int) -> Any:
    def body() -> None:
        works = [dist.all_reduce(_tensor(rank, 4), async_op=True) for _ in range(2)]
        for work in works:
            work.wait()
    return _autograd(body)


def collectives(rank: int, size: int) -> Any:
    def body() -> None:
        t = _tensor(rank, 2)
        dist.broadcast(t, src=0)
        dist.reduce(t, dst=size - 1)
        dist.all_gather([torch.empty(2) for _ in range(size)], t)
        dist.gather(t, [torch.empty(2) for _ in range(size)] if rank == 0 else None, dst=0)
        dist.scatter(t, [torch.full((2,), float(r)) for r in range(size)] if rank == 1 else None, src=1)
        dist.all_gather_into_tensor(torch.empty(2 * size), t)
        dist.barrier()
    return _autograd(body)


def more_collectives(rank: int, size: int) -> Any:
    """Each call alone, so that one gloo lacks shows as its error and the others still profile."""
    t = _tensor(rank, size)
    calls: dict[str, Callable[[], Any]] = {
        "all_to_all_single": lambda: dist.all_to_all_single(torch.empty(size), t),
        "all_to_all": lambda: dist.all_to_all([torch.empty(1) for _ in range(size)],
                                              list(t.split(1))),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.empty(1), t),
        "reduce_scatter": lambda: dist.reduce_scatter(torch.empty(1), list(t.split(1))),
        "all_reduce_coalesced": lambda: dist.all_reduce_coalesced([t.clone(), torch.ones(2)]),
        "all_gather_coalesced": lambda: dist.all_gather_coalesced(
            [[torch.empty(size)] for _ in range(size)], [t]),
        "recv_any_source": lambda: (dist.send(t, 0) if rank else
                                    [dist.recv(torch.empty(size)) for _ in range(size - 1)]),
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        try:
            out[name] = _autograd(call)
        except (RuntimeError, ValueError) as exc:
            out[name] = ("raised", type(exc).__name__, str(exc).split("\n")[0])
    return out


def send_recv(rank: int, size: int) -> Any:
    def body() -> None:
        for src in range(size):
            if src == rank:
                for dst in range(size):
                    if dst != rank:
                        dist.send(torch.ones(rank + 1, 2), dst)
            else:
                dist.recv(torch.empty(src + 1, 2), src)
    return _autograd(body)


def isend_irecv(rank: int, size: int) -> Any:
    def body() -> None:
        peer = (rank + 1) % size
        back = (rank - 1) % size
        out = dist.isend(torch.ones(4) * rank, peer)
        into = torch.empty(4)
        dist.irecv(into, back).wait()
        out.wait()
    return _autograd(body)


def own_work_only(rank: int, size: int) -> Any:
    """Only this rank's ops and spans, with the shapes it used."""
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        with torch.autograd.profiler.record_function(f"step_of_rank_{rank}"):
            x = torch.ones(2, 3)
            dist.all_reduce(x)
            y = torch.ones(rank + 2, 3) * x.sum()
        dist.barrier()
    spans = sorted(e.name for e in prof.function_events if e.name.startswith("step_of_rank_"))
    muls = sorted(e.input_shapes[0] for e in prof.function_events if e.name == "aten::mul")
    return spans, muls, float(y.sum())


def torch_profiler(rank: int, size: int) -> Any:
    """``torch.profiler.profile``: events(), key_averages() and the exported chrome trace."""
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.profiler.record_function(f"mine_{rank}"):
            dist.all_reduce(_tensor(rank, 5))
    events = _backend_events(prof.events())
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=50)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    names = {e.get("name") for e in trace["traceEvents"]}
    return (events, "gloo:all_reduce" in table, f"mine_{rank}" in table,
            sorted(n for n in names if isinstance(n, str) and (n.startswith("mine_") or n.startswith("gloo:"))))


def profiler_enabled(rank: int, size: int) -> Any:
    """The profiler state a process sees, before, inside and after."""
    before = torch.autograd._profiler_enabled()
    with torch.autograd.profiler.profile():
        inside = torch.autograd._profiler_enabled()
        dist.barrier()
    return before, inside, torch.autograd._profiler_enabled()


CASES: dict[str, Callable[[int, int], Any]] = {
    "all_reduce": all_reduce,
    "all_reduce_async": all_reduce_async,
    "collectives": collectives,
    "more_collectives": more_collectives,
    "send_recv": send_recv,
    "isend_irecv": isend_irecv,
    "own_work_only": own_work_only,
    "torch_profiler": torch_profiler,
    "profiler_enabled": profiler_enabled,
}
