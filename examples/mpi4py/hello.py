"""Hello world: every rank says who it is and where it runs.

On simcluster, four virtual ranks in this process:

    simcluster mpirun -n 4 --exact examples/mpi4py/hello.py

Their lines come in rank order, since they all print at virtual time 0.
``--exact`` charges no measured compute time, so the output is the same on
every machine; without it, the time each rank's own code takes on this
machine moves its clock, and the order of the lines can change.

The same file runs unchanged on a real MPI: ``mpiexec -n 4 python examples/mpi4py/hello.py``.
"""

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
name = MPI.Get_processor_name()

print(f"Hello, World! I am process {rank} of {size} on {name}.")
