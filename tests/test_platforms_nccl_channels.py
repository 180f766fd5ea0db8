"""NCCL's channels for all_gather and reduce_scatter (``nccl_ring``), and its bus bandwidth on dgx_h100(4).

Every rank's values must equal the plain ring's; the rings must leave a node
through different NICs, so that ``C`` NICs carry the data in ``1/C`` of the
time; NCCL's choice on a platform of GPUs is these rings. The bus bandwidth
is nccl-tests' (its doc/PERFORMANCE.md), NCCL's own estimate of its rings; the tables of
docs/platforms.md ("NCCL's bus bandwidth across nodes") and docs/predict.md ("Collectives across
nodes") must print what this computes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import platform as _platform
from simcluster.collectives import _nccl
from simcluster.platform import Link, Platform, SharingModel, Switch, dgx_h100

GB = 1e9
DOCS = Path(__file__).resolve().parent.parent / "docs"


def nodes(count: int = 4, ranks: int = 4, nics: int = 2, **keywords: Any) -> Platform:
    return Platform(count, ranks, Link(0.0, 1e12), Switch(Link(1e-6, 1 * GB)), nics_per_node=nics, **keywords)


def gather(algorithm: str, n: int, shape: Any = None) -> Any:
    async def main(comm: sc.Comm) -> Any:
        x = (np.arange(n) % 97 + comm.rank + 1).astype(np.float64)
        if shape is not None:
            x = x.reshape(shape(comm.rank))
        got = await comm.all_gather(x, algorithm=algorithm)
        return [(item.tolist(), item.shape, str(item.dtype)) for item in got], comm.now
    return main


def scatter(algorithm: str, n: int, op: Any = None, dtype: Any = np.float64) -> Any:
    async def main(comm: sc.Comm) -> Any:
        items = [(np.arange(n).reshape(-1, 1) % 97 + comm.rank + j).astype(dtype) for j in range(comm.size)]
        got = await comm.reduce_scatter(items, op, algorithm=algorithm)
        return (got.tolist(), got.shape, str(got.dtype)), comm.now
    return main


def values(result: Any) -> list[Any]:
    return [value for value, _ in result]


@pytest.mark.parametrize("world_size", [16, 12, 9])
def test_every_rank_gets_what_the_plain_ring_gives(world_size: int) -> None:
    for n in (1, 7, 1000):  # fewer items than rings, uneven parts, many
        plain = sc.run(gather("ring", n), world_size, latency=nodes())
        assert values(sc.run(gather("nccl_ring", n), world_size, latency=nodes())) == values(plain)
        for op, dtype in ((None, np.float64), (sc.ReduceOp.MAX, np.int32), (sc.ReduceOp.AVG, np.float64)):
            plain = sc.run(scatter("ring", n, op, dtype), world_size, latency=nodes())
            got = sc.run(scatter("nccl_ring", n, op, dtype), world_size, latency=nodes())
            assert values(got) == values(plain)


def test_all_gather_keeps_every_items_shape_even_when_they_differ() -> None:
    def shape(rank: int) -> tuple[int, ...]:
        return (12, 5) if rank % 2 else (6, 10)
    plain = sc.run(gather("ring", 60, shape), 16, latency=nodes())
    assert values(sc.run(gather("nccl_ring", 60, shape), 16, latency=nodes())) == values(plain)
    assert [shape for _, shape, _ in values(plain)[0]] == [(6, 10), (12, 5)] * 8


def test_objects_scalars_and_user_ops_take_the_plain_ring() -> None:
    async def main(comm: sc.Comm) -> Any:
        merge = sc.ReduceOp.custom(lambda a, b: a + b, commutative=True)
        return (await comm.all_gather({"r": comm.rank}, algorithm="nccl_ring"),
                await comm.all_gather(np.float64(comm.rank), algorithm="nccl_ring"),
                (await comm.reduce_scatter([np.ones(3)] * comm.size, merge, algorithm="nccl_ring")).tolist())
    result = list(sc.run(main, 16, latency=nodes()))
    assert result[5] == ([{"r": r} for r in range(16)], list(range(16)), [16.0] * 3)


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
def test_the_rings_leave_each_node_through_different_nics_and_take_less_time(collective: str) -> None:
    n = 16 * 10_000  # float64 in all (all_gather: the whole output); 80 kB per ring step on 16 ranks, 2 rings
    run = gather if collective == "all_gather" else scatter
    size = n // 16  # all_gather: each rank's item; reduce_scatter: each item of the list
    ring = sc.run(run("ring", size), 16, latency=nodes(), trace=True)
    rings = sc.run(run("nccl_ring", size), 16, latency=nodes(), trace=True)
    # one ring: each node boundary carries p-1 steps of n/p bytes over one 1 GB/s NIC, 2 us away
    assert ring.elapsed == pytest.approx(15 * (2e-6 + 8 * n / 16 / GB), rel=0.01)
    # two rings, each through its own NICs: half the bytes on each NIC, at most the same latencies
    assert 15 * 8 * n / 32 / GB < rings.elapsed <= 15 * (2e-6 + 8 * n / 32 / GB)
    assert rings.trace is not None
    senders = {m.src % 4 for m in rings.trace.messages if m.src // 4 != m.dst // 4}
    assert senders == {3, 0}  # ring 0 leaves a node from its last rank (NIC 1), ring 1 from its first (NIC 0)


def test_where_members_share_no_node_it_is_the_plain_ring_at_either_fidelity() -> None:
    model = sc.latency.AlphaBeta(2.0**-20, 2.0**-30)
    for fidelity in ("message", "analytic"):
        for run in (gather, scatter):
            assert list(sc.run(run("nccl_ring", 64), 8, latency=model, fidelity=fidelity)) == \
                list(sc.run(run("ring", 64), 8, latency=model, fidelity=fidelity))


def test_nccl_runs_its_rings_for_all_gather_and_reduce_scatter_on_gpus() -> None:
    async def main(comm: sc.Comm) -> list[str | None]:
        return [_nccl.algorithm(comm, c, 2**30) for c in ("all_gather", "reduce_scatter", "all_reduce")]
    assert set(map(tuple, sc.run(main, 32, latency=dgx_h100(4)))) == {("nccl_ring", "nccl_ring", "nccl_ring")}
    assert set(map(tuple, sc.run(main, 16, latency=nodes()))) == {(None, None, None)}  # no gpus: the defaults


def test_network_efficiency_scales_the_network_and_not_the_nodes() -> None:
    platform = dgx_h100(2)
    assert platform.network_efficiency == 0.96
    # NCCL's 48 GB/s PCIe Gen5 x16 binds; InfiniBand's headers leave more of the 50 GB/s port
    assert (_platform._NCCL_PCIE_GEN5_X16, _platform._NDR_DATA_RATE) == (48e9, 50e9)
    assert _platform._NDR_DATA_RATE * _platform._IB_PAYLOAD == pytest.approx(49.68e9, rel=1e-4)
    assert platform.path(0, 1)[2] == 450e9  # NVLink: its line rate
    assert platform.path(0, 8)[2] == pytest.approx(0.96 * 50e9)  # across nodes: NCCL's 96% of the NIC's
    assert "network_efficiency=0.5" in Platform(2, 2, Link(0.0, 1e9), Switch(Link(0.0, 1e9)),
                                                network_efficiency=0.5).describe()
    for bad in (0, 1.5, True, "0.9"):
        with pytest.raises(ValueError, match="network_efficiency"):
            Platform(2, 2, Link(0.0, 1e9), Switch(Link(0.0, 1e9)), network_efficiency=bad)


# ---- bus bandwidth, as nccl-tests measures it ----

def without_latency(platform: Platform) -> Platform:
    """``platform`` with its latencies scaled to nothing: the time of a collective is its bytes over
    the bandwidth, what nccl-tests' large sizes measure."""
    return Platform(platform.nodes, platform.ranks_per_node, platform.intra, platform.network,
                    nics_per_node=platform.nics_per_node, network_efficiency=platform.network_efficiency,
                    gpus=platform.gpus, sharing_model=SharingModel(latency_factor=1e-9))


