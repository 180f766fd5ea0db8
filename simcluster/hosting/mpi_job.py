"""Placing a run on the processes of an ``mpiexec`` job: ``run(transport="mpi")``.

Every MPI process of the job calls ``run`` with the same arguments (the same
script). Process ``r`` of ``P`` hosts the ``r``-th contiguous block of the
virtual ranks, as node ``r`` of a ``P``-node run; process 0 also runs the
coordinator. MPI carries what every node must agree on before the run: node
0's address (loopback when the whole job is on one machine) and a fresh
per-run secret, so nothing has to be set in the environment. A job of one
process runs the ranks right there, on the memory transport; processes
beyond the world size host no rank and get process 0's outcome.

The real mpi4py is imported here, once, under its own name, and kept
(``real_mpi``): inside ``simcluster mpirun`` the name ``mpi4py`` means
``simcluster.MPI``, so ``mpirun --transport mpi`` imports the real one first.
"""

from __future__ import annotations

import pickle
import secrets
import socket
import sys
from dataclasses import dataclass
from collections.abc import Awaitable, Callable
from typing import Any

from . import remote as _remote
from ..errors import UsageError

_FIX = "start the script with mpiexec -n P python SCRIPT (pip install 'simcluster[mpi]' brings mpi4py and MPICH)"


@dataclass(frozen=True)
class Placement:
    """Where this MPI process stands in the run: node ``node_rank`` of ``nnodes``, and node 0's address.

    With ``nnodes == 1`` process 0 runs every rank itself, on the memory transport.
    """

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    secret: str
    shares: str = ""  # with processes hosting no rank: "send" (process 0), "join", "receive" (them)


_REAL: Any = None  # the real mpi4py.MPI, once imported (simcluster mpirun imports it before its shim)
_HOSTING: Any = None  # the processes that host ranks in the latest run (``place``)


def real_mpi() -> Any:
    """Return the real ``mpi4py.MPI`` (initialising MPI), or raise a UsageError saying what is missing.

    The first successful call keeps the module: ``simcluster mpirun --transport
    mpi`` makes it before it redirects ``mpi4py`` to ``simcluster.MPI`` for the
    script, so the run is still hosted by the real MPI processes.
    """
    global _REAL
    if _REAL is not None:
        return _REAL
    simulated = sys.modules.get("simcluster.MPI")
    loaded = sys.modules.get("mpi4py.MPI")
    if loaded is not None and loaded is simulated:
        raise UsageError(None, "run(transport='mpi')", "inside simcluster mpirun, mpi4py is "
                         "simcluster's own MPI, so no real MPI process can host ranks",
                         "use another transport there, or host the whole script: mpiexec -n P "
                         "simcluster mpirun -n W --transport mpi SCRIPT")
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise UsageError(None, "run(transport='mpi')", f"mpi4py cannot be imported ({exc})",
                         _FIX) from None
    _REAL = MPI
    return MPI


def place(world_size: int, procs: object, nnodes: object, node_rank: object,
          master_addr: object, master_port: object) -> Placement | None:
    """Place this process in the run: None where the ranks run right here, on the memory transport.

    The first processes host the ranks in blocks of ``ceil(world_size / P)``;
    where fewer blocks than processes result, the others host none and take process 0's outcome
    (``Placement.shares``), as does everyone in a job of one process.

    Raises:
        UsageError: mpi4py is missing, or a keyword that the MPI job decides
            was given (on every process alike, before any collective, so
            none is left waiting).
    """
    given = {name: value for name, value in (("procs", procs), ("master_addr", master_addr),
                                              ("master_port", master_port)) if value is not None}
    if nnodes != 1 or node_rank != 0:
        given.update(nnodes=nnodes, node_rank=node_rank)
    if given:
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise UsageError(None, f"run(transport='mpi', {shown})", "the MPI job decides how many "
                         "processes host the ranks and where", "leave these out; mpiexec -n P "
                         "sets the processes")
    global _HOSTING
    comm = real_mpi().COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return None
    per = -(-world_size // min(size, world_size))  # contiguous blocks of ceil(W / P) ranks
    active = -(-world_size // per)  # processes that host ranks (4 ranks on 3: blocks 2, 2)
    shares = "" if active == size else "receive" if rank >= active else "send" if rank == 0 else "join"
    hosts = comm.allgather(socket.gethostname())[:active]
    mpi = real_mpi()
    if _HOSTING is not None and _HOSTING != mpi.COMM_NULL:
        _HOSTING.Free()
    _HOSTING = comm.Split(0 if rank < active else mpi.UNDEFINED, rank)  # the rounds' communicator
    shared = None
    if rank == 0:
        addr = "127.0.0.1" if len(set(hosts)) == 1 else _reachable_address()
        shared = (addr, _free_port(addr), secrets.token_hex(16))
    addr, port, secret = comm.bcast(shared, root=0)
    return Placement(active, min(rank, active - 1), addr, port, secret, shares)


async def shared(role: str, run: Callable[[], Awaitable[Any]]) -> Any:
    """Run a run that processes hosting no rank take part in; ``role`` is this process's part.

    Process 0 (``"send"``) hands its outcome, the RunResult or the error, to
    the processes that host no rank (``"receive"``) by an MPI broadcast of
    its pickle, which the other hosting processes (``"join"``) take part in
    too, keeping their own. A result that cannot be pickled is an error on
    every process that receives it, not a hang; an error arrives without its
    ``__cause__``'s traceback (exceptions pickle without it).
    """
    comm = real_mpi().COMM_WORLD
    if role == "receive":
        ok, value = pickle.loads(comm.bcast(None, root=0))
        if ok:
            return value
        raise _remote.decode_exception(value, "MPI process 0")
    try:
        result = await run()
    except BaseException as exc:
        comm.bcast(_pickled(False, exc) if role == "send" else None, root=0)
        raise
    comm.bcast(_pickled(True, result) if role == "send" else None, root=0)
    return result


def _pickled(ok: bool, value: object) -> bytes:
    if not ok:  # as plain data, with its cause and their tracebacks (_remote)
        assert isinstance(value, BaseException)
        return pickle.dumps((False, _remote.encode_exception(value, cause=True)))
    try:
        return pickle.dumps((ok, value))
    except Exception as exc:  # noqa: BLE001 - any pickling failure becomes one clear error
        error = UsageError(None, "run(transport='mpi')", "the run's result cannot be pickled for "
                           f"the MPI processes that host no rank ({exc})",
                           "return picklable values, or start as many processes as ranks at most")
        return pickle.dumps((False, _remote.encode_exception(error)))


def _reachable_address() -> str:
    """This host's address for the other machines of the job."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.getfqdn()


def _free_port(addr: str) -> int:
    """A port free on ``addr`` now, for the coordinator to listen on (as torchrun picks one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((addr, 0))
        port: int = sock.getsockname()[1]
        return port


def hosting_comm() -> Any:
    """The communicator of the processes that host ranks in this run (made by ``place``)."""
    if _HOSTING is None or _HOSTING == real_mpi().COMM_NULL:
        raise RuntimeError("_mpi_job.hosting_comm: place() has not placed this process on a "
                           "hosting process")
    return _HOSTING


def first_process() -> bool:
    """False in processes 1, 2, ... of an MPI job: every one has the whole result, process 0 reports it."""
    mpi = _REAL if _REAL is not None else sys.modules.get("mpi4py.MPI")
    if mpi is None or mpi is sys.modules.get("simcluster.MPI"):
        return True
    return bool(mpi.COMM_WORLD.Get_rank() == 0)
