"""Preset devices: H100 SXM, the 500 W H100 with 96 GB HBM2e of torchtitan's benchmarks, A100 80 GB SXM.

Every number is a ``Sourced`` or a ``Curve`` that says where it comes from; docs/predict.md
tabulates them. Rule 1: a number without a published source is an assumption, and its source
string says so and why the value chosen is the conservative one. Rule 2: no constant here is
fitted to an end-to-end training result (torchtitan's tokens/s): those are what the model is
checked against, not what it is made from.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from simcluster.predict.device import Curve, Device, Sourced

# ---- sources, cited once ----

_H100_SHEET = "NVIDIA H100 Tensor Core GPU data sheet, H100 SXM column"
_H100_DENSE = _H100_SHEET + " (the sheet states tensor rates with sparsity; dense is half)"
_A100_SHEET = "NVIDIA A100 Tensor Core GPU data sheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), A100 80GB SXM column"
_A100_DENSE = _A100_SHEET + " (dense; the sheet gives the sparse rate as double)"
_TITAN = ("torchtitan benchmarks/llama3_h100_202412_torchtitan.md, 'Hardware': "
          "'Each H100 GPU is equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth', "
          "'We used the default 500W power limit'")
_TITAN_PEAK = ("torchtitan benchmarks/llama3_h100_202412_torchtitan.md, footnote 2: 'the actual peak TFLOPs number "
               "is between SXM and NVL, and we don't know its exact value'; this preset takes the H100 NVL rate, "
               "the lower bound (conservative): NVIDIA H100 data sheet, H100 NVL column, as reproduced in "
               "third-party tables (BF16 ~835 TFLOPS dense, FP8 ~1670 dense); the data-sheet PDF itself was not "
               "reachable from where this was written")
_NVL_RATIO: Final = 835.0 / 989.4
"""H100 NVL / H100 SXM dense BF16 rate: applied to the dtypes no table gave for the NVL part (an assumption)."""

_LAUNCH = Sourced(5e-6, "no data-sheet figure exists; published measurements of one CUDA kernel launch "
                        "through the driver put it at about 4-6 us (susun-blog.com, 'pegainfer (3): From Launch "
                        "Overhead to CUDA Graph', CUDA 13.0); this takes the middle, 5 us, for every preset. "
                        "Eager PyTorch adds CPU dispatch time, which overlaps a busy GPU and is not modelled")

_H100_MATMUL = Curve(
    points=((2 * 1024.0 ** 3, 176.62 / 989.4), (2 * 2048.0 ** 3, 676.59 / 989.4),
            (2 * 4096.0 ** 3, 788.72 / 989.4), (2 * 8192.0 ** 3, 797.51 / 989.4)),
    x="flops",
    source="torch.matmul BF16 on square matrices, 'NVIDIA H100 80GB HBM3', PyTorch 2.7.0+cu128 (GitHub "
           "zzc0721/torch-performance-test-data issue #79): 176.62, 676.59, 788.72, 797.51 TFLOPS at "
           "1024^3, 2048^3, 4096^3, 8192^3, divided by the 989.4 TFLOPS dense peak; held at the 8192^3 value "
           "beyond (the same run measured 719.72 at 10240^3; stas00/ml-engineering's MAMF table gives 794.5 "
           "TFLOPS, 80.3%, as the best H100 SXM shape). Applied to every dtype (measured in BF16 only)")

_H100_ATTENTION = Curve(
    points=((512.0, 163 / 989.4), (1024.0, 221 / 989.4), (2048.0, 265 / 989.4),
            (4096.0, 294 / 989.4), (8192.0, 308 / 989.4), (16384.0, 328 / 989.4)),
    x="seq_len",
    source="FlashAttention-2 paper (Dao, arXiv:2307.08691), Fig. 7(d): forward + backward on H100 80GB SXM5, "
           "causal, head dimension 128, 16k tokens per batch: 163, 221, 265, 294, 308, 328 TFLOPs/s at sequence "
           "length 512 ... 16k, FLOPs counted with the causal half; divided by 989.4 TFLOPS. torch's "
           "scaled_dot_product_attention docstring (2.13) names FlashAttention-2 among its CUDA kernels; "
           "FlashAttention-3 (arXiv:2407.08608) reports up to 75% of H100 peak but is not among them")

_A100_MATMUL = Curve(
    points=((2 * 1024.0 ** 3, 94.89 / 312), (2 * 2048.0 ** 3, 138.46 / 312), (2 * 4096.0 ** 3, 234.14 / 312)),
    x="flops",
    source="no published by-size measurement of an A100 SXM was found; stand-in (conservative, a 250 W part): "
           "torch.matmul BF16 on square matrices, 'NVIDIA A100-PCIE-40GB', PyTorch 2.8.0+cu128 (GitHub "
           "zzc0721/torch-performance-test-data issue #108): 94.89, 138.46, 234.14 TFLOPS at 1024^3, 2048^3, "
           "4096^3, divided by 312 TFLOPS, held beyond (8192^3 measured 215.26; stas00/ml-engineering's MAMF "
           "table gives 271.2 TFLOPS, 86.9%, as the best A100 SXM shape)")

_A100_ATTENTION = Curve(
    points=((512.0, 99 / 312), (1024.0, 131 / 312), (2048.0, 155 / 312),
            (4096.0, 182 / 312), (8192.0, 189 / 312), (16384.0, 189 / 312)),
    x="seq_len",
    source="FlashAttention-2 paper (Dao, arXiv:2307.08691), Fig. 4(d): forward + backward on A100 80GB SXM4, "
           "causal, head dimension 128, 16k tokens per batch: 99, 131, 155, 182, 189, 189 TFLOPs/s at sequence "
           "length 512 ... 16k, FLOPs counted with the causal half; divided by 312 TFLOPS")

_MEMORY_EFFICIENCY_A100 = Sourced(0.95, "NVIDIA A100 product page: 'a dynamic random-access memory (DRAM) "
                                        "utilization efficiency of 95%'")
_MEMORY_EFFICIENCY_H100 = Sourced(0.95, "no published figure for H100 was found; assumed equal to the 95% NVIDIA "
                                        "states for the A100's DRAM utilization efficiency")

# ---- the presets ----

H100_SXM: Final = Device(
    name="H100 SXM 80GB",
    peak_flops={
        "float32": Sourced(66.9e12, _H100_SHEET + ": FP32 67 TFLOPS (66.9 in the Hopper whitepaper)"),
        "tf32": Sourced(494.7e12, _H100_DENSE + ": TF32 Tensor Core 989 TFLOPS sparse"),
        "bfloat16": Sourced(989.4e12, _H100_DENSE + ": BFLOAT16 Tensor Core 1,979 TFLOPS sparse"),
        "float16": Sourced(989.4e12, _H100_DENSE + ": FP16 Tensor Core 1,979 TFLOPS sparse"),
        "float8": Sourced(1978.9e12, _H100_DENSE + ": FP8 Tensor Core 3,958 TFLOPS sparse"),
    },
    memory_bandwidth=Sourced(3.35e12, _H100_SHEET + ": GPU memory bandwidth 3.35 TB/s"),
    memory_efficiency=_MEMORY_EFFICIENCY_H100,
    memory_capacity=Sourced(80e9, _H100_SHEET + ": GPU memory 80 GB (HBM3)"),
    launch_overhead=_LAUNCH,
    matmul=_H100_MATMUL,
    attention=_H100_ATTENTION,
    power=Sourced(700.0, _H100_SHEET + ": max thermal design power up to 700 W"),
)

H100_HBM2E_500W: Final = Device(
    name="H100 96GB HBM2e 500W",
    peak_flops={
        "float32": Sourced(66.9e12 * _NVL_RATIO, _TITAN_PEAK + "; FP32 = the SXM 66.9 TFLOPS x 835/989.4 (assumed)"),
        "tf32": Sourced(494.7e12 * _NVL_RATIO, _TITAN_PEAK + "; TF32 = the SXM 494.7 TFLOPS x 835/989.4 (assumed)"),
        "bfloat16": Sourced(835e12, _TITAN_PEAK),
        "float16": Sourced(835e12, _TITAN_PEAK),
        "float8": Sourced(1670e12, _TITAN_PEAK),
    },
    memory_bandwidth=Sourced(2.4e12, _TITAN),
    memory_efficiency=_MEMORY_EFFICIENCY_H100,
    memory_capacity=Sourced(96e9, _TITAN),
    launch_overhead=_LAUNCH,
    matmul=_H100_MATMUL,
    attention=_H100_ATTENTION,
    power=Sourced(500.0, _TITAN),
    notes="Meta's Grand Teton platform as torchtitan describes it. Known: 96 GB HBM2e, 2.4 TB/s, 500 W default "
          "limit. Assumed: peak rates of the H100 NVL (lower bound per torchtitan), efficiency curves of the "
          "H100 SXM measurements (same GH100 chip; a lower power limit may lower them further).",
)

A100_SXM_80GB: Final = Device(
    name="A100 SXM 80GB",
    peak_flops={
        "float32": Sourced(19.5e12, _A100_SHEET + ": FP32 19.5 TFLOPS"),
        "tf32": Sourced(156e12, _A100_DENSE + ": TF32 Tensor Core 156 TFLOPS"),
        "bfloat16": Sourced(312e12, _A100_DENSE + ": BFLOAT16 Tensor Core 312 TFLOPS"),
        "float16": Sourced(312e12, _A100_DENSE + ": FP16 Tensor Core 312 TFLOPS"),
    },
    memory_bandwidth=Sourced(2.039e12, _A100_SHEET + ": GPU memory bandwidth 2,039 GB/s"),
    memory_efficiency=_MEMORY_EFFICIENCY_A100,
    memory_capacity=Sourced(80e9, _A100_SHEET + ": GPU memory 80 GB HBM2e"),
    launch_overhead=_LAUNCH,
    matmul=_A100_MATMUL,
    attention=_A100_ATTENTION,
    power=Sourced(400.0, _A100_SHEET + ": max TDP power 400 W"),
)

DEVICES: Final[Mapping[str, Device]] = MappingProxyType({
    "h100_sxm": H100_SXM,
    "h100_hbm2e_500w": H100_HBM2E_500W,
    "a100_sxm_80gb": A100_SXM_80GB,
})
"""The presets by name, as a command line would spell them."""
