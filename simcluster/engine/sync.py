"""Synchronous ranks: plain ``def`` rank functions, each on a stack of its own.

The engine steps every rank as a coroutine (``send(None)`` until it yields a
request, ``close()`` to cancel it). A synchronous rank is an object with that
same face, ``SyncRank``, whose body runs on a greenlet: a blocking call made
anywhere in the rank's code (``block(awaitable)``) drives the awaitable and,
where it would ``await`` a pending request, switches back to the engine with
that request. So synchronous ranks get the engine, matching, virtual time,
checks and traces of async ranks unchanged.

The stack mechanism is one class: another one (OS threads, for code that
blocks inside C extensions) needs ``send``, ``close`` and ``suspended_frame``
and a ``block`` of its own.

Per-rank process state, swapped as ranks run:
- Python's ``random`` and numpy's global generator: while a run has
  synchronous ranks, the module-level functions (``random.random``,
  ``np.random.seed``, ...) are wrapped so that the first call a rank makes
  after another rank used the generator swaps that rank's own state in.
  Each rank starts from a state seeded by the run's seed and its rank; code
  outside synchronous ranks keeps the process's own state.
- torch's default generator (where torch is loaded): swapped at every switch
  between ranks (it is cheap, and torch's C++ draws from it directly).
- ``time.sleep`` inside a synchronous rank is a virtual sleep of that rank,
  and the clocks ``time.time``, ``time.monotonic`` and ``time.perf_counter``
  (and their ``_ns`` forms) read the rank's virtual time: each is its real
  reading when the run started (``Epoch``, the kernel's ``epoch``) plus
  the virtual seconds since, so ``MPI.Wtime``, ``time.sleep`` and every
  clock agree. Only the epoch is wall time (a run's dates are of the day
  it ran); the differences are virtual and deterministic. Other threads,
  and the engine's own, keep the real clocks: simcluster's own modules bind
  ``time``'s functions at import, so nothing of theirs reads a rank's clock.
- OS threads a rank starts are real threads with the real clocks; a wall
  wait for them that a facade reports (``owe``) is charged to the rank.
- ``on_switch(enter, leave)`` lets a launcher swap more (``sys.argv``,
  ``sys.modules["__main__"]``) for one rank.

Measured compute (``compute="cpu"`` or ``"wall"``, as SMPI benches the code
between MPI calls): each rank has a ``Meter``, a clock that runs only while the user's
own code does. A facade stops it where a call enters simcluster and starts it
again just before the call returns to the user's code (``stop_clock`` /
``start_clock``, or the wrappers ``measured_calls`` installs on a facade's
entry points while a measured run goes on); what ran in between (a burst of
the user's work, times the factor, when it reaches the threshold) is charged
at the entry as a virtual sleep. Copies, packing, rank switches and output
capture happen while the clock is stopped. ``block`` stops it too when called
straight from the user's code, and reading one of ``time``'s clocks charges
the burst so far (``_reading``). A run records its charges per rank and call
(``record=FILE``) and ``replay:FILE`` charges them again instead of measuring.
Modelled compute (``compute="gpu:h100_sxm"``): the same meter reads, instead of a clock, the
predicted GPU seconds of the rank's aten ops (``simcluster.torch._gpu`` attaches it to torch
ranks); each charge is a span ``compute`` on the rank's compute stream in the trace.
"""

from __future__ import annotations

import functools
import json
import os
import random as _random
import re
import sys
import threading
import time as _time
import types
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType
from typing import Any, NamedTuple, TypeVar

import greenlet

from ..errors import UsageError

T = TypeVar("T")

FAILING_GRACE = 5.0
"""Wall seconds a rank on an OS thread gets to hand back once another rank failed (``ThreadRank``)."""

_real_sleep = _time.sleep
_real_time_ns, _real_monotonic_ns, _real_perf_counter_ns = (
    _time.time_ns, _time.monotonic_ns, _time.perf_counter_ns)


class _RankGreenlet(greenlet.greenlet):  # type: ignore[misc]
    """The greenlet a synchronous rank runs on; knows its rank."""

    rank: SyncRank


