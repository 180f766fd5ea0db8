"""FSDP2, tensor parallel and 2-D FSDP + TP train on simcluster as on gloo and as in one process.

``fsdp_tp_cases`` shards or parallelizes small models as torch's documentation
shows (``fully_shard`` per layer and at the root, with and without
``reshard_after_forward`` and with a bf16 ``MixedPrecisionPolicy``;
``parallelize_module`` with ``ColwiseParallel``, ``RowwiseParallel``,
``SequenceParallel`` and ``PrepareModuleInput``; a transformer with FSDP over
"dp" and TP over "tp" of a 2x2 mesh, its loss under ``loss_parallel``) and
trains each for a few steps on 4 ranks. Every rank's losses, outputs,
gradients and full weights must be what 4 gloo processes give, and what
the same model gives trained in one process on the whole batch.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import differential  # noqa: E402
import fsdp_tp_cases  # noqa: E402

SIZE = fsdp_tp_cases.SIZE
CASES = sorted(fsdp_tp_cases.CASES)
TRAINING = sorted(fsdp_tp_cases.REFERENCES)


@pytest.fixture(scope="module")
def gloo_values() -> list[dict[str, Any]]:
    """Every case's values on each of 4 gloo processes."""
    return differential.gloo_values("fsdp_tp_cases", SIZE)


@pytest.fixture(scope="module")
def simcluster_values() -> list[dict[str, Any]]:
    """Every case's values on each of 4 simcluster ranks."""
    return differential.simcluster_values("fsdp_tp_cases", SIZE)


@pytest.fixture(scope="module")
def one_process() -> dict[str, Any]:
    """Each training case's values from one process, without torch.distributed."""
    return {name: differential.show(train()) for name, train in fsdp_tp_cases.REFERENCES.items()}


def test_every_training_case_has_a_one_process_reference() -> None:
    assert set(TRAINING) == set(CASES)


@pytest.mark.timeout(300)  # 4 gloo processes each import torch and run every case
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rank", range(SIZE))
def test_simcluster_gives_gloos_values(case: str, rank: int, gloo_values: list[dict[str, Any]],
                                       simcluster_values: list[dict[str, Any]]) -> None:
    differential.assert_same(simcluster_values[rank][case], gloo_values[rank][case],
                             f"{case} on rank {rank}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["simcluster", "gloo"])
@pytest.mark.parametrize("case", TRAINING)
@pytest.mark.parametrize("rank", range(SIZE))
def test_training_gives_one_process_results(
        case: str, rank: int, backend: str, one_process: dict[str, Any],
        simcluster_values: list[dict[str, Any]], gloo_values: list[dict[str, Any]]) -> None:
    got = (simcluster_values if backend == "simcluster" else gloo_values)[rank][case]
    want = one_process[case]
    assert isinstance(got, dict), f"{case} on rank {rank} under {backend}: {got}"
    got = {key: got[key] for key in want}  # what one process has too (not the 2-D placements)
    assert differential.close(got, want), \
        f"{case} on rank {rank}: {backend} gave\n{got!r}\nwhere one process gave\n{want!r}"


def test_losses_fall_in_the_two_d_training(simcluster_values: list[dict[str, Any]]) -> None:
    losses = simcluster_values[0]["fsdp_tp_transformer_adam"]["losses"]
    assert len(losses) == fsdp_tp_cases.STEPS and losses[-1] < losses[0]


def test_two_d_weights_are_sharded_over_dp_and_tp(simcluster_values: list[dict[str, Any]]) -> None:
    placements = simcluster_values[0]["fsdp_tp_transformer_adam"]["placements"]
    # (dp, tp): colwise weights are split by rows over tp, then FSDP splits each tp part over dp
    assert placements["layers.0.attention.wq.weight"] == ["_S(0, 2)", "S(0)"]
    assert placements["layers.0.attention.wo.weight"] == ["S(0)", "S(1)"]  # rowwise
    assert placements["layers.0.attention_norm.weight"] == ["S(0)", "R"]  # sequence parallel


def test_loss_parallel_handlers_stay_inside_the_ranks(
        simcluster_values: list[dict[str, Any]]) -> None:
    # each rank enters and leaves loss_parallel() on its own, as a process does; after the run the
    # process's DTensor has none of the handlers loss_parallel() adds
    from torch.distributed.tensor import DTensor

    assert torch.ops.aten._log_softmax.default not in DTensor._op_dispatcher._custom_op_handlers
