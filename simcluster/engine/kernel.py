"""The kernel: virtual clock, event calendar, and stepping rank coroutines.

Everything else is built on the few calls made here. A rank is a coroutine
the kernel steps itself with ``coro.send()`` (``Task``); it runs until it
awaits a pending ``Request``, which it yields to the kernel, and the kernel
parks it there (state ``BLOCKED``). Whoever completes the request (a message
arriving, a timer, a collective's meeting) calls ``Request.complete``, which
hands the parked rank back with ``Kernel.resume_waiter``. A rank that awaits
something foreign (an asyncio future: real I/O, ``asyncio.sleep``) is handed
to the running asyncio loop (state ``FOREIGN``) and comes back when that
future is done.

The kernel's API, for the layers above it:

* ``now``, ``current`` (the task being stepped), ``schedule(t, fn, arg)``
  (run ``fn(arg)`` at virtual time ``t``);
* ``start``/``spawn`` (add a rank or a helper task), ``resume_waiter`` and
  ``wake`` (hand a parked task back: the requests' seam, ``request.Waker``),
  ``post_sleep`` (a timer: a request the kernel completes itself);
* ``advance`` (run the events due, up to a time): ``engine.running`` drives it
  from asyncio, with the run's timeout and its watchdog;
* ``layer``: the layer above (a ``Layer``: ``engine.protocol.P2P``), set by the engine, and
  the instant hooks the kernel calls on it: ``end_instant`` (settle what the
  instant that just ended left behind: the protocol charges its messages
  there), ``instant_open``, ``owner`` (whom an event touches) and
  ``cancel`` (take a pending request out of its queue);
* ``reports`` (a ``Reports``: the deadlock and timeout reports and the
  buffer-hazard check), which the engine hands the kernel when it is made
  (``engine.diagnostics.Diagnostics``, a part of its own, not a layer);
* hooks that ``engine.assembly`` installs: ``checks`` (``engine.checks``: how
  ranks use their requests, strict runs' unawaited calls) and ``slowdown``
  (a fault plan's slow ranks: their timers stretch).

Not here: how a rank's function becomes a task (``Engine.start_rank``:
coroutine, greenlet or thread), the meetings of analytic collectives
(``engine.meetings``), the run under asyncio with its timeout
(``engine.running``).

Rule 1: time only moves in ``_run_events``, to the earliest time that has
events once none is left at the current one. A rank runs at the time of the
event that resumed it, so every rank's clock is the kernel's ``now`` while it
runs, and time never jumps while a rank is still runnable (or is awaiting
something foreign).
Rule 2: events due at one virtual time run in batches, each in an order drawn
from the run's seeded RNG (``order``), so the same seed gives the same
schedule and another seed may give another one. A request completed by an
event resumes its rank right there (one event per message, not two); one
completed while a rank runs wakes its waiter in the next batch.
Rule 3: a rank that fails ends the run at the virtual time it failed: the
other ranks still run what is due at that instant (their lines printed then
are not lost, as under mpiexec, where the other processes run on until the
job is killed), and time does not move on. A rank on an OS thread (torch's)
that does not hand control back within ``engine.sync.FAILING_GRACE`` seconds then
(blocked inside C++) is left behind.

No event left, no rank runnable, no foreign await, and some rank unfinished:
that is a deadlock, reported by ``reports.deadlock`` (``engine.running``).
"""

from __future__ import annotations

import heapq
import inspect
import random
import types
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, Protocol

from . import schedule as _schedule, sync as _sync
from ..errors import RankCrashed, SimclusterError
from .task import BLOCKED as BLOCKED, FINISHED as FINISHED, FOREIGN as FOREIGN, READY as READY
from .task import RUNNING as RUNNING, TASK_STATES as TASK_STATES, CollectiveCall as CollectiveCall
from .task import RankComm as RankComm, Task as Task
from .waits import WaitAny as _WaitAny
from ..request import SPIN_LIMIT, Request, Waker

if TYPE_CHECKING:
    import asyncio

    from .settings import EngineSettings
    from ..trace import Trace

Event = tuple[Callable[[Any], None], Any]
"""``fn(arg)``, due at some virtual time."""

