"""One training step of a small transformer under FSDP2 + tensor parallel on a 2-D mesh.

The job ``simcluster bench torch`` runs at 64 ranks (8 x 8) and 512 ranks
(64 x 8), each in a fresh process (``python -m simcluster.bench.torch_step
DP TP [--unshared]``), printing one JSON line:

* ``setup``: wall seconds from ``spawn`` to the first step (``init_process_group``,
  ``init_device_mesh``, building the model, ``parallelize_module`` over "tp",
  ``fully_shard`` over "dp", the optimizer);
* ``step``: wall seconds of one training step (forward, loss, backward,
  optimizer step) on every rank, from the first rank starting it to the last
  rank finishing it (ranks are threads under one GIL, run one at a time);
  ``first_step`` the same of the first step (FSDP2's lazy initialisation,
  DTensor's first sharding propagation of every op);
* ``first_step_cpu``, ``step_cpu``: the process's CPU seconds over the same
  spans, which other programs on the machine do not inflate as they do wall
  time; ``first_over_step`` is first_step / step, ``first_over_step_cpu``
  the same of the CPU seconds (target: at most ``FIRST_STEP_RATIO``, judged
  on the CPU seconds, which a loaded machine disturbs less);
* ``virtual_step``: the virtual seconds the step took under ``NETWORK``
  (compute charged as zero: the figure is the step's communication);
* ``peak_mib``: the process's peak resident memory;
* ``where``: the share of the step's wall time in each part of the stack,
  from sampling the running rank's Python stack every millisecond
  (``Sampler``), by the innermost frame that names a part: DTensor's and
  FSDP2's Python code, torch's autograd, optimizer and forward ops (whose
  DTensor dispatch runs in C++ and counts there), the simcluster backend
  and engine; ``where_first`` the same of the first step. The sampler runs
  through both steps, so that it weighs on each alike.
"""

from __future__ import annotations

import json
import sys
import threading
from time import perf_counter, process_time  # bound now: a rank's time.* reads virtual time
from collections import Counter
from typing import Any

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 128, 64, 8, 2, 16, 2
"""The model: 2 blocks of 8-head attention and a 4x MLP, width 64; 2 sequences of 16 per dp rank."""
FIRST_STEP_RATIO = 2.0
"""The first step should take at most this many times the steady (second) step."""
NETWORK = (5e-6, 1 / 25e9)
"""alpha (s) and beta (s/byte) of the network the virtual step time is charged on: 5 us, 25 GB/s."""


# ---- where the time goes ----

_PARTS = (("/simcluster/torch/", "simcluster backend"), ("/simcluster/", "simcluster engine"),
          ("/torch/distributed/tensor/", "DTensor dispatch (Python)"),
          ("/torch/distributed/fsdp/", "FSDP2 (Python)"),
          ("/torch/autograd/", "autograd backward (C++, DTensor ops inside)"),
          ("/torch/optim/", "optimizer (an op per DTensor parameter)"),
          ("/torch/", "forward: modules and ops (C++, DTensor ops inside)"))


_PROPAGATION = "/torch/distributed/tensor/_sharding_prop.py"
"""DTensor's sharding propagation: a part of its own wherever inside it the frame is."""


def _part(frame: Any) -> str:
    """The part of the stack a running frame belongs to: the innermost frame that names one,
    within the rank's own function (the frames outside it, which start the rank, name none)."""
    from simcluster.engine.sync import SyncRank

    start = SyncRank._main.__code__
    outer = frame
    while outer is not None:
        if outer.f_code.co_filename.replace("\\", "/").endswith(_PROPAGATION):
            return "DTensor sharding propagation (Python, fake tensors)"
        outer = outer.f_back
    while frame is not None and frame.f_code is not start:
        name = frame.f_code.co_filename.replace("\\", "/")
        for marker, part in _PARTS:
            if marker in name:
                return part
        frame = frame.f_back
    return "model code"


def _parked(frame: Any) -> bool:
    """Whether a thread whose innermost frame is ``frame`` waits rather than runs.

    Rank threads run one at a time: a rank not running waits for the baton in
    ``ThreadRank.suspend`` (or, before its first turn, ``ThreadRank._body``),
    and the engine's thread waits in ``ThreadRank.send`` while a rank runs;
    each waits on a plain lock, a C call with no Python frame of its own. Any
    other thread waiting in ``threading`` (a ``join``, an ``Event``) is parked too.
    """
    from simcluster.engine.sync import ThreadRank

    return frame.f_code in (ThreadRank.suspend.__code__, ThreadRank._body.__code__,
                            ThreadRank.send.__code__) or frame.f_code.co_filename == threading.__file__


