"""DistributedDataParallel on 4 virtual ranks, and what its gradient all-reduces cost.

Each rank wraps the same model in ``DistributedDataParallel`` and trains on
its quarter of every batch; DDP all-reduces the gradients inside
``backward()`` (in buckets, as on a real cluster), so every rank ends with the
same weights, equal to training one model on the whole batch.

You will see the loss falling, that every rank holds the same weights as a
one-process run, and the virtual time and traffic of the training on a
5 us + 10 GB/s network.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import simcluster as sc
import simcluster.torch

STEPS = 20


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))


def make_data():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=gen)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)  # a hidden linear rule
    return x, y


def train(rank, size):
    dist.init_process_group("simcluster")
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = make_data()
    x, y = x.chunk(size)[rank], y.chunk(size)[rank]
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step:2d}: loss on rank 0's shard {loss.item():.4f}")
    weights = [p.detach().clone() for p in model.module.parameters()]
    dist.destroy_process_group()
    return weights


def train_one_process():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = make_data()
    for _ in range(STEPS):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


if __name__ == "__main__":
    size = 4
    result = simcluster.torch.spawn(train, args=(size,), nprocs=size,
                                    latency=sc.latency.AlphaBeta(5e-6, 1e-10))
    same = all(torch.equal(a, b) for weights in result for a, b in zip(weights, result[0]))
    close = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(result[0], train_one_process()))
    print(f"every rank holds the same weights: {same}")
    print(f"they equal one process trained on the whole batch: {close}")
    print(f"virtual time: {result.elapsed * 1e6:.1f} us, {result.stats.total_messages} messages, "
          f"{result.stats.total_bytes} bytes")
