"""Differential cases: the group registry, functional collectives, DeviceMesh and DTensor.

Each case is written as a torch user writes code with these APIs and runs on
every rank (``differential.run_cases``) after ``init_process_group``, under
gloo and under simcluster. The world size is 4 or 8: meshes are shaped from
it ((2, size // 2), and (2, 2, size // 4) for 3-D), so a run at 8 has a full
(2, 2, 2) mesh. Ranks in the same group must call the same collectives in
the same order, so every case makes the same calls on every rank.

``BACKEND_CASE`` names the case whose values differ by design (the backend's
name); the test module asserts it apart from the differential.
"""

from __future__ import annotations

import contextlib
import io
import itertools
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import visualize_sharding
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    loss_parallel,
    parallelize_module,
)

BACKEND_CASE = "backend_names"

PLACEMENTS = {"S0": Shard(0), "S1": Shard(1), "R": Replicate(), "P": Partial()}
"""The placements ``redistribute`` is asked to move between, by a short name."""

c10d_ops = torch.ops._c10d_functional


def _attempt(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """What ``fn(*args, **kwargs)`` gives, or ``("raised", type, first line)``.

    Only for calls that raise, if they do, on every rank alike before communicating, so
    that the ranks go on calling the same collectives.
    """
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the error is the value
        return ("raised", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")


def _member(group: Any) -> bool:
    return group is not None and group != dist.GroupMember.NON_GROUP_MEMBER


def _facts(group: Any) -> dict[str, Any]:
    """What torch's registry says of ``group`` on this rank."""
    if not _member(group):
        return {"member": False}
    name = group.group_name
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t, group=group)
    return {"member": True, "name": name, "desc": group.group_desc,
            "resolves": _resolve_process_group(name) is group,
            "ranks": dist.get_process_group_ranks(group), "rank": dist.get_rank(group),
            "size": dist.get_world_size(group), "all_reduce": t}


def _unique(names: list[str]) -> bool:
    return len(set(names)) == len(names)


# ---- process groups: names, registry, destroy, split ----


def world_registry(rank: int, size: int) -> Any:
    world = dist.group.WORLD
    facts = _facts(world)
    facts["same_as_default"] = dist.distributed_c10d._get_default_group() is world
    return facts


def new_group_registry(rank: int, size: int) -> Any:
    # made by its members only, named by a hash of its ranks and of how many groups the
    # rank has: made first, while every member has the same groups (the world only)
    but_first = dist.new_group(list(range(1, size)), use_local_synchronization=True) \
        if rank > 0 else None
    pair = dist.new_group([0, 1])
    ends = dist.new_group([0, size - 1], group_desc="the ends")
    everyone = dist.new_group(list(range(size)))
    groups = [dist.group.WORLD, pair, ends, everyone] + ([but_first] if rank > 0 else [])
    names = [g.group_name for g in groups if _member(g)]
    return {"pair": _facts(pair), "ends": _facts(ends), "everyone": _facts(everyone),
            "but_first": _facts(but_first) if rank > 0 else None, "unique": _unique(names)}


def new_subgroups_registry(rank: int, size: int) -> Any:
    cur, subgroups = dist.new_subgroups(group_size=2, group_desc="pairs")
    by_enum, enum_groups = dist.new_subgroups_by_enumeration(
        [list(range(0, size, 2)), list(range(1, size, 2))])
    names = [dist.group.WORLD.group_name, cur.group_name, by_enum.group_name]
    return {"cur": _facts(cur), "subgroups": [_member(g) and g.group_name for g in subgroups],
            "by_enum": _facts(by_enum), "enum_groups": [_member(g) and g.group_name
                                                        for g in enum_groups],
            "unique": _unique(names)}


def mesh_dim_group_registry(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group(1)
    names = [dist.group.WORLD.group_name, dp.group_name, tp.group_name]
    return {"dp": _facts(dp), "tp": _facts(tp), "unique": _unique(names),
            "by_name_is_by_index": mesh.get_group(0) is dp and mesh.get_group("tp") is tp,
            "slice_group_is_dim_group": mesh["tp"].get_group() is tp,
            "all_groups": [g.group_name for g in mesh.get_all_groups()]}


def destroy_subgroup_then_world(rank: int, size: int) -> Any:
    pair = dist.new_group([0, 1])
    out: dict[str, Any] = {"before": _facts(pair)}
    if _member(pair):
        name = pair.group_name
        dist.destroy_process_group(pair)
        out["resolve_after"] = _attempt(lambda: _resolve_process_group(name) is pair)
        ranks_after = _attempt(dist.get_process_group_ranks, pair)
        out["ranks_after"] = ranks_after[:2]  # the message names the group by its address
        out["all_reduce_after"] = _attempt(dist.all_reduce, torch.ones(1), group=pair)
    t = torch.arange(3.0) + rank
    dist.all_reduce(t)
    out["world_all_reduce"] = t
    out["world"] = _facts(dist.group.WORLD)
    out["next_group"] = _facts(dist.new_group([1, 2]))
    return out


def split_group_on_cpu(rank: int, size: int) -> Any:
    return dist.split_group(split_ranks=[[0, 1], list(range(2, size))])


def split_group_without_ranks(rank: int, size: int) -> Any:
    return dist.split_group(split_ranks=[])


def backend_names(rank: int, size: int) -> Any:
    pair = dist.new_group([0, 1])
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    return {"default": dist.get_backend(), "world": dist.get_backend(dist.group.WORLD),
            "pair": dist.get_backend(pair) if _member(pair) else None,
            "mesh_tp": dist.get_backend(mesh.get_group("tp"))}


# ---- functional collectives ----


def _ragged(rank: int, group_rank: int, n: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """An input of 1 or 2 rows for each peer, and the rows this rank gets from each."""
    splits_in = [1 + (group_rank + i) % 2 for i in range(n)]
    splits_out = [1 + (i + group_rank) % 2 for i in range(n)]  # what peer i sends this rank
    return torch.arange(float(sum(splits_in))) + 100 * rank, splits_out, splits_in


def _funcol_round(group: Any, rank: int, group_rank: int, n: int) -> dict[str, Any]:
    """Each functional collective once on ``group`` (``n`` ranks), every result waited on."""
    x = torch.arange(2 * n, dtype=torch.float32).reshape(n, 2) + 10 * rank
    ragged, splits_out, splits_in = _ragged(rank, group_rank, n)
    return {
        "all_reduce_sum": funcol.wait_tensor(funcol.all_reduce(x, "sum", group)),
        "all_reduce_max": funcol.all_reduce(x, "max", group) + 0,
        "all_reduce_avg": funcol.all_reduce(x, "avg", group) + 0,
        "all_reduce_product": funcol.all_reduce(x / 10 + 1, "product", group) * 1,
        "all_gather_dim0": funcol.wait_tensor(funcol.all_gather_tensor(x, 0, group)),
        "all_gather_dim1": funcol.all_gather_tensor(x, 1, group) + 0,
        "reduce_scatter_dim0": funcol.wait_tensor(
            funcol.reduce_scatter_tensor(x, "sum", 0, group)),
        "reduce_scatter_dim1": funcol.reduce_scatter_tensor(
            x.repeat(1, n), "sum", 1, group) + 0,
        "all_to_all_even": funcol.wait_tensor(funcol.all_to_all_single(x, None, None, group)),
        "all_to_all_ragged": funcol.wait_tensor(
            funcol.all_to_all_single(ragged, splits_out, splits_in, group)),
        "broadcast": funcol.wait_tensor(funcol.broadcast(x, 0, group)),
        "all_gather_single": funcol.all_gather_single(x, 1, group) + 0,
        "reduce_scatter_single": funcol.reduce_scatter_single(x, "sum", 0, group) + 0,
        "all_reduce_coalesced": [funcol.wait_tensor(t) for t in
                                 funcol.all_reduce_coalesced([x, x[0] * 2], "min", group)],
    }


def funcol_world(rank: int, size: int) -> Any:
    world = dist.group.WORLD
    return {"by_group": _funcol_round(world, rank, rank, size),
            "by_name": _funcol_round(world.group_name, rank, rank, size)}


def funcol_subgroup(rank: int, size: int) -> Any:
    cur, _ = dist.new_subgroups(group_size=2)
    return {"by_group": _funcol_round(cur, rank, rank % 2, 2),
            "by_name": _funcol_round(cur.group_name, rank, rank % 2, 2)}


def funcol_mesh_dim(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    return {"dp_tuple": _funcol_round((mesh, 0), rank, dp, 2),
            "tp_tuple": _funcol_round((mesh, 1), rank, tp, size // 2),
            "tp_slice": _funcol_round(mesh["tp"], rank, tp, size // 2),
            "dp_group": _funcol_round(mesh.get_group("dp"), rank, dp, 2)}


def funcol_autograd(rank: int, size: int) -> Any:
    torch.manual_seed(rank)
    x = torch.randn(2, 3, requires_grad=True)
    world = dist.group.WORLD
    gathered = funcol.all_gather_tensor_autograd(x, 0, world)
    scattered = funcol.reduce_scatter_tensor_autograd(
        funcol.wait_tensor(gathered) * (rank + 1), "sum", 0, world)
    moved = funcol.all_to_all_single_autograd(
        funcol.wait_tensor(gathered), None, None, world)
    reduced = funcol.all_reduce(x, "sum", world)  # no autograd: a constant downstream
    loss = (funcol.wait_tensor(scattered) ** 2).sum() + funcol.wait_tensor(moved).sum() \
        + (x * funcol.wait_tensor(reduced)).sum()
    loss.backward()
    return {"loss": loss, "grad": x.grad}


def _c10d_op_round(name: str, rank: int, group_rank: int, n: int) -> dict[str, Any]:
    """The ``torch.ops._c10d_functional`` ops, called with the group's name."""
    x = torch.arange(2.0 * n).reshape(n, 2) + 10 * rank
    ragged, splits_out, splits_in = _ragged(rank, group_rank, n)
    inplace = x.clone()
    c10d_ops.wait_tensor(c10d_ops.all_reduce_(inplace, "sum", name))
    return {
        "all_reduce": c10d_ops.wait_tensor(c10d_ops.all_reduce(x, "sum", name)),
        "all_reduce_min": c10d_ops.wait_tensor(c10d_ops.all_reduce(x, "min", name)),
        "all_reduce_avg": c10d_ops.wait_tensor(c10d_ops.all_reduce(x, "avg", name)),
        "all_reduce_": inplace,
        "all_reduce_coalesced": [c10d_ops.wait_tensor(t) for t in
                                 c10d_ops.all_reduce_coalesced([x, x[0] * 2], "sum", name)],
        "all_gather_into_tensor": c10d_ops.wait_tensor(
            c10d_ops.all_gather_into_tensor(x, n, name)),
        "all_gather_into_tensor_coalesced": [
            c10d_ops.wait_tensor(t)
            for t in c10d_ops.all_gather_into_tensor_coalesced([x, x + 1], n, name)],
        "reduce_scatter_tensor": c10d_ops.wait_tensor(
            c10d_ops.reduce_scatter_tensor(x, "sum", n, name)),
        "reduce_scatter_tensor_coalesced": [
            c10d_ops.wait_tensor(t)
            for t in c10d_ops.reduce_scatter_tensor_coalesced([x, x * 3], "sum", n, name)],
        "all_to_all_single": c10d_ops.wait_tensor(
            c10d_ops.all_to_all_single(x, [1] * n, [1] * n, name)),
        "all_to_all_single_ragged": c10d_ops.wait_tensor(
            c10d_ops.all_to_all_single(ragged, splits_out, splits_in, name)),
        "broadcast": c10d_ops.wait_tensor(c10d_ops.broadcast(x, n - 1, name)),
    }


def c10d_functional_ops(rank: int, size: int) -> Any:
    cur, _ = dist.new_subgroups(group_size=2)
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    return {"world": _c10d_op_round(dist.group.WORLD.group_name, rank, rank, size),
            "subgroup": _c10d_op_round(cur.group_name, rank, rank % 2, 2),
            "mesh_tp": _c10d_op_round(mesh.get_group("tp").group_name, rank,
                                      mesh.get_local_rank("tp"), size // 2)}


def c10d_functional_unknown_group(rank: int, size: int) -> Any:
    return c10d_ops.all_reduce(torch.ones(2), "sum", "no such group")


# ---- DeviceMesh ----


def _mesh_facts(mesh: DeviceMesh) -> dict[str, Any]:
    return {"repr": repr(mesh), "mesh": mesh.mesh, "shape": list(mesh.shape), "ndim": mesh.ndim,
            "size": mesh.size(), "sizes": [mesh.size(d) for d in range(mesh.ndim)],
            "names": list(mesh.mesh_dim_names or ()), "coordinate": mesh.get_coordinate(),
            "local_ranks": [mesh.get_local_rank(d) for d in range(mesh.ndim)],
            "rank": mesh.get_rank(), "device_type": mesh.device_type}


def mesh_1d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("dp",))
    group = mesh.get_group()
    return {"mesh": _mesh_facts(mesh), "group": _facts(group),
            "group_is_dim": group is mesh.get_group("dp"),
            "local_rank_by_name": mesh.get_local_rank("dp"),
            "sliced": _mesh_facts(mesh["dp"]),
            "unnamed": _mesh_facts(init_device_mesh("cpu", (size,)))}


def mesh_2d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    flat = mesh["dp", "tp"]._flatten("dp_tp")
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=flat.get_group())
    return {"mesh": _mesh_facts(mesh), "dp": _mesh_facts(mesh["dp"]),
            "tp": _mesh_facts(mesh["tp"]), "dp_tp": _mesh_facts(mesh["dp", "tp"]),
            "local_rank_by_name": [mesh.get_local_rank("dp"), mesh.get_local_rank("tp")],
            "groups": [_facts(mesh.get_group("dp")), _facts(mesh.get_group("tp"))],
            "flat": _mesh_facts(flat), "flat_group": _facts(flat.get_group()),
            "flat_again_is_same": mesh["dp", "tp"]._flatten("dp_tp") is flat,
            "flat_sum": t, "flat_by_root_name": _mesh_facts(mesh["dp_tp"])}


def mesh_3d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, 2, size // 4), mesh_dim_names=("pp", "dp", "tp"))
    dp_tp = mesh["dp", "tp"]._flatten("dp_tp")
    pp_dp = mesh["pp", "dp"]._flatten()  # the default name joins the dims' names
    x = torch.arange(2.0) + rank
    return {"mesh": _mesh_facts(mesh),
            "one": {n: _mesh_facts(mesh[n]) for n in ("pp", "dp", "tp")},
            "two": {f"{a},{b}": _mesh_facts(mesh[a, b])
                    for a, b in (("pp", "dp"), ("dp", "tp"), ("pp", "tp"))},
            "three": _mesh_facts(mesh["pp", "dp", "tp"]),
            "dp_tp": _mesh_facts(dp_tp), "pp_dp": _mesh_facts(pp_dp),
            "groups": {n: _facts(mesh.get_group(n)) for n in ("pp", "dp", "tp")},
            "flat_group": _facts(dp_tp.get_group()),
            "unique": _unique([g.group_name for g in mesh.get_all_groups()]
                              + [dp_tp.get_group().group_name, pp_dp.get_group().group_name]),
            "sums": {n: funcol.all_reduce(x, "sum", (mesh, i)) + 0
                     for i, n in enumerate(("pp", "dp", "tp"))},
            "flat_gather": funcol.all_gather_tensor(x, 0, dp_tp) + 0}


def mesh_mistakes(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    return {"get_group_no_dim": _attempt(mesh.get_group),
            "get_local_rank_no_dim": _attempt(mesh.get_local_rank),
            "unknown_name": _attempt(lambda: mesh["pp"]),
            "out_of_order": _attempt(lambda: mesh["tp", "dp"]),
            "bad_dim": _attempt(mesh.get_group, 5),
            "names_mismatch": _attempt(init_device_mesh, "cpu", (2, size // 2),
                                       mesh_dim_names=("dp",)),
            "wrong_size": _attempt(init_device_mesh, "cpu", (3, size))}


def mesh_from_group(rank: int, size: int) -> Any:
    cur, _ = dist.new_subgroups(group_size=2)
    mesh = DeviceMesh.from_group(cur, "cpu", mesh_dim_names=("pair",))
    world = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    return {"pair": _mesh_facts(mesh), "is_group": mesh.get_group() is cur,
            "world": _mesh_facts(world), "world_is_world": world.get_group() is dist.group.WORLD}


# ---- DTensor: placing, redistributing ----


def _dtensor_facts(d: DTensor) -> dict[str, Any]:
    return {"placements": [str(p) for p in d.placements], "shape": list(d.shape),
            "stride": list(d.stride()), "local": d.to_local(), "full": d.full_tensor()}


def distribute_tensor_1d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    torch.manual_seed(0)
    even = torch.randn(size * 2, size)
    uneven = torch.randn(size + 1, 3)  # shards of unequal rows, the last one short
    out = {}
    for pname, placement in PLACEMENTS.items():
        for tname, t in (("even", even), ("uneven", uneven)):
            d = _attempt(distribute_tensor, t, mesh, [placement])
            out[f"{pname}/{tname}"] = _dtensor_facts(d) if isinstance(d, DTensor) else d
    out["src_data_rank_none"] = _dtensor_facts(
        distribute_tensor(even + rank, mesh, [Shard(0)], src_data_rank=None))
    return out


def from_local_1d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    local = torch.arange(6.0).reshape(2, 3) + 10 * rank
    out = {name: _dtensor_facts(DTensor.from_local(local, mesh, [p]))
           for name, p in PLACEMENTS.items() if name != "R"}
    out["R"] = _dtensor_facts(DTensor.from_local(local * 0 + 1, mesh, [Replicate()]))
    out["P_max"] = _dtensor_facts(DTensor.from_local(local, mesh, [Partial("max")]))
    out["P_avg"] = _dtensor_facts(DTensor.from_local(local, mesh, [Partial("avg")]))
    rows = 2 if rank < size - 1 else 1  # the uneven case: shape and stride given
    ragged = torch.ones(rows, 3) * rank
    out["uneven"] = _dtensor_facts(DTensor.from_local(
        ragged, mesh, [Shard(0)], shape=torch.Size([2 * size - 1, 3]), stride=(3, 1)))
    out["R_checked"] = _dtensor_facts(DTensor.from_local(
        local, mesh, [Replicate()], run_check=True))
    return out


def _redistribute_all(mesh: DeviceMesh, t: torch.Tensor) -> dict[str, Any]:
    names = list(itertools.product(PLACEMENTS, repeat=mesh.ndim))
    out = {}
    for src in names:
        src_pl = [PLACEMENTS[n] for n in src]
        for dst in names:
            dst_pl = [PLACEMENTS[n] for n in dst]
            d = DTensor.from_local(t, mesh, src_pl, run_check=False)
            # torch refuses some moves (to Partial from a shard) before communicating
            moved = _attempt(d.redistribute, mesh, dst_pl)
            out[f"{'.'.join(src)}->{'.'.join(dst)}"] = moved if not isinstance(
                moved, DTensor) else {"placements": [str(p) for p in moved.placements],
                                      "local": moved.to_local(), "full": moved.full_tensor()}
    return out


def redistribute_1d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    return _redistribute_all(mesh, torch.arange(2.0 * size * size).reshape(2 * size, size) + rank)


def redistribute_2d(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    return _redistribute_all(mesh, torch.arange(4.0 * size).reshape(4, size) * (rank + 1))


def redistribute_uneven(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    torch.manual_seed(0)
    t = torch.randn(size + 1, size - 1)
    d = distribute_tensor(t, mesh, [Shard(0)])
    return {"S0->S1": _dtensor_facts(d.redistribute(mesh, [Shard(1)])),
            "S0->R": _dtensor_facts(d.redistribute(mesh, [Replicate()])),
            "S0->R->S0": _dtensor_facts(d.redistribute(mesh, [Replicate()]).redistribute(
                mesh, [Shard(0)])),
            "P->S1": _dtensor_facts(DTensor.from_local(
                t, mesh, [Partial()]).redistribute(mesh, [Shard(1)]))}


# ---- DTensor: the ops a model uses, with backward ----


def _leaf(d: DTensor) -> DTensor:
    return d.detach().requires_grad_()


def matmul_sharded(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    torch.manual_seed(0)
    # small integers: every sum is exact, so the squared loss's gradients do not depend on
    # the order a reduction adds in (gloo's ring or another)
    x = torch.randint(-3, 4, (2 * size, 3 * size)).float()
    w = torch.randint(-3, 4, (3 * size, 2 * size)).float()
    out: dict[str, Any] = {}
    for name, xp, wp in (("rows_x_replicated", Shard(0), Replicate()),
                         ("colwise", Replicate(), Shard(1)),
                         ("rowwise", Shard(1), Shard(0))):
        dx, dw = _leaf(distribute_tensor(x, mesh, [xp])), _leaf(distribute_tensor(w, mesh, [wp]))
        y = dx @ dw
        loss = (y.redistribute(mesh, [Replicate()]) ** 2).sum()
        loss.backward()
        out[name] = {"y_placements": [str(p) for p in y.placements], "y": y, "loss": loss,
                     "x_grad": dx.grad, "w_grad": dw.grad}
    px, pw = x.clone().requires_grad_(), w.clone().requires_grad_()
    ploss = ((px @ pw) ** 2).sum()
    ploss.backward()
    out["plain"] = {"y": px @ pw, "loss": ploss, "x_grad": px.grad, "w_grad": pw.grad}
    return out


def elementwise_softmax_layer_norm(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    x, b = torch.randn(4, 2 * size), torch.randn(4, 2 * size)
    weight, bias = torch.randn(2 * size), torch.randn(2 * size)

    def run(x: Any, b: Any, weight: Any, bias: Any) -> Any:
        s = (x + b) * 2
        soft = s.softmax(dim=0)
        normed = F.layer_norm(s, (2 * size,), weight, bias)
        loss = (soft * normed).sum() + torch.tanh(s).mean()
        loss.backward()
        return {"sum": s, "softmax": soft, "layer_norm": normed, "loss": loss}

    leaves = [_leaf(distribute_tensor(x, mesh, [Shard(0), Replicate()])),
              _leaf(distribute_tensor(b, mesh, [Shard(0), Replicate()])),
              _leaf(distribute_tensor(weight, mesh, [Replicate(), Replicate()])),
              _leaf(distribute_tensor(bias, mesh, [Replicate(), Replicate()]))]
    out = {"dtensor": run(*leaves), "grads": [d.grad for d in leaves]}
    plain = [t.clone().requires_grad_() for t in (x, b, weight, bias)]
    out["plain"] = run(*plain)
    out["plain_grads"] = [t.grad for t in plain]
    return out


def embedding(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    torch.manual_seed(0)
    table = torch.randn(2 * size, 3 * size)
    ids = torch.tensor([[0, 3, 2 * size - 1], [1, 1, size]])
    out: dict[str, Any] = {}
    for name, placement in (("rowwise", Shard(0)), ("colwise", Shard(1)), ("replicated",
                                                                           Replicate())):
        w = _leaf(distribute_tensor(table, mesh, [placement]))
        dids = distribute_tensor(ids, mesh, [Replicate()])
        y = F.embedding(dids, w)
        full = y.full_tensor()  # once: a rowwise lookup's partial result is reduced only once
        loss = (full * torch.arange(3.0 * size)).sum()
        loss.backward()
        out[name] = {"y_placements": [str(p) for p in y.placements], "y": full, "loss": loss,
                     "grad": w.grad}
    plain = table.clone().requires_grad_()
    ploss = (F.embedding(ids, plain) * torch.arange(3.0 * size)).sum()
    ploss.backward()
    out["plain"] = {"y": F.embedding(ids, table), "loss": ploss, "grad": plain.grad}
    return out


def cross_entropy(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (size,))
    torch.manual_seed(0)
    logits, target = torch.randn(2 * size, 3 * size), torch.randint(0, 3 * size, (2 * size,))
    out: dict[str, Any] = {}
    for name, placement in (("batch_sharded", Shard(0)), ("replicated", Replicate())):
        d = _leaf(distribute_tensor(logits, mesh, [placement]))
        loss = F.cross_entropy(d, distribute_tensor(target, mesh, [placement]))
        loss.backward()
        out[name] = {"loss": loss, "grad": d.grad}
    d = _leaf(distribute_tensor(logits, mesh, [Shard(1)]))
    with loss_parallel():  # class-sharded logits: the loss without gathering them
        loss = F.cross_entropy(d, distribute_tensor(target, mesh, [Replicate()]))
        loss.backward()
    out["loss_parallel"] = {"loss": loss, "grad": d.grad}
    plain = logits.clone().requires_grad_()
    ploss = F.cross_entropy(plain, target)
    ploss.backward()
    out["plain"] = {"loss": ploss, "grad": plain.grad}
    return out


class _Mlp(torch.nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 2 * size)
        self.up = torch.nn.Linear(2 * size, 4 * size)
        self.down = torch.nn.Linear(4 * size, 2 * size)
        self.norm = torch.nn.LayerNorm(2 * size)
        self.head = torch.nn.Linear(2 * size, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        h = h + self.down(torch.relu(self.up(h)))
        return self.head(self.norm(h))


def tensor_parallel_mlp(rank: int, size: int) -> Any:
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model, plain = _Mlp(size), _Mlp(size)
    plain.load_state_dict(model.state_dict())
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    ids = torch.tensor([[1, 5, 7, 2], [3, 3, 15, 0]])
    target = torch.tensor([[2, 4, 6, 8], [1, 3, 5, 7]])
    results = {}
    for name, m in (("tp", model), ("plain", plain)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for _ in range(2):
            loss = F.cross_entropy(m(ids).flatten(0, 1), target.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        results[name] = {"losses": losses, "weights": {k: v.full_tensor() if isinstance(v, DTensor)
                                                       else v for k, v in m.state_dict().items()}}
    results["placements"] = {k: [str(p) for p in v.placements]
                             for k, v in model.state_dict().items() if isinstance(v, DTensor)}
    return results


def _visualize(d: Any, **kwargs: Any) -> Any:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        value = _attempt(visualize_sharding, d, **kwargs)
    return {"value": value, "printed": printed.getvalue()}


def visualize(rank: int, size: int) -> Any:
    mesh1 = init_device_mesh("cpu", (size,))
    mesh2 = init_device_mesh("cpu", (2, size // 2))
    t = torch.arange(4.0 * size).reshape(size, 4)
    return {"1d_mesh_rows": _visualize(distribute_tensor(t, mesh1, [Shard(0)])),
            "2d_mesh": _visualize(distribute_tensor(t, mesh2, [Shard(0), Shard(1)]),
                                  header="2-D"),
            "replicated_1d_tensor": _visualize(distribute_tensor(t[0], mesh1, [Replicate()])),
            "3d_tensor": _visualize(distribute_tensor(t.reshape(2, size // 2, 4), mesh1,
                                                      [Replicate()])),
            "rich": _visualize(distribute_tensor(t, mesh1, [Shard(1)]), use_rich=True)}


CASES = {f.__name__: f for f in (
    world_registry, new_group_registry, new_subgroups_registry, mesh_dim_group_registry,
    destroy_subgroup_then_world, split_group_on_cpu, split_group_without_ranks, backend_names,
    funcol_world, funcol_subgroup, funcol_mesh_dim, funcol_autograd, c10d_functional_ops,
    c10d_functional_unknown_group,
    mesh_1d, mesh_2d, mesh_3d, mesh_mistakes, mesh_from_group,
    distribute_tensor_1d, from_local_1d, redistribute_1d, redistribute_2d, redistribute_uneven,
    matmul_sharded, elementwise_softmax_layer_norm, embedding, cross_entropy,
    tensor_parallel_mlp, visualize)}
