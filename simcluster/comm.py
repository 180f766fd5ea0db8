"""Comm: what a rank holds to talk to the others.

A ``Group`` is one communicator seen from above: its context id, the world
rank of each member, and the per-member ``Comm`` objects. A ``Comm`` is one
member's handle: point-to-point calls, probes, virtual sleep, collectives and
sub-communicators.

Rule 1: every user-visible check (ranks, tags, buffers) happens here, at the
call, so the error names the rank and the call the user wrote.
Rule 2: collectives see only this class's public point-to-point surface, on
the private context ``comm.coll`` whose traffic never meets user messages.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, overload

from .engine import awaits as _awaits
from . import _p2p_calls
from .engine.kernel import CollectiveCall, current_task
from ._coll_context import TAG_UB as TAG_UB, CollContext as CollContext  # compiled (its own module)
from .collectives._methods import CollectiveMethods
from .matching import ANY_SOURCE, ANY_TAG
from .payload import check_buffer
from .request import Request, Status
from .errors import ProcessFailedError, RevokedError

if TYPE_CHECKING:
    from .engine.assembly import Engine, Task
    from .latency import LatencyModel

A = TypeVar("A")
R = TypeVar("R")

_send_call: Final = _p2p_calls.send  # (one global lookup per message rather than two)
_recv_call: Final = _p2p_calls.recv


def current_comm() -> Comm | None:
    """The world ``Comm`` of the rank running now, or None outside any rank."""
    task = current_task()
    comm = None if task is None else task.comm
    assert comm is None or isinstance(comm, Comm)  # the kernel keeps it as an opaque RankComm
    return comm


def groups_of(engine: Engine) -> dict[int, Group]:
    """The engine's communicators by context: the ``Group``s made here (its parts see ``Roster``s)."""
    return cast("dict[int, Group]", engine.groups)


def context_of(engine: Engine, key: str) -> int:
    """The context id of the communicator ``key`` names: the same in every process, made or not."""
    groups = groups_of(engine)
    ctx = 2 * (zlib.crc32(key.encode()) + 1)
    while ctx in groups and groups[ctx].key != key:
        ctx += 2 * (1 << 33)  # a crc32 collision: step outside the crc range
    return ctx


def start_ranks(engine: Engine, count: int, key: str, fn: Callable[..., Any], args: tuple[Any, ...],
                handle: Callable[[Comm], Any]) -> list[int]:
    """Start ``count`` ranks during the run, a world of their own that ``key`` names; return their world ranks.

    Each runs ``fn(handle(comm), *args)`` from the current virtual time, where
    ``comm`` is its member of the new world (``MPI.Comm.Spawn``: ``handle``
    makes its ``COMM_WORLD``), as the ranks a run starts with do.

    Raises:
        ValueError: the run is hosted by several processes, or its latency model
            has no room for more ranks (a platform's last place).
    """
    from .engine.kernel import Task

    if not engine.p2p.transport.in_process:
        raise ValueError("ranks can be added to a run on the memory transport only (shm and tcp "
                         "fix each process's block of ranks at start); run with --transport memory")
    ranks = list(engine.add_ranks(count))
    tasks = [Task(rank, None) for rank in ranks]  # type: ignore[arg-type]
    groups_of(engine)[0].tasks.extend(tasks)  # the world's tasks, by world rank
    group = Group(engine, context_of(engine, key), ranks, "world", tasks)
    group.key = key
    for place, task in enumerate(tasks):
        comm = group.member(place)
        engine.start_rank(task, comm, fn, args, {}, handle=handle(comm))
    return ranks


