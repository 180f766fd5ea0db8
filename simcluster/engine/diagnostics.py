"""Diagnostics: the deadlock report, the timeout report, leaks and the buffer-hazard check.

Nothing here runs on the hot path: these read the kernel's tasks and the
protocol's queues once something went wrong (or at the end of a strict
run). ``Diagnostics`` reads an engine through its declared seam (``Inspected``); ``deadlock_error``
also builds the report of a multi-process run from the blocked ranks every
hosting process describes.

Reports stay readable at any world size: up to ``_ONE_BY_ONE`` ranks are
listed one line each; beyond, ranks waiting in the same call at the same
line share one line (how many, which, one example), at most ``_PLACES``
such lines, and a long wait-for cycle shows its ends.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from . import frames as _frames
from .kernel import BLOCKED, FINISHED, TASK_STATES, Task
from .protocol import checksum
from ..errors import BufferHazardError, DeadlockError, SimclusterError
from .waits import WaitAny as _WaitAny
from ..request import Request

if TYPE_CHECKING:
    from .protocol import Roster
    from ..matching import Endpoints
    from simcluster.transports.base import Envelope


CollectiveInfo = tuple[int, str, int, str, int, int]
"""What a rank inside a collective is doing: (context, comm name, number, call, comm rank, comm size)."""

BlockedEntry = tuple[int, str, list[int], Any]
"""(rank, "rank R waiting in ... at file:line", world ranks it waits on, Task.collective)."""


class Inspected(Protocol):
    """What the reports read from an engine: its declared seam, and all they may use.

    ``tests/test_structure.py`` checks that ``Diagnostics`` reads nothing else.
    """

    @property
    def now(self) -> float: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def tasks(self) -> list[Task]: ...

    @property
    def groups(self) -> dict[int, Roster]: ...

    @property
    def endpoints(self) -> Endpoints: ...

    def helper_tasks(self) -> list[Task]: ...

    def tracked_requests(self) -> list[Request[Any]]: ...

    def unfinished_sends(self) -> list[Request[Any]]: ...

    def untrack(self, req: Request[Any]) -> None: ...

    def orphan_envelopes(self) -> list[Envelope]: ...

    def handshake_lines(self) -> list[str]:
        """Where each rendezvous or synchronous send under way stands (``engine.rendezvous``)."""
        ...

    def excused(self, ctx: int, src: int, dst: int) -> bool:
        """Whether a message or receive from world rank ``src`` to ``dst`` on ``ctx`` was cut short by
        a crash or a revocation (``engine.failures``): not a leak of the program's."""
        ...


