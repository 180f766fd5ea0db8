"""What the synchronous (``simcluster.MPI``) conformance tests share: sizes, dtypes, run keywords."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI


def _suite_world_sizes() -> list[int]:
    """The suite's WORLD_SIZES (tests/conftest.py), loaded by path: another conftest may own the name."""
    path = Path(__file__).resolve().parent.parent / "conftest.py"
    spec = importlib.util.spec_from_file_location("_simcluster_tests_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.WORLD_SIZES)


WORLD_SIZES = _suite_world_sizes()
"""1, powers of two and not (tests/conftest.py)."""

ALPHA = 2.0**-20
BETA = 2.0**-30
"""AlphaBeta numbers that are powers of two, so expected times compare exactly."""

DTYPES: dict[str, tuple[Any, Any]] = {
    "int32": (np.dtype(np.int32), MPI.INT),
    "float64": (np.dtype(np.float64), MPI.DOUBLE),
    "complex128": (np.dtype(np.complex128), MPI.C_DOUBLE_COMPLEX),
    "bool": (np.dtype(np.bool_), MPI.C_BOOL),
}
"""numpy dtype and the MPI datatype mpi4py pairs with it."""


def values(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` distinct-looking values of dtype ``kind`` that depend on ``seed`` (a rank, a root)."""
    i = np.arange(n)
    if kind == "bool":
        return (i + seed) % 3 == 0
    if kind == "complex128":
        return ((i + 1) * (seed + 1) + 1j * (i - seed)).astype(np.complex128)
    if kind == "float64":
        return (i * 0.5 + seed * 10.0).astype(np.float64)
    return (i * 3 + seed * 100 - 7).astype(np.int32)


def sentinel(kind: str) -> Any:
    """A value no test sends: what receive buffers start filled with."""
    return {"bool": True, "complex128": -99 - 99j, "float64": -99.0, "int32": -99}[kind]


def kw(transport: str, **more: Any) -> dict[str, Any]:
    """``sc.run`` keywords for the lowercase (pickled) methods: tcp carries pickles only when asked."""
    return {"transport": transport, **({"serializer": "pickle"} if transport == "tcp" else {}), **more}


def rank_error(fn: Any, world_size: int, **keywords: Any) -> sc.RankError:
    """Run ``fn`` and return the RankError the run raises."""
    with pytest.raises(sc.RankError) as info:
        sc.run(fn, world_size, **keywords)
    return info.value


def marked(module_file: str, marker: str) -> int:
    """Return the number of the line of ``module_file`` that ends with ``# <- marker``.

    Ranks may run in other processes (shm, tcp), so they cannot hand a line
    number back through a list the test holds; the test finds it itself.
    """
    for number, line in enumerate(Path(module_file).read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# <- {marker}"):
            return number
    raise AssertionError(f"no line marked {marker!r}")


def mpi_errors(calls: list[Any]) -> list[tuple[int, str, bool]]:
    """Call each; return (error class, message, is a ValueError) of the MPI.Exception each raises."""
    got = []
    for call in calls:
        try:
            call()
        except MPI.Exception as exc:
            got.append((exc.Get_error_class(), str(exc), isinstance(exc, ValueError)))
    return got
