"""OSU-style latency benchmark: ping-pong between ranks 0 and 1, timed with MPI.Wtime.

For each message size, rank 0 sends a buffer to rank 1 and waits for it to
come back; the latency is half the average round trip, in microseconds, as
the OSU micro-benchmarks (osu_latency) report it. On simcluster ``Wtime`` is
virtual time, so under ``AlphaBeta(alpha, beta)`` every row is exactly
``alpha + size * beta``:

    simcluster mpirun -n 2 --exact --latency alphabeta:1us,10GB/s examples/mpi4py/osu_latency.py

(1.00 us for 0 bytes, 105.86 us for 1 MiB: 1 us plus 1048576 bytes at 10 GB/s.)
On a real MPI: ``mpiexec -n 2 python examples/mpi4py/osu_latency.py``.
"""

import numpy as np
from mpi4py import MPI

MAX_SIZE = 1 << 20
LARGE = 8192  # from here on, fewer iterations (as OSU does)
ITERS, SKIP = 100, 10
ITERS_LARGE, SKIP_LARGE = 20, 2

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
assert comm.Get_size() == 2, "run osu_latency.py on exactly 2 ranks"

sbuf = np.ones(MAX_SIZE, dtype="u1")
rbuf = np.zeros(MAX_SIZE, dtype="u1")

if rank == 0:
    print("# OSU MPI-style Latency Test (mpi4py)")
    print(f"# {'Size':<10}{'Latency (us)':>18}")

for size in [0] + [1 << k for k in range(21)]:
    iters, skip = (ITERS, SKIP) if size < LARGE else (ITERS_LARGE, SKIP_LARGE)
    comm.Barrier()
    t_start = 0.0
    for i in range(iters + skip):
        if i == skip:
            t_start = MPI.Wtime()
        if rank == 0:
            comm.Send([sbuf, size, MPI.BYTE], dest=1, tag=1)
            comm.Recv([rbuf, size, MPI.BYTE], source=1, tag=1)
        else:
            comm.Recv([rbuf, size, MPI.BYTE], source=0, tag=1)
            comm.Send([sbuf, size, MPI.BYTE], dest=0, tag=1)
    t_end = MPI.Wtime()
    if rank == 0:
        latency = (t_end - t_start) * 1e6 / (2 * iters)
        print(f"{size:<12}{latency:>18.2f}")
