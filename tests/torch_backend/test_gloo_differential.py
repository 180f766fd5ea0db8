"""The same torch.distributed code under gloo (real processes) and under simcluster gives the same values.

``torch_cases`` holds functions written as a torch user writes them; each
runs on 3 gloo processes (``torch.multiprocessing.spawn``, rendezvous on
127.0.0.1) and on 3 simcluster ranks (``simcluster.torch.spawn``), and every
rank's values must be equal, case by case: every collective, every
ReduceOp on every dtype gloo accepts, point-to-point, object collectives,
groups and async work handles.
"""

from __future__ import annotations

import pickle
import socket
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402

import simcluster.torch as sctorch  # noqa: E402
import torch_cases  # noqa: E402

SIZE = torch_cases.SIZE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def gloo_values(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every case's values on each of 3 gloo processes."""
    out = tmp_path_factory.mktemp("gloo")
    mp.spawn(torch_cases.gloo_rank, args=(SIZE, _free_port(), str(out)), nprocs=SIZE)
    return [pickle.loads((out / f"rank{r}.pickle").read_bytes()) for r in range(SIZE)]


@pytest.fixture(scope="module")
def simcluster_values() -> list[dict[str, Any]]:
    """Every case's values on each of 3 simcluster ranks."""
    return list(sctorch.spawn(torch_cases.simcluster_rank, args=(SIZE,), nprocs=SIZE))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(torch_cases.CASES))
@pytest.mark.parametrize("rank", range(SIZE))
def test_simcluster_gives_gloos_values(case: str, rank: int, gloo_values: list[dict[str, Any]],
                                       simcluster_values: list[dict[str, Any]]) -> None:
    assert simcluster_values[rank][case] == gloo_values[rank][case]


def test_the_differential_covers_every_op(gloo_values: list[dict[str, Any]]) -> None:
    keys = gloo_values[0]["all_reduce_every_op_and_dtype"]
    assert {k.partition("/")[0] for k in keys} == set(torch_cases.OPS)
    assert len(keys) == sum(torch_cases.gloo_accepts(op, dt)
                            for op in torch_cases.OPS for dt in torch_cases.DTYPES)
