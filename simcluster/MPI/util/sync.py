"""``mpi4py.util.sync``: ``Sequential``, ``Counter``, ``Mutex``, ``Condition``, ``Semaphore``.

mpi4py builds these on one-sided windows: a counter is a number in rank
``root``'s window that other ranks ``Fetch_and_op`` without ``root`` taking
part; a mutex is an MCS queue lock (a tail in rank 0's window, each rank
spinning on a flag in its own). simcluster does not simulate windows, and
a user rank cannot serve requests for others, so here:

- **State lives with the run.** Constructing an object is collective, as
  ``Win.Allocate`` is: the ranks ``Dup`` the communicator (a private
  context for this object's messages) and the owning rank (``root`` for a
  counter, 0 for the others) publishes the shared state, which the others
  find through a ``bcast`` of its key. Every rank of a run on the memory
  transport lives in one process, so they all hold the same state object.
- **A one-sided operation is a visit.** Reading or updating the state
  (``Counter.next``, joining or leaving a mutex's queue, a condition's
  waiters) costs the calling rank the round trip of a small message to the
  owning rank under the run's latency model, and takes effect, atomically,
  when the request would arrive: operations are ordered by virtual time, ties
  by the engine's seeded order, so a seed gives the same values every run.
  The owner's own operations are local and free, as in a window.
- **Every wait is a message.** A rank queued on a mutex receives the lock
  from the rank before it in the queue (its ``release`` sends it); a rank in
  ``Condition.wait`` receives its wake-up from ``notify``; ``Sequential``
  passes a token from rank to rank, as mpi4py does. So waits advance virtual
  time, and a program that never releases or notifies ends in the engine's
  deadlock report, naming the waiting ranks.
- A failed ``Mutex.acquire(blocking=False)`` counts as a poll (it costs the
  run's ``poll_cost``), so ``while not mutex.acquire(False): pass`` advances.

Results are mpi4py's: the same values, the same ``RuntimeError``/``ValueError``
for misuse. Differences: ``free()`` is local (mpi4py's ``Win.free`` is
collective); the shared state needs every rank in one process, so these
classes raise ``NotImplementedError`` on the shm, tcp and mpi transports
(``Sequential`` works everywhere: it is plain messages).

Rule 1: the shared state changes only inside a visit, which never yields to
another rank, so each change is atomic.
Rule 2: each lock hand-off and wake-up is exactly one message, received by
the rank it names; nothing is left unreceived.
"""

from __future__ import annotations

import array
import itertools
import random
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ... import MPI as _package
from ...matching import ANY_SOURCE as _SC_ANY_SOURCE
from .._blocking import READY, block, poll
from .._constants import ERR_RANK
from .._errors import error

MPI: Any = _package  # names the package sets up at import (constants, datatypes) are not visible to mypy

T = TypeVar("T")

__all__ = ["Condition", "Counter", "Mutex", "Semaphore", "Sequential"]

_HANDOFF, _WAKE, _FREED = 1, 2, 3  # tags on an object's private communicator
_VISIT_BYTES = 16  # what a one-sided request or reply counts, for its cost


class Sequential:
    """Run a block of code on one rank after another, in rank order (``with Sequential(comm):``)."""

    def __init__(self, comm: Any, tag: int = 0) -> None:
        self.comm = comm
        self.tag = int(tag)

    def __enter__(self) -> Sequential:
        self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def begin(self) -> None:
        """Wait until the rank before this one has ended its turn."""
        comm = self.comm
        rank = comm.Get_rank()
        if comm.Get_size() > 1 and rank > 0:
            comm.Recv((bytearray(), 0, MPI.BYTE), rank - 1, self.tag)

    def end(self) -> None:
        """End this rank's turn: let the next rank begin."""
        comm = self.comm
        rank, size = comm.Get_rank(), comm.Get_size()
        if size > 1 and rank < size - 1:
            comm.Send((bytearray(), 0, MPI.BYTE), rank + 1, self.tag)


# ---- where an object's shared state lives ----

_keys = itertools.count()
_published: dict[int, list[Any]] = {}
"""key -> [state, ranks still to attach]: held until every rank has found the state."""


