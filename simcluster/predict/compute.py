"""Time aten ops on a modelled GPU: ``count_op``, ``op_time`` and the ``GpuClock`` dispatch mode.

Owns the step from an aten op, as a ``TorchDispatchMode`` sees it (the overload, its args and
kwargs, its output), to a ``Device.op_time`` call. FLOPs come from torch's own
``torch.utils.flop_counter`` registry (matmuls, convolutions, attention); bytes are the sizes of
the op's input and output tensors. Only shapes and dtypes are read, so meta tensors and
FakeTensors (shape, no data) work as well as real ones.

Rule 1: FLOPs are torch's count, except that a causal attention op counts half of them, as the
FlashAttention-2 measurements behind ``Device.attention`` count them. torch's counter has no
formula for the CPU flash kernel (``_scaled_dot_product_flash_attention_for_cpu`` and its
backward); they are counted with the formulas torch uses for the CUDA flash kernel.
Rule 2: views, metadata ops and the profiler's range markers (``torch.profiler.record_function``'s
``profiler._record_function_enter_new`` and ``profiler._record_function_exit``, which torch's
optimizers open around every ``step``) cost nothing (no kernel runs); every other op is one kernel
and pays the launch overhead.
Rule 3: attention is timed as the fused kernel. On CPU fake tensors (shape-only runs) torch
already runs its fused flash kernel (Rule 1 counts it); inside ``with GpuClock(...)``,
``F.scaled_dot_product_attention`` on meta tensors runs the CUDA flash kernel (``FusedAttention``)
rather than the bmm + softmax decomposition the meta device would run, so the op timed and the
tensors kept for backward are the fused kernel's, not a materialised score matrix.
The clock only accumulates: charging its seconds to a rank's virtual clock is the caller's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._C import _get_dispatch_mode, _TorchDispatchModeKey
from torch.fx.operator_schemas import normalize_function
from torch.utils import flop_counter as _flop_counter
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from simcluster.predict.device import Device, OpKind

_FREE = frozenset({
    "aten.detach", "aten.alias", "aten._unsafe_view", "aten.lift_fresh", "aten.empty", "aten.empty_like",
    "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided", "aten._local_scalar_dense",
    "aten.resize_", "aten.set_", "aten._reshape_alias", "aten.sym_size", "aten.sym_stride", "aten.sym_numel",
    "prim.device", "prim.layout",
})
"""Ops that launch no kernel: allocation, aliasing, reading a scalar or a tensor's device (which fake
tensors dispatch). Views are free by their schema, and so is every op of the ``profiler`` namespace
(``_FREE_NAMESPACES``)."""

_FREE_NAMESPACES = ("profiler.",)
"""Namespaces whose ops launch no kernel: ``profiler`` holds ``record_function``'s range markers,
host-side bookkeeping of the profiler."""

@dataclass(frozen=True, slots=True)
class OpCount:
    """What one op does, as the time model sees it: its kind, FLOPs, bytes moved, dtype key and size."""

    name: str
    kind: OpKind
    flops: float
    nbytes: float
    dtype: str
    size: float  # the curve's x: FLOPs for a matmul, key sequence length for attention


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One op a ``GpuClock`` timed: its count and the seconds charged."""

    count: OpCount
    seconds: float


def dtype_key(dtype: torch.dtype) -> str:
    """Return the ``Device.peak_flops`` key for a torch dtype.

    float32 maps to ``tf32`` unless ``torch.get_float32_matmul_precision()`` is ``"highest"`` (torch's
    default), as cuBLAS then may use TF32 tensor cores; every float8 dtype maps to ``float8``.
    """
    if dtype == torch.float32:
        return "float32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    name = str(dtype).removeprefix("torch.")
    return "float8" if name.startswith("float8") else name


def _tensors(tree: object) -> list[torch.Tensor]:
    """The tensors in nested tuples, lists and dicts (an op's args, kwargs or output)."""
    found: list[torch.Tensor] = []
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def _nbytes(tensors: list[torch.Tensor]) -> int:
    """Bytes a kernel touches: a broadcast dimension (stride 0) is read once, not once per index."""
    total = 0
    for t in tensors:
        elements = 1
        for extent, step in zip(t.shape, t.stride()):
            elements *= int(extent) if step != 0 or extent == 0 else 1
        total += elements * t.element_size()
    return total