class Group:
    """A communicator: context id, members' world ranks and their Comm objects."""

    __slots__ = ("engine", "ctx", "world_ranks", "local", "members", "endpoints", "name", "tasks", "coll", "key",
                 "check", "setups")

    def __init__(self, engine: Engine, ctx: int, world_ranks: list[int], name: str,
                 tasks: list[Task], *, private: bool = False) -> None:
        self.engine = engine
        self.ctx = ctx
        self.world_ranks = world_ranks
        identity = world_ranks == list(range(len(world_ranks))) if len(world_ranks) < 64 else (
            world_ranks[0] == 0 and world_ranks[-1] == len(world_ranks) - 1
            and all(w == i for i, w in enumerate(world_ranks)))
        self.local: dict[int, int] | None = None if identity else {w: i for i, w in enumerate(world_ranks)}
        self.members: list[Comm | None] = [None] * len(world_ranks)
        self.endpoints = engine.p2p.register(self, ctx, len(world_ranks), self.local)  # members' match queues
        self.name = name
        self.tasks = tasks  # the task of each member, by local rank
        self.coll: Group | None = None
        self.key = "world"
        # collective verification: local, or across the processes hosting the members
        self.check = engine.call_check(ctx, world_ranks)
        # what a repeated collective call works out before it starts, shared by the members
        # (collectives._methods: _all_reduce_call): key -> the call's setup
        self.setups: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        if not private:
            self.coll = Group(engine, ctx + 1, world_ranks, name, tasks, private=True)

    def local_rank(self, world_rank: int) -> int:
        """Return the rank in this communicator of a world rank."""
        local = self.local
        return world_rank if local is None else local[world_rank]

    def member(self, rank: int) -> Comm:
        """Return member ``rank``'s Comm, creating it on first use."""
        comm = self.members[rank]
        if comm is None:
            comm = self.members[rank] = (_StrictComm if self.engine.kernel.strict else Comm)(self, rank)
        return comm

    def __repr__(self) -> str:
        return f"<Group {self.name!r} ctx={self.ctx} size={len(self.world_ranks)}>"


def _bad_rank(comm: Comm, op: str, what: str, value: object, wildcard: bool) -> ValueError:
    allowed = f"range({comm.size})" + (" or ANY_SOURCE" if wildcard else "")
    hint = "for a ring use (comm.rank + 1) % comm.size" if not wildcard else \
        "pass a rank of this comm, or ANY_SOURCE"
    return ValueError(f"rank {comm.rank}: {op}: {what} must be in {allowed} for this comm; {hint}")


def _bad_tag(comm: Comm, op: str, wildcard: bool) -> ValueError:
    allowed = "range(0, 2**31)" + (" or ANY_TAG" if wildcard else "")
    return ValueError(f"rank {comm.rank}: {op}: tag must be in {allowed}; use a non-negative int below 2**31")


