"""The shortcuts of link sharing change no time: every message's times, every link's utilisation
and every rank's end are the same, bit for bit, as a plain progressive filling of every flow over
every link at every change gives (``engine.flows``: ``Flows(plain=True)``).

The shortcuts: a share covers only the flows connected to what changed; a link one flow alone
crosses stays out of the filling; a flow with only such links takes its rate directly; an
instant's joins and ends are batches, and a channel is a chain of its flows.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.engine import flows
from simcluster.platform import CM02, LV08, FatTree, Link, Platform, Switch, Torus

from test_platforms import sends  # the plan runner both files use

GB = 1e9
NIC = Link(1e-6, 1 * GB)


def random_plan(world_size: int, count: int, seed: int) -> dict[int, list[tuple[int, int, float]]]:
    """``count`` messages of mixed sizes (none to 4 MB) between random pairs, posted at a few instants."""
    rng = random.Random(seed)
    plan: dict[int, list[tuple[int, int, float]]] = {}
    for _ in range(count):
        src = rng.randrange(world_size)
        dst = rng.randrange(world_size - 1)
        dst += dst >= src
        nbytes = rng.choice([0, 1, 100, 10_000, 300_000, 4_000_000, 1_333_333])
        plan.setdefault(src, []).append((dst, nbytes, rng.choice([0.0, 0.0, 1e-6, 3e-5, 1e-4, 2e-3])))
    for todo in plan.values():
        todo.sort(key=lambda item: item[2])
    return plan


async def collectives(comm: sc.Comm) -> float:
    x = np.arange(1 << 14, dtype=np.float64) + comm.rank
    await comm.all_reduce(x)
    await comm.all_reduce(x, algorithm="ring")
    await comm.all_to_all([x[:1000]] * comm.size)
    await comm.barrier()
    return comm.now


PLATFORMS = {
    "max-min": lambda: Platform(8, 1, Link(1e-7, 1e11), FatTree(2, 2, NIC, oversubscription=2)),
    "CM02 (bounds)": lambda: Platform(8, 1, Link(1e-7, 1e11), FatTree(2, 2, Link(5e-4, 10 * GB)), sharing_model=CM02),
    "LV08 (cross traffic)": lambda: Platform(8, 1, Link(1e-7, 1e11), FatTree(2, 2, NIC, oversubscription=2),
                                             sharing_model=LV08),
    "nodes on a switch": lambda: Platform(4, 4, Link(2e-7, 5e10), Switch(NIC)),
    "torus": lambda: Platform(12, 2, Link(2e-7, 5e10), Torus((2, 3, 2), NIC)),
}


def fingerprint(program: Any, world_size: int, platform: Platform, **keywords: Any) -> Any:
    result = sc.run(program, world_size, latency=platform, trace=True, **keywords)
    assert result.trace is not None
    messages = sorted((m.src, m.dst, m.id, m.nbytes, m.sent, m.recv) for m in result.trace.messages)
    counters = [(c.name, c.time, c.value) for c in result.trace.counters]
    return list(result), messages, counters


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """While on, every run shares its links the plain way; counts the runs that did."""
    made: list[int] = []
    shortcut = flows.Flows

    def make(*args: Any, **keywords: Any) -> Any:
        made.append(1)
        return shortcut(*args, **keywords, plain=True)
    monkeypatch.setattr(flows, "Flows", make)
    return made


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_every_time_is_the_plain_fillings_to_the_bit(name: str, plain: list[int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    make = PLATFORMS[name]
    world_size = make().nodes * make().ranks_per_node
    runs = [(sends(random_plan(world_size, 6 * world_size, seed)), {"eager_limit": limit})
            for seed, limit in ((1, 2**30), (2, 2**16), (3, 0))]
    runs.append((collectives, {}))
    expected = []
    for program, keywords in runs:
        expected.append(fingerprint(program, world_size, make(), **keywords))
    if not plain:
        pytest.skip("this build's delivery binds Flows when compiled: the plain way cannot be put in")
    monkeypatch.undo()
    for (program, keywords), plain_run in zip(runs, expected):
        got = fingerprint(program, world_size, make(), **keywords)
        assert got == plain_run
        assert got[1] and all(m[5] is not None for m in got[1])
