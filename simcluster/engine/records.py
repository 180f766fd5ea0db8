"""What one hosting process tells the others at the end of a round: typed records.

Across hosting processes (shm, tcp, mpi) each process acts on what
happened in the others at the same virtual time a single process would
(``engine.failures``, Rule 2 and 3; ``hosting.rounds``): a crash, a
revocation, a member's contribution to an ``agree`` or ``shrink``, and, on
a platform whose links every process shares, a message's flow
(``hosting.hosted_engine``). Each is a record with the time ``due`` by which
the others must have it. They travel in ``Report.faults`` (``hosting.control``).

Rule 1: the code reads the typed record, by its fields' names.
Rule 2: on the wire a record is the compact list ``to_wire()`` makes, its
kind first, packed by the control link's codec (``transports.wire``, msgpack);
``from_wire`` builds it back and refuses a list of the wrong shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeAlias

__all__ = ["CrashRecord", "FlowRecord", "MeetRecord", "Record", "Revocation", "RevokeRecord", "from_wire"]


class Revocation(NamedTuple):
    """Who revoked a communicator (a world rank) and when, as ``Failures.revoked_for`` tells it
    (``RevokedError`` names both)."""

    by: int
    at: float


def _fields(items: list[Any], kind: str, count: int) -> list[Any]:
    """``items`` without its kind, checked to hold ``count`` fields."""
    if not isinstance(items, list) or len(items) != count + 1 or items[0] != kind:
        raise ValueError(f"expected a {kind!r} record of {count} fields, got {items!r}")
    return items[1:]


@dataclass(frozen=True, slots=True)
class CrashRecord:
    """World rank ``rank`` crashed at ``at``; the survivors learn of it at ``due`` (one hop later)."""

    KIND: ClassVar[str] = "crash"
    due: float
    rank: int
    at: float

    def to_wire(self) -> list[Any]:
        return [self.KIND, self.due, self.rank, self.at]

    @classmethod
    def from_wire(cls, items: list[Any]) -> CrashRecord:
        due, rank, at = _fields(items, cls.KIND, 3)
        return cls(float(due), int(rank), float(at))


@dataclass(frozen=True, slots=True)
class RevokeRecord:
    """World rank ``by`` revoked the communicator of user context ``ctx`` at ``at``; every member
    learns of it at ``due``."""

    KIND: ClassVar[str] = "revoke"
    due: float
    ctx: int
    by: int
    at: float

    def to_wire(self) -> list[Any]:
        return [self.KIND, self.due, self.ctx, self.by, self.at]

    @classmethod
    def from_wire(cls, items: list[Any]) -> RevokeRecord:
        due, ctx, by, at = _fields(items, cls.KIND, 4)
        return cls(float(due), int(ctx), int(by), float(at))


@dataclass(frozen=True, slots=True)
class MeetRecord:
    """Member ``rank`` of the communicator of user context ``ctx`` joined its ``n``-th ``what``
    (``agree``, with its flag ``value``, or ``shrink``, None) at ``at``; the others have it at ``due``."""

    KIND: ClassVar[str] = "meet"
    due: float
    ctx: int
    what: str
    n: int
    rank: int
    value: int | None
    at: float

    def to_wire(self) -> list[Any]:
        return [self.KIND, self.due, self.ctx, self.what, self.n, self.rank, self.value, self.at]

    @classmethod
    def from_wire(cls, items: list[Any]) -> MeetRecord:
        due, ctx, what, n, rank, value, at = _fields(items, cls.KIND, 7)
        return cls(float(due), int(ctx), str(what), int(n), int(rank),
                   None if value is None else int(value), float(at))


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """A message's flow, booked at ``instant`` by the process hosting ``src``: every process starts
    it at its next run (``HostedDelivery.start_flows``). ``due``: when it joins its links;
    ``phase``: 1 for rendezvous data, else 0; ``seq``: its place in its process's bookings;
    ``time``: its send side's wire time."""

    KIND: ClassVar[str] = "flow"
    due: float
    instant: float
    phase: int
    seq: int
    kind: int
    src: int
    dst: int
    msg_id: int
    nbytes: int
    time: float

    def to_wire(self) -> list[Any]:
        return [self.KIND, self.due, self.instant, self.phase, self.seq, self.kind, self.src,
                self.dst, self.msg_id, self.nbytes, self.time]

    @classmethod
    def from_wire(cls, items: list[Any]) -> FlowRecord:
        due, instant, phase, seq, kind, src, dst, msg_id, nbytes, time = _fields(items, cls.KIND, 10)
        return cls(float(due), float(instant), int(phase), int(seq), int(kind), int(src), int(dst),
                   int(msg_id), int(nbytes), float(time))

    def order(self) -> tuple[float, int, int, int]:
        """The order every process starts a round's flows in: by instant, eager messages and requests
        to send before rendezvous data, by source, then in the order their process booked them."""
        return self.instant, self.phase, self.src, self.seq


Record: TypeAlias = CrashRecord | RevokeRecord | MeetRecord | FlowRecord
"""Any record a process tells the others."""

_BY_KIND: dict[str, type[CrashRecord] | type[RevokeRecord] | type[MeetRecord] | type[FlowRecord]] = {
    cls.KIND: cls for cls in (CrashRecord, RevokeRecord, MeetRecord, FlowRecord)}


def from_wire(items: object) -> Record:
    """The record a wire list stands for, whatever its kind."""
    kind = items[0] if isinstance(items, list) and items else None
    cls = _BY_KIND.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"expected a record (crash, revoke, meet or flow), got {items!r}")
    assert isinstance(items, list)
    return cls.from_wire(items)
