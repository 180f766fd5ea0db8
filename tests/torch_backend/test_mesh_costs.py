"""Collectives that DTensor and FSDP2 issue on a DeviceMesh cost what their formulas say."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.engine.assembly import current_task  # noqa: E402

ALPHA = 2.0**-20
BETA = 2.0**-30
"""Powers of two, so expected times compare exactly."""


def _now() -> float:
    task = current_task()
    assert task is not None and task.comm is not None
    return float(task.comm.now)


@pytest.mark.parametrize(("shape", "dim"), [((4,), 0), ((2, 4), 1), ((4, 2), 0)])
def test_replicating_a_sharded_dtensor_costs_a_ring_all_gather_on_its_mesh_dimension(
        shape: tuple[int, ...], dim: int) -> None:
    rows, cols = 64, 32  # float32: each rank's shard is rows / p x cols

    def fn(rank: int) -> Any:
        dist.init_process_group("simcluster")
        mesh = init_device_mesh("cpu", shape)
        placements: list[Any] = [Replicate()] * len(shape)
        placements[dim] = Shard(0)
        whole = torch.arange(rows * cols, dtype=torch.float32).view(rows, cols)
        coordinate = mesh.get_coordinate()
        assert coordinate is not None
        mine = whole.chunk(shape[dim])[coordinate[dim]]
        x = DTensor.from_local(mine, mesh, placements)  # no message: every rank starts together
        start = _now()
        full = x.redistribute(mesh, [Replicate()] * len(shape)).to_local()
        took = _now() - start
        dist.destroy_process_group()
        return took, float(full.sum())

    result = sctorch.spawn(fn, nprocs=int(torch.tensor(shape).prod()),
                           latency=sc.latency.AlphaBeta(ALPHA, BETA),
                           algorithms={"all_gather": "ring"})
    p = shape[dim]
    shard_bytes = rows // p * cols * 4
    want = (p - 1) * (ALPHA + shard_bytes * BETA)  # ring all_gather: p - 1 steps of one shard
    total = float(sum(range(rows * cols)))
    assert [took for took, _ in result] == [want] * len(result)
    assert [s for _, s in result] == [total] * len(result)