class SyncRank:
    """A plain rank function presented to the engine as a coroutine.

    ``send(None)`` runs the rank until it blocks (returning the request it
    waits for) or returns (raising ``StopIteration`` with its value);
    exceptions the rank raises come out of ``send`` as they would from a
    coroutine, traceback intact.
    """

    __slots__ = ("_glet", "_hub", "_fn", "_args", "_kwargs", "comm", "closing", "meter",
                 "enter", "leave", "rng", "np_rng", "torch_rng", "rank", "owed")

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                 comm: Any, rank: int, compute: Compute | None = None) -> None:
        self._glet = _RankGreenlet(self._main)
        self._glet.rank = self
        self._hub: greenlet.greenlet | None = None
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self.comm = comm  # the rank's world simcluster.Comm (for sleep and compute charges)
        self.rank = rank
        self.closing = False
        # compute="cpu", "wall" or "replay:FILE": the clock of the rank's own work (None: off)
        self.meter = None if compute is None else compute.meter(rank)
        self.enter: Callable[[], None] | None = None
        self.leave: Callable[[], None] | None = None
        self.rng: Any = None  # this rank's saved random / numpy / torch states (None: not yet made)
        self.np_rng: Any = None
        self.torch_rng: Any = None
        self.owed = 0.0  # wall seconds spent waiting for its own threads, not charged yet (owe)

    def _main(self) -> Any:
        meter = self.meter
        if meter is not None:
            meter.since = meter.clock()  # the rank's function is the user's code (launchers stop_clock)
        value = self._fn(*self._args, **self._kwargs)
        if _is_awaitable(value):
            close = getattr(value, "close", None)
            if close is not None:
                close()
            name = getattr(self._fn, "__name__", "fn")
            raise TypeError(f"rank {self.rank}: {name}(comm) returned an awaitable from a plain "
                            f"function; define it with async def {name}(comm), or call the "
                            "blocking simcluster.MPI methods instead of awaiting")
        if meter is not None:
            stop_clock(self, "exit")  # the work after the last call ends the rank later
        return value

    def send(self, _value: None) -> Any:
        glet = self._glet
        self._hub = greenlet.getcurrent()
        if _states.torch is not None:
            _states.torch_in(self)
        enter = self.enter
        if enter is not None:
            enter()
        try:
            yielded = glet.switch()
        finally:
            leave = self.leave
            if leave is not None:
                leave()
            if _states.torch is not None:
                _states.torch_out(self)
        if glet.dead:
            raise StopIteration(yielded)
        return yielded

    def suspend(self, yielded: Any) -> None:
        """From the rank's own stack: hand ``yielded`` to the engine; return when resumed."""
        self._hub.switch(yielded)  # type: ignore[union-attr]
        if signalled and self.rank in signalled:
            _run_signals(self.rank)

    def close(self) -> None:
        """Cancel the rank: unwind its stack (its ``finally`` blocks run) with GreenletExit."""
        glet = self._glet
        if glet.dead or not glet:  # finished, or never started
            return
        self.closing = True
        self._hub = greenlet.getcurrent()
        glet.throw(greenlet.GreenletExit)

    @property
    def suspended_frame(self) -> FrameType | None:
        """The innermost frame of the rank's stack while it is suspended."""
        frame: FrameType | None = self._glet.gr_frame
        return frame


class _Cancelled(BaseException):
    """Raised inside a thread rank's blocking call when the run cancels the rank."""


_thread_ranks = threading.local()


def _taken_lock() -> Any:
    """A lock created held: whoever acquires it next waits until the other side releases it."""
    lock = threading.Lock()
    lock.acquire()
    return lock


class ThreadRank(SyncRank):
    """A synchronous rank on an OS thread of its own; one rank runs at a time.

    For code that blocks inside C extensions or keeps thread-local state in
    C++ (torch): every rank is a real thread, so such state is per rank, and
    a blocking call hands a baton back to the engine's thread instead of
    switching greenlets. The engine still steps one rank at a time, so the
    schedule is the engine's, not the OS scheduler's: deterministic.
    """

    __slots__ = ("_thread", "_go", "_back", "_handback", "_finished", "_lost")

    switches = 0
    """Thread switches made by every thread rank of the process so far: two per resume (the
    engine's thread wakes the rank's, which wakes the engine's when it blocks or ends). For
    ``simcluster bench torch``, which reports them per call."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                 comm: Any, rank: int, compute: Compute | None = None) -> None:
        super().__init__(fn, args, kwargs, comm, rank, compute)
        self._thread: threading.Thread | None = None
        # The baton: two plain locks used as binary semaphores, each held ("taken") while its
        # side must wait. A Lock's acquire and release are single C calls; a Semaphore's are
        # Python methods over a Condition that allocate a lock per wait (about 5 us more a switch).
        self._go = _taken_lock()  # released by the engine: the rank may run
        self._back = _taken_lock()  # released by the rank: control is back with the engine
        self._handback: tuple[bool, Any] = (False, None)  # (finished, value) or (False, yielded)
        self._finished = False
        self._lost = False  # blocked past FAILING_GRACE in a failing run: never resumed again

    def _body(self) -> None:
        _thread_ranks.rank = self
        self._go.acquire()
        try:
            if not self.closing:
                self._handback = (True, self._main())
        except _Cancelled:
            self._handback = (True, None)
        except BaseException as exc:  # noqa: BLE001 - handed to the engine's thread
            self._handback = (True, exc)
            self._finished = True
        else:
            self._finished = True
        finally:
            self._finished = True
            self._back.release()

    def send(self, _value: None) -> Any:
        if self._thread is None:
            self._thread = threading.Thread(target=self._body, name=f"simcluster rank {self.rank}",
                                            daemon=True)
            self._thread.start()
        generator = _states.torch  # torch's default generator: _States.torch_in / torch_out, inline
        if generator is not None:
            if self.torch_rng is None:
                self.torch_rng = _states.torch_saved
            generator.set_state(self.torch_rng)
        enter = self.enter
        try:
            if enter is not None:
                enter()
            ThreadRank.switches += 2
            self._go.release()
            if not self._back.acquire(True, self._grace()):
                self._lost = True
                raise RuntimeError(
                    f"rank {self.rank} did not hand control back within {FAILING_GRACE:g} s "
                    "after another rank failed (blocked inside C++?); its later output is lost")
        finally:
            leave = self.leave
            if leave is not None:
                leave()
            if generator is not None:
                self.torch_rng = generator.get_state()
        finished, value = self._handback
        if finished:
            self._join()
            if isinstance(value, BaseException):
                raise value
            raise StopIteration(value)
        return value

    def _join(self) -> None:
        """Wait for the rank's thread to end once its function returned (a moment later).

        A process that exits while a rank's thread still unwinds torch's
        thread-local C++ state can abort ("terminate called without an active
        exception"), so the run ends only after its threads did.
        """
        thread = self._thread
        if thread is not None:
            thread.join(FAILING_GRACE)

    def _grace(self) -> float:
        """How long to wait for the rank to hand back: for ever (-1), unless the run is failing.

        Once a rank failed, the others still run the failure's instant (the
        kernel's Rule 3), but a rank on an OS thread blocked inside C++ (gloo
        waiting for a peer that failed) would never hand back: it is given
        ``FAILING_GRACE`` seconds, then left behind.
        """
        kernel = getattr(self.comm, "kernel", None)
        return -1.0 if kernel is None or not kernel.failing else FAILING_GRACE

    def suspend(self, yielded: Any) -> None:
        self._handback = (False, yielded)
        self._back.release()
        self._go.acquire()
        if self.closing:
            raise _Cancelled
        if signalled and self.rank in signalled:
            _run_signals(self.rank)

    def close(self) -> None:
        """Cancel the rank: its blocking call raises, its stack unwinds on its own thread."""
        if self._thread is None or self._finished or self._lost:
            return
        self.closing = True
        self._go.release()
        self._back.acquire()
        self._join()

    @property
    def thread_ident(self) -> int | None:
        """The thread running this rank's code while the engine steps it (the watchdog interrupts it)."""
        thread = self._thread
        return None if thread is None or self._finished else thread.ident

    @property
    def suspended_frame(self) -> FrameType | None:
        thread = self._thread
        if thread is None or thread.ident is None:
            return None
        frame = sys._current_frames().get(thread.ident)
        while frame is not None and frame.f_code.co_filename == threading.__file__:
            frame = frame.f_back  # a wait inside threading's Python code: not where the rank is
        return frame


