"""Collectives, built only from point-to-point on a private context.

One module per family (``all_reduce``, ``broadcast``, ...). Each holds one
async function per algorithm, ``ALGORITHMS`` (name -> ``Algorithm`` record:
the function, its analytic cost and results; see ``_registry``) and
``default(size, nbytes, commutative)`` that picks an algorithm the way MPICH
does: by message size and world size. Every algorithm receives a
``CollContext`` (``c.rank``, ``c.size``, ``c.isend``, ``c.irecv``,
``c.sendrecv``, ``c.sleep``, ``c.latency``) and never sees tags, matching or
the engine.

Rule 1: an algorithm returns the collective's value and never writes into the
caller's arrays; ``_methods`` does the in-place copy where torch does one.
Rule 2: every algorithm is correct for any world size (not only powers of
two), any root, empty arrays and one rank.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._registry import Algorithm

FAMILIES: tuple[str, ...] = (
    "barrier", "broadcast", "scatter", "gather", "reduce", "all_reduce", "all_gather",
    "reduce_scatter", "all_to_all", "scan", "exscan",
)
"""Collective names that take ``algorithm=`` and appear in ``run(algorithms=...)``."""

_MODULES = {"exscan": "scan"}  # exscan's algorithms live beside scan's
_TABLES = {"exscan": "EXSCAN_ALGORITHMS"}


@functools.cache
def family(name: str) -> ModuleType:
    """Return the module that implements collective ``name``."""
    return importlib.import_module(f"{__name__}.{_MODULES.get(name, name)}")


@functools.cache
def declared(name: str) -> Mapping[str, Algorithm]:
    """Return ``{algorithm name: Algorithm}``: the records collective ``name`` declares."""
    table: Mapping[str, Algorithm] = getattr(family(name), _TABLES.get(name, "ALGORITHMS"))
    return table


@functools.cache
def algorithms(name: str) -> Mapping[str, Callable[..., Any]]:
    """Return ``{algorithm name: function}`` for collective ``name``."""
    return MappingProxyType({algorithm: record.run for algorithm, record in declared(name).items()})


def check_algorithm(name: str, algorithm: str) -> None:
    """Raise ValueError listing the valid names when ``algorithm`` is unknown for ``name``."""
    valid = algorithms(name)
    if algorithm not in valid:
        raise ValueError(f"{name}(algorithm={algorithm!r}): unknown algorithm; valid: "
                         f"{', '.join(sorted(valid))}")


def check_algorithms(table: Mapping[str, str]) -> dict[str, str]:
    """Validate ``run(algorithms=...)``; return a plain dict copy."""
    for name, algorithm in table.items():
        if name not in FAMILIES:
            raise ValueError(f"run(algorithms={{{name!r}: ...}}): unknown collective; valid: "
                             f"{', '.join(sorted(FAMILIES))}")
        check_algorithm(name, algorithm)
    return dict(table)
