"""The ``"simcluster"`` process group: torch.distributed's backend calls on a simcluster Comm.

torch.distributed's Python API (``dist.all_reduce`` and friends) and its C++
callers (DistributedDataParallel's reducer, ``_broadcast_coalesced``) call
the methods of a ``ProcessGroup``; this subclass implements each one on the
rank's simcluster communicator for that group: the world ``Comm`` for the
default group, a sub-communicator for ``new_group`` (made without messages,
named by torch's group name, which every member agrees on).

Rule 1: every method starts its simcluster operation at once and returns a
``SimclusterWork`` that completes in Python (``_work.py``), never a C++ future
still pending: a C++ wait could not give the baton back to the engine.
Rule 2: results follow gloo's: in-place tensors are filled in place, output
lists and tensors are written when the Work completes, inputs are never
changed (``reduce`` leaves the non-root tensors alone).
Rule 3: timeouts are gloo's, in virtual time (``_work.py``, Rule 3).
Rule 4: ``getBackendName`` stays ``"simcluster"`` even for a group the program
made as gloo (``dist.get_backend`` says ``"gloo"`` there): torch's C++ reads
a group named gloo as a ``ProcessGroupGloo`` (DistributedDataParallel's logger
casts it to read gloo's thread count). What a program reads of the name,
DistributedDataParallel's logging data, says gloo (``_session.py``).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from torch.distributed.constants import default_pg_timeout

from simcluster.collectives import _gloo as gloo_layout
from simcluster.comm import Comm, Group, groups_of
from simcluster.engine import sync as _sync
from simcluster.errors import RevokedError
from simcluster.matching import ANY_SOURCE
from simcluster.ops import ReduceOp
from simcluster.predict import report as _report
from simcluster.request import Request
from simcluster.torch import _gpu, _profiler
from simcluster.torch._work import (
    GLOO_CLOSED,
    Expiry,
    Finish,
    SimclusterWork,
    closed_by,
    milliseconds,
    seconds_of,
    timeout_error,
    wait_until,
)

BACKEND = "simcluster"

_OPS: dict[Any, ReduceOp] = {
    getattr(dist.ReduceOp, name): getattr(ReduceOp, name)
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
}
"""torch's ReduceOp kinds (``opts.reduceOp.op``) and the simcluster op for each."""


_NUMPY_FLOATS = frozenset({torch.float32, torch.float64})
_NUMPY_INTS = frozenset({torch.int32, torch.int64})


def _engine_view(tensor: torch.Tensor, op: ReduceOp | None = None) -> Any:
    """What the engine is given for ``tensor``: a plain CPU tensor of a dtype numpy adds, compares
    and multiplies as torch does, bit for bit (float32 and float64; int32 and int64 but for AVG), as
    the numpy array over its memory, so a result written into that array lands in the tensor; any
    other tensor as itself. The engine's codec, copies and reductions cost several times less on a
    numpy array than on a tensor (docs/benchmarks.md); the messages and their sizes are the same."""
    if type(tensor) is not torch.Tensor or not tensor.is_cpu or tensor.layout != torch.strided:
        return tensor
    dtype = tensor.dtype
    if dtype in _NUMPY_FLOATS or (dtype in _NUMPY_INTS and op is not ReduceOp.AVG):
        return (tensor.detach() if tensor.requires_grad else tensor).numpy()
    return tensor


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel() * tensor.element_size())