signalled: set[int] = set()
"""World ranks sent a signal by another rank (``os.kill``): its handlers run as it resumes."""


def signal_on_resume(rank: int) -> None:
    """Run world rank ``rank``'s pending signal handlers when it next resumes (``_rank_signals``)."""
    signalled.add(rank)


def handle_signals() -> None:
    """The calling rank's program ends: the signals sent to it meanwhile (and an ``os._exit`` of
    one of its threads) take effect now, as a process handles them before it exits."""
    rank = current()
    if rank is not None and signalled and rank.rank in signalled:
        _run_signals(rank.rank)


def _run_signals(rank: int) -> None:
    """On the rank's own stack, back from a blocking call: its pending signals' handlers run, and
    what they raise comes out of that call, as a process's handler runs once its call returns."""
    from .. import _rank_signals
    from . import frames as _frames

    signalled.discard(rank)
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and _frames.is_ours(frame.f_code.co_filename):  # the user's code, where
        frame = frame.f_back  # CPython's handler would get the frame it was running
    _rank_signals.run_pending(rank, frame)


def is_async(fn: object) -> bool:
    """Return whether ``fn`` is an async function (also through ``functools.partial`` or ``__call__``)."""
    import inspect

    while True:
        if inspect.iscoroutinefunction(fn):
            return True
        inner = getattr(fn, "func", None)  # functools.partial
        if inner is not None:
            fn = inner
            continue
        call = getattr(fn, "__call__", None)
        return (not inspect.isfunction(fn) and not inspect.ismethod(fn) and call is not None
                and inspect.iscoroutinefunction(call))


def _is_awaitable(value: object) -> bool:
    return hasattr(value, "__await__") and not isinstance(value, type)


def current() -> SyncRank | None:
    """Return the synchronous rank running now, or None outside one."""
    glet = greenlet.getcurrent()
    if type(glet) is _RankGreenlet:
        return glet.rank
    rank: SyncRank | None = getattr(_thread_ranks, "rank", None)
    return rank


def block(awaitable: Awaitable[T], rank: SyncRank | None = None) -> T:
    """Run ``awaitable`` to completion from a synchronous rank; return its value.

    Where the awaitable would suspend on a request, the rank switches back to
    the engine, which resumes it here when the request completes.

    Raises:
        RuntimeError: called outside a synchronous rank (the awaitable is closed).
    """
    if rank is None:
        glet = greenlet.getcurrent()
        rank = glet.rank if type(glet) is _RankGreenlet else getattr(_thread_ranks, "rank", None)
        if rank is None:
            _close(awaitable)
            raise RuntimeError(
                "a blocking simcluster call was made outside any synchronous rank; call it from "
                "the plain function passed to sc.run (or a script under simcluster mpirun)")
    if rank.closing:
        _close(awaitable)
        abandon(rank)
    meter = rank.meter
    if meter is not None and not meter.depth:  # straight from the user's code: stop its clock
        return _measured_block(awaitable, rank, meter)
    if rank.owed:  # with the clock stopped: the same calls whatever is owed
        settle(rank)
    it = awaitable.__await__()
    try:
        yielded = it.__next__()
        while True:
            rank.suspend(yielded)
            yielded = it.__next__()
    except StopIteration as stop:
        value: T = stop.value
        return value
    except BaseException:
        _close(it)
        raise


