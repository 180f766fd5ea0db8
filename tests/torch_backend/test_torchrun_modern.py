"""A torchrun script built on DeviceMesh runs unmodified under simcluster torchrun with torchrun's results.

One script, written as a torch user writes one today: ``init_process_group("gloo")``,
a (dp, tp) ``init_device_mesh``, DTensor redistribution, a model under
tensor parallel over "tp" and FSDP2 over "dp" trained for two steps, a
``torch.distributed.checkpoint`` save and load of its sharded state dict,
and a two-stage ``ScheduleGPipe`` pipeline on a subgroup-free 1-D mesh. It
runs under real ``torchrun`` (4 processes, gloo) and under ``simcluster
torchrun``; each rank prints one JSON line of its values, and every rank's
values must agree (floats to a relative 1e-5).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="simcluster torchrun needs torch: pip install 'simcluster[torch]'")

from differential import assert_same  # noqa: E402

SCRIPT = '''
    import json
    import os
    import sys

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch import nn
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module)


    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))


    def main():
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        out = {"rank": rank}
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        out["coordinate"] = mesh.get_coordinate()

        x = distribute_tensor(torch.arange(32.0).view(8, 4), mesh, [Shard(0), Shard(1)])
        out["local"] = x.to_local().tolist()
        out["replicated_sum"] = x.redistribute(mesh, [Replicate(), Replicate()]).to_local().sum().item()

        model = mlp()
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(10 + mesh["dp"].get_local_rank())
        losses = []
        for _ in range(2):
            loss = model(torch.randn(4, 8, generator=gen)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        out["losses"] = losses

        path = sys.argv[1]
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        fresh = mlp()
        parallelize_module(fresh, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(fresh, mesh=mesh["dp"])
        fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.01)
        fmsd, fosd = get_state_dict(fresh, fresh_opt)
        dcp.load({"model": fmsd, "optim": fosd}, checkpoint_id=path)
        set_state_dict(fresh, fresh_opt, model_state_dict=fmsd, optim_state_dict=fosd)
        out["restored"] = all(torch.equal(a.full_tensor(), b.full_tensor())
                              for a, b in zip(model.parameters(), fresh.parameters()))
        out["weight_sums"] = [p.full_tensor().sum().item() for p in fresh.parameters()]

        torch.manual_seed(1)
        stages = [nn.Linear(4, 4) for _ in range(4)]
        stage = PipelineStage(stages[rank], rank, 4, torch.device("cpu"))
        schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda y, t: (y - t).pow(2).sum())
        data = torch.arange(16.0).view(4, 4) / 16
        if rank == 0:
            schedule.step(data)
        elif rank == 3:
            pipe_losses = []
            schedule.step(target=torch.ones(4, 4), losses=pipe_losses)
            out["pipeline_losses"] = [l.item() for l in pipe_losses]
        else:
            schedule.step()
        out["stage_grad"] = stages[rank].weight.grad.sum().item()

        sys.stdout.write(json.dumps(out) + "\\n")  # one write: torchrun's workers share stdout
        sys.stdout.flush()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
'''


def _values(stdout: str) -> dict[int, Any]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {line["rank"]: line for line in lines}


def _run(argv: list[str], cwd: Path) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.timeout(300)
def test_a_device_mesh_training_script_gives_torchruns_values_on_every_rank(tmp_path: Path) -> None:
    prog = tmp_path / "train.py"
    prog.write_text(textwrap.dedent(SCRIPT))
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:  # pragma: no cover - torch installs it beside the interpreter
        pytest.skip("torch's torchrun is not installed beside this Python")
    real = _values(_run([torchrun, "--standalone", "--nproc-per-node", "4", str(prog),
                         str(tmp_path / "real")], tmp_path))
    sim = _values(_run([sys.executable, "-m", "simcluster", "torchrun", "--nproc-per-node", "4",
                        str(prog), str(tmp_path / "sim")], tmp_path))
    assert sorted(real) == sorted(sim) == [0, 1, 2, 3]
    for rank in range(4):
        assert_same(sim[rank], real[rank], f"rank {rank}")
    assert all(sim[rank]["restored"] for rank in range(4))
