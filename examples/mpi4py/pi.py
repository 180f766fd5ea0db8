"""Compute pi by the midpoint rule, each rank summing every size-th interval.

Rank 0 broadcasts the number of intervals (``sys.argv[1]``, default 1000000),
each rank sums its share, and ``reduce`` adds the shares up on rank 0:

    simcluster mpirun -n 4 --exact examples/mpi4py/pi.py 1000000
"""

import math
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

n = comm.bcast(int(sys.argv[1]) if rank == 0 and len(sys.argv) > 1 else 1_000_000, root=0)
h = 1.0 / n
x = h * (np.arange(rank, n, size, dtype=np.float64) + 0.5)
mine = float(np.sum(4.0 / (1.0 + x * x)) * h)
print(f"rank {rank} summed {len(x)} intervals")

pi = comm.reduce(mine, op=MPI.SUM, root=0)
if rank == 0:
    print(f"pi is approximately {pi:.12f}, error is {abs(pi - math.pi):.1e}")
