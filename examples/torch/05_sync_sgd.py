"""Distributed synchronous SGD, as the PyTorch tutorial writes it, on 2 virtual ranks.

The tutorial's code: ``partition_dataset`` gives each rank its own shard of
the data (``DataPartitioner``), every rank starts from the same weights
(``torch.manual_seed(1234)``), and after each ``backward()``
``average_gradients`` all-reduces the gradients and divides them by the world
size, so every rank takes the same step. The tutorial trains on MNIST; here
the data set is synthetic (2048 points in 16 dimensions, 4 classes from a
hidden linear rule) so that the example needs no download.

You will see each rank's mean loss per epoch, falling epoch after epoch,
then the virtual time the run took on a 10 us + 1 GB/s network (compute
is free: only communication costs virtual time).
"""

import os
from math import ceil
from random import Random

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import simcluster as sc
import simcluster.torch


class Partition:
    """Dataset-like object, but only access a subset of it."""

    def __init__(self, data, index):
        self.data = data
        self.index = index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        data_idx = self.index[index]
        return self.data[data_idx]


class DataPartitioner:
    """Partitions a dataset into different chuncks."""

    def __init__(self, data, sizes=(0.7, 0.2, 0.1), seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)

        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


def synthetic_dataset():
    """2048 points in 16 dimensions, labelled by a hidden linear rule (instead of MNIST)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 16, generator=gen)
    hidden = torch.randn(16, 4, generator=gen)
    y = (x @ hidden).argmax(dim=1)
    return list(zip(x, y))


class Net(nn.Module):
    """A small classifier (the tutorial's is a CNN for MNIST)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def partition_dataset():
    """Partitioning the data set."""
    dataset = synthetic_dataset()
    size = dist.get_world_size()
    bsz = 128 // size
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes)
    partition = partition.use(dist.get_rank())
    train_set = torch.utils.data.DataLoader(partition, batch_size=bsz, shuffle=True)
    return train_set, bsz


def average_gradients(model):
    """Gradient averaging."""
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def run(rank, size):
    """Distributed Synchronous SGD Example."""
    torch.manual_seed(1234)
    train_set, bsz = partition_dataset()
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.5)

    num_batches = ceil(len(train_set.dataset) / float(bsz))
    for epoch in range(10):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        print(f"Rank {dist.get_rank()}, epoch {epoch}: {epoch_loss / num_batches:.4f}")


def init_process(rank, size, fn, backend="simcluster"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 2
    result = simcluster.torch.spawn(init_process, args=(size, run), nprocs=size,
                                    latency=sc.latency.AlphaBeta(10e-6, 1e-9))
    print(f"virtual time: {result.elapsed * 1e3:.3f} ms, "
          f"{result.stats.total_messages} messages, {result.stats.total_bytes} bytes")
