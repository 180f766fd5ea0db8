"""Llama 3 / 3.1 in plain torch, and torchtitan's way of training it (FSDP2, activation checkpointing).

A model to predict a training step with (``examples/torch/12_predict_llama.py``): built on the
meta device at full size, sharded, and run on shapes (``simcluster torchrun --fake``), it does
the work the published torchtitan runs do, op for op where shapes matter.

The architecture (Llama 3 paper, "The Llama 3 Herd of Models", arXiv:2407.21783, section 3.1.1 and
Table 3): a decoder-only transformer of pre-norm blocks. Each block is
``h = x + attention(rms_norm(x)); out = h + feed_forward(rms_norm(h))``, with

* RMSNorm (eps 1e-5), computed in float32 and cast back, scaled by a learned weight;
* grouped-query attention: ``n_heads`` query heads of ``dim / n_heads`` (128) channels share
  ``n_kv_heads`` (8) key/value heads; rotary position embeddings (RoPE, base frequency theta
  500,000) on queries and keys; the key/value heads repeated to the query heads, then
  ``F.scaled_dot_product_attention(is_causal=True)``, as torchtitan's ``Attention`` does;
* a SwiGLU feed-forward: ``w2(silu(w1(x)) * w3(x))``, no biases anywhere;
* a token embedding (vocabulary 128,256), a final RMSNorm and an untied output projection.

The configurations (``CONFIGS``) take their numbers from the paper's Table 3 (layers 32 / 80 / 126,
model dimension 4,096 / 8,192 / 16,384, FFN dimension 14,336 / 28,672 / 53,248, attention heads
32 / 64 / 128, key/value heads 8, RoPE theta 500,000) and from torchtitan's ``llama3_configs``
(``torchtitan/models/llama3/__init__.py`` in pytorch/torchtitan), which reproduces Meta's
params.json: the same dimensions, layers and heads, the FFN size as
``compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier)`` (1024 and 1.3 for 8B, 4096 and
1.3 for 70B, 4096 and 1.2 for 405B, giving the table's sizes), and the vocabulary of 128,256
(torchtitan's ``vocab_size``; the paper speaks of 128K tokens). Llama 3.1's RoPE frequency
scaling (factor 8, low / high frequency factors 1 / 4, original context 8,192: torchtitan's
``RoPE.Config`` defaults for its "llama" scaling) changes values, not shapes, and is applied as
torchtitan's ``apply_scaling`` does.

``parallelize`` applies torchtitan's setup (``torchtitan/parallelisms/parallelize_llama.py`` as of
late 2024, commit 004b3148, the time of its published H100 benchmarks): tensor parallel first
(optional, its plan), then activation checkpointing per transformer block, then FSDP2
(``fully_shard`` on every block and on the whole model) with ``MixedPrecisionPolicy(
param_dtype=bfloat16, reduce_dtype=float32)``, the defaults of torchtitan's ``training.mixed_precision_param`` and
``mixed_precision_reduce``.

Pipeline parallel (``parallelize(..., pp_mesh=...)``, ``pipeline``) cuts the model into stages as
torchtitan's ``pipeline_llama_manual`` (``torchtitan/parallelisms/pipeline_llama.py``) does, a
contiguous range of blocks each, the embedding on the first and the norm and output on the last,
at the cuts of its ``generate_split_points``, and runs them with torch's own schedules
(``torch.distributed.pipelining``); under PP, FSDP2 does not reshard after the forward, as
torchtitan's ``apply_fsdp`` with PP enabled.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

AC_MODES = ("none", "full", "selective")
"""Activation checkpointing: none, every block recomputed, or torchtitan's selective "op" policy."""


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama 3 model (see the module docstring for the sources of the presets)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int = 128256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192
    rope_scaling: bool = True  # Llama 3.1's frequency scaling; Llama 3 has none

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def parameters(self) -> int:
        """The number of parameters (8,030,261,248 for 8B)."""
        attention = self.dim * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        block = attention + 3 * self.dim * self.ffn_dim + 2 * self.dim
        return self.n_layers * block + 2 * self.vocab_size * self.dim + self.dim

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, as torchtitan counts them for MFU (``get_num_flop_per_token``):
        6 x parameters other than the embedding, plus 12 x layers x heads x head_dim x seq_len for
        attention (the full square: causal masking is not subtracted)."""
        dense = self.parameters() - self.vocab_size * self.dim
        return 6 * dense + 12 * self.n_layers * self.n_heads * self.head_dim * seq_len


CONFIGS: dict[str, LlamaConfig] = {
    "8b": LlamaConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336),
    "70b": LlamaConfig(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672),
    "405b": LlamaConfig(dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn_dim=53248),
    # a small model of the same structure, for tests and quick runs (not a published one)
    "tiny": LlamaConfig(dim=256, n_layers=2, n_heads=8, n_kv_heads=2, ffn_dim=512, vocab_size=1024,
                        max_seq_len=256),
}


def rope_frequencies(config: LlamaConfig, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (cos, sin) of the rotary angles, float32, shape (seq_len, head_dim / 2)."""
    half = config.head_dim // 2
    freqs = 1.0 / (config.rope_theta ** (torch.arange(0, half, dtype=torch.float32) * 2 / config.head_dim))
    if config.rope_scaling:  # Llama 3.1: low frequencies slowed down 8x, a smooth ramp between
        factor, low, high, original = 8.0, 1.0, 4.0, 8192.0
        wavelength = 2 * math.pi / freqs
        smooth = (original / wavelength - low) / (high - low)
        scaled = torch.where(wavelength > original / low, freqs / factor, freqs)
        middle = (wavelength >= original / high) & (wavelength <= original / low)
        freqs = torch.where(middle, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair of channels (2i, 2i+1) of ``x`` (batch, seq, heads, head_dim) by its angle,
    in float32, as torchtitan's complex multiplication does, and cast back."""
    seq = x.shape[1]
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    c, s = cos[:seq].view(1, seq, 1, -1), sin[:seq].view(1, seq, 1, -1)
    rotated = torch.stack((even * c - odd * s, even * s + odd * c), dim=-1)
    return rotated.flatten(-2).type_as(x)


class RMSNorm(nn.Module):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """x / sqrt(mean(x^2) + eps) in float32, cast back to x's dtype, times a learned weight."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class Attention(nn.Module):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """Grouped-query self-attention with rotary embeddings, through ``F.scaled_dot_product_attention``.

    Head counts follow the projections' local widths, so a tensor-parallel plan that shards
    ``wq``/``wk``/``wv`` by columns runs it on each rank's own heads.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.repeats = config.n_heads // config.n_kv_heads
        self.wq = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        k, v = _repeat_heads(k, self.repeats), _repeat_heads(v, self.repeats)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))


