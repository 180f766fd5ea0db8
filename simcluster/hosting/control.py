"""The control protocol of a multi-process run: one typed class per message.

The coordinator (``hosting.coordinator``) and each hosting process (``hosting.host``)
exchange these over the control link; ``hosting.host``'s docstring tells the
protocol's story. Each message travels as an ``Envelope`` whose ``tag`` is
the message's opcode and whose payload is the plain list its ``encode()``
returns, packed by ``transports.wire``; ``decode(items)`` builds the message
back from that list, checking its shape. Nothing on the control link is
pickled: only the run's own values (a rank's return values in RESULTS and
FINAL) use the run's serializer, as messages between ranks do.

coordinator -> hosting process: ``Start``, ``Go``, ``Describe``,
``Finish``, ``Stop``, ``Timeout``, ``FinalResult``.
hosting process -> coordinator: ``Hello``, ``Ready``, ``Tick``, ``Done``,
``Blocked``, ``Results``, ``Error``, ``Lines``, ``Bye``.
hosting process -> hosting processes: ``Report``, at the end of each round.

An exception crosses as the plain dict ``hosting.remote.encode_exception`` makes
(``ExcData``); only ``hosting.remote`` reads or writes its keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NamedTuple, TypeVar

from simcluster.transports import wire
from simcluster.transports.base import EAGER, Envelope, TransportError

from .. import arrays as _arrays
from ..engine import records as _records
from ..engine.coll_check import SignatureRecord

__all__ = [
    "BYE", "BLOCKED", "DESCRIBE", "DONE", "ERROR", "FINAL", "FINISH", "GO", "HANDSHAKES_LISTED",
    "HELLO", "LINES", "MESSAGES", "OP_NAMES", "READY", "REPORT", "RESULTS", "START", "STOP", "TICK",
    "TIMEOUT", "Blocked", "BlockedEntry", "Bye", "Describe", "Done", "Error", "ExcData", "Failure",
    "FinalResult", "Finish", "Go", "Hello", "Lines", "Message", "Ready", "Report", "Results",
    "Start", "Stop", "Tick", "Timeout", "TraceParts", "envelope", "read",
]

# ---- opcodes: they travel in Envelope.tag ----

# coordinator -> hosting process
START: Final = 1  # connect to your peers
GO: Final = 2  # every process is connected: start the rounds
DESCRIBE: Final = 3  # the run is deadlocked: answer BLOCKED
FINISH: Final = 4  # every rank finished: answer RESULTS
STOP: Final = 5  # the run is over (failed elsewhere): close everything and exit
TIMEOUT: Final = 6  # the run timed out: answer LINES
FINAL: Final = 7  # multi-node: the whole run's result, for node processes to return; answer BYE
# hosting process -> coordinator
HELLO: Final = 10  # listening for peers at addr
READY: Final = 11  # peers connected, ranks started
REPORT: Final = 12  # the end of a process's part of a round (to the other processes)
BLOCKED: Final = 13  # the blocked ranks, for the deadlock report
RESULTS: Final = 14  # this process's ranks' results
ERROR: Final = 15  # this process failed
LINES: Final = 16  # timeout report lines
BYE: Final = 17  # FINAL arrived: the coordinator may close the control link now
DONE: Final = 18  # the rounds are over: how the run ended
TICK: Final = 19  # progress, about ten times a wall second (process 0, during the rounds)

OP_NAMES: Final = {
    START: "START", GO: "GO", DESCRIBE: "DESCRIBE", FINISH: "FINISH", STOP: "STOP",
    TIMEOUT: "TIMEOUT", FINAL: "FINAL", HELLO: "HELLO", READY: "READY", REPORT: "REPORT",
    BLOCKED: "BLOCKED", RESULTS: "RESULTS", ERROR: "ERROR", LINES: "LINES", BYE: "BYE",
    DONE: "DONE", TICK: "TICK",
}

ExcData = dict[str, Any]
"""An exception as plain data (``remote.encode_exception``; ``remote.decode_exception`` reads it)."""

BlockedEntry = tuple[int, str, list[int], Any]
"""A blocked rank or helper: (world rank, line, ranks it waits on, collective info or None),
as ``engine.deadlock_error`` reads it."""

HANDSHAKES_LISTED: Final = 16
"""The handshake lines a ``Blocked`` message lists at most: as many as the deadlock report shows
(``engine.diagnostics.deadlock_error``); the message counts the rest."""

M = TypeVar("M", bound="Message")


class Message:
    """A control message: its opcode, and its payload as a plain list (``encode``/``decode``)."""

    __slots__ = ()
    op: ClassVar[int]
    carries_values: ClassVar[bool] = False
    """True when the payload holds the run's values, packed with the run's serializer."""

    @property
    def name(self) -> str:
        """The opcode's name (``"DONE"``), for messages about the protocol."""
        return OP_NAMES[self.op]

    def encode(self) -> list[Any]:
        """The payload as a plain list for ``wire.pack``."""
        return []

    @classmethod
    def decode(cls: type[M], items: list[Any]) -> M:
        """Build the message from what ``encode`` returned (after ``wire.unpack``)."""
        _expect(items, 0)
        return cls()


