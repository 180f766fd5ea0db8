"""OSU-style bandwidth benchmark: windows of Isend to rank 1, then a small acknowledgement.

Rank 0 posts a window of nonblocking sends, rank 1 a window of nonblocking
receives; after ``Waitall`` rank 1 acknowledges with 4 bytes. Bandwidth is
bytes moved per second of ``MPI.Wtime``, in MB/s, as osu_bw reports it. Under
``AlphaBeta`` the sends queue on rank 0's port, so large messages approach
the link's 10 GB/s (10000 MB/s) and small ones pay ``alpha``:

    simcluster mpirun -n 2 --exact --latency alphabeta:1us,10GB/s examples/mpi4py/osu_bw.py

On a real MPI: ``mpiexec -n 2 python examples/mpi4py/osu_bw.py``.
"""

import numpy as np
from mpi4py import MPI

MAX_SIZE = 1 << 18
WINDOW = 64
LARGE = 8192
ITERS, SKIP = 20, 2
ITERS_LARGE, SKIP_LARGE = 5, 1

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
assert comm.Get_size() == 2, "run osu_bw.py on exactly 2 ranks"

sbuf = np.ones(MAX_SIZE, dtype="u1")
rbuf = np.zeros(MAX_SIZE * WINDOW, dtype="u1") if rank == 1 else None
ack = np.zeros(4, dtype="u1")

if rank == 0:
    print("# OSU MPI-style Bandwidth Test (mpi4py)")
    print(f"# {'Size':<10}{'Bandwidth (MB/s)':>20}")

for size in [1 << k for k in range(19)]:
    iters, skip = (ITERS, SKIP) if size < LARGE else (ITERS_LARGE, SKIP_LARGE)
    comm.Barrier()
    t_start = 0.0
    for i in range(iters + skip):
        if i == skip:
            t_start = MPI.Wtime()
        if rank == 0:
            reqs = [comm.Isend([sbuf, size, MPI.BYTE], dest=1, tag=100) for _ in range(WINDOW)]
            MPI.Request.Waitall(reqs)
            comm.Recv([ack, 4, MPI.BYTE], source=1, tag=101)
        else:
            reqs = [comm.Irecv([rbuf[w * size:(w + 1) * size], size, MPI.BYTE], source=0, tag=100)
                    for w in range(WINDOW)]
            MPI.Request.Waitall(reqs)
            comm.Send([ack, 4, MPI.BYTE], dest=0, tag=101)
    t_end = MPI.Wtime()
    if rank == 0:
        seconds = t_end - t_start
        bandwidth = size / 1e6 * iters * WINDOW / seconds if seconds > 0 else float("inf")
        print(f"{size:<12}{bandwidth:>20.2f}")