def _repeat_heads(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """(batch, seq, kv_heads, d) -> (batch, seq, kv_heads * repeats, d), each head ``repeats`` times."""
    if repeats == 1:
        return x
    batch, seq, heads, d = x.shape
    return x.unsqueeze(3).expand(batch, seq, heads, repeats, d).reshape(batch, seq, heads * repeats, d)


class FeedForward(nn.Module):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """SwiGLU: ``w2(silu(w1(x)) * w3(x))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """One pre-norm block: attention then feed-forward, each with a residual connection."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config.dim, config.ffn_dim)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """A Llama 3 model: token ids (batch, seq) in, logits (batch, seq, vocab) out.

    ``layers`` is an ``nn.ModuleDict`` keyed "0", "1", ... as torchtitan's (what ``parallelize``
    and a pipeline split address). The RoPE tables are non-persistent buffers, made again by
    ``init_weights`` after ``to_empty``.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(config) for i in range(config.n_layers)})
        self.norm: RMSNorm | None = RMSNorm(config.dim, config.norm_eps)  # None in a pipeline stage
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        cos, sin = rope_frequencies(config, config.max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self) -> None:
        """Initialise with torchtitan's standard deviations: 0.02 for q/k/v/w1, 0.02 / sqrt(2 x
        (layer + 1)) for wo/w2/w3, dim^-0.5 for the output projection, 1 for the embedding; norms
        at 1; RoPE tables recomputed. torchtitan truncates its normals at a few deviations; torch
        2.13's ``trunc_normal_`` does so by rejection (reading values, which a shape-only run
        cannot), so plain normals are drawn here."""
        with warnings.catch_warnings():  # DTensor's note that random ops on a CPU mesh differ from CUDA's
            warnings.filterwarnings("ignore", "DTensor random operators", UserWarning)
            self._init_weights()

    def _init_weights(self) -> None:
        with torch.no_grad():
            cos, sin = rope_frequencies(self.config, self.config.max_seq_len)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)
        if self.tok_embeddings is not None:  # a pipeline stage holds only its own parts
            nn.init.normal_(self.tok_embeddings.weight)
        for key, block in self.layers.items():  # keyed by layer number, in a stage too
            depth_std = 0.02 / (2 * (int(key) + 1)) ** 0.5
            for name, module in block.named_modules():
                if isinstance(module, nn.Linear):
                    std = depth_std if name.endswith(("wo", "w2", "w3")) else 0.02
                    nn.init.normal_(module.weight, mean=0.0, std=std)
                elif isinstance(module, RMSNorm):
                    nn.init.ones_(module.weight)
        if self.norm is not None:
            nn.init.ones_(self.norm.weight)
        if self.output is not None:
            nn.init.normal_(self.output.weight, mean=0.0, std=self.config.dim ** -0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of ``tokens``; in a pipeline stage (``split_stage``) whose embedding, norm or
        output was removed, the stage's input passes that part by, as torchtitan's model does."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        rope = (self.rope_cos, self.rope_sin)
        for block in self.layers.values():
            h = block(h, rope)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def build(name_or_config: str | LlamaConfig, *, seq_len: int | None = None, device: Any = "meta") -> Llama:
    """Build a model of a preset (``"8b"``, ``"70b"``, ``"405b"``, ``"tiny"``) or a config.

    On the meta device (the default, as torchtitan builds it before sharding) no memory is taken;
    ``seq_len`` sizes the RoPE tables (torchtitan sets ``max_seq_len`` to the training length).
    """
    config = CONFIGS[name_or_config.lower()] if isinstance(name_or_config, str) else name_or_config
    if seq_len is not None:
        config = replace(config, max_seq_len=seq_len)
    with torch.device(device):
        return Llama(config)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """torchtitan's loss: cross entropy over the flattened tokens, the logits cast to float32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


# ---- torchtitan's parallelisation ----

SAVED_OPS = frozenset({
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    # the CPU spelling of the flash kernel, which fake CPU tensors run outside a GpuClock
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
})
"""The ops whose outputs selective "op" checkpointing keeps (torchtitan's ``_save_list``)."""


def selective_policy() -> Callable[..., Any]:
    """A fresh policy for ``create_selective_checkpoint_contexts``: torchtitan's "op" rule.

    Keep the outputs of attention, reduce-scatter and matmuls, but of the matmuls only every
    other one (the 1st, 3rd, ... of a block's forward are kept, the 2nd, 4th, ... recomputed);
    everything else (norms, activations, RoPE, casts) is recomputed in the backward. The matmul
    count is kept separately for the forward and for the recomputation, so both number them alike.
    """
    from torch.utils.checkpoint import CheckpointPolicy

    counts: defaultdict[bool, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func == torch.ops.aten.mm.default:
            counts[ctx.is_recompute] += 1
            keep = counts[ctx.is_recompute] % 2 == 1
        else:
            keep = func in SAVED_OPS
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def apply_activation_checkpointing(model: Llama, mode: str) -> None:
    """Wrap every transformer block for activation checkpointing, as torchtitan's ``apply_ac``.

    ``"full"``: the block keeps only its input and recomputes the rest in the backward.
    ``"selective"``: torchtitan's selective "op" mode (``selective_policy``).
    ``"none"``: nothing.
    """
    if mode not in AC_MODES:
        raise ValueError(f"activation checkpointing {mode!r}: expected one of {', '.join(AC_MODES)}")
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    def contexts() -> Any:
        return create_selective_checkpoint_contexts(selective_policy())

    for name, block in list(model.layers.items()):
        if mode == "full":
            wrapped = checkpoint_wrapper(block, preserve_rng_state=False)
        else:
            wrapped = checkpoint_wrapper(block, context_fn=contexts, preserve_rng_state=False)
        model.layers[name] = wrapped


def apply_tensor_parallel(model: Llama, tp_mesh: Any) -> None:
    """Shard the model over ``tp_mesh`` with torchtitan's plan (``apply_tp``, no loss parallel).

    Embedding by rows (output sharded on the sequence), norms sequence-parallel, q/k/v, w1 and w3
    by columns, wo and w2 by rows (outputs sharded on the sequence), the output projection by
    columns with a replicated output. Heads and the FFN width must divide by the degree.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }  # a pipeline stage has only some of these parts
    parallelize_module(model, tp_mesh, {name: style for name, style in plan.items()
                                        if getattr(model, name) is not None})
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None),
                                            desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })


def apply_fsdp(model: Llama, dp_mesh: Any, *, param_dtype: torch.dtype = torch.bfloat16,
               reduce_dtype: torch.dtype = torch.float32) -> None:
    """FSDP2 as torchtitan's ``apply_fsdp``: ``fully_shard`` each block, then the whole model.

    Every block but the last reshards its parameters after the forward (the last one's are needed
    again at once by the backward); the root reshards.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    last = len(model.layers) - 1
    for name, block in model.layers.items():
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=int(name) < last)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=True)


def parallelize(model: Llama, *, dp_mesh: Any, tp_mesh: Any = None, ac: str = "selective",
                param_dtype: torch.dtype = torch.bfloat16, reduce_dtype: torch.dtype = torch.float32,
                pp_mesh: Any = None, pp_schedule: str = "1F1B", pp_microbatches: int | None = None,
                pp_stages_per_rank: int | None = None) -> Any:
    """torchtitan's order: tensor parallel (when ``tp_mesh`` is given), activation checkpointing
    (``ac``: ``"none"``, ``"full"``, ``"selective"``), then FSDP2 over ``dp_mesh``. Returns the model.

    With ``pp_mesh`` (pipeline parallel), the model is first cut into stages (``pipeline``), each
    part is parallelised as above (FSDP2 without resharding after the forward, as torchtitan does
    under PP; no FSDP2 when ``dp_mesh`` is None), and the ``Pipeline`` of this rank is returned.
    """
    if pp_mesh is not None:
        def parallelize_part(part: Llama) -> None:
            if tp_mesh is not None:
                apply_tensor_parallel(part, tp_mesh)
            apply_activation_checkpointing(part, ac)
            if dp_mesh is not None:
                apply_fsdp_to_stage(part, dp_mesh, param_dtype=param_dtype, reduce_dtype=reduce_dtype)
        return pipeline(model, pp_mesh, schedule=pp_schedule, microbatches=pp_microbatches,
                        stages_per_rank=pp_stages_per_rank, parallelize_part=parallelize_part)
    if tp_mesh is not None:
        apply_tensor_parallel(model, tp_mesh)
    apply_activation_checkpointing(model, ac)
    apply_fsdp(model, dp_mesh, param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    return model


# ---- pipeline parallel, as torchtitan splits Llama ----

def stage_layers(n_layers: int, num_stages: int) -> list[range]:
    """The layers of each stage, as torchtitan's ``generate_split_points`` places the cuts.

    Each stage gets ``n_layers // num_stages``; of the rest, one more goes to each middle stage in
    turn (the first stage, which also embeds, never gets one) and what is still left to the last.
    """
    if not 1 <= num_stages <= n_layers:
        raise ValueError(f"{num_stages} pipeline stages for {n_layers} layers: need 1 to {n_layers}")
    base, extra = divmod(n_layers, num_stages)
    cuts = [0]
    for stage in range(num_stages - 1):
        step = base + 1 if stage > 0 and extra > 0 else base
        extra -= step - base
        cuts.append(cuts[-1] + step)
    cuts.append(n_layers)
    return [range(start, stop) for start, stop in zip(cuts, cuts[1:])]


def split_stage(model: Llama, stage_index: int, num_stages: int, layers: range) -> Llama:
    """The part of ``model`` that stage ``stage_index`` runs, as torchtitan's ``pipeline_llama_manual``
    cuts a stage: the transformer blocks of ``layers`` (keyed by their numbers in the whole model),
    the embedding on the first stage only, the final norm and output projection on the last only
    (the others are None, and ``Llama.forward`` passes by them).

    torchtitan deep-copies the whole model and deletes the rest; here the part takes ``model``'s
    own modules instead (a FakeTensor cannot be deep-copied without reading its data pointer), so
    the parts of one model share nothing with each other but do share with ``model``: parallelise
    and train the parts, not ``model``.
    """
    part: Llama = Llama.__new__(Llama)
    nn.Module.__init__(part)
    part.config = model.config
    part.tok_embeddings = model.tok_embeddings if stage_index == 0 else None
    part.layers = nn.ModuleDict({key: block for key, block in model.layers.items() if int(key) in layers})
    last = stage_index == num_stages - 1
    part.norm = model.norm if last else None
    part.output = model.output if last else None
    part.register_buffer("rope_cos", model.rope_cos, persistent=False)
    part.register_buffer("rope_sin", model.rope_sin, persistent=False)
    return part


def apply_fsdp_to_stage(part: Llama, dp_mesh: Any, *, param_dtype: torch.dtype = torch.bfloat16,
                        reduce_dtype: torch.dtype = torch.float32) -> None:
    """FSDP2 on a pipeline stage as torchtitan's ``apply_fsdp`` with PP enabled: ``fully_shard``
    each block and the stage, none resharding after the forward ("to avoid per-microbatch
    all-gathers, which can be expensive and non-overlapped", its comment)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for block in part.layers.values():
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(part, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)


@dataclass
class Pipeline:
    """One rank's share of a pipeline-parallel model: its stages' parts, their ``PipelineStage``s
    and the schedule that runs them. ``parameters``, ``to_empty`` and ``init_weights`` act on
    every part, so a training loop reads as it does without PP; ``step`` runs one batch."""

    parts: list[Llama]
    stages: list[Any]
    schedule: Any

    @property
    def is_first(self) -> bool:
        """Whether this rank holds the first stage (the one that takes the tokens)."""
        return any(stage.is_first for stage in self.stages)

    @property
    def is_last(self) -> bool:
        """Whether this rank holds the last stage (the one that computes the loss)."""
        return any(stage.is_last for stage in self.stages)

    def parameters(self) -> list[nn.Parameter]:
        return [p for part in self.parts for p in part.parameters()]

    def to_empty(self, *, device: Any) -> Pipeline:
        for part in self.parts:
            part.to_empty(device=device)
        return self

    def init_weights(self) -> None:
        for part in self.parts:
            part.init_weights()

    def step(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
        """Forward and backward of one batch through the schedule (split into its microbatches);
        the mean of the microbatches' losses on the rank of the last stage, else None."""
        losses: list[torch.Tensor] = []
        if self.is_first and self.is_last:
            self.schedule.step(tokens, target=labels, losses=losses)
        elif self.is_first:
            self.schedule.step(tokens)
        elif self.is_last:
            self.schedule.step(target=labels, losses=losses)
        else:
            self.schedule.step()
        return torch.mean(torch.stack(losses)) if self.is_last else None


def pipeline(model: Llama, pp_mesh: Any, *, schedule: str = "1F1B", microbatches: int | None = None,
             stages_per_rank: int | None = None, device: Any = None,
             parallelize_part: Callable[[Llama], None] | None = None,
             loss: Callable[..., torch.Tensor] = loss_fn) -> Pipeline:
    """Cut ``model`` into pipeline stages over ``pp_mesh`` and build this rank's ``Pipeline``.

    ``schedule`` is a name ``torch.distributed.pipelining.schedules.get_schedule_class`` knows
    (``"GPipe"``, ``"1F1B"``, ``"Interleaved1F1B"``, ...). A single-stage schedule gives each rank one
    stage; a multi-stage one ``stages_per_rank`` (default 2, torchtitan's), stage ``s`` of rank ``r``
    being ``r + s x degree`` (torchtitan's "loop" style). ``microbatches`` defaults to the pipeline
    degree (torchtitan's ``pipeline_parallel_microbatches`` default). Each part is given to
    ``parallelize_part`` (tensor parallel, checkpointing, FSDP2) before its ``PipelineStage`` is
    made; the parts stay on ``model``'s device (meta: call ``to_empty`` and ``init_weights``).
    """
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    schedule_class = get_schedule_class(schedule)
    single = issubclass(schedule_class, PipelineScheduleSingle)
    per_rank = 1 if single else (stages_per_rank or 2)
    if single and stages_per_rank not in (None, 1):
        raise ValueError(f"schedule {schedule!r} runs one stage per rank, not {stages_per_rank}")
    degree, pp_rank = pp_mesh.size(), pp_mesh.get_local_rank()
    num_stages = degree * per_rank
    layers = stage_layers(model.config.n_layers, num_stages)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
    parts, stages = [], []
    for index in range(pp_rank, num_stages, degree):
        part = split_stage(model, index, num_stages, layers[index])
        if parallelize_part is not None:
            parallelize_part(part)
        parts.append(part)
        stages.append(PipelineStage(part, index, num_stages, device, group=pp_mesh.get_group()))
    runner = schedule_class(stages[0] if single else stages, n_microbatches=microbatches or degree,
                            loss_fn=loss)
    return Pipeline(parts, stages, runner)
