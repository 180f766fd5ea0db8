"""``python -m mpi4py ...`` inside ``simcluster mpirun``: run a script, module or command on each rank."""

from __future__ import annotations

from .run import main

if __name__ == "__main__":
    main()
