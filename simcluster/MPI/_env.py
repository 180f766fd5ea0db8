"""The environment: ``Init``/``Finalize``, ``Wtime``, versions, processor names, ``Attach_buffer``.

Ranks are initialised before their function runs, so ``Init`` and
``Init_thread`` only record the call, and ``Finalize`` waits for the rank's
buffered sends to leave. ``Wtime`` is the rank's *virtual* time: it moves only
with messages and sleeps (``time.sleep`` inside a rank is virtual), unless the
run charges wall time to ranks with ``compute="wall"``. ``Get_processor_name``
names the rank's simulated node (``node0``, ``node1``, ...: where the engine
places it, a platform's nodes or ``latency.Hierarchical``'s ``ranks_per_node``;
one node otherwise), the name ``socket.gethostname()`` gives the rank under
``simcluster mpirun`` (``simcluster._identity``), as an MPI library gives the host's.

``rc`` is ``mpi4py.rc`` (``_rc``): ``initialize``, ``threads``/``thread_level``
and ``errors`` set ``Is_initialized``, ``Query_thread`` and the default error
handler as they do in mpi4py; an unknown option is a ``TypeError``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .. import _identity
from ..engine import sync as _sync
from .._version import __version__ as _version
from ..request import wait_all
from . import _interop
from ._blocking import block
from ._buffers import BUFFER_AUTOMATIC
from ._constants import ERR_BUFFER, SUBVERSION, THREAD_MULTIPLE, THREAD_SINGLE, VERSION
from ._errors import error
from ._info import Info
from ._rc import LEVELS as _LEVELS
from ._rc import rc as rc
from ._rc import rc_option
from ._requests import Request, immediate
from ._state import current, node_of


def Init() -> None:
    """Initialise MPI (ranks already are: this records the call, at ``THREAD_SINGLE``)."""
    state = current()
    state.initialized = True
    if state.thread_level is None:
        state.thread_level = THREAD_SINGLE


def Init_thread(required: int = THREAD_MULTIPLE) -> int:
    """Initialise with a thread level; return the level provided (the one asked for, as MPICH)."""
    state = current()
    state.initialized = True
    state.thread_level = int(required)
    return state.thread_level


def Finalize() -> None:
    """Finish MPI on this rank: wait for buffered sends still in flight."""
    Flush_buffer()
    current().finalized = True


def Is_initialized() -> bool:
    """Return True inside a rank, unless ``mpi4py.rc.initialize`` was False and ``Init`` not called."""
    state = current()
    return bool(rc_option("initialize")) if state.initialized is None else state.initialized


def Is_finalized() -> bool:
    """Return whether this rank called ``Finalize``."""
    return current().finalized


def Query_thread() -> int:
    """Return the thread level: ``Init_thread``'s, else ``mpi4py.rc``'s (``THREAD_MULTIPLE`` by default,
    ``THREAD_SINGLE`` with ``rc.threads = False``), as mpi4py initialises MPI at import."""
    level = current().thread_level
    if level is None:
        level = _LEVELS[rc_option("thread_level")] if rc_option("threads") else THREAD_SINGLE
    return level


def Is_thread_main() -> bool:
    """Return whether the caller is a rank's own stack (not a thread it started)."""
    return _sync.current() is not None or threading.current_thread() is threading.main_thread()


def Get_version() -> tuple[int, int]:
    """Return the MPI standard version this facade follows: (4, 1)."""
    return (VERSION, SUBVERSION)


def Get_library_version() -> str:
    """Return a description of the library: simcluster's simulated MPI."""
    return (f"simcluster {_version}: mpi4py's API on simulated ranks (virtual time, discrete-event "
            "engine); MPI 4.1 semantics")


def Get_abi_version() -> tuple[int, int]:
    """Return the MPI ABI version: ``(-1, -1)``, as MPICH built with its own ABI answers (MPI-5)."""
    return (-1, -1)


def Get_abi_info() -> Info:
    """Return the ABI's sizes as MPICH on x86-64 gives them: ``mpi_aint_size`` and friends, 8."""
    return Info.Create({"mpi_aint_size": "8", "mpi_count_size": "8", "mpi_offset_size": "8"})


_FORTRAN_SIZES = {"mpi_logical_size": "4", "mpi_integer_size": "4", "mpi_real_size": "4",
                  "mpi_double_precision_size": "8"}