class _Place:
    """One rank's way to an object's shared state: its owner, the cost of a visit, its messages."""

    __slots__ = ("comm", "sc", "rank", "size", "owner", "state", "ports", "me", "there")

    def __init__(self, comm: Any, owner: int, make: Callable[[], Any], what: str) -> None:
        base = MPI.Intracomm(comm)
        sc = base._st.sc
        if sc.transport != "memory":
            raise NotImplementedError(
                f"mpi4py.util.sync.{what}: simcluster keeps the state mpi4py holds in one-sided "
                f"windows with the run, which needs every rank in one process; this run uses the "
                f"{sc.transport} transport: run it on the memory transport (the default)")
        size = base.Get_size()
        if isinstance(owner, bool) or not isinstance(owner, int) or not 0 <= owner < size:
            raise error(ERR_RANK, sc.rank, f"sync.{what}(root={owner!r})",
                        f"the owning rank must be in range({size})",
                        "pass a rank of the communicator")
        self.comm = base.Dup()
        self.sc = self.comm._st.sc
        self.rank, self.size, self.owner = self.sc.rank, size, owner
        key = None
        if self.rank == owner:
            key = next(_keys)
            world_size = base._st.rank_state.world.size
            ports = self.sc.latency.bind(world_size, random.Random(0))
            _published[key] = [(make(), ports, self.sc.world_rank), size]
        key = self.comm.bcast(key, owner)
        entry = _published[key]
        (self.state, self.ports, self.there), entry[1] = entry[0], entry[1] - 1
        if entry[1] == 0:
            del _published[key]
        self.me = self.sc.world_rank

    def visit(self, apply: Callable[[], T]) -> T:
        """Apply ``apply`` to the state where it lives; cost the calling rank the round trip."""
        if self.rank == self.owner or self.ports.zero:
            return apply()
        self._travel(self.me, self.there)
        result = apply()
        self._travel(self.there, self.me)
        return result

    def _travel(self, src: int, dst: int) -> None:
        now = self.sc.now
        arrive = self.ports.transfer(src, dst, _VISIT_BYTES, now)[1]
        if arrive > now:
            block(self.sc.sleep(arrive - now))

    def send(self, dest: int, tag: int) -> None:
        """Send an empty message on the private communicator (it completes on its own)."""
        self.comm.Isend((bytearray(), 0, MPI.BYTE), dest, tag).Free()

    def receive(self, source: int, tag: int) -> None:
        """Wait for an empty message on the private communicator."""
        self.comm.Recv((bytearray(), 0, MPI.BYTE), source, tag)

    def close(self) -> None:
        self.comm.Free()


# ---- Counter ----


class _Count:
    __slots__ = ("value",)

    def __init__(self, typechar: str, start: Any) -> None:
        self.value = np.array(array.array(typechar, [start]), dtype=typechar)


class Counter:
    """A counter shared by the ranks of ``comm``, kept by rank ``root``.

    ``next()`` returns the value and adds ``step`` (or ``incr``) in one atomic
    step, whichever rank calls it; ``root`` need not call anything.
    """

    def __init__(self, start: Any = 0, step: Any = 1, *, typecode: str = "i",
                 comm: Any = MPI.COMM_SELF, info: Any = MPI.INFO_NULL, root: int = 0) -> None:
        self._typechar = MPI.Datatype.fromcode(typecode).typechar
        self._start = start
        self._step = step
        self._comm = comm
        typechar = self._typechar
        self._place: _Place | None = _Place(comm, root, lambda: _Count(typechar, start), "Counter")

    def __iter__(self) -> Counter:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, incr: Any = None) -> Any:
        """Return the counter's value and add ``incr`` (default: ``step``) to it, atomically."""
        place = self._place
        if place is None:
            raise RuntimeError("counter already freed")
        amount = array.array(self._typechar, [self._step if incr is None else incr])
        count: _Count = place.state

        def fetch_and_add() -> Any:
            before = count.value[0].item()
            if amount[0] != 0:
                np.add(count.value, np.frombuffer(amount, dtype=count.value.dtype), out=count.value)
            return before
        return place.visit(fetch_and_add)

    def free(self) -> None:
        """Let go of the counter (local; calling it again does nothing)."""
        if self._place is not None:
            self._place.close()
        self._place = None
        self._comm = MPI.COMM_NULL


# ---- Mutex ----


