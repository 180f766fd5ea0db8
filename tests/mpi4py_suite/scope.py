"""Which of mpi4py's test modules and cases simcluster's MPI is held to.

``MODULES``: the modules in scope. ``OUT_OF_SCOPE``: cases inside them that
exercise features simcluster does not simulate (one-sided windows, MPI-IO,
spawning, sessions, intercommunicators), matched on the case's class or method
name, each with its reason. Those cases are counted nowhere.
"""

from __future__ import annotations

import re

MODULES = [
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

OUT_OF_SCOPE: list[tuple[str, str]] = [
    (r"Win|RMA|Rma", "one-sided windows are not simulated"),
    (r"File|IO\b", "MPI-IO is not simulated"),
    (r"Inter", "intercommunicators are not simulated"),
    (r"Session", "MPI sessions are not simulated"),
    (r"Spawn|Port|Dynproc", "spawning and ports are not simulated"),
    (r"^Test(MPI|PKL5)World\.testBigMPI$", "test_util_pkl5's testBigMPI calls Create_intercomm: "
     "intercommunicators are not simulated"),
    (r"^Test(Counter|Mutex\w*|Condition\w*|Semaphore)(Self|World)\.",
     "test_util_sync runs these only where MPI.Win.Allocate works (one-sided windows, not "
     "simulated); simcluster's own tests cover mpi4py.util.sync's classes"),
]


def out_of_scope(case: str) -> str | None:
    """The reason ``case`` (``Class.method``) is out of scope, or None when it is in scope."""
    for pattern, reason in OUT_OF_SCOPE:
        if re.search(pattern, case):
            return reason
    return None
