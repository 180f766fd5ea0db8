"""Overlap work with a message: post Irecv, compute in chunks, and Test between chunks.

Rank 0 prepares a message (a pause of 50 ms stands for its work) and sends it;
rank 1 posts the receive first, then polls ``req.Test()`` between chunks of
its own work until the message is there, and reports whether it got work done
while waiting. Under simcluster each fruitless ``Test`` costs a little virtual
time (``poll_cost``), so the loop ends when the message arrives, as on a real
MPI:

    simcluster mpirun -n 2 --exact examples/mpi4py/overlap_test.py

On a real MPI: ``mpiexec -n 2 python examples/mpi4py/overlap_test.py``.
"""

import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    time.sleep(0.05)  # preparing the data (under simcluster, a virtual pause)
    data = np.arange(4, dtype=np.float64)
    comm.Send(data, dest=1, tag=11)
    print(f"rank 0 sent {data.tolist()}")
elif rank == 1:
    buf = np.empty(4, dtype=np.float64)
    req = comm.Irecv(buf, source=0, tag=11)
    chunks, acc = 0, 0.0
    while not req.Test():
        acc += float(np.sum(np.sqrt(np.arange(1000.0))))  # a chunk of useful work
        chunks += 1
    print(f"rank 1 received {buf.tolist()}; worked while waiting: {chunks > 0}")