def owe(rank: SyncRank, seconds: float) -> None:
    """The rank stood still ``seconds`` of wall time waiting for OS threads it started.

    A process waiting for its threads loses that time, so the rank is
    charged it as a virtual sleep, at its next blocking call or clock read
    rather than now: a sleep now would let the other ranks run, for wall
    time the rank's threads would use as if the rank had waited it too.
    """
    rank.owed += seconds


def settle(rank: SyncRank) -> None:
    """Charge what the rank owes (``owe``) now, as a virtual sleep (its clock stopped, if measured)."""
    owed, rank.owed = rank.owed, 0.0
    block(rank.comm.sleep(owed), rank)


def _measured_block(awaitable: Awaitable[T], rank: SyncRank, meter: Meter) -> T:
    """``block`` called from the user's code in a measured run: charge the burst, then block."""
    meter.depth = 1
    try:
        try:
            _charge(rank, meter, "block")  # may suspend the rank, which may be cancelled there
        except BaseException:
            _close(awaitable)
            raise
        return block(awaitable, rank)
    finally:
        meter.depth -= 1
        if not meter.depth:
            meter.since = meter.clock()


STALL_LIMIT = 10_000
"""Fruitless polls in a row, with nothing but polls pending, before a poll waits for what it polls."""


def poll_wait(rank: SyncRank, wait: Callable[[], Awaitable[Any]], op: str) -> None:
    """A synchronous rank's poll found nothing: charge it ``engine.poll_cost`` of virtual time.

    So ``while not req.Test(): ...`` and ``Iprobe`` loops make progress on the
    virtual clock, as SMPI charges each ``MPI_Test``. While nothing but polls is
    pending (no message, timer or runnable rank anywhere), only a polling rank
    can change anything; after ``STALL_LIMIT`` such polls in a row, a poll
    waits for what it polls instead (``wait()``), so a run where every live
    rank polls for something that never comes ends in the engine's deadlock
    report rather than spinning forever in virtual time.
    """
    engine = rank.comm.kernel
    if engine.only_polls_pending():
        engine.stalled_polls += 1
        if engine.stalled_polls > STALL_LIMIT:
            block(wait(), rank)
            return
    else:
        engine.stalled_polls = 0
    engine.pollers += 1
    try:
        block(engine.post_sleep(engine.poll_cost, op), rank)
    finally:
        engine.pollers -= 1


class Until:
    """Awaitable: wait until ``req`` completes, leaving its result to be taken (by a test)."""

    __slots__ = ("req",)

    def __init__(self, req: Any) -> None:
        self.req = req

    def __await__(self) -> Any:
        req = self.req
        while not req.done():
            yield req


_abandoned: list[Any] = []
"""Stacks of ranks stopped for good by ``abandon``: held so that nothing ever resumes them."""


def abandon(rank: SyncRank) -> None:
    """Stop a rank of a run that has ended, for good; never returns.

    A run that ended unwinds its other ranks with ``GreenletExit``; code that
    catches every exception (``unittest`` does) would go on running the user's
    code. Its next simcluster call comes here: the rank's stack is parked
    where it is and never resumed (nor unwound by the garbage collector).
    """
    if isinstance(rank, ThreadRank):
        rank._finished = True
        rank._handback = (True, None)
        rank._back.release()
        threading.Event().wait()  # a daemon thread, parked until the process exits
    _abandoned.append(rank._glet)
    hub = rank._hub
    assert hub is not None
    hub.switch(None)
    raise AssertionError("an abandoned rank was resumed")  # pragma: no cover


def _close(obj: object) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        close()


def on_switch(enter: Callable[[], None] | None, leave: Callable[[], None] | None) -> None:
    """Call ``enter`` each time the current synchronous rank resumes, ``leave`` each time it stops.

    For launchers that give each rank process state of its own (``sys.argv``,
    ``sys.modules["__main__"]``). Calls ``enter`` once now, since the rank is running.
    """
    rank = current()
    if rank is None:
        raise RuntimeError("on_switch(): called outside a synchronous rank")
    rank.enter, rank.leave = enter, leave
    if enter is not None:
        enter()


# ---- measured compute ----


DEFAULT_THRESHOLD = 5e-6
"""Seconds: a shorter burst of the user's work is not charged (SMPI's ``smpi/cpu-threshold``).

SMPI's default, 1 us, is for C; between two calls, Python spends 0.5-3 us on
a loop's turn and a call's arguments (docs/mpi.md, "Measured compute")."""

RECORD_FORMAT = "simcluster compute record 1"
"""The ``format`` field of a record written with ``compute="cpu,record=FILE"``."""

CLOCKS: dict[str, Callable[[], float]] = {"wall": _time.perf_counter, "cpu": _time.thread_time}
"""What a burst is measured with: elapsed time, or the CPU time of the rank's thread (as SMPI)."""

