"""The ``MPI`` module of mpi4py on simcluster's virtual ranks.

Code written for ``from mpi4py import MPI`` runs unchanged here: inside a
synchronous rank (a plain function passed to ``sc.run``, or a script run by
``simcluster mpirun``), ``MPI.COMM_WORLD`` is the calling rank's communicator
and every blocking call suspends only that rank, so virtual time, latency
models, determinism by seed, deadlock reports with the script's lines, strict
checks and traces are the engine's.

The module follows mpi4py 4's API and MPI's semantics (MPICH's constant
values): communicators and groups, point-to-point and collectives for Python
objects (lowercase, pickled) and for buffers (uppercase, with mpi4py's buffer
specifications), process topologies and neighbourhood collectives, datatypes,
requests, statuses, operations and the environment. One-sided windows
(``Win``) are ``_win``'s and MPI-IO (``File``) is ``_file``'s (memory
transport); intercommunicators are ``_intercomm``'s; dynamic processes
(``Spawn``, ports, ``Join``) are ``_spawn``'s (under ``simcluster mpirun``).
"""

from __future__ import annotations

import sys as _sys
from typing import Any

from ..engine import sync as _sync
from . import _constants, _datatypes, _docs, _handles, _unsimulated
from ._buffers import BOTTOM, BUFFER_AUTOMATIC, IN_PLACE, BottomType, BufferAutomaticType, InPlaceType
from ._comm import COMM_NULL, COMM_SELF, COMM_WORLD, Comm, Intracomm
from ._intercomm import Create_intercomm as _create_intercomm
from ._intercomm import Intercomm
from ._datatypes import Datatype
from ._env import (
    Aint_add, Aint_diff, Attach_buffer, Compute_dims, Detach_buffer, Finalize,
    Get_abi_fortran_info, Get_abi_info, Get_abi_version,
    Flush_buffer, Get_library_version, Get_processor_name, Get_version, Iflush_buffer,
    Init, Init_thread, Is_finalized, Is_initialized, Is_thread_main, Pcontrol, Query_thread, Wtick,
    Wtime, get_vendor, rc,
)
from ._file import FILE_NULL, File
from ._fileview import Register_datarep
from ._errhandler import ERRHANDLER_NULL, ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler
from ._errors import (
    Add_error_class, Add_error_code, Add_error_string, Exception, Get_error_class,
    Get_error_string, Remove_error_class, Remove_error_code, Remove_error_string,
)
from ._group import GROUP_EMPTY, GROUP_NULL, Group
from ._info import INFO_ENV, INFO_NULL, Get_hw_resource_info, Info
from ._memory import Alloc_mem, Free_mem, buffer, memory
from ._message import MESSAGE_NO_PROC, MESSAGE_NULL, Message
from ._ops import (
    BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM,
    Op,
)
from . import _packing
from ._packing import Get_address
from ._pickle import Pickle, pickle
from ._grequest import Grequest
from ._requests import REQUEST_NULL, Prequest, Request
from ._session import SESSION_NULL, Session
from . import _spawn
from ._spawn import Close_port, Lookup_name, Open_port, Publish_name, Unpublish_name
from ._win import WIN_NULL, Win
from ._status import Status
from ._topo import INTRACOMM_METHODS as _TOPOLOGY_METHODS
from ._topo import Cartcomm, Distgraphcomm, Graphcomm, Topocomm
from ._typeinfo import _typealign, _typecode  # mpi4py's private helpers, for util.dtlib
from ._comm import _comm_lock, _comm_lock_table  # mpi4py's private helpers, for util.pkl5

_CONSTANTS = {name: value for name, value in vars(_constants).items()
              if name.isupper() and isinstance(value, int)}
_DATATYPES = {name: value for name, value in vars(_datatypes).items()
              if isinstance(value, Datatype) and not name.startswith("_")}
globals().update(_CONSTANTS)
globals().update(_DATATYPES)
globals()["2INT"] = _DATATYPES["TWOINT"]  # mpi4py's getattr(MPI, "2INT")
_sizeof, _addressof, _handleof = _handles.sizeof, _handles.addressof, _handles.handleof


class _Module(type(_sys)):  # type: ignore[misc]
    """The module type of ``simcluster.MPI`` alone, as mpi4py's ``MPI`` is an extension module.

    Tools that walk mpi4py's ``MPI`` by type (its ``test_doc``) then stop at
    the submodules a package holds (``_comm``, ``util``, ...), which mpi4py's
    single module does not have.
    """


_sys.modules[__name__].__class__ = _Module
del _Module

