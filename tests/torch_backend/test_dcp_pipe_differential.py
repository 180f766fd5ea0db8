"""Distributed checkpoints and pipeline parallelism: simcluster gives gloo's and one process's results.

``dcp_pipe_cases`` holds the cases (``torch.distributed.checkpoint`` of an
FSDP2 model and its Adam optimizer, resumed in a fresh model, and of a plain
state dict; ``torch.distributed.pipelining`` with ``ScheduleGPipe``,
``Schedule1F1B``, ``ScheduleInterleaved1F1B`` and the tracing frontend).
Each runs on 4 gloo processes and on 4 simcluster ranks, and every rank's
values must agree; the training each does must also give what the same
training gives in one process on the whole batch.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import dcp_pipe_cases as cases  # noqa: E402
import differential  # noqa: E402
from differential import assert_same, close, show  # noqa: E402

SIZE = cases.SIZE
BACKENDS = ("gloo", "simcluster")

pytestmark = [
    # torch.export (under pipelining's tracing frontend) deep-copies a pytree spec whose class
    # warns that it is deprecated; torch warns alike in a gloo process.
    pytest.mark.filterwarnings(
        "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
    pytest.mark.timeout(180),  # whichever test comes first runs both fixtures (4 gloo processes)
]


@pytest.fixture(scope="module")
def gloo_values() -> list[dict[str, Any]]:
    """Every case's values on each of 4 gloo processes."""
    return differential.gloo_values("dcp_pipe_cases", SIZE)


@pytest.fixture(scope="module")
def simcluster_values() -> list[dict[str, Any]]:
    """Every case's values on each of 4 simcluster ranks."""
    return differential.simcluster_values("dcp_pipe_cases", SIZE)


@pytest.fixture(params=BACKENDS)
def values(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """Every rank's values under gloo, then under simcluster."""
    result: list[dict[str, Any]] = request.getfixturevalue(f"{request.param}_values")
    return result


@pytest.mark.parametrize("case", sorted(cases.CASES))
@pytest.mark.parametrize("rank", range(SIZE))
def test_simcluster_gives_gloos_values(case: str, rank: int, gloo_values: list[dict[str, Any]],
                                       simcluster_values: list[dict[str, Any]]) -> None:
    assert_same(simcluster_values[rank][case], gloo_values[rank][case], f"{case} on rank {rank}")


def test_no_case_raised(values: list[dict[str, Any]]) -> None:
    for rank, by_case in enumerate(values):
        for case, value in by_case.items():
            assert not (isinstance(value, tuple) and value[:1] == ("raised",)), (case, rank, value)


# ---- distributed checkpoints ----

CHECKPOINT_FILES = [".metadata"] + [f"__{r}_0.distcp" for r in range(SIZE)]


def test_dcp_resume_gives_the_uninterrupted_weights(values: list[dict[str, Any]]) -> None:
    at_checkpoint, at_end = (show(w) for w in cases.one_process_fsdp_run())
    for rank, by_case in enumerate(values):
        run = by_case["dcp_fsdp2_resume"]
        assert run["files"] == CHECKPOINT_FILES
        assert run["resumed_equals_uninterrupted"] is True, rank
        assert run["resumed"] == run["uninterrupted"]
        assert run["resumed_losses"] == run["losses"][cases.SAVED_AT:]
        assert close(run["loaded"], at_checkpoint), f"rank {rank}: loaded weights"
        assert close(run["uninterrupted"], at_end), f"rank {rank}: final weights"


def test_dcp_plain_state_dict_loads_what_was_saved(values: list[dict[str, Any]]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5),
                                torch.nn.Linear(5, 3))
    model(torch.randn(4, 6))
    for by_case in values:
        run = by_case["dcp_plain_state_dict"]
        assert run["files"] == CHECKPOINT_FILES
        assert run["epoch"] == 7
        assert run["loaded_equals_saved"] is True
        assert run["state"] == show(dict(model.state_dict()))


# ---- pipeline parallelism ----

PIPE_CASES = {"pipe_gpipe": SIZE, "pipe_1f1b": SIZE, "pipe_interleaved_1f1b": 2 * SIZE,
              "pipe_traced_split_spec": SIZE, "pipe_traced_pipe_split": SIZE}
"""Each pipelining case and the number of stages it splits the model into."""


def _by_position(named: dict[str, Any]) -> list[Any]:
    """The values of ``named`` in name order (a traced stage prefixes the names with its path)."""
    return [named[name] for name in sorted(named)]


@pytest.mark.parametrize("case", sorted(PIPE_CASES))
def test_pipeline_step_gives_one_processs_step(case: str, values: list[dict[str, Any]]) -> None:
    stages = PIPE_CASES[case]
    want = show(cases.one_process_pipe(stages))
    seen = set()
    for rank, by_case in enumerate(values):
        run = by_case[case]
        if rank == SIZE - 1:  # the last stage's rank scores each microbatch
            assert close(run["losses"], want["losses"]), f"{case}: losses"
        else:
            assert run["losses"] == []
        for stage in range(rank, stages, SIZE):
            got, ref = run[f"stage {stage}"], want[f"stage {stage}"]
            for what in ("grads", "weights"):
                assert close(_by_position(got[what]), _by_position(ref[what])), \
                    f"{case}: stage {stage} {what} on rank {rank}"
            seen.add(stage)
    assert seen == set(range(stages))
