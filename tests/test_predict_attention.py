"""Attention timed as the fused kernel (simcluster.predict.compute): times by hand, no score matrix.

``F.scaled_dot_product_attention`` on meta tensors is routed to the CUDA flash kernel while a
``GpuClock`` is entered; on CPU FakeTensors torch runs its fused CPU flash kernel, which the model
counts with torch's flash formulas. Either way the op is timed on the preset's attention curve,
with causal attention counted as half of torch's FLOPs, and no (seq x seq) matrix is made.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from simcluster.predict import H100_SXM  # noqa: E402
from simcluster.predict.compute import GpuClock, count_op  # noqa: E402
from simcluster.predict.memory import MemoryTracker  # noqa: E402

B, H, S, D = 1, 4, 8192, 128  # 8192: a measured point of the H100 attention curve (308 TFLOP/s)
LAUNCH = 5e-6
# torch's count for the forward is 2 matmuls of 2*B*H*S*S*D FLOPs; causal: half of it
FORWARD_FLOPS = 4 * B * H * S * S * D / 2          # 68,719,476,736
BACKWARD_FLOPS = 10 * B * H * S * S * D / 2        # torch's backward: 5 such matmuls, halved
FORWARD_SECONDS = LAUNCH + FORWARD_FLOPS / 308e12   # 2.2811e-4 s: compute-bound
BACKWARD_SECONDS = LAUNCH + BACKWARD_FLOPS / 308e12  # 5.6279e-4 s


def _qkv(dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    return tuple(torch.empty(B, H, S, D, dtype=dtype, requires_grad=True) for _ in range(3))


def _attention_records(clock: GpuClock) -> list[tuple[str, float, float, float]]:
    return [(r.count.name, r.count.flops, r.count.size, r.seconds) for r in clock.ops if r.count.kind == "attention"]


def test_causal_sdpa_on_meta_is_timed_as_flash_attention_forward_and_backward() -> None:
    with torch.device("meta"):
        q, k, v = _qkv()
        with GpuClock(H100_SXM) as clock:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.sum().backward()
    found = _attention_records(clock)
    assert [(name, flops, size) for name, flops, size, _ in found] == [
        ("aten._scaled_dot_product_flash_attention", FORWARD_FLOPS, S),
        ("aten._scaled_dot_product_flash_attention_backward", BACKWARD_FLOPS, S)]
    assert found[0][3] == pytest.approx(FORWARD_SECONDS, rel=1e-12)
    assert found[0][3] == pytest.approx(2.28115e-4, rel=1e-5)
    assert found[1][3] == pytest.approx(BACKWARD_SECONDS, rel=1e-12)
    assert not any(r.count.name == "aten.bmm" for r in clock.ops)  # no decomposition
    assert q.grad is not None and q.grad.shape == q.shape


def test_sdpa_on_fake_cpu_tensors_is_timed_as_the_same_attention() -> None:
    with FakeTensorMode():
        q, k, v = _qkv()
        with GpuClock(H100_SXM) as clock:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    found = _attention_records(clock)
    assert [(name, flops, size) for name, flops, size, _ in found] == [
        ("aten._scaled_dot_product_flash_attention_for_cpu", FORWARD_FLOPS, S),
        ("aten._scaled_dot_product_flash_attention_for_cpu_backward", BACKWARD_FLOPS, S)]
    assert [seconds for *_, seconds in found] == pytest.approx([FORWARD_SECONDS, BACKWARD_SECONDS], rel=1e-12)


def test_non_causal_attention_counts_torchs_full_flops() -> None:
    with torch.device("meta"):
        q, k, v = _qkv()
        with GpuClock(H100_SXM) as clock, torch.no_grad():
            F.scaled_dot_product_attention(q, k, v)
    [(name, flops, size, seconds)] = _attention_records(clock)
    assert (flops, seconds) == (2 * FORWARD_FLOPS, pytest.approx(LAUNCH + 2 * FORWARD_FLOPS / 308e12, rel=1e-12))


def test_float32_attention_on_meta_runs_the_memory_efficient_kernel() -> None:
    with torch.device("meta"):
        q, k, v = _qkv(torch.float32)
        with GpuClock(H100_SXM) as clock:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    names = [name for name, *_ in _attention_records(clock)]
    assert names == ["aten._scaled_dot_product_efficient_attention",
                     "aten._scaled_dot_product_efficient_attention_backward"]


def test_the_fused_path_holds_no_score_matrix() -> None:
    # the decomposition makes B*H*S*S bfloat16 scores (512 MiB here) and their softmax; flash keeps
    # the output (8 MiB) and the float32 log-sum-exp (B*H*S*4 = 128 KiB)
    scores = B * H * S * S * 2

    def forward_peak(fused: bool) -> int:
        with torch.device("meta"):
            q, k, v = _qkv()
            tracker = MemoryTracker()
            with torch.no_grad():
                if fused:
                    with GpuClock(H100_SXM), tracker:
                        F.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    with tracker:
                        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return tracker.peak_nbytes

    assert forward_peak(fused=False) >= scores
    fused = forward_peak(fused=True)
    assert B * H * S * D * 2 + B * H * S * 4 <= fused < B * H * S * D * 2 + B * H * S * 4 + 1024


def test_masks_and_grouped_heads_are_left_to_torch() -> None:
    with torch.device("meta"):
        q = torch.empty(1, 4, 64, 16, dtype=torch.bfloat16)
        kv = torch.empty(1, 2, 64, 16, dtype=torch.bfloat16)
        mask = torch.empty(64, 64, dtype=torch.bool)
        with GpuClock(H100_SXM) as clock:
            F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
            F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    assert not _attention_records(clock)
    assert any(r.count.name == "aten.bmm" for r in clock.ops)


def test_reading_a_fake_tensors_device_costs_nothing() -> None:
    with FakeTensorMode():
        x = torch.empty(4, 4)
    assert count_op(torch.ops.prim.device.default, (x,), {}, x.device).kind == "free"