def _fills_its_memory(tensor: torch.Tensor) -> bool:
    """Whether the tensor's elements fill one block of memory, without gap or overlap
    (a transposed or permuted contiguous tensor does; a slice of one does not)."""
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride()), key=lambda pair: pair[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


class ProcessGroupSimcluster(dist.ProcessGroup):  # type: ignore[misc]  # torch is optional: not followed
    """A torch.distributed process group whose operations run on a simcluster Comm.

    Made by ``dist.init_process_group("simcluster")`` and ``dist.new_group``
    inside ``simcluster.torch.spawn``; users never build one themselves.
    Every operation costs what its simcluster collective or message costs
    under the run's latency model, and shows in the run's stats and trace.
    """

    def __init__(self, comm: Comm, group_name: str = "", timeout: timedelta | None = None) -> None:
        super().__init__(comm.rank, comm.size)
        self._comm = comm
        self._group_name = group_name
        self._group_desc = "undefined"
        # the group's timeout in seconds where the program named one; under torch's default
        # an operation that never completes is the deadlock report (_work.py, Rule 3)
        self._timeout = None if timeout == default_pg_timeout else seconds_of(timeout)
        self._closed = False  # an operation timed out on this rank: later ones fail, as gloo's
        self._stream: _Stream | None = None  # compute="gpu:...": the rank's stream on this group
        self._on_cpu: bool | None = None  # no GPUs on the run's platform (None: not asked yet)
        self._gloo_chosen: dict[tuple[str, str], str | None] = {}  # _gloo's answers, per run
        self.named = BACKEND  # the backend the program asked for (torchrun maps gloo here):
        # the prefix of its operations' profiler spans ("gloo:all_reduce")

    # ---- facts ----

    @property
    def comm(self) -> Comm:
        """The simcluster communicator this group runs on."""
        return self._comm

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND  # also for a group made as gloo (Rule 4)

    # torch keeps a group's name and description on its C++ backend objects, which a
    # process group written in Python has none of; these hold them in Python instead.

    @property
    def group_name(self) -> str:
        """The name torch registered this group under (``_resolve_process_group`` finds it)."""
        return self._group_name

    @property
    def group_desc(self) -> str:
        """The description torch gave this group (``"default_pg"`` for the world)."""
        return self._group_desc

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    def __repr__(self) -> str:
        return (f"<ProcessGroupSimcluster {self._group_name!r} rank={self._comm.rank} "
                f"size={self._comm.size}>")

    # torch's own groups hold a backend per device, which programs fetch to call the
    # backend's own methods (gloo's create_device); this group is its own backend

    def _get_backend(self, device: Any) -> ProcessGroupSimcluster:
        """The group's backend for ``device``: the group itself."""
        return self

    @staticmethod
    def create_device(**kwargs: Any) -> Any:
        """gloo's ``ProcessGroupGloo.create_device``: a gloo device, which this group never uses."""
        return dist.ProcessGroupGloo.create_device(**kwargs)

    # ---- plumbing ----

    def _work(self, req: Request[Any] | None, outputs: Sequence[torch.Tensor],
              finish: Finish | None = None, op: str = "", seconds: float | None = None
              ) -> SimclusterWork:
        seconds = self._timeout if seconds is None else seconds
        expiry = None
        if seconds is not None and req is not None:
            expiry = Expiry(self._comm.now + seconds, seconds, self)
        return SimclusterWork(req, list(outputs), finish, op, expiry)

    def _start(self, collective: str, *args: Any, **kwargs: Any) -> Request[Any]:
        """Start the nonblocking ``collective`` on the group's communicator (``Comm.i<collective>``).

        Under ``compute="gpu:..."`` the rank's collectives on one group run in issue order, as
        NCCL runs a process group's kernels on one stream (``_gpu``, Rule 4): each is queued on the
        group's ``_Stream``, which starts it when the one before it has completed.
        """
        comm = self._comm
        if _gpu.streams() is None:
            return getattr(comm, "i" + collective)(*args, **kwargs)  # type: ignore[no-any-return]
        stream = self._stream
        if stream is None:
            stream = self._stream = _Stream(comm)
        return stream.start(collective, getattr(comm, collective)(*args, **kwargs))

    def timed_out(self) -> None:
        """An operation of this group timed out on this rank: fail the later ones, as gloo does.

        The communicator is revoked: the other members' operations on it fail
        (gloo's peers find the connection closed), and what the given-up
        operation left in flight is no leak.
        """
        if not self._closed:
            self._closed = True
            self._comm.revoke()

    def _op(self, call: str, opts: Any) -> ReduceOp:
        kind = opts.reduceOp.op
        op = _OPS.get(kind)
        if op is None:
            raise ValueError(f"{self._who()}: {call}(op={kind.name}): the simcluster "
                             "backend has no PREMUL_SUM; multiply the tensor first and use SUM")
        return op

    def _who(self) -> str:
        """The rank in error messages: its world rank, and its rank in this group if different."""
        comm = self._comm
        if comm.world_rank == comm.rank:
            return f"rank {comm.rank}"
        return f"rank {comm.world_rank} (rank {comm.rank} of this group)"

    def _one(self, call: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"{self._who()}: {call}: expected one tensor per call, got "
                             f"{len(tensors)}; the simcluster backend has one device per rank")
        return tensors[0]

    # ---- reductions ----

    def allreduce(self, tensors: list[torch.Tensor],
                  opts: AllreduceOptions = AllreduceOptions()) -> SimclusterWork:  # noqa: B008
        op = self._op("all_reduce", opts)
        if len(tensors) != 1:
            return self._coalesced_all_reduce(tensors, op)
        tensor = tensors[0]
        if tensor.layout == torch.sparse_coo:
            if op is not ReduceOp.SUM:
                raise RuntimeError("ProcessGroupGloo::allreduce: unsupported reduction operation "
                                   "(allreduce of sparse tensors only works with ReduceOp.SUM)")
            return self._sparse_all_reduce(tensor)
        req = self._start("all_reduce", _engine_view(tensor, op), op,
                          algorithm=self._gloo("all_reduce", _nbytes(tensor)))
        return self._work(req, tensors, op="all_reduce")

    def allreduce_coalesced(self, tensors: list[torch.Tensor],
                            opts: AllreduceCoalescedOptions = AllreduceCoalescedOptions()  # noqa: B008
                            ) -> SimclusterWork:
        return self._coalesced_all_reduce(tensors, self._op("all_reduce_coalesced", opts))

    def _coalesced_all_reduce(self, tensors: list[torch.Tensor], op: ReduceOp) -> SimclusterWork:
        """One all_reduce of every tensor flattened together (one dtype), copied back after."""
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])

        def finish(value: Any) -> None:
            offset = 0
            with torch.no_grad():
                for t in tensors:
                    n = t.numel()
                    t.copy_(flat[offset:offset + n].view(t.shape))
                    offset += n
        req = self._start("all_reduce", _engine_view(flat, op), op, algorithm=self._gloo("all_reduce", _nbytes(flat)))
        return self._work(req, tensors, finish, "all_reduce_coalesced")

    def _sparse_all_reduce(self, tensor: torch.Tensor) -> SimclusterWork:
        """gloo's sparse all_reduce: gather every rank's (indices, values), add them in rank order.

        The tensor becomes the coalesced sum in place, on every rank.
        """
        local = tensor.detach().coalesce()
        req = self._start("all_gather", (local.indices(), local.values()))

        def finish(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
            # explicitly unchecked, as gloo's C++ makes them: the parts are coalesced tensors, and an
            # implicit choice would warn on the program's behalf
            size = tensor.shape
            options = {"dtype": tensor.dtype, "device": tensor.device, "check_invariants": False}
            total = torch.sparse_coo_tensor(parts[0][0], parts[0][1], size, **options)
            for indices, values in parts[1:]:
                total = total + torch.sparse_coo_tensor(indices, values, size, **options)
            with torch.no_grad():
                tensor.copy_(total.coalesce())
        return self._work(req, [tensor], finish, "all_reduce")

    def _nccl(self, collective: str, nbytes: int) -> str | None:
        """What NCCL would run on a platform with GPUs (``_nccl.algorithm``); else None: the default."""
        placed = self._comm.latency.placement()
        if placed is None or not placed.gpus:  # the common case: no platform, no import
            return None
        from simcluster.collectives import _nccl

        return _nccl.algorithm(self._comm, collective, nbytes)

    def _gloo(self, collective: str, nbytes: int, gloo: str = "gloo_ring") -> str | None:
        """A reduction's algorithm: NCCL's on a platform with GPUs (``_nccl``), else gloo's, whose
        order of additions gives gloo's floats bit for bit (``collectives._gloo``)."""
        on_cpu = self._on_cpu
        if on_cpu is None:
            placed = self._comm.latency.placement()
            on_cpu = self._on_cpu = placed is None or not placed.gpus
        if not on_cpu:  # NCCL's reduce: the default
            return None if collective == "reduce" else self._nccl(collective, nbytes)
        key = (collective, gloo)
        chosen = self._gloo_chosen
        if key not in chosen:  # the same for every call of a run (its algorithms=)
            chosen[key] = gloo_layout.algorithm(self._comm, collective, gloo)
        return chosen[key]

    def reduce(self, tensors: list[torch.Tensor],
               opts: ReduceOptions = ReduceOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("reduce", tensors)
        op = self._op("reduce", opts)
        req = self._start("reduce", _engine_view(tensor, op), opts.rootRank, op,
                                 algorithm=self._gloo("reduce", _nbytes(tensor)))
        return self._work(req, tensors, op="reduce")

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: ReduceScatterOptions = ReduceScatterOptions()  # noqa: B008
                       ) -> SimclusterWork:
        output = self._one("reduce_scatter", outputs)
        req = self._start("reduce_scatter", list(inputs[0]), self._op("reduce_scatter", opts),
                                         algorithm=self._gloo("reduce_scatter", 0, "gloo_items"))
        return self._work(req, outputs, _copy_to(output), "reduce_scatter")

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                              opts: ReduceScatterOptions = ReduceScatterOptions()  # noqa: B008
                              ) -> SimclusterWork:
        size = self._comm.size
        if input.numel() != size * output.numel():
            raise ValueError(f"{self._who()}: reduce_scatter_tensor: input has "
                             f"{input.numel()} elements, not world size {size} x output's "
                             f"{output.numel()}; size input as {size} outputs")
        op = self._op("reduce_scatter_tensor", opts)
        flat = input.detach().reshape(-1)
        view = _engine_view(flat, op)
        parts = list(view.reshape(size, -1)) if view is not flat else list(flat.chunk(size))
        req = self._start("reduce_scatter", parts, op,
                                         algorithm=self._gloo("reduce_scatter", 0, "gloo_whole"))
        return self._work(req, [output], _copy_to(output), "reduce_scatter_tensor")

    _reduce_scatter_base = reduce_scatter_single  # the older name

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: ReduceScatterOptions = ReduceScatterOptions()  # noqa: B008
                                        ) -> SimclusterWork:
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # the backend API's name

    # ---- broadcast, scatter, gather ----

    def broadcast(self, tensors: list[torch.Tensor],
                  opts: BroadcastOptions = BroadcastOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("broadcast", tensors)
        return self._work(self._start("broadcast", _engine_view(tensor), opts.rootRank), tensors, op="broadcast")

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                opts: ScatterOptions = ScatterOptions()) -> SimclusterWork:  # noqa: B008
        output = self._one("scatter", outputs)
        root = opts.rootRank
        objs = list(inputs[0]) if self._comm.rank == root else None
        req = self._start("scatter", objs, root)
        return self._work(req, outputs, _copy_to(output), "scatter")

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: GatherOptions = GatherOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("gather", inputs)
        root = opts.rootRank
        req = self._start("gather", tensor, root)
        targets = list(outputs[0]) if self._comm.rank == root and outputs else []
        return self._work(req, targets, _copy_list(targets), "gather")

    # ---- all_gather, all_to_all ----

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: AllgatherOptions = AllgatherOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("all_gather", inputs)
        targets = list(outputs[0])
        req = self._start("all_gather", _engine_view(tensor), algorithm=self._nccl("all_gather", 0))
        return self._work(req, targets, _copy_list(targets), "all_gather")

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          opts: AllgatherOptions = AllgatherOptions()  # noqa: B008
                          ) -> SimclusterWork:
        size = self._comm.size
        if output.numel() != size * input.numel():
            raise ValueError(f"{self._who()}: all_gather_into_tensor: output has "
                             f"{output.numel()} elements, not world size {size} x input's "
                             f"{input.numel()}; size output as {size} inputs")
        req = self._start("all_gather", _engine_view(input), algorithm=self._nccl("all_gather", 0))
        return self._work(req, [output], _concat_to(output), "all_gather_into_tensor")

    _allgather_base = all_gather_single  # the older name

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: AllgatherOptions = AllgatherOptions()  # noqa: B008
                            ) -> SimclusterWork:
        """``all_gather_coalesced``: ``outputs[r][i]`` gets rank r's ``inputs[i]``, in one all_gather."""
        size = self._comm.size
        if len(outputs) != size:
            raise RuntimeError(f"ProcessGroupGloo::allgather_coalesced: invalid output tensor "
                               f"list at index 0 (expected length {size}, got {len(outputs)})")
        for r, row in enumerate(outputs):
            if len(row) != len(inputs):
                raise RuntimeError(f"ProcessGroupGloo::allgather_coalesced: invalid output tensor "
                                   f"list at index {r} (expected length {len(inputs)}, got {len(row)})")
            for i, (target, source) in enumerate(zip(row, inputs)):
                if target.numel() != source.numel():
                    raise RuntimeError(f"ProcessGroupGloo::allgather_coalesced: invalid size of "
                                       f"output tensor at index {i} (expected length "
                                       f"({source.numel()}), got ({target.numel()}))")
        flat = torch.cat([t.detach().reshape(-1) for t in inputs]) if inputs else torch.empty(0)
        req = self._start("all_gather", flat, algorithm=self._nccl("all_gather", 0))
        targets = [t for row in outputs for t in row]

        def finish(values: list[torch.Tensor]) -> None:
            with torch.no_grad():
                for row, value in zip(outputs, values):
                    offset = 0
                    for target in row:
                        n = target.numel()
                        target.copy_(value[offset:offset + n].view(target.shape))
                        offset += n
        return self._work(req, targets, finish, "all_gather_coalesced")

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: AllgatherOptions = AllgatherOptions()  # noqa: B008
                                    ) -> SimclusterWork:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # the backend API's name

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: AllToAllOptions = AllToAllOptions()) -> SimclusterWork:  # noqa: B008
        req = self._start("all_to_all", list(inputs))
        return self._work(req, outputs, _copy_list(list(outputs)), "all_to_all")

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          output_split_sizes: list[int], input_split_sizes: list[int],
                          opts: AllToAllOptions = AllToAllOptions()  # noqa: B008
                          ) -> SimclusterWork:
        size, who = self._comm.size, self._who()
        if not input.is_contiguous():  # gloo's check, its type and text
            raise ValueError("Tensors must be contiguous")
        in_splits = _splits(input, input_split_sizes, size, who, "input")
        out_splits = _splits(output, output_split_sizes, size, who, "output")
        pieces = list(torch.split(input.detach(), in_splits))
        req = self._start("all_to_all", pieces)

        def finish(values: list[torch.Tensor]) -> None:
            with torch.no_grad():
                targets = torch.split(output, out_splits)
                for target, value in zip(targets, values):
                    if target.numel() != value.numel():
                        raise ValueError(
                            f"{who}: all_to_all_single: output_split_sizes={out_splits} "
                            f"expects {target.shape[0]} rows from a rank that sent "
                            f"{value.shape[0] if value.dim() else 0}; make each rank's output "
                            "split match what the peer's input split sends it")
                if output.is_contiguous() or not _fills_its_memory(output):
                    for target, value in zip(targets, values):
                        target.copy_(value.reshape(target.shape))
                else:  # gloo writes the output's memory in order, whatever its strides
                    flat = output.as_strided((output.numel(),), (1,))
                    flat.copy_(torch.cat([value.reshape(-1) for value in values]))
        return self._work(req, [output], finish, "all_to_all_single")

    alltoall_base = all_to_all_single  # the older name

    # ---- barrier, point-to-point ----

    def barrier(self, opts: BarrierOptions = BarrierOptions()) -> SimclusterWork:  # noqa: B008
        return self._work(self._start("barrier"), [], op="barrier", seconds=seconds_of(opts.timeout))

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """gloo's ``monitored_barrier``, its timeout in virtual time (a group made as gloo).

        Every rank but 0 sends to rank 0 and waits for its answer; rank 0
        waits for each of them until ``timeout`` after it entered, then
        answers. A rank that has not arrived by then fails rank 0 with gloo's
        "Rank r failed to pass monitoredBarrier in T ms" (every such rank
        with ``wait_all_ranks``), and the ranks that did arrive with gloo's
        "successfully reached monitoredBarrier, but received errors". torch
        lets ``dist.monitored_barrier`` run only where ``dist.get_backend(group)``
        is ``"gloo"`` (``simcluster torchrun``).
        """
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else \
            float(timeout) if timeout is not None else default_pg_timeout.total_seconds()
        comm = self._comm
        side = comm.named(f"torch/{self._group_name}/{comm.world_ranks}/monitored_barrier",
                          comm.world_ranks, comm.rank)
        if comm.rank != 0:
            _sync.block(side.isend(comm.rank, 0, 1))
            if _sync.block(side.irecv(None, 0, 2)) != "pass":
                raise RuntimeError(
                    f"Rank {comm.rank} successfully reached monitoredBarrier, but received errors "
                    "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty "
                    "rank.\n Original exception: \nConnection closed by peer [rank 0]. This is "
                    "typically caused by a remote worker crashing. Check the logs of the remote "
                    "worker before reporting an error.")
            return
        _monitor(side, comm.size, seconds, wait_all_ranks)
    def send(self, tensors: list[torch.Tensor], dstRank: int, tag: int = 0) -> SimclusterWork:  # noqa: N803
        tensor = self._one("send", tensors)
        return self._work(self._comm.isend(tensor, dstRank, tag), tensors, op="send")

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int = 0) -> SimclusterWork:  # noqa: N803
        tensor = self._one("recv", tensors)
        return self._work(self._comm.irecv(tensor, srcRank, tag), tensors, op="recv")

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> SimclusterWork:
        tensor = self._one("recv", tensors)
        return self._work(self._comm.irecv(tensor, ANY_SOURCE, tag), tensors, op="recv")


