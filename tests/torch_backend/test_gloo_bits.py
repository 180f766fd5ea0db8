"""Float reductions give gloo's bits: the same program under gloo processes and simcluster ranks.

``gloo_bits_cases`` runs on 2, 3, 4 and 5 gloo processes (the oracle) and on
as many simcluster ranks whose program asks for ``"gloo"``, and every rank's
tensors must be equal bit for bit: all_reduce (SUM, AVG, PRODUCT; float32,
float64, float16, bfloat16, complex64; adversarial values and sizes past
gloo's segment limits), reduce to every root, reduce_scatter and
reduce_scatter_tensor, all_reduce_coalesced, and a few DistributedDataParallel
steps (losses and weights). simcluster adds in gloo's ring order
(``simcluster/collectives/_gloo.py``); the simcluster-only tests check that
order at the communicator level and what the backend picks.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import differential  # noqa: E402
import gloo_bits_cases as cases  # noqa: E402
import numpy as np  # noqa: E402

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster import torchrun  # noqa: E402

pytestmark = [  # torch's own warnings, on every rank alike
    pytest.mark.filterwarnings("ignore:`torch.distributed.all_reduce_coalesced` will be deprecated"),
    pytest.mark.filterwarnings("ignore:`torch.distributed.reduce_scatter_tensor` is deprecated"),
]


def _simcluster_values(size: int, **keywords: Any) -> list[dict[str, Any]]:
    return differential.gloo_named_values("gloo_bits_cases", size, **keywords)


def _differing(got: Any, want: Any, path: str = "") -> list[str]:
    """The paths at which two case values differ (a tensor's bytes count as one leaf)."""
    if isinstance(got, dict) and isinstance(want, dict) and got.keys() == want.keys():
        return [p for k in got for p in _differing(got[k], want[k], f"{path}/{k}")]
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want) \
            and not (len(got) == 3 and isinstance(got[2], (bytes, str))):
        return [p for i, (a, b) in enumerate(zip(got, want)) for p in _differing(a, b, f"{path}[{i}]")]
    return [] if got == want else [path]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("size", cases.SIZES)
def test_every_rank_gets_the_bits_gloo_gives(size: int) -> None:
    gloo = differential.gloo_values("gloo_bits_cases", size)
    sim = _simcluster_values(size)
    for rank in range(size):
        assert _differing(sim[rank], gloo[rank]) == [], f"rank {rank} of {size}"


def test_the_cases_reach_past_the_segment_limit_of_gloo() -> None:
    from simcluster.collectives import _gloo

    for p in cases.SIZES:  # all_reduce and reduce lay out their segments differently here
        assert _gloo.all_reduce_bounds(cases.BIG, 4, p) != _gloo.reduce_bounds(cases.BIG, 4, p)


# ---- simcluster only ----


async def _adversarial(comm: sc.Comm, algorithm: str) -> Any:
    x = np.array([(1.0, 1e8, 1.0, -1e8)[comm.rank]], dtype=np.float32)
    return float((await comm.all_reduce(x, algorithm=algorithm))[0])


def test_the_example_of_the_issue_adds_as_gloo_does() -> None:
    assert list(sc.run(_adversarial, 4, args=("gloo_ring",))) == [1.0] * 4  # x0 + (x1 + (x2 + x3))
    assert list(sc.run(_adversarial, 4, args=("recursive_doubling",))) == [0.0] * 4  # the old default


def _algorithms(rank: int, size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=size)
    t = torch.ones(64)
    dist.all_reduce(t)
    dist.reduce(t, dst=0)
    dist.reduce_scatter_tensor(torch.empty(32), t)
    dist.reduce_scatter(torch.empty(32), list(t.chunk(2)))
    dist.destroy_process_group()


def _picked(result: sc.RunResult) -> dict[str, list[str]]:
    spans = [s for s in result.trace.spans if s.name.startswith("i")]
    return {name: sorted({s.args.get("algorithm") for s in spans if s.name == name})
            for name in ("iall_reduce", "ireduce", "ireduce_scatter")}


def test_the_backend_picks_the_algorithms_of_gloo_on_cpu_and_the_choice_of_the_run_wins() -> None:
    with torchrun._BackendMap(differential._AsGloo(), differential._AsGloo()):  # type: ignore[arg-type]
        picked = _picked(sctorch.spawn(_algorithms, args=(2,), nprocs=2, trace=True))
        forced = _picked(sctorch.spawn(_algorithms, args=(2,), nprocs=2, trace=True,
                                       algorithms={"all_reduce": "ring", "reduce": "binomial",
                                                   "reduce_scatter": "pairwise"}))
    assert picked == {"iall_reduce": ["gloo_ring"], "ireduce": ["gloo_ring"],
                      "ireduce_scatter": ["gloo_items", "gloo_whole"]}
    assert forced == {"iall_reduce": ["ring"], "ireduce": ["binomial"], "ireduce_scatter": ["pairwise"]}


async def _integers_and_extremes(comm: sc.Comm) -> list[Any]:
    r = comm.rank
    out = [await comm.all_reduce(np.arange(10, dtype=np.int64) * (r + 1) + 2**62, algorithm="gloo_ring")]
    for op in (sc.ReduceOp.MIN, sc.ReduceOp.MAX, sc.ReduceOp.BXOR):
        out.append(await comm.all_reduce(np.arange(7) * (r - 1), op=op, algorithm="gloo_ring"))
    out.append(await comm.all_reduce(float(r), algorithm="gloo_ring"))  # not an array: the ring
    return [np.asarray(v).tolist() for v in out]


def test_integers_stay_exact_and_other_ops_and_payloads_are_unchanged() -> None:
    got = sc.run(_integers_and_extremes, 3)
    base = np.arange(10, dtype=np.int64)
    with np.errstate(over="ignore"):
        total = (base * 6 + np.int64(2**62) + np.int64(2**62) + np.int64(2**62)).tolist()  # wraps
    assert got[0][0] == total
    k = np.arange(7)
    assert got[0][1:] == [(-k).tolist(), k.tolist(), (-k ^ 0 ^ k).tolist(), 3.0]
