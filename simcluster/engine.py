"""The engine of a run: the kernel, the point-to-point protocol and the diagnostics, assembled.

Each idea has one home, and this module puts them together:

* ``_kernel``: the virtual clock, the event calendar, stepping rank
  coroutines (``Task``), parking and resuming them on requests;
* ``_protocol``: posting sends and receives, the eager and rendezvous
  protocols, charging the latency model's ports, delivery and matching in
  the endpoint table (``matching.Endpoints``);
* ``_diagnostics``: the deadlock and timeout reports, leaks, the
  buffer-hazard check.

A message's way, from the send to the receiver's resume: ``Comm.send``
calls ``Engine.post_send``, which packs the payload (``transports.wire``),
books the envelope for the end of the instant (``_end_instant`` charges the
ports) and hands it to the transport; the transport calls ``_deliver``, which
queues it on its (source, destination) channel and schedules ``_arrive`` at
its arrival time; there ``_arrived`` matches it in the receiver's queue of the
endpoint table, ``_complete_recv`` unpacks it and finishes the receive's
request, and ``Request._finish`` hands the parked rank to
``Kernel.resume_waiter``, which steps it right there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._coll_check import CallCheck
from ._settings import EngineSettings
from ._diagnostics import BlockedEntry, CollectiveInfo, Diagnostics, deadlock_error
from ._protocol import P2P
from ._kernel import BLOCKED, FINISHED, FOREIGN, READY, RUNNING, Kernel, Task, current_task

if TYPE_CHECKING:
    from .latency import Ports
    from .trace import Trace
    from .transports.base import Transport

__all__ = [
    "BLOCKED", "FINISHED", "FOREIGN", "READY", "RUNNING", "BlockedEntry", "CollectiveInfo", "Engine",
    "Kernel", "Task", "current_task", "deadlock_error",
]


class Engine(P2P):
    """Steps rank coroutines in virtual-time order, moves their messages, and reports problems.

    Takes the world size, the transport, the ports bound from the latency
    model, the run's ``EngineSettings`` (defaults without) and its trace, if
    it records one.
    """

    def __init__(self, world_size: int, transport: Transport, ports: Ports,
                 settings: EngineSettings | None = None, trace: Trace | None = None) -> None:
        if settings is None:
            settings = EngineSettings()
        super().__init__(world_size, transport, ports, settings, trace)
        self.diagnostics = self.make_reports()
        self.reports = self.diagnostics  # the same, as the kernel sees it (Reports)
        self.algorithms: dict[str, str] = dict(settings.algorithms)  # checked by the runner
        self.fidelity = settings.fidelity  # or "analytic": collectives resolve in one step (Kernel.meet)

    def make_reports(self) -> Diagnostics:
        """This engine's reports (``reports``): deadlocks, timeouts, leaks, buffer hazards."""
        return Diagnostics(self)

    def call_check(self, ctx: int, world_ranks: list[int]) -> CallCheck:
        """The collective verification of a new communicator (every member lives here)."""
        return CallCheck(len(world_ranks))