class _Stream:
    """One rank's communication stream on one group: its collectives run one after another, in
    the order they were issued (``ProcessGroupSimcluster._start``)."""

    __slots__ = ("comm", "queue", "running")

    def __init__(self, comm: Comm) -> None:
        self.comm = comm
        self.queue: deque[tuple[Awaitable[Any], Request[Any]]] = deque()
        self.running = False

    def start(self, collective: str, run: Awaitable[Any]) -> Request[Any]:
        """Queue ``run`` (the blocking ``collective``'s coroutine); return its request."""
        kernel = self.comm.kernel
        req: Request[Any] = Request(kernel, kernel.current, "i" + collective)
        req.nonblocking = True
        self.queue.append((run, req))
        if not self.running:
            self.running = True
            kernel.checks.untrack(kernel.spawn(self._drain(), "i" + collective))
        return req

    async def _drain(self) -> None:
        queue = self.queue
        while queue:
            run, req = queue.popleft()
            try:
                value = await run
            except BaseException as exc:  # noqa: BLE001 - the operation's Work raises it at wait()
                req.complete(None, exc)
            else:
                req.complete(value)
        self.running = False


def _monitor(side: Comm, size: int, seconds: float, wait_all: bool) -> None:
    """Rank 0 of a monitored barrier, as gloo's ``ProcessGroupGloo::monitoredBarrier`` runs it."""
    ms = milliseconds(seconds)
    deadline = side.now + seconds
    arrivals = {r: side.irecv(None, r, 1) for r in range(1, size)}
    passed: list[int] = []
    failed: list[int] = []

    def fail(problem: str) -> None:
        for r, req in arrivals.items():
            if r not in passed and req.cancel():  # not arrived: its next barrier starts afresh
                continue
            req.test()  # arrived (perhaps not yet looked at): it learns that the barrier failed
            _sync.block(side.isend("fail", r, 2))
        raise RuntimeError(problem)

    for r, req in arrivals.items():
        if not wait_all and side.now >= deadline:
            done = ", ".join(map(str, passed))
            processed = (f"Successfully processed ranks: {done}" if passed
                         else "No ranks successfully processed in monitoredBarrier.")
            fail(f"[Rank 0]: Rank {r} failed to pass monitoredBarrier in {ms} ms\n Original "
                 f"exception: \nRank 0 timed out in monitoredBarrier after {ms} ms.\n{processed}")
        arrived, _ = wait_until(req, deadline)
        if arrived:
            passed.append(r)
        elif not wait_all:
            fail(f"[Rank 0]: Rank {r} failed to pass monitoredBarrier in {ms} ms\n Original "
                 f"exception: \n{timeout_error('recv', seconds)}")
        else:
            failed.append(r)
    if failed:
        fail(f"[Rank 0]: Ranks {', '.join(map(str, failed))} failed to pass monitoredBarrier "
             f"in {ms} ms")
    for r in range(1, size):
        _sync.block(side.isend("pass", r, 2))


