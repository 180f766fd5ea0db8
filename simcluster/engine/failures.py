"""Crash-stop failures in a run, and what the survivors' calls see (ULFM's rules).

A run with crashes in its fault plan (``simcluster.faults``) gets one
``Failures``, which the protocol consults wherever a call could need a failed
rank. Without crashes there is none, and each of those places costs one test
of ``p2p.failures is None``.

Rule 1 (the crash): a rank crashes at a virtual time ``t`` (an event) or at
the call its plan names (``RankCrashed`` unwinds it there; the call does not
happen). It never runs again, nor do its nonblocking collectives' helpers.
What it sent before it crashed is delivered; what is sent to it, or reaches
it after ``t``, is lost.
Rule 2 (detection): the survivors learn of the crash one hop after ``t``
(``after``: ``t`` plus the model's smallest message latency, its lookahead;
the next instant, ``math.nextafter``, when that is 0), all at once, whatever
the seed: every pending receive from the failed rank, every send to it that
still waits for it, every receive from any source on a communicator it
belongs to (until the survivor acknowledges the failure: ``ack_failed``), and
every pending operation inside a collective of such a communicator completes
with ``ProcessFailedError``; later calls that need it raise at once. Messages
it sent before ``t`` stay receivable.
Rule 3 (recovery, as ULFM): ``revoke`` makes every later call on the
communicator raise ``RevokedError`` on its caller at once, and every pending
and later operation on every member one hop later. ``agree`` (the AND of the
live members' flags) and ``shrink`` (a communicator of the live members) work
on revoked communicators. A member's contribution reaches the others one hop
after its call; a meeting is over at the first instant ``X`` at which every
member not known to have failed by ``X`` has a contribution that reached the
others by ``X`` (so it completes even if members fail meanwhile), and each
member's request completes ``2 * ceil(log2 live)`` hops after the last live
contribution (not before ``X``).

Across hosting processes (shm, tcp, mpi) each process keeps one
``Failures`` for its own ranks, and ``outbox`` collects what the others must
hear of: crashes, revocations and contributions, as records
(``engine.records``, each with its time ``due``) that travel with the
round's reports (``hosting.rounds``) and are ``apply``-ed by the others
before anything of time ``due`` runs there. Every effect above comes at
least one hop after its cause, and no round runs past one hop, so each
process sees them at the times a single process would.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from .._wildcard import ANY_SOURCE
from ..errors import ProcessFailedError, RankCrashed, RevokedError, SimclusterError
from ..faults import Crash, call_kind
from ..request import Request, format_op
from .kernel import FINISHED
from .records import CrashRecord, MeetRecord, Record, Revocation, RevokeRecord

if TYPE_CHECKING:
    from ..matching import Endpoints
    from .kernel import Kernel, Task
    from .meetings import Meetings
    from .protocol import Member, Roster
    from .rendezvous import Handshakes

__all__ = ["Failures", "Failing"]


class Failing(Protocol):
    """The protocol as the failure model uses it (``P2P``): the failure model's side of their
    seam, as ``Faults`` (``engine/protocol.py``) is the protocol's. It reads the communicators
    and the match queues, moves handshakes only through their transitions, and never assigns an
    attribute of the protocol (``tests/test_structure.py`` checks both)."""

    @property
    def rts_delay(self) -> float: ...

    @property
    def groups(self) -> dict[int, Roster]: ...

    @property
    def endpoints(self) -> Endpoints: ...

    @property
    def handshakes(self) -> Handshakes: ...


class _Meeting:
    """An ``agree`` or ``shrink`` under way: what each member brought, and when."""

    __slots__ = ("group", "values", "times", "requests")

    def __init__(self) -> None:
        self.group: Roster | None = None  # known once a member here has come
        self.values: dict[int, Any] = {}  # comm rank -> flag (agree) or None (shrink)
        self.times: dict[int, float] = {}
        self.requests: dict[int, Request[Any]] = {}  # those of the members here


class Failures:
    """The crashes of one run (``Crash`` faults) and the state ULFM's calls read and change.

    ``crashes``: the planned crashes of the ranks hosted here; ``outbox``:
    where records for the other hosting processes go (None: every rank is
    here); ``meetings``: the engine's analytic meetings (``engine.meetings``),
    which a crash or a revoke ends.
    """

    def __init__(self, kernel: Kernel, p2p: Failing, crashes: list[Crash],
                 outbox: list[Record] | None = None, *, meetings: Meetings) -> None:
        self.kernel = kernel
        self.p2p = p2p
        self.analytic = meetings  # the engine's analytic meetings: a crash or revoke ends them
        self.hop = p2p.rts_delay  # the model's smallest message latency: how late news comes
        self.outbox = outbox
        self.failed: dict[int, float] = {}  # world rank -> virtual time it crashed
        self.known: dict[int, float] = {}  # the crashes announced to the survivors (Rule 2)
        self.at_call = {c.rank: (c.call, c.nth) for c in crashes if c.call is not None}
        self.calls: dict[tuple[int, str], int] = {}  # (world rank, kind of call) -> calls made
        self.revoked: dict[int, Revocation] = {}  # user context -> who revoked it, when
        self.revoking: dict[tuple[int, int], float] = {}  # (context, world rank) -> when it revoked
        self.acked: dict[tuple[int, int], set[int]] = {}  # (context, world rank) -> failures acknowledged
        # sends that may wait for their receiver: (request, context, receiver, protocol key)
        self.sends: list[tuple[Request[Any], int, int, tuple[int, int]]] = []
        self.prune_at = 1024  # drop the completed ones once the list reaches this length
        self.meetings: dict[tuple[int, str, int], _Meeting] = {}
        self.numbers: dict[tuple[int, str, int], int] = {}  # (context, kind, world rank) -> calls made
        self.doomed: list[tuple[Request[Any], BaseException]] = []  # failed together (complete_all)
        for crash in crashes:
            if crash.at == 0.0:  # dead from the start: its first call raises RankCrashed
                self.fail(crash.rank)
                kernel.schedule(0.0, self.crash_event, (crash.rank, 0.0))
            elif crash.at is not None:
                # just before t, so that whatever order the seed gives the events of instant t,
                # the rank does nothing at t
                kernel.schedule(math.nextafter(crash.at, -math.inf), self.crash_event,
                                (crash.rank, crash.at))

    def after(self, t: float) -> float:
        """When news of something at ``t`` reaches the other ranks: one hop later (Rule 2)."""
        return max(t + self.hop, math.nextafter(t, math.inf))

    def _tell(self, record: Record) -> None:
        if self.outbox is not None:
            self.outbox.append(record)

    def take_records(self) -> list[Record]:
        """What the other hosting processes must hear of since the last call (``outbox``)."""
        records = self.outbox
        if not records:
            return []
        self.outbox = []
        return records

    def apply(self, records: list[Record]) -> None:
        """Take the other hosting processes' records (``outbox``): crashes first, then revocations
        and contributions, each acted on at its ``due`` time."""
        for record in sorted(records, key=lambda r: not isinstance(r, CrashRecord)):
            if isinstance(record, CrashRecord):
                if record.rank not in self.failed:
                    self.failed[record.rank] = record.at
                    self.kernel.schedule(self.after(record.at), self.announce, record.rank)
            elif isinstance(record, RevokeRecord):
                self.kernel.schedule(record.due, self._revoke_event, (record.ctx, record.by, record.at))
            elif isinstance(record, MeetRecord):
                key = (record.ctx, record.what, record.n)
                meeting = self.meetings.get(key)
                if meeting is None:
                    meeting = self.meetings[key] = _Meeting()
                meeting.values[record.rank] = record.value
                meeting.times[record.rank] = record.at
                self.kernel.schedule(record.due, self._check, key)

    # ---- the crash (Rule 1) ----

    def crash_event(self, planned: tuple[int, float]) -> None:
        """A planned crash's time has come: stop the rank, unless it has finished already."""
        rank, at = planned
        task = self._task(rank)
        if task is None:
            return
        if task.state == FINISHED:
            if rank in self.failed:  # crashed at 0 yet finished without a call: it never ran
                task.result = None
            return
        self.kernel.stop(task)
        task.time = at
        if rank not in self.failed:
            self.fail(rank, at)

    def _task(self, rank: int) -> Task | None:
        tasks = self.kernel.tasks
        if rank < len(tasks) and tasks[rank].rank == rank:
            return tasks[rank]
        return next((task for task in tasks if task.rank == rank), None)

    def fail(self, rank: int, at: float | None = None) -> None:
        """Record the crash of ``rank`` at ``at`` (now: None); the survivors learn of it one hop
        later (Rule 2)."""
        now = self.kernel.now if at is None else at
        self.failed[rank] = now
        p2p = self.p2p
        p2p.handshakes.drop_sends_of(rank)  # its own sends die with it
        trace = self.kernel.trace
        if trace is not None:
            trace.span(rank, "crash", now, now, fault="crash-stop")
        self.kernel.schedule(self.after(now), self.announce, rank)
        self._tell(CrashRecord(due=self.after(now), rank=rank, at=now))

    def on_call(self, rank: int, kind: str, call: str) -> None:
        """A rank makes a call of ``kind`` (``send``, ``recv``, ``probe`` or a collective's name):
        crash it here if its plan says so (``RankCrashed``)."""
        if rank in self.failed:  # unwinding after its crash: it makes no more calls
            raise RankCrashed(rank, call)
        kind = call_kind(kind) or kind  # one vocabulary for every API's spelling (faults.CALL_KINDS)
        key = (rank, kind)
        n = self.calls[key] = self.calls.get(key, 0) + 1
        planned = self.at_call.get(rank)
        if planned is not None and planned[0] == kind and n == planned[1]:
            self.fail(rank)
            raise RankCrashed(rank, call)

    def lost_handshake(self, req: Request[Any], src: int) -> SimclusterError | None:
        """A receive matched the request to send of world rank ``src``: its error if ``src``'s crash
        is known (the data will never come); a crash announced later fails it then (``announce``)."""
        if src in self.known:
            return self.error(req.comm, _op(req), [src])  # type: ignore[attr-defined]
        return None

    def lost(self, dst: int) -> bool:
        """Whether a message that reaches world rank ``dst`` now is lost: it crashed (Rule 1)."""
        return dst in self.failed

    # ---- detection (Rule 2) ----

    def announce(self, rank: int) -> None:
        """Tell the survivors that ``rank`` failed: fail what waits for it."""
        self.known[rank] = self.failed[rank]
        p2p = self.p2p
        touched: set[int] = set()
        for ctx, group in list(p2p.groups.items()):
            if _member(group, rank):
                touched.add(ctx)
                self._fail_receives(ctx, group, rank)
        for recv in p2p.handshakes.drop_receives_from(rank):  # its data will never come
            self.doomed.append((recv, self.error(recv.comm, recv.op, [rank])))
        self._fail_sends(lambda ctx, dst: dst == rank or (ctx & 1 == 1 and ctx in touched), [rank])
        for req in self.analytic.drop({ctx for ctx in touched if ctx & 1 == 0}):
            self.doomed.append((req, ProcessFailedError(req.owner, _op(req), [rank], self.failed[rank])))
        for meeting_key, meeting in list(self.meetings.items()):
            if meeting_key[0] in touched:
                self._settle(meeting_key, meeting)
        self._release()

    def _release(self) -> None:
        """Fail what was doomed, all at once: no rank runs before every one of them failed."""
        doomed, self.doomed = self.doomed, []
        self.kernel.complete_all([(req, None, error) for req, error in doomed])

    def _fail_receives(self, ctx: int, group: Roster, rank: int) -> None:
        row = self.p2p.endpoints.rows.get(ctx)
        if row is None:
            return
        failed_local = group.local_rank(rank)
        collective = ctx & 1 == 1
        for i, mq in enumerate(row.queues):
            member = group.world_ranks[i]
            if mq is None or member in self.failed:
                continue
            posted, _ = mq.leftovers()
            for req in posted:
                wildcard = req.src == ANY_SOURCE and not self.is_acked(ctx & ~1, member, rank)
                if collective or req.src == failed_local or wildcard:
                    mq.unpost(req.src, req.tag, req)
                    self.doomed.append((req, self.error(req.comm, _op(req), [rank], wildcard and not collective)))
            for item in list(mq.probes or []):
                src, _, preq = item
                if src == failed_local or src == ANY_SOURCE or collective:
                    assert mq.probes is not None
                    mq.probes.remove(item)
                    self.doomed.append((preq, ProcessFailedError(i, _op(preq), [rank], self.failed[rank],
                                                           src == ANY_SOURCE)))

    def _fail_sends(self, hit: Any, ranks: list[int], revoked: Revocation | None = None) -> None:
        p2p = self.p2p
        kept = []
        for entry in self.sends:
            req, ctx, dst, key = entry
            if req.done():
                continue
            if not hit(ctx, dst):
                kept.append(entry)
                continue
            p2p.handshakes.drop_send(key)
            owner = req.owner
            if revoked is not None:
                self.doomed.append((req, RevokedError(owner, _op(req), revoked.by, revoked.at)))
            else:
                self.doomed.append((req, ProcessFailedError(owner, _op(req), ranks, self.failed[ranks[0]])))
        self.sends = kept

    def sent(self, req: Request[Any], ctx: int, dst: int, key: tuple[int, int]) -> None:
        """A send that waits for its receiver (rendezvous or synchronous) was posted."""
        sends = self.sends
        sends.append((req, ctx, dst, key))
        if len(sends) >= self.prune_at:  # a long run: keep only those still waiting
            self.sends = [entry for entry in sends if not entry[0].done()]
            self.prune_at = 2 * len(self.sends) + 1024

    def error(self, comm: Member, op: str, ranks: list[int], pending: bool = False) -> ProcessFailedError:
        """The error a call of ``comm``'s rank that needs the failed ``ranks`` gets."""
        return ProcessFailedError(comm.rank, op, ranks, min(self.failed[r] for r in ranks), pending)

    # ---- checks at each call ----

    def posting(self, comm: Member, op: Any, peer: int, send: bool) -> SimclusterError | None:
        """A send (to world rank ``peer``) or a receive is posted on ``comm``: the error its request
        completes with at once, if any (the caller's ``await`` raises it, as MPI reports it at completion).

        A receive from a failed rank is checked later, in ``unmatched``: what
        that rank sent before it failed can still be received.
        """
        task = self.kernel.current
        name = op if isinstance(op, str) else op[0]
        ctx: int = comm.ctx
        if task is not None:
            if ctx & 1 == 0:
                self.on_call(task.rank, "send" if send else "probe" if name.startswith("probe") else "recv",
                             name)
            elif task.rank in self.failed:
                raise RankCrashed(task.rank, name)
        if ctx & 1:  # inside a collective: named after the collective's call
            failed = self.failed_in(comm.group)
            if failed:
                call = task.collective.call if task is not None and task.collective is not None else _call(op)
                return self.error(comm, call, failed)
        elif send and peer in self.known:
            return self.error(comm, _call(op), [peer])
        revoked = self.revoked_for(ctx, comm.world_rank)
        if revoked is not None:
            return RevokedError(comm.rank, _call(op), revoked.by, revoked.at)
        return None

    def unmatched(self, comm: Member, src: int, op: Any) -> SimclusterError | None:
        """A receive found no message here yet: the error it completes with if none can come (Rule 2)."""
        if comm.ctx & 1:
            return None
        group = comm.group
        if src != ANY_SOURCE:
            world = group.world_ranks[src]
            return self.error(comm, _call(op), [world]) if world in self.known else None
        unacked = [r for r in self.failed_in(group)
                   if not self.is_acked(comm.ctx, comm.world_rank, r)]
        return self.error(comm, _call(op), unacked, pending=True) if unacked else None

    def entering(self, comm: Member, call: str) -> None:
        """A collective is called on ``comm``: crash here, or raise if it cannot complete."""
        task = self.kernel.current
        if task is not None:
            self.on_call(task.rank, call, call)
        failed = self.failed_in(comm.group)  # first: every survivor says the same, revoked or not
        if failed:
            raise self.error(comm, call, failed)
        revoked = self.revoked_for(comm.ctx, comm.world_rank)
        if revoked is not None:
            raise RevokedError(comm.rank, call, revoked.by, revoked.at)

    def excused(self, ctx: int, src: int, dst: int) -> bool:
        """Whether a leftover message or receive (``ctx`` -1: any) was cut short by a crash or a revocation."""
        if src in self.failed or dst in self.failed:
            return True
        if ctx < 0:
            return False
        if ctx & ~1 in self.revoked:
            return True
        group = self.p2p.groups.get(ctx)
        return ctx & 1 == 1 and group is not None and bool(self.failed_in(group))

    def failed_in(self, group: Roster) -> list[int]:
        """The members of ``group`` (world ranks) whose crash has been announced, by time, then rank."""
        known = self.known
        if not known:
            return []
        found = [r for r in known if _member(group, r)]
        return sorted(found, key=lambda r: (known[r], r))

    # ---- ULFM's calls (Rule 3) ----

    def revoked_for(self, ctx: int, world_rank: int) -> Revocation | None:
        """Who revoked the communicator of ``ctx`` and when, as member ``world_rank`` sees it now
        (None: not revoked for it yet)."""
        ctx &= ~1
        revoked = self.revoked.get(ctx)
        if revoked is None and self.revoking:
            at = self.revoking.get((ctx, world_rank))
            if at is not None:
                return Revocation(world_rank, at)
        return revoked

    def revoke(self, comm: Member) -> None:
        """Revoke ``comm``: for its caller now, for every member one hop later (Rule 3)."""
        ctx = comm.ctx & ~1
        by = comm.world_rank
        if self.revoked_for(ctx, by) is not None:
            return
        now = self.kernel.now
        self.revoking[(ctx, by)] = now
        due = now + self.hop
        self.kernel.schedule(due, self._revoke_event, (ctx, by, now))
        self._tell(RevokeRecord(due=due, ctx=ctx, by=by, at=now))
        trace = self.kernel.trace
        if trace is not None:
            trace.span(by, "revoke", now, now, fault="revoke", comm=comm.group.name)

    def _revoke_event(self, revocation: tuple[int, int, float]) -> None:
        """A revocation reaches every member: what is pending on the communicator fails."""
        ctx, by_rank, at = revocation
        if ctx in self.revoked:
            return
        revoked = self.revoked[ctx] = Revocation(by_rank, at)
        p2p = self.p2p
        for c in (ctx, ctx + 1):
            row = p2p.endpoints.rows.get(c)
            if row is None:
                continue
            for mq in row.queues:
                if mq is None:
                    continue
                posted, _ = mq.leftovers()
                for req in posted:
                    mq.unpost(req.src, req.tag, req)
                    error = RevokedError(req.comm.rank, _op(req), revoked.by, revoked.at)
                    self.doomed.append((req, error))
                for _, _, preq in list(mq.probes or []):
                    error = RevokedError(preq.owner, _op(preq), revoked.by, revoked.at)
                    self.doomed.append((preq, error))
                mq.probes = None
        self._fail_sends(lambda c, dst: c & ~1 == ctx, [], revoked)
        for req in self.analytic.drop({ctx}):
            self.doomed.append((req, RevokedError(req.owner, _op(req), revoked.by, revoked.at)))
        self._release()

    def is_acked(self, ctx: int, member: int, failed: int) -> bool:
        acked = self.acked.get((ctx & ~1, member))
        return acked is not None and failed in acked

    def ack_failed(self, comm: Member, count: int | None) -> int:
        """Acknowledge the first ``count`` known failures of ``comm`` (all: None); return how many."""
        failed = self.failed_in(comm.group)
        chosen = failed if count is None else failed[: max(0, count)]
        self.acked.setdefault((comm.ctx & ~1, comm.world_rank), set()).update(chosen)
        return len(chosen)

    def meet(self, comm: Member, kind: str, value: Any) -> Request[Any]:
        """Join ``comm``'s next ``agree`` or ``shrink``: a request for its outcome (Rule 3)."""
        kernel = self.kernel
        ctx = comm.ctx & ~1
        number_key = (ctx, kind, comm.world_rank)
        n = self.numbers[number_key] = self.numbers.get(number_key, 0) + 1
        key = (ctx, kind, n)
        meeting = self.meetings.get(key)
        if meeting is None:
            meeting = self.meetings[key] = _Meeting()
        meeting.group = comm.group
        req: Request[Any] = Request(kernel, kernel.current, f"{kind}()")
        now = kernel.now
        meeting.values[comm.rank] = value
        meeting.times[comm.rank] = now
        meeting.requests[comm.rank] = req
        due = now + self.hop
        kernel.schedule(due, self._check, key)  # when the others have it
        self._tell(MeetRecord(due=due, ctx=ctx, what=kind, n=n, rank=comm.rank, value=value, at=now))
        return req

    def _check(self, key: tuple[int, str, int]) -> None:
        meeting = self.meetings.get(key)
        if meeting is not None:
            self._settle(key, meeting)

    def _settle(self, key: tuple[int, str, int], meeting: _Meeting) -> None:
        """Complete a meeting if it is over now; each member here gets its outcome.

        Decided from the crash times and the contributions' times only, never
        from the order of this instant's events, so every hosting process
        decides alike.
        """
        group = meeting.group
        if group is None:  # no member here yet
            return
        now, hop, failed, after = self.kernel.now, self.hop, self.failed, self.after
        known = [w for w in group.world_ranks if w in failed and after(failed[w]) <= now]
        live = [i for i, w in enumerate(group.world_ranks) if w not in known]
        times = meeting.times
        if any(i not in times or times[i] + hop > now for i in live):
            return
        del self.meetings[key]
        rounds = math.ceil(math.log2(len(live))) if len(live) > 1 else 0
        done = max([now, *(times[i] + 2 * rounds * hop for i in live)])
        if key[1] == "agree":
            outcome: Any = -1
            for i in live:
                outcome &= meeting.values[i]
        else:
            outcome = [group.world_ranks[i] for i in live]
        known.sort(key=lambda w: (failed[w], w))
        for i in live:
            req = meeting.requests.get(i)
            if req is None or group.world_ranks[i] in failed:  # elsewhere, or crashed here
                continue
            value, error = outcome, None
            if key[1] == "agree":
                unacked = [r for r in known if not self.is_acked(key[0], group.world_ranks[i], r)]
                if unacked:
                    error = ProcessFailedError(i, "agree()", unacked, failed[unacked[0]])
            self.kernel.schedule(done, _complete, (req, value, error))


def _complete(item: tuple[Request[Any], Any, BaseException | None]) -> None:
    req, value, error = item
    req.complete(value, error)


def _member(group: Roster, world_rank: int) -> bool:
    local = group.local
    return world_rank < len(group.world_ranks) if local is None else world_rank in local


def _op(req: Request[Any]) -> str:
    """What an error names a failed request after: the collective it is part of, else its call."""
    task = req.task
    collective = None if task is None else task.collective
    return req.op if collective is None else collective.call


def _call(op: Any) -> str:
    """A posted call as reports show it (``op`` is a str or the tuple ``request`` formats)."""
    return op if isinstance(op, str) else format_op(op)
