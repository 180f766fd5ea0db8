"""Group registry, functional collectives, DeviceMesh and DTensor give gloo's values on simcluster.

``mesh_cases`` holds functions written as a torch user writes them: group
names and torch's registry (``_resolve_process_group``, ``group_desc``,
``destroy_process_group``, ``split_group``), the functional collectives and
the ``_c10d_functional`` ops, 1-D, 2-D and 3-D device meshes, and DTensor
(placing, every ``redistribute``, the ops of a model with backward,
``visualize_sharding``). Each runs on 4 and on 8 gloo processes and
simcluster ranks (8 gives a full (2, 2, 2) mesh), and every rank's values
must be equal, case by case. The DTensor results are also checked against
the same computation on whole tensors in one process.
"""

from __future__ import annotations

import importlib.util
import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import differential  # noqa: E402
import mesh_cases  # noqa: E402

SIZES = (4, 8)
RANKS = [(size, rank) for size in SIZES for rank in range(size)]
COMPARED = sorted(name for name in mesh_cases.CASES if name != mesh_cases.BACKEND_CASE)

Values = Callable[[int], list[dict[str, Any]]]


def _simcluster_values(size: int) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        # torch gives these warnings under gloo too (once per process, where they are not
        # errors); here the ranks share pytest's process, which makes warnings errors
        warnings.filterwarnings("ignore", r"`torch\.distributed\._functional_collectives\.\w+` "
                                          "is deprecated", FutureWarning)
        warnings.filterwarnings("ignore", "Slicing a flattened dim from root mesh", UserWarning)
        return differential.simcluster_values("mesh_cases", size)


@pytest.fixture(scope="module")
def gloo() -> Values:
    """Every case's values on each of ``size`` gloo processes, run once per size."""
    return functools.cache(lambda size: differential.gloo_values("mesh_cases", size))


@pytest.fixture(scope="module")
def simcluster() -> Values:
    """Every case's values on each of ``size`` simcluster ranks, run once per size."""
    return functools.cache(_simcluster_values)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", COMPARED)
@pytest.mark.parametrize(("size", "rank"), RANKS)
def test_simcluster_gives_gloos_values(case: str, size: int, rank: int, gloo: Values,
                                       simcluster: Values) -> None:
    differential.assert_same(simcluster(size)[rank][case], gloo(size)[rank][case],
                             f"{case} on rank {rank} of {size}")


# ---- what the differential alone would not show ----


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES)
def test_get_backend_names_each_runs_backend(size: int, gloo: Values,
                                             simcluster: Values) -> None:
    for backend, values in (("gloo", gloo(size)), ("simcluster", simcluster(size))):
        for rank, by_case in enumerate(values):
            names = by_case[mesh_cases.BACKEND_CASE]
            assert names == {"default": backend, "world": backend, "mesh_tp": backend,
                             "pair": backend if rank < 2 else None}


RAISING = {"split_group_on_cpu", "split_group_without_ranks", "c10d_functional_unknown_group"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES)
def test_only_the_refused_calls_raise_under_gloo(size: int, gloo: Values) -> None:
    for by_case in gloo(size):
        raised = {name for name, value in by_case.items()
                  if isinstance(value, tuple) and value[:1] == ("raised",)}
        assert raised == RAISING


@pytest.mark.timeout(300)
def test_split_group_is_refused_on_cpu_as_gloo_refuses_it(simcluster: Values) -> None:
    for by_case in simcluster(4):
        assert by_case["split_group_on_cpu"] == (
            "raised", "RuntimeError",
            "No device associated with the default pg, not safe to split any process groups")


def _registries(by_case: dict[str, Any]) -> list[dict[str, Any]]:
    """Every group's facts a registry case gave on one rank."""
    found = [by_case["world_registry"], by_case["mesh_1d"]["group"]]
    for case in ("new_group_registry", "new_subgroups_registry", "mesh_dim_group_registry"):
        found += [v for v in by_case[case].values() if isinstance(v, dict)]
    found += by_case["mesh_2d"]["groups"] + [by_case["mesh_2d"]["flat_group"]]
    found += list(by_case["mesh_3d"]["groups"].values()) + [by_case["mesh_3d"]["flat_group"]]
    return [facts for facts in found if facts.get("member")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("size", "rank"), RANKS)
def test_every_group_resolves_by_its_unique_name(size: int, rank: int,
                                                 simcluster: Values) -> None:
    by_case = simcluster(size)[rank]
    groups = _registries(by_case)
    assert len(groups) >= 10
    assert all(facts["resolves"] for facts in groups)
    assert all(by_case[case]["unique"] for case in (
        "new_group_registry", "new_subgroups_registry", "mesh_dim_group_registry", "mesh_3d"))
    world = by_case["world_registry"]
    assert (world["name"], world["desc"], world["ranks"]) == ("0", "default_pg",
                                                             list(range(size)))
    dims = by_case["mesh_dim_group_registry"]
    assert (dims["dp"]["desc"], dims["tp"]["desc"]) == ("mesh_dp", "mesh_tp")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("size", "rank"), RANKS)
