"""The folder that ``mpi4py.__path__`` names under ``simcluster mpirun``.

During a run ``import mpi4py`` gives a package module built by
``simcluster.mpirun`` (``rc``, ``get_config``, ``profile``, ``MPI`` =
``simcluster.MPI``). Its ``__file__`` is this file and its ``__path__`` this
folder, as mpi4py's are its install folder, so ``mpi4py.run`` and
``mpi4py.__main__`` (``python -m mpi4py script.py``) are the modules beside
this one, loaded under mpi4py's names. Nothing here is imported outside a run.
"""