class _Queue:
    """A mutex's state: who holds it, who waits for it (first come, first served)."""

    __slots__ = ("holder", "waiting", "watchers")

    def __init__(self) -> None:
        self.holder: int | None = None
        self.waiting: deque[int] = deque()
        self.watchers: list[int] = []  # ranks stalled polling for it to come free


class Mutex:
    """A lock shared by the ranks of ``comm``; with ``recursive=True`` its holder may take it again."""

    def __init__(self, *, recursive: bool = False, comm: Any = MPI.COMM_SELF,
                 info: Any = MPI.INFO_NULL) -> None:
        self._recursive = bool(recursive)
        self._comm = comm
        self._held = 0  # this rank's hold count (0: not held)
        self._place: _Place | None = _Place(comm, 0, _Queue, "Mutex")

    def _live(self) -> _Place:
        if self._place is None:
            raise RuntimeError("mutex already freed")
        return self._place

    def _acquire(self, blocking: bool = True) -> bool:
        place = self._live()
        queue: _Queue = place.state
        me = place.rank

        def join() -> tuple[bool, int | None]:
            if queue.holder is None and not queue.waiting:
                queue.holder = me
                return True, None
            if not blocking:
                return False, None
            before = queue.waiting[-1] if queue.waiting else queue.holder
            queue.waiting.append(me)
            return False, before
        got, before = place.visit(join)
        if before is not None:
            place.receive(before, _HANDOFF)  # the rank ahead of this one hands the lock over
            got = True
        self._held = int(got)
        return got

    def _release(self) -> None:
        place = self._live()
        queue: _Queue = place.state

        def leave() -> tuple[int | None, list[int]]:
            successor = queue.waiting.popleft() if queue.waiting else None
            queue.holder = successor
            watchers: list[int] = []
            if successor is None:
                watchers, queue.watchers = queue.watchers, []
            return successor, watchers
        successor, watchers = place.visit(leave)
        if successor is not None:
            place.send(successor, _HANDOFF)
        for rank in watchers:
            place.send(rank, _FREED)
        self._held = 0

    def _until_free(self) -> Any:
        """What a stalled poller waits for: the message ``release`` sends when the lock comes free."""
        place = self._live()
        queue: _Queue = place.state
        if queue.holder is None and not queue.waiting:
            return READY
        queue.watchers.append(place.rank)
        return place.sc.irecv(src=_SC_ANY_SOURCE, tag=_FREED)

    def _release_save(self) -> int | None:
        state = self._held if self._recursive else None
        self._release()
        return state

    def _acquire_restore(self, state: int | None) -> None:
        self._acquire()
        if self._recursive and state is not None:
            self._held = state

    def __enter__(self) -> Mutex:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; wait for it when ``blocking``, else return False at once when it is held.

        Raises:
            RuntimeError: the mutex was freed, or this rank holds it already (not recursive).
        """
        self._live()
        if self._held:
            if self._recursive:
                self._held += 1
                return True
            raise RuntimeError("cannot acquire already held mutex")
        got = self._acquire(blocking)
        if not got:
            poll(lambda: False, self._until_free, lambda: "sync.Mutex.acquire(blocking=False)")
        return got

    def release(self) -> None:
        """Give the lock back (a recursive mutex: once per acquire); the next waiter gets it."""
        self._live()
        if not self._held:
            raise RuntimeError("cannot release unheld mutex")
        if self._recursive and self._held > 1:
            self._held -= 1
            return
        self._release()

    def locked(self) -> bool:
        """Return whether this rank holds the lock."""
        self._live()
        return self._held > 0

    def count(self) -> int:
        """Return how many times this rank holds the lock (0 or 1 unless recursive)."""
        self._live()
        return self._held

    def free(self) -> None:
        """Release the lock if held, and let go of the mutex (local; again does nothing)."""
        if self._place is not None:
            if self._held:
                self._release()
            self._place.close()
        self._place = None
        self._comm = MPI.COMM_NULL


# ---- Condition ----


class _Waiters:
    __slots__ = ("ranks",)

    def __init__(self) -> None:
        self.ranks: deque[int] = deque()


class Condition:
    """A condition variable over a ``Mutex`` (its own recursive one unless ``mutex`` is given)."""

    def __init__(self, mutex: Mutex | None = None, *, recursive: bool = True,
                 comm: Any = MPI.COMM_SELF, info: Any = MPI.INFO_NULL) -> None:
        if mutex is None:
            self._mutex = Mutex(recursive=recursive, comm=comm, info=info)
            self._mutex_free: Callable[[], None] = self._mutex.free
        else:
            self._mutex = mutex
            self._mutex_free = lambda: None
            comm = mutex._comm
        self._comm = comm
        self._place: _Place | None = _Place(comm, 0, _Waiters, "Condition")

    def _live(self) -> _Place:
        if self._place is None:
            raise RuntimeError("condition already freed")
        return self._place

    def __enter__(self) -> Condition:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, blocking: bool = True) -> bool:
        """Take the underlying mutex."""
        self._live()
        return self._mutex.acquire(blocking)

    def release(self) -> None:
        """Give the underlying mutex back."""
        self._live()
        self._mutex.release()

    def locked(self) -> bool:
        """Return whether this rank holds the underlying mutex."""
        return self._mutex.locked()

    def wait(self) -> bool:
        """Release the mutex, wait to be notified, take the mutex again; return True.

        Raises:
            RuntimeError: the condition was freed, or this rank does not hold the mutex.
        """
        place = self._live()
        if not self.locked():
            raise RuntimeError("cannot wait on unheld mutex")
        waiters: _Waiters = place.state
        me = place.rank
        place.visit(lambda: waiters.ranks.append(me))
        state = self._mutex._release_save()
        place.receive(MPI.ANY_SOURCE, _WAKE)
        self._mutex._acquire_restore(state)
        return True

    def wait_for(self, predicate: Callable[[], T]) -> T:
        """Wait until ``predicate()`` is true (checked first, then after each wake-up); return it."""
        result = predicate()
        while not result:
            self.wait()
            result = predicate()
        return result

    def notify(self, n: int = 1) -> int:
        """Wake up to ``n`` waiting ranks, first come first served; return how many were woken."""
        place = self._live()
        if not self.locked():
            raise RuntimeError("cannot notify on unheld mutex")
        waiters: _Waiters = place.state
        most = max(0, min(n, place.size))

        def take() -> list[int]:
            return [waiters.ranks.popleft() for _ in range(min(most, len(waiters.ranks)))]
        woken = place.visit(take)
        for rank in woken:
            place.send(rank, _WAKE)
        return len(woken)

    def notify_all(self) -> int:
        """Wake every waiting rank; return how many were woken."""
        return self.notify((1 << 31) - 1)

    def free(self) -> None:
        """Release the mutex if held, free it if it is the condition's own, let go of the condition."""
        mutex = self._mutex
        if mutex._place is not None and mutex.locked():
            mutex._release()
        self._mutex_free()
        if self._place is not None:
            self._place.close()
        self._place = None
        self._comm = MPI.COMM_NULL


