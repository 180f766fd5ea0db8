"""Run a batch of programs and print everything a user could compare, as JSON.

``tests/test_build.py`` runs this script once in the compiled build and once
with ``SIMCLUSTER_PURE_PYTHON=1``, and compares the two outputs: results,
virtual times, stats, traces, leaks and error reports must be identical.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "transports"))

import tp_programs  # noqa: E402

import simcluster as sc  # noqa: E402
from simcluster import _build  # noqa: E402

L = sc.latency
MODELS = {
    "zero": "zero",
    "alphabeta": L.AlphaBeta(1e-6, 1e-9),
    "loggp": L.LogGP(1e-6, 2e-7, 3e-7, 1e-9),
    "jitter": L.Jitter(L.AlphaBeta(1e-6, 1e-9), rel=0.3),
}


async def any_source(comm: sc.Comm) -> object:
    """An order left open: which sender arrives first depends on the seeded schedule."""
    if comm.rank == 0:
        return [await comm.recv() for _ in range(comm.size - 1)]
    await comm.send(comm.rank, dst=0)
    return None


async def head_to_head(comm: sc.Comm) -> object:
    """A deadlock: both ranks receive first."""
    return await comm.recv(src=1 - comm.rank)


async def raises(comm: sc.Comm) -> object:
    if comm.rank == 1:
        raise ValueError("rank 1 gives up")
    return await comm.recv(src=1)


async def truncates(comm: sc.Comm) -> object:
    if comm.rank == 0:
        await comm.send(np.ones(8), dst=1)
        return None
    return await comm.recv(np.empty(4), src=0)


async def unawaited(comm: sc.Comm) -> object:
    if comm.rank == 0:
        comm.send(1, dst=1)  # never awaited
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ["array", str(value.dtype), value.tolist()]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def _outcome(fn: Any, world_size: int, **keywords: Any) -> dict[str, Any]:
    try:
        result = sc.run(fn, world_size, **keywords)
    except sc.SimclusterError as e:
        return {"error": type(e).__name__, "message": str(e)}
    return {
        "values": _plain(list(result)),
        "times": result.times,
        "stats": [list(result.stats.messages_sent), list(result.stats.bytes_sent),
                  list(result.stats.messages_received), list(result.stats.bytes_received)],
        "trace": result.trace.to_chrome() if result.trace is not None else None,
        "leaks": result.leaks,
    }


def main() -> None:
    out: dict[str, Any] = {"compiled": _build.active.compiled}
    for program in tp_programs.PROGRAMS:
        for name, model in MODELS.items():
            for size in (1, 5):
                for seed in (0, 7):
                    key = f"{program.__name__}/{name}/{size}/{seed}"
                    out[key] = _outcome(program, size, latency=model, seed=seed, trace=seed == 0)
    for seed in range(4):
        out[f"any_source/{seed}"] = _outcome(any_source, 5, seed=seed)
        out[f"any_source/shuffle/{seed}"] = _outcome(any_source, 5, seed=seed, schedule="shuffle")
    for fn in (head_to_head, raises, truncates, unawaited):
        out[fn.__name__] = _outcome(fn, 2, latency=MODELS["alphabeta"])
    out["explore"] = repr(sc.testing.explore(any_source, 4, schedule="exhaustive"))
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