_TIME = re.compile(r"\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>s|ms|us|µs|μs|ns)?\s*")
_UNITS = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}
_SPEC = ("compute must be None, 'wall', 'cpu', 'wall:FACTOR' or 'cpu:FACTOR' with FACTOR a "
         "positive number, optionally followed by ',threshold=T' (bursts shorter than T are not "
         "charged; default 5us) and ',record=FILE' (write what was charged), or 'replay:FILE' "
         "(charge what FILE recorded), or 'gpu:DEVICE' (a simcluster.predict preset's name, or a "
         "Device: the predicted GPU time of the aten ops each rank runs; torch ranks only)")


class Compute:
    """A run's ``compute=``: how each synchronous rank's own work is charged to its virtual clock.

    Measured (``wall`` or ``cpu``): a burst is the time from a call's return to
    the user's code until its next call (elapsed, or the CPU time of the rank's
    thread), less what reading the clock costs; it is charged times ``factor``
    when at least ``threshold``. Replayed (``replay:FILE``): the charges a
    measured run recorded, call by call. Modelled (``gpu:DEVICE``, clock
    ``gpu``): the predicted seconds of the rank's ops on ``device``, all charged.
    """

    def __init__(self, text: str, clock: str = "wall", factor: float = 1.0,
                 threshold: float = DEFAULT_THRESHOLD, record: str | None = None,
                 replay: str | None = None, replayed: dict[int, list[list[Any]]] | None = None,
                 world_size: int | None = None, device: Any = None) -> None:
        self.text = text
        self.clock = clock
        self.factor = factor
        self.threshold = threshold
        self.record = record  # write the charges here when the run ends
        self.replay = replay  # the record replayed, whose charges are ``replayed``
        self.replayed = replayed
        self.world_size = world_size  # of the replayed record
        self.device = device  # clock "gpu": the simcluster.predict.Device each rank's ops are timed on
        self.charges: dict[int, list[list[Any]]] = {}  # rank -> [[call index, call, seconds], ...]
        self.floor = -1.0  # what reading the clock costs (measured when the first rank starts)

    def meter(self, rank: int) -> Meter:
        """Return the clock of rank ``rank`` (made once, when the rank starts)."""
        if self.replayed is not None:
            return Meter(self, rank, None, self.replayed.get(rank, []))
        if self.floor < 0:
            self.floor = _floor(CLOCKS[self.clock]) if self.device is None else 0.0
        charges = None
        if self.record is not None:
            charges = self.charges[rank] = []
        return Meter(self, rank, charges, None)

    def check(self, world_size: int) -> None:
        """Raise ValueError when the replayed record was made with another world size."""
        if self.world_size is not None and self.world_size != world_size:
            raise ValueError(f"run(compute={self.text!r}): the record is of {self.world_size} "
                             f"ranks, this run has {world_size}; replay it with the world size, "
                             "script, arguments and options it was recorded with")

    def save(self, world_size: int) -> None:
        """Write the charges to ``record`` (one line per rank), if the run records them."""
        if self.record is None:
            return
        ranks = ",\n  ".join(json.dumps(self.charges.get(r, [])) for r in range(world_size))
        head = json.dumps({"format": RECORD_FORMAT, "clock": self.clock, "factor": self.factor,
                           "threshold": self.threshold, "floor": self.floor,
                           "world_size": world_size})
        with open(self.record, "w", encoding="utf-8") as f:
            f.write(f'{head[:-1]}, "ranks": [\n  {ranks}\n]}}\n')


def _floor(clock: Callable[[], float]) -> float:
    """What reading ``clock`` costs: the least of many differences of two reads in a row.

    A burst holds one such read (half of the one that started it, half of the
    one that ends it): it is taken off, so an empty burst measures about 0.
    """
    least = float("inf")
    for _ in range(200):
        start = clock()
        least = min(least, clock() - start)
    return least


class Meter:
    """One rank's measured compute: its clock, and what it charged or replays."""

    __slots__ = ("compute", "rank", "clock", "factor", "threshold", "floor", "depth", "since",
                 "calls", "charges", "replay", "at", "streams")

    def __init__(self, compute: Compute, rank: int, charges: list[list[Any]] | None,
                 replay: list[list[Any]] | None) -> None:
        self.compute = compute
        self.rank = rank
        # clock "gpu": reads 0 until the torch launcher attaches the rank's GpuClock (torch._gpu)
        self.clock = CLOCKS.get(compute.clock, _no_time)
        self.factor = compute.factor
        self.threshold = compute.threshold
        self.floor = compute.floor
        self.depth = 0  # calls into simcluster under way (the clock runs at 0 only)
        self.since = 0.0  # the clock's reading when it last started
        self.calls = 0  # calls that stopped the clock, the index of each charge
        self.charges = charges  # recording: [[call index, call, seconds], ...] charged
        self.replay = replay  # replaying: the recorded charges of this rank
        self.at = 0  # the next of them
        self.streams: Any = None  # compute="gpu:...": the rank's streams (torch._gpu.RankClock)

    def replayed(self, index: int, call: str) -> float:
        """The recorded charge of this rank's call number ``index`` (0.0: none recorded)."""
        replay, at = self.replay, self.at
        assert replay is not None
        if at < len(replay):
            at_index, at_call, seconds = replay[at]
            if at_index == index:
                if at_call != call:
                    self._diverged(index, call, f"the record has {at_call} there")
                self.at = at + 1
                return float(seconds)
        if call == "exit":
            self._diverged(index, call, "the record has more calls" if at < len(replay)
                           else "the record has no exit of this rank there")
        return 0.0

    def _diverged(self, index: int, call: str, problem: str) -> None:
        raise UsageError(self.rank, f"run(compute={self.compute.text!r})",
                         f"this run left the record at its call {index}, {call}: {problem}",
                         "replay a record of the same script, arguments, world size and options "
                         "(latency, seed)")


