"""A program that asks for gloo gets gloo's answers where pytorch's ``test_c10d_gloo.py`` looks.

``other_battery_cases`` runs on 3 gloo processes and on 3 simcluster ranks
whose program asks for ``"gloo"`` (as ``simcluster torchrun`` maps it), and
every rank's values, errors included, must be equal: the group's CPU backend
(``_get_backend``, gloo's ``create_device``), ``_broadcast_coalesced``, and
``all_to_all_single``'s check that its input is contiguous.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import differential  # noqa: E402
import other_battery_cases as cases  # noqa: E402

SIZE = cases.SIZE


@pytest.fixture(scope="module")
def gloo() -> list[dict[str, Any]]:
    return differential.gloo_values("other_battery_cases", SIZE)


@pytest.fixture(scope="module")
def ours() -> list[dict[str, Any]]:
    return differential.gloo_named_values("other_battery_cases", SIZE)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(cases.CASES))
def test_same_values_as_gloo(gloo: list[dict[str, Any]], ours: list[dict[str, Any]],
                             case: str) -> None:
    for rank in range(SIZE):
        assert differential.close(ours[rank][case], gloo[rank][case]), (
            f"rank {rank}: {case}: simcluster {ours[rank][case]!r} != gloo {gloo[rank][case]!r}")


def test_the_noncontiguous_input_is_refused_as_gloo_refuses_it(gloo: list[dict[str, Any]]) -> None:
    assert gloo[0]["all_to_all_single_noncontiguous_input"] == (
        "raised", "ValueError", "Tensors must be contiguous")
