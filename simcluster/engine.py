"""The discrete-event engine: virtual clock, event calendar, rank stepping, quiescence.

Owns the virtual clock (``now``), the event calendar and the rank tasks. Each rank
is a coroutine that the engine steps itself with ``coro.send()``; a rank runs
until it awaits a pending ``Request``, which it yields to us, and the engine
parks it there. A rank that awaits something foreign (an asyncio future: real
I/O, ``asyncio.sleep``) is handed to the running asyncio loop and comes back
when that future is done.

Rule 1: time only moves in ``_run_events``, to the earliest time that has
events once none is left at the current one. A rank runs at the time of the
event that resumed it, so every rank's clock is the engine's ``now`` while it
runs, and time never jumps while a rank is still runnable (or is awaiting
something foreign).
Rule 2: events due at one virtual time run in batches, each in an order drawn
from the run's seeded RNG (``_order``), so the same seed gives the same
schedule and another seed may give another one. A request completed by an
event resumes its rank right there (one event per message, not two); one
completed while a rank runs wakes its waiter in the next batch.
Rule 3: messages between one pair of ranks enter one FIFO channel whose
arrival times never decrease, so they are matched in send order whatever the
tie-breaking does (MPI's non-overtaking rule).
Rule 4: a latency model with port state (``Ports.ordered``) is charged for the
messages of one virtual instant together, once no event is left at that
instant (``_book``): each send port takes its messages in posting order (a
rank's own, then each helper's by ``Task.serial``), each receive port in the
order they reach it (wire time, then source rank, then posting order); then
each pair's messages enter their channel in posting order. So virtual times
do not depend on the order the seed runs
simultaneous events in; only what the program leaves open (ANY_SOURCE,
wait_any, polling) does.

No event left, no rank runnable, no foreign await, and some rank unfinished: that
is a deadlock, reported with each blocked call, its source line and the
wait-for cycle.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import inspect
import types
import itertools
import operator
import random
import time as _time
import zlib
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simcluster.transports import wire
from simcluster.transports.base import ACK, CTS, DATA, EAGER, RTS, Envelope, Transport
from simcluster.transports.wire import PACKED_NONE

from . import _awaits, _frames, _sync, _watchdog
from . import _schedule
from . import arrays as _arrays
from .errors import (
    BufferHazardError,
    DeadlockError,
    RunTimeoutError,
    SimclusterError,
    TruncationError,
)
from .matching import ANY_SOURCE, ANY_TAG
from .payload import describe
from .request import SPIN_LIMIT, Request, Status, _format_op, _WaitAny

if TYPE_CHECKING:
    from .comm import CollContext, Comm, Group
    from .latency import LatencyModel, Ports
    from .trace import Trace

CollectiveInfo = tuple[int, str, int, str, int, int]
"""What a rank inside a collective is doing: (context, comm name, number, call, comm rank, comm size)."""

# task states
READY, RUNNING, BLOCKED, FOREIGN, FINISHED = range(5)
_TASK_STATES = ("ready", "running", "blocked", "awaiting a foreign future", "finished")

_BREATHE_EVERY = 1 << 14  # events between returns to the asyncio loop (timeout checks)

_BARE_YIELD = object()
"""``Task.waiting`` after a bare yield: polling spins keep counting across it."""

_new_tuple = tuple.__new__  # builds an Envelope without the NamedTuple's Python-level __new__

_running: Task | None = None
"""The task being stepped right now, for ``simcluster.dist``; None between steps."""


def current_task() -> Task | None:
    """Return the rank task being stepped right now, if any."""
    return _running


class Task:
    """One rank: its coroutine and where it is parked."""

    __slots__ = ("rank", "coro", "comm", "state", "waiting", "result", "time", "spins", "collective",
                 "done_request", "serial")

    def __init__(self, rank: int, coro: Coroutine[Any, Any, Any]) -> None:
        self.rank = rank
        self.coro = coro
        self.comm: Comm | None = None
        self.state = READY
        self.waiting: Any = None
        self.result: Any = None
        self.time = 0.0
        self.spins = 0
        # the collective call in progress, for reports: (ctx, comm name, number, call, comm rank)
        self.collective: CollContext | None = None
        self.done_request: Request[Any] | None = None  # set for helper tasks (spawn)
        self.serial = 0  # 0 for a rank, n for its n-th helper: orders its simultaneous messages

    def __repr__(self) -> str:
        return f"<Task rank={self.rank} {_TASK_STATES[self.state]} t={self.time:.9g}>"


class _RecvRequest(Request[Any]):
    """A receive: also remembers what it asked for.

    ``_op`` holds only the call's name (``recv``, ``irecv``, ...); ``op``
    formats the whole call from the fields, so an idle receive costs no string.
    """

    __slots__ = ("comm", "src", "tag", "buf")

    @property
    def op(self) -> str:
        return _format_op((self._op, self.buf, self.src, self.tag))

    @property
    def _peer(self) -> int | None:  # type: ignore[override]
        """The world rank this receive waits on (None for ANY_SOURCE), worked out when asked."""
        src = self.src
        return None if src == ANY_SOURCE else self.comm._group.world_ranks[src]

    def __init__(self, engine: Engine, task: Task, op: str,
                 comm: Comm, src: int, tag: int, buf: Any, nonblocking: bool) -> None:
        # Every slot set once, here: one receive is built per message.
        self._engine = engine
        self._task = task
        self._state = 0
        self._value = None
        self._error = None
        self._waiter = None
        self._op = op
        self.status = None
        self._guard = None
        self._retrieved = False
        self._nb = nonblocking
        self.comm = comm
        self.src = src
        self.tag = tag
        self.buf = buf


class Engine:
    """Steps rank coroutines in virtual-time order and moves their messages."""

    def __init__(
        self,
        world_size: int,
        transport: Transport,
        ports: Ports,
        *,
        seed: int = 0,
        eager_limit: int = 65536,
        strict: bool = True,
        timeout: float | None = None,
        model: LatencyModel | None = None,
        schedule: object = "batch",
    ) -> None:
        self.world_size = world_size
        self.transport = transport
        self.ports = ports
        self._zero_latency = bool(getattr(ports, "zero", False))
        # Rule 4: a model with port state charges each instant's messages together (_book)
        self._book_later = not self._zero_latency and bool(getattr(ports, "ordered", True))
        self._bookings: list[list[Any]] = []  # Envelope fields of eager messages and RTS posted now
        self._rdv_bookings: list[list[Any]] = []  # those of rendezvous data cleared to send now
        self.latency_model = model  # what ``ports`` were bound from; collectives read reduce_time
        self.free_reductions = model is None or model.free_reductions
        self.rng = random.Random(seed)
        self.seed = seed
        self.compute = 0.0  # run(compute="wall:F"): F, charged by synchronous ranks
        self._sync_ranks = False  # some rank is synchronous: per-rank state is being swapped
        self.eager_limit = eager_limit
        self.strict = strict
        self.timeout = timeout
        self.algorithms: dict[str, str] = {}  # run(algorithms=...), checked by the runner
        self.trace: Trace | None = None  # set by run(trace=...)
        # run(serializer="pickle"): what msgpack cannot carry is pickled (wire.EXT_PICKLE)
        self._dumps: Callable[[object], bytes] | None = None
        self._loads: Callable[[bytes], object] | None = None
        self.now = 0.0
        # the event queue: what is due now, and later times' events by time (a calendar;
        # a heap of single events costs log(events) tuple comparisons per event at scale)
        self._ready: list[tuple[Callable[[Any], None], Any]] = []  # the batch running now
        self._due: list[tuple[Callable[[Any], None], Any]] = []  # the next batch at this time
        self._later: dict[float, list[tuple[Callable[[Any], None], Any]]] = {}
        self._times: list[float] = []  # heap of the keys of _later
        self._rand = self.rng.random
        self._msg_ids = itertools.count(1)
        self.tasks: list[Task] = []
        self.groups: dict[int, Group] = {}
        self._channels: dict[int, Envelope | deque[Envelope]] = {}
        self._rdv_sends: dict[tuple[int, int], tuple[Request[Any], tuple[Any, ...], bytes]] = {}
        self._rdv_recvs: dict[tuple[int, int], _RecvRequest] = {}
        self._rdv_landing: dict[tuple[int, int], Request[Any]] = {}  # rendezvous sends whose data is on its way
        self._sync_sends: dict[tuple[int, int], Request[Any]] = {}
        self._tracked: dict[int, Request[Any]] = {}
        self._helpers: dict[int, Task] = {}  # live helper tasks (nonblocking collectives)
        self._calls: list[_awaits.Note] = []  # strict: calls not yet awaited (_awaits.check)
        self._meetings: dict[Any, tuple[list[Any], list[float], list[Any], list[int]]] = {}
        self.last_nbytes = 0
        self.fidelity = "message"  # or "analytic": collectives resolve in one step (meet)
        self._current: Task | None = None
        self._looping = False  # inside _run_events: a request completed by an event resumes its rank at once
        self._foreign = 0
        self._wake_future: asyncio.Future[None] | None = None
        self._failure: tuple[Task, BaseException] | None = None
        self._unfinished = 0
        self._events = 0
        self._spawned = [0] * world_size  # helpers each rank has started (Task.serial)
        self.msgs_sent = [0] * world_size
        self.bytes_sent = [0] * world_size
        self.msgs_recv = [0] * world_size
        self.bytes_recv = [0] * world_size
        # arrays of other libraries (torch, CuPy) travel as objects where the transport hands
        # objects over, so a CuPy array stays on its device; byte transports stage them to host
        self._arrays = _arrays.IN_PROCESS if transport.in_process else _arrays.STAGED
        self._arrive_key = self._arrive  # bound once: an event per message names it
        self._use_schedule(schedule, model)  # before the transport takes _deliver
        transport.open(world_size, self._deliver)
        self._send_envelope = self._deliver if transport.in_process else transport.send

    # ---- scheduling ----

    def _push(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        """Schedule ``fn(arg)`` at virtual time ``t`` (never before now)."""
        if t <= self.now:
            self._due.append((fn, arg))
            return
        bucket = self._later.get(t)
        if bucket is None:
            self._later[t] = [(fn, arg)]
            heapq.heappush(self._times, t)
        else:
            bucket.append((fn, arg))

    def _next_time(self) -> float | None:
        """Return the time of the earliest scheduled event, or None when there is none."""
        if self._ready or self._due or self._bookings or self._rdv_bookings:
            return self.now
        return self._times[0] if self._times else None

    def _order(self, events: list[tuple[Callable[[Any], None], Any]]
               ) -> list[tuple[Callable[[Any], None], Any]]:
        """Put one batch of simultaneous events in this run's seeded order (run from the end).

        The order is the batch rotated by a seeded offset and maybe reversed:
        any two simultaneous events run in either order under some seed, and
        the rest keep their neighbours, so a million-rank round walks memory
        in sequence (a full shuffle made big runs 1.6x slower by cache misses
        alone).
        """
        n = len(events)
        if n > 1:
            k = int(self._rand() * 2 * n)
            if k % n:
                events = events[k % n:] + events[:k % n]
            if k >= n:
                events.reverse()
        return events

    def _use_schedule(self, schedule: object, model: LatencyModel | None) -> None:
        """Set up run(schedule=...): "batch" changes nothing; the others replace methods here.

        The default path stays as it is: "shuffle" replaces ``_order``, a chooser
        (a list of choices, explore's search) replaces ``_run_loop``, and a chooser
        that needs footprints gets ``_step`` and ``_deliver`` wrappers that note
        which ranks each event touches (``_schedule``).
        """
        self._chooser: _schedule.Chooser | None = None
        self._touched: set[int] | None = None  # ranks the running event touched (chooser runs)
        self._noisy = False  # the latency model draws from one RNG per message
        if schedule == "batch":
            return
        if schedule == "shuffle":
            self._order = self._shuffled  # type: ignore[method-assign]
            return
        self._chooser = chooser = _schedule.chooser(schedule)
        self._order = _as_scheduled  # type: ignore[method-assign]
        self._run_loop = self._run_loop_chosen  # type: ignore[method-assign]
        if chooser.footprints:
            self._noisy = not self._book_later and _schedule.draws_noise(model)
            self._step = self._step_noted  # type: ignore[method-assign]
            self._deliver = self._deliver_noted  # type: ignore[method-assign]

    def _shuffled(self, events: list[tuple[Callable[[Any], None], Any]]
                  ) -> list[tuple[Callable[[Any], None], Any]]:
        """``_order`` under schedule="shuffle": a full seeded permutation of the batch.

        Every order of n simultaneous events occurs under some seed (the
        rotations of ``_order`` reach 2n of them); it costs a random draw per
        event and scatters a big round's memory accesses, hence not the default.
        """
        self.rng.shuffle(events)
        return events

    def _run_events(self, limit: float, budget: int) -> int:
        """Run due events in seeded order, moving time up to ``limit``; return the budget left.

        Events due at one time run in batches: those scheduled while a batch
        runs (a rank woken now, a message sent with no latency) form the next
        batch, so nobody can starve the others at one virtual time. Stops when
        no event is left at or before ``limit``, when a rank failed, when the
        next event lies in the future while some rank awaits a foreign future
        (time must not jump past it), or after ``budget`` events.
        """
        self._looping = True
        try:
            return self._run_loop(limit, budget)
        finally:
            self._looping = False

    def _run_loop(self, limit: float, budget: int) -> int:
        ready = self._ready
        while budget and self._failure is None:
            if ready:
                fn, arg = ready.pop()
                fn(arg)
                budget -= 1
                continue
            due = self._next_due(limit)
            if due is None:
                break
            self._ready = ready = self._order(due)
        return budget

    def _next_due(self, limit: float) -> list[tuple[Callable[[Any], None], Any]] | None:
        """Return the next batch of due events, moving time; None when nothing runs before ``limit``.

        None also while a rank waits on asyncio, or once the run failed.
        """
        while True:
            if self._due:
                due, self._due = self._due, []
                return due
            if (self._bookings or self._rdv_bookings) and not self._foreign and self._book() \
                    and (self._due or self._bookings or self._rdv_bookings):
                if self._failure is not None:
                    return None
                continue  # the instant's messages were charged (Rule 4) and made more to do
            times = self._times
            if not times or times[0] > limit or self._foreign:
                return None
            t = heapq.heappop(times)
            self.now = t
            return self._later.pop(t)

    def _run_loop_chosen(self, limit: float, budget: int) -> int:
        """``_run_loop`` under a chooser: it picks each event of a batch in turn (``_schedule``).

        A batch keeps the order its events were scheduled in; the members of an
        analytic collective completed by one ``_finish_each`` event count as one
        event each here, so their order is a choice too.
        """
        chooser = self._chooser
        assert chooser is not None
        ready = self._ready
        while budget and self._failure is None:
            if ready:
                fn, arg = ready.pop(chooser.pick(len(ready)))
                self._touched = touched = self._owner(fn, arg)
                fn(arg)
                self._touched = None
                chooser.ran(touched)
                budget -= 1
                continue
            due = self._next_due(limit)
            if due is None:
                break
            self._ready = ready = _one_each(due)
            chooser.batch(len(ready))
        return budget

    def _owner(self, fn: Callable[[Any], None], arg: Any) -> set[int] | None:
        """Return the ranks an event touches by itself (None: unknown, so every rank)."""
        func = getattr(fn, "__func__", fn)
        if func is Engine._resume:
            return {arg.rank}
        if func is Engine._arrive:
            return {arg % self.world_size}  # the key of channel (src, dst): src*world_size + dst
        if func is _finish_request or func is _finish_one:
            task = (arg if func is _finish_request else arg[0])._task
            return None if task is None else {task.rank}
        if func is Engine._data_arrived:
            return {arg.src, arg.dst}
        return None

    def _step_noted(self, task: Task) -> None:
        """``_step`` while exploring: note the rank as touched by the running event."""
        touched = self._touched
        if touched is not None:
            touched.add(task.rank)
        type(self)._step(self, task)

    def _deliver_noted(self, env: Envelope) -> None:
        """``_deliver`` while exploring: both ends' queues and ports are touched (the RNG too: -1)."""
        touched = self._touched
        if touched is not None:
            touched.add(env.src)
            touched.add(env.dst)
            if self._noisy:
                touched.add(-1)
        type(self)._deliver(self, env)

    def start_rank(self, task: Task, comm: Comm, fn: Callable[..., Any], args: Sequence[Any],
                   kwargs: dict[str, Any]) -> None:
        """Give ``task`` its world ``comm`` and the coroutine ``fn(comm, *args, **kwargs)``; start it.

        A plain (non-async) ``fn`` becomes a synchronous rank (``_sync.SyncRank``)
        called as ``fn(MPI_COMM_WORLD, *args, **kwargs)``.

        Raises:
            TypeError: ``fn`` returned something other than a coroutine.
        """
        task.comm = comm
        if not _sync.is_async(fn):  # a plain function: a synchronous rank on a stack of its own
            if not self._sync_ranks:
                self._sync_ranks = True
                _sync.start_run(self.seed)
            stack = _sync.ThreadRank if getattr(fn, "__simcluster_stack__", "") == "thread" else _sync.SyncRank
            task.coro = stack(fn, (_sync.world(comm), *args), kwargs, comm, task.rank,  # type: ignore[assignment]
                              self.compute)
            self.start(task)
            return
        coro = fn(comm, *args, **kwargs)
        if not asyncio.iscoroutine(coro):
            raise TypeError(f"run: {getattr(fn, '__name__', fn)}(comm) returned "
                            f"{type(coro).__name__}, not a coroutine; define it with async def")
        task.coro = coro
        self.start(task)

    def start(self, task: Task) -> None:
        """Add a rank and schedule its first step at time 0."""
        self.tasks.append(task)
        self._unfinished += 1
        self._push(0.0, self._resume, task)

    def spawn(self, coro: Coroutine[Any, Any, Any], op: str,
              collective: CollContext | None = None) -> Request[Any]:
        """Run ``coro`` as a helper of the current rank; return a request for its result.

        Nonblocking collectives use this: the helper progresses on its own while
        the rank goes on, and its result or error goes to the request.
        """
        owner = self._current
        if owner is None:
            coro.close()
            raise RuntimeError(f"{op}: called outside any rank; call it from a rank's coroutine")
        req: Request[Any] = Request(self, owner, op)
        req._nb = True
        helper = Task(owner.rank, coro)
        self._spawned[owner.rank] += 1
        helper.serial = self._spawned[owner.rank]  # program order: Rule 4 orders by it
        helper.comm = owner.comm
        helper.collective = collective
        helper.done_request = req
        self._helpers[id(helper)] = helper
        if self.strict:
            self._track(req)
        self._push(self.now, self._resume, helper)
        return req

    def _wake(self, task: Task) -> None:
        """Schedule a parked rank to resume at the current time."""
        if task.state == BLOCKED:
            task.state = READY
            self._push(self.now, self._resume, task)

    def _resume(self, task: Task) -> None:
        if task.state == READY:
            self._step(task)

    def _step(self, task: Task) -> None:
        """Run one rank until it parks, finishes or fails."""
        global _running
        task.state = RUNNING
        if task.waiting is not _BARE_YIELD:
            task.spins = 0
        self._current = _running = task
        try:
            yielded = task.coro.send(None)
        except StopIteration as stop:
            task.state = FINISHED
            task.result = stop.value
            task.time = self.now
            if task.done_request is not None:
                del self._helpers[id(task)]
                task.done_request._finish(stop.value)
            else:
                self._unfinished -= 1
            return
        except Exception as exc:
            task.state = FINISHED
            task.time = self.now
            if task.done_request is not None:  # a helper's error belongs to its request
                del self._helpers[id(task)]
                task.done_request._finish(None, exc)
                return
            self._unfinished -= 1
            if self._failure is None:  # the rank failed: the run stops
                self._failure = (task, exc)
            return
        except BaseException as exc:
            task.state = FINISHED
            self._failure = (task, exc)
            return
        finally:
            self._current = _running = None
            if self._calls:  # strict runs only: was every simcluster call awaited?
                _awaits.check(self)
        if type(yielded) is _RecvRequest or isinstance(yielded, Request):  # the common case, inline
            task.state = BLOCKED
            task.waiting = yielded
            yielded._waiter = task
        else:
            self._park(task, yielded)

    def _park(self, task: Task, yielded: Any) -> None:
        """Park a rank on what it yielded other than a request."""
        if yielded is None:  # a bare yield (asyncio.sleep(0)): run again at this time
            task.spins += 1  # a poll loop around sleep(0) never lets virtual time move
            if task.spins > SPIN_LIMIT:
                self._failure = self._failure or (task, SimclusterError(
                    task.rank, "asyncio.sleep(0)",
                    f"yielded {SPIN_LIMIT} times at one virtual time without awaiting anything "
                    "simcluster can complete, so virtual time cannot advance",
                    "await the request itself, or await comm.sleep(dt) between polls"))
                return
            task.state = READY
            task.waiting = _BARE_YIELD
            self._push(self.now, self._resume, task)
        elif isinstance(yielded, _WaitAny):
            task.state = BLOCKED
            task.waiting = yielded
            for req in yielded.requests:
                if req._state == 0:
                    req._waiter = task
        elif getattr(yielded, "_asyncio_future_blocking", None) is not None:
            yielded._asyncio_future_blocking = False
            task.state = FOREIGN
            task.waiting = yielded
            self._foreign += 1
            yielded.add_done_callback(lambda f, task=task: self._foreign_done(task, f))
        else:
            self._failure = self._failure or (task, RuntimeError(
                f"rank {task.rank}: a rank awaited {yielded!r}, which is neither a simcluster "
                "request nor an asyncio future; await simcluster calls or asyncio awaitables only"))

    def _foreign_done(self, task: Task, fut: Any = None) -> None:
        if fut is not None and not fut.cancelled():
            fut.exception()  # retrieved: the rank reads it when it resumes, unless the run stopped
        if task.state != FOREIGN:
            return
        self._foreign -= 1
        task.state = READY
        task.waiting = None
        self._push(self.now, self._resume, task)
        fut = self._wake_future
        if fut is not None and not fut.done():
            fut.set_result(None)

    # ---- the main loop ----

    def _run_until_quiescent(self) -> None:
        """Pop events in virtual-time order until none is left that may run now.

        This loop is the simulator. It returns when no event is left, when a
        rank failed, when the next event lies in the future while some rank
        awaits a foreign future (time must not jump past it), or every
        ``_BREATHE_EVERY`` events so that the asyncio loop and the timeout get
        a turn.
        """
        budget = self._run_events(float("inf"), _BREATHE_EVERY)
        self._events += _BREATHE_EVERY - budget

    async def run(self) -> None:
        """Run every rank to completion, or raise what stopped the run.

        Python's cyclic garbage collector is paused while the simulation runs:
        a large world keeps millions of live objects (frames, requests), and
        each full collection walks all of them, which made big runs grow worse
        than linearly. It is restored at the end.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            await self._run()
        finally:
            if was_enabled:
                gc.enable()

    async def _run(self) -> None:
        if self.timeout is None:
            await self._simulate(None)
            return
        deadline = _time.monotonic() + self.timeout
        watchdog = _watchdog.Watchdog(self, deadline)  # for a rank that never yields
        try:
            await self._simulate(deadline)
            return
        except _watchdog.Overtime as exc:
            overtime = exc
        finally:
            watchdog.stop()
        failure = self._failure
        if failure is not None and failure[1] is overtime:  # it landed in a rank's step
            spinning: tuple[Task, str] | None = (failure[0], _watchdog.spinning_line(overtime))
        else:
            spinning = None
        raise RunTimeoutError(None, "run", self._timeout_report(spinning), "") from None

    async def _simulate(self, deadline: float | None) -> None:
        """Run events, breathing to asyncio, until every rank finished or something stopped the run."""
        while True:
            self._run_until_quiescent()
            if self._failure is not None:
                if isinstance(self._failure[1], _watchdog.Overtime):
                    raise self._failure[1]  # the timeout interrupted a rank: _run reports it
                return
            if deadline is not None and _time.monotonic() > deadline:
                raise RunTimeoutError(None, "run", self._timeout_report(), "")
            if self._foreign and not (self._ready or self._due):
                loop = asyncio.get_running_loop()
                self._wake_future = loop.create_future()
                remaining = None if deadline is None else max(0.0, deadline - _time.monotonic())
                try:
                    await asyncio.wait_for(asyncio.shield(self._wake_future), remaining)
                except asyncio.TimeoutError:
                    raise RunTimeoutError(None, "run", self._timeout_report(), "") from None
                finally:
                    self._wake_future = None
                continue
            if self._next_time() is not None:
                await asyncio.sleep(0)  # let the event loop breathe on long runs
                continue
            break
        if self._unfinished:
            raise self._deadlock()

    def close(self) -> None:
        """Cancel every unfinished rank and release the transport.

        A rank's ``finally:`` blocks run here, outside the simulation: one that
        awaits a simcluster call fails, and that failure is dropped so it can
        neither hide the error that stopped the run nor keep others open.
        """
        try:
            for task in [*self.tasks, *self._helpers.values()]:
                if task.state != FINISHED:
                    if task.state == FOREIGN and hasattr(task.waiting, "cancel"):
                        task.waiting.cancel()
                    task.state = FINISHED
                    try:
                        _close_task_coro(task.coro)
                    except Exception:  # noqa: BLE001 - see the docstring
                        pass
        finally:
            if self._sync_ranks:
                self._sync_ranks = False
                _sync.end_run()
            self.transport.close()

    @property
    def failure(self) -> tuple[Task, BaseException] | None:
        return self._failure

    # ---- point-to-point: posting ----

    def post_send(self, comm: Comm, obj: object, dst: int, tag: int, *, sync: bool,
                  op: str | tuple[Any, ...], nonblocking: bool,
                  need_request: bool = False) -> Request[None] | None:
        """Start a send from ``comm``'s rank.

        Returns its request, or None for a blocking standard send that
        completed at once (eager), which needs no request at all, unless
        ``need_request``.
        """
        if self._current is None or self._current.rank != comm._world_rank:
            raise self._outside(comm.rank, op)
        try:
            packed = PACKED_NONE if obj is None else wire.pack(obj, copy=False, arrays=self._arrays)
        except wire.Unsendable as exc:
            packed = self._pack_opaque(comm, obj, op, exc)
        nbytes = packed.nbytes
        src_w = comm._world_rank
        dst_w = comm._group.world_ranks[dst]
        msg_id = next(self._msg_ids)
        self.msgs_sent[src_w] += 1
        self.bytes_sent[src_w] += nbytes
        self.last_nbytes = nbytes  # for the caller's trace span
        if self.trace is not None:
            name = comm._group.name if comm._ctx % 2 == 0 else _collective_name(comm, self._current)
            self.trace.sent(msg_id, src_w, dst_w, tag, nbytes, self.now, name)
        buffers = packed.buffers
        eager = nbytes <= self.eager_limit
        req: Request[None] | None = None
        if nonblocking or sync or not eager or need_request:
            req = Request(self, self._current, op, dst_w)
            req._nb = nonblocking
            if self.strict and nonblocking:
                if buffers:
                    arrays = [obj] if packed.single_array else list(buffers)
                    req._guard = (arrays, [_checksum(a) for a in arrays], _frames.user_line())
                self._track(req)
        if eager:
            if buffers:
                buffers = tuple(np.array(b, copy=True, order="K") if type(b) is np.ndarray
                                else b.copy() for b in buffers)  # ObjectBuffer: its own library
            now = self.now
            if self._book_later:  # charged with the rest of this instant (Rule 4)
                self._bookings.append([EAGER, comm._ctx, src_w, dst_w, tag, msg_id, nbytes, now,
                                       packed.header, buffers, sync, b"", self._current.serial])
                env = None
            else:
                arrive = now if self._zero_latency else self.ports.transfer(src_w, dst_w, nbytes, now)[1]
                env = _new_tuple(Envelope, (EAGER, comm._ctx, src_w, dst_w, tag, msg_id, nbytes, arrive,
                                            packed.header, buffers, sync, b""))
            if sync:
                self._sync_sends[(src_w, msg_id)] = req  # type: ignore[assignment]
            elif req is not None:
                req._state = 1  # DONE at once; nobody can be waiting yet
        else:
            assert req is not None
            if self._book_later:  # on its channel behind this instant's eager messages
                self._bookings.append([RTS, comm._ctx, src_w, dst_w, tag, msg_id, nbytes, self.now,
                                       b"", (), sync, b"", self._current.serial])
                env = None
            else:
                env = Envelope(RTS, comm._ctx, src_w, dst_w, tag, msg_id, nbytes, self.now, b"", (), sync)
            req._op = f"{req.op} [rendezvous: {nbytes} bytes > eager_limit {self.eager_limit}]"
            self._rdv_sends[(src_w, msg_id)] = (req, buffers, packed.header)
        if env is not None:
            self._send_envelope(env)
        return req

    def _pack_opaque(self, comm: Comm, obj: object, op: str | tuple[Any, ...],
                     exc: wire.Unsendable) -> wire.Packed:
        """Pack what msgpack refused with pickle, in serializer="pickle" runs; else explain."""
        if self._dumps is not None:
            try:
                return wire.pack(obj, copy=False, dumps=self._dumps, arrays=self._arrays)
            except wire.Unsendable as again:
                exc = again
        name = op if isinstance(op, str) else op[0]
        raise TypeError(f"rank {comm.rank}: {name}(obj={type(obj).__name__}): {exc}") from None

    def post_recv(self, comm: Comm, buf: Any, src: int, tag: int, *, op: str,
                  nonblocking: bool) -> Request[Any]:
        """Post a receive on ``comm``'s rank; it completes when a message is matched and has arrived."""
        task = self._current
        if task is None or task.rank != comm._world_rank:
            raise self._outside(comm.rank, (op, buf, src, tag))
        req = _RecvRequest(self, task, op, comm, src, tag, buf, nonblocking)
        if nonblocking and self.strict:
            self._track(req)
        mq = comm._mq
        env = mq.take_unexpected(src, tag) if mq._unexpected else None
        if env is None:
            mq.post(src, tag, req)
        else:
            self._matched(req, env)
        return req

    def _outside(self, rank: object, op: str | tuple[Any, ...], verb: str = "called") -> RuntimeError:
        """The error for a simcluster call made or awaited outside its rank's own coroutine."""
        call = op if isinstance(op, str) else _format_op(op)
        who = "outside any rank" if self._current is None else f"by rank {self._current.rank}"
        return RuntimeError(
            f"rank {rank}: {call}: {verb} {who}, not from the rank's own coroutine "
            f"(asyncio.gather/create_task run coroutines outside the simulator); {_awaits.advice(call)}")

    def iprobe(self, comm: Comm, src: int, tag: int) -> Status | None:
        """Return the status of a message a receive for (src, tag) would take now, if any."""
        env = comm._mq.peek_unexpected(src, tag)
        if env is None:
            return None
        return Status(comm._group.local_rank(env.src), env.tag, env.nbytes)

    def post_probe(self, comm: Comm, src: int, tag: int, op: str) -> Request[Status]:
        """Return a request that completes with a Status once a fitting message arrives."""
        peer = None if src == ANY_SOURCE else comm._group.world_ranks[src]
        req: Request[Status] = Request(self, self._current, op, peer)
        status = self.iprobe(comm, src, tag)
        if status is not None:
            req._finish(status)
        else:
            mq = comm._mq
            if mq.probes is None:
                mq.probes = []
            mq.probes.append((src, tag, req))
        return req

    def post_sleep(self, seconds: float, op: str) -> Request[None]:
        """Return a request that completes ``seconds`` of virtual time from now."""
        req: Request[None] = Request(self, self._current, op)
        self._push(self.now + seconds, _finish_request, req)
        return req

    def meet(self, key: Any, size: int, rank: int, value: Any, op: str,
             resolve: Callable[[list[Any], list[float]], tuple[list[Any], float]]) -> Request[Any]:
        """Join a meeting of ``size`` members (an analytic collective); return a request.

        Each member deposits ``value`` at its current time. When the last one
        arrives, ``resolve(values, times)`` returns every member's result and
        the virtual time at which all of them complete; each member's request
        then completes at that time with its result.
        """
        req: Request[Any] = Request(self, self._current, op)
        meeting = self._meetings.get(key)
        if meeting is None:
            meeting = self._meetings[key] = ([None] * size, [0.0] * size, [None] * size, [0])
        values, times, reqs, count = meeting
        values[rank], times[rank], reqs[rank] = value, self.now, req
        count[0] += 1
        if count[0] == size:
            del self._meetings[key]
            results, done_at = resolve(values, times)
            # one event completes every member (an event per member cost 1/3 of an
            # analytic collective), in this run's seeded order
            self._push(max(done_at, self.now), _finish_each, self._order(list(zip(reqs, results))))
        return req

    # ---- point-to-point: charging an instant's messages (Rule 4) ----

    def _book(self) -> bool:
        """Charge and send the messages of the instant that just ended; False when there are none.

        The loop calls it once no event is left at ``now``. Eager messages and
        RTS envelopes go first; the rendezvous transfers cleared to send at
        ``now`` follow once those have settled (an RTS delivered here may be
        matched at once). Each send port takes its messages in posting order
        and each receive port in the order they reach it (``_charge``),
        whatever order the instant's events ran in; then each source's
        messages are delivered in posting order, so channels stay FIFO.
        """
        items = self._bookings
        if items:
            self._bookings = []
            if len(items) == 1:  # the common case in chains of dependent steps: one message
                fields = items[0]
                fields.pop()  # the task's serial
                if fields[0] != RTS:
                    fields[7] = self.ports.transfer(fields[2], fields[3], fields[6], fields[7])[1]
                self._send_envelope(_new_tuple(Envelope, fields))
                return True
            self._charge(items, _by_source)
            send = self._send_envelope
            for fields in items:
                fields.pop()  # the task's serial
                send(_new_tuple(Envelope, fields))
            return True
        items = self._rdv_bookings
        if not items:
            return False
        self._rdv_bookings = []
        self._charge(items, _by_source_and_id)
        send = self.transport.send
        for fields in items:
            fields.pop()
            send(_new_tuple(Envelope, fields))
        return True

    def _charge(self, items: list[list[Any]], posting: Callable[[list[Any]], Any]) -> None:
        """Turn each item's time (when it was posted) into its arrival; sort ``items`` by ``posting``.

        Send sides first, in posting order (``posting`` sorts by source and
        task serial, then by message id; a stable sort keeps the order items
        were added in), then receive sides by ``(wire, source, serial, message
        id)``. One item, or one per receive port: one ``transfer`` each, which
        equals the two halves bit for bit.
        """
        if len(items) == 1:
            fields = items[0]
            if fields[0] != RTS:
                fields[7] = self.ports.transfer(fields[2], fields[3], fields[6], fields[7])[1]
            return
        items.sort(key=posting)
        if len({fields[3] for fields in items}) == len(items):  # one message per receive port
            transfer = self.ports.transfer
            for fields in items:
                if fields[0] != RTS:
                    fields[7] = transfer(fields[2], fields[3], fields[6], fields[7])[1]
            return
        send_side = self.ports.send_side
        for fields in items:
            if fields[0] != RTS:
                fields[7] = send_side(fields[2], fields[3], fields[6], fields[7])[1]
        recv_side = self.ports.recv_side
        for fields in sorted(items, key=_by_arrival):
            if fields[0] != RTS:
                fields[7] = recv_side(fields[2], fields[3], fields[6], fields[7])

    # ---- point-to-point: delivery ----

    def _deliver(self, env: Envelope) -> None:
        """Take an envelope from the transport (the transport's ``deliver`` callback)."""
        kind = env.kind
        if kind == EAGER or kind == RTS:
            # one channel per (src, dst): arrival times never decrease along it, so its
            # messages are matched in send order (a lone one is kept as is, not in a deque)
            key = env.src * self.world_size + env.dst
            channels = self._channels
            chan = channels.get(key)
            t = env.time
            if chan is None:
                if t <= self.now:  # arrives now, nothing ahead of it: match it at once
                    self._arrived(env)
                    return
                channels[key] = env
            elif isinstance(chan, deque):
                if chan[-1].time > t:
                    t = chan[-1].time
                    env = env._replace(time=t)
                chan.append(env)
            else:  # a second message while one is in flight: now a queue
                if chan.time > t:
                    t = chan.time
                    env = env._replace(time=t)
                channels[key] = deque((chan, env))
            self._push(t, self._arrive_key, key)
        elif kind == CTS:
            self._clear_to_send(env)
        elif kind == DATA:
            self._push(env.time, self._data_arrived, env)
        elif kind == ACK:
            req = self._sync_sends.pop((env.dst, env.msg_id))
            self._push(env.time, _finish_request, req)

    def _arrive(self, key: int) -> None:
        channels = self._channels
        chan = channels[key]
        if not isinstance(chan, deque):
            del channels[key]
            self._arrived(chan)
            return
        env = chan.popleft()
        if len(chan) == 1:
            channels[key] = chan[0]
        self._arrived(env)

    def _arrived(self, env: Envelope) -> None:
        """Match an envelope that has reached its receiver, or queue it as unexpected."""
        group = self.groups[env.ctx]
        local = group._local
        if local is None:
            dst, src = env.dst, env.src
        else:
            dst, src = local[env.dst], local[env.src]
        comm = group.members[dst] or group.member(dst)
        mq = comm._mq
        req = mq.take_posted(src, env.tag)
        if req is not None:
            if env.kind == EAGER and not env.sync:  # _matched, inline
                self._complete_recv(req, env, copy=False)
            else:
                self._matched(req, env)
            return
        mq.add_unexpected(src, env.tag, env)
        if mq.probes:
            for i, (psrc, ptag, preq) in enumerate(mq.probes):
                if (psrc == ANY_SOURCE or psrc == src) and (ptag == ANY_TAG or ptag == env.tag):
                    del mq.probes[i]
                    preq._finish(Status(src, env.tag, env.nbytes))
                    break

    def _matched(self, req: _RecvRequest, env: Envelope) -> None:
        """A receive met its message at ``now``: complete it, or start the rendezvous."""
        if env.kind == EAGER:
            self._complete_recv(req, env, copy=False)
            if env.sync:
                self.transport.send(Envelope(ACK, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                             0, self.now))
        else:  # RTS: ask the sender for the data; the transfer is charged from now
            self._rdv_recvs[(env.src, env.msg_id)] = req
            self.transport.send(Envelope(CTS, env.ctx, env.dst, env.src, env.tag, env.msg_id,
                                         env.nbytes, self.now))

    def _clear_to_send(self, env: Envelope) -> None:
        sender, receiver = env.dst, env.src
        req, buffers, header = self._rdv_sends.pop((sender, env.msg_id))
        nbytes = env.nbytes
        match_time = env.time
        # the send completes when its data has been copied out at the receiver (_data_arrived):
        # the DATA envelope references the sender's own arrays
        self._rdv_landing[(sender, env.msg_id)] = req
        if self._book_later:  # charged with this instant's other transfers (Rule 4)
            self._rdv_bookings.append([DATA, env.ctx, sender, receiver, env.tag, env.msg_id, nbytes,
                                       match_time, header, buffers, False, b"", _serial(req)])
            return
        arrive = match_time if self._zero_latency else self.ports.transfer(
            sender, receiver, nbytes, match_time)[1]
        self.transport.send(Envelope(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                     nbytes, arrive, header, buffers))

    def _data_arrived(self, env: Envelope) -> None:
        key = (env.src, env.msg_id)
        self._complete_recv(self._rdv_recvs.pop(key), env, copy=True)
        self._rdv_landing.pop(key)._finish()

    def _complete_recv(self, req: _RecvRequest, env: Envelope, *, copy: bool) -> None:
        local = req.comm._group._local
        source = env.src if local is None else local[env.src]
        req.status = _new_tuple(Status, (source, env.tag, env.nbytes))
        self.msgs_recv[env.dst] += 1
        self.bytes_recv[env.dst] += env.nbytes
        if self.trace is not None:
            self.trace.received(env.src, env.msg_id, self.now)
        buf = req.buf
        try:
            if buf is None:
                value = wire.unpack(env.header, env.buffers, copy=copy, loads=self._loads,
                                    arrays=self._arrays)
            else:
                _fill(buf, wire.unpack(env.header, env.buffers, copy=False, loads=self._loads,
                                       arrays=_arrays.HOST), req, source)
                value = buf
        except Exception as exc:
            req._finish(None, exc)
            return
        req._finish(value)  # may run the receiver right here: outside the try

    # ---- requests: cancel, spin, hazards, leaks ----

    def _cancel(self, req: Request[Any]) -> bool:
        if isinstance(req, _RecvRequest):
            return req.comm._mq.unpost(req.src, req.tag, req)
        for comm_group in self.groups.values():
            for comm in comm_group.members:
                if comm is None:
                    continue
                probes = comm._mq.probes or []
                for i, item in enumerate(probes):
                    if item[2] is req:
                        del probes[i]
                        return True
        return False

    def _spin(self, req: Request[Any]) -> None:
        task = self._current
        if task is None:
            return
        task.spins += 1
        if task.spins > SPIN_LIMIT:
            raise SimclusterError(
                task.rank, f"{req.op}.test()",
                f"polled {SPIN_LIMIT} times without awaiting, so virtual time cannot advance",
                "await the request, or await comm.sleep(dt) between tests")

    def _check_awaiter(self, req: Request[Any]) -> None:
        task = req._task
        if self._current is not task or task is None:
            raise self._outside("?" if task is None else task.rank, req.op, "awaited")

    def _check_hazard(self, req: Request[Any], guard: tuple[list[Any], list[int], str]) -> None:
        self._untrack(req)
        arrays, sums, line = guard
        for a, s in zip(arrays, sums):
            if _checksum(a) != s:
                owner = req._task.rank if req._task is not None else None
                raise BufferHazardError(
                    owner, req.op,
                    f"the send buffer changed before the request completed (posted at {line})",
                    "wait for the request before writing to the buffer, or send a copy")

    def _track(self, req: Request[Any]) -> None:
        self._tracked[id(req)] = req

    def _untrack(self, req: Request[Any]) -> None:
        self._tracked.pop(id(req), None)

    def leaks(self) -> list[str]:
        """Describe messages never received and nonblocking requests never completed.

        Each problem is reported once: a pending request whose message or
        receive is already listed (a posted receive, a send nobody received)
        is not listed again.
        """
        lines: list[str] = []
        listed: set[int] = set()
        for group in self.groups.values():
            for comm in group.members:
                if comm is None:
                    continue
                posted, unexpected = comm._mq.leftovers()
                for req in posted:
                    listed.add(id(req))
                    lines.append(f"rank {comm.rank}: {req.op} was never matched")
                for env in unexpected:
                    lines.append(
                        f"rank {comm.rank}: a message from rank {group.local_rank(env.src)} "
                        f"(tag={env.tag}, {env.nbytes} bytes) on comm {group.name!r} was never received")
        listed.update(id(entry[0]) for entry in self._rdv_sends.values())
        listed.update(id(req) for req in self._sync_sends.values())
        for req in self._tracked.values():
            if req._retrieved or req._state == 2 or id(req) in listed:
                continue
            owner = req._task.rank if req._task is not None else "?"
            state = "completed but was never waited or tested" if req._state else "never completed"
            lines.append(f"rank {owner}: {req.op} {state}")
        return lines

    # ---- reports ----

    def _describe(self, task: Task) -> tuple[str, list[int]]:
        """Return a line about what a blocked task waits for, and the ranks it waits on."""
        waiting = task.waiting
        reqs = waiting.requests if isinstance(waiting, _WaitAny) else [waiting]
        ops = ", ".join(r.op for r in reqs if isinstance(r, Request))
        peers = [r._peer for r in reqs if isinstance(r, Request) and r._peer is not None]
        where = _frames.coroutine_line(task.coro)
        inside = ""
        if task.collective is not None:
            info = task.collective.info
            inside = f" inside {info[3]} (collective #{info[2]} on comm {info[1]!r})"
        return f"rank {task.rank} waiting in {ops}{inside} at {where}", peers

    def blocked_entries(self) -> list[BlockedEntry]:
        """Describe every blocked rank and helper, ranks first: what ``deadlock_error`` reads."""
        entries = []
        for task in [*self.tasks, *self._helpers.values()]:
            if task.state == BLOCKED:
                line, peers = self._describe(task)
                entries.append((task.rank, line, peers, _info(task)))
        return entries

    def _deadlock(self) -> SimclusterError:
        groups = self.groups
        return deadlock_error(self.blocked_entries(), self.now,
                              members=lambda ctx: groups[ctx].world_ranks)

    def _timeout_report(self, spinning: tuple[Task, str] | None = None) -> str:
        """Say what each unfinished rank was doing when the timeout passed.

        ``spinning`` is the rank the watchdog interrupted, and its line: it shows as running.
        """
        lines = [f"timed out after {self.timeout}s of wall time at virtual time {self.now:.9g}s"]
        for task in self.tasks:  # helpers are their rank's nonblocking calls: the rank's line says
            if spinning is not None and task is spinning[0]:
                lines.append(f"  rank {task.rank} running at {spinning[1]}")
            elif task.state == BLOCKED:
                lines.append("  " + self._describe(task)[0])
            elif task.state != FINISHED:
                lines.append(f"  rank {task.rank} {_TASK_STATES[task.state]} at "
                             f"{_frames.coroutine_line(task.coro)}")
        lines.append("look for a rank that loops without awaiting, or awaits real I/O that never ends")
        return "\n".join(lines)


BlockedEntry = tuple[int, str, list[int], Any]
"""(rank, "rank R waiting in ... at file:line", world ranks it waits on, Task.collective)."""


def _collective_name(comm: Comm, task: Task) -> str:
    """Name a traced collective message after its call: ``world:all_reduce#3(ring)``."""
    coll = task.collective
    if coll is None:
        return f"{comm._group.name}:collective"
    algorithm = f"({coll.algorithm})" if coll.algorithm else ""
    return f"{comm._group.name}:{coll.call.partition('(')[0]}#{coll.seq}{algorithm}"


def deadlock_error(entries: list[BlockedEntry], now: float,
                   members: Callable[[int], Sequence[int]] | None = None) -> SimclusterError:
    """Build the deadlock report from the blocked ranks (of one process, or gathered from all).

    A collective that some members never entered gets a line naming who is
    inside, who is not, and what those do instead (a member not blocked has
    finished); members whose calls differ never get here (``Comm._collective``).
    ``members(ctx)`` gives a communicator's world ranks; without it only the
    world's members can be named, other communicators' by their comm rank.
    """
    blocked: dict[int, str] = {}
    edges: dict[int, list[int]] = {}
    lines = []
    for rank, line, peers, _ in entries:
        blocked[rank] = line
        edges.setdefault(rank, []).extend(peers)
        lines.append("  " + line)
    cycle = _find_cycle(edges)
    n = len(blocked)
    head = (f"deadlock: {n} rank{'s' if n != 1 else ''} blocked and no message in flight "
            f"at virtual time {now:.9g}s")
    gaps = _collective_gaps(entries, members)
    if cycle:
        tail = "wait-for cycle: " + " -> ".join(map(str, cycle))
    elif gaps:
        tail = ("no wait-for cycle: ranks wait inside a collective that other members never "
                "entered; every member of a comm must call its collectives, in the same order")
    else:
        tail = "no wait-for cycle: some rank waits for a message nobody sends"
    return DeadlockError("\n".join([head, *lines, *gaps, tail]), blocked, cycle)


def _collective_gaps(entries: list[BlockedEntry],
                     members: Callable[[int], Sequence[int]] | None) -> list[str]:
    """Lines about collectives that blocked ranks are inside but other members never entered."""
    doing: dict[int, str] = {}
    inside: dict[tuple[int, int], tuple[str, str, int, dict[int, int]]] = {}
    for rank, line, _, info in entries:
        doing.setdefault(rank, line)  # a rank's own task comes before its helpers
        if info is None or len(info) < 6:
            continue
        ctx, name, seq, call, comm_rank, size = info[:6]
        inside.setdefault((ctx, seq), (name, call, size, {}))[3][comm_rank] = rank
    lines = []
    for (ctx, seq), (name, call, size, entered) in sorted(inside.items()):
        missing = [r for r in range(size) if r not in entered]
        if not missing:
            continue
        world = members(ctx) if members is not None else range(size) if ctx == 0 else None
        if world is None:  # gathered from several processes: only comm ranks are known
            outside = f"comm {_ranks(missing)} never entered"
        else:
            absent = [_doing(world[r], doing) for r in missing[:_LISTED]]
            if len(missing) > _LISTED:
                absent.append("...")
            outside = f"{_ranks([world[r] for r in missing])} never entered: {'; '.join(absent)}"
        lines.append(f"{_ranks(sorted(entered.values()))} {'is' if len(entered) == 1 else 'are'} "
                     f"inside {call} (collective #{seq} on comm {name!r}), which {outside}")
    return lines


_LISTED = 8  # ranks named one by one in a report line; the rest are counted


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 2`` or ``ranks 0, 1, ... (1000 in all)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(map(str, ranks[:_LISTED]))
    return f"ranks {shown}" + (f", ... ({len(ranks)} in all)" if len(ranks) > _LISTED else "")


def _doing(rank: int, doing: dict[int, str]) -> str:
    """What a member that never entered a collective does instead: its blocked line, or finished."""
    line = doing.get(rank)
    if line is None:
        return f"rank {rank} finished"
    prefix = f"rank {rank} "
    return prefix + "is " + line[len(prefix):] if line.startswith(prefix) else line


def _info(task: Task) -> CollectiveInfo | None:
    """The collective call a task is inside, as reports carry it (None outside collectives)."""
    return None if task.collective is None else task.collective.info


def _finish_request(req: Request[Any]) -> None:
    req._finish()


# orders of booked messages (Engine._book): Envelope fields, then the posting task's serial,
# [kind, ctx, src, dst, tag, msg_id, nbytes, time, header, buffers, sync, meta, serial]
_by_source = operator.itemgetter(2, 12)
_by_source_and_id = operator.itemgetter(2, 12, 5)
_by_arrival = operator.itemgetter(7, 2, 12, 5)


def _serial(req: Request[Any]) -> int:
    """The serial of the task that posted a send (``Task.serial``)."""
    task = req._task
    return 0 if task is None else task.serial


def _close_task_coro(coro: Any) -> None:
    """Close a rank's or helper's coroutine; an unstarted one also closes the coroutines it was given.

    A helper that never ran (``comm._as_coro(body)``) holds its body's coroutine
    as an argument; closing only the wrapper would leave that one to warn that
    it was never awaited.
    """
    if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        for value in coro.cr_frame.f_locals.values():
            if isinstance(value, types.CoroutineType):
                value.close()
    coro.close()


def _finish_one(pair: tuple[Request[Any], Any]) -> None:
    """Complete one (request, value) pair of a ``_finish_each`` (chosen schedules)."""
    pair[0]._finish(pair[1])


def _one_each(due: list[tuple[Callable[[Any], None], Any]]) -> list[tuple[Callable[[Any], None], Any]]:
    """Return a batch with each ``_finish_each`` event split into one event per member."""
    if all(fn is not _finish_each for fn, _ in due):
        return due
    events: list[tuple[Callable[[Any], None], Any]] = []
    for fn, arg in due:
        if fn is _finish_each:
            events.extend((_finish_one, pair) for pair in reversed(arg))
        else:
            events.append((fn, arg))
    return events


def _as_scheduled(events: list[tuple[Callable[[Any], None], Any]]
                  ) -> list[tuple[Callable[[Any], None], Any]]:
    """``Engine._order`` under a chooser: the chooser orders each batch as it runs."""
    return events


def _finish_each(pairs: list[tuple[Request[Any], Any]]) -> None:
    """Complete each (request, value) pair, from the end of the list (``Engine._order``)."""
    for req, value in reversed(pairs):
        req._finish(value)


def _checksum(a: Any) -> int:
    if isinstance(a, np.ndarray):
        return zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"))
    return _arrays.checksum(a.array if type(a) is wire.ObjectBuffer else a)  # on a's own device


def _find_cycle(edges: dict[int, list[int]]) -> list[int] | None:
    """Return one cycle in the wait-for graph, as a list that ends where it starts."""
    for start in sorted(edges):
        path: list[int] = []
        seen: dict[int, int] = {}
        node: int | None = start
        while node is not None and node in edges and node not in seen:
            seen[node] = len(path)
            path.append(node)
            nxt = edges[node]
            node = nxt[0] if len(nxt) == 1 else None
        if node is not None and node in seen:
            cyc = path[seen[node]:]
            return [*cyc, cyc[0]]
    return None


def _fill(buf: Any, value: Any, req: _RecvRequest, source: int) -> None:
    """Copy a received array into the user's buffer, or explain why it cannot be."""
    if not (isinstance(value, np.ndarray) and isinstance(buf, np.ndarray)):
        _fill_any(buf, value, req, source)
        return
    rank = req.comm.rank
    if value.dtype != buf.dtype:
        raise TypeError(
            f"rank {rank}: {req.op}: message from rank {source} has dtype {value.dtype} but buf "
            f"has dtype {buf.dtype}; receive into a {value.dtype} buffer, or without buf")
    if value.nbytes > buf.nbytes:
        raise TruncationError(
            rank, req.op, f"message from rank {source} is {value.nbytes} bytes but buf holds {buf.nbytes}",
            "pass a larger buf, or size it with probe() first")
    if value.shape == buf.shape:
        np.copyto(buf, value)
    elif buf.flags.c_contiguous:  # a shorter message fills the front, as in MPI
        buf.reshape(-1)[: value.size] = value.reshape(-1)
    else:
        buf.flat[: value.size] = value.reshape(-1)


def _fill_any(buf: Any, value: Any, req: _RecvRequest, source: int) -> None:
    """``_fill`` where either side is another library's array: dtypes by name, copies by ``arrays``."""
    rank = req.comm.rank
    if not _arrays.is_array(value):
        raise TypeError(
            f"rank {rank}: {req.op}: message from rank {source} is a {type(value).__name__}, "
            f"not an array, so it cannot fill buf={describe(buf)}; call recv() without buf")
    have, want = _arrays.dtype_name(value), _arrays.dtype_name(buf)
    if have != want:
        raise TypeError(
            f"rank {rank}: {req.op}: message from rank {source} has dtype {have} but buf "
            f"has dtype {want}; receive into a {have} buffer, or without buf")
    size, room = _arrays.nbytes(value), _arrays.nbytes(buf)
    if size > room:
        raise TruncationError(
            rank, req.op, f"message from rank {source} is {size} bytes but buf holds {room}",
            "pass a larger buf, or size it with probe() first")
    if tuple(value.shape) == tuple(buf.shape):
        _arrays.copy_into(buf, value)  # device to device, or staged through host across libraries
    else:  # a shorter message fills the front, as in MPI
        _arrays.fill_front(buf, value)