# ---- Semaphore ----


class Semaphore:
    """A semaphore shared by the ranks of ``comm``: a ``Counter`` guarded by a ``Condition``."""

    def __init__(self, value: int = 1, *, bounded: bool = True, comm: Any = MPI.COMM_SELF,
                 info: Any = MPI.INFO_NULL) -> None:
        if value < 0:
            raise ValueError("initial value must be non-negative")
        self._bounded = bool(bounded)
        self._counter = Counter(value, comm=comm, info=info)
        self._condvar = Condition(recursive=False, comm=comm, info=info)
        self._comm = comm

    def __enter__(self) -> Semaphore:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, blocking: bool = True) -> bool:
        """Take one unit, waiting for one when ``blocking``; else return False when none is left."""
        with self._condvar:
            while self._counter.next(0) == 0:
                if not blocking:
                    return False
                self._condvar.wait()
            self._counter.next(-1)
            return True

    def release(self, n: int = 1) -> None:
        """Give back ``n`` units and wake up to ``n`` waiting ranks.

        Raises:
            ValueError: ``n < 1``, or (bounded) more units than the initial value would be held.
        """
        if n < 1:
            raise ValueError("increment must be one or more")
        with self._condvar:
            if self._bounded and self._counter.next(0) + n > self._counter._start:
                raise ValueError("semaphore released too many times")
            self._counter.next(n)
            self._condvar.notify(n)

    def free(self) -> None:
        """Let go of the semaphore's counter and condition."""
        self._counter.free()
        self._condvar.free()
        self._comm = MPI.COMM_NULL