def test_destroyed_subgroup_leaves_the_world_working(size: int, rank: int,
                                                     simcluster: Values) -> None:
    values = simcluster(size)[rank]["destroy_subgroup_then_world"]
    if rank < 2:
        assert values["resolve_after"][:2] == ["raised", "RuntimeError"]
    ranks = sum(range(size))  # each rank adds arange(3) + rank
    assert values["world_all_reduce"][2] == [ranks, ranks + size, ranks + 2 * size]
    assert values["world"]["resolves"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES)
def test_a_3d_mesh_gives_each_rank_its_coordinate(size: int, simcluster: Values) -> None:
    shape = [2, 2, size // 4]
    for rank, by_case in enumerate(simcluster(size)):
        mesh = by_case["mesh_3d"]["mesh"]
        assert mesh["shape"] == shape
        assert mesh["coordinate"] == [rank // (2 * shape[2]), rank // shape[2] % 2,
                                      rank % shape[2]]
        assert by_case["mesh_3d"]["dp_tp"]["size"] == 2 * shape[2]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES)
def test_redistribute_refuses_only_moves_to_partial(size: int, gloo: Values) -> None:
    for case in ("redistribute_1d", "redistribute_2d"):
        moves = gloo(size)[0][case]
        refused = {move for move, value in moves.items() if isinstance(value, list)
                   and value[:1] == ["raised"]}
        # a move that keeps a Partial where it is, or makes none, is no move to Partial
        to_partial = {move for move in moves if any(
            d == "P" and s != "P" for s, d in zip(*(side.split(".") for side in
                                                      move.split("->"))))}
        assert refused == to_partial
        assert len(moves) - len(refused) >= 10


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES)
def test_visualize_sharding_prints_on_the_first_rank_only(size: int, simcluster: Values) -> None:
    # torch prints with tabulate (or rich); with neither, rank 0 gets torch's ValueError
    has_table = importlib.util.find_spec("tabulate") is not None
    for rank, by_case in enumerate(simcluster(size)):
        shown = by_case["visualize"]
        printed = shown["2d_mesh"]["printed"]
        if rank != 0:
            assert printed == "" and shown["2d_mesh"]["value"] is None
        elif has_table:
            assert f"Row 0-{size // 2 - 1}" in printed and f"cpu:{size - 1}" in printed
        else:
            assert shown["2d_mesh"]["value"] == [
                "raised", "ValueError", "`visualize_sharding` requires either `rich` or `tabulate`."]
        if has_table and importlib.util.find_spec("rich") is None:
            # use_rich=True without rich installed: the same tabulate table
            assert ("Row 0-" in shown["rich"]["printed"]) == (rank == 0)
        assert shown["3d_tensor"]["value"] == [
            "raised", "RuntimeError", "visualize sharding supports only 1D or 2D DTensor"]


# ---- DTensor gives what one process gives on whole tensors ----


def near(got: Any, want: Any, what: str = "") -> None:
    """Assert ``got`` is ``want`` to a relative 1e-5 (absolute 1e-5 near zero)."""
    def close(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
        return bool(a == b)
    assert close(got, want), f"{what}: DTensor gave\n{got!r}\nwhere one process gave\n{want!r}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("size", "rank"), RANKS)
def test_dtensor_ops_give_one_process_results(size: int, rank: int,
                                              simcluster: Values) -> None:
    by_case = simcluster(size)[rank]
    matmul = by_case["matmul_sharded"]
    for layout in ("rows_x_replicated", "colwise", "rowwise"):
        near({k: matmul[layout][k] for k in matmul["plain"]}, matmul["plain"], layout)
    ops = by_case["elementwise_softmax_layer_norm"]
    near(ops["dtensor"], ops["plain"], "add, softmax, layer_norm")
    near(ops["grads"], ops["plain_grads"], "their gradients")
    emb = by_case["embedding"]
    for layout in ("rowwise", "colwise", "replicated"):
        near({k: emb[layout][k] for k in emb["plain"]}, emb["plain"], f"embedding {layout}")
    loss = by_case["cross_entropy"]
    for layout in ("batch_sharded", "replicated", "loss_parallel"):
        near(loss[layout], loss["plain"], f"cross_entropy {layout}")
    mlp = by_case["tensor_parallel_mlp"]
    near(mlp["tp"], mlp["plain"], "a tensor-parallel model trained 2 steps")
    assert mlp["placements"]["up.weight"] == ["S(0)"]
    assert mlp["placements"]["down.weight"] == ["S(1)"]
