"""What a finished collective carried is freed when the program drops it, not at the next garbage
collection: no reference cycle in the engine (a helper task and the last request it waited on, a
flow and its batch on a platform) keeps a training step's tensors alive. Measured as a user of
``MemoryTracker`` sees it: the live bytes after every FSDP2 step are the same.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import simcluster.torch as sctorch  # noqa: E402
from simcluster.platform import dgx_h100  # noqa: E402
from simcluster.predict import llama  # noqa: E402
from simcluster.predict.memory import MemoryTracker  # noqa: E402


def _steps(rank: int) -> list[int]:
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("simcluster")
    model = llama.build("tiny", seq_len=64)
    llama.parallelize(model, dp_mesh=init_device_mesh("cpu", (dist.get_world_size(),)), ac="none")
    model.to_empty(device="cpu")
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    tracker = MemoryTracker().track(model, optimizer)
    live = []
    for _ in range(3):
        tokens = torch.randint(1024, (2, 64))
        with tracker:
            optimizer.zero_grad()
            llama.loss_fn(model(tokens), tokens).backward()
            optimizer.step()
        live.append(tracker.current_nbytes)
    return live


@pytest.mark.parametrize("tensors, latency", [("real", None), ("fake", "platform")])
def test_the_live_bytes_after_each_fsdp2_step_stay_the_same(tensors: str, latency: Any) -> None:
    enabled = gc.isenabled()
    gc.disable()  # a cycle would keep its tensors until a collection: none runs here
    try:
        result = sctorch.spawn(_steps, nprocs=2, tensors=tensors,
                               latency=dgx_h100(1) if latency == "platform" else None)
    finally:
        if enabled:
            gc.enable()
    for live in result:
        assert live == [live[0]] * 3
