"""Distributed synchronous SGD: data-parallel logistic regression in numpy.

A seeded synthetic dataset (1024 points, 8 features, labels drawn from a
hidden logistic model) is split into equal shards, one per rank. Every rank
starts from the same weights, computes the gradient of the cross-entropy
loss on a batch of its own shard, and ``dist.all_reduce`` sums the gradients
of all ranks, which each rank divides by the world size: every rank then
takes the same averaged step (SGD with momentum), so the weights stay
identical everywhere without ever being sent.

You will see, for each epoch and rank, the mean loss over that rank's batches,
falling epoch after epoch.
"""

from __future__ import annotations

import math

import numpy as np

import simcluster as sc
from simcluster import dist

SAMPLES, FEATURES = 1024, 8
GLOBAL_BATCH = 128  # split evenly between the ranks
EPOCHS = 10
LR, MOMENTUM = 0.5, 0.5


def make_dataset(seed: int = 1234) -> tuple[np.ndarray, np.ndarray]:
    """Return features and 0/1 labels drawn from a hidden logistic model."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(SAMPLES, FEATURES))
    hidden = rng.normal(size=FEATURES)
    p = 1.0 / (1.0 + np.exp(-(x @ hidden + 0.5)))
    y = (rng.random(SAMPLES) < p).astype(np.float64)
    return x, y


def partition(x: np.ndarray, y: np.ndarray, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle with a fixed seed (the same on every rank) and return shard ``rank``."""
    order = np.random.default_rng(0).permutation(len(x))
    shard = np.array_split(order, size)[rank]
    return x[shard], y[shard]


def loss_and_grads(params: list[np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Return the mean cross-entropy on a batch and its gradient for each parameter."""
    w, b = params
    p = 1.0 / (1.0 + np.exp(-(x @ w + b[0])))
    eps = 1e-12
    loss = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
    err = (p - y) / len(y)
    return float(loss), [x.T @ err, np.array([err.sum()])]


async def average_gradients(grads: list[np.ndarray]) -> None:
    """Replace each gradient, in place, by its mean over all ranks."""
    size = float(dist.get_world_size())
    for grad in grads:
        await dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        grad /= size


async def main(comm: sc.Comm) -> list[float]:
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = partition(*make_dataset(), rank, size)
    batch = GLOBAL_BATCH // size
    params = [np.zeros(FEATURES), np.zeros(1)]  # the same start on every rank
    velocity = [np.zeros_like(p) for p in params]
    num_batches = math.ceil(len(x) / batch)
    losses = []
    for epoch in range(EPOCHS):
        epoch_loss = 0.0
        for start in range(0, len(x), batch):
            loss, grads = loss_and_grads(params, x[start:start + batch], y[start:start + batch])
            epoch_loss += loss
            await average_gradients(grads)
            for p, v, g in zip(params, velocity, grads):
                v *= MOMENTUM
                v += g
                p -= LR * v
        losses.append(epoch_loss / num_batches)
        print(f"Rank {rank}, epoch {epoch}: {losses[-1]:.6f}")
    return losses


if __name__ == "__main__":
    sc.run(main, world_size=2)
