"""The step report of a predicted training run: ``StepReport`` (``--report``, ``spawn(report=True)``).

Owns the step from what each rank recorded (``RankRecord``: the virtual time, GPU seconds and
counted FLOPs at the end of each ``optimizer.step()``, its tokens, its peak memory) to the figures
a user compares with a real run: step time, tokens per second per GPU, MFU, hardware FLOPs
utilization, peak memory over ranks, and the compute / exposed-communication / idle split.
The recording itself is ``simcluster.torch._report``'s; this module does not import torch.

A program may say what a step processes, from inside a rank: ``tokens(n)`` adds ``n`` tokens to
the rank's current step, ``model_flops(f)`` gives the model FLOPs per token. Outside a report run
both do nothing, so a script calls them unconditionally.

Rule 1: a figure that needs something not known is ``None``, printed as unknown with what to give;
it is never guessed. Rule 2: the steady step is the last step every rank finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RankRecord", "Spread", "StepReport", "build", "communication", "model_flops", "tokens",
           "transformer_flops_per_token"]

SINKS: dict[Any, Any] = {}
"""The running ranks' recorders, by the engine's rank object (``simcluster.torch._report`` fills it)."""


def _sink() -> Any:
    from simcluster.engine import sync as _sync

    rank = _sync.current()
    return None if rank is None else SINKS.get(rank)


def communication(arguments: object) -> None:
    """Count the tensors in ``arguments`` (a collective's, as the torch backend received them) as
    this rank's communication buffers in its peak memory, unless their category is known
    (``MemoryTracker.mark_communication``). Does nothing outside a report run."""
    if not SINKS:
        return
    sink = _sink()
    if sink is not None:
        sink.tracker.mark_communication(arguments)


def tokens(n: int) -> None:
    """Add ``n`` tokens to what this rank processes in its current step (call it with each batch).

    The step's count is what was added since the rank's previous ``optimizer.step()``. Does
    nothing outside a report run.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"tokens({n!r}): give the number of tokens as an int >= 0")
    sink = _sink()
    if sink is not None:
        sink.tokens += n


def model_flops(flops_per_token: float) -> None:
    """Give the model FLOPs per token that MFU counts (``transformer_flops_per_token`` for a
    transformer as torchtitan counts it). Does nothing outside a report run."""
    if not isinstance(flops_per_token, (int, float)) or not flops_per_token > 0:
        raise ValueError(f"model_flops({flops_per_token!r}): give the FLOPs per token, > 0")
    sink = _sink()
    if sink is not None:
        sink.flops_per_token = float(flops_per_token)


def transformer_flops_per_token(parameters: int, layers: int, heads: int, head_dim: int,
                                seq_len: int) -> float:
    """Training FLOPs per token of a decoder as torchtitan counts them for MFU.

    ``6 * parameters + 12 * layers * heads * head_dim * seq_len``: ``parameters`` without the
    embedding table (unless it is tied to the output head); the attention term counts the full
    (not causal) score matrix and no recomputation (pytorch/torchtitan,
    ``torchtitan/models/utils.py``, ``quadratic_attention_flops_per_token``, whose
    ``6 * heads * (qk_head_dim + v_head_dim) * seq_len`` per layer is this with equal head dims).
    """
    return float(6 * parameters + 12 * layers * heads * head_dim * seq_len)


@dataclass(slots=True)
class RankRecord:
    """What one rank recorded: one entry per ``optimizer.step()`` that ended, and its memory.

    ``boundaries`` holds ``(optimizer key, end, gpu_seconds, flops, tokens)`` per optimizer step:
    the rank's virtual time when the step's compute ends, and the running totals of its GPU
    seconds, counted FLOPs and tokens at that moment.
    """

    rank: int
    boundaries: list[tuple[int, float, float, float, int]] = field(default_factory=list)
    parameters: int = 0  # parameters its optimizers step (a DTensor at its global size)
    flops_per_token: float | None = None  # model_flops(), if the program gave it
    peak_memory: int | None = None  # allocator blocks
    peak_by_category: dict[str, int] = field(default_factory=dict)

    def steps(self) -> list[tuple[float, float, float, float, int]]:
        """The rank's steps: ``(start, end, gpu_seconds, flops, tokens)`` each, ``start`` the
        previous step's end (0 for the first)."""
        keys = [b[0] for b in self.boundaries]
        last = _cycle_end(keys)
        ends = [b for b in self.boundaries if b[0] == last]
        steps = []
        previous = (0.0, 0.0, 0.0, 0)
        for _, end, seconds, flops, count in ends:
            steps.append((previous[0], end, seconds - previous[1], flops - previous[2],
                          count - previous[3]))
            previous = (end, seconds, flops, count)
        return steps


