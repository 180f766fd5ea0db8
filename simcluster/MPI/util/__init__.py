"""mpi4py's ``mpi4py.util`` on simcluster: ``pkl5``, ``dtlib`` and ``sync``.

Under ``simcluster mpirun``, ``import mpi4py.util`` and ``from mpi4py.util
import pkl5, dtlib, sync`` give these modules; a rank function run by
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

``mpi4py.util.pool`` (and ``mpi4py.futures``) need process pools and are not
provided.
"""

__all__ = ["dtlib", "pkl5", "sync"]
