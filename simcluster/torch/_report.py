"""Record each rank's steps and memory for the step report (``--report``, ``spawn(report=True)``).

Owns the per-rank half of ``simcluster.predict.report``: a ``Recording`` spans the run and holds
torch's global optimizer step post hook (``torch.optim.optimizer.register_optimizer_step_post_hook``);
each rank's ``RankRecorder`` is entered on the rank's own thread for its whole program and holds
a ``MemoryTracker`` of the storages the rank's own code makes (``RankMemory``).

Rule 1: a step ends when its compute ends: at an optimizer step's post hook the rank's virtual
time is the engine's clock plus the GPU seconds its meter has not charged yet (they are charged,
as a virtual sleep from that same time, at the rank's next call into simcluster). Rule 2: the
hook only reads clocks and marks memory categories; it charges nothing and sends nothing, so a
run with the report has the virtual times of the run without it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from simcluster.engine import sync as _sync
from simcluster.predict import report as _report
from simcluster.predict.memory import MemoryTracker


class RankMemory(MemoryTracker):
    """A rank's ``MemoryTracker`` that leaves out what simcluster makes inside a collective.

    NCCL works on the caller's tensors in place and keeps its own buffers outside PyTorch's
    allocator, so the copies simcluster's collectives make of the data they send (Rule 1 of
    ``_gpu.py``: the meter is stopped inside them) are not the GPU's tensor memory.
    """

    def __init__(self, meter: Any) -> None:
        super().__init__()
        self.meter = meter

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if self.meter is not None and self.meter.depth:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


class RankRecorder:
    """One rank's record: its steps' boundaries, its tokens, its memory tracker."""

    def __init__(self, rank: _sync.SyncRank | None, world_rank: int, clock: Any) -> None:
        self.sync_rank = rank
        self.clock = clock  # the rank's RankClock (compute="gpu:..."), or None
        self.record = _report.RankRecord(world_rank)
        self.tracker = RankMemory(None if rank is None else rank.meter)
        self.tokens = 0  # report.tokens() adds here
        self.flops_per_token: float | None = None  # report.model_flops() sets it
        self._counted: dict[int, int] = {}  # id(parameter) -> numel, over the rank's optimizers
        self._optimizers: set[int] = set()

    def __enter__(self) -> RankRecorder:
        if self.sync_rank is not None:
            _report.SINKS[self.sync_rank] = self
        self.tracker.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.tracker.__exit__(*exc)
        self.finish()

    def finish(self) -> None:
        """Stop recording (the rank ended): keep its memory figures."""
        _report.SINKS.pop(self.sync_rank, None)
        report = self.tracker.report()
        self.record.peak_memory = report.peak
        self.record.peak_by_category = dict(report.peak_by_category)
        self.record.flops_per_token = self.flops_per_token

    def now(self) -> float:
        """The rank's virtual time at the end of the compute it has run so far (Rule 1)."""
        rank = self.sync_rank
        if rank is None:
            return 0.0
        now = float(rank.comm.kernel.now)
        meter, clock = rank.meter, self.clock
        if clock is not None and meter is not None and not meter.depth:
            now += clock.seconds - meter.since
        return now

    def on_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An ``optimizer.step()`` of this rank returned: note the boundary, learn categories."""
        clock = self.clock
        seconds, flops = (clock.seconds, clock.flops) if clock is not None else (0.0, 0.0)
        self.record.boundaries.append((id(optimizer), self.now(), seconds, flops, self.tokens))
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if id(optimizer) not in self._optimizers:
            self._optimizers.add(id(optimizer))
            for p in params:
                self._counted[id(p)] = int(p.numel())  # a DTensor's numel is its global size
            self.record.parameters = sum(self._counted.values())
        tracker = self.tracker
        tracker.mark(params, "parameters")
        tracker.mark([p.grad for p in params if p.grad is not None], "gradients")
        tracker.mark([t for state in optimizer.state.values() for t in pytree.tree_leaves(state)
                      if isinstance(t, torch.Tensor)], "optimizer")


class Recording:
    """A run's report: the global optimizer hook while it runs, and the ranks' recorders."""

    def __init__(self) -> None:
        self.recorders: dict[int, RankRecorder] = {}
        self._handle: Any = None

    def __enter__(self) -> Recording:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()
        for recorder in self.recorders.values():
            _report.SINKS.pop(recorder.sync_rank, None)

    def rank(self, world_rank: int, clock: Any) -> RankRecorder:
        """The recorder of the rank running now (call on its thread; enter it around its code)."""
        recorder = RankRecorder(_sync.current(), world_rank, clock)
        self.recorders[world_rank] = recorder
        return recorder

    @staticmethod
    def _hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        recorder = _report.SINKS.get(_sync.current())
        if recorder is not None:
            recorder.on_step(optimizer)

    def report(self, *, tokens_per_step: int | None = None, flops_per_token: float | None = None,
               trace: Any = None) -> _report.StepReport:
        """Build the report from the ranks that recorded (finishing any still entered); the
        device is the ranks' modelled GPU (compute="gpu:..."), if any."""
        device = None
        for recorder in self.recorders.values():
            if recorder.record.peak_memory is None:
                recorder.finish()
            if recorder.clock is not None:
                device = recorder.clock.device
        records = [self.recorders[r].record for r in sorted(self.recorders)]
        path = str(trace) if isinstance(trace, (str, bytes)) or hasattr(trace, "__fspath__") else None
        return _report.build(records, device=device, tokens_per_step=tokens_per_step,
                             flops_per_token=flops_per_token, trace=path)