# ---- finishing helpers ----


def _put(output: torch.Tensor, value: Any) -> None:
    """Copy a result into ``output``: a numpy result (``_engine_view``) straight into the tensor's
    memory where numpy can write it, else as a tensor."""
    if isinstance(value, np.ndarray):
        target = _engine_view(output)
        if isinstance(target, np.ndarray):
            target[...] = value.reshape(target.shape)
            return
        value = torch.from_numpy(value.copy())
    with torch.no_grad():
        output.copy_(value.reshape(output.shape))


def _copy_to(output: torch.Tensor) -> Finish:
    def finish(value: Any) -> None:
        _put(output, value)
    return finish


def _copy_list(targets: list[torch.Tensor]) -> Finish:
    def finish(values: Any) -> None:
        if values is None:  # gather on a rank other than the root
            return
        for target, value in zip(targets, values):
            _put(target, value)
    return finish


def _concat_to(output: torch.Tensor) -> Finish:
    def finish(values: list[Any]) -> None:
        if values and all(isinstance(v, np.ndarray) for v in values):
            _put(output, np.concatenate([v.reshape(-1) for v in values]))
            return
        with torch.no_grad():
            output.copy_(torch.cat([v.reshape(-1) for v in values]).view(output.shape))
    return finish


def _chain(works: list[SimclusterWork], outputs: Sequence[torch.Tensor]) -> SimclusterWork:
    """One Work that waits for ``works`` in order."""
    def finish(_value: Any) -> None:
        for work in works:
            work.wait()
    return SimclusterWork(None, list(outputs), None, "coalesced") if not works else \
        _Chained(works, list(outputs), finish)