def _expect(items: list[Any], n: int) -> None:
    if not isinstance(items, list) or len(items) != n:
        raise ValueError(f"expected a list of {n} fields, got {_shape(items)}")


def _shape(value: object) -> str:
    return f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__


def _ints(values: object) -> list[int]:
    if not isinstance(values, list):
        raise ValueError(f"expected a list of ints, got {_shape(values)}")
    return [int(v) for v in values]


def _lists(values: object) -> list[list[Any]]:
    if not isinstance(values, list) or not all(isinstance(v, list) for v in values):
        raise ValueError(f"expected a list of lists, got {_shape(values)}")
    return values


def _time(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _exc(value: object) -> ExcData:
    if not isinstance(value, dict):
        raise ValueError(f"expected an encoded exception, got {type(value).__name__}")
    return value


# ---- the parts of messages ----


class Failure(NamedTuple):
    """A rank's failure: its world rank and its exception (``ExcData``)."""

    rank: int
    exc: ExcData

    def encode(self) -> list[Any]:
        return [self.rank, self.exc]

    @classmethod
    def decode(cls, items: list[Any]) -> Failure:
        _expect(items, 2)
        return cls(int(items[0]), _exc(items[1]))


class TraceParts(NamedTuple):
    """One process's trace (or every process's, joined): spans, messages, receipts of messages
    sent from other processes, and link utilisation (recorded by the first process alone)."""

    spans: list[list[Any]]  # [rank, name, start, end, args]
    messages: list[list[Any]]  # [id, src, dst, tag, nbytes, sent, recv, comm]
    receipts: list[list[Any]]  # [src, id, time received]
    counters: list[list[Any]]  # [link, time, utilisation]: a platform's links (engine.flows)

    def encode(self) -> list[Any]:
        return [self.spans, self.messages, self.receipts, self.counters]

    @classmethod
    def decode(cls, items: list[Any]) -> TraceParts:
        _expect(items, 4)
        return cls(_lists(items[0]), _lists(items[1]), _lists(items[2]), _lists(items[3]))


# ---- coordinator -> hosting process ----


@dataclass(frozen=True, slots=True)
class Start(Message):
    """Connect to your peers: ``table[p]`` is the address process ``p`` listens at."""

    op: ClassVar[int] = START
    table: list[tuple[str, int]]

    def encode(self) -> list[Any]:
        return [[[host, port] for host, port in self.table]]

    @classmethod
    def decode(cls, items: list[Any]) -> Start:
        _expect(items, 1)
        return cls([(str(host), int(port)) for host, port in _lists(items[0])])


@dataclass(frozen=True, slots=True)
class Go(Message):
    """Every process is connected: start the rounds (``hosting.rounds``)."""

    op: ClassVar[int] = GO


@dataclass(frozen=True, slots=True)
class Describe(Message):
    """The run is deadlocked: describe your blocked ranks (answer ``Blocked``)."""

    op: ClassVar[int] = DESCRIBE


@dataclass(frozen=True, slots=True)
class Finish(Message):
    """Every rank finished: send your ranks' results (answer ``Results``)."""

    op: ClassVar[int] = FINISH


@dataclass(frozen=True, slots=True)
class Stop(Message):
    """The run is over: close everything and exit. ``exc``: why, for node processes to raise."""

    op: ClassVar[int] = STOP
    exc: ExcData | None = None

    def encode(self) -> list[Any]:
        return [self.exc]

    @classmethod
    def decode(cls, items: list[Any]) -> Stop:
        _expect(items, 1)
        return cls(None if items[0] is None else _exc(items[0]))


@dataclass(frozen=True, slots=True)
class Timeout(Message):
    """The run timed out: say what your ranks were doing (answer ``Lines``)."""

    op: ClassVar[int] = TIMEOUT


# ---- hosting process -> coordinator ----


@dataclass(frozen=True, slots=True)
class Hello(Message):
    """The first message of a hosting process: its pid, where it listens for peers, and its
    configuration's digest (nodes of a multi-node run must agree)."""

    op: ClassVar[int] = HELLO
    pid: int
    addr: tuple[str, int]
    digest: str

    def encode(self) -> list[Any]:
        return [self.pid, list(self.addr), self.digest]

    @classmethod
    def decode(cls, items: list[Any]) -> Hello:
        _expect(items, 3)
        pid, addr, digest = items
        host, port = addr
        return cls(int(pid), (str(host), int(port)), str(digest))


@dataclass(frozen=True, slots=True)
class Ready(Message):
    """Peers connected, ranks started."""

    op: ClassVar[int] = READY


@dataclass(frozen=True, slots=True)
class Report(Message):
    """The end of a process's part of a round, at virtual time ``time``.

    ``sent[q]``: envelopes sent to process ``q`` in this round; ``earliest``:
    the earliest time among them (None: none); ``unfinished``: ranks not
    finished here; ``next``: the next local event's time (None: none, or a
    failure); ``failure``: a rank that raised; ``firsts``: first signatures
    of collective calls a member here entered first; ``held``: rendezvous
    transfers wait for their instant to close; ``open``: rendezvous and
    synchronous sends from here to other processes not finished yet (their
    handshakes reach the other side at once, so no window while there are any);
    ``faults``: crashes, revocations and ULFM contributions here that the
    other processes must apply (``engine.failures.Failures.outbox``), and the
    flows booked here (``engine.records``: each a compact list on the wire).
    """

    op: ClassVar[int] = REPORT
    time: float
    sent: list[int]
    earliest: float | None
    unfinished: int
    next: float | None
    failure: Failure | None = None
    firsts: list[SignatureRecord] = field(default_factory=list)
    held: bool = False
    open: int = 0
    faults: list[_records.Record] = field(default_factory=list)

    def encode(self) -> list[Any]:
        return [self.time, self.sent, self.earliest, self.unfinished, self.next,
                None if self.failure is None else self.failure.encode(),
                [list(record) for record in self.firsts], self.held, self.open,
                [record.to_wire() for record in self.faults]]

    @classmethod
    def decode(cls, items: list[Any]) -> Report:
        _expect(items, 10)
        time, sent, earliest, unfinished, next_time, failure, firsts, held, open_, faults = items
        return cls(float(time), _ints(sent), _time(earliest), int(unfinished), _time(next_time),
                   None if failure is None else Failure.decode(failure),
                   [SignatureRecord.of(record) for record in _lists(firsts)],
                   bool(held), int(open_), [_records.from_wire(record) for record in _lists(faults)])


def _entry(item: object) -> BlockedEntry:
    if not isinstance(item, list):
        raise ValueError(f"expected a blocked rank's entry, got {type(item).__name__}")
    _expect(item, 4)
    rank, line, peers, info = item
    return int(rank), str(line), _ints(peers), None if info is None else tuple(info)


@dataclass(frozen=True, slots=True)
class Blocked(Message):
    """The blocked ranks (``tasks``) and helpers of a deadlocked process, at ``time``.

    ``handshakes``: where this process's handshakes under way stand, as it sees
    them (``engine.rendezvous``), a line each, the first ``HANDSHAKES_LISTED``
    by sender and message; ``handshake_count``: how many there are in all.
    """

    op: ClassVar[int] = BLOCKED
    time: float
    tasks: list[BlockedEntry]
    helpers: list[BlockedEntry]
    handshakes: list[str] = field(default_factory=list)
    handshake_count: int = 0

    def encode(self) -> list[Any]:
        return [self.time, [list(e) for e in self.tasks], [list(e) for e in self.helpers],
                self.handshakes, self.handshake_count]

    @classmethod
    def decode(cls, items: list[Any]) -> Blocked:
        _expect(items, 5)
        time, tasks, helpers, handshakes, count = items
        if not isinstance(handshakes, list):
            raise ValueError(f"expected a list of lines, got {_shape(handshakes)}")
        return cls(float(time), [_entry(e) for e in _lists(tasks)],
                   [_entry(e) for e in _lists(helpers)], [str(line) for line in handshakes],
                   int(count))


@dataclass(frozen=True, slots=True)
class Results(Message):
    """The results of the ranks one process hosts (or of every rank, in ``FinalResult``), by rank.

    ``stats`` holds four columns: messages sent, bytes sent, messages
    received, bytes received. ``unsendable``: a rank whose return value could
    not be sent back (the other fields are then empty). ``crashed``: ``[rank,
    time]`` of each rank the fault plan crashed; ``calls``: ``[rank, kind,
    count]``, the calls counted for a plan with ``count_calls``.
    """

    op: ClassVar[int] = RESULTS
    carries_values: ClassVar[bool] = True
    values: list[Any]
    times: list[float]
    stats: list[list[int]]
    leaks: list[str]
    trace: TraceParts | None = None
    unsendable: Failure | None = None
    crashed: list[list[Any]] = field(default_factory=list)
    calls: list[list[Any]] = field(default_factory=list)

    def encode(self) -> list[Any]:
        return [self.values, self.times, self.stats, self.leaks,
                None if self.trace is None else self.trace.encode(),
                None if self.unsendable is None else self.unsendable.encode(),
                self.crashed, self.calls]

    @classmethod
    def decode(cls, items: list[Any]) -> Results:
        _expect(items, 8)
        values, times, stats, leaks, trace, unsendable, crashed, calls = items
        if not isinstance(values, list) or not isinstance(leaks, list):
            raise ValueError("values and leaks must be lists")
        return cls(values, [float(t) for t in _ints_or_floats(times)],
                   [_ints(column) for column in _lists(stats)], [str(line) for line in leaks],
                   None if trace is None else TraceParts.decode(trace),
                   None if unsendable is None else Failure.decode(unsendable),
                   _lists(crashed), _lists(calls))


def _ints_or_floats(values: object) -> list[Any]:
    if not isinstance(values, list):
        raise ValueError(f"expected a list of numbers, got {_shape(values)}")
    return values


@dataclass(frozen=True, slots=True)
class Error(Message):
    """This process failed: ``exc`` is why; ``transport``: a link broke (a peer may have died)."""

    op: ClassVar[int] = ERROR
    exc: ExcData
    transport: bool = False

    def encode(self) -> list[Any]:
        return [self.exc, self.transport]

    @classmethod
    def decode(cls, items: list[Any]) -> Error:
        _expect(items, 2)
        return cls(_exc(items[0]), bool(items[1]))


@dataclass(frozen=True, slots=True)
class Lines(Message):
    """The timeout report's lines about this process's ranks, at ``time``."""

    op: ClassVar[int] = LINES
    time: float
    lines: list[str]

    def encode(self) -> list[Any]:
        return [self.time, self.lines]

    @classmethod
    def decode(cls, items: list[Any]) -> Lines:
        _expect(items, 2)
        if not isinstance(items[1], list):
            raise ValueError(f"expected a list of lines, got {_shape(items[1])}")
        return cls(float(items[0]), [str(line) for line in items[1]])


@dataclass(frozen=True, slots=True)
class Bye(Message):
    """FINAL arrived: the coordinator may close the control link now."""

    op: ClassVar[int] = BYE


@dataclass(frozen=True, slots=True)
class FinalResult(Message):
    """The whole run's result (every rank's, in rank order), for node processes to return.

    ``procs``: how many processes hosted the ranks (the trace names them);
    ``rounds``: the synchronisation rounds the coordinator ran, and the windows among them.
    """

    op: ClassVar[int] = FINAL
    carries_values: ClassVar[bool] = True
    results: Results
    procs: int
    rounds: tuple[int, int] = (0, 0)

    def encode(self) -> list[Any]:
        return [self.results.encode(), self.procs, list(self.rounds)]

    @classmethod
    def decode(cls, items: list[Any]) -> FinalResult:
        _expect(items, 3)
        rounds = _ints(items[2])
        if len(rounds) != 2:
            raise ValueError(f"expected [rounds, windows], got {rounds!r}")
        return cls(Results.decode(items[0]), int(items[1]), (rounds[0], rounds[1]))


@dataclass(frozen=True, slots=True)
class Done(Message):
    """The rounds are over, at virtual time ``time``, after ``rounds`` rounds (``windows`` of
    them windows); ``unfinished[p]``: ranks of process ``p`` not finished.

    Every process sends the same verdict (``hosting.rounds.Outcome``): a deadlock,
    or the first failure (world ``rank``, hosted by process ``proc``, the
    exception as plain data), or neither: every rank finished. ``crashed``:
    ``[rank, time]`` of each rank the fault plan crashed.
    """

    op: ClassVar[int] = DONE
    time: float
    rounds: int
    windows: int
    unfinished: list[int]
    deadlock: bool = False
    rank: int | None = None
    proc: int = 0
    exc: ExcData | None = None
    crashed: list[list[Any]] = field(default_factory=list)

    def encode(self) -> list[Any]:
        return [self.time, self.rounds, self.windows, self.unfinished, self.deadlock, self.rank,
                self.proc, self.exc, self.crashed]

    @classmethod
    def decode(cls, items: list[Any]) -> Done:
        _expect(items, 9)
        time, rounds, windows, unfinished, deadlock, rank, proc, exc, crashed = items
        return cls(float(time), int(rounds), int(windows), _ints(unfinished), bool(deadlock),
                   None if rank is None else int(rank), int(proc),
                   None if exc is None else _exc(exc), _lists(crashed))


@dataclass(frozen=True, slots=True)
class Tick(Message):
    """Progress during the rounds: ``finished`` ranks, virtual time ``time``."""

    op: ClassVar[int] = TICK
    finished: int
    time: float

    def encode(self) -> list[Any]:
        return [self.finished, self.time]

    @classmethod
    def decode(cls, items: list[Any]) -> Tick:
        _expect(items, 2)
        return cls(int(items[0]), float(items[1]))


MESSAGES: Final[dict[int, type[Message]]] = {
    cls.op: cls for cls in (Start, Go, Describe, Finish, Stop, Timeout, FinalResult, Hello, Ready,
                            Report, Blocked, Results, Error, Lines, Bye, Done, Tick)
}


# ---- on the control link ----


def envelope(message: Message, proc: int,
             dumps: Callable[[object], bytes] | None = None) -> Envelope:
    """The envelope that carries ``message`` from or to process ``proc``.

    ``dumps`` (the run's serializer) packs what msgpack cannot carry, in
    messages that carry the run's values only.
    """
    packed = wire.pack(message.encode(), copy=False,
                       dumps=dumps if message.carries_values else None, arrays=_arrays.STAGED)
    time = float(getattr(message, "time", 0.0))
    return Envelope(EAGER, 0, proc, -1, message.op, 0, 0, time, packed.header, packed.buffers)


def read(env: Envelope, loads: Callable[[bytes], object] | None = None) -> Message:
    """The message ``env`` carries.

    Raises:
        TransportError: an unknown opcode, or a payload that is not that message's.
    """
    cls = MESSAGES.get(env.tag)
    if cls is None:
        raise TransportError(None, "control", f"unknown control message {env.tag!r} from "
                             f"process {env.src}", "every process must run the same simcluster "
                             "version")
    items = wire.unpack(env.header, env.buffers, loads=loads if cls.carries_values else None,
                        arrays=_arrays.STAGED)
    try:
        if not isinstance(items, list):
            raise ValueError(f"expected a list, got {type(items).__name__}")
        return cls.decode(items)
    except (TypeError, ValueError, IndexError) as exc:
        raise TransportError(None, "control", f"malformed {OP_NAMES[env.tag]} message from "
                             f"process {env.src} ({exc})", "every process must run the same "
                             "simcluster version") from None
