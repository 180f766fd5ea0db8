"""``python -m mpi4py.futures <pyfile> | -m mod | -c cmd | - [arg] ...``: the static mode.

Under ``simcluster mpirun -n N``, rank 0 runs the program as its ``__main__``
(mpi4py.futures' own command line: no options but ``-h``) and ranks 1..N-1
serve as the workers of every ``MPIPoolExecutor`` it makes, until the
program ends (``_worker.static_main``).
"""

from __future__ import annotations

from simcluster.MPI.futures._worker import static_main  # absolute: this file runs as __main__

if __name__ == "__main__":
    static_main()