_heappush: Final = heapq.heappush  # Final: compiled, a static rather than a module lookup
_heappop: Final = heapq.heappop

BREATHE_EVERY: Final = 1 << 14
"""Events ``advance`` runs by default between returns to the asyncio loop (timeout checks)."""

_BARE_YIELD: Final = object()
"""``Task.waiting`` after a bare yield: polling spins keep counting across it."""

_running: Final[list[Task | None]] = [None]
"""The task being stepped right now, for ``simcluster.dist``; None between steps.

A list's one item rather than a global rebound at each step: compiled, that
is a store into a list the module holds, not into the module's dict."""


def current_task() -> Task | None:
    """Return the rank task being stepped right now, if any."""
    return _running[0]


class Reports(Protocol):
    """What the engine asks of its reports (``Kernel.reports``: ``engine.diagnostics.Diagnostics``).

    Its declared seam: the run under asyncio asks for the deadlock and
    timeout reports (``engine.running``), the checks for the hazard check
    (``engine.checks``).
    """

    def check_hazard(self, req: Request[Any], guard: tuple[list[Any], list[int], str]) -> None: ...

    def deadlock(self) -> SimclusterError: ...

    def timeout_report(self, spinning: tuple[Task, str] | None = None) -> str: ...


class Layer:
    """The layer above the kernel, as the kernel calls it: its instant hooks (a declared seam).

    This base is the layer of a kernel with nothing above it: nothing to
    settle, no queue to cancel from. ``engine.protocol.P2P`` is the real one. A
    native class rather than a ``typing.Protocol``: compiled, the kernel's
    calls to it are direct (``end_instant`` runs once per virtual instant).
    """

    def end_instant(self) -> bool:
        """Settle what the instant that just ended left behind; return whether it made events now.

        Called once no event is left at ``now``, before time moves on.
        """
        return False

    def instant_open(self) -> bool:
        """Whether ``end_instant`` has something to settle at ``now``."""
        return False

    def owner(self, fn: Callable[[Any], None], arg: Any) -> set[int] | None:
        """The ranks an event of this layer touches (None: not this layer's event, or unknown)."""
        return None

    def cancel(self, req: Request[Any]) -> bool:
        """Take a pending request out of the queue it waits in; return whether it was there."""
        return False


