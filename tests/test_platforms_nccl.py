"""NCCL's all_reduce algorithms across nodes (``nccl_ring``, ``nccl_tree``) and its choice between them.

Every rank's values must equal the plain algorithms'; the rings must leave a
node through different NICs, so that ``C`` NICs carry the data in ``1/C`` of
the time; the tree must cross the network only along its two trees' edges;
where the members share no node each is the plain algorithm it names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import _nccl, _nodes
from simcluster.platform import Link, Platform, Switch, dgx_h100

GB = 1e9
FAST = Link(0.0, 1e12)  # within a node: never the bottleneck
NIC = Link(1e-6, 1 * GB)


def nodes(count: int = 4, ranks: int = 4, nics: int = 2, **keywords: Any) -> Platform:
    return Platform(count, ranks, FAST, Switch(NIC), nics_per_node=nics, **keywords)


def reduction(algorithm: str, n: int, op: Any = None, dtype: Any = np.float64) -> Any:
    async def main(comm: sc.Comm) -> Any:
        x = (np.arange(n) % 97 + comm.rank + 1).astype(dtype)
        return (await comm.all_reduce(x, op, algorithm=algorithm)).tolist(), comm.now
    return main


def across(result: sc.RunResult, per_node: int) -> int:
    """Messages between nodes (ranks r and s on different nodes) in a traced run."""
    assert result.trace is not None
    return sum(1 for m in result.trace.messages if m.src // per_node != m.dst // per_node)


@pytest.mark.parametrize("world_size", [16, 12, 9])
@pytest.mark.parametrize("op, dtype", [(None, np.float64), (sc.ReduceOp.MAX, np.int32),
                                       (sc.ReduceOp.AVG, np.float64)], ids=["sum", "max", "avg"])
@pytest.mark.parametrize("algorithm", ["nccl_ring", "nccl_tree"])
def test_every_rank_gets_what_the_plain_algorithms_give(algorithm: str, op: Any, dtype: Any,
                                                        world_size: int) -> None:
    for n in (1, 7, 1000):  # fewer items than ranks, uneven pieces, many
        plain = sc.run(reduction("ring", n, op, dtype), world_size, latency=nodes())
        got = sc.run(reduction(algorithm, n, op, dtype), world_size, latency=nodes())
        assert [value for value, _ in got] == [value for value, _ in plain]
        assert len({str(value) for value, _ in got}) == 1


def test_objects_and_user_ops_take_the_plain_algorithms() -> None:
    async def main(comm: sc.Comm) -> Any:
        merge = sc.ReduceOp.custom(lambda a, b: {"n": a["n"] + b["n"]}, commutative=True)
        return (await comm.all_reduce({"n": comm.rank}, op=merge, algorithm="nccl_ring"),
                await comm.all_reduce(comm.rank, algorithm="nccl_tree"))
    assert list(sc.run(main, 16, latency=nodes())) == [({"n": 120}, 120)] * 16


def test_the_rings_leave_each_node_through_different_nics_and_take_that_much_less_time() -> None:
    n = 100_000  # float64: 800 kB, 25 kB per ring step on 16 ranks and 2 rings
    ring = sc.run(reduction("ring", n), 16, latency=nodes(), trace=True)
    rings = sc.run(reduction("nccl_ring", n), 16, latency=nodes(), trace=True)
    # one ring: each node boundary carries 2*(p-1) steps of n/p bytes over one 1 GB/s NIC
    assert ring.elapsed == pytest.approx(2 * 15 * (8 * n / 16) / GB, rel=0.02)
    # two rings, side by side, each through its own NICs: half the bytes on each, half the time
    assert rings.elapsed == pytest.approx(2 * 15 * (8 * n / 32) / GB, rel=0.02)
    assert rings.trace is not None
    senders = {m.src % 4 for m in rings.trace.messages if m.src // 4 != m.dst // 4}
    assert senders == {3, 0}  # ring 0 leaves a node from its last rank (NIC 1), ring 1 from its first (NIC 0)
    assert across(rings, 4) == 2 * across(ring, 4)


def test_the_tree_crosses_the_network_only_along_its_two_trees() -> None:
    result = sc.run(reduction("nccl_tree", 1000), 32, latency=nodes(8), trace=True)
    # 8 nodes: two trees of 7 edges, each edge one message up and one down
    assert across(result, 4) == 2 * 7 * 2
    assert _nccl.tree_links(4, 8) == (-1, [2, 6])  # the root is the middle rank
    assert _nccl.tree_links(2, 8) == (4, [1, 3])
    assert _nccl.tree_links(7, 8) == (6, [])


def test_where_members_share_no_node_they_are_the_plain_algorithms() -> None:
    model = sc.latency.AlphaBeta(2.0**-20, 2.0**-30)
    for nccl, plain in (("nccl_ring", "ring"), ("nccl_tree", "reduce_broadcast")):
        assert [t for _, t in sc.run(reduction(nccl, 64), 8, latency=model)] == \
            [t for _, t in sc.run(reduction(plain, 64), 8, latency=model)]


def test_on_nodes_they_run_at_message_fidelity_only() -> None:
    with pytest.raises(sc.RankError, match=r"all_reduce\(algorithm='nccl_tree'\): it follows the nodes"):
        sc.run(reduction("nccl_tree", 64), 16, latency=nodes(sharing=False), fidelity="analytic")


def test_nccl_picks_the_tree_for_small_arrays_and_the_rings_for_large_ones() -> None:
    platform = dgx_h100(4)

    async def main(comm: sc.Comm) -> list[str]:
        found = _nodes.layout(comm)
        assert found is not None
        return [_nccl.choose(comm, found, n) for n in (64, 2**21, 2**22, 2**30)]
    # docs/platforms.md: on dgx_h100(4), the tree up to 2 MiB and the rings from 4 MiB
    assert set(map(tuple, sc.run(main, 32, latency=platform))) == {
        ("nccl_tree", "nccl_tree", "nccl_ring", "nccl_ring")}
