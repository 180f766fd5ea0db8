"""mpi4py's ``mpi4py.util`` on simcluster: ``pkl5``, ``dtlib``, ``sync`` and ``pool``.

Under ``simcluster mpirun``, ``import mpi4py.util`` and ``from mpi4py.util
import pkl5, dtlib, sync, pool`` give these modules; a rank function run by
``sc.run`` imports them as ``from simcluster.MPI.util import pkl5``.

- ``pkl5``: pickle-based communication that sends an object as several
  messages (a header of lengths, the pickle, its out-of-band buffers), with
  mpi4py's ``Comm``/``Intracomm``, ``Request`` and ``Message`` wrappers.
- ``dtlib``: ``from_numpy_dtype`` / ``to_numpy_dtype`` between numpy dtypes and
  MPI datatypes.
- ``sync``: ``Sequential``, ``Counter``, ``Mutex``, ``Condition``, ``Semaphore``.
  mpi4py builds them on one-sided windows, which simcluster does not simulate;
  here their shared state lives with the run (memory transport) and every
  wait is a message, so results, virtual times and deadlock reports are the
  engine's (see ``sync``'s docstring).
- ``pool``: ``multiprocessing.pool``'s API over ``mpi4py.futures``' executors
  (``simcluster.MPI.futures``); imported on first use, not with this package.
"""

__all__ = ["dtlib", "pkl5", "sync"]