class _Chained(SimclusterWork):
    def __init__(self, works: list[SimclusterWork], outputs: list[torch.Tensor],
                 finish: Finish) -> None:
        super().__init__(None, outputs, None, "coalesced")
        self._works = works
        self._done = False

    def wait(self, timeout: Any = None) -> bool:
        for work in self._works:
            work.wait()
        self._done = True
        return True

    def is_completed(self) -> bool:
        self._done = self._done or all(w.is_completed() for w in self._works)
        return self._done


def _span_inputs(name: str, args: tuple[Any, ...]) -> list[tuple[str, list[Any]]]:
    """The profiler spans gloo records for the backend call ``name(*args)``: (title, input tensors).

    gloo's titles and inputs, as its own traces show them (tests/torch_backend/
    profiler_cases.py compares): ``all_gather_into_tensor`` is an ``all_gather``,
    a reduce-scatter is gloo's all_reduce of each input, a scatter's inputs are
    the root's list.
    """
    title = _SPAN_TITLES.get(name)
    if title is None:
        return []
    if name == "barrier":
        return [(title, [])]
    if len(args) < 2:
        return []
    first, second = args[0], args[1]
    if name in ("reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base"):
        inputs = list(second[0]) if name == "reduce_scatter" else [second]
        return [(title, [tensor]) for tensor in inputs]
    if name == "scatter":
        return [(title, list(second[0]) if second else [])]
    if name in ("allgather", "allgather_coalesced", "gather", "alltoall"):
        return [(title, list(second))]
    if name in ("all_gather_single", "_allgather_base", "all_to_all_single", "alltoall_base"):
        return [(title, [second])]
    return [(title, list(first))]


