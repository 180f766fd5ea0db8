"""A Mandelbrot image computed row by row: Scatterv hands out rows, Gatherv brings them back.

Rank 0 scatters the row numbers (a block of rows per rank, the first ranks
taking one more when they do not divide evenly), every rank computes the
escape counts of its rows, and rank 0 gathers the image, prints it as ASCII
art and prints a checksum:

    simcluster mpirun -n 4 --exact examples/mpi4py/mandelbrot.py
"""

import zlib

import numpy as np
from mpi4py import MPI

WIDTH, HEIGHT, MAXIT = 72, 24, 64
X0, X1, Y0, Y1 = -2.1, 0.7, -1.2, 1.2
SHADES = " .:-=+*#%@"

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

counts = np.array([HEIGHT // size + (r < HEIGHT % size) for r in range(size)], dtype="i")
displs = np.array([sum(counts[:r]) for r in range(size)], dtype="i")

rows = np.arange(HEIGHT, dtype="i") if rank == 0 else None
myrows = np.empty(counts[rank], dtype="i")
comm.Scatterv([rows, counts, displs, MPI.INT] if rank == 0 else None, myrows, root=0)


def escape_counts(y: float) -> np.ndarray:
    """Iterations before z = z*z + c leaves the disc of radius 2, for one row."""
    c = np.linspace(X0, X1, WIDTH) + 1j * y
    z = np.zeros_like(c)
    its = np.full(WIDTH, MAXIT, dtype="i")
    for it in range(MAXIT):
        z = z * z + c
        escaped = (np.abs(z) > 2.0) & (its == MAXIT)
        its[escaped] = it
        z[np.abs(z) > 2.0] = 2.0  # keep escaped points finite
    return its


mine = np.array([escape_counts(Y0 + (Y1 - Y0) * r / (HEIGHT - 1)) for r in myrows],
                dtype="i").reshape(-1, WIDTH)
print(f"rank {rank} computed rows {myrows[0]}..{myrows[-1]}")

image = np.empty((HEIGHT, WIDTH), dtype="i") if rank == 0 else None
comm.Gatherv(mine, [image, counts * WIDTH, displs * WIDTH, MPI.INT] if rank == 0 else None, root=0)

if rank == 0:
    for line in image:
        print("".join(SHADES[min(len(SHADES) - 1, v * len(SHADES) // MAXIT)] for v in line))
    print(f"checksum: sum {int(image.sum())}, crc32 {zlib.crc32(image.tobytes()):08x}")