def _cycle_end(keys: Sequence[int]) -> int | None:
    """The optimizer whose step ends a training step: the last of the optimizers that step once
    before the first of them steps again (one optimizer: itself; a container of several: the
    container, whose hook runs after its members')."""
    seen: list[int] = []
    for key in keys:
        if key in seen:
            break
        seen.append(key)
    return seen[-1] if seen else None


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over ranks: its least, median and largest value, and the rank with the largest."""

    min: float
    median: float
    max: float
    argmax: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        ordered = sorted(values)
        n = len(ordered)
        median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        argmax = max(range(n), key=lambda i: (values[i], -i))
        return cls(ordered[0], median, ordered[-1], argmax)

    def to_dict(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "max": self.max, "argmax": self.argmax}


@dataclass(frozen=True, slots=True)
class StepReport:
    """The figures of a predicted run's steady step; ``table()`` prints them, ``to_dict()`` keeps them.

    Times are virtual seconds. A figure that is ``None`` is unknown; ``unknown`` says why.
    """

    world_size: int
    device: str | None  # the modelled GPU (compute="gpu:..."), None without one
    step_times: tuple[float, ...]  # each step's time: the slowest rank's
    tokens_per_gpu: float | None  # tokens per step per GPU in the steady step
    tokens_per_second_per_gpu: float | None
    flops_per_token: float | None
    flops_per_token_source: str
    peak_flops: float | None  # the device's dense bfloat16 peak, FLOP/s
    mfu: float | None  # fraction, 0..1
    counted_flops: float | None  # FLOPs the GPU clock charged in the steady step, mean over ranks
    hfu: float | None
    compute: Spread | None  # seconds of the steady step, over ranks
    exposed_communication: Spread | None
    idle: Spread | None
    peak_memory: Spread | None  # allocator blocks, over ranks
    peak_memory_by_category: dict[str, int]  # of the rank with the largest peak
    peak_memory_by_rank: tuple[int, ...]  # allocator blocks, rank by rank (to_dict; the table shows the spread)
    trace: str | None
    unknown: dict[str, str] = field(default_factory=dict)

    @property
    def steady_step(self) -> int | None:
        """The step the figures are of (1-based): the last one; None when no step ended."""
        return len(self.step_times) or None

    @property
    def step_time(self) -> float | None:
        """The steady step's time, seconds."""
        return self.step_times[-1] if self.step_times else None

    def to_dict(self) -> dict[str, Any]:
        """The report as plain values (JSON-ready)."""
        spreads = {name: None if value is None else value.to_dict()
                   for name, value in (("compute", self.compute),
                                       ("exposed_communication", self.exposed_communication),
                                       ("idle", self.idle), ("peak_memory", self.peak_memory))}
        return {
            "world_size": self.world_size, "device": self.device,
            "step_times": list(self.step_times), "steady_step": self.steady_step,
            "step_time": self.step_time, "tokens_per_gpu": self.tokens_per_gpu,
            "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu,
            "flops_per_token": self.flops_per_token,
            "flops_per_token_source": self.flops_per_token_source,
            "peak_flops": self.peak_flops, "mfu": self.mfu, "counted_flops": self.counted_flops,
            "hfu": self.hfu, **spreads,
            "peak_memory_by_category": dict(self.peak_memory_by_category),
            "peak_memory_by_rank": list(self.peak_memory_by_rank),
            "trace": self.trace, "unknown": dict(self.unknown),
        }

    def table(self) -> str:
        """The report as lines of text."""
        lines = [f"step report: {self.world_size} rank{'s' if self.world_size != 1 else ''}"
                 + (f" on {self.device}" if self.device else " (no GPU model: give --compute gpu:DEVICE)")]
        if not self.step_times:
            lines.append("step time          unknown (no rank ran optimizer.step())")
        else:
            shown = ", ".join(_ms(t) for t in self.step_times[:8])
            more = f", ... ({len(self.step_times)} steps)" if len(self.step_times) > 8 else ""
            lines.append(f"step times         {shown}{more}")
            lines.append(f"steady step        step {self.steady_step}: {_ms(self.step_time)}")
        lines.append("tokens/s per GPU   " + (
            f"{self.tokens_per_second_per_gpu:,.1f} ({self.tokens_per_gpu:,.0f} tokens per step per GPU)"
            if self.tokens_per_second_per_gpu is not None else self._why("tokens")))
        lines.append("MFU                " + (
            f"{100 * self.mfu:.3g}% ({self.flops_per_token:,.0f} FLOPs per token, "
            f"{self.flops_per_token_source}; of the bfloat16 peak {self.peak_flops / 1e12:.1f} TFLOP/s)"
            if self.mfu is not None and self.peak_flops is not None and self.flops_per_token is not None
            else self._why("mfu")))
        lines.append("hardware FLOPs     " + (
            f"{100 * self.hfu:.3g}% ({self.counted_flops:.4g} FLOPs counted per GPU, recompute included)"
            if self.hfu is not None and self.counted_flops is not None else self._why("hfu")))
        if self.peak_memory is not None:
            m = self.peak_memory
            lines.append(f"peak memory        min {_gib(m.min)}, median {_gib(m.median)}, max "
                         f"{_gib(m.max)} (rank {m.argmax}), allocator blocks")
            parts = ", ".join(f"{name} {_gib(value)}" for name, value in
                              self.peak_memory_by_category.items() if value)
            if parts:
                lines.append(f"  at rank {m.argmax}'s peak: {parts}")
        for name, spread in (("compute", self.compute),
                             ("exposed comm", self.exposed_communication), ("idle", self.idle)):
            if spread is not None:
                lines.append(f"{name:<19}min {_ms(spread.min)}, median {_ms(spread.median)}, "
                             f"max {_ms(spread.max)} (rank {spread.argmax}), per rank")
        lines.append("trace              " + (f"{self.trace} (open in ui.perfetto.dev)" if self.trace
                                             else "none: give --trace FILE.json (trace= in spawn) "
                                                  "for a Perfetto trace"))
        return "\n".join(lines)

    def _why(self, name: str) -> str:
        return f"unknown ({self.unknown.get(name, 'not recorded')})"

    def __str__(self) -> str:
        return self.table()