class Diagnostics:
    """An engine's reports: what went wrong, where, and who waits for whom.

    The kernel asks for them (``Kernel.reports``) when a run deadlocks or
    times out, a request checks its send buffer with ``check_hazard``, and
    the runner lists a strict run's ``leaks``.
    """

    def __init__(self, engine: Inspected) -> None:
        self.engine = engine

    def check_hazard(self, req: Request[Any], guard: tuple[list[Any], list[int], str]) -> None:
        """Check that a completed nonblocking send's buffers are unchanged since it was posted."""
        self.engine.untrack(req)
        arrays, sums, line = guard
        for a, s in zip(arrays, sums):
            if checksum(a) != s:
                raise BufferHazardError(
                    req.owner, req.op,
                    f"the send buffer changed before the request completed (posted at {line})",
                    "wait for the request before writing to the buffer, or send a copy")

    def leaks(self) -> list[str]:
        """Describe messages never received and nonblocking requests never completed.

        Each problem is reported once: a pending request whose message or
        receive is already listed (a posted receive, a send nobody received)
        is not listed again.
        """
        engine = self.engine
        lines: list[str] = []
        listed: set[int] = set()
        for ctx, rank, mq in engine.endpoints.queues():
            posted, unexpected = mq.leftovers()
            group = engine.groups[ctx]
            me = group.world_ranks[rank]
            for req in posted:
                listed.add(id(req))
                if not engine.excused(ctx, -1, me):
                    lines.append(f"rank {rank}: {req.op} was never matched")
            for env in unexpected:
                if engine.excused(ctx, env.src, me):
                    continue
                lines.append(
                    f"rank {rank}: a message from rank {group.local_rank(env.src)} "
                    f"(tag={env.tag}, {env.nbytes} bytes) on comm {group.name!r} was never received")
        listed.update(id(req) for req in engine.unfinished_sends())
        for req in engine.tracked_requests():
            if req.retrieved or req.cancelled or id(req) in listed:
                continue
            if req.owner is not None and engine.excused(-1, -1, req.owner):
                continue
            owner = "?" if req.owner is None else req.owner
            state = "completed but was never waited or tested" if req.done() else "never completed"
            lines.append(f"rank {owner}: {req.op} {state}")
        for env in engine.orphan_envelopes():
            lines.append(f"rank {env.dst}: a message from world rank {env.src} (tag={env.tag}, "
                         f"{env.nbytes} bytes) on a communicator this rank never created was "
                         "never received")
        return lines

    def describe(self, task: Task) -> tuple[str, list[int]]:
        """Return a line about what a blocked task waits for, and the ranks it waits on."""
        waiting = task.waiting
        reqs = waiting.requests if isinstance(waiting, _WaitAny) else [waiting]
        ops = ", ".join(r.op for r in reqs if isinstance(r, Request))
        peers = [p for p in (r.peer() for r in reqs if isinstance(r, Request)) if p is not None]
        where = _frames.coroutine_line(task.coro)
        inside = ""
        if task.collective is not None:
            info = task.collective.info
            inside = f" inside {info[3]} (collective #{info[2]} on comm {info[1]!r})"
        return f"rank {task.rank} waiting in {ops}{inside} at {where}", peers

    def blocked_entries(self, tasks: list[Task] | None = None) -> list[BlockedEntry]:
        """Describe every blocked one of ``tasks`` (default: the ranks, then the helpers)."""
        if tasks is None:
            tasks = [*self.engine.tasks, *self.engine.helper_tasks()]
        entries = []
        for task in tasks:
            if task.state == BLOCKED:
                line, peers = self.describe(task)
                entries.append((task.rank, line, peers, collective_info(task)))
        return entries

    def deadlock(self) -> SimclusterError:
        """The error for a run whose unfinished ranks are all blocked."""
        groups = self.engine.groups
        return deadlock_error(self.blocked_entries(), self.engine.now,
                              members=lambda ctx: groups[ctx].world_ranks,
                              handshakes=self.engine.handshake_lines())

    def timeout_report(self, spinning: tuple[Task, str] | None = None) -> str:
        """Say what each unfinished rank was doing when the timeout passed.

        ``spinning`` is the rank the watchdog interrupted, and its line: it shows as running.
        """
        engine = self.engine
        return "\n".join([
            f"timed out after {engine.timeout}s of wall time at virtual time {engine.now:.9g}s",
            *self.timeout_lines(spinning),
            "look for a rank that loops without awaiting, or awaits real I/O that never ends"])

    def timeout_lines(self, spinning: tuple[Task, str] | None = None) -> list[str]:
        """The per-rank lines of the timeout report (helpers are their ranks' nonblocking calls)."""
        ranks: list[tuple[int, str]] = []
        for task in self.engine.tasks:
            if spinning is not None and task is spinning[0]:
                ranks.append((task.rank, f"rank {task.rank} running at {spinning[1]}"))
            elif task.state == BLOCKED:
                ranks.append((task.rank, self.describe(task)[0]))
            elif task.state != FINISHED:
                ranks.append((task.rank, f"rank {task.rank} {TASK_STATES[task.state]} at "
                                         f"{_frames.coroutine_line(task.coro)}"))
        return summarise(ranks)


