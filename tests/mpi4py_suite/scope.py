"""Which of mpi4py's test modules run, which are held to MPICH's level, and why cases fail.

Every ``test_*.py`` module of the suite folder runs (``modules``): nothing is
dropped. ``UNRUNNABLE`` names modules that cannot run at all under a launcher,
each with its reason; they are not started, and every case MPICH passes in
them counts as a failure. ``tests/test_mpi4py_suite.py`` holds every module to
95% of MPICH's passes, but those of ``BELOW_BAR``, each to its own floor.
``TIMEOUTS``: wall seconds for one module at
one world size where the default does not fit. ``RULES``: why a case MPICH
passes fails here, by the feature it needs (``reason``); ``harness.py
--write-known`` uses them for cases ``known_failures.txt`` does not list yet.
"""

from __future__ import annotations

import re
from pathlib import Path

# None today: every module of mpi4py 4.1.2's suite starts under mpiexec and under
# simcluster mpirun (test_mpiapi reads the MPI library's symbols with nm, test_package
# the installed package's files, test_spawn starts processes; all of them run and fail
# case by case where simcluster lacks what they need).
UNRUNNABLE: dict[str, str] = {}

BELOW_BAR: dict[str, tuple[float, str]] = {
    # module: (the share of MPICH's passes it keeps, over N = 1..3, rounded down; why it is lower)
    "test_mpiapi": (0.0, "reads the symbols of mpi4py's compiled MPI extension with nm"),
    "test_cffi": (0.0, "reads handles as C-level MPI handles through cffi"),
    "test_ctypes": (0.0, "reads handles as C-level MPI handles through ctypes"),
    "test_package": (0.88, "looks for mpi4py's C header and .pxd files"),
    "test_toplevel": (0.85, "asks mpi4py.get_include() for the C header's folder"),
    "test_objmodel": (0.88, "needs mpi4py's Cython C API, and a buffer exporter Python 3.11 "
                            "cannot write"),
}
"""Modules below the bar of 95% of MPICH's passes, each held to its own floor (which only
rises): what is missing needs mpi4py's compiled C library or C API. Every other module is
held to 95%."""

# No module waits for a timeout today: MPICH finishes every one (test_spawn included) and
# simcluster fails fast where it lacks a feature. These two take minutes under both at
# N = 3 (MPICH: 68 and 4 s; simcluster: about 240 and 180 s on a busy 2-core machine).
DEFAULT_TIMEOUT = 300.0
TIMEOUTS: dict[str, float] = {"test_util_dtlib": 600.0, "test_msgspec": 600.0}

# The modules that take longest, longest first: the harness starts them first, so that
# two workers finish close together.
SLOWEST: list[str] = ["test_util_dtlib", "test_msgspec", "test_io", "test_cco_ngh_buf",
                      "test_cco_pr_ngh_buf", "test_cco_pr_vec", "test_rma_nb", "test_rma"]

# (module, case) regexes -> the missing feature; the first rule that matches gives the reason.
# A module regex of "" matches every module; case regexes are searched in "Class.method".
RULES: list[tuple[str, str, str]] = [
    # what needs mpi4py's compiled C library or its C API, which a Python MPI cannot have
    (r"^test_package$", r"Cython|Headers", "mpi4py's C API files (the mpi4py.h header, the .pxd "
     "declarations) are not shipped: simcluster.MPI is Python, with no C API to declare"),
    (r"^test_toplevel$", r"GetInclude", "mpi4py.get_include(): there is no C API or mpi4py.h"),
    (r"^test_(mpiapi|mpiabi)$", "", "there is no compiled MPI library: its symbols and ABI "
     "(Get_abi_version, Get_abi_info) cannot be read"),
    (r"^test_(cffi|ctypes)$", "", "handles are not C-level MPI handles that cffi/ctypes can read"),
    (r"^test_objmodel$", r"CAPI", "needs mpi4py's Cython C API (the case skips itself without "
     "it): simcluster.MPI is Python"),
]


def modules(suite_dir: str | Path) -> list[str]:
    """Every test module of the suite folder, sorted by name."""
    return sorted(p.stem for p in Path(suite_dir).glob("test_*.py"))


def timeout(module: str) -> float:
    """Wall seconds one run of ``module`` at one world size may take."""
    return TIMEOUTS.get(module, DEFAULT_TIMEOUT)


def reason(module: str, case: str) -> str | None:
    """The missing feature that explains why ``case`` of ``module`` fails here, or None."""
    for module_re, case_re, why in RULES:
        if re.search(module_re, module) and re.search(case_re, case):
            return why
    return None
