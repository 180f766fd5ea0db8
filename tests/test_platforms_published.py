"""The table of published measurements in docs/platforms.md: its simulated column is what simcluster computes.

Each row's simulated figure is worked out here the way the table says, and
must be the number the table prints, so the table cannot drift from the
code. Bandwidths come from the slope between two message sizes (8 and 16
MiB), which leaves the latency out, as the published figures at large sizes
do.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.platform import Link, Platform, Switch, dgx_h100

DOC = Path(__file__).resolve().parent.parent / "docs" / "platforms.md"
SIZES = (8 * 2**20, 16 * 2**20)


def ring_bus_bandwidth(platform: Platform, n: int) -> float:
    """nccl-tests' bus bandwidth of a ring all_reduce, GB/s: ``2 (n-1)/n`` times the bytes over the time."""
    times = []
    for size in SIZES:
        async def main(comm: sc.Comm, size: int = size) -> None:
            await comm.all_reduce(np.ones(size // 4, np.float32), algorithm="ring")
        times.append(sc.run(main, n, latency=platform).elapsed)
    return 2 * (n - 1) / n * (SIZES[1] - SIZES[0]) / (times[1] - times[0]) / 1e9


def ping_pong_bandwidth(platform: Platform) -> float:
    """NetPIPE's one-way bandwidth of a ping-pong, Gb/s."""
    times = []
    for size in SIZES:
        async def main(comm: sc.Comm, size: int = size) -> None:
            if comm.rank == 0:
                await comm.send(np.zeros(size, np.uint8), dst=1)
                await comm.recv(src=1)
            else:
                await comm.send(await comm.recv(src=0), dst=0)
        times.append(sc.run(main, 2, latency=platform).elapsed / 2)
    return 8 * (SIZES[1] - SIZES[0]) / (times[1] - times[0]) / 1e9


def osu_bw(platform: Platform, size: int = 4 * 2**20, window: int = 64) -> float:
    """OSU's osu_bw, Gb/s: a window of ``window`` nonblocking sends of ``size`` bytes, a 4-byte
    reply once all have arrived, the window's bytes over the time."""
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            sends = [comm.isend(np.zeros(size, np.uint8), dst=1) for _ in range(window)]
            for req in sends:
                await req
            await comm.recv(src=1)
        else:
            receives = [comm.irecv(src=0) for _ in range(window)]
            for req in receives:
                await req
            await comm.send(np.zeros(4, np.uint8), dst=0)
    return 8 * size * window / sc.run(main, 2, latency=platform).elapsed / 1e9


ROWS: dict[str, Any] = {
    "8 GPUs of one DGX H100, ring all_reduce bus bandwidth": lambda: ring_bus_bandwidth(dgx_h100(1), 8),
    "16 GPUs of two DGX H100, ring all_reduce, per NIC": lambda: ring_bus_bandwidth(dgx_h100(2), 16),
    "two hosts, 40 Gb/s Ethernet back to back, ping-pong bandwidth":
        lambda: ping_pong_bandwidth(Platform(2, 1, Link(0.0, 1e12), Switch(Link(1e-6, 5e9)))),
    "two hosts, HDR InfiniBand (200 Gb/s), osu_bw at 4 MiB":
        lambda: osu_bw(Platform(2, 1, Link(0.0, 1e12), Switch(Link(1e-6, 25e9)))),
}


def _table() -> dict[str, list[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Against published measurements\n", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in ROWS:
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("row", list(ROWS))
def test_the_simulated_column_is_what_simcluster_computes(row: str) -> None:
    cells = _table()[row]
    simulated = float(re.match(r"[\d.]+", cells[2]).group())  # type: ignore[union-attr]
    assert ROWS[row]() == pytest.approx(simulated, rel=1e-3)
    published = [float(x) for x in re.findall(r"[\d.]+", cells[1].split("(")[0])]
    middle = sum(published) / len(published)
    assert cells[3] == f"{100 * (simulated - middle) / middle:+.1f}%"
