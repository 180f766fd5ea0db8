"""A gloo group made by ``ProcessGroupGloo``'s constructor inside a rank: a clear error, at once.

torch's own tests make gloo groups that way (``test_c10d_gloo.py``'s
``ProcessGroupGlooTest``); real gloo connects every rank of the group inside
the constructor, which ranks that run one at a time cannot do, so a rank used
to wait there for gloo's timeout (50 s in those tests) and fail with gloo's
``Wait timeout``. Outside the ranks, and after the spawn, the constructor is
gloo's own.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.errors import SimclusterError  # noqa: E402

REAL = torch._C._distributed_c10d.ProcessGroupGloo


def _construct(rank: int, size: int) -> None:
    dist.ProcessGroupGloo(dist.HashStore(), rank, size, timedelta(seconds=50))


@pytest.mark.timeout(40)  # gloo's own wait is the 50 s timeout: the reason comes before it
def test_a_rank_constructing_gloo_gets_the_reason_at_once() -> None:
    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(_construct, args=(2,), nprocs=2)
    cause = info.value.__cause__
    assert isinstance(cause, SimclusterError)
    assert str(cause) == (
        f"rank {cause.rank}: ProcessGroupGloo(store, rank={cause.rank}, size=2): a gloo group is "
        "torch's real gloo, which connects all its ranks at once inside this constructor, and the "
        "ranks of a spawn run one at a time, so it could only time out; inside "
        "simcluster.torch.spawn use dist.init_process_group('simcluster') (simcluster torchrun "
        "runs a program's 'gloo' groups there itself)")


def test_its_options_are_gloos_inside_a_rank() -> None:
    def fn(rank: int) -> float:
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = 5.0
        return opts._timeout.total_seconds()

    assert list(sctorch.spawn(fn, nprocs=2)) == [5.0, 5.0]


def test_gloo_is_gloos_own_again_after_the_spawn_and_outside_the_ranks() -> None:
    with pytest.raises(sc.RankError):
        sctorch.spawn(_construct, args=(1,), nprocs=1)
    assert dist.ProcessGroupGloo is REAL
    assert dist.distributed_c10d.ProcessGroupGloo is REAL
    pg = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=10))
    t = torch.ones(3)
    pg.allreduce([t]).wait()
    assert t.tolist() == [1.0, 1.0, 1.0]