def bus_bandwidth(collective: str, nodes: int = 4, size: int = 2**22, algorithm: str = "") -> float:
    """nccl-tests' busbw, GB/s, of ``collective`` on ``dgx_h100(nodes)`` with the algorithm NCCL picks
    at 1 GiB: ``S/t`` times ``2(n-1)/n`` (all_reduce) or ``(n-1)/n`` (all_gather: ``S`` its output)."""
    n = 8 * nodes

    async def main(comm: sc.Comm) -> None:
        picked = algorithm or _nccl.algorithm(comm, collective, 2**30)
        if collective == "all_reduce":
            await comm.all_reduce(np.ones(size // 4, np.float32), algorithm=picked)
        else:
            await comm.all_gather(np.ones(size // 4 // n, np.float32), algorithm=picked)

    async def pick(comm: sc.Comm) -> str | None:
        return _nccl.algorithm(comm, collective, 2**30)
    assert set(sc.run(pick, n, latency=dgx_h100(nodes))) == {"nccl_ring"}  # on the platform as it is
    elapsed = sc.run(main, n, latency=without_latency(dgx_h100(nodes))).elapsed
    factor = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n
    return factor * size / elapsed / GB


def test_all_gather_runs_every_nic_of_a_node() -> None:
    one = bus_bandwidth("all_gather", algorithm="ring")
    assert one == pytest.approx(0.96 * 50)  # one ring, one NIC per node
    assert bus_bandwidth("all_gather") == pytest.approx(8 * one)  # eight rings, eight NICs


ROWS = {"4 nodes x 8 H100, all_reduce bus bandwidth": "all_reduce",
        "4 nodes x 8 H100, all_gather bus bandwidth": "all_gather"}


SECTIONS = {"platforms.md": "\n### NCCL's bus bandwidth across nodes\n", "predict.md": "\n## Collectives across nodes\n"}


@pytest.fixture(scope="module")
def simulated() -> dict[str, float]:
    return {collective: bus_bandwidth(collective) for collective in set(ROWS.values())}


@pytest.mark.parametrize("doc", list(SECTIONS))
@pytest.mark.parametrize("row", list(ROWS))
def test_the_docs_table_prints_what_simcluster_computes(row: str, doc: str, simulated: dict[str, float]) -> None:
    section = (DOCS / doc).read_text(encoding="utf-8").split(SECTIONS[doc], 1)[1]
    cells = next([c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
                 if line.startswith("| " + row))
    printed = float(re.match(r"[\d.]+", cells[2]).group())  # type: ignore[union-attr]
    assert simulated[ROWS[row]] == pytest.approx(printed, abs=0.05)
    published = float(re.match(r"[\d.]+", cells[1]).group())  # type: ignore[union-attr]
    assert cells[3] == f"{100 * (printed - published) / published:+.1f}%"
    if doc == "predict.md":  # and what a NIC carried in the published run
        assert cells[4] == f"{published / 8:.1f} GB/s"


def test_the_bus_bandwidth_is_nccls_own_estimate_of_its_rings(simulated: dict[str, float]) -> None:
    # NCCL's tuning model (src/graph/tuning.cc) for Ring/Simple: channels x their speed, 8 NICs x 48 GB/s
    assert simulated["all_gather"] == pytest.approx(8 * 48, rel=1e-3)
    assert simulated["all_reduce"] == pytest.approx(8 * 48, rel=5e-3)
