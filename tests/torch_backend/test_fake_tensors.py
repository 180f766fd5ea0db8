"""Shape-only runs: spawn(..., tensors="fake") and torchrun --fake (simcluster.torch._fake)."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster import cli  # noqa: E402
from simcluster.errors import RankError  # noqa: E402
from simcluster.torch._fake import UnknownValueError, is_fake  # noqa: E402

from torch import nn  # noqa: E402

LATENCY = sc.latency.AlphaBeta(1e-6, 1e-9)  # bandwidth: the sizes set the times


def _fsdp_step(rank: int) -> tuple[str, tuple[int, ...], str]:
    """One training step of a 2-layer MLP under FSDP2 (fully_shard), AdamW."""
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("simcluster")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    loss = model(torch.randn(16, 64)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    weight = model[0].weight.to_local()
    return type(loss).__name__, tuple(weight.shape), str(weight.dtype)


def _ddp_step(rank: int) -> str:
    """One SGD step of a 2-layer MLP under DistributedDataParallel."""
    dist.init_process_group("simcluster")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(16, 64)).square().mean().backward()
    opt.step()
    return type(model.module[0].weight.grad).__name__


def _data_parallel_step(rank: int) -> tuple[bool, tuple[int, ...]]:
    """One step of hand-written data parallelism: every gradient all_reduced, then averaged."""
    dist.init_process_group("simcluster")
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    model(torch.randn(8, 32)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    out = torch.empty(4 * 64, 32)
    dist.all_gather_single(out, model[0].weight.grad)
    return is_fake(out), tuple(out.shape)


class _Block(nn.Module):
    """A tiny transformer block: causal attention and an MLP, pre-norm."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Any) -> Any:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(x)


def _transformer_step(rank: int) -> str:
    """One AdamW step of embedding, two blocks and a head under FSDP2, a cross-entropy loss."""
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("simcluster")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 64), _Block(), _Block(), nn.Linear(64, 100),
                          nn.LogSoftmax(-1))  # a fresh output: FSDP2 warns of a view
    for block in model[1:3]:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    ids = torch.randint(0, 100, (2, 16))
    loss = nn.functional.nll_loss(model(ids).view(-1, 100), ids.view(-1))
    loss.backward()
    opt.step()
    return type(loss).__name__


def _record(result: sc.RunResult) -> tuple[list[Any], list[Any]]:
    trace = result.trace
    assert trace is not None
    spans = [(s.rank, s.name, s.start, s.end, s.args.get("call")) for s in trace.spans]
    messages = [(m.src, m.dst, m.tag, m.nbytes, m.sent, m.recv, m.comm) for m in trace.messages]
    return spans, messages


@pytest.mark.parametrize("step", [_ddp_step, _fsdp_step, _data_parallel_step])
def test_shape_only_run_times_and_orders_every_collective_as_the_data_run(step: Any) -> None:
    real = sctorch.spawn(step, nprocs=4, latency=LATENCY, trace=True)
    fake = sctorch.spawn(step, nprocs=4, latency=LATENCY, trace=True, tensors="fake")
    assert fake.elapsed == real.elapsed > 0
    assert fake.times == real.times
    assert fake.stats.total_messages == real.stats.total_messages > 0
    assert _record(fake) == _record(real)  # every collective, message, size and virtual time
    if step is _fsdp_step:
        assert [r[0] for r in real] == ["Tensor"] * 4
        assert [r[0] for r in fake] == ["FakeTensor"] * 4
        assert [r[1:] for r in fake] == [r[1:] for r in real]  # shapes and dtypes kept
    elif step is _ddp_step:
        assert (list(real), list(fake)) == (["Tensor"] * 4, ["FakeTensor"] * 4)
    else:
        assert list(fake) == [(True, (256, 32))] * 4
        assert list(real) == [(False, (256, 32))] * 4


def test_a_transformer_step_on_a_gpu_platform_is_timed_as_the_data_run() -> None:
    platform = sc.platform.dgx_h100(1)  # NCCL's algorithms, chosen by size
    real = sctorch.spawn(_transformer_step, nprocs=4, latency=platform, trace=True)
    fake = sctorch.spawn(_transformer_step, nprocs=4, latency=platform, trace=True, tensors="fake")
    assert (list(real), list(fake)) == (["Tensor"] * 4, ["FakeTensor"] * 4)
    assert fake.elapsed == real.elapsed > 0
    assert _record(fake) == _record(real)


def test_a_full_size_model_builds_and_steps_without_allocating() -> None:
    width = 8192  # 4 layers of 8192 x 8192 float32: 1 GiB of weights per rank, 4 GiB in all

    def fn(rank: int) -> tuple[int, bool]:
        dist.init_process_group("simcluster")
        model = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)])
        model(torch.randn(4, width)).sum().backward()
        grad = model[0].weight.grad
        dist.all_reduce(grad)
        return sum(p.numel() for p in model.parameters()), is_fake(grad)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = sctorch.spawn(fn, nprocs=4, latency=LATENCY, tensors="fake")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert list(result) == [(4 * (width * width + width), True)] * 4
    assert grown_mib < 256  # weights and gradients of one rank alone would be 2 GiB
    # the all_reduce of a 256 MiB gradient is timed as one: bandwidth term >= 0.25 s
    assert result.elapsed > width * width * 4 * 1e-9


