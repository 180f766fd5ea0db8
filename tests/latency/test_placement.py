"""A latency model declares where it puts the ranks (``placement()``); ranks see it as their host."""

from __future__ import annotations

import random

import simcluster as sc
from simcluster.latency import AlphaBeta, Hierarchical, Jitter, LatencyModel, Placement, Ports
from simcluster.platform import dgx_h100


def test_each_built_in_model_declares_its_nodes() -> None:
    fast, slow = AlphaBeta(1e-7, 1e-11), AlphaBeta(1e-6, 1e-9)
    assert fast.placement() is None
    assert Hierarchical(fast, slow, ranks_per_node=4).placement() == Placement(4)
    platform = dgx_h100(2)
    assert platform.placement() == Placement(8, 2, nics_per_node=8, gpus=True, routed=True)
    assert Jitter(platform, 0.1).placement() == Placement(8, 2)  # nodes, but not its routes
    assert Jitter(fast, 0.1).placement() is None
    assert [Placement(3).node_of(r) for r in range(7)] == [0, 0, 0, 1, 1, 1, 2]


class EveryTwoRanks(LatencyModel):
    """A third party's model: a constant delay, two ranks a node."""

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        return AlphaBeta(1e-6, 0.0).bind(world_size, rng)

    def placement(self) -> Placement:
        return Placement(2)


def test_a_users_model_places_the_ranks_on_nodes() -> None:
    def node(comm: sc.Comm) -> tuple[list[int], str]:
        from simcluster import MPI

        world = MPI.COMM_WORLD
        shared = world.Split_type(MPI.COMM_TYPE_SHARED)
        return shared.allgather(world.Get_rank()), MPI.Get_processor_name()

    result = sc.run(node, world_size=5, latency=EveryTwoRanks())
    assert list(result) == [([0, 1], "node0"), ([0, 1], "node0"), ([2, 3], "node1"),
                            ([2, 3], "node1"), ([4], "node2")]
    alone = sc.run(node, world_size=2, latency=AlphaBeta(1e-6, 0.0))
    assert list(alone) == [([0, 1], "node0")] * 2
