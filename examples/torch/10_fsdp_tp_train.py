"""Train a small transformer with FSDP2 + tensor parallel on a 2x2 (dp, tp) mesh of 4 ranks.

A script written for torchrun: nothing in it knows about simcluster. Run it with

    simcluster torchrun --nproc-per-node 4 examples/torch/10_fsdp_tp_train.py

and its 4 ranks run in one process on simcluster's backend; the same command
with ``torchrun`` instead runs it on 4 gloo processes. The ranks form a mesh
with a data-parallel dimension "dp" and a tensor-parallel dimension "tp":
``parallelize_module`` splits each block's attention and MLP over "tp"
(Megatron style, with sequence-parallel layer norms), ``fully_shard`` shards
every weight over "dp", and each dp rank trains on its half of the batch. The
logits stay split over the vocabulary and the loss is computed under
``loss_parallel()``.

You will see how one weight is split, rank 0's loss (the mean over the whole
batch) falling step by step, and, at the end, that the full weights every
rank gathers equal those of the same model trained in one process on the
whole batch.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

VOCAB, DIM, HEAD_DIM, LAYERS = 16, 32, 8, 2
BATCH, SEQ, STEPS = 8, 16, 10


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def forward(self, x):
        batch, seq, _ = x.shape
        # -1 heads: under TP each rank holds its share of the heads
        q, k, v = (w(x).view(batch, seq, -1, HEAD_DIM).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.attention = nn.LayerNorm(DIM), Attention()
        self.ffn_norm, self.feed_forward = nn.LayerNorm(DIM), FeedForward()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def make_model():
    torch.manual_seed(0)  # every rank starts from the same weights
    return Transformer()


def make_batches():
    """Sequences that follow a rule (next = 5 * token + 3 mod VOCAB) from random starts."""
    gen = torch.Generator().manual_seed(1)
    tokens = torch.empty(STEPS, BATCH, SEQ + 1, dtype=torch.long)
    tokens[:, :, 0] = torch.randint(0, VOCAB, (STEPS, BATCH), generator=gen)
    for i in range(SEQ):
        tokens[:, :, i + 1] = (5 * tokens[:, :, i] + 3) % VOCAB
    return tokens


def parallelize(model, mesh):
    """Tensor parallel over mesh["tp"], then FSDP over mesh["dp"] (torch's 2-D recipe)."""
    tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
    })
    for block in model.layers:
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),),
                                            desired_input_layouts=(Replicate(),)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        })
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return model


def next_token_loss(logits, batch):
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(0, 1))


def train_one_process():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    for batch in make_batches():
        optimizer.zero_grad()
        next_token_loss(model(batch[:, :-1]), batch).backward()
        optimizer.step()
    return dict(model.named_parameters())


def full_weights(model):
    """Every weight whole, on every rank: gather FSDP's shards over dp, then TP's over tp."""
    weights = {}
    for name, param in model.named_parameters():
        over_tp = param.redistribute(placements=[Replicate(), param.placements[1]])
        weights[name] = over_tp.full_tensor().detach()
    return weights


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = parallelize(make_model(), mesh)
    if rank == 0:
        wq = model.layers[0].attention.wq.weight
        print(f"layers.0.attention.wq.weight {list(wq.shape)}, placed on mesh (dp, tp) as "
              f"{wq.placements}: rank 0 holds {list(wq.to_local().shape)}")

    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    dp_mesh = mesh["dp"]
    dp_group, dp_size, dp_rank = dp_mesh.get_group(), dp_mesh.size(), dp_mesh.get_local_rank()
    for step, batch in enumerate(make_batches()):
        batch = batch.chunk(dp_size)[dp_rank]  # this dp rank's half; both tp ranks see it
        optimizer.zero_grad()
        logits = model(batch[:, :-1])  # a DTensor split over the vocabulary
        with loss_parallel():
            loss = next_token_loss(logits, batch)
            loss.backward()
        optimizer.step()
        mean = loss.detach().full_tensor()
        dist.all_reduce(mean, group=dp_group)
        if rank == 0:
            print(f"step {step}: loss {mean.item() / dp_size:.4f}")

    weights = full_weights(model)
    if rank == 0:
        expected = train_one_process()
        same = all(torch.allclose(weights[name], p, rtol=1e-5, atol=1e-5)
                   for name, p in expected.items())
        print(f"rank 0: the {len(weights)} full weights equal one process's: {same}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
