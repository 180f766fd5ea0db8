"""``mpi4py.futures.pool``: ``MPIPoolExecutor``, ``MPICommExecutor`` and the thread and process pools.

Where an executor's workers come from:

- static mode (``simcluster mpirun -n N -m mpi4py.futures script.py``): rank 0
  runs the script and every ``MPIPoolExecutor`` it makes uses ranks 1..N-1,
  which serve until the script ends (``max_workers`` is ignored, as mpi4py does);
- ``MPICommExecutor(comm, root)``: the other ranks of ``comm`` serve inside
  ``__enter__`` until the root leaves its ``with`` block; on a communicator of
  one, the root runs the tasks itself when it waits for them;
- otherwise ``MPI.COMM_SELF.Spawn`` starts ``max_workers`` new ranks running
  ``mpi4py.futures.server``, on the first ``submit`` (or ``bootup``).

Progress happens in the master's own calls (``_core``); there is no thread.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import itertools
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _core, _worker

_serials = itertools.count(1)  # tags of executors sharing a communicator (0 is "stop")


def _max_workers() -> int:
    """``max_workers=None``: ``MPI4PY_FUTURES_MAX_WORKERS``, else the universe beyond the world, else 1."""
    text = os.environ.get("MPI4PY_FUTURES_MAX_WORKERS")
    if text:
        return int(text)
    mpi = _core._mpi()
    world = mpi.COMM_WORLD
    universe = world.Get_attr(mpi.UNIVERSE_SIZE)
    if universe is not None:
        return max(int(universe) - int(world.Get_size()), 1)
    return 1


class MPIPoolExecutor(cf.Executor):
    """An executor whose workers are MPI ranks (see the module's docstring for which)."""

    Future = cf.Future

    def __init__(self, max_workers: int | None = None, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = (), **kwargs: Any) -> None:
        if max_workers is not None:
            if max_workers <= 0:
                raise ValueError("max_workers must be greater than 0")
            kwargs["max_workers"] = max_workers
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._options = kwargs
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._master: _core.Master | None = None
        self._place: Callable[[], tuple[Any, list[int], bool]] | None = None  # MPICommExecutor's
        self._shutdown = False

    # -- workers --

    def _workers(self) -> tuple[Any, list[int], bool]:
        """(comm, worker ranks, owned) for this executor: the static pool's, or spawned ones."""
        if self._place is not None:
            return self._place()
        static = _core.peek_rank_state().get("static")
        if static is not None:
            return static, list(range(1, static.Get_size())), False
        return self._spawn()

    def _spawn(self) -> tuple[Any, list[int], bool]:
        mpi = _core._mpi()
        count = self._options.get("max_workers") or _max_workers()
        python = self._options.get("python_exe") or sys.executable
        args = [*self._options.get("python_args", ()), "-m", "mpi4py.futures.server"]
        info = self._options.get("mpi_info")
        if info is None:
            info = mpi.INFO_NULL
        elif not isinstance(info, mpi.Info):
            pairs = info.items() if hasattr(info, "items") else info
            info = mpi.Info.Create()
            for key, value in pairs:
                info.Set(key, value)
        comm = mpi.COMM_SELF.Spawn(python, args=args, maxprocs=count, info=info)  # docs/mpi.md
        return comm, list(range(comm.Get_remote_size())), True

    def _boot(self) -> _core.Master:
        master = self._master
        if master is None:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            importing = _core.peek_rank_state().get("importing")
            if importing is not None:
                rank = _core._mpi().COMM_WORLD.Get_rank()
                raise RuntimeError(
                    f"rank {rank}: MPIPoolExecutor(): a worker importing the main script "
                    f"{importing!r} was asked to start workers of its own; put the script's "
                    "work under `if __name__ == \"__main__\":`, as mpi4py requires")
            comm, workers, owned = self._workers()
            master = _core.Master(comm, workers, next(_serials), owned)
            self._master = master
            masters = _core.peek_rank_state().get("masters")
            if masters is not None and comm is not None and not owned and self._place is None:
                masters.append(master)  # the static pool's: drained before its workers stop
            if owned:  # spawned: stopped when the script ends, if not shut down before
                _core.rank_state().setdefault("spawned", []).append(master)
            main = self._options.get("main", True) and self._place is None  # comm's ranks run it
            info = _core.main_info(main, self._options.get("path"), self._options.get("globals"),
                                   self._options.get("env"), self._options.get("wdir"))
            master.setup(info, self._initializer, self._initargs)
        if master.broken is not None:
            raise cf.BrokenExecutor(master.broken)
        return master

    def bootup(self, wait: bool = True) -> MPIPoolExecutor:
        """Start the workers now (they start on the first ``submit`` otherwise); return self."""
        self._boot()
        return self

    @property
    def num_workers(self) -> int:
        """How many worker ranks run the tasks (starting them if need be)."""
        master = self._boot()
        return max(len(master.workers), 1)

    @property
    def _max_workers(self) -> int:
        return self.num_workers

    # -- tasks --

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:  # type: ignore[type-arg]
        """Schedule ``fn(*args, **kwargs)`` on a worker; return its future.

        Sends it at once when a worker is idle; the master then collects any
        results already there. Costs the master the sending of the task.
        """
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        return self._boot().submit(fn, args, kwargs)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None,
            chunksize: int = 1, buffersize: int | None = None,
            unordered: bool = False) -> Iterator[Any]:
        """``map(fn, *iterables)`` on the workers, ``chunksize`` calls per task.

        The tasks are submitted now (at most ``buffersize`` ahead of the
        results taken); the results come in order, or as they complete with
        ``unordered``. ``timeout`` counts virtual seconds from this call.
        """
        return self._map(fn, zip(*iterables), timeout, chunksize, buffersize, unordered)

    def starmap(self, fn: Callable[..., Any], iterable: Iterable[Any], timeout: float | None = None,
                chunksize: int = 1, buffersize: int | None = None,
                unordered: bool = False) -> Iterator[Any]:
        """``itertools.starmap(fn, iterable)`` on the workers (``map``'s options)."""
        return self._map(fn, iter(iterable), timeout, chunksize, buffersize, unordered)

    def _map(self, fn: Callable[..., Any], argss: Iterator[Any], timeout: float | None,
             chunksize: int, buffersize: int | None, unordered: bool) -> Iterator[Any]:
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None and buffersize < 1:
            raise ValueError("buffersize must be None or >= 1.")
        chunks = iter(lambda: list(itertools.islice(argss, chunksize)), [])
        return map_results(self, functools.partial(_core.run_chunk, fn), chunks, timeout,
                           buffersize, unordered)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Finish (or with ``cancel_futures``, drop) the pending tasks, then let the workers go.

        There is no thread to finish them later, so ``wait=False`` also waits
        for the tasks already started. Spawned workers are stopped; a static
        pool's or ``MPICommExecutor``'s stay for the next executor.
        """
        self._shutdown = True
        master = self._master
        if master is None:
            return
        master.drain(cancel_futures)
        master.stop()


def map_results(executor: cf.Executor, task: Callable[..., Any], chunks: Iterator[Any],
                timeout: float | None, buffersize: int | None, unordered: bool) -> Iterator[Any]:
    """Submit ``task(chunk)`` for each chunk now (``buffersize`` at most ahead); yield flattened results."""
    now = _core._clock(isinstance(executor, MPIPoolExecutor))
    deadline = None if timeout is None else now() + timeout
    futures: deque[cf.Future] = deque()  # type: ignore[type-arg]
    for chunk in itertools.islice(chunks, buffersize):
        futures.append(executor.submit(task, chunk))

    def results() -> Iterator[Any]:
        try:
            while futures:
                left = None if deadline is None else deadline - now()
                if unordered:
                    future = next(_core.as_completed(list(futures), left))
                    futures.remove(future)
                else:
                    future = futures.popleft()
                    if getattr(future, "_master", None) is None:
                        _core.wait([future], left)
                        if not _core.finished(future):
                            raise cf.TimeoutError
                yield from future.result(left)
                if buffersize is not None:
                    for chunk in itertools.islice(chunks, 1):
                        futures.append(executor.submit(task, chunk))
        finally:
            for future in futures:
                future.cancel()

    return results()


class MPICommExecutor:
    """Context manager: an ``MPIPoolExecutor`` at ``root`` over the other ranks of ``comm``, None elsewhere.

    Collective over ``comm``. The workers serve inside ``__enter__`` and get
    None once the root has left its ``with`` block.
    """

    def __init__(self, comm: Any = None, root: int = 0, **kwargs: Any) -> None:
        mpi = _core._mpi()
        if comm is None:
            comm = mpi.COMM_WORLD
        if comm.Is_inter():
            raise ValueError("expecting an intracommunicator")
        if root < 0 or root >= comm.Get_size():
            raise ValueError("expecting root in range(comm.size)")
        self._comm = comm
        self._root = root
        self._options = kwargs
        self._executor: MPIPoolExecutor | None = None
        self._own: tuple[Any, Any] | None = None

    def __enter__(self) -> MPIPoolExecutor | None:
        if self._own is not None:
            raise RuntimeError("__enter__")
        mpi = _core._mpi()
        comm, root = self._comm, self._root
        rank, size = comm.Get_rank(), comm.Get_size()
        tasks = comm.Dup()
        workers = comm.Split(mpi.UNDEFINED if rank == root else 0, rank)
        self._own = (tasks, workers)
        if rank != root:
            _worker.serve(tasks, root, workers)
            return None
        executor = MPIPoolExecutor(**self._options)
        place: tuple[Any, list[int], bool] = (
            (tasks, [r for r in range(size) if r != root], False) if size > 1 else (None, [], False))
        executor._place = lambda: place
        self._executor = executor
        return executor

    def __exit__(self, *args: Any) -> None:
        assert self._own is not None
        tasks, workers = self._own
        executor, self._executor = self._executor, None
        if executor is not None:
            try:
                executor.shutdown(wait=True)
            finally:
                for rank in range(tasks.Get_size()):
                    if rank != self._root:
                        tasks.send(None, dest=rank, tag=_core.STOP_TAG)
        self._own = None
        if workers != _core._mpi().COMM_NULL:
            workers.Free()
        tasks.Free()


# ---- thread and process pools with the MPI executor's map ----


class ThreadPoolExecutor(cf.ThreadPoolExecutor):
    """``concurrent.futures.ThreadPoolExecutor`` with ``map(..., unordered=)`` and ``starmap``.

    Its threads are real OS threads of the calling rank's process (no MPI
    calls in them); a rank waiting for its futures (``result``, this
    package's ``wait``) is charged the wall time it waited (``_core.ThreadWait``).
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:  # type: ignore[type-arg]
        """Schedule ``fn(*args, **kwargs)`` on a thread; waiting on its future charges the wall time."""
        future = super().submit(fn, *args, **kwargs)
        future.__class__ = _core.ThreadFuture  # the same object, with waits a rank is charged for
        return future

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            timeout: float | None = None, chunksize: int = 1, buffersize: int | None = None,
            unordered: bool = False) -> Iterator[Any]:
        return self.starmap(fn, zip(*iterables), timeout, chunksize, buffersize, unordered)

    def starmap(self, fn: Callable[..., Any], iterable: Iterable[Any], timeout: float | None = None,
                chunksize: int = 1, buffersize: int | None = None,
                unordered: bool = False) -> Iterator[Any]:
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        argss = iter(iterable)
        chunks = iter(lambda: list(itertools.islice(argss, chunksize)), [])
        return map_results(self, functools.partial(_core.run_chunk, fn), chunks, timeout,
                           buffersize, unordered)


class ProcessPoolExecutor(cf.ProcessPoolExecutor):
    """``concurrent.futures.ProcessPoolExecutor`` with ``map(..., unordered=)`` and ``starmap``.

    Not usable inside a simcluster run: a rank is not an OS process to fork.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if _core.inside_rank():
            raise RuntimeError("ProcessPoolExecutor: simcluster ranks share one OS process and "
                               "cannot start processes; use MPIPoolExecutor or ThreadPoolExecutor")
        super().__init__(*args, **kwargs)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            timeout: float | None = None, chunksize: int = 1, buffersize: int | None = None,
            unordered: bool = False) -> Iterator[Any]:
        return self.starmap(fn, zip(*iterables), timeout, chunksize, buffersize, unordered)

    def starmap(self, fn: Callable[..., Any], iterable: Iterable[Any], timeout: float | None = None,
                chunksize: int = 1, buffersize: int | None = None,
                unordered: bool = False) -> Iterator[Any]:
        argss = iter(iterable)
        chunks = iter(lambda: list(itertools.islice(argss, chunksize)), [])
        return map_results(self, functools.partial(_core.run_chunk, fn), chunks, timeout,
                           buffersize, unordered)