class Kernel(Waker):
    """Steps rank coroutines in virtual-time order; the layer above moves their messages.

    ``engine.Engine`` puts it together with that layer (``layer``), hands it
    its ``reports`` and installs its hooks (``checks``, ``slowdown``). Its
    base is the seam its requests call it through (``request.Waker``).
    """

    reports: Reports  # what went wrong, where (``engine.diagnostics``); the engine sets it when made

    def __init__(self, world_size: int, settings: EngineSettings, trace: Trace | None = None) -> None:
        self.world_size = world_size
        seed = settings.seed
        self.rng = random.Random(seed)
        self.seed = seed
        self.strict = settings.strict
        self.timeout = settings.timeout
        self.compute = settings.compute  # run(compute=...): how synchronous ranks' own work is charged
        self.trace = trace  # run(trace=...)
        self.now = 0.0
        # the real clocks now: inside a synchronous rank, time.time() and the others read
        # these plus ``now`` (engine.sync.Epoch); the differences stay virtual and deterministic
        self.epoch: _sync.Epoch = _sync.epoch()
        # the event queue: what is due now, and later times' events by time (a calendar;
        # a heap of single events costs log(events) tuple comparisons per event at scale)
        self._ready: list[Event] = []  # the batch running now
        self._due: list[Event] = []  # the next batch at this time
        self._later: dict[float, list[Event]] = {}
        self._times: list[float] = []  # heap of the keys of _later
        self._random = self.rng.random
        self.tasks: list[Task] = []
        self._helpers: dict[int, Task] = {}  # live helper tasks (nonblocking collectives)
        self._spawned = [0] * world_size  # helpers each rank has started (Task.serial)
        self.calls = []  # strict: calls not yet awaited (engine.awaits.Note; checks.check_calls)
        self.current = None
        self._looping = False  # inside _run_events: a request completed by an event resumes its rank at once
        self.foreign = 0  # ranks awaiting a foreign future: time waits for them
        self.wake_future: asyncio.Future[None] | None = None  # engine.running waits on it for them
        self._failure: tuple[Task, BaseException] | None = None
        # a rank that failed while others may still run at this instant (Rule 3)
        self._failing: tuple[Task, BaseException] | None = None
        self.poll_cost = settings.poll_cost  # virtual seconds a synchronous rank's fruitless poll costs
        self.pollers = 0  # synchronous ranks sleeping off a fruitless poll right now
        self.stalled_polls = 0  # fruitless polls in a row while nothing but polls was pending
        self._unfinished = 0
        self.events = 0  # events run so far, brought up to date each time the loop breathes
        self._resume_key = self._resume  # bound once: an event per resumed rank names it
        self.layer = Layer()  # the layer above: the engine puts its P2P here
        # a hook: a fault plan's Slow faults multiply a rank's timers (its compute) in their window
        self.slowdown: Callable[[int, float], float] | None = None
        # run(schedule=...): "batch" changes nothing; "shuffle" makes ``order`` shuffle each
        # batch; a chooser (a list of choices, explore's search) runs ``_run_loop_chosen``
        # instead of ``_run_loop``, and while its running event has a footprint set
        # (``touched``), ``_step`` and the protocol's delivery note the ranks they touch
        # (``engine.schedule``). Flags, not replaced methods: the compiled build's methods
        # cannot be replaced on an instance.
        schedule = settings.schedule
        self._shuffle = schedule == "shuffle"
        self.chooser: _schedule.Chooser | None = (
            None if schedule == "batch" or self._shuffle else _schedule.chooser(schedule))
        self.touched: set[int] | None = None  # ranks the running event touched (chooser runs)
        self._footprints = self.chooser is not None and self.chooser.footprints  # the chooser wants touched

    @property
    def unfinished(self) -> int:
        """How many of this engine's ranks have not returned yet."""
        return self._unfinished

    # ---- the calendar ----

    def schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        """Run ``fn(arg)`` at virtual time ``t``: in the next batch if ``t <= now``."""
        if t <= self.now:
            self._due.append((fn, arg))
            return
        bucket = self._later.get(t)
        if bucket is None:
            self._later[t] = [(fn, arg)]
            _heappush(self._times, t)
        else:
            bucket.append((fn, arg))

    def runnable(self) -> bool:
        """Whether some event is due at ``now`` (to run in this batch or the next)."""
        return bool(self._ready or self._due)

    def next_later(self) -> float | None:
        """The time of the earliest event after the current batches, or None when there is none."""
        return self._times[0] if self._times else None

    def order(self, events: list[Event]
              ) -> list[Event]:
        """Put one batch of simultaneous events in this run's seeded order (run from the end).

        The order is the batch rotated by a seeded offset and maybe reversed:
        any two simultaneous events run in either order under some seed, and
        the rest keep their neighbours, so a million-rank round walks memory
        in sequence (a full shuffle made big runs 1.6x slower by cache misses
        alone). Under schedule="shuffle", a full seeded permutation instead:
        every order of n simultaneous events occurs under some seed (the
        rotations reach 2n of them); it costs a random draw per event and
        scatters a big round's memory accesses, hence not the default. Under
        a chooser (explore's search), the batch as it is: the chooser picks
        each event as it runs (``_run_loop_chosen``).
        """
        n = len(events)
        if self.chooser is not None:  # the chooser orders each batch as it runs
            return events
        if self._shuffle:
            self.rng.shuffle(events)
            return events
        if n > 1:
            k = int(self._random() * 2 * n)
            if k % n:
                events = events[k % n:] + events[:k % n]
            if k >= n:
                events.reverse()
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
            if self.chooser is not None:
                budget = self._run_loop_chosen(limit, budget)
            else:
                budget = self._run_loop(limit, budget)
        finally:
            self._looping = False
        if budget and self._failing is not None and self._failure is None:
            self._failure = self._failing  # nothing is left at the failure's instant: the run ends
        return budget

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
            self._ready = ready = self.order(due)
        return budget

    def _next_due(self, limit: float) -> list[Event] | None:
        """Return the next batch of due events, moving time; None when nothing runs before ``limit``.

        None also while a rank waits on asyncio, or once the run failed.
        """
        while True:
            if self._due:
                due, self._due = self._due, []
                return due
            if not self.foreign and self.layer.end_instant():
                if self._failure is not None:
                    return None
                continue  # what the instant left behind was settled and made more to do
            times = self._times
            if not times or times[0] > limit or self.foreign:
                return None
            if self._failing is not None:  # a rank failed: the run ends with this instant
                return None
            t = _heappop(times)
            self.now = t
            return self._later.pop(t)

    def _run_loop_chosen(self, limit: float, budget: int) -> int:
        """``_run_loop`` under a chooser: it picks each event of a batch in turn (``engine.schedule``).

        A batch keeps the order its events were scheduled in; the members of an
        analytic collective completed by one ``finish_each`` event count as one
        event each here, so their order is a choice too.
        """
        chooser = self.chooser
        assert chooser is not None
        ready = self._ready
        while budget and self._failure is None:
            if ready:
                fn, arg = ready.pop(chooser.pick(len(ready)))
                touched = self._owner(fn, arg)
                if self._footprints:
                    self.touched = touched  # _step and delivery add the ranks they touch
                fn(arg)
                self.touched = None
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
        # by equality: a compiled method is a new bound object at each access
        if fn == self._resume:
            return {arg.rank}
        if fn == finish_request or fn == finish_one:
            task = (arg if fn == finish_request else arg[0]).task
            return None if task is None else {task.rank}
        return self.layer.owner(fn, arg)

    # ---- tasks: start, step, park, resume ----

    def start(self, task: Task) -> None:
        """Add a rank and schedule its first step: at time 0, or now for a rank added during the run."""
        if task.rank >= self.world_size:  # added during the run (Engine.add_ranks): the world grows
            self._spawned.extend([0] * (task.rank + 1 - self.world_size))
            self.world_size = task.rank + 1
        self.tasks.append(task)
        self._unfinished += 1
        self.schedule(0.0, self._resume_key, task)

    def spawn(self, coro: Coroutine[Any, Any, Any], op: str,
              collective: CollectiveCall | None = None) -> Request[Any]:
        """Run ``coro`` as a helper of the current rank; return a request for its result.

        Nonblocking collectives use this: the helper progresses on its own while
        the rank goes on, and its result or error goes to the request.
        """
        owner = self.current
        if owner is None:
            coro.close()
            raise RuntimeError(f"{op}: called outside any rank; call it from a rank's coroutine")
        req: Request[Any] = Request(self, owner, op)
        req.nonblocking = True
        helper = Task(owner.rank, coro)
        self._spawned[owner.rank] += 1
        helper.serial = self._spawned[owner.rank]  # program order: Rule 4 orders by it
        helper.comm = owner.comm
        helper.collective = collective
        helper.done_request = req
        self._helpers[id(helper)] = helper
        if self.strict:
            self.checks.track(req)
        self.schedule(self.now, self._resume_key, helper)
        return req

    def resume_waiter(self, task: Task) -> None:
        """Hand back a task parked on a request that just completed (``Request.complete``).

        Inside an event, between rank steps, it runs right here (one event per
        message); inside another rank's step it runs after that one, in the
        next batch at this time.
        """
        if task.state == BLOCKED:
            if self.current is None and self._looping and self._failure is None:
                self._step(task)
            else:
                task.state = READY
                self.schedule(self.now, self._resume_key, task)

    def wake(self, task: Task) -> None:
        """Schedule a parked task to resume at the current time (its request was cancelled)."""
        if task.state == BLOCKED:
            task.state = READY
            self.schedule(self.now, self._resume_key, task)

    def _resume(self, task: Task) -> None:
        if task.state == READY:
            self._step(task)

    def _step(self, task: Task) -> None:
        """Run one rank until it parks, finishes or fails."""
        task.state = RUNNING
        if self.touched is not None:  # exploring with footprints (see __init__)
            self.touched.add(task.rank)
        if task.waiting is not _BARE_YIELD:
            task.spins = 0
        self.current = _running[0] = task
        try:
            yielded = task.coro.send(None)
        except StopIteration as stop:
            task.state = FINISHED
            task.result = stop.value
            task.time = self.now
            task.waiting = None  # the last request it waited on names it back: no cycle to keep its value
            if task.done_request is not None:
                del self._helpers[id(task)]
                task.done_request.complete(stop.value)
            else:
                self._unfinished -= 1
            return
        except Exception as exc:
            task.state = FINISHED
            task.time = self.now
            task.waiting = None
            if task.done_request is not None:  # a helper's error belongs to its request
                del self._helpers[id(task)]
                task.done_request.complete(None, exc)
                return
            self._unfinished -= 1
            if self._failing is None:  # the rank failed: the run ends with this instant (Rule 3)
                self._failing = (task, exc)
            return
        except RankCrashed:  # the run's fault plan crashed the rank at this call
            owner = task if task.done_request is None else next(t for t in self.tasks if t.rank == task.rank)
            self.stop(owner)
            return
        except BaseException as exc:
            task.state = FINISHED
            self._failure = (task, exc)
            return
        finally:
            self.current = _running[0] = None
            if self.calls:  # strict runs only: was every simcluster call awaited?
                self.checks.check_calls()
        if isinstance(yielded, Request):  # the common case, inline
            task.state = BLOCKED
            task.waiting = yielded
            yielded.set_waiter(task)
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
            self.schedule(self.now, self._resume_key, task)
        elif isinstance(yielded, _WaitAny):
            task.state = BLOCKED
            task.waiting = yielded
            for req in yielded.requests:
                if not req.done():
                    req.set_waiter(task)
        elif getattr(yielded, "_asyncio_future_blocking", None) is not None:
            yielded._asyncio_future_blocking = False
            task.state = FOREIGN
            task.waiting = yielded
            self.foreign += 1
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
        self.foreign -= 1
        task.state = READY
        task.waiting = None
        self.schedule(self.now, self._resume_key, task)
        fut = self.wake_future
        if fut is not None and not fut.done():
            fut.set_result(None)

    # ---- what requests ask of the layers above ----

    def cancel(self, req: Request[Any]) -> bool:
        """Take a pending request out of the queue it waits in; return whether it was there.

        The kernel's own requests (timers, meetings) cannot be cancelled; the
        layer above cancels its own (``engine.protocol``: receives and probes).
        """
        return self.layer.cancel(req)

    # ---- the parts the kernel reads: the engine's reports (``engine.diagnostics``) ----

    def helper_tasks(self) -> list[Task]:
        """The live helper tasks: ranks' nonblocking collectives, in the order they started."""
        return list(self._helpers.values())

    # ---- the main loop ----

    def advance(self, limit: float = float("inf"), budget: int = BREATHE_EVERY) -> None:
        """Run the events due up to virtual time ``limit``, at most ``budget`` of them (-1: no bound).

        Returns when no event is left at or before ``limit``, when a rank
        failed, when the next event lies in the future while some rank awaits a
        foreign future (time must not jump past it), or after ``budget`` events,
        so that the asyncio loop and the timeout get a turn (``engine.running``
        drives it). Bounded runs count the events run (``events``).
        """
        left = self._run_events(limit, budget)
        if budget > 0:
            self.events += budget - left

    def close(self) -> None:
        """Cancel every unfinished rank.

        A rank's ``finally:`` blocks run here, outside the simulation: one that
        awaits a simcluster call fails, and that failure is dropped so it can
        neither hide the error that stopped the run nor keep others open.
        """
        for task in [*self.tasks, *self._helpers.values()]:
            if task.state != FINISHED:
                if task.state == FOREIGN and hasattr(task.waiting, "cancel"):
                    task.waiting.cancel()
                task.state = FINISHED
                try:
                    _close_task_coro(task.coro)
                except Exception:  # noqa: BLE001 - see the docstring
                    pass

    def stop(self, task: Task) -> None:
        """Crash-stop ``task``'s rank now (a fault plan's crash): it and its helpers never run again.

        Their coroutines are closed (``finally:`` blocks run, outside the
        simulation: a simcluster call there fails, and that is dropped).
        """
        victims = [task, *[h for h in self._helpers.values() if h.rank == task.rank]]
        for victim in victims:
            if victim.done_request is not None:
                self._helpers.pop(id(victim), None)
            if victim.state == FINISHED:
                continue
            if victim.done_request is None:
                self._unfinished -= 1
            running = victim.state == RUNNING  # its coroutine has ended already (RankCrashed)
            if victim.state == FOREIGN:
                self.foreign -= 1
                if hasattr(victim.waiting, "cancel"):
                    victim.waiting.cancel()
            victim.state = FINISHED
            victim.time = self.now
            victim.result = None
            if not running:
                current, self.current = self.current, None
                _running[0] = None
                try:
                    _close_task_coro(victim.coro)
                except BaseException:  # noqa: BLE001 - see the docstring
                    pass
                finally:
                    self.current = _running[0] = current

    def complete_all(self, completions: list[tuple[Request[Any], Any, BaseException | None]]) -> None:
        """Complete several requests at once: the ranks they wake run only once all are complete."""
        looping, self._looping = self._looping, False  # resume_waiter schedules instead of stepping
        try:
            for req, value, error in completions:
                req.complete(value, error)
        finally:
            self._looping = looping

    def fail(self, task: Task, exc: BaseException) -> None:
        """Stop the run now: ``task`` failed with ``exc`` (a strict run's unawaited call)."""
        self._failure = (task, exc)

    @property
    def failing(self) -> bool:
        """Whether a rank failed: the run ends with this instant (Rule 3)."""
        return self._failing is not None

    @property
    def failure(self) -> tuple[Task, BaseException] | None:
        """The task that stopped the run and its exception, if one did."""
        return self._failure

    # ---- a request the kernel completes itself; what polling ranks ask ----

    def post_sleep(self, seconds: float, op: str) -> Request[None]:
        """Return a request that completes ``seconds`` of virtual time from now."""
        task = self.current
        req: Request[None] = Request(self, task, op)
        slowdown = self.slowdown  # a hook: engine.assembly installs a fault plan's
        if slowdown is not None and task is not None:
            seconds *= slowdown(task.rank, self.now)
        self.schedule(self.now + seconds, finish_request, req)
        return req

    def only_polls_pending(self) -> bool:
        """Whether nothing but polling ranks' wake-ups is scheduled (no message, timer or rank to run).

        Then only a polling rank can change anything. Costs up to ``pollers``
        steps: it is asked by synchronous ranks' fruitless polls only. A process
        hosting some of the ranks (shm, tcp) sees only its own calendar.
        """
        if self.foreign or self.layer.instant_open():
            return False
        pending = self.pollers
        n = len(self._ready) + len(self._due)
        if n > pending:
            return False
        for bucket in self._later.values():
            n += len(bucket)
            if n > pending:
                return False
        return True


