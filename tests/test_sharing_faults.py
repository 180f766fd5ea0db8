"""Fault plans on a platform whose links flows share: slow, cut, delay and slow links shape the flows.

The times below are worked out by hand from the platform's links, as in
``test_platforms``: a flow waits its route's latency, then moves its bytes
at its max-min fair share. A slow rank's flows keep their share of each link
but move their bytes ``factor`` times slower while its window is open, so a
transfer under way when the window opens moves the bytes before at the old
rate and the rest at the new; a delay adds to the route's latency; a message
posted inside a cut starts when the cut ends; a slow link has its capacity
divided by its factor, so the flows beside a slowed one take what it leaves. Analytic fidelity takes the
cost formula, and hosting processes (shm, tcp) give the memory transport's
times.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.platform import FatTree, Link, Platform, Switch
from test_platforms import sends  # the plan runner both files use

GB = 1e9
MB = 10**6
NIC = Link(1e-6, 1 * GB)  # 1 us, 1 GB/s each way
FAST = Link(0.0, 1e12)  # the ranks' own links: never the bottleneck
HOP = 2e-6  # across the switch: the sender's NIC up, the receiver's down


def star(nodes: int, sharing: bool = True) -> Platform:
    """One rank per node, every node on one switch."""
    return Platform(nodes, 1, FAST, Switch(NIC), sharing=sharing)


def arrivals(plan: dict[int, list[tuple[int, int, float]]], world_size: int, faults: str,
             platform: Platform | None = None) -> dict[tuple[int, int], float]:
    """When each message of ``plan`` reached its receiver under ``faults``: {(src, dst): time}."""
    result = sc.run(sends(plan), world_size, latency=platform or star(world_size), trace=True,
                    eager_limit=2**30, faults=faults)
    assert result.trace is not None
    return {(m.src, m.dst): m.recv for m in result.trace.messages}


# ---- slow ----

def test_a_slow_window_that_opens_mid_transfer_moves_the_rest_of_the_bytes_at_the_slower_rate() -> None:
    got = arrivals({0: [(1, MB, 0.0)]}, 2, "slow:0x2@0.5ms..")
    moved = GB * (0.5e-3 - HOP)  # at 1 GB/s from the end of the latency to 0.5 ms
    assert got[(0, 1)] == pytest.approx(0.5e-3 + (MB - moved) * 2 / GB, rel=1e-12)  # 1.504 ms


def test_a_slow_window_on_the_receiver_that_closes_mid_transfer_gives_the_old_rate_back() -> None:
    got = arrivals({0: [(1, MB, 0.0)]}, 2, "slow:1x4@0.5ms..0.7ms")
    before = GB * (0.5e-3 - HOP)
    during = GB / 4 * 0.2e-3
    assert got[(0, 1)] == pytest.approx(0.7e-3 + (MB - before - during) / GB, rel=1e-12)  # 1.152 ms


def test_a_slow_ranks_flow_keeps_its_share_and_the_flow_beside_it_is_not_sped_up() -> None:
    # both into rank 2: 0.5 GB/s each; rank 0's moves 0.25 GB/s of bytes while slow
    got = arrivals({0: [(2, MB, 0.0)], 1: [(2, MB, 0.0)]}, 3, "slow:0x2")
    assert got[(1, 2)] == pytest.approx(HOP + MB / (GB / 2), rel=1e-12)
    # then alone: the whole link, its bytes at half of it
    left = MB - (GB / 4) * (MB / (GB / 2))
    assert got[(0, 2)] == pytest.approx(got[(1, 2)] + left / (GB / 2), rel=1e-12)


def test_a_slow_rank_also_computes_slower_on_a_platform() -> None:
    async def main(comm: sc.Comm) -> float:
        await comm.sleep(1e-3)
        return comm.now
    assert sc.run(main, 2, latency=star(2), faults="slow:1x3").times == [1e-3, pytest.approx(3e-3)]


# ---- slow links ----

def test_a_slow_link_window_divides_its_capacity_while_it_is_open() -> None:
    got = arrivals({0: [(1, MB, 0.0)]}, 2, "slowlink:nic 0 up x2@0.5ms..")
    moved = GB * (0.5e-3 - HOP)
    assert got[(0, 1)] == pytest.approx(0.5e-3 + (MB - moved) * 2 / GB, rel=1e-12)  # 1.504 ms
    got = arrivals({0: [(1, MB, 0.0)]}, 2, "slowlink:nic 1 down x4@0.5ms..0.7ms")
    assert got[(0, 1)] == pytest.approx(0.7e-3 + (MB - moved - GB / 4 * 0.2e-3) / GB, rel=1e-12)


def test_the_flow_beside_a_slow_link_takes_what_it_leaves() -> None:
    # both into rank 2 (its NIC down shared); rank 0's NIC up carries a quarter: 0.25 GB/s for
    # its flow, and max-min gives rank 1's the other 0.75 GB/s (a slow rank would not)
    got = arrivals({0: [(2, MB, 0.0)], 1: [(2, MB, 0.0)]}, 3, "slowlink:nic 0 up x4")
    assert got[(1, 2)] == pytest.approx(HOP + MB / (0.75 * GB), rel=1e-12)
    assert got[(0, 2)] == pytest.approx(HOP + MB / (0.25 * GB), rel=1e-12)  # its own link's rate throughout


def test_a_slow_link_pattern_names_every_link_it_matches_and_windows_multiply() -> None:
    plan = {0: [(1, MB, 0.0)], 2: [(3, MB, 0.0)]}
    got = arrivals(plan, 4, "slowlink:nic * up x2;slowlink:nic 0 up x3@0..1ms")
    assert got[(2, 3)] == pytest.approx(HOP + 2 * MB / GB, rel=1e-12)
    moved = GB / 6 * (1e-3 - HOP)  # at a sixth until 1 ms, then at half
    assert got[(0, 1)] == pytest.approx(1e-3 + (MB - moved) * 2 / GB, rel=1e-12)


def test_a_slow_link_reads_back_from_its_text_and_names_what_is_wrong() -> None:
    plan = sc.faults.parse("slowlink:leaf 0-spine * x4@1ms..2ms")
    assert plan.faults == (sc.faults.SlowLink("leaf 0-spine *", 4, 1e-3, 2e-3),)
    assert sc.faults.parse(plan.describe()) == plan
    with pytest.raises(ValueError, match=r"names no link of .*'rank 0 \(node 0\) up', .*'nic 0 up'"):
        sc.run(sends({}), 2, latency=star(2), faults="slowlink:spine 9 x2")
    with pytest.raises(ValueError, match="has no links flows share; run on a Platform with sharing=True"):
        sc.run(sends({}), 2, latency=star(2, sharing=False), faults="slowlink:nic 0 up x2")
    with pytest.raises(ValueError, match="factor must be a positive number"):
        sc.faults.SlowLink("nic 0 up", 0)


# ---- delay and cut ----

def test_a_delay_adds_to_the_routes_latency() -> None:
    got = arrivals({0: [(1, MB, 0.0)], 2: [(3, MB, 0.0)]}, 4, "delay:0|1+1ms")
    assert got[(0, 1)] == pytest.approx(HOP + 1e-3 + MB / GB, rel=1e-12)
    assert got[(2, 3)] == pytest.approx(HOP + MB / GB, rel=1e-12)  # not between the sets


def test_a_delayed_flow_joins_later_and_shares_only_from_then_on() -> None:
    # into rank 2: rank 1's flow is alone for 0.5 ms, then they share the link
    got = arrivals({0: [(2, MB, 0.0)], 1: [(2, MB, 0.0)]}, 3, "delay:0|2+0.5ms")
    alone = GB * 0.5e-3
    shared_until = HOP + 0.5e-3 + (MB - alone) / (GB / 2)  # rank 1's flow ends
    assert got[(1, 2)] == pytest.approx(shared_until, rel=1e-12)
    assert got[(0, 2)] == pytest.approx(shared_until + (MB - (MB - alone)) / GB, rel=1e-12)


def test_a_message_posted_in_a_cut_starts_its_flow_when_the_cut_ends() -> None:
    got = arrivals({0: [(1, MB, 0.0)], 1: [(0, MB, 2e-3)], 2: [(3, MB, 0.0)]}, 4, "cut:0|1@0..1ms")
    assert got[(0, 1)] == pytest.approx(1e-3 + HOP + MB / GB, rel=1e-12)
    assert got[(1, 0)] == pytest.approx(2e-3 + HOP + MB / GB, rel=1e-12)  # posted after the cut
    assert got[(2, 3)] == pytest.approx(HOP + MB / GB, rel=1e-12)


def test_rendezvous_transfers_in_a_cut_wait_for_its_end_too() -> None:
    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send(np.zeros(MB, np.uint8), dst=1)
        else:
            await comm.recv(src=0)
        return comm.now
    # a request to send crosses at once (the route's latency); the data waits for the cut
    result = sc.run(main, 2, latency=star(2), faults="cut:0|1@0..1ms", eager_limit=0)
    assert result.times == [pytest.approx(1e-3 + HOP + MB / GB, rel=1e-12)] * 2


# ---- analytic fidelity ----

def test_analytic_fidelity_on_a_platform_with_sharing_takes_the_cost_formula() -> None:
    n, per = 8, MB

    async def main(comm: sc.Comm) -> float:
        await comm.all_reduce(np.ones(per // 8), algorithm="ring")
        return comm.now
    result = sc.run(main, n, latency=star(n), fidelity="analytic")
    assert result.times == [pytest.approx(2 * (n - 1) * (HOP + per / n / GB), rel=1e-12)] * n
    assert result.times == sc.run(main, n, latency=star(n, sharing=False), fidelity="analytic").times


# ---- hosting processes ----

def tree() -> Platform:
    """4 nodes of 2 ranks on a 2:1 fat tree, every link with a latency (a lookahead)."""
    return Platform(4, 2, Link(1e-7, 1e10), FatTree(hosts_per_leaf=4, spines=1, link=Link(1e-6, 1e9),
                                                    oversubscription=2), nics_per_node=2)


async def traffic(comm: sc.Comm) -> Any:
    """Two shifted rings of rendezvous and eager messages, then an all_reduce and a barrier."""
    requests = [comm.isend(np.ones(100_000 + 10 * comm.rank, np.uint8), dst=(comm.rank + k) % comm.size)
                for k in (1, 3)]
    sizes = [len(await comm.recv(src=(comm.rank - k) % comm.size)) for k in (1, 3)]
    for req in requests:
        await req
    total = float((await comm.all_reduce(np.arange(20_000.0) * (comm.rank + 1), algorithm="ring")).sum())
    await comm.barrier()
    return sizes, total, comm.now


async def resilient(comm: sc.Comm) -> Any:
    """Rounds of all_reduce; on a failure: revoke, acknowledge, shrink, go on."""
    seen: list[Any] = []
    for _ in range(3):
        try:
            seen.append(await comm.all_reduce(np.full(30_000, comm.rank + 1.0), algorithm="ring"))
            seen[-1] = float(seen[-1].sum())
        except sc.ProcessFailedError as exc:
            seen.append(("failed", exc.failed))
            comm.revoke()
            comm.ack_failed()
            comm = await comm.shrink()
        await comm.sleep(1e-4)
    return seen, comm.size, comm.now


PLANS = {"slow, cut and delay": (traffic, "slow:1x3@20us..200us;slow:6x2;delay:0|5+3us;cut:2|3,6@0..15us"),
         "slow links": (traffic, "slowlink:leaf 0-spine 0 * x3@10us..150us;slowlink:nic 5 down x2"),
         "a crash": (resilient, "crash:3@150us;slow:0x2@0..100us")}


def _run(name: str, **hosted: Any) -> Any:
    program, plan = PLANS[name]
    result = sc.run(program, 8, latency=tree(), faults=plan, **hosted)
    return json.loads(json.dumps({"values": list(result), "times": result.times, "crashed": result.crashed}))


@pytest.mark.parametrize("name", list(PLANS))
def test_a_fault_plan_on_shm_and_tcp_gives_the_memory_transports_times(name: str) -> None:
    expected = _run(name)
    program, _ = PLANS[name]
    assert sc.run(program, 8, latency=tree()).times != expected["times"]  # the plan did shape the run
    assert _run(name, transport="shm", procs=2) == expected
    assert _run(name, transport="tcp", procs=3) == expected  # the nodes split unevenly
