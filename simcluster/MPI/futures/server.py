"""``python -m mpi4py.futures.server``: what a spawned worker rank of ``MPIPoolExecutor`` runs.

``MPIPoolExecutor`` spawns its workers with ``MPI.COMM_SELF.Spawn(sys.executable,
args=[..., "-m", "mpi4py.futures.server"])``: each serves the parent (its
master, remote rank 0 of ``MPI.Comm.Get_parent()``) until told to stop; the
spawned ranks' ``COMM_WORLD`` is ``get_comm_workers()`` (``_worker.spawned_main``).
This file runs as the rank's ``__main__``, whose names the master's script
replaces: everything happens in ``_worker``.
"""

from __future__ import annotations

from simcluster.MPI.futures._worker import spawned_main  # absolute: this file runs as __main__

if __name__ == "__main__":
    spawned_main()
