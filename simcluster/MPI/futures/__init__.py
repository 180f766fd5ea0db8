"""``mpi4py.futures`` on simcluster: executors whose workers are virtual ranks.

Under ``simcluster mpirun``, ``import mpi4py.futures`` gives this package; a
rank function run by ``sc.run`` imports it as ``simcluster.MPI.futures``. The
names are mpi4py 4.1's: ``concurrent.futures``' own (``Future``, ``Executor``,
the ``wait`` constants, the exceptions), ``MPIPoolExecutor``,
``MPICommExecutor``, ``ThreadPoolExecutor``, ``ProcessPoolExecutor``,
``get_comm_workers``, ``collect`` and ``compose``.

``wait`` and ``as_completed`` are this package's own: they make the masters of
MPI executors progress, which happens only inside the master rank's calls
(``_core``). ``concurrent.futures.wait`` / ``as_completed`` on an MPI
executor's futures would wait for a thread that does not exist here.
See docs/mpi.md ("mpi4py.futures") for how it is timed.
"""

from concurrent.futures import (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION,
                                BrokenExecutor, CancelledError, Executor, Future,
                                InvalidStateError, TimeoutError)

from ._core import as_completed, get_comm_workers, wait
from .pool import MPICommExecutor, MPIPoolExecutor, ProcessPoolExecutor, ThreadPoolExecutor
from .util import collect, compose

__all__ = [
    "Future", "Executor", "wait", "FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED",
    "as_completed", "CancelledError", "TimeoutError", "InvalidStateError", "BrokenExecutor",
    "MPIPoolExecutor", "MPICommExecutor", "ThreadPoolExecutor", "ProcessPoolExecutor",
    "get_comm_workers", "collect", "compose",
]
