"""DTensor on a 2 x 2 DeviceMesh: shard, replicate, partial sums, and what each move costs.

Four virtual ranks form a ("dp", "tp") mesh with ``init_device_mesh``. A 4 x 4
matrix is split into blocks with ``distribute_tensor`` (rows over "dp",
columns over "tp"); each rank holds one 2 x 2 block. Then the usual moves
of tensor parallelism:

* ``redistribute`` to ``Replicate()``: an all_gather over each mesh dimension;
* a matmul of a column-sharded weight with a row-sharded one gives a
  ``Partial()`` result (each rank holds a summand), which ``full_tensor()``
  sums with an all_reduce;
* a loss on a DTensor, and its gradient flowing back to the sharded leaf.

You will see the placements, every rank's local block, the same full
results on every rank (checked against plain torch), and the virtual time
of the moves on a 1 us + 10 GB/s network.
"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

import simcluster as sc
import simcluster.torch


def main(rank):
    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    x = torch.arange(16.0).reshape(4, 4)

    blocks = distribute_tensor(x, mesh, [Shard(0), Shard(1)])  # rows over dp, columns over tp
    if rank == 0:
        print(f"x is split as {blocks.placements} over mesh dimensions {mesh.mesh_dim_names}")
    dist.barrier()
    print(f"rank {rank} at {mesh.get_coordinate()}: local block {blocks.to_local().tolist()}")
    dist.barrier()

    whole = blocks.redistribute(mesh, [Replicate(), Replicate()])  # all_gather on each dimension
    assert torch.equal(whole.to_local(), x)

    tp = mesh["tp"]
    a = distribute_tensor(x, tp, [Shard(1)])  # columns of x over tp
    b = distribute_tensor(x.T.contiguous(), tp, [Shard(0)])  # rows of x^T over tp
    product = a @ b  # each tp rank multiplies its halves: a Partial() sum
    partial_ok = product.placements == (Partial(),)
    summed = product.full_tensor()  # all_reduce over tp
    assert torch.allclose(summed, x @ x.T)

    w = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0), Replicate()]).requires_grad_()
    loss = (w * whole).sum().full_tensor()  # a scalar, the same on every rank
    loss.backward()
    grad = w.grad.full_tensor()
    assert torch.equal(grad, x)

    dist.barrier()
    if rank == 0:
        print(f"x @ x.T is Partial() before full_tensor: {partial_ok}")
        print(f"x @ x.T row sums: {summed.sum(dim=1).tolist()}")
        print(f"loss {loss.item():.0f}; d loss / d w equals x: {torch.equal(grad, x)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    result = simcluster.torch.spawn(main, nprocs=4, latency=sc.latency.AlphaBeta(1e-6, 1e-10))
    print(f"virtual time: {result.elapsed * 1e6:.2f} us, messages: {result.stats.total_messages}")
