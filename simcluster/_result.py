"""What a run returns: ``RunResult`` (the per-rank values, with times and counts) and ``Stats``.

A leaf of the package: the in-process runner (``runner``) and the
coordinator of a multi-process run (``hosting.coordinator``) both build these, and
``simcluster`` re-exports them, so they live apart from either.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

__all__ = ["RunResult", "Stats"]


@dataclass(frozen=True, slots=True)
class Stats:
    """Message counts and bytes, per world rank and in total.

    Bytes are the sizes the latency model charged: arrays count ``nbytes``,
    other objects their encoded length, ``None`` counts 0.
    """

    messages_sent: tuple[int, ...]
    bytes_sent: tuple[int, ...]
    messages_received: tuple[int, ...]
    bytes_received: tuple[int, ...]

    @property
    def total_messages(self) -> int:
        """Messages sent by every rank together."""
        return sum(self.messages_sent)

    @property
    def total_bytes(self) -> int:
        """Bytes sent by every rank together."""
        return sum(self.bytes_sent)


class RunResult(Sequence[Any]):
    """The per-rank return values of a run, with its times and counts.

    Attributes:
        elapsed: virtual makespan in seconds (the latest rank's final time).
        times: each rank's final virtual time.
        stats: message and byte counts (``Stats``).
        wall: wall-clock seconds the run took.
        trace: recorded events when tracing, else None.
        leaks: lines describing unreceived messages and unwaited requests.
        rounds: for ranks hosted by several processes (shm, tcp, mpi), how many
            synchronisation rounds the processes ran, and how many of those were
            lookahead windows, as ``(rounds, windows)``; None in one process.
        crashed: the ranks the run's fault plan crashed, each with the virtual
            time it crashed (``simcluster.faults``); its value is None.
        calls: with a fault plan made with ``count_calls=True``, how many
            calls of each kind each rank made, as ``{(rank, kind): count}``
            (the crash points ``sc.testing.explore`` tries); else None.
        report: the step report of a torch run asked for it
            (``simcluster.torch.spawn(report=True)``, docs/predict.md); else None.
    """

    __slots__ = ("_values", "elapsed", "times", "stats", "wall", "trace", "leaks", "rounds", "crashed", "calls",
                 "report")

    def __init__(self, values: list[Any], times: list[float], stats: Stats, wall: float,
                 trace: Any = None, leaks: list[str] | None = None,
                 rounds: tuple[int, int] | None = None, crashed: dict[int, float] | None = None,
                 calls: dict[tuple[int, str], int] | None = None) -> None:
        self._values = values
        self.times = times
        self.elapsed = max(times) if times else 0.0
        self.stats = stats
        self.wall = wall
        self.trace = trace
        self.leaks = leaks or []
        self.rounds = rounds
        self.crashed = dict(crashed or {})
        self.calls = calls
        self.report: Any = None

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self._values[index]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunResult):
            return self._values == other._values
        if isinstance(other, (list, tuple)):
            return self._values == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = self._values if len(self._values) <= 8 else [*self._values[:8], "..."]
        return f"RunResult({shown!r}, elapsed={self.elapsed:.9g})"
