"""Platforms against SimGrid: the same links, routes and flows give the times SimGrid computes.

SimGrid's CM02 network model shares links max-min fairly with each flow's
part inversely proportional to its route's latency, and bounds each flow by
its TCP window (``network/TCP-gamma``, 4194304 bytes by default): a
``Platform(..., sharing_model=CM02)`` is that model, run here without cross traffic.
Its LV08 model (SimGrid's default) adds a latency factor of 13.01, a
bandwidth factor of 0.97, a payload of 20537 bytes in each flow's weight,
and cross traffic (each flow's acknowledgements take 5% of its rate on the
reverse route): a ``Platform(..., sharing_model=LV08)``. SimGrid runs its full, not its
lazy, update of the shares (``network/optim:Full``; its lazy one, the
default, gave one of the patterns below different times). Each case writes the platform's
links and routes and the flows as JSON, runs ``tests/simgrid_flows.py``
under a Python with SimGrid's bindings (Debian's ``python3-simgrid``; set
``SIMGRID_PYTHON`` to choose it), and compares every flow's time. Skipped,
with the reason, where no Python has SimGrid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.platform import CM02, LV08, Dragonfly, FatTree, KAryFatTree, Link, Platform, Switch, Torus

HERE = Path(__file__).resolve().parent
MODELS = {"CM02": (["network/model:CM02", "network/crosstraffic:0", "network/optim:Full"], CM02),
          "LV08": (["network/model:LV08", "network/crosstraffic:1", "network/optim:Full"], LV08)}
NIC = Link(1e-6, 1e9)
RANK = Link(1e-7, 1e11)
MB = 10**6


def _simgrid_python() -> str | None:
    for candidate in (os.environ.get("SIMGRID_PYTHON"), "/usr/bin/python3", shutil.which("python3")):
        if candidate and Path(candidate).is_file():
            probe = subprocess.run([candidate, "-c", "import simgrid"], capture_output=True)
            if probe.returncode == 0:
                return candidate
    return None


SIMGRID = _simgrid_python()
pytestmark = pytest.mark.skipif(SIMGRID is None, reason="no Python with SimGrid's bindings (Debian: "
                                "apt install python3-simgrid; or set SIMGRID_PYTHON)")


def simgrid(model: str, platform: Platform, pairs: list[tuple[int, int]], tmp: Path, **work: Any) -> list[float]:
    """Run ``work`` (``flows=[...]`` or ``ring={...}``) under SimGrid's ``model`` on ``platform``'s
    links (SimGrid applies the model's factors itself); every route and its reverse."""
    links = platform.links
    routes = sorted(set(pairs) | {(d, s) for s, d in pairs})
    desc = {"config": MODELS[model][0], "hosts": platform.nodes * platform.ranks_per_node,
            "links": [[lat, bw] for lat, bw in zip(links.latency, links.bandwidth)],
            "routes": [[[s, d], list(platform.route(s, d))] for s, d in routes], **work}
    path = tmp / "simgrid.json"
    path.write_text(json.dumps(desc))
    assert SIMGRID is not None
    done = subprocess.run([SIMGRID, str(HERE / "simgrid_flows.py"), str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    times: list[float] = json.loads(done.stdout)
    return times


def flows_program(flows: list[tuple[int, int, int, float]]) -> Any:
    async def main(comm: sc.Comm) -> None:
        receives = [comm.irecv(src=s) for s, d, _, _ in flows if d == comm.rank]
        sends = []
        for s, d, nbytes, at in sorted((f for f in flows if f[0] == comm.rank), key=lambda f: f[3]):
            await comm.sleep(at - comm.now)
            sends.append(comm.isend(np.zeros(nbytes, np.uint8), dst=d))
        for req in receives + sends:
            await req
    return main


def ours(platform: Platform, flows: list[tuple[int, int, int, float]]) -> list[float]:
    size = platform.nodes * platform.ranks_per_node
    result = sc.run(flows_program(flows), size, latency=platform, trace=True, eager_limit=2**30)
    assert result.trace is not None
    got = {(m.src, m.dst): m.recv for m in result.trace.messages}
    return [got[(s, d)] for s, d, _, _ in flows]


def machine(nodes: int, network: Any, ranks_per_node: int = 1) -> Callable[[str], Platform]:
    return lambda model: Platform(nodes, ranks_per_node, RANK, network, sharing_model=MODELS[model][1])


PATTERNS = {
    "pairs": lambda n: [(r, r ^ 1, MB, 0.0) for r in range(n)],
    "incast": lambda n: [(r, 0, MB // r, 1e-5 * r) for r in range(1, n)],
    "all_to_all": lambda n: [(s, d, 200_000, 0.0) for s in range(n) for d in range(n) if s != d],
    "staggered": lambda n: [(s, (s + k) % n, MB // k, 1e-5 * k) for s in range(n) for k in (1, 3, 5)],
}
PLATFORMS = {
    "switch": machine(8, Switch(NIC)),
    "fat tree 2:1": machine(8, FatTree(hosts_per_leaf=2, spines=2, link=NIC, oversubscription=2)),
    "torus 4x2": machine(8, Torus((4, 2), NIC)),
    "k-ary fat tree 2:1": machine(8, KAryFatTree(4, NIC, oversubscription=2)),
    "two nodes of four": machine(2, Switch(NIC), ranks_per_node=4),
    "wide area (the TCP window binds)": machine(8, Switch(Link(5e-4, 1e10))),
    "dragonfly": machine(8, Dragonfly(groups=2, routers=2, hosts_per_router=2, link=NIC,
                                      global_link=Link(2e-6, 0.5e9))),
}


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("machine", list(PLATFORMS))
@pytest.mark.parametrize("model", list(MODELS))
def test_every_flow_ends_when_simgrid_says(model: str, machine: str, pattern: str, tmp_path: Path) -> None:
    platform = PLATFORMS[machine](model)
    flows = PATTERNS[pattern](8)
    theirs = simgrid(model, platform, [(s, d) for s, d, _, _ in flows], tmp_path, flows=[list(f) for f in flows])
    assert ours(platform, flows) == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize("machine", list(PLATFORMS))
@pytest.mark.parametrize("model", list(MODELS))
def test_a_ring_all_reduce_ends_when_simgrid_says(model: str, machine: str, tmp_path: Path) -> None:
    platform = PLATFORMS[machine](model)
    p, chunk = 8, 250_000  # bytes per ring step: a 2 MB vector (rendezvous steps)

    async def main(comm: sc.Comm) -> float:
        await comm.all_reduce(np.ones(p * chunk // 8), algorithm="ring")
        return comm.now
    result = sc.run(main, p, latency=platform)
    pairs = [(r, (r + 1) % p) for r in range(p)]
    theirs = simgrid(model, platform, pairs, tmp_path, ring={"ranks": p, "chunk": chunk})
    assert result.times == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize("model", list(MODELS))
def test_a_slow_rank_whose_nic_is_its_bottleneck_ends_when_simgrid_says_with_the_nic_slowed(
        model: str, tmp_path: Path) -> None:
    # rank 0's flow alone on its route, whose narrowest link is node 0's NIC up: a slow window on
    # rank 0 (its bytes 4 times slower) is SimGrid's NIC losing 3/4 of its bandwidth in the window
    platform = PLATFORMS["switch"](model)
    flows = [(0, 1, MB, 0.0), (2, 3, MB, 0.0), (4, 5, MB, 3e-4)]
    nic = platform.route(0, 1)[1]
    bandwidth = platform.links.bandwidth[nic]
    changes = [[4e-4, nic, bandwidth / 4], [8e-4, nic, bandwidth]]
    theirs = simgrid(model, platform, [(s, d) for s, d, _, _ in flows], tmp_path,
                     flows=[list(f) for f in flows], changes=changes)
    size = platform.nodes * platform.ranks_per_node
    result = sc.run(flows_program(flows), size, latency=platform, trace=True, eager_limit=2**30,
                    faults="slow:0x4@0.4ms..0.8ms")
    assert result.trace is not None
    got = {(m.src, m.dst): m.recv for m in result.trace.messages}
    assert [got[(s, d)] for s, d, _, _ in flows] == pytest.approx(theirs, rel=1e-9)
    assert theirs[0] > theirs[1]  # the window did slow it
