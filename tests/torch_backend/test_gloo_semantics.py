"""A program that asks for gloo gets gloo's answers beyond plain collectives, and its timeouts in virtual time.

``gloo_semantics_cases`` runs on 3 gloo processes and on 3 simcluster ranks
whose program asks for ``"gloo"`` (mapped onto simcluster's backend as
``simcluster torchrun`` maps it), and every rank's values must be equal:
``all_gather_coalesced``, sparse ``all_reduce``, the errors (and their text)
of barrier, collective, ``Work.wait`` and ``monitored_barrier`` timeouts,
and the backend DistributedDataParallel's logging data names. These are the
causes torch's own battery (``tests/test_torch_battery.py``) found.

The simcluster-only tests check when a timeout fires: at the virtual
instant the timeout names, while under torch's default timeout a rank that
waits forever is the deadlock report.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

import differential  # noqa: E402
import gloo_semantics_cases as cases  # noqa: E402

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.comm import current_comm  # noqa: E402

SIZE = cases.SIZE

pytestmark = [  # torch's own warnings, on every rank alike
    pytest.mark.filterwarnings("ignore:`torch.distributed.all_gather_coalesced` will be deprecated"),
    pytest.mark.filterwarnings("ignore:Work::result API is being deprecated"),
]


spawn_as_gloo = differential.spawn_as_gloo


@pytest.fixture(scope="module")
def gloo_values() -> list[dict[str, Any]]:
    return differential.gloo_values("gloo_semantics_cases", SIZE)


@pytest.fixture(scope="module")
def simcluster_values() -> list[dict[str, Any]]:
    return differential.gloo_named_values("gloo_semantics_cases", SIZE)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(cases.CASES))
@pytest.mark.parametrize("rank", range(SIZE))
def test_simcluster_gives_gloos_values(case: str, rank: int, gloo_values: list[dict[str, Any]],
                                       simcluster_values: list[dict[str, Any]]) -> None:
    differential.assert_same(simcluster_values[rank][case], gloo_values[rank][case], case)


def _timed(rank: int, size: int, seconds: float) -> Any:
    dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timedelta(seconds=seconds))
    comm = current_comm()
    assert comm is not None
    start = comm.now
    if rank == 0:
        with pytest.raises(RuntimeError, match=f"Timed out waiting {int(seconds * 1000)}ms"):
            dist.barrier()
        return comm.now - start
    time.sleep(2 * seconds)  # virtual: rank 0 times out while this rank is away
    return None


def test_a_timeout_fires_at_its_virtual_instant() -> None:
    result = spawn_as_gloo(_timed, (2, 0.25), 2)
    assert result[0] == pytest.approx(0.25, abs=1e-12)
    assert result.elapsed == pytest.approx(0.5, abs=1e-9)  # the other rank's sleep, no later timer


def _wait_forever(rank: int, size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=size)  # torch's default timeout
    if rank == 0:
        dist.barrier()


def test_under_the_default_timeout_a_rank_that_waits_forever_is_a_deadlock() -> None:
    with pytest.raises(sc.DeadlockError, match="barrier"):
        spawn_as_gloo(_wait_forever, (2,), 2)


def _simcluster_named(rank: int, size: int) -> Any:
    dist.init_process_group("simcluster", rank=rank, world_size=size)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    return model._get_ddp_logging_data().get("backend_name"), dist.group.WORLD.name()


def test_a_group_named_simcluster_says_simcluster() -> None:
    assert list(sctorch.spawn(_simcluster_named, args=(2,), nprocs=2)) == [("simcluster", "simcluster")] * 2


def test_ddp_logging_is_torchs_own_after_the_spawn() -> None:
    ddp = torch.nn.parallel.DistributedDataParallel
    original = ddp.__dict__["_get_ddp_logging_data"]
    sctorch.spawn(_simcluster_named, args=(2,), nprocs=2)
    assert ddp.__dict__["_get_ddp_logging_data"] is original
