"""Platforms: routes through a machine's shape, and messages as flows that share links max-min fairly.

The times below are worked out by hand from the platform's links: a flow
waits its route's latency, then moves its bytes at its max-min fair share,
re-shared whenever a flow joins or ends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.platform import (CM02, LV08, MAX_MIN, Dragonfly, FatTree, KAryFatTree, Link, Platform, SharingModel,
                                 Switch, Torus, dgx_h100, ethernet_cluster, laptop)

GB = 1e9
MB = 10**6
NIC = Link(1e-6, 1 * GB)  # 1 us, 1 GB/s each way
FAST = Link(0.0, 1e12)  # the ranks' own links: never the bottleneck
HOP = 2e-6  # across the switch: the sender's NIC up, the receiver's down
BIG = {"eager_limit": 2**30}  # every message eager: no handshake in the times


def star(nodes: int, sharing: bool = True) -> Platform:
    """One rank per node, every node on one switch."""
    return Platform(nodes, 1, FAST, Switch(NIC), sharing=sharing)


def sends(plan: dict[int, list[tuple[int, int, float]]]) -> Any:
    """A program: rank r sends, for each (dst, nbytes, at) of plan[r], nbytes to dst at time at,
    and receives what is sent to it (its receives posted at 0); returns when it finished."""
    async def main(comm: sc.Comm) -> float:
        receives = [comm.irecv(src=src) for src, todo in plan.items()
                    for dst, _, _ in todo if dst == comm.rank]
        requests = []
        for dst, nbytes, at in plan.get(comm.rank, []):
            await comm.sleep(at - comm.now)
            requests.append(comm.isend(np.zeros(nbytes, np.uint8), dst=dst))
        for req in receives + requests:
            await req
        return comm.now
    return main


def arrivals(plan: dict[int, list[tuple[int, int, float]]], world_size: int, platform: Platform,
             **keywords: Any) -> dict[tuple[int, int], float]:
    """When each message of ``plan`` reached its receiver: {(src, dst): time} (from the trace)."""
    result = sc.run(sends(plan), world_size, latency=platform, trace=True, eager_limit=2**30, **keywords)
    assert result.trace is not None
    return {(m.src, m.dst): m.recv for m in result.trace.messages}


# ---- max-min sharing ----

def test_two_flows_into_one_link_share_it_and_the_second_speeds_up_when_the_first_ends() -> None:
    got = arrivals({0: [(2, MB, 0.0)], 1: [(2, MB // 2, 0.0)]}, 3, star(3))
    # both at 0.5 GB/s until the small one ends (0.5 MB at 0.5 GB/s: 1 ms); then 1 GB/s for the rest
    assert got == {(1, 2): pytest.approx(HOP + 1e-3), (0, 2): pytest.approx(HOP + 1.5e-3)}


def test_a_flow_that_joins_later_takes_its_share_from_then_on() -> None:
    got = arrivals({0: [(2, MB, 0.0)], 1: [(2, MB, 0.5e-3)]}, 3, star(3))
    # alone for 0.5 ms (0.5 MB), then halves until the first ends at 1.5 ms; the second, 0.5 MB
    # behind, alone again from then: 0.5 ms more
    assert got == {(0, 2): pytest.approx(HOP + 1.5e-3), (1, 2): pytest.approx(HOP + 2e-3)}


def test_max_min_gives_a_flow_what_its_bottlenecked_neighbours_leave() -> None:
    # three flows into rank 3 (1/3 GB/s each); rank 1 also sends to rank 4 over its own uplink,
    # which it shares with its flow into rank 3: max-min leaves that one 2/3 GB/s
    plan = {0: [(3, MB, 0.0)], 1: [(3, MB, 0.0), (4, MB, 0.0)], 2: [(3, MB, 0.0)]}
    got = arrivals(plan, 5, star(5))
    assert got == {(1, 4): pytest.approx(HOP + 1.5e-3),
                   **{(r, 3): pytest.approx(HOP + 3e-3) for r in (0, 1, 2)}}


def test_flows_on_disjoint_links_do_not_slow_each_other() -> None:
    got = arrivals({0: [(1, MB, 0.0)], 2: [(3, MB, 0.0)]}, 4, star(4))
    assert got == {(0, 1): pytest.approx(HOP + 1e-3), (2, 3): pytest.approx(HOP + 1e-3)}


def test_without_sharing_each_message_costs_its_route_alone() -> None:
    got = arrivals({0: [(2, MB, 0.0)], 1: [(2, MB, 0.0)]}, 3, star(3, sharing=False))
    assert got == {(0, 2): pytest.approx(HOP + 1e-3), (1, 2): pytest.approx(HOP + 1e-3)}


def test_simgrids_lv08_model_charges_its_factors_and_its_acknowledgements() -> None:
    # alone: 13.01 times the latency, 97% of the bandwidth, with or without sharing
    for sharing in (True, False):
        alone = arrivals({0: [(1, MB, 0.0)]}, 2, Platform(2, 1, FAST, Switch(NIC), sharing=sharing, sharing_model=LV08))
        assert alone == {(0, 1): pytest.approx(13.01 * HOP + MB / (0.97 * GB))}
    # a pair sending both ways: each flow's acknowledgements take 5% of the other's links
    both = arrivals({0: [(1, MB, 0.0)], 1: [(0, MB, 0.0)]}, 2, Platform(2, 1, FAST, Switch(NIC), sharing_model=LV08))
    assert both == {(0, 1): pytest.approx(13.01 * HOP + 1.05 * MB / (0.97 * GB)),
                    (1, 0): pytest.approx(13.01 * HOP + 1.05 * MB / (0.97 * GB))}


def test_a_tcp_window_bounds_a_flow_by_its_round_trip_with_or_without_sharing() -> None:
    far = Link(5e-4, 10 * GB)  # 1 ms each way across the switch: a 4 MiB window moves 2.1 GB/s
    for sharing in (True, False):
        got = arrivals({0: [(1, MB, 0.0)]}, 2, Platform(2, 1, FAST, Switch(far), sharing=sharing, sharing_model=CM02))
        assert got == {(0, 1): pytest.approx(1e-3 + MB / (4194304 / 2e-3))}


def test_an_oversubscribed_fat_tree_slows_flows_between_leaves_only() -> None:
    tree = FatTree(hosts_per_leaf=2, spines=1, link=NIC, oversubscription=2)  # 1 GB/s up per leaf
    platform = Platform(4, 1, FAST, tree)
    plan = {0: [(2, MB, 0.0)], 1: [(3, MB, 0.0)]}  # both from leaf 0 to leaf 1
    across = 4e-6  # NIC up, leaf up, spine down, NIC down
    assert arrivals(plan, 4, platform) == {(0, 2): pytest.approx(across + 2e-3),
                                           (1, 3): pytest.approx(across + 2e-3)}
    same_leaf = arrivals({0: [(1, MB, 0.0)], 2: [(3, MB, 0.0)]}, 4, platform)
    assert same_leaf == {(0, 1): pytest.approx(HOP + 1e-3), (2, 3): pytest.approx(HOP + 1e-3)}


# ---- what MPI promises stays true ----

def test_a_smaller_later_message_never_overtakes_on_its_channel() -> None:
    async def main(comm: sc.Comm) -> Any:
        if comm.rank == 0:
            a = comm.isend(np.zeros(60_000, np.uint8), dst=1, tag=1)
            b = comm.isend(b"x", dst=1, tag=2)
            await a
            await b
            return None
        first = await comm.recv(src=0)
        t1 = comm.now
        second = await comm.recv(src=0)
        return len(first), second, t1, comm.now
    result = sc.run(main, 2, latency=star(2))
    first, second, t1, t2 = result[1]
    assert (first, second) == (60_000, b"x")
    assert t2 == t1  # the small one ended sooner but waited for the large one ahead of it


def test_rendezvous_sends_complete_when_their_data_lands() -> None:
    async def main(comm: sc.Comm) -> Any:
        if comm.rank == 0:
            await comm.send(np.zeros(MB, np.uint8), dst=1)  # rendezvous: completes when the data lands
            return comm.now
        await comm.sleep(1e-3)  # the receive is posted late: the data waits for it
        await comm.recv(src=0)
        return comm.now
    result = sc.run(main, 2, latency=star(2))
    # the transfer is charged from the later posting (the receive's), as on every model
    assert result[0] == result[1] == pytest.approx(1e-3 + HOP + 1e-3)


def test_collectives_on_a_switch_take_their_cost_formula() -> None:
    n = 8
    per = MB  # bytes of each rank's vector

    async def main(comm: sc.Comm) -> float:
        await comm.all_reduce(np.ones(per // 8), algorithm="ring")
        return comm.now
    result = sc.run(main, n, latency=star(n), **BIG)
    # a ring: 2(n-1) steps, each sends per/n bytes to the next rank over disjoint links
    assert result.times == [pytest.approx(2 * (n - 1) * (HOP + per / n / GB))] * n


# ---- determinism ----

def test_the_same_times_whatever_the_seed_or_the_schedule() -> None:
    plan = {0: [(3, MB, 0.0)], 1: [(3, MB // 3, 0.0), (4, MB, 0.0)], 2: [(3, 2 * MB, 1e-4)]}
    runs = [arrivals(plan, 5, star(5), seed=seed) for seed in range(4)]
    runs.append(arrivals(plan, 5, star(5), seed=7, schedule="shuffle"))
    assert all(r == runs[0] for r in runs) and len(runs[0]) == 4


# ---- routes ----

def test_routes_through_a_torus_go_dimension_by_dimension_the_short_way() -> None:
    platform = Platform(16, 1, FAST, Torus((4, 4), NIC))
    names = [platform.link_name(i) for i in platform.route(0, 7)]  # (0,0) to (3,1)
    assert names == ["rank 0 (node 0) up", "nic 0 up", "router 0 dim 0 -1", "router 3 dim 1 +1",
                     "nic 7 down", "rank 7 (node 7) down"]


def test_routes_through_a_dragonfly_are_minimal_through_the_global_cable() -> None:
    platform = Platform(18, 1, FAST, Dragonfly(groups=3, routers=3, hosts_per_router=2, link=NIC))
    names = [platform.link_name(i) for i in platform.route(1, 14)]  # group 0 router 0 -> group 2 router 1
    # leaves group 0 from router 2 % 3, enters group 2 at router 0 % 3, then on to router 1
    assert names == ["rank 1 (node 1) up", "nic 1 up", "group 0 router 0-2", "group 0-2",
                     "group 2 router 0-1", "nic 14 down", "rank 14 (node 14) down"]
    same_group = [platform.link_name(i) for i in platform.route(0, 4)]
    assert same_group[2:4] == ["group 0 router 0-2", "nic 4 down"]


def test_routes_through_a_k_ary_fat_tree_climb_only_as_high_as_they_must() -> None:
    platform = Platform(16, 1, FAST, KAryFatTree(4, NIC))  # 4 pods of 2 edges (2 NICs each), 4 cores

    def switches(a: int, b: int) -> list[str]:
        return [platform.link_name(i) for i in platform.route(a, b)][2:-2]
    assert switches(0, 1) == []  # one edge switch
    assert [name.split("-")[0] for name in switches(0, 2)] == ["edge 0", "edge 1"]  # through an aggregation
    across = switches(0, 15)  # another pod: up to a core and down
    assert [name.split()[0] for name in across] == ["edge", "agg", "agg", "edge"]
    assert across[1].split("-")[1].split()[:2] == across[2].split("-")[1].split()[:2]  # one core
    over = Platform(16, 1, FAST, KAryFatTree(4, NIC, oversubscription=2))
    assert over.capacity[over.route(0, 15)[2]] == NIC.bandwidth / 2


def test_a_fat_tree_spreads_pairs_over_its_spines_the_same_way_every_run() -> None:
    platform = Platform(64, 1, FAST, FatTree(hosts_per_leaf=8, spines=4, link=NIC))
    spines = {platform.link_name(platform.route(a, a + 8)[2]).split()[2] for a in range(8)}
    assert len(spines) > 1  # ECMP by a stable hash of the pair
    again = Platform(64, 1, FAST, FatTree(hosts_per_leaf=8, spines=4, link=NIC))
    assert [again.route(a, a + 8) for a in range(8)] == [platform.route(a, a + 8) for a in range(8)]


def test_ranks_of_one_node_talk_through_its_fabric_and_share_their_nic_across_nodes() -> None:
    platform = Platform(2, 4, Link(1e-7, 100 * GB), Switch(NIC), nics_per_node=2)
    assert [platform.link_name(i) for i in platform.route(0, 3)] == ["rank 0 (node 0) up",
                                                                      "rank 3 (node 0) down"]
    assert platform.nic(0) == platform.nic(2) == 0 and platform.nic(1) == 1 and platform.nic(5) == 3
    assert platform.lookahead() == pytest.approx(2e-7)


def test_presets_describe_machines_of_the_right_shape() -> None:
    dgx = dgx_h100(2)
    assert (dgx.nodes, dgx.ranks_per_node, dgx.nics_per_node) == (2, 8, 8)
    assert len(dgx.route(0, 1)) == 2  # NVLink through the NVSwitch
    assert len(dgx.route(0, 8)) == 4  # NIC to NIC through their leaf switch (32 NICs to a leaf)
    assert len(dgx_h100(8).route(0, 32)) == 6  # node 4's NICs hang from the next leaf
    assert ethernet_cluster(4, 16).ranks_per_node == 16 and laptop(8).nodes == 1


# ---- bad input ----

def test_a_world_larger_than_the_platform_is_refused_before_it_runs() -> None:
    async def main(comm: sc.Comm) -> None:
        return None
    with pytest.raises(sc.UsageError, match=r"5 ranks do not fit on 4 \(4 nodes x 1 ranks per node\)"):
        sc.run(main, 5, latency=star(4))


def test_what_sharing_cannot_run_is_refused_with_the_way_out() -> None:
    async def main(comm: sc.Comm) -> None:
        return None
    with pytest.raises(sc.UsageError, match="a link of latency 0.*sharing=False"):  # star's ranks' links
        sc.run(main, 2, latency=star(2), transport="shm", procs=2)


@pytest.mark.parametrize("bad, message", [
    (lambda: Link(-1.0, GB), "latency must be >= 0"),
    (lambda: Link(1e-6, 0), "bandwidth must be > 0"),
    (lambda: Platform(0, 1, FAST, Switch(NIC)), "nodes must be an int >= 1"),
    (lambda: Platform(32, 1, FAST, Torus((4, 4), NIC)), "it joins 16 NICs"),
    (lambda: FatTree(hosts_per_leaf=0, spines=2, link=NIC), "hosts_per_leaf must be an int >= 1"),
    (lambda: SharingModel(crosstraffic=-0.05), r"^SharingModel\(crosstraffic=-0.05\): must be a number >= 0"),
    (lambda: SharingModel(weight_s="big"), r"^SharingModel\(weight_s='big'\): must be a number >= 0 "
     r"\(SimGrid's LV08: 20537\)"),
    (lambda: SharingModel(weighting="tcp"), r"^SharingModel\(weighting='tcp'\): 'equal' \(max-min\) or 'latency'"),
    (lambda: SharingModel(tcp_window=0), r"^SharingModel\(tcp_window=0\): bytes > 0"),
    (lambda: Platform(1, 1, FAST, Switch(NIC), sharing_model={"weighting": "latency"}),
     r"^Platform\(sharing_model=\{'weighting': 'latency'\}\): expected a SharingModel"),
])
def test_bad_platforms_are_refused_naming_the_field(bad: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        bad()


# ---- seeing it ----

def test_a_traced_run_has_a_utilisation_track_per_link_and_trace_show_names_the_busiest(
        tmp_path: Any) -> None:
    path = tmp_path / "t.json"
    plan = {0: [(2, MB, 0.0)], 1: [(2, MB // 2, 0.0)]}
    sc.run(sends(plan), 3, latency=star(3), trace=str(path), eager_limit=2**30)
    doc = sc.trace.load(path)
    down = [(e["ts"], e["args"]["utilisation"]) for e in doc["traceEvents"]
            if e.get("ph") == "C" and e["name"] == "nic 2 down"]
    # full from when both flows join (2 us) until the last ends (2 us + 1.5 ms), then idle
    assert down == [(pytest.approx(2.0), 1.0), (pytest.approx(1502.0), 0.0)]
    up0 = [e["args"]["utilisation"] for e in doc["traceEvents"]
           if e.get("ph") == "C" and e["name"] == "nic 0 up"]
    assert up0 == [0.5, 1.0, 0.0]  # half the receiver's link, then all of it once the other ends
    shown = sc.trace.show(path).splitlines()
    at = shown.index("busiest links of 6 used (busy time in virtual milliseconds, mean utilisation "
                     "while busy):")
    assert shown[at + 1:at + 4] == ["  nic 2 down: busy 1.500, 100.0%", "  nic 0 up: busy 1.500, 66.7%",
                                    "  nic 1 up: busy 1.000, 50.0%"]
    again, other = tmp_path / "again.json", tmp_path / "other.json"
    sc.run(sends(plan), 3, latency=star(3), trace=str(again), eager_limit=2**30)
    assert again.read_bytes() == path.read_bytes()  # the same seed: the same bytes
    sc.run(sends(plan), 3, latency=star(3), trace=str(other), eager_limit=2**30, seed=9)

    def counters(doc: dict[str, Any]) -> list[Any]:
        return [e for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert counters(sc.trace.load(other)) == counters(doc)  # another seed: the same utilisation


# ---- against a plain reference of the same model ----

def fluid(platform: Platform, flows: list[tuple[int, int, int, float]]) -> list[float]:
    """When each flow ends, by a deliberately naive fluid simulation of the model in docs/platforms.md:
    every step recomputes the weighted max-min rates of every flow from scratch."""
    import math

    state = []
    links, model = platform.links, platform.sharing_model
    for src, dst, nbytes, at in flows:
        route = platform.route(src, dst)
        back = platform.route(dst, src)
        latency = sum(links.latency[i] for i in route)  # the links' own, before the factor
        penalty = latency + sum(model.weight_s / links.bandwidth[i] for i in route)
        weight = 1 / penalty if model.weighting == "latency" else 1.0
        bound = model.bandwidth_factor * model.tcp_window / (2 * latency) if model.tcp_window else math.inf
        uses = {link: model.crosstraffic for link in back if model.crosstraffic}
        uses.update({link: 1.0 for link in route})
        state.append({"uses": uses, "join": at + latency * model.latency_factor, "left": float(nbytes),
                      "weight": weight, "bound": bound, "end": None})
    t = 0.0
    while any(f["end"] is None for f in state):
        moving = [f for f in state if f["end"] is None and f["join"] <= t]
        rate: dict[int, float] = {}
        free = {link: platform.capacity[link] for f in moving for link in f["uses"]}
        while len(rate) < len(moving):
            level, pick = math.inf, None
            for link in free:
                weight = sum(f["weight"] * f["uses"].get(link, 0.0) for i, f in enumerate(moving)
                             if i not in rate)
                if weight > 0 and free[link] / weight < level:
                    level, pick = free[link] / weight, link
            for i, f in enumerate(moving):
                if i not in rate and f["bound"] / f["weight"] < level:
                    level, pick = f["bound"] / f["weight"], ("bound", i)
            for i, f in enumerate(moving):
                if i not in rate and (pick == ("bound", i) or pick in f["uses"]):
                    rate[i] = f["weight"] * level
                    for link, part in f["uses"].items():
                        free[link] -= part * rate[i]
        later = [f["join"] for f in state if f["end"] is None and f["join"] > t]
        step = min([*later, *(t + moving[i]["left"] / r for i, r in rate.items())])
        for i, r in rate.items():
            moving[i]["left"] -= r * (step - t)
            if moving[i]["left"] <= 1e-6:
                moving[i]["end"] = step
        t = step
    return [f["end"] for f in state]


WIDE = Link(5e-4, 10 * GB)  # a round trip of 2 ms: a TCP window of 4 MiB moves 2.1 GB/s at most


@pytest.mark.parametrize("model, link", [(MAX_MIN, NIC), (CM02, NIC), (LV08, NIC),
                                         (SharingModel(crosstraffic=0.5), NIC), (LV08, WIDE)],
                         ids=["max-min", "CM02", "LV08", "cross traffic alone", "LV08 window-bound"])
def test_flows_end_when_a_plain_reference_of_the_model_says(model: Any, link: Link) -> None:
    tree = FatTree(hosts_per_leaf=2, spines=2, link=link, oversubscription=2)
    platform = Platform(8, 1, Link(1e-7, 1e11), tree, sharing_model=model)
    flows = [(s, (s + k) % 8, MB // k, 1e-5 * k) for s in range(8) for k in (1, 3, 5)]
    plan: dict[int, list[tuple[int, int, float]]] = {}
    for s, d, nbytes, at in flows:
        plan.setdefault(s, []).append((d, nbytes, at))
    got = arrivals(plan, 8, platform)
    assert [got[(s, d)] for s, d, _, _ in flows] == pytest.approx(fluid(platform, flows), rel=1e-9)


# ---- collectives that know the shape ----

def nodes_of_four(sharing: bool = True) -> Platform:
    """4 nodes of 4 ranks; latency only (bandwidths too large to matter): 0.2 us within a node,
    2.2 us between nodes."""
    return Platform(4, 4, Link(1e-7, 1e18), Switch(Link(1e-6, 1e18)), sharing=sharing)


async def reductions(comm: sc.Comm, algorithm: Any = None) -> Any:
    x = await comm.all_reduce(np.arange(4.0) + comm.rank, algorithm=algorithm)
    mean = await comm.all_reduce(float(comm.rank), op=sc.ReduceOp.AVG, algorithm=algorithm)
    top = await comm.all_reduce(comm.rank * 3 % 7, op=sc.ReduceOp.MAX, algorithm=algorithm)
    joined = await comm.all_reduce([comm.rank], op=UNION, algorithm=algorithm)  # any payload
    return x.tolist(), mean, top, joined


def _union(a: list[int], b: list[int]) -> list[int]:
    return sorted(set(a) | set(b))


UNION = sc.ReduceOp.custom(_union)


def test_on_a_platform_with_nodes_all_reduce_goes_through_one_rank_per_node_by_default() -> None:
    smp = sc.run(reductions, 16, latency=nodes_of_four(), trace=True)
    flat = sc.run(reductions, 16, args=("recursive_doubling",), latency=nodes_of_four(), trace=True)
    assert list(smp) == list(flat)  # the same values on every rank
    assert smp[5] == ([120.0, 136.0, 152.0, 168.0], 7.5, 6, list(range(16)))
    assert smp.trace is not None and flat.trace is not None

    def across(result: sc.RunResult) -> int:
        assert result.trace is not None
        return sum(m.src // 4 != m.dst // 4 for m in result.trace.messages)
    assert across(smp) == 4 * (2 * 4)  # each call: 4 leaders, 2 recursive-doubling steps each way
    assert across(flat) == 4 * (16 * 2)  # each call: 16 ranks, 2 of their 4 steps across nodes
    assert all("(smp)" in m.comm for m in smp.trace.messages)


def test_the_node_aware_all_reduce_takes_its_cost_formula() -> None:
    async def once(comm: sc.Comm) -> float:
        await comm.all_reduce(1.0)
        return comm.now
    result = sc.run(once, 16, latency=nodes_of_four())
    within, between = 2e-7, 2.2e-6  # a step inside a node, and between nodes
    # binomial reduce in the node (2 steps), recursive doubling among 4 leaders (2), broadcast (2)
    assert max(result.times) == pytest.approx(2 * within + 2 * between + 2 * within, rel=1e-6)


def test_the_node_aware_all_reduce_runs_at_message_fidelity_only_where_there_are_nodes() -> None:
    async def once(comm: sc.Comm, algorithm: Any) -> float:
        return await comm.all_reduce(float(comm.rank), algorithm=algorithm)
    with pytest.raises(sc.RankError, match=r"all_reduce\(algorithm='smp'\): it follows the nodes"):
        sc.run(once, 16, args=("smp",), latency=nodes_of_four(sharing=False), fidelity="analytic")
    analytic = sc.run(once, 16, args=(None,), latency=nodes_of_four(sharing=False), fidelity="analytic")
    assert list(analytic) == [120.0] * 16  # the default there: not the node-aware one
    one_per_node = Platform(16, 1, FAST, Switch(NIC))  # no node holds two ranks: plain recursive doubling
    assert list(sc.run(once, 16, args=("smp",), latency=one_per_node)) == [120.0] * 16


# ---- from the command line ----

def test_presets_are_read_from_latency_specs_and_bad_ones_say_how_to_write_them() -> None:
    from simcluster import platform

    assert platform.parse("dgx_h100:2").describe() == "dgx_h100(2)"
    unshared = platform.parse("ethernet_cluster:2,4,unshared")
    assert isinstance(unshared, Platform) and not unshared.sharing and unshared.ranks_per_node == 4
    assert platform.parse("alphabeta:1us,10GB/s") == sc.latency.AlphaBeta(1e-6, 1e-10)
    with pytest.raises(ValueError, match=r"laptop takes up to 1 counts \(CORES\).*write it like 'laptop:8'"):
        platform.parse("laptop:x")
    with pytest.raises(ValueError, match=r"unknown latency model 'nvl72'.*or a platform preset: dgx_h100"):
        platform.parse("nvl72")


def test_simcluster_run_takes_a_preset(tmp_path: Any) -> None:
    import subprocess
    import sys

    script = tmp_path / "prog.py"
    script.write_text("async def main(comm):\n    return await comm.all_reduce(comm.rank)\n")
    done = subprocess.run([sys.executable, "-m", "simcluster", "run", str(script), "-n", "16",
                           "--latency", "dgx_h100:2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "rank 15: 120" in done.stdout


async def broadcasts_and_barriers(comm: sc.Comm, plain: bool = False) -> Any:
    got = []
    for root in (0, 5, 15):  # a node's first rank, and two that are not
        got.append(await comm.broadcast({"from": root} if comm.rank == root else None, src=root,
                                        algorithm="binomial" if plain else None))
    await comm.sleep(1e-6 * comm.rank)  # the last rank arrives last
    await comm.barrier(algorithm="dissemination" if plain else None)
    return got, comm.now


def test_broadcast_and_barrier_also_go_through_one_rank_per_node_on_a_platform_with_nodes() -> None:
    smp = sc.run(broadcasts_and_barriers, 16, latency=nodes_of_four(), trace=True)
    plain = sc.run(broadcasts_and_barriers, 16, args=(True,), latency=nodes_of_four())
    assert [got for got, _ in smp] == [got for got, _ in plain] == [[{"from": 0}, {"from": 5}, {"from": 15}]] * 16
    leave = [now for _, now in smp]
    assert min(leave) >= 15e-6  # nobody leaves the barrier before the last rank entered it
    assert smp.trace is not None
    names = {m.comm.split(":")[1] for m in smp.trace.messages}
    assert names == {"broadcast#1(smp)", "broadcast#2(smp)", "broadcast#3(smp)", "barrier#4(smp)"}
    across = sum(m.src // 4 != m.dst // 4 for m in smp.trace.messages if "broadcast" in m.comm)
    assert across == 3 * 3  # each broadcast: one copy to each of the three other nodes


async def reduces(comm: sc.Comm, plain: bool = False) -> Any:
    algorithm = "binomial" if plain else None
    got = []
    for root in (0, 6, 15):  # a node's first rank, and two that are not
        got.append(await comm.reduce(np.arange(3.0) + comm.rank, dst=root, algorithm=algorithm))
        got.append(await comm.reduce(float(comm.rank), dst=root, op=sc.ReduceOp.AVG, algorithm=algorithm))
    joined = await comm.reduce([comm.rank], dst=6, op=UNION, algorithm=algorithm)
    return [None if g is None else np.asarray(g).tolist() for g in got], joined


def test_reduce_also_goes_through_one_rank_per_node_on_a_platform_with_nodes() -> None:
    smp = sc.run(reduces, 16, latency=nodes_of_four(), trace=True)
    plain = sc.run(reduces, 16, args=(True,), latency=nodes_of_four())
    assert list(smp) == list(plain)
    assert smp[6] == ([None, None, [120.0, 136.0, 152.0], 7.5, None, None], list(range(16)))
    assert smp.trace is not None
    assert {m.comm.split(":")[1].split("#")[0] for m in smp.trace.messages} == {"reduce"}
    assert all("(smp)" in m.comm for m in smp.trace.messages)
    across = sum(m.src // 4 != m.dst // 4 for m in smp.trace.messages)
    assert across == 7 * 3  # each of the 7 calls: one message from each of the other three nodes


@pytest.mark.parametrize("transport, procs", [("shm", 2), ("tcp", 4)])
def test_a_platform_without_sharing_gives_hosting_processes_the_same_run(transport: str, procs: int) -> None:
    """The node-aware collectives name their node communicators alike in every process."""
    for program in (reductions, broadcasts_and_barriers, reduces):
        memory = sc.run(program, 16, latency=nodes_of_four(sharing=False))
        hosted = sc.run(program, 16, latency=nodes_of_four(sharing=False), transport=transport, procs=procs)
        assert list(hosted) == list(memory) and hosted.times == memory.times
