"""A 2-D halo exchange on a Cartesian grid of ranks: Create_cart, Shift and Sendrecv.

Each rank owns a 4 x 4 block of a global field, stored with a one-cell halo
around it. Rows wrap around (periodic), columns do not: ranks on the left and
right edges of the grid find ``MPI.PROC_NULL`` there, and their halo keeps its
initial -1. After one exchange in each dimension every rank prints what its
halo holds on each side:

    simcluster mpirun -n 6 --exact examples/mpi4py/halo_cart.py
"""

import numpy as np
from mpi4py import MPI

N = 4  # interior cells per side

comm = MPI.COMM_WORLD
dims = MPI.Compute_dims(comm.Get_size(), 2)
cart = comm.Create_cart(dims, periods=[True, False])
rank = cart.Get_rank()
row, col = cart.Get_coords(rank)

field = np.full((N + 2, N + 2), -1.0)
field[1:-1, 1:-1] = 100 * row + 10 * col + np.arange(N)  # the global field, row-major

# dimension 0: rows, through the top and bottom halo rows
up, down = cart.Shift(0, 1)  # up: source (row - 1), down: dest (row + 1)
cart.Sendrecv(field[-2, 1:-1].copy(), dest=down, sendtag=0,
              recvbuf=(halo := np.empty(N)), source=up, recvtag=0)
field[0, 1:-1] = halo
cart.Sendrecv(field[1, 1:-1].copy(), dest=up, sendtag=1,
              recvbuf=halo, source=down, recvtag=1)
field[-1, 1:-1] = halo

# dimension 1: columns, through the left and right halo columns (PROC_NULL at the edges)
left, right = cart.Shift(1, 1)
column = np.full(N, -1.0)
cart.Sendrecv(field[1:-1, -2].copy(), dest=right, sendtag=2,
              recvbuf=column, source=left, recvtag=2)
field[1:-1, 0] = column
column = np.full(N, -1.0)
cart.Sendrecv(field[1:-1, 1].copy(), dest=left, sendtag=3,
              recvbuf=column, source=right, recvtag=3)
field[1:-1, -1] = column


def side(cells: np.ndarray) -> str:
    return ",".join(f"{v:g}" for v in cells)


print(f"rank {rank} at ({row},{col}) of {dims}: top [{side(field[0, 1:-1])}] "
      f"bottom [{side(field[-1, 1:-1])}] left [{side(field[1:-1, 0])}] "
      f"right [{side(field[1:-1, -1])}]")
cart.Free()
