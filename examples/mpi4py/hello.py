"""Hello world: every rank says who it is and where it runs.

On simcluster, four virtual ranks in this process (their lines come in rank
order, since they all print at virtual time 0):

    simcluster mpirun -n 4 hello.py

The same file runs unchanged on a real MPI: ``mpiexec -n 4 python hello.py``.
"""

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
name = MPI.Get_processor_name()

print(f"Hello, World! I am process {rank} of {size} on {name}.")
