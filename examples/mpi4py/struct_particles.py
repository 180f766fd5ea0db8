"""Particles as a numpy structured array, sent with an MPI struct datatype.

Each particle has a position (3 doubles), a velocity (3 floats) and an id
(an int). The MPI datatype mirrors the numpy dtype field by field
(``Create_struct`` with the fields' byte offsets, resized to the dtype's
item size), so whole arrays of particles go into ``Sendrecv`` and
``Gather`` as they are. Each rank passes its particles to the right
neighbour of a ring, then rank 0 gathers everyone's:

    simcluster mpirun -n 3 --exact examples/mpi4py/struct_particles.py
"""

import numpy as np
from mpi4py import MPI

particle = np.dtype([("pos", "f8", 3), ("vel", "f4", 3), ("id", "i4")], align=True)

# one block per field: (count, offset, MPI type of its elements)
fields = [(3, particle.fields["pos"][1], MPI.DOUBLE),
          (3, particle.fields["vel"][1], MPI.FLOAT),
          (1, particle.fields["id"][1], MPI.INT)]
struct = MPI.Datatype.Create_struct([n for n, _, _ in fields], [off for _, off, _ in fields],
                                    [t for _, _, t in fields])
PARTICLE = struct.Create_resized(0, particle.itemsize).Commit()
struct.Free()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size

count = 3
mine = np.zeros(count, dtype=particle)
for k in range(count):
    mine[k]["pos"] = (rank, k, rank + k)
    mine[k]["vel"] = (0.5 * k, -0.25 * rank, 1.0)
    mine[k]["id"] = 10 * rank + k

got = np.empty(count, dtype=particle)
comm.Sendrecv([mine, PARTICLE], dest=right, sendtag=1, recvbuf=[got, PARTICLE], source=left, recvtag=1)
ids = got["id"].tolist()
speed = float(np.abs(got["vel"]).sum())
print(f"rank {rank} got particles {ids} from rank {left}: "
      f"centre {got['pos'].mean(axis=0).round(3).tolist()}, |v| sum {speed:.2f}")

everyone = np.empty(count * size, dtype=particle) if rank == 0 else None
comm.Gather([got, PARTICLE], [everyone, PARTICLE] if rank == 0 else None, root=0)
if rank == 0:
    print(f"rank 0 gathered {len(everyone)} particles, ids {sorted(everyone['id'].tolist())}, "
          f"type size {PARTICLE.Get_size()} bytes, extent {PARTICLE.Get_extent()[1]} bytes")
PARTICLE.Free()