_handles.install({"Comm": Comm, "Group": Group, "Datatype": Datatype, "Op": Op,
                  "Errhandler": Errhandler, "Info": Info, "Request": Request, "Message": Message,
                  "Session": Session, "Win": Win},
                 globals())

Intracomm.Create_intercomm = _create_intercomm  # type: ignore[attr-defined]
for _name in ("Spawn", "Spawn_multiple", "Accept", "Connect"):  # defined beside the ports
    setattr(Intracomm, _name, getattr(_spawn, _name))
Comm.Join = classmethod(_spawn.Join)  # type: ignore[attr-defined]
Comm.Get_parent = classmethod(_spawn.Get_parent)  # type: ignore[attr-defined]
for _name, _method in _packing.METHODS.items():  # Pack, Unpack, ...: defined beside packing
    setattr(Datatype, _name, _method)
for _name, _method in _TOPOLOGY_METHODS.items():  # Create_cart, ...: defined beside Cartcomm
    setattr(Intracomm, _name, _method)


def _entry_points() -> list[Any]:
    """What a user calls: this module, and every class of it with the classes they inherit here.

    Not the exceptions and the ``buffer``/``memory`` arrays (they inherit from
    outside: their methods are Python's and numpy's).
    """
    own = __name__ + "."
    classes = {klass for value in globals().values() if isinstance(value, type)
               for klass in value.__mro__ if klass.__module__.startswith(own)}
    pure = [klass for klass in classes
            if all(base is object or base.__module__.startswith(own) for base in klass.__mro__)]
    return [_sys.modules[__name__], *sorted(pure, key=lambda klass: klass.__qualname__)]


# mpi4py's docstring form: the signature line first (the exceptions and buffers too)
_docs.sign(globals(), [*_entry_points()[1:], Exception, buffer])

# measured compute (compute="cpu", mpirun's default): every MPI call stops the rank's clock
# on entry and starts it on return, so only the user's code between calls is charged
_sync.measured_calls(*_entry_points())

__all__ = sorted([
    "BOTTOM", "BUFFER_AUTOMATIC", "IN_PLACE", "COMM_NULL", "COMM_SELF", "COMM_WORLD", "Comm",
    "Intracomm", "Intercomm", "Topocomm", "Cartcomm", "Graphcomm", "Distgraphcomm", "Datatype", "Aint_add", "Aint_diff", "Alloc_mem", "Attach_buffer",
    "Compute_dims", "Detach_buffer", "Finalize", "Flush_buffer", "Free_mem",
    "Get_library_version", "Get_processor_name", "Get_version", "Iflush_buffer", "Init",
    "Init_thread", "Is_finalized", "Is_initialized", "Is_thread_main", "Pcontrol",
    "Query_thread", "Wtick", "Wtime", "get_vendor", "rc", "Exception", "Get_error_class",
    "Get_error_string", "Add_error_class", "Add_error_code", "Add_error_string",
    "Remove_error_class", "Remove_error_code", "Remove_error_string", "Get_hw_resource_info",
    "GROUP_EMPTY", "GROUP_NULL", "Group", "ERRHANDLER_NULL", "ERRORS_ABORT",
    "ERRORS_ARE_FATAL", "ERRORS_RETURN", "INFO_ENV", "INFO_NULL", "Errhandler", "Info",
    "MESSAGE_NO_PROC", "MESSAGE_NULL", "Message", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR",
    "MAX", "MAXLOC", "MIN", "MINLOC", "NO_OP", "OP_NULL", "PROD", "REPLACE", "SUM", "Op",
    "Get_address", "Open_port", "Close_port", "Publish_name", "Unpublish_name", "Lookup_name", "buffer", "memory", "File", "FILE_NULL", "Register_datarep", "SESSION_NULL", "Session", "BottomType", "BufferAutomaticType", "InPlaceType",
    "Get_abi_fortran_info", "Get_abi_info", "Get_abi_version", "WIN_NULL", "Win", "Pickle", "pickle", "REQUEST_NULL", "Grequest", "Prequest", "Request", "Status",
    *_CONSTANTS, *_DATATYPES, "2INT",
])


def __dir__() -> list[str]:
    return __all__


def __getattr__(name: str) -> Any:
    reason = _unsimulated.NOT_PROVIDED.get(name)
    if reason is not None:
        raise AttributeError(f"module 'simcluster.MPI' has no attribute {name!r}: mpi4py 4.1.2 "
                             f"has MPI.{name}, which simcluster does not provide ({reason})")
    raise AttributeError(f"module 'simcluster.MPI' has no attribute {name!r} "
                         "(mpi4py's MPI has no such name either)")


del _name, _method, _entry_points, annotations
