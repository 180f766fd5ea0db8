"""Each rank profiles its own work, as each process does: compared with gloo processes.

``profiler_cases`` runs on 3 gloo processes and on 3 simcluster ranks whose
program asks for ``"gloo"`` (as under ``simcluster torchrun``): every rank's
backend events (gloo's ``"gloo:all_reduce"`` spans: name, async, input
shapes, count), its own ``record_function`` spans and ops, the table and the
exported chrome trace must be equal. Without per-rank profiling two ranks
profiling at once crash torch's profiler (it is one per process).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import differential  # noqa: E402
import profiler_cases as cases  # noqa: E402

SIZE = cases.SIZE

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's deprecations, as in gloo's


@pytest.fixture(scope="module")
def gloo_values() -> list[dict[str, Any]]:
    return differential.gloo_values("profiler_cases", SIZE)


@pytest.fixture(scope="module")
def simcluster_values() -> list[dict[str, Any]]:
    return differential.gloo_named_values("profiler_cases", SIZE)


@pytest.mark.parametrize("case", list(cases.CASES))
def test_every_rank_profiles_as_a_gloo_process(case: str, gloo_values: list[dict[str, Any]],
                                               simcluster_values: list[dict[str, Any]]) -> None:
    for rank in range(SIZE):
        assert simcluster_values[rank][case] == gloo_values[rank][case], f"rank {rank}"


def test_a_rank_trace_holds_its_own_spans_only(simcluster_values: list[dict[str, Any]]) -> None:
    for rank in range(SIZE):
        spans, muls, _total = simcluster_values[rank]["own_work_only"]
        assert spans == [f"step_of_rank_{rank}"]
        assert muls == [[rank + 2, 3]]


def test_the_profiler_outside_ranks_is_torchs_own_after_a_spawn() -> None:
    differential.gloo_named_values("profiler_cases", SIZE)
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        torch.ones(2) + 1
    assert "aten::add" in {e.name for e in prof.function_events}
    assert prof.kineto_results is not None and type(prof.kineto_results).__module__.startswith("torch")


TRAIN = """
    import json, os, sys
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(sys.argv[1])) as prof:
        for step in range(4):
            with torch.profiler.record_function(f"rank{rank}_step{step}"):
                loss = model(torch.ones(3, 4) * (rank + 1)).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
            prof.step()
    mine = sorted({e.name for e in prof.events() if e.name.startswith("rank")})
    spans = sorted({e.name for e in prof.events() if e.name.startswith("gloo:")})
    print(f"rank {rank}: {mine} {spans}")
    dist.destroy_process_group()
"""


def test_a_torchrun_script_profiles_each_rank_with_a_schedule_and_a_trace_handler(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from simcluster import cli

    prog = tmp_path / "train.py"
    prog.write_text(textwrap.dedent(TRAIN), encoding="utf-8")
    traces = tmp_path / "traces"
    rc = cli.main(["torchrun", "--nproc-per-node", "3", str(prog), str(traces)])
    out = capsys.readouterr().out
    assert rc == 0, out
    for rank in range(3):  # the active steps only (2 and 3), this rank's own, and DDP's all_reduce
        assert f"rank {rank}: ['rank{rank}_step2', 'rank{rank}_step3'] ['gloo:all_reduce']" in out
    files = sorted(traces.glob("*.pt.trace.json"))
    assert len(files) == 3  # one per process, named after its host and pid
    hosts = set()
    for path in files:
        events = json.loads(path.read_text(encoding="utf-8"))["traceEvents"]
        names = {e.get("name") for e in events}
        ours = {n for n in names if isinstance(n, str) and n.startswith("rank")}
        assert len({n.split("_")[0] for n in ours}) == 1, ours
        assert "gloo:all_reduce" in names
        hosts.add(path.name.split(".")[0])
    assert len(hosts) == 3
