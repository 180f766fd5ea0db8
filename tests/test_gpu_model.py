"""The GPU compute model (simcluster.predict): op times against hand-computed ones, presets' sources.

Times are virtual (predicted seconds on a modelled GPU), never this machine's wall clock. The
tests that run aten ops need torch and skip without it; those on ``Device`` alone do not.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import subprocess
import sys
from typing import Any

import pytest

from simcluster.predict import A100_SXM_80GB, DEVICES, H100_HBM2E_500W, H100_SXM, Curve, Device, Sourced

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="needs torch (pip install 'simcluster[torch]')")

LAUNCH = 5e-6                  # every preset's launch_overhead
H100_BW = 3.35e12 * 0.95       # data-sheet bandwidth x memory_efficiency


# ---- Device alone: no torch ----


def test_matmul_of_known_shape_on_h100_takes_the_hand_computed_time() -> None:
    # C[4096, 4096] = A[4096, 4096] @ B[4096, 4096] in bfloat16 on an H100 SXM:
    #   FLOPs       = 2 * 4096**3                       = 137,438,953,472
    #   efficiency  = 788.72 / 989.4 (the curve's 4096^3 point, measured)
    #   compute     = 137,438,953,472 / (989.4e12 * 788.72 / 989.4) = 1.742557e-4 s
    #   bytes       = 3 matrices * 4096 * 4096 * 2 B     = 100,663,296
    #   memory      = 100,663,296 / (3.35e12 * 0.95)     = 3.1630e-5 s   (less: compute-bound)
    #   time        = 5e-6 launch + 1.742557e-4          = 1.792557e-4 s
    flops, nbytes = 2 * 4096 ** 3, 3 * 4096 * 4096 * 2
    seconds = H100_SXM.op_time(kind="matmul", flops=flops, nbytes=nbytes, dtype="bfloat16")
    assert seconds == pytest.approx(LAUNCH + flops / 788.72e12, rel=1e-12)
    assert seconds == pytest.approx(1.792557e-4, rel=1e-6)


def test_memory_bound_op_takes_bytes_over_bandwidth() -> None:
    # an elementwise add of two bfloat16 [4096, 4096] tensors reads 2 and writes 1: 100,663,296 bytes
    #   100,663,296 / (3.35e12 * 0.95) = 3.16303e-5 s, plus the 5 us launch
    nbytes = 3 * 4096 * 4096 * 2
    seconds = H100_SXM.op_time(kind="memory", nbytes=nbytes)
    assert seconds == pytest.approx(LAUNCH + nbytes / H100_BW, rel=1e-12)
    assert seconds == pytest.approx(3.66303e-5, rel=1e-5)


def test_a_tiny_op_costs_the_launch_overhead_and_a_view_costs_nothing() -> None:
    for device in DEVICES.values():
        tiny = device.op_time(kind="memory", nbytes=24)
        assert device.launch_overhead.value <= tiny < device.launch_overhead.value * 1.001
        assert device.op_time(kind="matmul", flops=2 * 4 ** 3, nbytes=96) >= device.launch_overhead.value
        assert device.op_time(kind="free", flops=1e12, nbytes=1e12) == 0.0


def test_dtype_picks_its_peak() -> None:
    flops = 2 * 8192 ** 3  # on the flat top of the curve: efficiency 797.51 / 989.4
    top = H100_SXM.matmul(flops)
    for dtype, peak in (("bfloat16", 989.4e12), ("float16", 989.4e12), ("float8", 1978.9e12),
                        ("tf32", 494.7e12), ("float32", 66.9e12)):
        seconds = H100_SXM.op_time(kind="matmul", flops=flops, dtype=dtype)
        assert seconds == pytest.approx(LAUNCH + flops / (peak * top), rel=1e-12), dtype
    with pytest.raises(ValueError, match=r"^Device\.peak\(dtype='float8'\): A100 SXM 80GB has no peak for float8; "):
        A100_SXM_80GB.op_time(kind="matmul", flops=flops, dtype="float8")


def test_attention_uses_the_attention_curve_by_sequence_length() -> None:
    # 1 TFLOP of causal attention at key length 8192 on an H100: efficiency 308 / 989.4 (FA-2, Fig. 7d)
    seconds = H100_SXM.op_time(kind="attention", flops=1e12, size=8192)
    assert seconds == pytest.approx(LAUNCH + 1e12 / 308e12, rel=1e-12)


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_efficiency_curves_are_monotone_and_within_0_1(name: str) -> None:
    device = DEVICES[name]
    for curve in (device.matmul, device.attention):
        low, high = curve.points[0][0] / 100, curve.points[-1][0] * 100
        grid = [low * (high / low) ** (i / 400) for i in range(401)]
        values = [curve(x) for x in grid]
        assert all(0.0 < v <= 1.0 for v in values)
        assert all(a <= b for a, b in zip(values, values[1:]))
        for size, fraction in curve.points:
            assert curve(size) == pytest.approx(fraction, rel=1e-12)


def test_curve_interpolates_in_log_size() -> None:
    curve = Curve(points=((1e9, 0.2), (1e11, 0.6)), x="flops", source="a test")
    assert curve(1e10) == pytest.approx(0.4, rel=1e-12)  # halfway in log10 between the points
    assert curve(1.0) == 0.2 and curve(1e15) == 0.6


@pytest.mark.parametrize("points", [(), ((2.0, 0.5), (1.0, 0.6)), ((1.0, 0.0),), ((1.0, 1.5),)])
def test_curve_rejects_points_that_are_not_a_curve(points: Any) -> None:
    with pytest.raises(ValueError, match=r"^Curve\(points="):
        Curve(points=points, x="flops", source="a test")


def test_every_number_needs_a_source() -> None:
    with pytest.raises(ValueError, match=r"^Sourced\(value=1\.0\): source is empty; "):
        Sourced(1.0, " ")


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_every_preset_number_has_a_source(name: str) -> None:
    device = DEVICES[name]
    sources = device.sources()
    numbers = [f"peak_flops.{k}" for k in device.peak_flops]
    numbers += [f.name for f in dataclasses.fields(device)
                if isinstance(getattr(device, f.name), (Sourced, Curve))]
    assert sorted(numbers) == sorted(sources)
    assert all(len(text.strip()) > 20 for text in sources.values()), sources
    assert {"bfloat16", "float16", "tf32", "float32"} <= set(device.peak_flops)


def test_presets_state_what_the_data_sheets_state() -> None:
    assert H100_SXM.memory_capacity.value == 80e9 and H100_SXM.memory_bandwidth.value == 3.35e12
    assert H100_HBM2E_500W.memory_capacity.value == 96e9 and H100_HBM2E_500W.memory_bandwidth.value == 2.4e12
    assert H100_HBM2E_500W.power is not None and H100_HBM2E_500W.power.value == 500.0
    assert A100_SXM_80GB.peak("bfloat16") == 312e12 and A100_SXM_80GB.memory_bandwidth.value == 2.039e12
    assert "float8" not in A100_SXM_80GB.peak_flops


def test_users_build_their_own_device_or_change_a_preset() -> None:
    slower = dataclasses.replace(H100_SXM, name="H100 at half rate",
                                 peak_flops={"bfloat16": Sourced(494.7e12, "half of the SXM peak, a what-if")})
    assert slower.peak("bfloat16") == 494.7e12
    assert slower != H100_SXM and H100_SXM == dataclasses.replace(H100_SXM)
    assert {H100_SXM: 1}[dataclasses.replace(H100_SXM)] == 1  # usable as a key
    assert repr(slower).startswith("<Device 'H100 at half rate' bfloat16=494.7T")
    with pytest.raises(ValueError, match=r"unknown peak_flops keys \['fp64'\]"):
        Device(name="x", peak_flops={"fp64": Sourced(1.0, "a test")}, memory_bandwidth=H100_SXM.memory_bandwidth,
               memory_efficiency=H100_SXM.memory_efficiency, memory_capacity=H100_SXM.memory_capacity,
               launch_overhead=H100_SXM.launch_overhead, matmul=H100_SXM.matmul, attention=H100_SXM.attention)


def test_importing_the_device_model_does_not_import_torch() -> None:
    code = "import sys, simcluster.predict; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


# ---- aten ops on meta tensors: needs torch ----


@needs_torch
def test_aten_mm_on_meta_tensors_takes_the_hand_computed_time() -> None:
    import torch

    from simcluster.predict.compute import count_op, op_time

    a = torch.empty(4096, 4096, device="meta", dtype=torch.bfloat16)
    out = torch.ops.aten.mm.default(a, a)
    count = count_op(torch.ops.aten.mm.default, (a, a), {}, out)
    assert (count.kind, count.flops, count.nbytes, count.dtype) == ("matmul", 2 * 4096 ** 3, 3 * 4096 * 4096 * 2,
                                                                     "bfloat16")
    seconds = op_time(torch.ops.aten.mm.default, (a, a), {}, out, H100_SXM)
    assert seconds == pytest.approx(1.792557e-4, rel=1e-6)  # the arithmetic in the first test


@needs_torch
def test_aten_add_is_memory_bound_and_a_broadcast_operand_is_read_once() -> None:
    import torch

    from simcluster.predict.compute import count_op

    a = torch.empty(4096, 4096, device="meta", dtype=torch.bfloat16)
    add = torch.ops.aten.add.Tensor
    count = count_op(add, (a, a), {}, add(a, a))
    assert (count.kind, count.flops, count.nbytes) == ("memory", 0.0, 3 * 4096 * 4096 * 2)
    row = torch.empty(4096, device="meta", dtype=torch.bfloat16).expand(4096, 4096)
    assert count_op(add, (a, row), {}, add(a, row)).nbytes == (2 * 4096 * 4096 + 4096) * 2
    view = torch.ops.aten.view.default
    assert count_op(view, (a, [-1]), {}, view(a, [-1])).kind == "free"


@needs_torch
def test_a_profiler_record_function_range_costs_nothing() -> None:
    import torch

    from simcluster.predict.compute import GpuClock

    a = torch.empty(4096, 4096, device="meta", dtype=torch.bfloat16)
    with GpuClock(H100_SXM) as clock:
        with torch.profiler.record_function("optimizer step"):
            a.add(a)
    names = [record.count.name for record in clock.ops]
    assert names == ["profiler._record_function_enter_new", "aten.add", "profiler._record_function_exit"]
    assert [record.count.kind for record in clock.ops] == ["free", "memory", "free"]
    # the whole range is the one kernel: a launch plus its bytes at the memory bandwidth
    assert clock.seconds == clock.ops[1].seconds > LAUNCH


@needs_torch
def test_float32_matmul_peak_follows_torchs_matmul_precision() -> None:
    import torch

    from simcluster.predict.compute import dtype_key

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert dtype_key(torch.float32) == "float32"
        torch.set_float32_matmul_precision("high")
        assert dtype_key(torch.float32) == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)
    assert (dtype_key(torch.bfloat16), dtype_key(torch.float16), dtype_key(torch.float8_e4m3fn)) == (
        "bfloat16", "float16", "float8")


@needs_torch
def test_causal_flash_attention_counts_half_of_torchs_flops() -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from simcluster.predict.compute import count_op

    b, h, s, d = 2, 32, 8192, 128
    q = torch.empty(b, h, s, d, device="meta", dtype=torch.bfloat16)
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    with FlopCounterMode(display=False) as counter:
        out = op(q, q, q, 0.0, True)
    assert counter.get_total_flops() == 4 * b * h * s * s * d  # torch counts the full square
    count = count_op(op, (q, q, q, 0.0, True), {}, out)
    assert (count.kind, count.flops, count.size) == ("attention", 2 * b * h * s * s * d, s)
    # 1.0995e12 FLOPs at 308 TFLOP/s (FA-2 Fig. 7d, 8k) is 3.5699e-3 s; dominant over its bytes
    seconds = H100_SXM.op_time(kind=count.kind, flops=count.flops, nbytes=count.nbytes, size=count.size)
    assert seconds == pytest.approx(LAUNCH + 2 * b * h * s * s * d / 308e12, rel=1e-12)


@needs_torch
def test_a_models_forward_and_backward_on_meta_accumulate_the_sum_of_their_ops() -> None:
    import torch
    from torch import nn
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from simcluster.predict.compute import GpuClock, op_time

    class Record(TorchDispatchMode):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[Any, ...]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            self.calls.append((func, args, kwargs, out))
            return out

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256))
    model = model.to(device="meta", dtype=torch.bfloat16)
    x = torch.empty(4, 128, 256, device="meta", dtype=torch.bfloat16, requires_grad=True)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        x.grad = None
        model(x).float().pow(2).mean().backward()

    with GpuClock(H100_SXM) as clock, Record() as record:  # both see every op of the same step
        step()
    with FlopCounterMode(display=False) as counter:
        step()
    expected = math.fsum(op_time(func, args, kwargs, out, H100_SXM) for func, args, kwargs, out in record.calls)
    assert clock.count == len(record.calls) == len(clock.ops)
    assert clock.seconds == pytest.approx(expected, rel=1e-12)
    assert clock.seconds == pytest.approx(math.fsum(r.seconds for r in clock.ops), rel=1e-12)
    assert clock.flops == counter.get_total_flops() == 3 * 2 * 4 * 128 * (256 * 1024 * 2)
    assert clock.by_op()["aten.mm"][0] == 4  # two weight gradients, two input gradients
    clock.reset()
    assert (clock.seconds, clock.count, clock.ops) == (0.0, 0, [])


@needs_torch
def test_memory_efficient_attention_reads_its_sequence_length_and_mask() -> None:
    import torch

    from simcluster.predict.compute import count_op

    b, h, s, d = 1, 8, 4096, 64  # (batch, heads, seq, dim), as torch's flop counter reads it
    q = torch.empty(b, h, s, d, device="meta", dtype=torch.float16)
    op = torch.ops.aten._efficient_attention_forward.default
    args = (q, q, q, None, None, None, None, None, 0.0, 1)  # custom_mask_type=1: causal
    try:
        out = op(*args)
    except (NotImplementedError, RuntimeError) as exc:  # no meta kernel in this torch build
        pytest.skip(f"_efficient_attention_forward has no meta kernel here: {exc}")
    count = count_op(op, args, {}, out)
    assert (count.kind, count.size, count.dtype) == ("attention", s, "float16")
    assert count.flops == 2 * b * h * s * s * d  # torch's 4*b*h*s*s*d, halved for the causal mask
