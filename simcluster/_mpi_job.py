"""Placing a run on the processes of an ``mpiexec`` job: ``run(transport="mpi")``.

Every MPI process of the job calls ``run`` with the same arguments (the same
script). Process ``r`` of ``P`` hosts the ``r``-th contiguous block of the
virtual ranks, as node ``r`` of a ``P``-node run; process 0 also runs the
coordinator. MPI carries what every node must agree on before the run: node
0's address (loopback when the whole job is on one machine) and a fresh
per-run secret, so nothing has to be set in the environment. A job of one
process runs the ranks right there, on the memory transport.

The real mpi4py is imported here, once, under its own name; inside
``simcluster mpirun`` the name ``mpi4py`` means ``simcluster.MPI``, so a run
there cannot be hosted by MPI.
"""

from __future__ import annotations

import secrets
import socket
import sys
from dataclasses import dataclass
from typing import Any

from .errors import UsageError

_FIX = "start the script with mpiexec -n P python SCRIPT (pip install 'simcluster[mpi]' brings mpi4py and MPICH)"


@dataclass(frozen=True)
class Placement:
    """Where this MPI process stands in the run: node ``node_rank`` of ``nnodes``, and node 0's address."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    secret: str


def real_mpi() -> Any:
    """Return the real ``mpi4py.MPI`` (initialising MPI), or raise a UsageError saying what is missing."""
    simulated = sys.modules.get("simcluster.MPI")
    loaded = sys.modules.get("mpi4py.MPI")
    if loaded is not None and loaded is simulated:
        raise UsageError(None, "run(transport='mpi')", "inside simcluster mpirun, mpi4py is "
                         "simcluster's own MPI, so no real MPI process can host ranks",
                         "use another transport there, or " + _FIX)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise UsageError(None, "run(transport='mpi')", f"mpi4py cannot be imported ({exc})",
                         _FIX) from None
    return MPI


def place(world_size: int, procs: object, nnodes: object, node_rank: object,
          master_addr: object, master_port: object) -> Placement | None:
    """Place this process in the run: None for a job of one process (the ranks run here).

    Raises:
        UsageError: mpi4py is missing, a keyword that the MPI job decides was
            given, or the job has more processes than ranks (on every process
            alike, before any collective, so none is left waiting).
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
    comm = real_mpi().COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return None
    if world_size < size:
        raise UsageError(None, f"run(world_size={world_size}, transport='mpi')", f"the MPI job has "
                         f"{size} processes and each must host at least one rank",
                         f"use world_size >= {size}, or mpiexec -n {world_size}")
    hosts = comm.allgather(socket.gethostname())
    shared = None
    if rank == 0:
        addr = "127.0.0.1" if len(set(hosts)) == 1 else _reachable_address()
        shared = (addr, _free_port(addr), secrets.token_hex(16))
    addr, port, secret = comm.bcast(shared, root=0)
    return Placement(size, rank, addr, port, secret)


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


def first_process() -> bool:
    """False in processes 1, 2, ... of an MPI job: every one has the whole result, process 0 reports it."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or mpi is sys.modules.get("simcluster.MPI"):
        return True
    return bool(mpi.COMM_WORLD.Get_rank() == 0)
