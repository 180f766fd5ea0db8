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
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

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

from simcluster.comm import Comm, Group, groups_of
from simcluster.engine import sync as _sync
from simcluster.matching import ANY_SOURCE
from simcluster.ops import ReduceOp
from simcluster.request import Request
from simcluster.torch._work import Finish, SimclusterWork

BACKEND = "simcluster"

_OPS: dict[Any, ReduceOp] = {
    getattr(dist.ReduceOp, name): getattr(ReduceOp, name)
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
}
"""torch's ReduceOp kinds (``opts.reduceOp.op``) and the simcluster op for each."""


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel() * tensor.element_size())


class ProcessGroupSimcluster(dist.ProcessGroup):  # type: ignore[misc]  # torch is optional: not followed
    """A torch.distributed process group whose operations run on a simcluster Comm.

    Made by ``dist.init_process_group("simcluster")`` and ``dist.new_group``
    inside ``simcluster.torch.spawn``; users never build one themselves.
    Every operation costs what its simcluster collective or message costs
    under the run's latency model, and shows in the run's stats and trace.
    """

    def __init__(self, comm: Comm, group_name: str = "") -> None:
        super().__init__(comm.rank, comm.size)
        self._comm = comm
        self._group_name = group_name
        self._group_desc = "undefined"

    # ---- facts ----

    @property
    def comm(self) -> Comm:
        """The simcluster communicator this group runs on."""
        return self._comm

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

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

    # ---- plumbing ----

    def _work(self, req: Request[Any] | None, outputs: Sequence[torch.Tensor],
              finish: Finish | None = None, op: str = "") -> SimclusterWork:
        return SimclusterWork(req, list(outputs), finish, op)

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
        if len(tensors) == 1:
            tensor = tensors[0]
            req = self._comm.iall_reduce(tensor, op, algorithm=self._nccl("all_reduce", _nbytes(tensor)))
            return self._work(req, tensors, op="all_reduce")
        return self._coalesced_all_reduce(tensors, op)

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
        req = self._comm.iall_reduce(flat, op, algorithm=self._nccl("all_reduce", _nbytes(flat)))
        return self._work(req, tensors, finish, "all_reduce_coalesced")

    def _nccl(self, collective: str, nbytes: int) -> str | None:
        """What NCCL would run on a platform with GPUs (``_nccl.algorithm``); else None: the default."""
        if not getattr(self._comm.latency, "gpus", False):  # the common case: no platform, no import
            return None
        from simcluster.collectives import _nccl

        return _nccl.algorithm(self._comm, collective, nbytes)

    def reduce(self, tensors: list[torch.Tensor],
               opts: ReduceOptions = ReduceOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("reduce", tensors)
        req = self._comm.ireduce(tensor, opts.rootRank, self._op("reduce", opts))
        return self._work(req, tensors, op="reduce")

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: ReduceScatterOptions = ReduceScatterOptions()  # noqa: B008
                       ) -> SimclusterWork:
        output = self._one("reduce_scatter", outputs)
        req = self._comm.ireduce_scatter(list(inputs[0]), self._op("reduce_scatter", opts),
                                         algorithm=self._nccl("reduce_scatter", 0))
        return self._work(req, outputs, _copy_to(output), "reduce_scatter")

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                              opts: ReduceScatterOptions = ReduceScatterOptions()  # noqa: B008
                              ) -> SimclusterWork:
        size = self._comm.size
        if input.numel() != size * output.numel():
            raise ValueError(f"{self._who()}: reduce_scatter_tensor: input has "
                             f"{input.numel()} elements, not world size {size} x output's "
                             f"{output.numel()}; size input as {size} outputs")
        parts = list(input.detach().reshape(-1).chunk(size))
        req = self._comm.ireduce_scatter(parts, self._op("reduce_scatter_tensor", opts),
                                         algorithm=self._nccl("reduce_scatter", 0))
        return self._work(req, [output], _copy_to(output), "reduce_scatter_tensor")

    _reduce_scatter_base = reduce_scatter_single  # the older name

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: ReduceScatterOptions = ReduceScatterOptions()  # noqa: B008
                                        ) -> SimclusterWork:
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    # ---- broadcast, scatter, gather ----

    def broadcast(self, tensors: list[torch.Tensor],
                  opts: BroadcastOptions = BroadcastOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("broadcast", tensors)
        return self._work(self._comm.ibroadcast(tensor, opts.rootRank), tensors, op="broadcast")

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                opts: ScatterOptions = ScatterOptions()) -> SimclusterWork:  # noqa: B008
        output = self._one("scatter", outputs)
        root = opts.rootRank
        objs = list(inputs[0]) if self._comm.rank == root else None
        req = self._comm.iscatter(objs, root)
        return self._work(req, outputs, _copy_to(output), "scatter")

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: GatherOptions = GatherOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("gather", inputs)
        root = opts.rootRank
        req = self._comm.igather(tensor, root)
        targets = list(outputs[0]) if self._comm.rank == root and outputs else []
        return self._work(req, targets, _copy_list(targets), "gather")

    # ---- all_gather, all_to_all ----

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: AllgatherOptions = AllgatherOptions()) -> SimclusterWork:  # noqa: B008
        tensor = self._one("all_gather", inputs)
        targets = list(outputs[0])
        req = self._comm.iall_gather(tensor, algorithm=self._nccl("all_gather", 0))
        return self._work(req, targets, _copy_list(targets), "all_gather")

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          opts: AllgatherOptions = AllgatherOptions()  # noqa: B008
                          ) -> SimclusterWork:
        size = self._comm.size
        if output.numel() != size * input.numel():
            raise ValueError(f"{self._who()}: all_gather_into_tensor: output has "
                             f"{output.numel()} elements, not world size {size} x input's "
                             f"{input.numel()}; size output as {size} inputs")
        req = self._comm.iall_gather(input, algorithm=self._nccl("all_gather", 0))
        return self._work(req, [output], _concat_to(output), "all_gather_into_tensor")

    _allgather_base = all_gather_single  # the older name

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: AllgatherOptions = AllgatherOptions()  # noqa: B008
                                    ) -> SimclusterWork:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: AllToAllOptions = AllToAllOptions()) -> SimclusterWork:  # noqa: B008
        req = self._comm.iall_to_all(list(inputs))
        return self._work(req, outputs, _copy_list(list(outputs)), "all_to_all")

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          output_split_sizes: list[int], input_split_sizes: list[int],
                          opts: AllToAllOptions = AllToAllOptions()  # noqa: B008
                          ) -> SimclusterWork:
        size, who = self._comm.size, self._who()
        in_splits = _splits(input, input_split_sizes, size, who, "input")
        out_splits = _splits(output, output_split_sizes, size, who, "output")
        pieces = list(torch.split(input.detach(), in_splits))
        req = self._comm.iall_to_all(pieces)

        def finish(values: list[torch.Tensor]) -> None:
            with torch.no_grad():
                for target, value in zip(torch.split(output, out_splits), values):
                    if target.numel() != value.numel():
                        raise ValueError(
                            f"{who}: all_to_all_single: output_split_sizes={out_splits} "
                            f"expects {target.shape[0]} rows from a rank that sent "
                            f"{value.shape[0] if value.dim() else 0}; make each rank's output "
                            "split match what the peer's input split sends it")
                    target.copy_(value.reshape(target.shape))
        return self._work(req, [output], finish, "all_to_all_single")

    alltoall_base = all_to_all_single  # the older name

    # ---- barrier, point-to-point ----

    def barrier(self, opts: BarrierOptions = BarrierOptions()) -> SimclusterWork:  # noqa: B008
        return self._work(self._comm.ibarrier(), [], op="barrier")

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """``dist.monitored_barrier`` on a group the script made as gloo (``simcluster torchrun``).

        A barrier: ``timeout`` and ``wait_all_ranks`` change nothing (time is
        virtual). A rank that never arrives ends the run with the deadlock
        report, which names the ranks waiting in the barrier and each rank
        that never entered it, with what it does instead (finished, or waits
        elsewhere, at the script's line). torch lets
        ``dist.monitored_barrier`` run only where ``dist.get_backend(group)``
        is ``"gloo"``.
        """
        self.barrier().wait()

    def send(self, tensors: list[torch.Tensor], dstRank: int, tag: int = 0) -> SimclusterWork:  # noqa: N803
        tensor = self._one("send", tensors)
        return self._work(self._comm.isend(tensor, dstRank, tag), tensors, op="send")

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int = 0) -> SimclusterWork:  # noqa: N803
        tensor = self._one("recv", tensors)
        return self._work(self._comm.irecv(tensor, srcRank, tag), tensors, op="recv")

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> SimclusterWork:
        tensor = self._one("recv", tensors)
        return self._work(self._comm.irecv(tensor, ANY_SOURCE, tag), tensors, op="recv")


# ---- finishing helpers ----


def _copy_to(output: torch.Tensor) -> Finish:
    def finish(value: Any) -> None:
        with torch.no_grad():
            output.copy_(value.reshape(output.shape))
    return finish


def _copy_list(targets: list[torch.Tensor]) -> Finish:
    def finish(values: Any) -> None:
        if values is None:  # gather on a rank other than the root
            return
        with torch.no_grad():
            for target, value in zip(targets, values):
                target.copy_(value.reshape(target.shape))
    return finish


def _concat_to(output: torch.Tensor) -> Finish:
    def finish(values: list[torch.Tensor]) -> None:
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