_FORTRAN_KINDS = ("logical1", "logical2", "logical4", "logical8", "logical16", "integer1",
                  "integer2", "integer4", "integer8", "integer16", "real2", "real4", "real8",
                  "real16", "complex4", "complex8", "complex16", "complex32", "double_complex")


def Get_abi_fortran_info() -> Info:
    """Return the Fortran ABI's sizes and supported kinds, MPICH's keys and values (MPI-5)."""
    return Info.Create({**_FORTRAN_SIZES,
                        **{f"mpi_{kind}_supported": "true" for kind in _FORTRAN_KINDS}})


def get_vendor() -> tuple[str, tuple[int, int, int]]:
    """Return ``("simcluster", version)``."""
    parts = [int(p) for p in _version.split(".")[:3] if p.isdigit()]
    major, minor, micro = (parts + [0, 0, 0])[:3]
    return ("simcluster", (major, minor, micro))


def Get_processor_name() -> str:
    """Return the name of the calling rank's simulated node (``node0``, ``node1``, ...).

    The same as ``socket.gethostname()`` in that rank under a launcher.
    """
    world = current().world
    return _identity.host_name(node_of(world, world.world_rank))


def Wtime() -> float:
    """Return the calling rank's virtual time in seconds."""
    state = current()
    rank = _sync.current()
    if rank is not None and rank.meter is not None:  # measured compute: charge the work since
        _sync.stop_clock(rank, "Wtime")  # the last call first (also where Wtime was imported
        if rank.owed:  # before the run wrapped it: simcluster.MPI's _entry_points), and
            _sync.settle(rank)  # the waits for its own threads (engine.sync.owe), as time.time
        _sync.start_clock(rank)
    elif rank is not None and rank.owed:
        _sync.settle(rank)
    return state.world.now


def Wtick() -> float:
    """Return the resolution of ``Wtime``: 1 ns (virtual time is a float of seconds)."""
    return 1e-9


def Pcontrol(level: int) -> None:
    """Profiling control: accepted and ignored."""


# ---- buffered sends ----


def Attach_buffer(buf: Any) -> None:
    """Give this rank ``buf`` (any writable buffer) as space for ``Bsend``."""
    state = current()
    if state.bsend is not None:
        raise error(ERR_BUFFER, state.world.rank, "Attach_buffer()", "a buffer is already attached",
                    "Detach_buffer() first")
    if buf is BUFFER_AUTOMATIC:  # MPI 4.1: the library buffers as much as it needs
        state.bsend = buf
        return
    try:
        readonly = memoryview(buf).readonly
    except TypeError:
        if not _interop.exports(buf):  # a DLPack or CUDA-array-interface exporter is taken too
            raise error(ERR_BUFFER, state.world.rank, "Attach_buffer()",
                        f"a {type(buf).__name__} is not a buffer", "pass e.g. bytearray(n)") from None
        readonly = _interop.export(buf).readonly
    if readonly:
        raise BufferError(f"rank {state.world.rank}: Attach_buffer(): the {type(buf).__name__} is "
                          "read-only; attach writable memory, e.g. MPI.Alloc_mem(n)")
    state.bsend = buf


def Detach_buffer() -> Any:
    """Wait until every buffered send has left; detach and return the buffer."""
    state = current()
    Flush_buffer()
    buf, state.bsend = state.bsend, None
    return buf


def Flush_buffer() -> None:
    """Wait until every buffered send (and freed request) of this rank has completed."""
    state = current()
    if state.pending:
        block(wait_all([req for req, _ in state.pending]))
    state.reap()


def Iflush_buffer() -> Request:
    """Flush the buffered sends (at once) and return a completed request."""
    Flush_buffer()
    return immediate(current().world.rank, lambda: "Iflush_buffer()")


def Compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """Return ``dims`` with its zeros filled so the product is ``nnodes``, balanced as MPICH does
    (``MPI_Dims_create``; see ``_topology.compute_dims``)."""
    from ._topology import compute_dims

    return compute_dims(nnodes, dims)


def Aint_add(base: int, disp: int) -> int:
    """Return ``base + disp`` as an address (a signed 64-bit integer that wraps, as MPI_Aint)."""
    return _aint(base + disp)


def Aint_diff(addr1: int, addr2: int) -> int:
    """Return ``addr1 - addr2`` as an address difference (a signed 64-bit integer that wraps)."""
    return _aint(addr1 - addr2)


def _aint(value: int) -> int:
    return (int(value) + 2**63) % 2**64 - 2**63


assert THREAD_SINGLE == 0
