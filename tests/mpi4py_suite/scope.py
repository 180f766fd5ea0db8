"""Which of mpi4py's test modules run, which are held to MPICH's level, and why cases fail.

Every ``test_*.py`` module of the suite folder runs (``modules``): nothing is
dropped. ``UNRUNNABLE`` names modules that cannot run at all under a launcher,
each with its reason; they are not started, and every case MPICH passes in
them counts as a failure. ``HELD``: the modules that were in scope before issue
41 (point-to-point, collectives, requests, communicators, datatypes, errors,
``mpi4py.util``'s pkl5/dtlib/sync, the top level); ``tests/test_mpi4py_suite.py``
holds each of them to 95% of MPICH. ``TIMEOUTS``: wall seconds for one module at
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

HELD = [
    # point-to-point
    "test_p2p_buf", "test_p2p_buf_matched", "test_p2p_obj", "test_p2p_obj_matched",
    "test_p2p_buf_part",
    # collectives: blocking, nonblocking, vector, neighbourhood, persistent
    "test_cco_buf", "test_cco_obj", "test_cco_vec", "test_cco_nb_buf", "test_cco_nb_vec",
    "test_cco_ngh_buf", "test_cco_ngh_obj", "test_cco_pr_buf", "test_cco_pr_vec",
    "test_cco_pr_ngh_buf",
    # requests, statuses, communicators, topologies, groups, ops, datatypes
    "test_request", "test_grequest", "test_status", "test_comm", "test_comm_topo", "test_group",
    "test_op", "test_datatype", "test_pack", "test_msgspec", "test_msgzero",
    # errors, info, attributes, environment, object model
    "test_exceptions", "test_errhandler", "test_errorcode", "test_info", "test_attributes",
    "test_environ", "test_objmodel", "test_subclass", "test_pickle", "test_buffer",
    "test_address", "test_handle",
    # fault tolerance (ULFM) on healthy communicators
    "test_ulfm",
    # mpi4py.util and the top level
    "test_util_pkl5", "test_util_dtlib", "test_util_sync", "test_toplevel",
]

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
    # whole modules of a missing feature first, so that their words do not catch others' cases
    (r"^test_(win|rma|rma_nb)$", "", "needs one-sided communication (MPI.Win) "
     "(issue 41: not complete yet)"),
    (r"^test_(io|file)$", "", "needs MPI-IO (MPI.File) (issue 41: not complete yet)"),
    (r"^test_util_pool$", "", "mpi4py.util.pool needs mpi4py.futures and dynamic processes "
     "(Comm.Spawn) (issue 41: not complete yet)"),
    (r"^test_spawn$", "", "needs dynamic processes (Comm.Spawn, Get_parent) "
     "(issue 41: not complete yet)"),
    (r"^test_dynproc$", "", "needs ports and name publishing (Open_port, Accept, Connect) "
     "(issue 41: not complete yet)"),
    (r"_inter$", "", "needs intercommunicators (Create_intercomm, Intercomm) "
     "(issue 41: not complete yet)"),
    (r"^test_session$", "", "needs MPI sessions (MPI.Session) (issue 41: not complete yet)"),
    (r"^test_package$", r"Futures|Run|Bench", "the package's mpi4py.futures, mpi4py.run and "
     "mpi4py.bench (issue 41: not provided yet)"),
    (r"^test_package$", "", "the package's own files and attributes (mpi4py.rc, __path__, data "
     "files, headers, the MPI ABI loader) are not yet those of mpi4py (issue 41)"),
    (r"^test_(toplevel|threads)$", "", "package-level mpi4py.rc, mpi4py.run and thread levels "
     "(Init_thread, Query_thread) are not yet those of mpi4py (issue 41)"),
    (r"^test_(mpiapi|mpiabi)$", "", "there is no compiled MPI library: its symbols and ABI "
     "(Get_abi_version, Get_abi_info) cannot be read"),
    (r"^test_(cffi|ctypes)$", "", "handles are not C-level MPI handles that cffi/ctypes can read"),
    (r"^test_doc$", "", "docstrings of simcluster.MPI's names are not mpi4py's"),
    # cases of a missing feature inside other modules, by class or method name
    (r"^test_util_sync$", r"^Test(Counter|Mutex\w*|Condition\w*|Semaphore)",
     "mpi4py.util.sync's Counter/Mutex/Condition/Semaphore need one-sided windows "
     "(MPI.Win.Allocate) (issue 41: not complete yet)"),
    (r"^test_util_pkl5$", r"\.testBigMPI$", "pkl5's testBigMPI builds an intercommunicator "
     "(Create_intercomm) (issue 41: not complete yet)"),
    (r"", r"Win|RMA|Rma", "needs one-sided communication (MPI.Win) (issue 41: not complete yet)"),
    (r"", r"^Test\w*File\b|\.test\w*File\b|IO\b",
     "needs MPI-IO (MPI.File) (issue 41: not complete yet)"),
    (r"", r"Spawn|GetParent",
     "needs dynamic processes (Comm.Spawn, Get_parent) (issue 41: not complete yet)"),
    (r"", r"Port|Dynproc|DPM",
     "needs ports (Open_port, Accept, Connect) (issue 41: not complete yet)"),
    (r"", r"Inter",
     "needs intercommunicators (Create_intercomm, Intercomm) (issue 41: not complete yet)"),
    (r"", r"Session", "needs MPI sessions (MPI.Session) (issue 41: not complete yet)"),
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
