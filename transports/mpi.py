"""The mpi transport: ranks hosted by the processes of an ``mpiexec`` job.

Each MPI process hosts a contiguous block of the virtual ranks, as a node of
a multi-node tcp run does: MPI starts the processes, places them on the
machines and carries the rendezvous (node 0's address and a per-run secret,
``simcluster._mpi_job``); the envelopes and the synchronisation rounds then
travel on the tcp transport's authenticated streams between the processes.
(Sending the envelopes themselves as MPI messages is not done yet.)

This module never imports ``simcluster`` or ``mpi4py``.
"""

from __future__ import annotations

from .tcp import TcpTransport

__all__ = ["MpiTransport"]


class MpiTransport(TcpTransport):
    """The tcp transport's streams between the processes of an MPI job, under the name "mpi"."""

    __slots__ = ()

    name = "mpi"
