"""Compute on a modelled GPU: ``compute="gpu:h100_sxm"`` (``spawn``, ``simcluster torchrun --compute``).

Each rank runs its code under a ``RankClock``, a ``GpuClock`` (simcluster.predict.compute) of its
own: every aten op the rank's code runs, on real or fake tensors, adds its predicted seconds. The
rank's ``Meter`` (engine.sync, measured compute) reads that clock instead of a wall or CPU clock,
so the predicted time is charged where measured compute is charged: at the entry of each call
into the torch backend, ``Work.wait()`` and the clocks of ``time``, and when the rank ends, as a
virtual sleep traced as a span ``compute`` on the rank's compute stream.

Rule 1: ops that run inside simcluster (a collective's copies and reductions) are the network's,
not the compute stream's: the clock skips them (the meter is stopped, ``depth`` > 0), so what a
rank is charged is exactly ``seconds``.
Rule 2: a collective started with ``async_op=True`` progresses in virtual time while the charge
of the compute after it elapses, and ``wait()`` blocks only until it completes: a step of an async
collective and independent compute takes max(compute, communication), not the sum.
Rule 3: a synchronous collective (torch's ``dist.all_reduce(x)``, FSDP2's all_gather and
reduce_scatter) is enqueued on the rank's communication stream and returns at once, as NCCL's
does (``RankClock.enqueue``); the first op of the rank's own code that reads one of its output
tensors, or writes one of its input tensors, waits until it completes, its data in place before
the op runs. Reading a value (``.item()``, ``.tolist()``, ``.numpy()``, printing), ``Work.wait()``,
``barrier`` and the end of the rank wait for every pending one (``drain``). What reads memory
without either (``data_ptr()``, a C++ extension) does not wait: docs/predict.md, "Limits".
Rule 4: the rank's collectives on one process group run in issue order, as NCCL runs a group's
kernels on one stream (``ProcessGroupSimcluster._start``); collectives of different groups overlap.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..engine import sync as _sync
from ..predict.compute import GpuClock

_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")
_C10D_LOGGER = os.path.join("torch", "distributed", "c10d_logger.py")
_WRAPPERS = _sync.__file__  # the measured-call wrappers around Work.wait
_SYNCHRONOUS = frozenset({
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather", "all_gather_single",
    "all_gather_into_tensor", "_all_gather_base", "all_gather_coalesced", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base",
    "all_to_all", "all_to_all_single",
})
"""torch.distributed's tensor collectives whose ``async_op=False`` path calls ``work.wait()``
(Rule 3); point-to-point calls, ``barrier`` and the object collectives (which read their tensors
through ``.numpy()``) keep blocking."""

_METADATA = frozenset({"aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset",
                       "aten.empty_like", "aten.new_empty", "aten.new_empty_strided"})
"""Ops that read a tensor's shape, not its data; views (their schema says so) and ``prim`` ops
(a fake tensor's device) neither: none of them waits for a pending collective, the ops that read
through a view do."""


class RankClock(GpuClock):
    """One rank's ``GpuClock``: counts the ops of the rank's own code only (Rule 1), and holds the
    synchronous collectives still on the rank's communication stream (Rule 3)."""

    def __init__(self, device: Any, meter: _sync.Meter) -> None:
        super().__init__(device, keep_ops=False)
        self.meter = meter
        self.pending: list[Any] = []  # SimclusterWorks enqueued, in issue order
        self._outputs: dict[int, Any] = {}  # storage -> the pending work writing it
        self._inputs: dict[int, Any] = {}  # storage -> the pending work reading it

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if self.meter.depth:
            return func(*args, **(kwargs or {}))
        if self.pending:
            if func is torch.ops.aten._local_scalar_dense.default:  # .item(), float(), bool()
                self.drain()
            elif not (func.is_view or func.namespace == "prim" or str(func.overloadpacket) in _METADATA):
                needed = self._needed(func, args, kwargs or {})
                if needed:
                    self.drain(needed)
        return super().__torch_dispatch__(func, types, args, kwargs)

    def __enter__(self) -> RankClock:
        _readers.enter()
        try:
            clock: RankClock = super().__enter__()
            return clock
        except BaseException:
            _readers.exit()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None:
                self.drain()  # the end of the rank
        finally:
            try:
                super().__exit__(*exc)
            finally:
                _readers.exit()

    def reading(self) -> float:
        """The meter's clock: the predicted seconds so far."""
        return self.seconds

    def enqueue(self, work: Any, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        """Put ``work``, a synchronous collective just issued, on the communication stream (Rule 3):
        ops that read ``outputs`` or write ``inputs`` wait for it."""
        self.pending.append(work)
        for tensor in inputs:
            key = _storage(tensor)
            if key is not None:
                self._inputs[key] = work
        for tensor in outputs:
            key = _storage(tensor)
            if key is not None:
                self._outputs[key] = work

    def drain(self, only: set[Any] | None = None) -> None:
        """Block the rank until the pending collectives complete (``only``: these and those issued
        before them, whose results are so written in issue order, even where an earlier one is on
        another group's stream), writing their results; the compute before this point is charged
        first."""
        if not self.pending:
            return
        last = len(self.pending) if only is None else \
            max(i for i, work in enumerate(self.pending) if work in only) + 1
        done, self.pending = self.pending[:last], self.pending[last:]
        if self.pending:
            self._outputs = {k: w for k, w in self._outputs.items() if w not in done}
            self._inputs = {k: w for k, w in self._inputs.items() if w not in done}
        else:
            self._outputs, self._inputs = {}, {}
        rank = _sync.current()
        _sync.stop_clock(rank, "wait")
        try:
            for work in done:
                work._block()
        finally:
            _sync.start_clock(rank)

    def _needed(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[Any]:
        """The pending works this op must wait for: those whose outputs it touches, those whose
        inputs it writes."""
        needed: set[Any] = set()
        outputs, inputs = self._outputs, self._inputs
        for tensor, written in _touched(func, args, kwargs):
            key = _storage(tensor)
            if key is None:
                continue
            work = outputs.get(key)
            if work is None and written:
                work = inputs.get(key)
            if work is not None:
                needed.add(work)
        return needed


def _storage(tensor: torch.Tensor) -> int | None:
    """The tensor's storage, as an id shared by its views (None: a wrapper subclass such as a
    DTensor has none; ``_inner`` reaches the tensors it wraps)."""
    try:
        return int(tensor.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _touched(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[tuple[torch.Tensor, bool]]:
    """Each tensor argument of the op, with whether the op writes it (its schema's alias mark)."""
    schema = func._schema.arguments
    for index, arg in enumerate(args):
        info = schema[index].alias_info if index < len(schema) else None
        written = info is not None and info.is_write
        for tensor in _tensors(arg):
            yield tensor, written
    if kwargs:
        by_name = {a.name: a for a in schema}
        for name, arg in kwargs.items():
            spec = by_name.get(name)
            info = spec.alias_info if spec is not None else None
            written = info is not None and info.is_write
            for tensor in _tensors(arg):
                yield tensor, written


def _tensors(arg: Any) -> Iterator[torch.Tensor]:
    """The tensors of an op's argument (a tensor or a list of them); for a wrapper subclass such as
    a DTensor, the tensors it wraps too, which its own dispatch reads out of sight of this mode."""
    if isinstance(arg, torch.Tensor):
        yield from _inner(arg)
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            if isinstance(item, torch.Tensor):
                yield from _inner(item)


def _inner(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    yield tensor
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        for name in names:
            inner = getattr(tensor, name)
            if isinstance(inner, torch.Tensor):
                yield from _inner(inner)


class _Readers:
    """``Tensor.tolist`` and ``Tensor.numpy``, which read a tensor's memory without an aten op the
    dispatcher shows, made to wait for the rank's pending collectives first (Rule 3) while any
    ``RankClock`` is entered; torch's own methods again when none is."""

    def __init__(self) -> None:
        self.entered = 0
        self.originals: dict[str, Any] = {}

    def enter(self) -> None:
        self.entered += 1
        if self.entered == 1:
            for name in ("tolist", "numpy"):
                original = self.originals[name] = getattr(torch.Tensor, name)
                setattr(torch.Tensor, name, _waiting(original))

    def exit(self) -> None:
        self.entered -= 1
        if self.entered == 0:
            for name, original in self.originals.items():
                setattr(torch.Tensor, name, original)
            self.originals.clear()


def _waiting(read: Any) -> Any:
    def waiting(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        clock = streams()
        if clock is not None and clock.pending and not clock.meter.depth:
            clock.drain()
        return read(self, *args, **kwargs)
    waiting.__name__ = waiting.__qualname__ = read.__name__
    waiting.__doc__ = read.__doc__
    return waiting


_readers = _Readers()


def streams() -> RankClock | None:
    """The calling rank's ``RankClock`` (None: not a ``gpu:`` run, or not a rank)."""
    rank = _sync.current()
    meter = None if rank is None else rank.meter
    streams: RankClock | None = None if meter is None else meter.streams
    return streams


def synchronous() -> bool:
    """Whether ``Work.wait()`` is being called by torch.distributed's own ``async_op=False`` path of
    a tensor collective the program called (not one of torch's object collectives calling it)."""
    try:
        frame: FrameType | None = sys._getframe(2)
    except ValueError:  # called from C++ with no Python caller
        return False
    while frame is not None and frame.f_code.co_filename == _WRAPPERS:
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.endswith(_C10D) or \
            frame.f_code.co_name not in _SYNCHRONOUS:
        return False
    caller = frame.f_back
    while caller is not None and caller.f_code.co_filename.endswith(_C10D_LOGGER):
        caller = caller.f_back
    return caller is None or not caller.f_code.co_filename.endswith(_C10D)


def attach(rank: _sync.SyncRank | None) -> RankClock | None:
    """Make the rank's ``RankClock`` and set its meter to read it (None: not a ``gpu:`` run).

    Call on the rank's own thread, with its clock stopped; enter the returned mode around the
    rank's code (``clocked``) or for the rest of the thread (``__enter__``).
    """
    meter = None if rank is None else rank.meter
    if meter is None or meter.compute.device is None:
        return None
    clock = RankClock(meter.compute.device, meter)
    meter.clock = clock.reading
    meter.streams = clock
    meter.since = 0.0
    return clock


def clocked(clock: RankClock | None) -> contextlib.AbstractContextManager[Any]:
    """``with clocked(attach(rank)):`` the rank's code, timed (nothing when ``clock`` is None)."""
    return contextlib.nullcontext() if clock is None else clock
