"""The names of mpi4py's ``MPI`` that ``simcluster.MPI`` does not provide, and why.

Every class, function and constant of mpi4py 4.1.2's ``MPI`` is simulated;
what is left are mpi4py's private helpers and what needs its compiled C
library. Asking ``simcluster.MPI`` for one of these raises ``AttributeError``
naming the reason; names mpi4py does not have at all say so.
"""

from __future__ import annotations

NOT_PROVIDED: dict[str, str] = {
    "Get_address": "memory addresses of buffers are not simulated",
    "_commctx_inter": "an internal helper of mpi4py.util, which is not provided",
    "_commctx_intra": "an internal helper of mpi4py.util, which is not provided",
    "_datatype_create": "an internal helper of mpi4py.util.dtlib, which is not provided",
    "_datatype_decode": "an internal helper of mpi4py.util.dtlib, which is not provided",
    "_typedict": "an internal table of mpi4py.util.dtlib, which is not provided",
    "_typedict_c": "an internal table of mpi4py.util.dtlib, which is not provided",
    "_typedict_f": "an internal table of mpi4py.util.dtlib, which is not provided",
    "_keyval_registry": "mpi4py's internal table of keyvals (simcluster keeps its own)",
    "_set_abort_status": "mpi4py's internal exit-status hook (Comm.Abort ends the run here)",
}
"""Module-level names of mpi4py 4.1.2's ``MPI`` that ``simcluster.MPI`` does not have, and why.

``tests/test_mpi_names.py`` checks this list against the real mpi4py: every name it
has is either provided or listed here.
"""
