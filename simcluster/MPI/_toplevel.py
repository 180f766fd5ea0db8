"""The ``mpi4py`` package's own functions under ``simcluster mpirun``: ``get_config``, ``get_include``,
``profile`` (``rc`` is ``simcluster.MPI.rc``).

simcluster's MPI is Python on simulated ranks: there is no compiled MPI
library, no C API and no PMPI layer. So ``get_config()`` is empty (as
mpi4py's is when it was built without a config file), ``get_include()``
says there is no C API, and ``profile(name, path=...)`` finds and loads the
library as mpi4py does (``ValueError`` when it is not found, ``UserWarning``
when it cannot be loaded) but no simulated MPI call goes through it.

Rule 1: these never touch the simulation; they only answer what mpi4py's would.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Iterable
from typing import Any


def get_config() -> dict[str, str]:
    """Return mpi4py's build configuration: empty, as there is no build (mpi4py returns {} too
    when it has no ``mpi.cfg``)."""
    return {}


def get_include() -> str:
    """Not provided: simcluster's MPI has no C API to compile extensions against."""
    raise NotImplementedError("mpi4py.get_include(): simcluster's MPI is pure Python on simulated "
                              "ranks and has no C API (no mpi4py.h); build C extensions against "
                              "the real mpi4py")


def _candidates(name: str, path: Iterable[Any]) -> list[str]:
    names = [name] if os.sep in name or name.startswith("lib") and ".so" in name else [
        f"lib{name}.so", f"lib{name}.dylib", name]
    dirs = [os.fsdecode(p) for p in path]
    return [os.path.join(d, n) for d in dirs for n in names]


def profile(name: str = "MPE", *, path: str | os.PathLike[str] | Iterable[Any] | None = None,
            logfile: str | None = None) -> None:
    """Find and load the profiling library ``name`` as mpi4py does (simulated calls bypass it).

    Raises:
        ValueError: no file for ``name`` in ``path`` (``/lib``, ``/usr/lib``, ... by default).
    """
    if path is None:
        dirs: list[Any] = ["/usr/lib", "/lib", "/usr/local/lib"]
    elif isinstance(path, (str, bytes, os.PathLike)):
        dirs = [path]
    else:
        dirs = list(path)
    found = next((c for c in _candidates(name, dirs) if os.path.isfile(c)), None)
    if found is None:
        raise ValueError(f"mpi4py.profile({name!r}): cannot find the library in "
                         f"{[os.fsdecode(d) for d in dirs]}; pass path=[the directory that holds it]")
    try:
        ctypes.CDLL(found, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    except OSError as exc:
        warnings.warn(f"mpi4py.profile({name!r}): {found} cannot be loaded: {exc}", UserWarning,
                      stacklevel=2)
