"""A token goes once around a ring of ranks; each adds its rank to it.

Rank 0 starts the token and gets it back last, holding 0 + 1 + ... + (size - 1).
Every rank prints what it received and from whom:

    simcluster mpirun -n 4 --exact examples/mpi4py/ring.py
"""

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size

if rank == 0:
    comm.send({"token": 0, "hops": []}, dest=right, tag=7)
    msg = comm.recv(source=left, tag=7)
    print(f"rank 0 got the token back: {msg['token']} after hops {msg['hops']}")
    assert msg["token"] == size * (size - 1) // 2
else:
    msg = comm.recv(source=left, tag=7)
    print(f"rank {rank} received token {msg['token']} from rank {left}")
    msg["token"] += rank
    msg["hops"].append(rank)
    comm.send(msg, dest=right, tag=7)
