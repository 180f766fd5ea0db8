"""The master and the workers of ``mpi4py.futures`` on simcluster: tasks as messages between ranks.

Owns the protocol between an executor's master rank and its worker ranks,
the master's bookkeeping (futures pending, running, done) and the waits on
futures; ``_worker`` runs the workers' side, ``pool`` builds the executors
of mpi4py's API over both.

A virtual rank may make MPI calls only from its own stack, so there is no
manager thread: the master makes progress inside its own calls. ``submit``
(and ``map``) sends what idle workers can take and collects results already
there; ``Future.result``, ``exception``, this package's ``wait`` and
``as_completed``, map iteration and ``shutdown`` do the same and then block in
a receive until what they wait for is done. A worker runs a task as its own
compute (its measured time, its sleeps), so a task's result reaches the
master at the worker's virtual time plus the message's.

Messages (lowercase p2p on a communicator of the executor's own, tag = the
executor's number, 0 for "stop"): master -> worker ``("setup", info)``,
``("init", fn, args)``, ``("call", id, fn, args, kwargs)``, ``None`` (stop);
worker -> master ``(id, ok, value, traceback_text)``.

Rule 1: a future leaves ``Master.pending`` only for a worker that is idle;
each worker holds at most one task. Rule 2: bookkeeping is updated before a
future is completed, since its callbacks may call back into the master.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...engine import sync as _sync

BACKOFF = 0.001
"""Virtual seconds between two looks for a result while a wait with a timeout goes on (mpi4py's default)."""
STOP_TAG = 0


def _mpi() -> Any:
    from ... import MPI  # the package sets up its names at import: late, to import cleanly

    return MPI


# ---- per-rank state ----

_ranks: dict[int, dict[str, Any]] = {}
"""State of each rank that serves or drives a static pool, by ``id`` of its synchronous rank.

mpi4py is one module for every rank of a run (``_rank_modules``), so what
one process would keep in module globals is kept here, per rank.
"""


def inside_rank() -> bool:
    """Whether the caller runs on a synchronous rank's stack."""
    return _sync.current() is not None


def _rank_key() -> int:
    rank = _sync.current()
    return 0 if rank is None else id(rank)


def rank_state() -> dict[str, Any]:
    """The calling rank's own state (created empty)."""
    return _ranks.setdefault(_rank_key(), {})


def peek_rank_state() -> dict[str, Any]:
    """The calling rank's own state, without creating it (empty when there is none)."""
    return _ranks.get(_rank_key(), {})


def drop_rank_state() -> None:
    _ranks.pop(_rank_key(), None)


def get_comm_workers() -> Any:
    """The intracommunicator of the worker ranks, from a task running on a worker."""
    comm = peek_rank_state().get("workers")
    if comm is None:
        raise RuntimeError("communicator is not accessible")
    return comm


# ---- results and errors ----


class RemoteTraceback(Exception):
    """The traceback of an exception raised on a worker, as its ``__cause__`` on the master."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.tb = text

    def __str__(self) -> str:
        return self.tb


def _reply(exc: BaseException) -> tuple[bool, Any, str]:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return False, exc, f'\n"""\n{text}"""'


def _failed(value: BaseException, text: str) -> BaseException:
    if text and value.__cause__ is None:
        value.__cause__ = RemoteTraceback(text)
    return value


def run_chunk(fn: Callable[..., Any], chunk: Sequence[tuple[Any, ...]]) -> list[Any]:
    """A task of ``map``: ``fn`` over a chunk of argument tuples."""
    return [fn(*args) for args in chunk]


class Future(cf.Future):  # type: ignore[type-arg]
    """A future of an MPI executor: waiting on it makes its master progress (there is no thread).

    ``result`` and ``exception`` drive the master; ``concurrent.futures.wait``
    and ``as_completed`` do not (they wait on a thread that does not exist
    here): use ``mpi4py.futures.wait`` and ``as_completed``.
    """

    def __init__(self, master: Master) -> None:
        super().__init__()
        self._master = master

    def done(self) -> bool:
        """Whether it is done; the master takes the results already there first (so polling works)."""
        if not cf.Future.done(self):
            self._master.progress()
        return cf.Future.done(self)

    def result(self, timeout: float | None = None) -> Any:
        self._master.progress_until(lambda: finished(self), timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._master.progress_until(lambda: finished(self), timeout)
        return super().exception(0)


def finished(future: cf.Future) -> bool:  # type: ignore[type-arg]
    """``future.done()`` without making any master progress."""
    return cf.Future.done(future)


# ---- the master ----


class Master:
    """One executor's master side: its workers, its queue, its running tasks.

    ``workers`` are ranks of ``comm`` (remote ranks for an intercommunicator);
    an empty list with ``comm=None`` runs the tasks on the master itself, one
    at a time, when it waits (a pool of one, as mpi4py's on a communicator of one).
    """

    def __init__(self, comm: Any, workers: Sequence[int], tag: int, owned: bool) -> None:
        self.comm = comm
        self.tag = tag
        self.owned = owned  # spawned for this executor: stopped and disconnected at shutdown
        self.idle: deque[int] = deque(workers)
        self.workers = list(workers)
        self.pending: deque[tuple[Future, tuple[Any, ...]]] = deque()
        self.running: dict[int, tuple[Future, int]] = {}
        self.next_id = 0
        self.broken: str | None = None

    # -- sending --

    def setup(self, info: dict[str, Any], initializer: Callable[..., Any] | None,
              initargs: tuple[Any, ...]) -> None:
        """Tell every worker what to import; run ``initializer`` there and wait for them all."""
        if self.comm is None:
            if initializer is not None:
                try:
                    initializer(*initargs)
                except Exception as exc:  # noqa: BLE001 - the executor is broken, as mpi4py's
                    self.broken = f"initializer failed: {exc!r}"
            return
        for worker in self.workers:
            self.comm.send(("setup", info), dest=worker, tag=self.tag)
        if initializer is None:
            return
        for worker in self.workers:
            self.comm.send(("init", initializer, tuple(initargs)), dest=worker, tag=self.tag)
        for _ in self.workers:
            _id, ok, value, _text = self.comm.recv(source=_mpi().ANY_SOURCE, tag=self.tag)
            if not ok and self.broken is None:
                self.broken = f"initializer failed on a worker: {value!r}"

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future:
        future = Future(self)
        self.pending.append((future, (fn, args, kwargs)))
        self.progress()
        return future

    def dispatch(self, local: bool = False) -> None:
        """Send pending tasks to idle workers (Rule 1); ``local``: run them here, for a pool of none."""
        if self.comm is None:
            while local and self.pending:
                future, (fn, args, kwargs) = self.pending.popleft()
                if future.set_running_or_notify_cancel():
                    try:
                        value = fn(*args, **kwargs)
                    except Exception as exc:  # noqa: BLE001 - the task's failure is its result
                        future.set_exception(exc)
                    else:
                        future.set_result(value)
            return
        while self.pending and self.idle:
            future, (fn, args, kwargs) = self.pending.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            worker = self.idle.popleft()
            task_id = self.next_id
            self.next_id += 1
            try:
                self.comm.send(("call", task_id, fn, args, kwargs), dest=worker, tag=self.tag)
            except Exception as exc:  # noqa: BLE001 - e.g. fn does not pickle: that task fails
                self.idle.appendleft(worker)
                future.set_exception(exc)
                continue
            self.running[task_id] = (future, worker)

    # -- receiving --

    def receive(self, wait: bool) -> bool:
        """Take one result from a worker (waiting for it if ``wait``); return whether one came."""
        if not self.running:
            return False
        mpi = _mpi()
        if not wait and not self.comm.iprobe(source=mpi.ANY_SOURCE, tag=self.tag):
            return False
        task_id, ok, value, text = self.comm.recv(source=mpi.ANY_SOURCE, tag=self.tag)
        future, worker = self.running.pop(task_id)
        self.idle.append(worker)  # Rule 2: the books first, then the future's callbacks
        if ok:
            future.set_result(value)
        else:
            future.set_exception(_failed(value, text))
        return True

    def progress(self) -> None:
        """Send what idle workers can take, and take every result already there; never waits."""
        self.dispatch()
        while self.receive(False):
            self.dispatch()

    def progress_until(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Progress until ``done()`` or ``timeout`` virtual seconds have passed; return ``done()``.

        Without a timeout the master blocks in a receive (it resumes when a
        result arrives); with one it looks every ``BACKOFF`` virtual seconds.
        """
        if done():
            return True
        mpi = _mpi()
        deadline = None if timeout is None else mpi.Wtime() + max(timeout, 0.0)
        while True:
            self.progress()
            if done():
                return True
            if self.comm is None:
                self.dispatch(local=True)
                return done()
            if not self.running:
                return done()  # nothing left that could finish it
            if deadline is None:
                self.receive(True)
                continue
            left = deadline - mpi.Wtime()
            if left <= 0:
                return False
            time.sleep(min(BACKOFF, left))  # time.sleep inside a rank: a virtual sleep

    def drain(self, cancel: bool) -> None:
        """Wait for every task (after cancelling those not started, with ``cancel``)."""
        if cancel:
            while self.pending:
                future, _task = self.pending.popleft()
                future.cancel()
        self.progress_until(lambda: not self.pending and not self.running)

    def stop(self) -> None:
        """Stop this executor's own (spawned) workers and let go of them."""
        if self.comm is None or not self.owned:
            return
        spawned = peek_rank_state().get("spawned")
        if spawned is not None and self in spawned:
            spawned.remove(self)
        for worker in self.workers:
            self.comm.send(None, dest=worker, tag=STOP_TAG)
        disconnect = getattr(self.comm, "Disconnect", None)
        if disconnect is not None:
            disconnect()
        self.comm = None


# ---- waiting on futures of either kind ----


class ThreadWait:
    """A rank waiting for OS threads it started: the wall time that passes is its virtual time.

    The engine sees none of such a wait, and the threads run in wall time
    whichever rank the engine runs meanwhile. So the rank waits in slices of
    at most ``BACKOFF`` wall seconds and, between two, sleeps (virtually) the
    wall time since the last slice ended, switched-out time included: the
    other ranks run in the meantime, and a thread's progress and its rank's
    clock stay within a slice of each other, as in a process. The last part
    is owed (``engine.sync.owe``), not slept, so that a wait that ends does
    not hand the other ranks wall time its threads could use. Not
    reproducible, as threads are not. Outside a rank it is a plain wait.
    """

    def __init__(self) -> None:
        self.rank = _sync.current()
        self.mark = _wall()
        if self.rank is not None:
            _sync.stop_clock(self.rank, "thread wait")  # not compute: a wait

    def slice(self, wait: Callable[[float], Any], step: float | None, more: Callable[[], bool]) -> Any:
        """``wait(timeout)`` for at most a slice; sleep the wall time since the last one if ``more()``."""
        rank = self.rank
        if rank is None:
            return wait(step)  # type: ignore[arg-type]
        out = wait(BACKOFF if step is None else min(step, BACKOFF))
        if more():
            now = _wall()
            spent, self.mark = now - self.mark, now
            if spent > 0:
                _sync.block(rank.comm.sleep(spent), rank)
        return out

    def close(self) -> None:
        """The wait is over: owe the rest."""
        rank = self.rank
        if rank is not None:
            self.rank = None
            _sync.owe(rank, max(_wall() - self.mark, 0.0))
            _sync.start_clock(rank)


def charge_wall(wait: Callable[[], Any]) -> Any:
    """Run ``wait()``, one real wait for OS threads that cannot be sliced; the rank owes its wall time."""
    waiting = ThreadWait()
    try:
        return wait()
    finally:
        waiting.close()


def _clock(mpi: bool) -> Callable[[], float]:
    """What a timeout counts: the rank's virtual time while MPI futures are waited for, else wall
    time (a wait for threads only: ``ThreadWait`` keeps the rank's clock with it)."""
    return _mpi().Wtime if mpi and _sync.current() is not None else _wall


def _wall() -> float:
    """Real monotonic seconds (``time.monotonic`` reads the rank's virtual clock inside a rank)."""
    return float(getattr(time.monotonic, "__wrapped__", time.monotonic)())


class DerivedFuture(cf.Future):  # type: ignore[type-arg]
    """A future completed by callbacks of ``sources`` (``collect``, ``compose``, ``Pool.map_async``).

    Waiting on it waits on its sources the way ``wait`` does, so the masters
    of MPI futures among them progress.
    """

    def __init__(self, sources: Sequence[cf.Future]) -> None:  # type: ignore[type-arg]
        super().__init__()
        self._sources = list(sources)

    def done(self) -> bool:
        """Whether it is done; the masters of its sources take the results already there first."""
        if not cf.Future.done(self):
            for master in _leaves(self._sources)[0]:
                master.progress()
        return cf.Future.done(self)

    def result(self, timeout: float | None = None) -> Any:
        _wait_all({self}, lambda: finished(self), timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        _wait_all({self}, lambda: finished(self), timeout)
        return super().exception(0)


class ThreadFuture(cf.Future):  # type: ignore[type-arg]
    """A thread's future (``ThreadPoolExecutor.submit``): a rank waiting on it is charged the wall time."""

    def result(self, timeout: float | None = None) -> Any:
        _wait_all({self}, lambda: finished(self), timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        _wait_all({self}, lambda: finished(self), timeout)
        return super().exception(0)


def _leaves(fs: Iterable[cf.Future]) -> tuple[list[Master], list[cf.Future]]:  # type: ignore[type-arg]
    """The masters that complete ``fs`` and the futures among them (and their sources) of threads."""
    masters: list[Master] = []
    others: list[cf.Future] = []  # type: ignore[type-arg]
    todo = list(fs)
    seen: set[int] = set()
    while todo:
        future = todo.pop()
        if id(future) in seen:
            continue
        seen.add(id(future))
        master = getattr(future, "_master", None)
        sources = getattr(future, "_sources", None)
        if master is not None:
            if master not in masters:
                masters.append(master)
        elif sources is not None:
            todo.extend(sources)
        else:
            others.append(future)
    return masters, others


def wait(fs: Iterable[cf.Future], timeout: float | None = None,  # type: ignore[type-arg]
         return_when: str = cf.ALL_COMPLETED) -> cf._base.DoneAndNotDoneFutures:  # type: ignore[type-arg]
    """``concurrent.futures.wait`` that also makes MPI executors' masters progress."""
    fs = set(fs)

    def all_done() -> bool:
        done = [f for f in fs if finished(f)]
        if return_when == cf.FIRST_COMPLETED:
            return bool(done) or not fs
        if return_when == cf.FIRST_EXCEPTION and any(
                not f.cancelled() and f.exception(0) is not None for f in done):
            return True
        return len(done) == len(fs)

    _wait_all(fs, all_done, timeout)
    done = {f for f in fs if finished(f)}
    return cf._base.DoneAndNotDoneFutures(done, fs - done)


def _wait_all(fs: set[cf.Future], satisfied: Callable[[], bool],  # type: ignore[type-arg]
              timeout: float | None) -> bool:
    """Progress the masters of ``fs`` (and wait for thread futures) until ``satisfied()`` or timeout."""
    masters, others = _leaves(fs)
    clock = _clock(bool(masters))
    deadline = None if timeout is None else clock() + timeout
    # made whether or not the threads are done yet: a replayed run sees the same calls
    waiting = ThreadWait() if others else None
    try:
        while not satisfied():
            for master in masters:
                master.progress()
            if satisfied():
                return True
            left = None if deadline is None else deadline - clock()
            if left is not None and left <= 0:
                return False
            pending_others = [f for f in others if not finished(f)]
            if len(masters) == 1 and not others:
                return masters[0].progress_until(satisfied, left)
            if pending_others:
                assert waiting is not None
                step = BACKOFF if masters else left
                waiting.slice(lambda t: cf.wait(pending_others, t, cf.FIRST_COMPLETED), step,
                              lambda: not satisfied())
            elif any(m.running for m in masters):
                time.sleep(BACKOFF if left is None else min(BACKOFF, left))  # virtual, in a rank
            elif any(m.pending for m in masters):
                for master in masters:
                    master.dispatch(local=True)
            elif others:  # every thread future is done: their callbacks are finishing
                assert waiting is not None
                waiting.slice(lambda t: threading.Event().wait(t), BACKOFF / 10,
                              lambda: not satisfied())
            else:
                return satisfied()
        return True
    finally:
        if waiting is not None:
            waiting.close()


def as_completed(fs: Iterable[cf.Future],  # type: ignore[type-arg]
                 timeout: float | None = None) -> Any:
    """``concurrent.futures.as_completed`` that also makes MPI executors' masters progress."""
    pending = list(dict.fromkeys(fs))
    clock = _clock(bool(_leaves(pending)[0]))
    start = clock()
    while pending:
        left = None if timeout is None else timeout - (clock() - start)
        if left is not None and left < 0:
            raise cf.TimeoutError(f"{len(pending)} (of {len(pending)}) futures unfinished")
        if not _wait_all(set(pending), lambda: any(finished(f) for f in pending), left):
            raise cf.TimeoutError(f"{len(pending)} futures unfinished")
        for future in [f for f in pending if finished(f)]:
            pending.remove(future)
            yield future


# ---- the master's setup and exit ----


def main_info(main: bool, path: Sequence[str] | None, globals_: Any, env: Any,
              wdir: Any = None) -> dict[str, Any]:
    """What the workers need from the master: its ``__main__`` (unless ``main=False``), path,
    globals, environment and working directory."""
    target = None
    module = sys.modules.get("__main__")
    if main and module is not None:
        spec = getattr(module, "__spec__", None)
        file = getattr(module, "__file__", None)
        if spec is not None and getattr(spec, "name", None) not in (None, "__main__"):
            target = ("module", spec.name)
        elif isinstance(file, str) and file.endswith(".py") and os.path.isfile(file):
            target = ("file", os.path.abspath(file))
    return {"main": target, "path": list(path or ()), "globals": dict(globals_ or {}),
            "env": dict(env or {}), "wdir": None if wdir is None else os.fspath(wdir)}


def at_exit() -> None:
    """The rank's script ended: executors it left open finish their tasks and stop their workers.

    As mpi4py's exit handler does: without it a spawned worker would wait for
    its master for ever (the launcher calls this, ``mpirun._at_exit``).
    """
    for master in list(peek_rank_state().get("spawned", ())):
        master.drain(False)
        master.stop()
    drop_rank_state()
