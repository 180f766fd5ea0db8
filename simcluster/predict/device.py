"""A GPU as numbers: peak throughput per dtype, memory bandwidth, launch overhead, efficiency curves.

Owns the ``Device`` description and the roofline that turns one op's FLOPs and bytes into
seconds on it (``Device.op_time``). Knows nothing of torch: the counting of FLOPs and bytes
from aten ops lives in ``simcluster.predict.compute``, which imports torch; importing this
module does not.

Rule 1: every number carries its source. A constant is a ``Sourced`` (value + where it comes
from); an efficiency curve is a ``Curve`` whose ``source`` names the measurement its points are
read from. Where no published figure was found the source says so and names the assumption.
Rule 2: the model is a roofline with a floor. An op takes
``launch_overhead + max(flops / (peak[dtype] * efficiency(size)), nbytes / (bandwidth * memory_efficiency))``;
nothing here is tuned to a published end-to-end training figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

OpKind = Literal["matmul", "attention", "memory", "free"]
"""How an op is timed: against the matmul curve, the attention curve, bandwidth alone, or not at all."""

DTYPES: Final = ("float32", "tf32", "bfloat16", "float16", "float8")
"""The keys of ``Device.peak_flops``: ``tf32`` is float32 matmul on tensor cores."""


@dataclass(frozen=True, slots=True)
class Sourced:
    """A number and where it comes from (a data sheet, a paper, a measurement, or a stated assumption)."""

    value: float
    source: str

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ValueError(f"Sourced(value={self.value!r}): source is empty; "
                             "say where the number comes from, or that it is an assumption")
        if not math.isfinite(self.value) or self.value < 0:
            raise ValueError(f"Sourced(value={self.value!r}): must be a finite number >= 0")


@dataclass(frozen=True, slots=True)
class Curve:
    """Achieved fraction of peak throughput as a function of problem size.

    Piecewise-linear in ``log(size)`` between ``points`` (``(size, fraction)``, sizes increasing),
    held constant beyond the first and the last point. ``x`` names what ``size`` measures:
    ``"flops"`` (FLOPs of one matmul) or ``"seq_len"`` (the key length of one attention call).
    """

    points: tuple[tuple[float, float], ...]
    x: Literal["flops", "seq_len"]
    source: str

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("Curve(points=()): needs at least one (size, fraction) point")
        if not self.source.strip():
            raise ValueError("Curve(source=''): say which measurement the points are read from")
        sizes = [size for size, _ in self.points]
        if any(size <= 0 for size in sizes) or sizes != sorted(set(sizes)):
            raise ValueError(f"Curve(points={self.points!r}): sizes must be > 0 and strictly increasing")
        if any(not 0.0 < fraction <= 1.0 for _, fraction in self.points):
            raise ValueError(f"Curve(points={self.points!r}): every fraction must lie in (0, 1]")

    def __call__(self, size: float) -> float:
        """Return the fraction of peak reached at ``size``."""
        points = self.points
        if size <= points[0][0]:
            return points[0][1]
        if size >= points[-1][0]:
            return points[-1][1]
        at = math.log(size)
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if size <= x1:
                t = (at - math.log(x0)) / (math.log(x1) - math.log(x0))
                return y0 + t * (y1 - y0)
        return points[-1][1]  # pragma: no cover - the loop returns for every size inside the range


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU, described by the numbers the op time model needs, each with its source.

    Build your own with the same fields, or start from a preset with ``dataclasses.replace``.
    ``peak_flops`` maps a dtype key (``DTYPES``) to dense (no sparsity) FLOP/s; a dtype the GPU has
    no tensor-core rate for (float8 on an A100) is left out.
    """

    name: str
    peak_flops: Mapping[str, Sourced]
    memory_bandwidth: Sourced   # bytes/s, the data sheet's peak
    memory_efficiency: Sourced  # fraction of memory_bandwidth a streaming kernel reaches
    memory_capacity: Sourced    # bytes
    launch_overhead: Sourced    # seconds added to every kernel
    matmul: Curve               # x = FLOPs of the matmul
    attention: Curve            # x = key sequence length, FLOPs counted as FlashAttention-2's paper counts them
    power: Sourced | None = None  # watts; informational
    notes: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.peak_flops) - set(DTYPES))
        if unknown:
            raise ValueError(f"Device(name={self.name!r}): unknown peak_flops keys {unknown}; "
                             f"valid: {', '.join(DTYPES)}")
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))

    def __hash__(self) -> int:  # peak_flops is a mapping: hash what equal devices share
        return hash((self.name, self.memory_bandwidth, self.matmul, self.attention))

    def __repr__(self) -> str:
        peaks = ", ".join(f"{k}={v.value / 1e12:g}T" for k, v in self.peak_flops.items())
        return (f"<Device {self.name!r} {peaks}, {self.memory_bandwidth.value / 1e12:g} TB/s, "
                f"{self.memory_capacity.value / 1e9:g} GB>")

    def peak(self, dtype: str) -> float:
        """Return the dense peak FLOP/s for ``dtype`` (a ``DTYPES`` key).

        Raises:
            ValueError: the device has no peak for ``dtype``.
        """
        try:
            return self.peak_flops[dtype].value
        except KeyError:
            raise ValueError(f"Device.peak(dtype={dtype!r}): {self.name} has no peak for {dtype}; "
                             f"known: {', '.join(self.peak_flops)}; add one with "
                             "dataclasses.replace(device, peak_flops={...})") from None

    def op_time(self, *, kind: OpKind, flops: float = 0.0, nbytes: float = 0.0,
                dtype: str = "bfloat16", size: float = 0.0) -> float:
        """Return the seconds one kernel takes on this device.

        ``free`` ops (views, metadata) take 0. Others take ``launch_overhead`` plus the larger of
        their compute time and their memory time. Compute time is ``flops / (peak(dtype) * curve(size))``
        with the matmul curve (``size`` = FLOPs, taken from ``flops`` when 0) or the attention curve
        (``size`` = key sequence length); ``memory`` ops have no compute time.
        """
        if kind == "free":
            return 0.0
        memory = nbytes / (self.memory_bandwidth.value * self.memory_efficiency.value)
        compute = 0.0
        if kind == "matmul" and flops > 0:
            compute = flops / (self.peak(dtype) * self.matmul(size or flops))
        elif kind == "attention" and flops > 0:
            compute = flops / (self.peak(dtype) * self.attention(size))
        return self.launch_overhead.value + max(compute, memory)

    def sources(self) -> dict[str, str]:
        """Return every number's source, keyed by field (``peak_flops.bfloat16``, ``matmul``, ...)."""
        found = {f"peak_flops.{k}": v.source for k, v in self.peak_flops.items()}
        for name in ("memory_bandwidth", "memory_efficiency", "memory_capacity", "launch_overhead", "power"):
            value = getattr(self, name)
            if value is not None:
                found[name] = value.source
        found["matmul"] = self.matmul.source
        found["attention"] = self.attention.source
        return found