def _by_name(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by their schema names, defaults filled in (torch.fx's public normalizer)."""
    pair = normalize_function(func, args, kwargs, normalize_to_only_use_kwargs=True)
    return dict(pair.kwargs) if pair is not None else {}


def _cpu_flash_forward_flops(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             *args: Any, out_val: object = None, **kwargs: Any) -> int:
    return int(_flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape))


def _cpu_flash_backward_flops(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                              value: torch.Tensor, *args: Any, out_val: object = None, **kwargs: Any) -> int:
    return int(_flop_counter.sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape))


_EXTRA_FLOPS: dict[Any, Callable[..., int]] = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_forward_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}
"""FLOP formulas torch's counter lacks: the CPU flash kernel, which CPU and fake CPU tensors run."""


def _attention_size(named: dict[str, Any]) -> float:
    """The key sequence length: dim -2 of (batch, heads, seq, dim), as torch's flop counter reads
    every attention op; for sequences packed into one tensor, the longest (``max_k``)."""
    key = named.get("key")
    if not isinstance(key, torch.Tensor) or key.dim() < 3:
        return 0.0
    if any(isinstance(named.get(k), torch.Tensor) for k in ("cum_seq_k", "cu_seqlens_k")):
        longest = named.get("max_k", named.get("max_seqlen_k"))
        return float(longest) if isinstance(longest, (int, float)) else 0.0
    return float(key.shape[-2])


def _is_causal(named: dict[str, Any]) -> bool:
    # the memory-efficient kernels spell it custom_mask_type: 1 and 2 are causal from the top left / bottom right
    return named.get("is_causal") is True or named.get("custom_mask_type") in (1, 2)


def count_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: object) -> OpCount:
    """Count what one aten op does: its FLOPs (torch's count), bytes read and written, and kind.

    Args:
        func: the ``torch._ops.OpOverload`` a ``TorchDispatchMode`` received.
        args, kwargs: its arguments, as received.
        out: what the op returned.
    """
    kwargs = kwargs or {}
    packet = getattr(func, "overloadpacket", func)
    name = str(packet)
    inputs = _tensors((args, kwargs))
    floating = [t for t in inputs if t.is_floating_point()]
    dtype = dtype_key(floating[0].dtype) if floating else "float32"
    if getattr(func, "is_view", False) or name in _FREE or name.startswith(_FREE_NAMESPACES):
        return OpCount(name, "free", 0.0, 0.0, dtype, 0.0)
    nbytes = float(_nbytes(inputs) + _nbytes(_tensors(out)))
    formula: Callable[..., int] | None = _flop_counter.flop_registry.get(packet) or _EXTRA_FLOPS.get(packet)
    flops = float(formula(*args, **kwargs, out_val=out)) if formula is not None else 0.0
    if "attention" in name and flops > 0:
        named = _by_name(func, args, kwargs)
        if _is_causal(named):
            flops /= 2  # FlashAttention-2's convention, which Device.attention is measured in
        return OpCount(name, "attention", flops, nbytes, dtype, _attention_size(named))
    if flops > 0:
        return OpCount(name, "matmul", flops, nbytes, dtype, flops)
    return OpCount(name, "memory", 0.0, nbytes, dtype, 0.0)


def op_time(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: object,
            device: Device) -> float:
    """Return the seconds one aten op takes on ``device`` (see ``Device.op_time`` for the model)."""
    count = count_op(func, args, kwargs, out)
    return device.op_time(kind=count.kind, flops=count.flops, nbytes=count.nbytes,
                          dtype=count.dtype, size=count.size)


def _on_meta(t: object) -> bool:
    """A plain tensor on the meta device (not a FakeTensor, not a subclass that dispatches itself)."""
    return isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_meta


def fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                    enable_gqa: bool = False) -> torch.Tensor | None:
    """``F.scaled_dot_product_attention`` on meta tensors as the fused kernel a CUDA GPU runs, or None.

    On the meta device torch decomposes attention into bmm + softmax, materialising a
    (batch, heads, seq, seq) score matrix that FlashAttention never holds. Here, without a mask,
    4-d, head dimension up to 256 and as many heads in key and value as in query: bfloat16 and
    float16 run FlashAttention-2 (``aten._scaled_dot_product_flash_attention``), float32 the
    memory-efficient kernel (``aten._scaled_dot_product_efficient_attention``); both have shape
    functions and autograd formulas on meta. Anything else returns None: torch's own dispatch runs
    it. FakeTensors (shape-only runs) need none of this: on CPU fake tensors torch already runs
    its fused CPU flash kernel, which ``count_op`` times as attention.
    """
    tensors = (query, key, value)
    if attn_mask is not None or not all(_on_meta(t) for t in tensors):
        return None
    if any(t.dim() != 4 for t in tensors) or query.shape[-1] > 256 or key.shape[-1] != query.shape[-1]:
        return None
    if not (query.shape[1] == key.shape[1] == value.shape[1]) or not (query.dtype == key.dtype == value.dtype):
        return None  # grouped heads (enable_gqa) and mixed dtypes: left to torch
    if query.dtype in (torch.bfloat16, torch.float16):
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if query.dtype == torch.float32:
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, None, needs_grad, dropout_p, is_causal, scale=scale)[0]
    return None


class FusedAttention(TorchFunctionMode):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """Run ``F.scaled_dot_product_attention`` on meta tensors as the fused GPU kernel (Rule 3).

    ``GpuClock`` enters one while it is entered, unless a ``FakeTensorMode`` is already active on
    the thread (a shape-only run, whose CPU fake tensors run torch's fused CPU kernel anyway).
    Limit: a torch function mode is off inside the calls it sees, ``loss.backward()`` among them,
    so activation checkpointing's recomputation in the backward runs torch's decomposition; on
    meta tensors, checkpointed attention then fails torch's check that the recomputation matches
    the forward. Shape-only runs (FakeTensors) are not affected.
    """

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            out = fused_attention(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


class GpuClock(TorchDispatchMode):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """Accumulate the predicted GPU time of every aten op run inside ``with GpuClock(device):``.

    While entered, attention on meta tensors runs as the fused GPU kernel (``FusedAttention``).
    Ops run as they would without the mode (on meta or fake tensors they compute shapes only);
    each one adds ``op_time`` to ``seconds``. ``ops`` keeps one ``OpRecord`` per op unless
    ``keep_ops=False`` (a long run then keeps only the totals).
    """

    def __init__(self, device: Device, *, keep_ops: bool = True) -> None:
        super().__init__()
        self.device = device
        self.keep_ops = keep_ops
        self.seconds = 0.0
        self.flops = 0.0
        self.count = 0
        self.ops: list[OpRecord] = []
        self._attention: list[FusedAttention | None] = []

    def __enter__(self) -> GpuClock:
        # under a fake mode (a shape-only run) attention already runs fused: no function mode, whose
        # hook on every torch call would only cost time
        fake = _get_dispatch_mode(_TorchDispatchModeKey.FAKE) is not None
        attention = None if fake else FusedAttention()
        if attention is not None:
            attention.__enter__()
        self._attention.append(attention)
        try:
            return super().__enter__()  # type: ignore[no-any-return]
        except BaseException:
            self._leave_attention(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._leave_attention(*exc)

    def _leave_attention(self, *exc: Any) -> None:
        attention = self._attention.pop()
        if attention is not None:
            attention.__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        count = count_op(func, args, kwargs, out)
        seconds = self.device.op_time(kind=count.kind, flops=count.flops, nbytes=count.nbytes,
                                      dtype=count.dtype, size=count.size)
        self.seconds += seconds
        self.flops += count.flops
        self.count += 1
        if self.keep_ops:
            self.ops.append(OpRecord(count, seconds))
        return out

    def reset(self) -> None:
        """Forget every op timed so far."""
        self.seconds, self.flops, self.count = 0.0, 0.0, 0
        self.ops.clear()

    def by_op(self) -> dict[str, tuple[int, float]]:
        """Return ``{op name: (calls, seconds)}`` over the kept ops, slowest first."""
        table: dict[str, tuple[int, float]] = {}
        for record in self.ops:
            calls, seconds = table.get(record.count.name, (0, 0.0))
            table[record.count.name] = (calls + 1, seconds + record.seconds)
        return dict(sorted(table.items(), key=lambda item: -item[1][1]))

    def __repr__(self) -> str:
        return f"<GpuClock {self.device.name!r} ops={self.count} seconds={self.seconds:.6g}>"