def _charge(rank: SyncRank, meter: Meter, call: str) -> None:
    """The burst of the user's work before ``call`` ends now: charge it as a virtual sleep."""
    stopped = meter.clock()
    index = meter.calls
    meter.calls = index + 1
    if meter.replay is None:
        spent = stopped - meter.since - meter.floor
        spent = spent * meter.factor if spent >= meter.threshold else 0.0
        charges = meter.charges
        if charges is not None and (spent or call == "exit"):
            charges.append([index, call, spent])
    else:
        spent = meter.replayed(index, call)
    if meter.clock is _no_time:
        raise UsageError(rank.rank, f"run(compute={meter.compute.text!r})", "a gpu: compute mode "
                         "times the aten ops of torch ranks, and this rank is not one",
                         "run the program with simcluster.torch.spawn or simcluster torchrun, or "
                         "charge measured time (compute='cpu')")
    if spent > 0.0 and not rank.closing:
        if meter.compute.device is None:
            block(rank.comm.sleep(spent), rank)
        else:
            block(_compute_stream(rank.comm, spent, call), rank)


async def _compute_stream(comm: Any, seconds: float, call: str) -> None:
    """Charge ``seconds`` of the rank's modelled GPU work: a virtual sleep, traced as a span
    ``compute`` on the rank's compute stream (``stream="compute"``: a track of its own)."""
    kernel = comm.kernel
    start = kernel.now
    await kernel.post_sleep(seconds, "compute")
    if kernel.trace is not None:
        kernel.trace.span(comm.world_rank, "compute", start, kernel.now, stream="compute",
                          seconds=seconds, before=call)


def _no_time() -> float:
    return 0.0


def stop_clock(rank: SyncRank | None, call: str | None) -> None:
    """The user's code enters simcluster (``call``): stop the rank's clock and charge the burst.

    For facades and launchers; pair each with ``start_clock``. Nested calls only
    count; ``call=None`` stops the clock without charging (a launcher's own work).
    May suspend the rank (the charge is a virtual sleep). Nothing to do outside a
    measured run.
    """
    meter = None if rank is None else rank.meter
    if rank is None or meter is None:
        return
    meter.depth += 1
    if meter.depth == 1 and call is not None:
        _charge(rank, meter, call)


def start_clock(rank: SyncRank | None) -> None:
    """Back to the user's code: start the rank's clock again (``stop_clock``'s pair)."""
    meter = None if rank is None else rank.meter
    if meter is None:
        return
    meter.depth -= 1
    if not meter.depth:
        meter.since = meter.clock()


def parse_compute(compute: object) -> Compute | None:
    """Return ``compute=`` parsed (None: off), reading the record of ``replay:FILE``.

    Raises:
        ValueError: not one of the forms in ``_SPEC``, or a record that cannot be read.
    """
    if compute is None:
        return None
    if not isinstance(compute, str) or compute.startswith("gpu:"):
        return _gpu_compute(compute)
    if compute.startswith("replay:"):
        return _load(compute, compute[len("replay:"):])
    head, *options = compute.split(",")
    clock, colon, text = head.partition(":")
    factor = -1.0
    if clock in CLOCKS:
        try:
            factor = float(text) if colon else 1.0
        except ValueError:
            pass
    if not 0 < factor < float("inf"):
        raise ValueError(f"run(compute={compute!r}): {_SPEC}")
    threshold, record = DEFAULT_THRESHOLD, None
    for option in options:
        name, _, value = option.partition("=")
        match = _TIME.fullmatch(value)
        if name.strip() == "threshold" and match is not None:
            threshold = float(match["num"]) * _UNITS[match["unit"]]
        elif name.strip() == "record" and value:
            record = value
            if not os.path.isdir(os.path.dirname(record) or "."):
                raise ValueError(f"run(compute={compute!r}): no folder {os.path.dirname(record)} "
                                 "to write the record in; create it, or record elsewhere")
        else:
            raise ValueError(f"run(compute={compute!r}): {option!r} is not an option: {_SPEC}")
    return Compute(compute, clock, factor, threshold, record)


def _gpu_compute(compute: object) -> Compute:
    """``compute="gpu:NAME"`` (a preset of ``simcluster.predict.DEVICES``) or a ``Device``."""
    from ..predict import DEVICES, Device

    if isinstance(compute, Device):
        return Compute(f"gpu:{compute.name}", "gpu", 1.0, 0.0, device=compute)
    if isinstance(compute, str) and compute[len("gpu:"):] in DEVICES:
        return Compute(compute, "gpu", 1.0, 0.0, device=DEVICES[compute[len("gpu:"):]])
    names = ", ".join(f"'gpu:{name}'" for name in DEVICES)
    raise ValueError(f"run(compute={compute!r}): {_SPEC}; the GPU presets are {names}")