class Sampler:
    """Samples which part of the stack the running thread is in, every ``interval`` seconds.

    Ranks are threads that run one at a time; the threads parked
    (``_parked``) are left out, the others counted.
    """

    def __init__(self, interval: float = 1e-3) -> None:
        self.interval = interval
        self.phases: dict[str, Counter[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.phase: str | None = None  # the phase samples count in; None: not sampling

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            phase = self.phase
            if phase is None:
                continue
            counts = self.phases.setdefault(phase, Counter())
            for ident, frame in sys._current_frames().items():
                if ident == me or _parked(frame):
                    continue
                counts[_part(frame)] += 1

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self, phase: str) -> dict[str, float]:
        counts = self.phases.get(phase, Counter())
        total = sum(counts.values()) or 1
        return {part: n / total for part, n in counts.most_common()}


# ---- the job ----


def _model() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):  # type: ignore[misc]  # torch is optional: not followed
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(DIM)
            self.q, self.k, self.v = (nn.Linear(DIM, DIM) for _ in range(3))
            self.out = nn.Linear(DIM, DIM)
            self.norm2 = nn.LayerNorm(DIM)
            self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            h = self.norm1(x)
            q, k, v = (p(h).view(b, s, -1, DIM // HEADS).transpose(1, 2)
                       for p in (self.q, self.k, self.v))  # the local heads under TP
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, s, -1))
            return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))

    class Transformer(nn.Module):  # type: ignore[misc]  # torch is optional: not followed
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.norm = nn.LayerNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB)

        def forward(self, tokens: Any) -> Any:
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x).reshape(-1, DIM))  # 2-D: logits are no view

    torch.manual_seed(0)
    return Transformer()


def _rank(rank: int, dp: int, tp: int, marks: dict[str, Any]) -> float:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from simcluster.comm import current_comm

    def now() -> float:
        comm = current_comm()
        assert comm is not None, "inside simcluster.torch.spawn"
        return comm.now

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    model = _model()
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                               "v": ColwiseParallel(), "out": RowwiseParallel(),
                                               "up": ColwiseParallel(),
                                               "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + mesh["dp"].get_local_rank())
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)

    def step() -> float:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits, tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return float(loss.item())

    for name in ("first", "step"):  # the first step also runs FSDP2's lazy initialisation
        dist.barrier()
        start = now()
        if f"{name}_start" not in marks:
            marks[f"{name}_start"], marks[f"{name}_start_cpu"] = perf_counter(), process_time()
        marks["sampler"].phase = name
        loss = step()
        dist.barrier()
        marks[f"{name}_end"], marks[f"{name}_end_cpu"] = perf_counter(), process_time()
        marks[f"virtual_{name}"] = max(marks.get(f"virtual_{name}", 0.0), now() - start)
    marks["sampler"].phase = None
    dist.destroy_process_group()
    return loss


def job(dp: int, tp: int, share: bool = True) -> dict[str, Any]:
    """Run the job on dp x tp ranks in this process; return its figures.

    ``share=False`` (``--unshared``) has every rank propagate DTensor's
    shardings for itself, as each process does under torch, instead of
    sharing them (``simcluster/torch/_shared_propagation.py``): the other
    side of the first step's breakdown in docs/benchmarks.md.
    """
    import simcluster as sc
    import simcluster.torch as sctorch
    from simcluster.torch import _shared_propagation

    if not share:  # this process only: the job runs in a fresh one
        _shared_propagation.install = lambda dispatcher: None

    from .scale import _rss_kib

    marks: dict[str, Any] = {}
    start = perf_counter()
    with Sampler() as sampler:
        marks["sampler"] = sampler
        result = sctorch.spawn(_rank, args=(dp, tp, marks), nprocs=dp * tp,
                               latency=sc.latency.AlphaBeta(*NETWORK))
    end = perf_counter()
    losses = list(result)
    first, second = (marks[f"{name}_end"] - marks[f"{name}_start"] for name in ("first", "step"))
    first_cpu, second_cpu = (marks[f"{name}_end_cpu"] - marks[f"{name}_start_cpu"]
                             for name in ("first", "step"))
    return {"ranks": dp * tp, "dp": dp, "tp": tp, "shared_propagation": share,
            "setup": marks["first_start"] - start,
            "first_step": first, "step": second, "first_over_step": first / second,
            "first_step_cpu": first_cpu, "step_cpu": second_cpu,
            "first_over_step_cpu": first_cpu / second_cpu, "total": end - start,
            "virtual_step": marks["virtual_step"], "peak_mib": _rss_kib("VmHWM") / 1024,
            "loss": losses[0], "same_loss_in_each_dp_group": _same_per_group(losses, dp, tp),
            "where": sampler.shares("step"), "where_first": sampler.shares("first")}


def _same_per_group(losses: list[float], dp: int, tp: int) -> bool:
    """Whether the tp ranks of each dp group agree on the loss (they compute the same one)."""
    return all(len(set(losses[g * tp:(g + 1) * tp])) == 1 for g in range(dp))


if __name__ == "__main__":
    print(json.dumps(job(int(sys.argv[1]), int(sys.argv[2]), share="--unshared" not in sys.argv)))
