"""A rank's task: its coroutine, its state, and where it is parked.

A leaf: it imports nothing of the engine, so the kernel, the requests and the
checks on them can all name ``Task`` without importing each other.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Final, Protocol

# A task's states. Plain ints (compared on every step), named here and nowhere else.
READY: Final = 0  # scheduled to run at the current virtual time
RUNNING: Final = 1  # being stepped right now
BLOCKED: Final = 2  # parked on a pending request (or several: wait_any)
FOREIGN: Final = 3  # awaiting an asyncio future (real I/O); virtual time waits for it
FINISHED: Final = 4
TASK_STATES: Final = ("ready", "running", "blocked", "awaiting a foreign future", "finished")


class RankComm(Protocol):
    """A rank's world communicator, as the kernel keeps it for the layers above (``Task.comm``)."""

    rank: int


class CollectiveCall(Protocol):
    """The collective call a task is inside (``Task.collective``), as reports and traces read it."""

    call: str
    seq: int
    algorithm: str

    @property
    def info(self) -> tuple[int, str, int, str, int, int]: ...


class Completion(Protocol):
    """What a helper task's result goes to when it ends (``Task.done_request``: a ``request.Request``)."""

    def complete(self, value: Any = None, error: BaseException | None = None) -> None: ...


class Task:
    """One rank: its coroutine and where it is parked."""

    __slots__ = ("rank", "coro", "comm", "state", "waiting", "result", "time", "spins", "collective",
                 "done_request", "serial")

    def __init__(self, rank: int, coro: Coroutine[Any, Any, Any]) -> None:
        self.rank = rank
        self.coro = coro
        self.comm: RankComm | None = None
        self.state = READY
        self.waiting: Any = None
        self.result: Any = None
        self.time = 0.0
        self.spins = 0
        # the collective call in progress, for reports: (ctx, comm name, number, call, comm rank)
        self.collective: CollectiveCall | None = None
        self.done_request: Completion | None = None  # set for helper tasks (spawn)
        self.serial = 0  # 0 for a rank, n for its n-th helper: orders its simultaneous messages

    def __repr__(self) -> str:
        return f"<Task rank={self.rank} {TASK_STATES[self.state]} t={self.time:.9g}>"