_SPAN_TITLES = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "reduce": "reduce",
    "reduce_scatter": "all_reduce", "reduce_scatter_single": "all_reduce",
    "_reduce_scatter_base": "all_reduce", "broadcast": "broadcast", "scatter": "scatter",
    "gather": "gather", "allgather": "all_gather", "all_gather_single": "all_gather",
    "_allgather_base": "all_gather", "allgather_coalesced": "all_gather", "alltoall": "all_to_all",
    "all_to_all_single": "all_to_all", "alltoall_base": "all_to_all", "barrier": "barrier",
    "send": "send", "recv": "recv", "recv_anysource": "recvAnySource",
}
"""gloo's span title per backend call (``"<backend>:<title>"`` in a profiler's trace)."""


def _unless_closed(method: Callable[..., SimclusterWork], op: str) -> Callable[..., SimclusterWork]:
    """``method``, or, once an operation of the group timed out on this rank, gloo's error.

    While this rank profiles, the call also records gloo's span for it,
    ended when the operation completes (``_profiler``).
    """
    def call(self: ProcessGroupSimcluster, *args: Any, **kwargs: Any) -> SimclusterWork:
        spans: list[Any] = []
        if torch.autograd._profiler_enabled():
            # gloo runs a reduce-scatter as one all_reduce after another: each span but the
            # last ends before the next starts (the profiler reads two opened in a row as one)
            for title, inputs in _span_inputs(op, args):
                for span in spans:
                    _profiler.close_span(span)
                spans = [_profiler.open_span(f"{self.named}:{title}", inputs)]
        if self._closed:
            work = SimclusterWork(None, [], None, op, error=RuntimeError(GLOO_CLOSED))
        else:
            try:
                work = method(self, *args, **kwargs)
            except RevokedError as exc:  # another member's operation on the group timed out
                work = SimclusterWork(None, [], None, op, error=closed_by(exc))
        work.args = args  # its tensors, for compute="gpu:..." (_gpu, Rule 3)
        _report.communication(args)  # a report run's memory counts them as communication buffers
        if spans:
            work.spans.extend(spans)
            if work._error is not None or work._done:
                work.end_spans()
        return work
    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]
    return call


