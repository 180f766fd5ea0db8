"""The engine of a run: the kernel, the point-to-point protocol and the diagnostics, put together.

Each idea has one home, and the engine holds one of each, which talk through
declared seams:

* ``kernel`` (``engine.kernel.Kernel``): the virtual clock, the event calendar,
  stepping rank coroutines (``engine.task.Task``), parking and resuming them on
  requests (which call it through ``request.Waker``). It calls the layer above
  through ``Layer`` (its instant hooks) and its reports through ``Reports``;
  the engine installs its hooks: ``checks`` (``engine.checks.RunChecks``: how
  ranks use their requests) and ``slowdown`` (the fault plan's slow ranks'
  compute);
* ``p2p`` (``engine.protocol.P2P``, the kernel's ``Layer``): posting sends and
  receives, the eager and rendezvous protocols, the ports, matching in the
  endpoint table (``matching.Endpoints``), with a ``Delivery`` strategy for
  what lies between a send's charge and its receiver's match:
  ``engine.delivery.LocalDelivery`` here, ``hosting.hosted_engine.HostedDelivery`` in a
  process that hosts part of the world;
* the run's one timing of messages, fixed by the ports it is made with:
  their charge (``P2P.arrival``, the delivery's ``book``), or, where the
  ports name a platform whose links flows share (their ``platform``), the
  delivery's ``engine.flows.Flows`` and never the charge. A fault plan's
  ``Slow``, ``Cut`` and ``Delay`` decorate whichever it is
  (``faults.ShapedPorts`` over the ports, its ``platform`` a
  ``faults.ShapedPlatform`` for the flows), so each fault takes effect in
  one place (the table in ``simcluster.faults``);
* ``diagnostics`` (``engine.diagnostics.Diagnostics``): the deadlock and timeout
  reports, leaks, the buffer-hazard check. It reads the engine through
  ``Inspected``;
* ``meetings`` (``engine.meetings.Meetings``): analytic collectives' meetings,
  requests that complete once every member arrived.

How a rank's function becomes a task is the engine's too (``start_rank``: a
coroutine, or a plain function on a greenlet or a thread, ``engine.sync``), and
``run`` drives the kernel from asyncio with the run's timeout
(``engine.running``).

A message's way, from the send to the receiver's resume: ``Comm.send``
calls ``P2P.post_send``, which packs the payload (``transports.wire``) and
books the envelope for the end of the instant; there the kernel calls
``P2P.end_instant``, and the delivery charges the ports (``book``) and hands
the envelope to the transport, which calls the delivery back (``deliver``);
it queues the envelope on its (source, destination) channel until its arrival
time, when ``P2P.arrived`` matches it in the receiver's queue of the endpoint
table, ``P2P.complete_recv`` unpacks it and finishes the receive's request,
and ``Request.complete`` hands the parked rank to ``Kernel.resume_waiter``,
which steps it right there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import running as _running, sync as _sync
from .checks import RunChecks
from .coll_check import CallCheck
from .delivery import LocalDelivery
from .settings import EngineSettings
from .diagnostics import BlockedEntry, CollectiveInfo, Diagnostics, deadlock_error
from .protocol import P2P, Delivery, Roster
from .kernel import BLOCKED, FINISHED, FOREIGN, READY, RUNNING, Kernel, Task, current_task
from .meetings import Meetings
from ..errors import UsageTypeError

if TYPE_CHECKING:
    from .failures import Failures
    from ..faults import Crash
    from ..latency import Ports
    from ..matching import Endpoints
    from ..request import Request
    from ..trace import Trace
    from .task import RankComm
    from simcluster.transports.base import Envelope, Transport

__all__ = [
    "BLOCKED", "FINISHED", "FOREIGN", "READY", "RUNNING", "BlockedEntry", "CollectiveInfo", "Engine",
    "Kernel", "Task", "current_task", "deadlock_error",
]


class Engine:
    """A run's kernel, point-to-point protocol and reports, made together and closed together.

    Takes the world size, the transport, the ports bound from the latency
    model, the run's ``EngineSettings`` (defaults without), its trace, if it
    records one, and the delivery strategy (``LocalDelivery`` without).
    """

    def __init__(self, world_size: int, transport: Transport, ports: Ports,
                 settings: EngineSettings | None = None, trace: Trace | None = None,
                 delivery: Delivery | None = None) -> None:
        if settings is None:
            settings = EngineSettings()
        self.world_size = world_size
        self.kernel = kernel = Kernel(world_size, settings, trace)
        self.p2p = P2P(kernel, transport, ports, settings,
                       LocalDelivery() if delivery is None else delivery)
        kernel.layer = self.p2p  # the layer above the kernel: its instant hooks
        self.diagnostics = Diagnostics(self)
        kernel.reports = self.diagnostics
        kernel.checks = RunChecks(kernel)
        plan = settings.faults
        if plan is not None and plan.shapes_messages:  # Slow faults stretch a rank's timers too
            kernel.slowdown = plan.slowdown
        self.meetings = Meetings(kernel)
        self._sync_ranks = False  # some rank is synchronous: per-rank state is being swapped
        self._last_fn: tuple[object, bool] = (None, False)  # (fn, is it async): every rank runs the same fn
        crashes = [] if plan is None else plan.crashes(world_size, settings.seed)
        if crashes or (plan is not None and plan.count_calls):
            self.p2p.failures = self.new_failures(crashes)
        self.algorithms: dict[str, str] = dict(settings.algorithms)  # checked by the runner
        self.fidelity = settings.fidelity  # or "analytic": collectives resolve in one step (Meetings.meet)

    def add_ranks(self, count: int) -> range:
        """Add ``count`` world ranks during the run (``MPI.Comm.Spawn``); return their numbers.

        Their ports start idle; the caller starts their tasks (``start_rank``).

        Raises:
            ValueError: the latency model has no room for them (a platform's last place).
        """
        first = self.world_size
        size = first + count
        self.p2p.grow(size)  # first: its ports refuse what does not fit; the kernel grows as they start
        self.world_size = size
        trace = self.kernel.trace
        if trace is not None:
            trace.world_size = size
        return range(first, size)

    def failures(self) -> Failures:
        """The run's crash and ULFM state, made on first use (a ``revoke``, ``agree`` or ``shrink``)."""
        from .failures import Failures as _Failures

        failures = self.p2p.failures
        if failures is None:
            failures = self.p2p.failures = self.new_failures([])
        assert isinstance(failures, _Failures)
        return failures

    def new_failures(self, crashes: list[Crash]) -> Failures:
        """The run's ``Failures``, with the planned ``crashes``."""
        from .failures import Failures as _Failures  # only runs with crashes or ULFM's calls load it

        return _Failures(self.kernel, self.p2p, crashes, meetings=self.meetings)

    def call_check(self, ctx: int, world_ranks: list[int]) -> CallCheck:
        """The collective verification of a new communicator (every member lives here)."""
        return CallCheck(len(world_ranks))

    def start_rank(self, task: Task, comm: RankComm, fn: Callable[..., Any], args: Sequence[Any],
                   kwargs: dict[str, Any], *, handle: Any = None) -> None:
        """Give ``task`` its world ``comm`` and start ``fn(handle, *args, **kwargs)`` as its rank.

        ``handle`` is what ``fn`` gets first: ``comm`` unless given (the runner
        gives a plain function ``simcluster.MPI``'s ``COMM_WORLD``). A plain
        (non-async) ``fn`` becomes a synchronous rank (``engine.sync.SyncRank``,
        or ``ThreadRank`` for a function marked ``__simcluster_stack__ = "thread"``).

        Raises:
            UsageTypeError: an ``async`` ``fn`` returned something other than a coroutine.
        """
        kernel = self.kernel
        task.comm = comm
        first = comm if handle is None else handle
        last_fn, is_async = self._last_fn
        if fn is not last_fn:  # inspecting it costs a microsecond: once per run, not per rank
            is_async = _sync.is_async(fn)
            self._last_fn = (fn, is_async)
        if not is_async:  # a plain function: a synchronous rank on a stack of its own
            if not self._sync_ranks:
                self._sync_ranks = True
                _sync.start_run(kernel.seed, kernel.compute)
            stack = _sync.ThreadRank if getattr(fn, "__simcluster_stack__", "") == "thread" else _sync.SyncRank
            task.coro = stack(fn, (first, *args), kwargs, comm, task.rank,  # type: ignore[assignment]
                              kernel.compute)
            kernel.start(task)
            return
        coro = fn(first, *args, **kwargs)
        if not asyncio.iscoroutine(coro):
            name = getattr(fn, "__name__", fn)
            raise UsageTypeError(None, f"run({name})", f"{name}(comm) returned {type(coro).__name__}, "
                                 "not a coroutine", "define it with async def")
        task.coro = coro
        kernel.start(task)

    async def run(self) -> None:
        """Run every rank to completion, or raise what stopped the run (``engine.running``)."""
        await _running.run(self.kernel)

    def close(self) -> None:
        """Cancel every unfinished rank, end the synchronous ranks' run, and release the transport."""
        try:
            try:
                self.kernel.close()
            finally:
                if self._sync_ranks:
                    self._sync_ranks = False
                    _sync.end_run(self.kernel.compute)
        finally:
            self.p2p.close()

    # ---- what the diagnostics read (``engine.diagnostics.Inspected``) ----

    @property
    def now(self) -> float:
        """The current virtual time."""
        return self.kernel.now

    @property
    def timeout(self) -> float | None:
        """The run's wall-clock limit in seconds, if it has one."""
        return self.kernel.timeout

    @property
    def tasks(self) -> list[Task]:
        """The ranks' tasks, in the order they started."""
        return self.kernel.tasks

    @property
    def groups(self) -> dict[int, Roster]:
        """The communicators, by context."""
        return self.p2p.groups

    @property
    def endpoints(self) -> Endpoints:
        """The endpoint table: a match queue per (context, rank)."""
        return self.p2p.endpoints

    def helper_tasks(self) -> list[Task]:
        return self.kernel.helper_tasks()

    def tracked_requests(self) -> list[Request[Any]]:
        return self.kernel.checks.tracked_requests()

    def untrack(self, req: Request[Any]) -> None:
        self.kernel.checks.untrack(req)

    def unfinished_sends(self) -> list[Request[Any]]:
        return self.p2p.unfinished_sends()

    def excused(self, ctx: int, src: int, dst: int) -> bool:
        failures = self.p2p.failures
        return failures is not None and failures.excused(ctx, src, dst)

    def orphan_envelopes(self) -> list[Envelope]:
        return self.p2p.orphan_envelopes()

    def handshake_lines(self) -> list[str]:
        p2p = self.p2p
        return p2p.handshakes.lines({ctx: group.name for ctx, group in p2p.groups.items()})
