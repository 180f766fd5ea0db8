"""Benchmarks behind ``simcluster bench ...``: each prints medians next to a baseline
measured in the same run, so the ratios mean something on any machine."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from time import perf_counter  # bound now: a rank's time.* reads virtual time
from collections.abc import Callable
from typing import Any

from .. import _build

BUILDS: tuple[str, ...] = ("compiled", "interpreted") if _build.active.compiled else ("interpreted",)
"""The builds a benchmark measures: the active one first, and the interpreted one beside it."""


def build_env(build: str) -> dict[str, str]:
    """The environment of a child process that runs ``build`` (``SIMCLUSTER_PURE_PYTHON``)."""
    env = {k: v for k, v in os.environ.items() if k != "SIMCLUSTER_PURE_PYTHON"}
    if build == "interpreted":
        env["SIMCLUSTER_PURE_PYTHON"] = "1"
    return env


def in_build(build: str, module: str, function: str, *args: Any) -> Any:
    """Return ``module.function(*args)`` computed in a child process running ``build``.

    The result travels as JSON on the child's last line of output.
    """
    code = (f"import json, sys; from {module} import {function} as f; "
            "print(json.dumps(f(*json.loads(sys.argv[1]))))")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True,
                          text=True, env=build_env(build), check=False)
    if proc.returncode:
        raise RuntimeError(f"the {build} build's measurement failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_time(fn: Callable[[], object], repeats: int = 5) -> float:
    """Return the median wall seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = perf_counter()
        fn()
        times.append(perf_counter() - start)
    return statistics.median(times)


def table(rows: list[list[str]], header: list[str]) -> str:
    """Format rows as a plain aligned text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)
