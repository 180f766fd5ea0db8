"""``simcluster bench p2p``: point-to-point speed of the engine on the memory transport.

Two figures, each next to a baseline measured in the same run:

* small-message round trip (a ping-pong of Python ints between two ranks)
  against a bare asyncio ping-pong between two tasks through asyncio.Queue;
  the same ping-pong from synchronous ranks (plain functions on greenlets,
  blocking on the same ``Comm`` calls) against the async ranks, and through
  ``simcluster.MPI``'s pickling ``send``/``recv`` as an mpi4py script makes it;
* bandwidth of a 64 MiB float64 array sent into the receiver's buffer
  (``recv(buf)``, the one copy a rendezvous makes) against numpy's own copy
  bandwidth (``np.copyto`` between the same two arrays).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from .. import _build, runner
from ..engine import sync as _sync
from ..comm import Comm
from ..comm import current_comm
from . import BUILDS, in_build, median_time, table

ROUND_TRIPS = 20_000
BIG = 64 << 20


async def _pingpong(comm: Comm, n: int) -> None:
    if comm.rank == 0:
        for i in range(n):
            await comm.send(i, dst=1)
            await comm.recv(src=1)
    else:
        for _ in range(n):
            x = await comm.recv(src=0)
            await comm.send(x, dst=0)


def _sync_pingpong(_mpi_world: object, n: int) -> None:
    """``_pingpong`` from a synchronous rank: the same calls, blocking instead of awaited."""
    comm, block = current_comm(), _sync.block
    assert comm is not None
    if comm.rank == 0:
        for i in range(n):
            block(comm.send(i, dst=1))
            block(comm.recv(src=1))
    else:
        for _ in range(n):
            x = block(comm.recv(src=0))
            block(comm.send(x, dst=0))


def _mpi_pingpong(comm: Any, n: int) -> None:
    """The ping-pong as an mpi4py script writes it (pickled objects)."""
    if comm.rank == 0:
        for i in range(n):
            comm.send(i, dest=1)
            comm.recv(source=1)
    else:
        for _ in range(n):
            comm.send(comm.recv(source=0), dest=0)


async def _bare_pingpong(n: int) -> None:
    there: asyncio.Queue[int] = asyncio.Queue()
    back: asyncio.Queue[int] = asyncio.Queue()

    async def ping() -> None:
        for i in range(n):
            await there.put(i)
            await back.get()

    async def pong() -> None:
        for _ in range(n):
            await back.put(await there.get())

    await asyncio.gather(ping(), pong())


SENDS_PER_RUN = 8


async def _big_send(comm: Comm, arr: np.ndarray, buf: np.ndarray) -> None:
    for _ in range(SENDS_PER_RUN):
        if comm.rank == 0:
            await comm.send(arr, dst=1)
        else:
            await comm.recv(buf, src=0)


def measure(round_trips: int = ROUND_TRIPS, repeats: int = 5) -> dict[str, float]:
    """Return the p2p figures: seconds per round trip, bandwidths and their ratios."""
    sim = median_time(lambda: runner.run(_pingpong, 2, args=(round_trips,), checks="off"), repeats)
    sync = median_time(lambda: runner.run(_sync_pingpong, 2, args=(round_trips,), checks="off"),
                       repeats)
    mpi = median_time(lambda: runner.run(_mpi_pingpong, 2, args=(round_trips,), checks="off"),
                      repeats)
    bare = median_time(lambda: asyncio.run(_bare_pingpong(round_trips)), repeats)
    arr = np.ones(BIG // 8)
    out = np.empty_like(arr)
    copy = median_time(lambda: np.copyto(out, arr), repeats)
    send = median_time(lambda: runner.run(_big_send, 2, args=(arr, out), checks="off"),
                       repeats) / SENDS_PER_RUN
    return {
        "rtt_sim": sim / round_trips, "rtt_bare": bare / round_trips,
        "rtt_ratio": sim / bare, "msgs_per_s": 2 * round_trips / sim,
        "rtt_sync": sync / round_trips, "sync_ratio": sync / sim,
        "rtt_mpi": mpi / round_trips, "mpi_ratio": mpi / sim,
        "bw_send": BIG / send, "bw_copy": BIG / copy, "bw_ratio": copy / send,
    }


def main(round_trips: int = ROUND_TRIPS, repeats: int = 5) -> dict[str, float]:
    """Measure and print the p2p table, for the compiled and the interpreted build side by side.

    The active build is measured here; the interpreted one, when the compiled
    build is active, in a child process with ``SIMCLUSTER_PURE_PYTHON=1``.
    Returns the active build's figures.
    """
    figures = {build: measure(round_trips, repeats) if i == 0
               else in_build(build, __name__, "measure", round_trips, repeats)
               for i, build in enumerate(BUILDS)}
    rows = []
    for build, m in figures.items():
        rows += [
            [build, "round trip, small message", f"{m['rtt_sim'] * 1e6:.2f} us",
             f"{m['rtt_bare'] * 1e6:.2f} us", f"{m['rtt_ratio']:.2f}x", "asyncio.Queue ping-pong, 2 tasks"],
            [build, "messages per second", f"{m['msgs_per_s']:,.0f}", "", "", ""],
            [build, "round trip, synchronous ranks", f"{m['rtt_sync'] * 1e6:.2f} us",
             f"{m['rtt_sim'] * 1e6:.2f} us", f"{m['sync_ratio']:.2f}x", "async ranks, same calls"],
            [build, "round trip, MPI send/recv", f"{m['rtt_mpi'] * 1e6:.2f} us",
             f"{m['rtt_sim'] * 1e6:.2f} us", f"{m['mpi_ratio']:.2f}x", "async ranks (pickled objects)"],
            [build, "64 MiB array send", f"{m['bw_send'] / 1e9:.2f} GB/s", f"{m['bw_copy'] / 1e9:.2f} GB/s",
             f"{m['bw_copy'] and m['bw_send'] / m['bw_copy']:.2f} of", "np.copyto of 64 MiB"],
        ]
    if len(figures) == 2:
        c, i = figures["compiled"], figures["interpreted"]
        rows.append(["both", "round trip, small message", f"{c['rtt_sim'] * 1e6:.2f} us",
                     f"{i['rtt_sim'] * 1e6:.2f} us", f"{c['rtt_sim'] / i['rtt_sim']:.2f}x",
                     "compiled against interpreted"])
    print(f"simcluster bench p2p (memory transport, medians of {repeats} runs, "
          f"{round_trips} round trips; {_build.describe()})")
    print(table(rows, ["build", "what", "simcluster", "baseline", "ratio", "baseline is"]))
    return figures[BUILDS[0]]


QUICK = {'round_trips': 2000, 'repeats': 3}
