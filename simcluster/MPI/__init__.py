"""mpi4py's ``MPI`` module on simcluster's virtual ranks.

Code written for ``from mpi4py import MPI`` runs unchanged here: inside a
synchronous rank (a plain function passed to ``sc.run``, or a script run by
``simcluster mpirun``), ``MPI.COMM_WORLD`` is the calling rank's communicator
and every blocking call suspends only that rank, so virtual time, latency
models, determinism by seed, deadlock reports with the script's lines, strict
checks and traces are the engine's.

The module follows mpi4py 4's API and MPI's semantics (MPICH's constant
values): communicators and groups, point-to-point and collectives for Python
objects (lowercase, pickled) and for buffers (uppercase, with mpi4py's buffer
specifications), datatypes, requests, statuses, operations and the
environment. mpi4py's names for one-sided windows, MPI-IO, spawning,
intercommunicators and topologies exist and raise ``NotImplementedError``
naming the feature when used.
"""

from __future__ import annotations

from typing import Any

from . import _constants, _datatypes, _unsimulated
from ._buffers import BOTTOM, BUFFER_AUTOMATIC, IN_PLACE
from ._comm import COMM_NULL, COMM_SELF, COMM_WORLD, Comm, Intracomm
from ._datatypes import Datatype
from ._env import (
    Aint_add, Aint_diff, Alloc_mem, Attach_buffer, Compute_dims, Detach_buffer, Finalize,
    Flush_buffer, Free_mem, Get_library_version, Get_processor_name, Get_version, Iflush_buffer,
    Init, Init_thread, Is_finalized, Is_initialized, Is_thread_main, Pcontrol, Query_thread, Wtick,
    Wtime, get_vendor, rc,
)
from ._errors import Exception, Get_error_class, Get_error_string
from ._group import GROUP_EMPTY, GROUP_NULL, Group
from ._info import (
    ERRHANDLER_NULL, ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, INFO_ENV, INFO_NULL,
    Errhandler, Info,
)
from ._message import MESSAGE_NO_PROC, MESSAGE_NULL, Message
from ._ops import (
    BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM,
    Op,
)
from ._pickle import Pickle, pickle
from ._requests import REQUEST_NULL, Grequest, Prequest, Request
from ._status import Status

_CONSTANTS = {name: value for name, value in vars(_constants).items()
              if name.isupper() and isinstance(value, int)}
_DATATYPES = {name: value for name, value in vars(_datatypes).items()
              if isinstance(value, Datatype) and not name.startswith("_")}
_UNSIMULATED = _unsimulated.names()
globals().update(_CONSTANTS)
globals().update(_DATATYPES)
globals().update(_UNSIMULATED)
globals()["2INT"] = _DATATYPES["TWOINT"]  # mpi4py's getattr(MPI, "2INT")

for _name, _feature in _unsimulated.COMM_METHODS.items():
    setattr(Comm, _name, _unsimulated.method(_name, _feature))

__all__ = sorted([
    "BOTTOM", "BUFFER_AUTOMATIC", "IN_PLACE", "COMM_NULL", "COMM_SELF", "COMM_WORLD", "Comm",
    "Intracomm", "Datatype", "Aint_add", "Aint_diff", "Alloc_mem", "Attach_buffer",
    "Compute_dims", "Detach_buffer", "Finalize", "Flush_buffer", "Free_mem",
    "Get_library_version", "Get_processor_name", "Get_version", "Iflush_buffer", "Init",
    "Init_thread", "Is_finalized", "Is_initialized", "Is_thread_main", "Pcontrol",
    "Query_thread", "Wtick", "Wtime", "get_vendor", "rc", "Exception", "Get_error_class",
    "Get_error_string", "GROUP_EMPTY", "GROUP_NULL", "Group", "ERRHANDLER_NULL", "ERRORS_ABORT",
    "ERRORS_ARE_FATAL", "ERRORS_RETURN", "INFO_ENV", "INFO_NULL", "Errhandler", "Info",
    "MESSAGE_NO_PROC", "MESSAGE_NULL", "Message", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR",
    "MAX", "MAXLOC", "MIN", "MINLOC", "NO_OP", "OP_NULL", "PROD", "REPLACE", "SUM", "Op",
    "Pickle", "pickle", "REQUEST_NULL", "Grequest", "Prequest", "Request", "Status",
    *_CONSTANTS, *_DATATYPES, *_UNSIMULATED, "2INT",
])


def __dir__() -> list[str]:
    return __all__


def __getattr__(name: str) -> Any:
    raise AttributeError(f"module 'simcluster.MPI' has no attribute {name!r} "
                         "(mpi4py's MPI has no such name either)")


del _name, _feature, annotations