def test_reading_a_value_names_the_rank_and_the_call() -> None:
    def fn(rank: int) -> float:
        dist.init_process_group("simcluster")
        loss = nn.Linear(4, 1)(torch.randn(2, 4)).sum()
        return loss.item()

    with pytest.raises(RankError) as info:
        sctorch.spawn(fn, nprocs=2, tensors="fake")
    cause = info.value.__cause__
    assert isinstance(cause, UnknownValueError)
    assert "shape-only run: the value of tensor.item()" in str(cause)
    assert str(cause).startswith("rank ")


def test_known_integer_values_stay_real() -> None:
    def fn(rank: int) -> tuple[list[int], bool, bool]:
        ids = torch.arange(6).view(2, 3)  # bookkeeping: a rank map, token ids
        emb = nn.Embedding(10, 4)(ids)  # floats: shapes only
        return ids.tolist(), is_fake(ids), is_fake(emb)

    assert list(sctorch.spawn(fn, nprocs=2, tensors="fake")) == [([[0, 1, 2], [3, 4, 5]], False, True)] * 2


def test_cuda_is_refused_with_a_clear_error_where_torch_has_no_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")

    def fn(rank: int) -> None:
        nn.Linear(4, 4, device="cuda")

    with pytest.raises(RankError, match="shape-only run: empty\\(device='cuda'\\): this torch build"):
        sctorch.spawn(fn, nprocs=1, tensors="fake")


def test_tensors_must_be_real_or_fake() -> None:
    with pytest.raises(ValueError, match="tensors must be 'real'"):
        sctorch.spawn(lambda rank: None, nprocs=1, tensors="meta")


def test_torchrun_fake_runs_a_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from torch import nn\n"
        "dist.init_process_group('gloo')\n"
        "m = nn.Linear(256, 256)\n"
        "m(torch.randn(8, 256)).sum().backward()\n"
        "dist.all_reduce(m.weight.grad)\n"
        "print(type(m.weight.grad).__name__, tuple(m.weight.grad.shape))\n")
    outs = []
    for extra in ([], ["--fake"]):
        rc = cli.main(["torchrun", *extra, "--nproc-per-node", "2", "--summary", str(script)])
        out, err = capsys.readouterr()
        assert rc == 0, err
        outs.append((out, err.splitlines()[-1].split(",")[0], err.split("messages, ")[-1]))
    assert outs[0][0] == "Tensor (256, 256)\nTensor (256, 256)\n"
    assert outs[1][0] == "FakeTensor (256, 256)\nFakeTensor (256, 256)\n"
    assert outs[0][1] == outs[1][1]  # the same virtual time
    assert outs[0][2] == outs[1][2]  # the same bytes


def test_a_fake_tensor_travels_as_a_new_tensor_of_its_shape_and_its_real_bytes() -> None:
    from simcluster import arrays
    from simcluster.torch._fake import Shapes
    from simcluster.transports import wire

    with Shapes() as shapes, shapes.rank(0):
        x = torch.empty(3, 5, dtype=torch.bfloat16)
        packed = wire.pack(x, copy=True, arrays=arrays.IN_PROCESS)
        (buf,) = packed.buffers
        got = wire.unpack(packed.header, packed.buffers, copy=True)
    assert buf.nbytes == 30  # what the data would weigh: 15 bfloat16s
    assert is_fake(got) and got is not x and got is not buf.array
    assert got.fake_mode is x.fake_mode
    assert (tuple(got.shape), got.stride(), got.dtype, got.device) == (
        (3, 5), (5, 1), torch.bfloat16, torch.device("cpu"))


def _p2p_and_broadcast(rank: int) -> tuple[str, tuple[int, ...], str]:
    dist.init_process_group("simcluster")
    x = torch.full((3, 5), float(rank), dtype=torch.bfloat16)
    if rank == 0:
        dist.send(x, 1)
        dist.send(x.t(), 1)  # strided: travels as its contiguous copy, the same bytes
    elif rank == 1:
        dist.recv(x, 0)
        y = torch.empty(5, 3, dtype=torch.bfloat16)
        dist.recv(y, 0)
    dist.broadcast(x, 0)
    return type(x).__name__, tuple(x.shape), str(x.dtype)


def test_fake_tensors_in_messages_weigh_and_time_as_the_data_they_stand_for() -> None:
    real = sctorch.spawn(_p2p_and_broadcast, nprocs=2, latency=LATENCY, trace=True)
    fake = sctorch.spawn(_p2p_and_broadcast, nprocs=2, latency=LATENCY, trace=True, tensors="fake")
    assert _record(fake) == _record(real)  # every message's size and virtual times
    assert [m.nbytes for m in fake.trace.messages][:2] == [30, 30]
    assert list(fake) == [("FakeTensor", (3, 5), "torch.bfloat16")] * 2