def _load(text: str, path: str) -> Compute:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ValueError(f"run(compute={text!r}): cannot read {path}: {exc.strerror}; give the "
                         "file a measured run wrote with compute='wall,record=FILE'") from None
    except ValueError as exc:
        raise ValueError(f"run(compute={text!r}): {path} is not JSON ({exc}); give the file a "
                         "measured run wrote with compute='wall,record=FILE'") from None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise ValueError(f"run(compute={text!r}): {path} is not a record of measured compute "
                         "(no 'format': '" + RECORD_FORMAT + "'); give the file a measured "
                         "run wrote with compute='wall,record=FILE'")
    ranks = data["ranks"]
    return Compute(text, str(data["clock"]), float(data["factor"]), float(data["threshold"]),
                   replay=path, replayed=dict(enumerate(ranks)), world_size=len(ranks))


_entries: list[tuple[Any, str, Any, Any]] = []
"""(owner, name, original, measured): the facades' entry points, wrapped by ``measured_calls``."""


def measured_calls(*owners: Any) -> None:
    """Make the public functions of ``owners`` (classes, modules) entry points of measured runs.

    A facade (``simcluster.MPI``, the torch backend) calls this once for what
    its users call. While a measured run goes on, each such function is
    replaced by a wrapper that stops the calling rank's clock (charging the
    burst before the call), runs the call, and starts the clock again just
    before returning to the user's code; nested calls pass straight through.
    Outside measured runs the originals are in place: no cost.
    """
    added = []
    for owner in owners:
        in_class = isinstance(owner, type)
        for name, value in list(vars(owner).items()):
            if name.startswith("_"):
                continue
            if isinstance(value, types.FunctionType):
                wrapped: Any = _entry(value, name)
            elif in_class and isinstance(value, (classmethod, staticmethod)) and isinstance(
                    value.__func__, types.FunctionType):
                wrapped = type(value)(_entry(value.__func__, name))
            else:
                continue
            added.append((owner, name, value, wrapped))
    _entries.extend(added)
    if _states.measured:  # registered while a measured run goes on: in place at once
        for owner, name, _original, wrapped in added:
            setattr(owner, name, wrapped)


def _entry(fn: Callable[..., Any], call: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def measured(*args: Any, **kwargs: Any) -> Any:
        rank = current()
        meter = None if rank is None else rank.meter
        if rank is None or meter is None or meter.depth:
            return fn(*args, **kwargs)
        meter.depth = 1
        try:
            _charge(rank, meter, call)
            return fn(*args, **kwargs)
        finally:
            meter.depth -= 1
            if not meter.depth:
                meter.since = meter.clock()

    return measured


# ---- per-rank process state ----


class _States:
    """The generators whose state each synchronous rank has of its own, while a run needs them."""

    def __init__(self) -> None:
        self.users = 0  # runs with synchronous ranks going on now
        self.seed = 0
        self.py_owner: SyncRank | None = None  # whose state `random` holds (None: the process's)
        self.py_saved: Any = None
        self.np_owner: SyncRank | None = None
        self.np_saved: Any = None
        self.torch: Any = None  # torch.default_generator while swapped
        self.torch_saved: Any = None
        self.patched: list[tuple[Any, str, Any]] = []
        self.measured = 0  # measured runs going on now: the facades' entry points are wrapped

    # random / numpy: swapped in by the first call a rank makes after another rank's
    def py_in(self) -> None:
        rank = current()
        if rank is self.py_owner:
            return
        inst = _random._inst  # its methods: the module's are wrapped
        state = inst.getstate()
        if self.py_owner is None:
            self.py_saved = state
        else:
            self.py_owner.rng = state
        if rank is None:
            inst.setstate(self.py_saved)
        elif rank.rng is None:
            inst.seed(f"simcluster:{self.seed}:{rank.rank}")
        else:
            inst.setstate(rank.rng)
        self.py_owner = rank

    def np_in(self) -> None:
        rank = current()
        if rank is self.np_owner:
            return
        np_random = sys.modules["numpy"].random.mtrand._rand  # its methods: the module's are wrapped
        state = np_random.get_state()
        if self.np_owner is None:
            self.np_saved = state
        else:
            self.np_owner.np_rng = state
        if rank is None:
            np_random.set_state(self.np_saved)
        elif rank.np_rng is None:
            np_random.seed((self.seed * 1_000_003 + rank.rank) % 2**32)
        else:
            np_random.set_state(rank.np_rng)
        self.np_owner = rank

    def torch_in(self, rank: SyncRank) -> None:
        gen = self.torch
        if rank.torch_rng is None:
            rank.torch_rng = self.torch_saved  # as a fresh process: the process's state at start
        gen.set_state(rank.torch_rng)

    def torch_out(self, rank: SyncRank) -> None:
        rank.torch_rng = self.torch.get_state()

    def start(self, seed: int) -> None:
        self.users += 1
        if self.users > 1:
            return
        self.seed = seed
        self._wrap(_random, self.py_in, _random._inst)
        np = sys.modules.get("numpy")
        if np is not None:
            self._wrap(np.random, self.np_in, np.random.mtrand._rand,
                       ("seed", "ranf", "sample", "get_bit_generator", "set_bit_generator"))
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "default_generator"):
            self.torch = torch.default_generator
            self.torch_saved = self.torch.get_state()
        self.patched.append((_time, "sleep", _time.sleep))
        # deliberate patch: time.sleep also takes int-like (__index__) seconds; ranks pass numbers
        _time.sleep = _sleep  # type: ignore[assignment]
        for name in VIRTUAL_CLOCKS:
            real = getattr(_time, name)
            self.patched.append((_time, name, real))
            setattr(_time, name, _virtual_clock(name, real))

    def stop(self) -> None:
        self.users -= 1
        if self.users:
            return
        for module, name, original in reversed(self.patched):
            setattr(module, name, original)
        self.patched.clear()
        if self.py_owner is not None:
            self.py_owner = None
            _random._inst.setstate(self.py_saved)
        if self.np_owner is not None:
            self.np_owner = None
            sys.modules["numpy"].random.mtrand._rand.set_state(self.np_saved)
        if self.torch is not None:
            self.torch.set_state(self.torch_saved)
            self.torch = None

    def _wrap(self, module: Any, ensure: Callable[[], None], instance: Any,
              functions: Sequence[str] = ()) -> None:
        """Wrap the module's methods of ``instance``, and its ``functions`` that use it."""
        for name in dir(module):
            fn = getattr(module, name)
            if callable(fn) and (getattr(fn, "__self__", None) is instance or name in functions):
                self.patched.append((module, name, fn))
                setattr(module, name, _guarded(fn, ensure))