def finish_request(req: Request[Any]) -> None:
    """Complete ``req`` (a timer's event)."""
    req.complete()


def _close_task_coro(coro: Any) -> None:
    """Close a rank's or helper's coroutine; an unstarted one also closes the coroutines it was given.

    A helper that never ran (``comm._as_coro(body)``) holds its body's coroutine
    as an argument; closing only the wrapper would leave that one to warn that
    it was never awaited.
    """
    frame = coro.cr_frame if inspect.iscoroutine(coro) else None
    if frame is not None and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        for value in frame.f_locals.values():
            if isinstance(value, types.CoroutineType):
                value.close()
    coro.close()


def finish_one(pair: tuple[Request[Any], Any]) -> None:
    """Complete one (request, value) pair of a ``finish_each`` (chosen schedules)."""
    pair[0].complete(pair[1])


def _one_each(due: list[Event]) -> list[Event]:
    """Return a batch with each ``finish_each`` event split into one event per member."""
    if all(fn is not finish_each for fn, _ in due):
        return due
    events: list[Event] = []
    for fn, arg in due:
        if fn is finish_each:
            events.extend((finish_one, pair) for pair in reversed(arg))
        else:
            events.append((fn, arg))
    return events


def finish_each(pairs: list[tuple[Request[Any], Any]]) -> None:
    """Complete each (request, value) pair, from the end of the list (``Kernel.order``): a meeting's end."""
    for i in range(len(pairs) - 1, -1, -1):  # not reversed(): mypyc 2.4 fails on it here
        req, value = pairs[i]
        req.complete(value)


