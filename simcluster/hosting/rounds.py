"""The rounds of a multi-process run, decided alike by every hosting process.

Each round, every hosting process runs its part (``HostedEngine.phase``)
when the plan names it, then hands its ``Report`` to every other process
(``TcpTransport.exchange``, or MPI collectives on the mpi transport). With
every report in hand, each process applies the same rules to the same data
(``absorb``), so all of them agree on the next round, or on how the run
ends, without a coordinator in between: one exchange per round instead of a
STEP out and a REPORT back.

The rules (``hosting.host``'s docstring tells why they keep times equal to the
memory transport's):

- A round is a window, every event before ``now + lookahead`` (a few
  roundings short), when the model promises a lookahead and no process has
  a rendezvous or synchronous send to another under way; otherwise it is the
  instant ``now``.
- A process runs in a round when envelopes reached it since its last run,
  or it has an event in the round, or the round closes an instant and it
  holds rendezvous transfers of it.
- A fault record (a crash, a revocation, an ULFM contribution: ``Report.faults``)
  goes to every other process, which runs in the next round to apply it
  before anything at the record's ``due`` time runs; that round is no later
  than the earliest ``due``. Every ``due`` is at least one lookahead after
  the record's cause (``engine.failures``), so no window has run past it.
- After a round: the first failure by (virtual time, rank) ends the run,
  collective mismatches included (``verify``); when nothing is left at
  ``now`` and some process holds rendezvous transfers, the next round, at
  the same time, closes the instant; else ``now`` moves to the earliest
  event or envelope in flight; with none left, the run is over, or
  deadlocked if a rank has not finished.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from . import control as C
from . import remote as _remote
from ..engine.coll_check import SignatureRecord, merge_firsts
from ..engine.records import CrashRecord, FlowRecord, Record


class Plan(NamedTuple):
    """One round: its time, the last event time it runs (None: ``now`` only), whether it closes
    an instant, and, per process, whether that process runs in it."""

    now: float
    until: float | None
    close: bool
    runs: list[bool]


class Outcome(NamedTuple):
    """How the rounds ended: ``failure`` (rank, process, the exception as plain data), or a
    deadlock, or neither (every rank finished)."""

    time: float
    deadlock: bool
    rank: int | None
    proc: int
    exc: C.ExcData | None


class Rounds:
    """The replicated state of the rounds; see the module docstring.

    ``me`` is this process (only its own collective firsts and payloads are
    kept), ``unfinished[p]`` the ranks process ``p`` starts with.
    """

    __slots__ = ("me", "n", "lookahead", "counts", "given", "next", "unfinished", "held", "open",
                 "firsts", "payloads", "now", "time", "close", "rounds", "windows", "names",
                 "faults", "due", "crashed")

    def __init__(self, me: int, unfinished: list[int], lookahead: float) -> None:
        n = len(unfinished)
        self.me = me
        self.n = n
        self.lookahead = lookahead
        self.counts = [[0] * n for _ in range(n)]  # counts[q][p]: envelopes p sent to q so far
        self.given = [[0] * n for _ in range(n)]  # counts[q] when q last ran
        self.next: list[float | None] = [0.0] * n  # every process starts its ranks at 0
        self.unfinished = list(unfinished)
        self.held = [False] * n
        self.open = [0] * n
        self.firsts: list[SignatureRecord] = []  # for this process's next run (``hosting.control.Step``)
        self.payloads: list[SignatureRecord] = []
        self.faults: list[Record] = []  # the other processes' fault records, for this process's next run
        self.due = [False] * n  # process p has fault records to apply
        self.crashed: dict[int, float] = {}  # world rank -> time, from the crash records
        self.now = 0.0
        self.time = 0.0  # the latest virtual time any process reached
        self.close = False
        self.rounds = 0
        self.windows = 0

    def plan(self) -> Plan:
        """The next round (call ``absorb`` with its reports before the next ``plan``)."""
        until = None
        if self.lookahead > 0 and not self.close and not any(self.open):
            until = window_end(self.now, self.lookahead)
        limit = self.now if until is None else until
        runs = []
        for p in range(self.n):
            nxt = self.next[p]
            runs.append(self.counts[p] != self.given[p] or (nxt is not None and nxt <= limit)
                        or (self.close and self.held[p]) or self.due[p])
            if runs[p]:
                self.given[p] = list(self.counts[p])
                self.due[p] = False
        self.rounds += 1
        self.windows += until is not None
        return Plan(self.now, until, self.close, runs)

    def take_faults(self) -> list[Record]:
        """The fault records for this process's run now (then forgotten)."""
        faults, self.faults = self.faults, []
        return faults

    def take_collective(self) -> tuple[list[SignatureRecord], list[SignatureRecord]]:
        """The collective firsts and payloads for this process's run now (then forgotten)."""
        firsts, payloads = self.firsts, self.payloads
        self.firsts, self.payloads = [], []
        return firsts, payloads

    def absorb(self, reports: list[C.Report | None]) -> Outcome | None:
        """Take one round's reports (None where a process did not run); return how the run
        ended, or None to go on."""
        earliest: float | None = None
        failures: list[tuple[float, int, int, C.ExcData]] = []
        for p, report in enumerate(reports):
            if report is None:
                continue
            if report.faults:
                self._take_faults(p, report.faults)
                for record in report.faults:  # due no later than the next round
                    if earliest is None or record.due < earliest:
                        earliest = record.due
            self.time = max(self.time, report.time)
            self.next[p] = report.next
            self.unfinished[p] = report.unfinished
            self.held[p] = report.held
            self.open[p] = report.open
            for q, count in enumerate(report.sent):
                self.counts[q][p] += count
            if report.earliest is not None and (earliest is None or report.earliest < earliest):
                earliest = report.earliest
            if report.failure is not None:  # the process stopped at the failure's time
                failures.append((report.time, report.failure.rank, p, report.failure.exc))
        failures += self.verify(reports)
        if failures:  # the first by virtual time, as one process would have stopped there
            time, rank, proc, exc = min(failures, key=lambda f: (f[0], f[1]))
            return Outcome(time, False, rank, proc, exc)
        times = [t for t in self.next if t is not None]
        if earliest is not None:
            times.append(earliest)
        self.close = any(self.held) and (not times or min(times) > self.now)
        if self.close:  # the instant is over: the next round, at the same time, closes it
            return None
        if times:
            self.now = min(times)
            self.time = max(self.time, self.now)
            return None
        # at the last event's time (in a window, past now)
        return Outcome(self.time, any(self.unfinished), None, 0, None)

    def _take_faults(self, p: int, records: list[Record]) -> None:
        for q in range(self.n):
            if q != p:
                self.due[q] = True
        if isinstance(records[-1], FlowRecord):  # a process starts its own flows with the others' (start_flows)
            self.due[p] = True
        if p != self.me:
            self.faults += records
        for record in records:
            if isinstance(record, CrashRecord):
                self.crashed[record.rank] = record.at

    def verify(self, reports: list[C.Report | None]) -> list[tuple[float, int, int, C.ExcData]]:
        """Compare the first signatures of collective calls that several processes reported this round.

        Members that entered a call in one round count as having entered it in
        the order of the virtual time they entered at, then of their
        processes. Each call's first signature goes to the processes that did
        not report it (before anything runs there in their next round), so
        their members are compared at the call. Returns ``(time, world rank,
        process, CollectiveMismatchError as plain data)`` for each member that
        differs.
        """
        calls: dict[tuple[int, int], list[tuple[float, int, SignatureRecord]]] = {}
        for p, report in enumerate(reports):
            for record in report.firsts if report is not None else ():
                calls.setdefault((record.ctx, record.seq), []).append((record.time, p, record))
        found: list[tuple[float, int, int, C.ExcData]] = []
        for entered in calls.values():
            entered.sort(key=lambda item: (item[0], item[1]))
            seen = [(p, record) for _, p, record in entered]
            merged, errors = merge_firsts([record for _, record in seen])
            when = {record.world_rank: record.time for _, record in seen}
            found += [(when[rank], rank, seen[0][0], _remote.encode_exception(error))
                      for rank, error in errors]
            hosts = merged.procs  # the processes that host members of that comm (None: all)
            if hosts is not None and self.me not in hosts:
                continue
            mine = next((record for p, record in seen if p == self.me), None)
            if mine is None:
                self.firsts.append(merged)
            elif mine.payload is None and merged.payload is not None:
                self.payloads.append(merged)
        return found


def window_end(now: float, lookahead: float) -> float:
    """The last time a window from ``now`` runs: a few roundings short of ``now + lookahead``.

    Models keep ``arrive >= t + lookahead`` only up to the rounding of their
    own sums and products, so the window stops a little early rather than
    let a message land inside it.
    """
    end = now + lookahead * (1.0 - 1e-9)
    for _ in range(4):
        end = math.nextafter(end, -math.inf)
    return max(end, now)
