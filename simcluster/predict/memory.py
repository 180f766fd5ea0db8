"""Count live tensor bytes on a rank, with the peak and what it was made of: ``MemoryTracker``.

Owns the step from "an aten op returned a tensor" to "these bytes are live until its storage is
freed". A ``TorchDispatchMode`` sees every op's output; each ``torch.UntypedStorage`` it has not
seen gets a serial number and a ``weakref.finalize`` that records its free. torch keeps one Python
object per storage (``t.untyped_storage() is t.untyped_storage()``), and views share it, so a
storage is counted once however many tensors view it, and leaves the count when the last goes.
Only shapes and dtypes are read: meta tensors and FakeTensors (whose storage is a meta storage of
the right size) are counted as real ones are.

Rule 1: a storage counts from the op that made it to its free, at ``nbytes`` and, rounded, at the
block the CUDA caching allocator would give it (``cuda_block_bytes``). Both are kept.
Rule 2: a storage's category is the last one learned for it, at any time in its life (a gradient
is made by a backward op as a temporary, and is known as a gradient only once accumulated). So the
tracker logs allocations and frees, and a breakdown replays the log up to its moment with the
categories known when it is asked for. What is not known to be a parameter, buffer, gradient,
optimizer state or communication buffer counts as ``activations`` (saved for backward, and
temporaries).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

CATEGORIES = ("parameters", "buffers", "gradients", "optimizer", "communication", "activations")
"""Every category a byte is counted in; ``activations`` holds all the rest."""

# c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch): kMinBlockSize = 512, "all sizes are rounded
# to at least 512 bytes"; round_size(size) returns kMinBlockSize if size < kMinBlockSize, else
# kMinBlockSize * ceil(size / kMinBlockSize), unless PYTORCH_CUDA_ALLOC_CONF sets
# roundup_power2_divisions (not set by default).
CUDA_MIN_BLOCK = 512


def cuda_block_bytes(nbytes: int) -> int:
    """Return the bytes the CUDA caching allocator's ``round_size`` gives a request of ``nbytes``.

    Sizes round up to a multiple of 512, at least 512. An empty storage counts 0 here.
    """
    if nbytes <= 0:
        return 0
    return -(-nbytes // CUDA_MIN_BLOCK) * CUDA_MIN_BLOCK


def _storages(tensor: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages a tensor holds: its own, or for a wrapper subclass (DTensor) its inner ones'."""
    found: list[torch.UntypedStorage] = []
    stack = [tensor]
    while stack:
        t = stack.pop()
        if is_traceable_wrapper_subclass(t):
            names, _ = t.__tensor_flatten__()
            stack.extend(inner for name in names if isinstance(inner := getattr(t, name), torch.Tensor))
            continue
        try:
            found.append(t.untyped_storage())
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
            pass
    return found


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Live bytes at the peak and now, in total and by category (``CATEGORIES``).

    ``rounded`` says whether sizes are the CUDA caching allocator's blocks or the tensors' nbytes.
    """

    peak: int
    current: int
    peak_by_category: dict[str, int]
    current_by_category: dict[str, int]
    rounded: bool
    storages: int = 0  # storages live now

    def table(self) -> str:
        """Return the report as a text table, in MiB."""
        unit = "MiB (allocator blocks)" if self.rounded else "MiB (tensor bytes)"
        lines = [f"{'category':<14} {'at peak':>12} {'now':>12}   {unit}"]
        for name in CATEGORIES:
            lines.append(f"{name:<14} {self.peak_by_category[name] / 2**20:>12.3f} "
                         f"{self.current_by_category[name] / 2**20:>12.3f}")
        lines.append(f"{'total':<14} {self.peak / 2**20:>12.3f} {self.current / 2**20:>12.3f}")
        return "\n".join(lines)


@dataclass(slots=True)
class _Log:
    """Allocation events in order: (serial, change in nbytes, change in allocator blocks)."""

    events: list[tuple[int, int, int]] = field(default_factory=list)
    live: list[int] = field(default_factory=lambda: [0, 0])  # [nbytes, blocks]
    peak: list[int] = field(default_factory=lambda: [0, 0])
    peak_at: list[int] = field(default_factory=lambda: [-1, -1])  # index of the event that set the peak

    def add(self, serial: int, nbytes: int, blocks: int) -> None:
        self.events.append((serial, nbytes, blocks))
        for i, delta in enumerate((nbytes, blocks)):
            self.live[i] += delta
            if self.live[i] > self.peak[i]:
                self.peak[i] = self.live[i]
                self.peak_at[i] = len(self.events) - 1


class MemoryTracker(TorchDispatchMode):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """Count the live tensor bytes of the storages made inside ``with MemoryTracker():``, and the peak.

    Storages that exist before (a model built first) count once given to ``track``, which also
    learns the categories: a module's parameters and buffers, its parameters' gradients (a hook
    marks each as it is accumulated), an optimizer's state (marked after each ``step``). ``mark``
    puts any tensor in a category; ``mark_communication`` puts a collective's buffers in
    ``"communication"`` (a report run does it for every collective of the torch backend). One
    tracker counts one rank: enter it in the rank's own code.
    """

    def __init__(self) -> None:
        super().__init__()
        self._log = _Log()
        self._serial_of: dict[int, int] = {}  # id(storage) -> serial, while the storage lives
        self._size: dict[int, int] = {}  # serial -> nbytes now, while it lives
        self._category: dict[int, str] = {}  # serial -> category, kept after the free
        self._modules: list[weakref.ref[torch.nn.Module]] = []
        self._optimizers: list[weakref.ref[torch.optim.Optimizer]] = []
        self._handles: list[Any] = []
        self._next = 0

    # ---- counting storages ----

    def _see(self, tensor: torch.Tensor) -> list[int]:
        """Count a tensor's storages if new (or resized); return their serials."""
        serials: list[int] = []
        for storage in _storages(tensor):
            key = id(storage)
            nbytes = int(storage.nbytes())
            serial = self._serial_of.get(key)
            if serial is None:
                serial = self._next
                self._next += 1
                self._serial_of[key] = serial
                self._size[serial] = nbytes
                self._log.add(serial, nbytes, cuda_block_bytes(nbytes))
                weakref.finalize(storage, self._free, key, serial).atexit = False
            elif self._size[serial] != nbytes:  # resize_ of the storage (FSDP2 frees this way)
                old = self._size[serial]
                self._size[serial] = nbytes
                self._log.add(serial, nbytes - old, cuda_block_bytes(nbytes) - cuda_block_bytes(old))
            serials.append(serial)
        return serials

    def _free(self, key: int, serial: int) -> None:
        if self._serial_of.get(key) == serial:
            del self._serial_of[key]
        nbytes = self._size.pop(serial)
        self._log.add(serial, -nbytes, -cuda_block_bytes(nbytes))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in pytree.tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._see(leaf)
        if str(getattr(func, "overloadpacket", func)).endswith("_"):  # in place: resize_, set_, ...
            for leaf in pytree.tree_leaves((args, kwargs)):
                if isinstance(leaf, torch.Tensor) and any(id(s) in self._serial_of for s in _storages(leaf)):
                    self._see(leaf)
        return out

    # ---- categories ----

    def mark(self, tensors: torch.Tensor | Iterable[torch.Tensor], category: str) -> None:
        """Count ``tensors`` (if not yet counted) and put their storages in ``category``."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown memory category {category!r}; expected one of {CATEGORIES}")
        for t in [tensors] if isinstance(tensors, torch.Tensor) else tensors:
            for serial in self._see(t):
                self._category[serial] = category

    def mark_communication(self, tree: object) -> None:
        """Put the storages of the tensors in ``tree`` (a collective's arguments: nested tuples,
        lists and dicts) in ``communication``, unless a category is already known for them.

        A parameter or gradient passed to a collective stays what it is; a buffer first seen in a
        collective (DDP's gradient buckets, FSDP2's all-gather output and reduce-scatter input) is
        ``communication`` until a later ``mark`` says otherwise (FSDP2's sharded gradients are
        views of its reduce-scatter output: ``gradients`` from the optimizer step on).
        """
        for leaf in pytree.tree_leaves(tree):
            if isinstance(leaf, torch.Tensor):
                for serial in self._see(leaf):
                    self._category.setdefault(serial, "communication")

    def track(self, *objects: torch.nn.Module | torch.optim.Optimizer) -> MemoryTracker:
        """Count and categorise a module's parameters, buffers and gradients, or an optimizer's state.

        Tensors that already exist count from now. Returns the tracker, for ``with tracker.track(m):``.
        """
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                self._modules.append(weakref.ref(obj))
                self.mark(list(obj.parameters()), "parameters")
                self.mark(list(obj.buffers()), "buffers")
                for p in obj.parameters():
                    if p.requires_grad:
                        self._handles.append(p.register_post_accumulate_grad_hook(self._on_grad))
                    if p.grad is not None:
                        self.mark(p.grad, "gradients")
            elif isinstance(obj, torch.optim.Optimizer):
                self._optimizers.append(weakref.ref(obj))
                self._handles.append(obj.register_step_post_hook(self._on_step))
                self._on_step(obj, (), {})
            else:
                raise TypeError(f"track() takes modules and optimizers, not {type(obj).__name__}")
        return self

    def _on_grad(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            self.mark(param.grad, "gradients")

    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.mark([t for state in optimizer.state.values() for t in pytree.tree_leaves(state)
                   if isinstance(t, torch.Tensor)], "optimizer")

    def _refresh(self) -> None:
        """Learn the categories of what the tracked modules and optimizers hold now."""
        for ref in self._modules:
            module = ref()
            if module is not None:
                self.mark(list(module.parameters()), "parameters")
                self.mark(list(module.buffers()), "buffers")
                self.mark([p.grad for p in module.parameters() if p.grad is not None], "gradients")
        for oref in self._optimizers:
            optimizer = oref()
            if optimizer is not None:
                self._on_step(optimizer, (), {})

    def remove_hooks(self) -> None:
        """Remove the gradient and optimizer hooks ``track`` installed."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    # ---- reading it ----

    @property
    def current(self) -> int:
        """Live bytes now, as the CUDA caching allocator would round them."""
        return self._log.live[1]

    @property
    def peak(self) -> int:
        """The most live bytes so far, as the CUDA caching allocator would round them."""
        return self._log.peak[1]

    @property
    def current_nbytes(self) -> int:
        """Live bytes now, at the tensors' own sizes."""
        return self._log.live[0]

    @property
    def peak_nbytes(self) -> int:
        """The most live bytes so far, at the tensors' own sizes."""
        return self._log.peak[0]

    def report(self, *, rounded: bool = True) -> MemoryReport:
        """Return the peak and current live bytes by category (allocator blocks, or nbytes)."""
        self._refresh()
        column = 2 if rounded else 1
        peak_at = self._log.peak_at[column - 1]
        live: dict[int, int] = {}
        peak_live: dict[int, int] = {}
        for index, event in enumerate(self._log.events):
            serial = event[0]
            live[serial] = live.get(serial, 0) + event[column]
            if index == peak_at:
                peak_live = dict(live)
        return MemoryReport(
            peak=self._log.peak[column - 1], current=self._log.live[column - 1],
            peak_by_category=self._by_category(peak_live), current_by_category=self._by_category(live),
            rounded=rounded, storages=len(self._size))

    def _by_category(self, live: dict[int, int]) -> dict[str, int]:
        totals = dict.fromkeys(CATEGORIES, 0)
        for serial, nbytes in live.items():
            totals[self._category.get(serial, "activations")] += nbytes
        return totals

    def reset_peak(self) -> None:
        """Start a new peak from the bytes live now (torch.cuda.reset_peak_memory_stats's analogue).

        The log is cut to one event per live storage, so a long run measured step by step keeps
        a log as long as one step's.
        """
        log = _Log()
        for serial, nbytes in sorted(self._size.items()):
            log.add(serial, nbytes, cuda_block_bytes(nbytes))
        self._log = log

    def __repr__(self) -> str:
        return f"<MemoryTracker current={self.current} peak={self.peak} storages={len(self._size)}>"
