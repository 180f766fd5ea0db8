"""A small benchmark: allreduce iterations per second, timed with MPI.Wtime.

Every rank runs ``ITERS`` allreduces of a 1024-double array; rank 0 prints the
rate ``ITERS / (Wtime() - t0)``. Under ``simcluster mpirun`` Wtime is virtual
time: by default it moves with the network model and with the work a rank does
between MPI calls (measured), so the figure changes a little from run to run,
as under mpiexec. ``--exact`` charges no measured work, so the figure is the
network model's alone and the same on every run:

    simcluster mpirun -n 4 --exact --latency alphabeta:1us,10GB/s examples/mpi4py/allreduce_rate.py

On a real MPI: ``mpiexec -n 4 python examples/mpi4py/allreduce_rate.py``.
"""

import numpy as np
from mpi4py import MPI

ITERS = 200

comm = MPI.COMM_WORLD
x = np.full(1024, float(comm.Get_rank()))
total = np.empty_like(x)
comm.Barrier()
t0 = MPI.Wtime()
for _ in range(ITERS):
    comm.Allreduce(x, total, op=MPI.SUM)
elapsed = MPI.Wtime() - t0
expected = comm.Get_size() * (comm.Get_size() - 1) / 2
assert np.all(total == expected)
if comm.Get_rank() == 0:
    print(f"{ITERS} allreduces of 1024 doubles on {comm.Get_size()} ranks")
    print(f"rate {ITERS / elapsed:.0f} iterations/s")
