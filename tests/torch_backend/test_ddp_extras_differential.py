"""DDP's features and ZeroRedundancyOptimizer: simcluster gives gloo's and one process's results.

``ddp_extras_cases`` holds the cases: ``no_sync()`` gradient accumulation,
``Join`` with uneven inputs, the communication hooks ``allreduce_hook``,
``fp16_compress_hook`` and ``powerSGD_hook``, ``static_graph=True``,
``find_unused_parameters=True`` with a branch some ranks skip, and
``ZeroRedundancyOptimizer`` with its state consolidated on rank 0. Each
trains on 4 gloo processes and on 4 simcluster ranks, and every rank's losses
and weights must agree; where the training has a meaning without
distribution, the weights must also be what one process gets on the whole data.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import ddp_extras_cases as cases  # noqa: E402
import differential  # noqa: E402
from differential import assert_same, show  # noqa: E402

SIZE = cases.SIZE
EXACT = sorted(set(cases.CASES) - {"fp16_compress_hook"})


@pytest.fixture(scope="module")
def gloo_values() -> list[dict[str, Any]]:
    """Every case's values on each of 4 gloo processes."""
    return differential.gloo_values("ddp_extras_cases", SIZE)


@pytest.fixture(scope="module")
def simcluster_values() -> list[dict[str, Any]]:
    """Every case's values on each of 4 simcluster ranks."""
    return differential.simcluster_values("ddp_extras_cases", SIZE)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", EXACT)
@pytest.mark.parametrize("rank", range(SIZE))
def test_simcluster_gives_gloos_values(case: str, rank: int, gloo_values: list[dict[str, Any]],
                                       simcluster_values: list[dict[str, Any]]) -> None:
    assert_same(simcluster_values[rank][case], gloo_values[rank][case], f"{case} on rank {rank}")


def test_no_case_raised(simcluster_values: list[dict[str, Any]],
                        gloo_values: list[dict[str, Any]]) -> None:
    for values in (simcluster_values, gloo_values):
        for rank, by_case in enumerate(values):
            for case, value in by_case.items():
                assert not (isinstance(value, tuple) and value[:1] == ("raised",)), (case, rank)


@pytest.mark.parametrize("case", sorted(set(cases.REFERENCE) & set(EXACT)))
def test_training_gives_one_process_weights(case: str,
                                            simcluster_values: list[dict[str, Any]]) -> None:
    want = show(cases.reference(case)["weights"])
    for rank in range(SIZE):
        assert_same(simcluster_values[rank][case]["weights"], want, f"{case} on rank {rank}")


def _fp16_close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-4)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_fp16_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_fp16_close(a[k], b[k]) for k in a)
    return bool(a == b)


@pytest.mark.parametrize("rank", range(SIZE))
def test_fp16_compress_hook_agrees_to_fp16_precision(rank: int,
                                                     gloo_values: list[dict[str, Any]],
                                                     simcluster_values: list[dict[str, Any]]
                                                     ) -> None:
    # The hook sums float16 gradients: rounded after each addition, so the sum depends on the
    # order of the additions (gloo's ring, simcluster's own), by up to float16's 1e-3.
    got = simcluster_values[rank]["fp16_compress_hook"]
    assert _fp16_close(got, gloo_values[rank]["fp16_compress_hook"]), (got, rank)
    assert _fp16_close(got["weights"], show(cases.reference("fp16_compress_hook")["weights"]))


def test_every_rank_ends_with_the_same_weights(simcluster_values: list[dict[str, Any]]) -> None:
    for case in cases.CASES:
        for rank in range(1, SIZE):
            assert simcluster_values[rank][case]["weights"] == \
                simcluster_values[0][case]["weights"], (case, rank)


def test_join_ran_every_ranks_own_number_of_batches(
        simcluster_values: list[dict[str, Any]]) -> None:
    steps = [len(values["join_uneven_inputs"]["losses"]) for values in simcluster_values]
    assert steps == [2, 3, 4, 5]


def test_powersgd_counted_its_iterations(simcluster_values: list[dict[str, Any]]) -> None:
    assert [values["powersgd_hook"]["iterations"] for values in simcluster_values] == \
        [cases.STEPS] * SIZE


def test_zero_shards_the_state_and_consolidates_it_on_rank_0(
        simcluster_values: list[dict[str, Any]]) -> None:
    runs = [values["zero_redundancy_optimizer"] for values in simcluster_values]
    assert [run["owned"] for run in runs] == [[[8, 6]], [[2, 8]], [[8]], [[2]]]  # by size
    assert_same(runs[0]["state_dict"], show(cases.reference("zero_redundancy_optimizer")
                                            ["state_dict"]), "rank 0's consolidated state")
    for rank in range(1, SIZE):
        assert runs[rank]["state_dict"] == [
            "raised", "RuntimeError", "Optimizer state has not been consolidated on this rank. "
            f"Please call `consolidate_state_dict(to={rank})` on all ranks beforehand if you "
            "meant to save the global state."]