def deadlock_error(entries: list[BlockedEntry], now: float,
                   members: Callable[[int], Sequence[int]] | None = None,
                   handshakes: Sequence[str] = (), handshake_count: int = 0) -> SimclusterError:
    """Build the deadlock report from the blocked ranks (of one process, or gathered from all).

    A collective that some members never entered gets a line naming who is
    inside, who is not, and what those do instead (a member not blocked has
    finished); members whose calls differ never get here (``Comm._collective``).
    ``members(ctx)`` gives a communicator's world ranks; without it only the
    world's members can be named, other communicators' by their comm rank.
    ``handshakes``: where each send that waits for its receiver stands, a line each;
    ``handshake_count``: how many there are, when ``handshakes`` lists only the first.
    """
    blocked: dict[int, str] = {}
    edges: dict[int, list[int]] = {}
    for rank, line, peers, _ in entries:
        blocked[rank] = line
        edges.setdefault(rank, []).extend(peers)
    lines = summarise([(rank, line) for rank, line, _, _ in entries])
    cycle = _find_cycle(edges)
    n = len(blocked)
    head = (f"deadlock: {n} rank{'s' if n != 1 else ''} blocked and no message in flight "
            f"at virtual time {now:.9g}s")
    gaps = _collective_gaps(entries, members)
    if cycle:
        tail = "wait-for cycle: " + _cycle(cycle)
    elif gaps:
        tail = ("no wait-for cycle: ranks wait inside a collective that other members never "
                "entered; every member of a comm must call its collectives, in the same order")
    else:
        tail = "no wait-for cycle: some rank waits for a message nobody sends"
    shown = ["handshakes under way:", *["  " + line for line in handshakes[:_ONE_BY_ONE]]]
    count = max(handshake_count, len(handshakes))
    if count > _ONE_BY_ONE:
        shown.append(f"  ... and {count - _ONE_BY_ONE} more")
    return DeadlockError("\n".join([head, *lines, *gaps, *(shown if handshakes else ()), tail]),
                         blocked, cycle)


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
            shown = _LISTED if len(missing) <= _ONE_BY_ONE else 3  # examples, when many are out
            absent = [_doing(world[r], doing) for r in missing[:shown]]
            if len(missing) > shown:
                absent.append("...")
            outside = f"{_ranks([world[r] for r in missing])} never entered: {'; '.join(absent)}"
        lines.append(f"{_ranks(sorted(entered.values()))} {'is' if len(entered) == 1 else 'are'} "
                     f"inside {call} (collective #{seq} on comm {name!r}), which {outside}")
    return lines


_LISTED = 8  # ranks named one by one in a report line; the rest are counted
_ONE_BY_ONE = 16  # ranks a report lists a line each; beyond, ranks in one place share a line
_PLACES = 40  # places (a call at a line) a report lists when it groups; the rest are counted
_ARGUMENTS = re.compile(r"\([^()]*\)")


def summarise(ranks: list[tuple[int, str]]) -> list[str]:
    """The report's lines about ``(rank, "rank R waiting in ... at file:line")`` pairs.

    Up to ``_ONE_BY_ONE`` ranks, a line each. Beyond, one line per place: a
    call (its arguments left out) at a line of code, with how many ranks
    wait there, which, and one of their lines as the example.
    """
    if len(ranks) <= _ONE_BY_ONE:
        return ["  " + line for _, line in ranks]
    places: dict[str, list[tuple[int, str]]] = {}
    for rank, line in ranks:
        prefix = f"rank {rank} "
        what = line[len(prefix):] if line.startswith(prefix) else line
        places.setdefault(_ARGUMENTS.sub("(...)", what), []).append((rank, line))
    lines = []
    for what, members in list(places.items())[:_PLACES]:
        if len(members) == 1:
            lines.append("  " + members[0][1])
            continue
        lines.append(f"  {len(members)} ranks {what}: {_spans([r for r, _ in members])}; "
                     f"e.g. {members[0][1]}")
    if len(places) > _PLACES:
        rest = sum(len(m) for m in list(places.values())[_PLACES:])
        lines.append(f"  ... and {rest} more ranks in {len(places) - _PLACES} other places")
    return lines


def _spans(ranks: Sequence[int]) -> str:
    """``ranks 1-1999`` or ``ranks 0, 2-5, 9``: runs of consecutive ranks, at most ``_LISTED``."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:_LISTED]]
    more = f", ... ({len(runs) - _LISTED} more runs)" if len(runs) > _LISTED else ""
    return "ranks " + ", ".join(shown) + more


def _cycle(cycle: Sequence[int]) -> str:
    """A wait-for cycle, its ends shown when it is long: ``0 -> 1 -> ... -> 9 -> 0 (10 ranks)``."""
    if len(cycle) <= 2 * _LISTED:
        return " -> ".join(map(str, cycle))
    return (" -> ".join(map(str, cycle[:_LISTED])) + " -> ... -> "
            + " -> ".join(map(str, cycle[-_LISTED // 2:])) + f" ({len(cycle) - 1} ranks)")


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


def collective_info(task: Task) -> CollectiveInfo | None:
    """The collective call a task is inside, as reports carry it (None outside collectives)."""
    return None if task.collective is None else task.collective.info


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