def _is_index(value: object) -> bool:
    """True for ints and int-like values (numpy integers), False for bools and the rest."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


class Comm(CollectiveMethods):
    """One rank's handle on a communicator.

    Attributes:
        rank: this rank's number in the communicator.
        size: number of ranks in the communicator.
        world_rank: this rank's number in the world communicator.
        group: what the members share: world ranks, name, context id, collective checks.
        ctx: the communicator's context id (a message matches only receives on its context).

    The engine's side, which a user's code has no need of: ``engine``,
    ``kernel`` and ``p2p`` (the run's engine and its parts), ``match_queue``
    (this rank's posted receives and unexpected messages), ``coll`` (the same
    members on the private context collectives send on), and
    ``send_coroutine``/``recv_coroutine`` (``send``/``recv`` as coroutines).
    """

    __slots__ = ("group", "engine", "kernel", "p2p", "ctx", "rank", "size", "world_rank", "match_queue", "_task",
                 "_coll_seq", "_created", "__weakref__")

    group: Group  # the mixins read it as the narrower ``_comm_types.CollGroup``

    def __init__(self, group: Group, rank: int) -> None:
        self.group = group
        self.engine = group.engine
        self.kernel = group.engine.kernel  # the clock, tasks and timers
        self.p2p = group.engine.p2p  # sends and receives
        self.ctx = group.ctx
        self.rank = rank
        self.size = len(group.world_ranks)
        self.world_rank = group.world_ranks[rank]
        self.match_queue = group.endpoints.queue(rank)
        self._task = group.tasks[rank]
        self._coll_seq = 0  # collectives called so far, for mismatch reports
        self._created = 0  # communicators created from this one, for context ids

    # ---- facts ----

    @property
    def now(self) -> float:
        """This rank's virtual time, in seconds."""
        return self.kernel.now

    @property
    def world_ranks(self) -> list[int]:
        """The world rank of each member of this communicator."""
        return list(self.group.world_ranks)

    @property
    def name(self) -> str:
        """The communicator's name ('world', or how it was made)."""
        return self.group.name

    @property
    def transport(self) -> str:
        """The name of the run's transport (``"memory"``, ``"shm"``, ``"tcp"``, ...)."""
        return self.p2p.transport.name

    @property
    def serializer(self) -> str:
        """``"pickle"`` in runs made with ``serializer="pickle"``, else ``"msgpack"``."""
        return "msgpack" if self.p2p.dumps is None else "pickle"

    @property
    def latency(self) -> LatencyModel:
        """The run's latency model (collectives use its ``reduce_time``)."""
        model = self.p2p.latency_model
        assert model is not None, "runs always bind a latency model"
        return model

    @property
    def coll(self) -> Comm:
        """The same members on the private collective context."""
        coll = self.group.coll
        assert coll is not None, "a private context has no private context of its own"
        return coll.member(self.rank)

    def __repr__(self) -> str:
        return f"<Comm {self.group.name!r} rank={self.rank} size={self.size}>"

    # ---- validation ----

    def _op_error(self, op: tuple[Any, ...]) -> str:
        from .request import format_op

        return format_op(op)

    def _send(self, obj: object, dst: int, tag: int, name: str, sync: bool,
              nonblocking: bool) -> Request[None] | None:
        if type(dst) is not int or not 0 <= dst < self.size:
            if not _is_index(dst) or not 0 <= dst < self.size:
                raise _bad_rank(self, self._op_error((name, dst, tag)), "dst", dst, False)
            dst = operator.index(dst)
        if type(tag) is not int or not 0 <= tag < TAG_UB:
            if not _is_index(tag) or not 0 <= tag < TAG_UB:
                raise _bad_tag(self, self._op_error((name, dst, tag)), False)
            tag = operator.index(tag)
        # positional: a compiled engine parses keywords for each call
        return self.p2p.post_send(self, obj, dst, tag, sync, (name, dst, tag), nonblocking)

    def isend(self, obj: object, dst: int, tag: int = 0) -> Request[None]:
        """Start sending ``obj`` to ``dst`` and return at once.

        Completes at once up to ``eager_limit`` bytes (the payload is copied),
        otherwise when ``dst`` posts a matching receive and the data has arrived
        (rendezvous). Costs no virtual time here; the latency model charges the
        transfer. Under ``checks="strict"`` changing an array before the request
        has been waited or tested to completion raises ``BufferHazardError`` at
        that ``wait``/``test`` (also for eager sends, which complete at once).

        Raises:
            ValueError: ``dst`` outside ``range(self.size)`` or ``tag`` outside ``[0, 2**31)``.
            TypeError: ``obj`` cannot be sent.
        """
        req = self._send(obj, dst, tag, "isend", False, True)
        assert req is not None
        if self.kernel.trace is not None:
            self._span("isend", self.kernel.now, dst=dst, tag=tag, nbytes=self.p2p.last_nbytes)
        return req

    def issend(self, obj: object, dst: int, tag: int = 0) -> Request[None]:
        """Start a synchronous-mode send: its request completes only once ``dst`` has matched it."""
        req = self._send(obj, dst, tag, "issend", True, True)
        assert req is not None
        if self.kernel.trace is not None:
            self._span("issend", self.kernel.now, dst=dst, tag=tag, nbytes=self.p2p.last_nbytes)
        return req

    def send(self, obj: object, dst: int, tag: int = 0) -> Awaitable[None]:
        """Send ``obj`` to ``dst`` (standard mode); await the result.

        Returns at once for payloads up to ``eager_limit`` bytes; above it,
        waits until ``dst`` posts a matching receive and the data has arrived,
        so two ranks that both send a large message first deadlock, as in MPI.
        The send starts when the result is awaited.
        """
        return _send_call(self, obj, dst, tag)

    async def send_coroutine(self, obj: object, dst: int, tag: int = 0) -> None:
        """``send`` as a coroutine: what strict checks note, and the path of traced runs and odd arguments."""
        traced = self.kernel.trace is not None  # else nothing to read for a span: a hot path
        start = self.kernel.now if traced else 0.0
        req = self._send(obj, dst, tag, "send", False, False)
        nbytes = self.p2p.last_nbytes if traced else 0
        if req is not None:  # None: an eager send, already complete
            await req
        if traced:
            self._span("send", start, dst=dst, tag=tag, nbytes=nbytes)

    async def ssend(self, obj: object, dst: int, tag: int = 0) -> None:
        """Send ``obj`` to ``dst`` and return only once a receive has matched it."""
        start = self.kernel.now
        req = self._send(obj, dst, tag, "ssend", True, False)
        nbytes = self.p2p.last_nbytes
        if req is not None:
            await req
        if self.kernel.trace is not None:
            self._span("ssend", start, dst=dst, tag=tag, nbytes=nbytes)

    def _recv(self, buf: Any, src: int, tag: int, name: str, nonblocking: bool) -> Request[Any]:
        if (type(src) is not int or not 0 <= src < self.size) and src is not ANY_SOURCE:
            if not _is_index(src) or not (0 <= src < self.size or src == ANY_SOURCE):
                raise _bad_rank(self, self._op_error((name, buf, src, tag)), "src", src, True)
            src = operator.index(src)  # a numpy integer: the compiled engine takes ints only
        if (type(tag) is not int or not 0 <= tag < TAG_UB) and tag is not ANY_TAG:
            if not _is_index(tag) or not (0 <= tag < TAG_UB or tag == ANY_TAG):
                raise _bad_tag(self, self._op_error((name, buf, src, tag)), True)
            tag = operator.index(tag)
        if buf is not None:
            check_buffer(buf, self.rank, self._op_error((name, buf, src, tag)))
        return self.p2p.post_recv(self, buf, src, tag, name, nonblocking)

    @overload
    def irecv(self, buf: None = None, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request[Any]: ...
    @overload
    def irecv(self, buf: A, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request[A]: ...

    def irecv(self, buf: Any = None, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request[Any]:
        """Post a receive and return at once.

        ``await req`` returns the payload (or ``buf``, filled in place) and
        ``req.status`` tells its source, tag and size. Completes when a fitting
        message has been matched and has arrived.

        Raises:
            ValueError: ``src`` not a rank of this comm nor ANY_SOURCE, or a bad tag.
            TypeError: ``buf`` is not an array.
        """
        req = self._recv(buf, src, tag, "irecv", True)
        if self.kernel.trace is not None:
            self._span("irecv", self.kernel.now, src=src, tag=tag)
        return req

    @overload
    def recv(self, buf: None = None, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Awaitable[Any]: ...
    @overload
    def recv(self, buf: A, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Awaitable[A]: ...

    def recv(self, buf: Any = None, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Awaitable[Any]:
        """Receive a message; await the result: its payload (or ``buf``, filled in place).

        Completes at the later of the call and the message's arrival. A message
        larger than ``buf`` raises ``TruncationError``, one of another dtype a
        ``TypeError``; a shorter one fills the front of ``buf``. The receive is
        posted when the result is awaited.
        """
        return _recv_call(self, buf, src, tag)

    async def recv_coroutine(self, buf: Any = None, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Any:
        """``recv`` as a coroutine: what strict checks note, and the path of traced runs and odd arguments."""
        traced = self.kernel.trace is not None
        start = self.kernel.now if traced else 0.0
        req = self._recv(buf, src, tag, "recv", False)
        value = req.result() if req.done() else await req  # matched already
        if traced:
            status = req.status
            self._span("recv", start, src=src, tag=tag, nbytes=status.nbytes if status else 0)
        return value

    async def sendrecv(self, obj: object, dst: int, buf: Any = None, src: int = ANY_SOURCE,
                       sendtag: int = 0, recvtag: int = ANY_TAG) -> Any:
        """Send to ``dst`` and receive from ``src`` at once, without deadlock; return the payload."""
        start = self.kernel.now
        rreq = self._recv(buf, src, recvtag, "sendrecv", False)
        sreq = self._send(obj, dst, sendtag, "sendrecv", False, False)
        value = await rreq
        if sreq is not None:
            await sreq
        if self.kernel.trace is not None:
            self._span("sendrecv", start, dst=dst, src=src)
        return value

    def _check_probe(self, src: int, tag: int, op: str) -> None:
        if not _is_index(src) or not (0 <= src < self.size or src == ANY_SOURCE):
            raise _bad_rank(self, op, "src", src, True)
        if not _is_index(tag) or not (0 <= tag < TAG_UB or tag == ANY_TAG):
            raise _bad_tag(self, op, True)

    def iprobe(self, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Status | None:
        """Return the Status of a message a receive for (src, tag) would take now, or None."""
        op = f"iprobe(src={src!r}, tag={tag!r})"
        self._check_probe(src, tag, op)
        status = self.p2p.iprobe(self, src, tag)
        if status is None:
            self.kernel.checks.spin(Request(self.kernel, None, op))
        return status

    async def probe(self, src: int = ANY_SOURCE, tag: int = ANY_TAG) -> Status:
        """Wait until a message fitting (src, tag) has arrived; return its Status without receiving it."""
        op = f"probe(src={src!r}, tag={tag!r})"
        self._check_probe(src, tag, op)
        start = self.kernel.now
        status: Status = await self.p2p.post_probe(self, src, tag, op)
        if self.kernel.trace is not None:
            self._span("probe", start, src=src, tag=tag)
        return status

    async def sleep(self, seconds: float) -> None:
        """Advance this rank's virtual clock by ``seconds`` (models computation)."""
        if not seconds >= 0:
            raise ValueError(f"rank {self.rank}: sleep({seconds!r}): seconds must be >= 0; "
                             "pass the virtual compute time in seconds")
        if seconds == 0:
            return
        start = self.kernel.now
        await self.kernel.post_sleep(float(seconds), f"sleep({seconds!r})")
        if self.kernel.trace is not None:
            self._span("sleep", start, seconds=seconds)

    def _span(self, name: str, start: float, **args: Any) -> None:
        """Record an operation of this rank in the trace (only called when tracing)."""
        trace = self.kernel.trace
        assert trace is not None
        if self.ctx != 0:
            args["comm"] = self.group.name
        trace.span(self.world_rank, name, start, self.kernel.now, **args)

    # ---- sub-communicators ----

    def _derive(self, how: str, world_ranks: list[int]) -> Comm:
        """Return this rank's Comm on the communicator ``how`` made from this one.

        Every member numbers the communicators it creates from this one in the
        same order (creation is collective), so (context, number, how) names the
        new communicator identically on every member, in any process.
        """
        self._created += 1
        name = how if self.group.name == "world" else f"{self.group.name}.{how}"
        return self._member_of(f"{self.ctx}/{self._created}/{how}", world_ranks, name)

    def _member_of(self, key: str, world_ranks: list[int], name: str, at: int | None = None) -> Comm:
        """Return this rank's Comm on the communicator ``key`` names, made on first use (``at``: this
        rank's place in ``world_ranks``, when known)."""
        engine = self.engine
        groups = groups_of(engine)
        ctx = context_of(engine, key)
        group = groups.get(ctx)
        if group is None:
            tasks = [groups[0].tasks[w] for w in world_ranks]
            group = Group(engine, ctx, list(world_ranks), name, tasks)
            group.key = key
        return group.member(world_ranks.index(self.world_rank) if at is None else at)

    def named(self, key: str, world_ranks: list[int], at: int | None = None) -> Comm:
        """Return this rank's Comm on the communicator of ``world_ranks`` that ``key`` names.

        Not collective and sends nothing: every member that passes the same
        ``key`` (and ranks) gets the same communicator, made on first use. For
        communicators whose members agree on a name without the whole parent
        taking part (``MPI_COMM_SELF``, ``MPI_Comm_create_group``); the caller
        keeps keys unique. ``at``: this rank's place in ``world_ranks``, where
        the caller knows it (saves searching a long list).

        Raises:
            ValueError: this rank is not in ``world_ranks`` (or not at ``at``).
        """
        if at is not None:
            if not (0 <= at < len(world_ranks) and world_ranks[at] == self.world_rank):
                raise ValueError(f"rank {self.rank}: named({key!r}, at={at!r}): world rank "
                                 f"{self.world_rank} is not there; pass its place in world_ranks")
            return self._member_of(f"{self.ctx}/named/{key}", world_ranks, key, at)
        if self.world_rank not in world_ranks:
            raise ValueError(f"rank {self.rank}: named({key!r}, world_ranks={world_ranks!r}): this "
                             f"rank (world rank {self.world_rank}) is not a member; pass ranks "
                             "that include it")
        return self._member_of(f"{self.ctx}/named/{key}", world_ranks, key)

    def joint(self, key: str, world_ranks: list[int], at: int | None = None) -> Comm:
        """``named``, for communicators joining ranks of different worlds (``MPI.Comm.Spawn``'s).

        ``named`` keys are this communicator's own; ``joint`` keys are the run's,
        so ranks whose ``COMM_WORLD`` differ agree on one communicator by ``key``.
        """
        place = world_ranks.index(self.world_rank) if at is None else at
        return self._member_of(f"joint/{key}", world_ranks, key, place)

    async def split(self, color: int | None, key: int = 0) -> Comm | None:
        """Split this communicator by ``color``; order each part by ``(key, rank)``.

        Collective: every member must call it. Returns this rank's new Comm, or
        None when ``color`` is None (MPI_UNDEFINED). Costs one all_gather.
        """
        if color is not None and (isinstance(color, bool) or not isinstance(color, int) or color < 0):
            raise ValueError(f"rank {self.rank}: split(color={color!r}): color must be an int >= 0 "
                             "or None to opt out")
        pairs = await self.all_gather((color, key))
        if color is None:
            self._created += 1
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(pairs) if c == color)
        world_ranks = [self.group.world_ranks[r] for _, r in members]
        return self._derive(f"split({color})", world_ranks)

    async def new_group(self, ranks: list[int]) -> Comm | None:
        """Make a communicator of ``ranks`` (in that order); None on non-members.

        Collective over this communicator, like ``torch.distributed.new_group``:
        every member calls it with the same ``ranks``.
        """
        ranks = list(ranks)
        if len(set(ranks)) != len(ranks) or any(
                isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.size for r in ranks):
            raise ValueError(f"rank {self.rank}: new_group(ranks={ranks!r}): ranks must be distinct "
                             f"members of range({self.size})")
        seen = await self.all_gather(ranks)
        if any(other != ranks for other in seen):
            raise ValueError(f"rank {self.rank}: new_group(ranks={ranks!r}): members passed different "
                             f"ranks lists ({seen!r}); pass the same list on every rank")
        if self.rank not in ranks:
            self._created += 1
            return None
        return self._derive(f"group({ranks})", [self.group.world_ranks[r] for r in ranks])

    async def dup(self) -> Comm:
        """Return a copy of this communicator whose traffic never meets this one's.

        Collective: every member must call it. Costs one barrier.
        """
        await self.barrier()
        return self._derive("dup", list(self.group.world_ranks))

    # ---- surviving failures (ULFM; docs/faults.md) ----

    def revoke(self) -> None:
        """Revoke this communicator for every member, now (ULFM's ``MPI_Comm_revoke``).

        Every pending and later operation on it, on any member, raises
        ``RevokedError``, except ``shrink``, ``agree``, ``ack_failed`` and
        ``get_failed``. Not collective: one member calls it, and sees it
        revoked at once; the others learn of it (and their pending operations
        on it fail) one hop later: the latency model's smallest message
        latency.
        """
        if self.kernel.current is None:
            raise self.kernel.checks.outside(self.rank, "revoke()")
        self.engine.failures().revoke(self)

    @property
    def is_revoked(self) -> bool:
        """Whether this communicator was revoked (``revoke``)."""
        failures = self.p2p.failures
        return failures is not None and failures.revoked_for(self.ctx, self.world_rank) is not None

    def get_failed(self) -> list[int]:
        """The ranks of this communicator known to have failed, in the order they failed."""
        failures = self.p2p.failures
        if failures is None:
            return []
        return [self.group.local_rank(w) for w in failures.failed_in(self.group)]

    def ack_failed(self, count: int | None = None) -> int:
        """Acknowledge the first ``count`` failures ``get_failed`` lists (all: None); return how many.

        After that, a receive from any source on this communicator waits for
        the live members' messages instead of raising ``ProcessFailedError``,
        and ``agree`` no longer raises for those failures.
        """
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise TypeError(f"rank {self.rank}: ack_failed(count={count!r}): count must be an int or None")
        failures = self.p2p.failures
        return 0 if failures is None else failures.ack_failed(self, count)

    def iagree(self, flag: int) -> Request[int]:
        """Start ``agree``; the request's result is the agreed flag."""
        if isinstance(flag, bool) or not isinstance(flag, int):
            raise TypeError(f"rank {self.rank}: agree(flag={flag!r}): flag must be an int")
        if self.kernel.current is None:
            raise self.kernel.checks.outside(self.rank, "agree()")
        return self.engine.failures().meet(self, "agree", flag)

    async def agree(self, flag: int) -> int:
        """Agree with the live members on ``flag``: return the bitwise AND of their flags (``MPI_Comm_agree``).

        Completes on every live member, even on a revoked communicator or if
        members fail meanwhile. Raises ``ProcessFailedError`` (after agreeing)
        when a member failed whose failure this rank has not acknowledged.
        """
        value: int = await self.iagree(flag)
        return value

    def ishrink(self) -> Request[Comm]:
        """Start ``shrink``; the request's result is the new communicator."""
        if self.kernel.current is None:
            raise self.kernel.checks.outside(self.rank, "shrink()")
        return self.kernel.spawn(self.shrink(), "shrink()")

    async def shrink(self) -> Comm:
        """Return a new communicator of the live members, in this one's order (``MPI_Comm_shrink``).

        Collective over the live members; works on a revoked communicator.
        """
        if self.kernel.current is None:
            raise self.kernel.checks.outside(self.rank, "shrink()")
        survivors: list[int] = await self.engine.failures().meet(self, "shrink", None)
        return self._derive("shrink", survivors)

    # ---- collectives: the private context ----

    def _collective(self, call: str, algorithm: str = "", payload: str | None = None, op: str = "",
                    forced: bool = False) -> CollContext:
        """Number a new collective call on this comm, verify it, and return its private context.

        Every member numbers its calls in the same order. The call's signature
        (``call`` with its root and op, ``algorithm``, ``payload``: the array
        every member must pass alike, None where nothing is compared, ``op``: a
        user op's definition) is compared with that of the first member that
        entered the same call; a difference raises CollectiveMismatchError here,
        at the call (``engine.coll_check``). ``forced``: the algorithm was asked for.
        """
        failures = self.p2p.failures
        if failures is not None:  # a crash planned at this call, a failed member, a revoked comm
            failures.entering(self, call.partition("(")[0])
        self._coll_seq = seq = self._coll_seq + 1
        self.group.check.enter(self, seq, (call, algorithm, payload, op), forced)
        return CollContext(self, seq, call, algorithm)

    async def _run_collective(self, call: str, body: Callable[..., Awaitable[R]], algorithm: str = "",
                              payload: str | None = None, op: str = "", forced: bool = False) -> R:
        """Run a blocking collective: ``body`` gets the private context."""
        ctx, outer, start = self._enter_collective(call, algorithm, payload, op, forced)
        try:
            result = await body(ctx)
        finally:
            self._leave_collective(outer)
        if self.kernel.trace is not None:
            self._trace_collective(ctx, start)
        return result

    # _run_collective in two halves, for the callers that inline it (barrier, all_reduce: one
    # coroutine frame less per rank, which counts at a million ranks)

    def _enter_collective(self, call: str, algorithm: str = "", payload: str | None = None,
                          op: str = "", forced: bool = False
                          ) -> tuple[CollContext, CollectiveCall | None, float]:
        """Start a blocking collective: return its context, the call it nests in, and the time."""
        task = self.kernel.current
        if task is None:
            raise self.kernel.checks.outside(self.rank, call)
        ctx = self._collective(call, algorithm, payload, op, forced)
        outer = task.collective
        task.collective = ctx
        return ctx, outer, self.kernel.now

    def _leave_collective(self, outer: CollectiveCall | None) -> None:
        """End what ``_enter_collective`` started (also when it failed)."""
        task = self.kernel.current
        if task is not None:
            task.collective = outer

    def _trace_collective(self, ctx: CollContext, start: float) -> None:
        """Record a finished blocking collective in the trace."""
        call = ctx.call
        self._span(call.partition("(")[0], start, call=call, algorithm=ctx.algorithm, seq=ctx.seq)

    def _start_collective(self, call: str, body: Callable[[CollContext], Awaitable[R]],
                          algorithm: str = "", payload: str | None = None, op: str = "",
                          forced: bool = False) -> Request[R]:
        """Start a nonblocking collective; its request completes with ``body``'s result."""
        if self.kernel.current is None:
            raise self.kernel.checks.outside(self.rank, "i" + call)
        try:
            ctx = self._collective(call, algorithm, payload, op, forced)
        except (ProcessFailedError, RevokedError) as exc:  # reported at completion, as MPI does
            req: Request[R] = Request(self.kernel, self.kernel.current, "i" + call)
            req.nonblocking = True
            req.complete(None, exc)
            return req
        if self.kernel.trace is not None:
            self._span("i" + call.partition("(")[0], self.kernel.now, call=call, algorithm=algorithm,
                       seq=ctx.seq)
        return self.kernel.spawn(_as_coro(body(ctx)), f"i{call}", ctx)


class _StrictComm(Comm):
    """``Comm`` in ``checks="strict"`` runs: a blocking call made by user code notes its
    coroutine, so that one never awaited fails its rank (``engine.awaits``); under
    ``checks="off"`` ranks get ``Comm`` itself and pay nothing."""

    __slots__ = ()


_BLOCKING: Final = (
    "send", "ssend", "recv", "sendrecv", "probe", "sleep", "split", "new_group", "dup",
    "barrier", "broadcast", "scatter", "gather", "reduce", "all_reduce", "reduce_scatter",
    "scan", "exscan", "all_gather", "all_to_all",
)
"""The blocking ``Comm`` methods: ``_StrictComm``'s return coroutines, which strict runs note
(``Comm``'s own ``send`` and ``recv`` return compiled awaitables instead: ``_p2p_calls``)."""

_COROUTINES: Final = {"send": Comm.send_coroutine, "recv": Comm.recv_coroutine}
"""The blocking calls that ``Comm`` runs as compiled awaitables (``_p2p_calls``): their coroutines."""

for _name in _BLOCKING:
    setattr(_StrictComm, _name, _awaits.noting(_name, _COROUTINES.get(_name, getattr(Comm, _name)),
                                               getattr(Comm, _name)))


async def _as_coro(awaitable: Awaitable[R]) -> R:
    return await awaitable