for _name in ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single",
              "_reduce_scatter_base", "reduce_scatter_single_coalesced",
              "reduce_scatter_tensor_coalesced", "broadcast", "scatter", "gather", "allgather",
              "all_gather_single", "_allgather_base", "allgather_coalesced",
              "all_gather_single_coalesced", "allgather_into_tensor_coalesced", "alltoall",
              "all_to_all_single", "alltoall_base", "barrier", "send", "recv", "recv_anysource"):
    setattr(ProcessGroupSimcluster, _name, _unless_closed(getattr(ProcessGroupSimcluster, _name), _name))


# measured compute (torchrun --compute wall): each operation stops the rank's clock on entry
# and starts it on return, so only the user's code between operations is charged
_sync.measured_calls(ProcessGroupSimcluster, _Chained)


def _splits(t: torch.Tensor, sizes: list[int], size: int, who: str, what: str) -> list[int]:
    rows = t.shape[0] if t.dim() else 1
    if not sizes:
        if rows % size:
            raise ValueError(f"{who}: all_to_all_single: {what} has {rows} rows, not a "
                             f"multiple of world size {size}; pass {what}_split_sizes")
        return [rows // size] * size
    if len(sizes) != size or sum(sizes) != rows:
        raise ValueError(f"{who}: all_to_all_single: {what}_split_sizes={list(sizes)} must "
                         f"have {size} entries summing to the {rows} rows of {what}")
    return list(sizes)


# ---- sub-communicators ----


def subcomm(world: Comm, group_name: str, world_ranks: list[int]) -> Comm:
    """Return this rank's Comm on the communicator of ``world_ranks`` named ``group_name``.

    Made without messages: torch gives every member the same group name, so
    (name, ranks) names the communicator identically on every member, however
    many groups each rank made before (non-members of a group never see it).
    """
    # XX: mirrors Comm._derive (which numbers groups per parent, so it needs every parent
    # member to take part); a public Comm method for named groups would replace this.
    key = f"torch/{group_name}/{world_ranks}"
    engine = world.engine
    groups = groups_of(engine)
    ctx = 2 * (zlib.crc32(key.encode()) + 1)
    while ctx in groups and groups[ctx].key != key:
        ctx += 2 * (1 << 33)
    group = groups.get(ctx)
    if group is None:
        tasks = [groups[0].tasks[w] for w in world_ranks]
        group = Group(engine, ctx, list(world_ranks), f"torch:{group_name}", tasks)
        group.key = key
    return group.member(world_ranks.index(world.world_rank))


Creator = Callable[[Any, Any], ProcessGroupSimcluster]
