"""compute="gpu:DEVICE": a synchronous collective runs on the rank's communication stream, and only
the first op that needs its result waits for it (as FSDP2's all_gathers and reduce_scatters do)."""

from __future__ import annotations

import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.predict import H100_SXM  # noqa: E402
from simcluster.predict.compute import GpuClock  # noqa: E402

from test_gpu_streams import _comm_seconds, _matmul_seconds  # noqa: E402  # the same times by hand

ALPHA, BETA = 1e-6, 1e-9
LATENCY = sc.latency.AlphaBeta(ALPHA, BETA)
NBYTES = 1 << 20  # the all_reduce's buffer: 2**19 bfloat16 elements
TOLERANCE = 1e-10  # seconds: time.perf_counter reads the real epoch plus virtual time (~1e-11 s resolution)


def _read_seconds() -> float:
    """``x * 2`` on the all_reduce's buffer: one elementwise kernel reading and writing NBYTES."""
    memory = 2 * NBYTES / (H100_SXM.memory_bandwidth.value * H100_SXM.memory_efficiency.value)
    return H100_SXM.launch_overhead.value + memory


def _step(rank: int, k: int) -> tuple[float, list[float]]:
    """A synchronous all_reduce, an independent matmul, then an op reading the all_reduce's result;
    returns (step seconds, the first and last elements read)."""
    dist.init_process_group("simcluster")
    x = torch.full((NBYTES // 2,), float(rank + 1), dtype=torch.bfloat16)
    a = torch.ones(k, k, dtype=torch.bfloat16)
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    c = a @ a
    y = x * 2
    step = time.perf_counter() - t0
    assert tuple(c.shape) == (k, k)
    return step, [] if y.device.type == "meta" or _is_fake(y) else [y[0].item(), y[-1].item()]


def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _run(k: int, tensors: str = "real", latency: Any = LATENCY, trace: bool = False) -> Any:
    return sctorch.spawn(_step, (k,), nprocs=2, latency=latency, compute="gpu:h100_sxm",
                         tensors=tensors, trace=trace)


def test_the_hand_computed_read_is_what_the_clock_charges() -> None:
    x = torch.ones(NBYTES // 2, dtype=torch.bfloat16)
    with GpuClock(H100_SXM) as clock:
        x * 2
    assert clock.seconds == pytest.approx(_read_seconds(), rel=1e-12)


@pytest.mark.parametrize("tensors", ["real", "fake"])
@pytest.mark.parametrize("k", [2048, 8192])  # compute shorter than communication, then longer
def test_a_synchronous_collective_overlaps_compute_until_its_result_is_read(tensors: str, k: int) -> None:
    comm, compute = _comm_seconds(), _matmul_seconds(k)
    assert (compute < comm) == (k == 2048)
    for step, _ in _run(k, tensors):
        assert step == pytest.approx(max(compute, comm) + _read_seconds(), abs=TOLERANCE)


def test_the_reading_op_sees_the_sums_on_every_rank() -> None:
    result = _run(2048)
    assert [values for _, values in result] == [[6.0, 6.0], [6.0, 6.0]]  # (1 + 2) * 2


_READS = {
    "item": lambda t: t[0].item(),
    "tolist": lambda t: t[:1].tolist()[0],
    "numpy": lambda t: float(t[:1].float().numpy()[0]),
    "print": lambda t: 1.0 if str(t) == "tensor([1., 1., 1., 1.])" else 0.0,
}


@pytest.mark.parametrize("read", sorted(_READS))
def test_a_value_read_waits_for_every_pending_collective(read: str) -> None:
    def step(rank: int) -> tuple[float, float, float, float]:
        dist.init_process_group("simcluster")
        x = torch.full((NBYTES // 4,), float(rank + 1))  # float32: 1 MiB, numpy reads it in place
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        issued = time.perf_counter() - t0
        unrelated = _READS[read](torch.ones(4))  # a value of another tensor: still a sync point
        after = time.perf_counter() - t0
        return issued, after, unrelated, float(x.numpy()[0])

    for issued, after, unrelated, value in sctorch.spawn(step, nprocs=2, latency=LATENCY,
                                                          compute="gpu:h100_sxm"):
        assert issued == pytest.approx(0.0, abs=TOLERANCE)  # the call returned at once
        # perf_counter in a rank is its virtual clock (no wall time here); its epoch rounds the difference
        assert after >= _comm_seconds() - TOLERANCE
        assert (unrelated, value) == (1.0, 3.0)


def test_the_trace_shows_the_collective_on_the_rank_s_track_overlapping_the_compute() -> None:
    result = _run(8192, trace=True)
    assert result.trace is not None
    events = result.trace.to_chrome()["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 0 compute", 3: "rank 1 compute"}
    spans = [e for e in events if e["ph"] == "X"]
    for track, compute_track in ((0, 2), (1, 3)):
        reduce = next(e for e in spans if e["tid"] == track and e["name"] == "all_reduce")
        assert reduce["dur"] * 1e-6 == pytest.approx(_comm_seconds(), rel=1e-6)
        # the matmul runs on the compute track from the all_reduce's issue, while it is in flight
        matmul = next(e for e in spans if e["tid"] == compute_track and e["name"] == "compute"
                      and e["ts"] == reduce["ts"])
        assert matmul["dur"] * 1e-6 == pytest.approx(_matmul_seconds(8192), rel=1e-6)
        assert matmul["ts"] + matmul["dur"] > reduce["ts"] + reduce["dur"]


def test_two_collectives_of_one_group_run_one_after_the_other() -> None:
    """NCCL runs a process group's collectives on one stream: the second starts when the first ends."""
    def step(rank: int) -> tuple[float, list[float]]:
        dist.init_process_group("simcluster")
        x = torch.full((NBYTES // 2,), float(rank + 1), dtype=torch.bfloat16)
        y = torch.full((NBYTES // 2,), float(rank + 3), dtype=torch.bfloat16)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        dist.all_reduce(y)
        z = x + y
        return time.perf_counter() - t0, [z[0].item(), z[-1].item()]

    add = H100_SXM.launch_overhead.value + 3 * NBYTES / (
        H100_SXM.memory_bandwidth.value * H100_SXM.memory_efficiency.value)
    for elapsed, values in sctorch.spawn(step, nprocs=2, latency=LATENCY, compute="gpu:h100_sxm"):
        assert elapsed == pytest.approx(2 * _comm_seconds() + add, abs=TOLERANCE)
        assert values == [10.0, 10.0]  # (1 + 2) + (3 + 4)


# ---- FSDP2 ----

WIDTH, LAYERS, TOKENS = 4096, 4, 8192
FSDP_LATENCY = sc.latency.AlphaBeta(0.0, 1e-11)  # 100 GB/s: a layer's all_gather ~ its forward


def _fsdp_step(rank: int) -> float:
    """Forward and backward of LAYERS bfloat16 linear layers, each sharded by fully_shard."""
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("simcluster")
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False, dtype=torch.bfloat16)
                            for _ in range(LAYERS)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    x = torch.randn(TOKENS, WIDTH, dtype=torch.bfloat16)
    dist.barrier()
    t0 = time.perf_counter()
    model(x).sum().backward()
    dist.barrier()  # waits for the reduce_scatters still on the stream
    return time.perf_counter() - t0


def _fsdp(latency: Any, compute: Any, trace: bool = False) -> Any:
    return sctorch.spawn(_fsdp_step, nprocs=2, latency=latency, compute=compute, tensors="fake",
                         trace=trace)


def test_an_fsdp2_step_overlaps_its_collectives_with_compute() -> None:
    overlapped = _fsdp(FSDP_LATENCY, "gpu:h100_sxm", trace=True)
    compute = list(_fsdp(sc.latency.AlphaBeta(0.0, 0.0), "gpu:h100_sxm"))  # no communication time
    communication = list(_fsdp(FSDP_LATENCY, None))  # no compute time: every collective in turn
    for step, c, m in zip(overlapped, compute, communication):
        assert max(c, m) <= step < c + m
        assert step < c + m - 0.2 * min(c, m)  # a fifth of the shorter one at least is hidden
    assert list(_fsdp(FSDP_LATENCY, "gpu:h100_sxm")) == list(overlapped)  # deterministic
    # the trace: all_gathers and reduce_scatters on each rank's track, in flight during compute
    trace = overlapped.trace
    assert trace is not None
    for rank in (0, 1):
        collectives = [s for s in trace.spans if s.rank == rank and s.name in ("all_gather", "reduce_scatter")]
        computes = [s for s in trace.spans if s.rank == rank and s.name == "compute"]
        assert {s.name for s in collectives} == {"all_gather", "reduce_scatter"}
        hidden = sum(max(0.0, min(s.end, k.end) - max(s.start, k.start)) for s in collectives for k in computes)
        assert hidden > 0.2 * min(compute[rank], communication[rank])
        ordered = sorted(collectives, key=lambda s: s.start)  # one stream: no two at once
        assert all(a.end <= b.start for a, b in zip(ordered, ordered[1:]))


def test_an_op_writing_a_collective_s_input_waits_for_it_and_reads_do_not() -> None:
    elements = NBYTES // 4  # float32: 1 MiB of input, half of it sent to the other rank at least

    def step(rank: int) -> tuple[list[float], float, float]:
        dist.init_process_group("simcluster")
        inp = torch.arange(float(elements)) + 10 * rank
        out = torch.empty(elements // 2)
        dist.barrier()
        t0 = time.perf_counter()
        dist.reduce_scatter_single(out, inp)
        copy = inp * 1  # reads the input: runs at once
        read = time.perf_counter() - t0
        inp.zero_()  # writes the input: waits until the reduce_scatter is done with it
        written = time.perf_counter() - t0
        return out[:2].tolist() + copy[:1].tolist(), read, written

    op = H100_SXM.launch_overhead.value + 2 * NBYTES / (
        H100_SXM.memory_bandwidth.value * H100_SXM.memory_efficiency.value)
    half = elements // 2
    result = sctorch.spawn(step, nprocs=2, latency=LATENCY, compute="gpu:h100_sxm")
    assert [values for values, _, _ in result] == [[10.0, 12.0, 0.0], [2.0 * half + 10, 2.0 * half + 12, 10.0]]
    for _, read, written in result:
        assert read == pytest.approx(op, abs=TOLERANCE)
        assert written > ALPHA + NBYTES / 2 * BETA


def test_object_collectives_still_block_and_give_the_objects() -> None:
    def step(rank: int) -> list[Any]:
        dist.init_process_group("simcluster")
        gathered: list[Any] = [None, None]
        dist.all_gather_object(gathered, {"rank": rank})
        shared = [f"from {rank}"]
        dist.broadcast_object_list(shared, src=1)
        return gathered + shared

    for values in sctorch.spawn(step, nprocs=2, latency=LATENCY, compute="gpu:h100_sxm"):
        assert values == [{"rank": 0}, {"rank": 1}, "from 1"]


def _fsdp_training(rank: int) -> tuple[float, float]:
    """Two AdamW steps of a small MLP under FSDP2, real tensors; (last loss, first weight's sum)."""
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("simcluster")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    torch.manual_seed(rank)
    for _ in range(2):
        loss = model(torch.randn(16, 64)).square().mean()
        loss.backward()
        opt.step()  # reads the reduce_scatters' gradients through DTensors
        opt.zero_grad()
    return loss.item(), model[0].weight.full_tensor().sum().item()


def _fsdp_tp_training(rank: int) -> tuple[float, float]:
    """Two SGD steps of an MLP, tensor parallel over 2 ranks and FSDP2 over the other 2."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    dist.init_process_group("simcluster")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(mesh.get_coordinate()[0])
    for _ in range(2):
        loss = model(torch.randn(8, 32)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item(), model[0].weight.full_tensor().sum().item()


@pytest.mark.filterwarnings("ignore:.*sequential all_gather")
@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module .* returned a view tensor")
@pytest.mark.parametrize("training", [_fsdp_training, _fsdp_tp_training])
def test_training_with_real_tensors_computes_what_it_computes_without_the_gpu_model(training: Any) -> None:
    plain = sctorch.spawn(training, nprocs=4, latency=LATENCY)
    modelled = sctorch.spawn(training, nprocs=4, latency=LATENCY, compute="gpu:h100_sxm")
    assert list(modelled) == list(plain)
    assert len({weight for _, weight in plain}) == 1