def _guarded(fn: Callable[..., Any], ensure: Callable[[], None]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        ensure()
        return fn(*args, **kwargs)

    call.__name__ = getattr(fn, "__name__", "call")
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.__doc__ = fn.__doc__
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def _sleep(seconds: float) -> None:
    """``time.sleep`` while synchronous ranks run: a virtual sleep inside a rank."""
    rank = current()
    if rank is None:
        _real_sleep(seconds)
        return
    stop_clock(rank, "time.sleep")
    try:
        block(rank.comm.sleep(seconds), rank)
    finally:
        start_clock(rank)


class Epoch(NamedTuple):
    """The real clocks' readings when a run began (the kernel's ``epoch``).

    Inside a synchronous rank, each clock of ``time`` reads its own field (the
    names are theirs) plus the rank's virtual time.
    """

    time: float
    monotonic: float
    perf_counter: float
    time_ns: int
    monotonic_ns: int
    perf_counter_ns: int


VIRTUAL_CLOCKS = ("time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns")
"""The functions of ``time`` that read a rank's virtual clock inside it: ``Epoch``'s fields, in order."""


def epoch() -> Epoch:
    """Return the real clocks' readings now: where a run's virtual clocks start."""
    wall, mono, perf = _real_time_ns(), _real_monotonic_ns(), _real_perf_counter_ns()
    return Epoch(wall / 1e9, mono / 1e9, perf / 1e9, wall, mono, perf)


def _virtual_clock(name: str, real: Callable[[], Any]) -> Callable[[], Any]:
    """``time.<name>`` while synchronous ranks run: the epoch plus virtual time inside a rank, else ``real``."""
    at = VIRTUAL_CLOCKS.index(name)
    call = f"time.{name}"

    def clock() -> float:
        rank = current()
        if rank is None:
            return real()  # type: ignore[no-any-return]
        kernel = _reading(rank, call)
        return kernel.epoch[at] + kernel.now  # type: ignore[no-any-return]

    def clock_ns() -> int:
        rank = current()
        if rank is None:
            return real()  # type: ignore[no-any-return]
        kernel = _reading(rank, call)
        return kernel.epoch[at] + round(kernel.now * 1e9)  # type: ignore[no-any-return]

    read: Any = clock_ns if name.endswith("_ns") else clock
    read.__name__ = read.__qualname__ = name
    read.__doc__ = real.__doc__
    read.__wrapped__ = real
    return read  # type: ignore[no-any-return]


def _reading(rank: SyncRank, call: str) -> Any:
    """The rank reads a clock: charge its measured work up to now first; return its kernel.

    Under measured compute a read ends a burst as a call does, except that a
    burst shorter than the threshold goes on rather than being dropped: a loop
    that polls a clock (``while perf_counter() < end``) must see time pass.
    Such a read still takes a call's index, since a replay charges every read.
    Without a meter, or within a simcluster call, it costs two attribute reads.
    """
    meter = rank.meter
    if meter is not None and not meter.depth:
        if not rank.owed and meter.replay is None and \
                meter.clock() - meter.since - meter.floor < meter.threshold:
            meter.calls += 1
        else:
            stop_clock(rank, call)
            if rank.owed:
                settle(rank)
            start_clock(rank)
    elif rank.owed:
        settle(rank)
    return rank.comm.kernel


_states = _States()


def start_run(seed: int, compute: Compute | None = None) -> None:
    """A run with synchronous ranks begins: install the per-rank state swapping.

    A measured run (``compute``) also puts the facades' measured entry points in place.
    """
    _states.start(seed)
    if compute is not None:
        _states.measured += 1
        if _states.measured == 1:
            for owner, name, _original, wrapped in _entries:
                setattr(owner, name, wrapped)


def end_run(compute: Compute | None = None) -> None:
    """That run ended: restore the process's generators and ``time``'s functions (and entry points)."""
    _states.stop()
    if compute is not None:
        _states.measured -= 1
        if not _states.measured:
            for owner, name, original, _wrapped in _entries:
                setattr(owner, name, original)