def _ms(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds * 1e3:.4f} ms"


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.3f} MiB"


def build(records: Sequence[RankRecord], *, device: Any = None, tokens_per_step: int | None = None,
          flops_per_token: float | None = None, trace: str | None = None) -> StepReport:
    """Make the report from every rank's record.

    Args:
        records: one per rank, in rank order.
        device: the modelled GPU (a ``Device``), or None.
        tokens_per_step: tokens each rank processes per step (``--tokens-per-step``); else the
            tokens the ranks reported with ``tokens()``.
        flops_per_token: model FLOPs per token (``--flops-per-token``); else the program's
            ``model_flops()``, else 6 x the parameters the optimizers step.
        trace: the path of the run's trace file, if one was written.
    """
    unknown: dict[str, str] = {}
    world = len(records)
    per_rank = [r.steps() for r in records]
    count = min((len(s) for s in per_rank), default=0)
    step_times = tuple(max(s[k][1] - s[k][0] for s in per_rank) for k in range(count))
    peak = device.peak("bfloat16") if device is not None and "bfloat16" in device.peak_flops else None
    tokens_per_gpu = tps = fpt = mfu = counted = hfu = None
    compute = exposed = idle = None
    source = ""
    if count:
        step = step_times[-1]
        steady = [s[count - 1] for s in per_rank]
        if tokens_per_step is not None:
            tokens_per_gpu = float(tokens_per_step)
        elif any(s[4] for s in steady):
            tokens_per_gpu = sum(s[4] for s in steady) / world
        else:
            unknown["tokens"] = ("give --tokens-per-step N, or call "
                                 "simcluster.predict.report.tokens(n) in each step")
        if tokens_per_gpu is not None and step > 0:
            tps = tokens_per_gpu / step
        given = [r.flops_per_token for r in records if r.flops_per_token is not None]
        if flops_per_token is not None:
            fpt, source = float(flops_per_token), "given"
        elif given:
            fpt, source = max(given), "from model_flops()"
        elif max(r.parameters for r in records) > 0:
            fpt = 6.0 * max(r.parameters for r in records)
            source = f"6 x {max(r.parameters for r in records):,} parameters, no attention term"
        if peak is None:
            unknown["mfu"] = unknown["hfu"] = "give --compute gpu:DEVICE for the device's peak"
        elif tps is None:
            unknown["mfu"] = "needs tokens per step"
        elif fpt is None:
            unknown["mfu"] = "no optimizer parameters seen: give --flops-per-token"
        else:
            mfu = fpt * tps / peak
        if device is not None:
            counted = sum(s[3] for s in steady) / world
            if peak is not None and step > 0:
                hfu = counted / (step * peak)
            compute = Spread.of([s[2] for s in steady])
            exposed = Spread.of([max(0.0, (s[1] - s[0]) - s[2]) for s in steady])
            idle = Spread.of([max(0.0, step - (s[1] - s[0])) for s in steady])
        else:
            unknown.setdefault("hfu", "give --compute gpu:DEVICE")
    else:
        unknown["tokens"] = unknown["mfu"] = unknown["hfu"] = "no rank ran optimizer.step()"
    peaks = [float(r.peak_memory) for r in records if r.peak_memory is not None]
    memory = Spread.of(peaks) if peaks and len(peaks) == world else None
    by_category = dict(records[memory.argmax].peak_by_category) if memory is not None else {}
    return StepReport(
        world_size=world, device=getattr(device, "name", None), step_times=step_times,
        tokens_per_gpu=tokens_per_gpu, tokens_per_second_per_gpu=tps, flops_per_token=fpt,
        flops_per_token_source=source, peak_flops=peak, mfu=mfu, counted_flops=counted, hfu=hfu,
        compute=compute, exposed_communication=exposed, idle=idle, peak_memory=memory,
        peak_memory_by_category=by_category,
        peak_memory_by_rank=tuple(int(p) for p in peaks) if memory is not None else (),
        trace=trace, unknown=unknown)

