"""``mpi4py.util.pool``: ``multiprocessing.pool``'s API over an executor.

``Pool`` runs the tasks on ``mpi4py.futures.MPIPoolExecutor``'s worker ranks,
``ThreadPool`` on threads of the calling rank (``mpi4py.futures.ThreadPoolExecutor``);
a subclass may name another ``Executor`` (with ``map``/``starmap`` taking
``chunksize`` and ``unordered``). ``apply_async``/``map_async`` give
``AsyncResult``s over the executor's futures; waiting on one makes an MPI
executor's master progress, and a wait on threads costs the rank the wall
time it waited (``simcluster.MPI.futures._core``).

As in mpi4py, ``maxtasksperchild`` and ``context`` are not supported (a
``UserWarning``), and ``get`` on a result its pool's ``terminate`` cancelled
raises ``TimeoutError``.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..futures import _core
from ..futures.pool import MPIPoolExecutor, ThreadPoolExecutor
from ..futures.util import collect, compose

__all__ = ["Pool", "ThreadPool", "AsyncResult", "ApplyResult", "MapResult"]


def _flatten(lists: list[list[Any]]) -> list[Any]:
    return [value for chunk in lists for value in chunk]


class Pool:
    """A pool of MPI worker ranks with ``multiprocessing.pool.Pool``'s methods."""

    Executor: type[cf.Executor] = MPIPoolExecutor

    def __init__(self, processes: int | None = None, initializer: Callable[..., Any] | None = None,
                 initargs: Iterable[Any] = (), **kwargs: Any) -> None:
        """Make the pool; ``kwargs`` go to the executor (``MPIPoolExecutor``'s options).

        Raises:
            ValueError: ``processes`` is below 1.
            TypeError: ``initializer`` is not callable.
        """
        if processes is not None and processes < 1:
            raise ValueError("number of processes must be at least 1")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        for name in ("maxtasksperchild", "context"):
            if kwargs.pop(name, None) is not None:
                warnings.warn(f"argument {name!r} is not supported", UserWarning, stacklevel=2)
        self.executor: Any = self.Executor(processes, initializer=initializer,  # type: ignore[call-arg]
                                           initargs=tuple(initargs), **kwargs)

    # -- one call --

    def apply(self, func: Callable[..., Any], args: Iterable[Any] = (),
              kwds: dict[str, Any] = {}) -> Any:  # noqa: B006 - multiprocessing's signature
        """``func(*args, **kwds)`` on a worker; wait for its result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func: Callable[..., Any], args: Iterable[Any] = (),
                    kwds: dict[str, Any] = {},  # noqa: B006 - multiprocessing's signature
                    callback: Callable[[Any], Any] | None = None,
                    error_callback: Callable[[BaseException], Any] | None = None) -> ApplyResult:
        """Submit ``func(*args, **kwds)``; return its ``ApplyResult``."""
        future = self.executor.submit(func, *args, **kwds)
        return ApplyResult(future, callback, error_callback)

    # -- many calls --

    def map(self, func: Callable[..., Any], iterable: Iterable[Any],
            chunksize: int | None = None) -> list[Any]:
        """``list(map(func, iterable))`` on the workers, in chunks; wait for the list."""
        values: list[Any] = self.map_async(func, iterable, chunksize).get()
        return values

    def map_async(self, func: Callable[..., Any], iterable: Iterable[Any],
                  chunksize: int | None = None, callback: Callable[[Any], Any] | None = None,
                  error_callback: Callable[[BaseException], Any] | None = None) -> MapResult:
        """Submit ``map(func, iterable)`` in chunks; return a ``MapResult`` of the list."""
        return self._chunked(func, [(x,) for x in iterable], chunksize, callback, error_callback)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                chunksize: int | None = None) -> list[Any]:
        """``list(itertools.starmap(func, iterable))`` on the workers; wait for the list."""
        values: list[Any] = self.starmap_async(func, iterable, chunksize).get()
        return values

    def starmap_async(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                      chunksize: int | None = None, callback: Callable[[Any], Any] | None = None,
                      error_callback: Callable[[BaseException], Any] | None = None) -> MapResult:
        """Submit ``starmap(func, iterable)`` in chunks; return a ``MapResult`` of the list."""
        return self._chunked(func, [tuple(a) for a in iterable], chunksize, callback,
                             error_callback)

    def _chunked(self, func: Callable[..., Any], argss: list[tuple[Any, ...]],
                 chunksize: int | None, callback: Callable[[Any], Any] | None,
                 error_callback: Callable[[BaseException], Any] | None) -> MapResult:
        if chunksize is None:  # multiprocessing's rule: about four chunks per worker
            chunksize, extra = divmod(len(argss), self._workers() * 4)
            chunksize += bool(extra)
        chunksize = max(chunksize, 1)
        task = functools.partial(_core.run_chunk, func)
        futures = [self.executor.submit(task, argss[i:i + chunksize])
                   for i in range(0, len(argss), chunksize)]
        return MapResult(compose(collect(futures), _flatten), callback, error_callback)

    def _workers(self) -> int:
        executor = self.executor
        count = getattr(executor, "num_workers", None) or getattr(executor, "_max_workers", 1)
        return max(int(count or 1), 1)

    def imap(self, func: Callable[..., Any], iterable: Iterable[Any],
             chunksize: int = 1) -> Iterator[Any]:
        """``map(func, iterable)`` on the workers, results in order as they are waited for."""
        results: Iterator[Any] = self.executor.map(func, iterable, chunksize=chunksize)
        return results

    def imap_unordered(self, func: Callable[..., Any], iterable: Iterable[Any],
                       chunksize: int = 1) -> Iterator[Any]:
        """Like ``imap``, results in the order they complete."""
        results: Iterator[Any] = self.executor.map(func, iterable, chunksize=chunksize,
                                                   unordered=True)
        return results

    def istarmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                 chunksize: int = 1) -> Iterator[Any]:
        """``itertools.starmap(func, iterable)`` on the workers, results in order."""
        results: Iterator[Any] = self.executor.starmap(func, iterable, chunksize=chunksize)
        return results

    def istarmap_unordered(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                           chunksize: int = 1) -> Iterator[Any]:
        """Like ``istarmap``, results in the order they complete."""
        results: Iterator[Any] = self.executor.starmap(func, iterable, chunksize=chunksize,
                                                       unordered=True)
        return results

    # -- the pool's life --

    def close(self) -> None:
        """Take no more tasks; those submitted still run."""
        self._shutdown(wait=False)

    def terminate(self) -> None:
        """Take no more tasks and cancel those not started."""
        self._shutdown(wait=False, cancel_futures=True)

    def join(self) -> None:
        """Wait until the tasks are done and the workers are gone."""
        self._shutdown(wait=True)

    def _shutdown(self, wait: bool, cancel_futures: bool = False) -> None:
        executor = self.executor
        if isinstance(executor, MPIPoolExecutor):
            executor.shutdown(wait=wait, cancel_futures=cancel_futures)
        else:  # threads: a real wait, charged to the rank as wall time
            _core.charge_wall(lambda: executor.shutdown(wait=wait, cancel_futures=cancel_futures))

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *args: Any) -> None:
        self.terminate()


class ThreadPool(Pool):
    """A ``Pool`` whose workers are threads of the calling rank (no MPI calls in the tasks)."""

    Executor = ThreadPoolExecutor


class AsyncResult:
    """The result of an asynchronous call: a future, and the callbacks given with it."""

    def __init__(self, future: cf.Future, callback: Callable[[Any], Any] | None = None,  # type: ignore[type-arg]
                 error_callback: Callable[[BaseException], Any] | None = None) -> None:
        """Wrap ``future``; ``callback(result)`` or ``error_callback(exception)`` runs once it is done."""
        self._future = future
        if callback is not None or error_callback is not None:
            def done(future: cf.Future) -> None:  # type: ignore[type-arg]
                if future.cancelled():
                    return
                exc = future.exception(0)
                if exc is None:
                    if callback is not None:
                        callback(future.result(0))
                elif error_callback is not None:
                    error_callback(exc)

            future.add_done_callback(done)

    def get(self, timeout: float | None = None) -> Any:
        """The result, once it arrives (``timeout`` seconds at most: else ``TimeoutError``).

        Raises:
            TimeoutError: not there in time, or the call was cancelled (``terminate``).
            Exception: the one the call raised.
        """
        self.wait(timeout)
        future = self._future
        if not _core.finished(future) or future.cancelled():
            raise TimeoutError
        return future.result(0)

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the result is there, or ``timeout`` seconds pass."""
        _core.wait([self._future], timeout)

    def ready(self) -> bool:
        """Whether the call has completed."""
        return bool(self._future.done())

    def successful(self) -> bool:
        """Whether the call completed without raising.

        Raises:
            ValueError: it has not completed yet.
        """
        future = self._future
        if not future.done():
            raise ValueError(f"{self!r} not ready")
        return not future.cancelled() and future.exception(0) is None


class ApplyResult(AsyncResult):
    """What ``apply_async`` returns."""


class MapResult(AsyncResult):
    """What ``map_async`` and ``starmap_async`` return."""
