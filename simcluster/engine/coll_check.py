"""Collective verification: every member of a collective call must make the same call.

Each communicator owns a ``CallCheck``. A member entering its n-th collective
call compares the call's ``Signature`` (the call with its root and op, the
algorithm, the payload's shape and dtype, a user op's definition) with that of
the first member that entered call n; a difference raises
``CollectiveMismatchError`` at the call, in the member that differs.

Two variants, chosen by the engine (``call_check``):

* ``CallCheck``: every member lives in this process.
* ``HostedCallCheck``: the members are spread over hosting processes. The
  first signature seen here also goes, as a ``SignatureRecord``, into the
  process's next report; the processes' reports are compared at the round
  (``merge_firsts``, run alike by every process), and each call's first
  record reaches the processes that had not seen it (``take_first``), so
  their members are compared at the call too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import CollectiveMismatchError
from . import frames as _frames

__all__ = ["CallCheck", "HostedCallCheck", "Signature", "SignatureRecord", "calls", "merge_firsts",
           "mismatch"]

calls: dict[Any, tuple[str, str]] = {}
"""The collective call each member is entering as a facade's user wrote it, for the words of a
mismatch: the member's ``Comm`` -> (call, communicator name), e.g. ``("Bcast(root=0)",
"MPI_COMM_WORLD")``. The MPI facade sets an entry around each of its calls (``MPI._coll``,
``MPI._objects``); without one a report names simcluster's own call (``broadcast(src=0)``).
Empty in runs without the facade, so the check pays one truth test for it, on a call's first member."""

Label = tuple[str, str, str]
"""(call, communicator name, the user's ``file:line``): a first member's call as its user wrote it."""

Signature = tuple[str, str, "str | None", str]
"""What every member of a collective call must agree on: (call, algorithm, payload, op).
``payload`` None: nothing to compare (a broadcast's receivers pass a placeholder)."""


class SignatureRecord(NamedTuple):
    """A first signature as hosting processes exchange it (plain values: ``transports.wire``
    packs it as a list; ``of`` rebuilds it)."""

    ctx: int
    seq: int  # the call's number on its communicator
    call: str
    algorithm: str
    payload: str | None
    op: str
    rank: int  # the member that entered first, in the communicator
    world_rank: int
    forced: bool  # its algorithm was asked for
    payload_rank: int  # the member whose payload ``payload`` is
    comm_name: str
    procs: list[int] | None  # the processes hosting members (None: every process)
    time: float  # virtual time of the call
    label: Sequence[str] | None = None  # the call as a facade's user wrote it (``Label``), for reports

    @property
    def signature(self) -> Signature:
        return (self.call, self.algorithm, self.payload, self.op)

    @classmethod
    def of(cls, items: list[Any] | tuple[Any, ...]) -> SignatureRecord:
        """The record from its wire form (a list)."""
        return cls(*items)


class Entered:
    """The first member's side of one call, kept until every member here has entered it."""

    __slots__ = ("sig", "first_rank", "count", "forced", "payload_rank", "label")

    def __init__(self, sig: Signature, first_rank: int, count: int, forced: bool,
                 payload_rank: int, label: Label | None = None) -> None:
        self.sig = sig
        self.first_rank = first_rank
        self.count = count  # members hosted here that have entered the call
        self.forced = forced
        self.payload_rank = payload_rank
        self.label = label  # the first member's call as its user wrote it (a facade's), for reports


class CallCheck:
    """The collective verification of one communicator whose members all live here."""

    __slots__ = ("here", "entered")

    def __init__(self, here: int) -> None:
        self.here = here  # members hosted in this process
        self.entered: dict[int, Entered] = {}  # call number -> its first member's side

    def enter(self, comm: Any, seq: int, sig: Signature, forced: bool) -> None:
        """Member ``comm`` enters call ``seq`` with ``sig``; raise if it differs from the first.

        Raises:
            CollectiveMismatchError: ``sig`` differs from the first member's signature.
        """
        first = self.entered.get(seq)
        if first is not None and first.sig == sig:  # the usual case: one lookup, one comparison
            first.count += 1
            if first.count == self.here:
                del self.entered[seq]
            return
        if first is None:  # the first member (hosted here) to enter call number seq
            label = _label(comm) if calls else None
            if self.here > 1:
                self.entered[seq] = Entered(sig, comm.rank, 1, forced, comm.rank, label)
            self._first(comm, seq, sig, forced, label)
            return
        error = mismatch(comm.rank, seq, comm.name, sig, forced, first.sig, first.first_rank,
                         first.forced, first.payload_rank, calls.get(comm), first.label)
        if error is not None:
            raise error
        if first.sig[2] is None and sig[2] is not None:
            # a broadcast placeholder: the first array passed is what later members must match
            first.sig, first.payload_rank = sig, comm.rank
            self._first(comm, seq, sig, first.forced, _label(comm) if calls else None)
        first.count += 1
        if first.count == self.here:
            del self.entered[seq]

    def _first(self, comm: Any, seq: int, sig: Signature, forced: bool, label: Label | None) -> None:
        """A first signature was seen here (only other processes need to hear of it)."""


class HostedCallCheck(CallCheck):
    """The collective verification of a communicator whose members several processes host."""

    __slots__ = ("ctx", "procs", "firsts")

    def __init__(self, ctx: int, here: int, procs: list[int] | None,
                 firsts: list[SignatureRecord]) -> None:
        super().__init__(here)
        self.ctx = ctx
        self.procs = procs  # the processes hosting members (None: all)
        self.firsts = firsts  # the engine's: first signatures seen here, for the next report

    def _first(self, comm: Any, seq: int, sig: Signature, forced: bool, label: Label | None) -> None:
        self.firsts.append(SignatureRecord(self.ctx, seq, *sig, comm.rank, comm.world_rank, forced,
                                           comm.rank, comm.name, self.procs, comm.now, label))

    def take_first(self, record: SignatureRecord, reported: bool = False) -> None:
        """Note a first signature a member in another process passed, for the members here.

        The processes compared it with every signature this process reported
        for the same call, so it only fills in what this process lacks: the
        entry itself (no member here has entered that call yet), or, where this
        process ``reported`` the call with placeholders only, the payload to
        compare with.
        """
        first = self.entered.get(record.seq)
        if first is not None:
            if first.sig[2] is None and record.payload is not None:
                first.sig, first.payload_rank = record.signature, record.payload_rank
        elif not reported:
            self.entered[record.seq] = Entered(record.signature, record.rank, 0, record.forced,
                                               record.payload_rank, _as_label(record.label))


def merge_firsts(records: list[SignatureRecord]
                 ) -> tuple[SignatureRecord, list[tuple[int, CollectiveMismatchError]]]:
    """Compare the first signatures several processes reported for one call.

    ``records`` are for one (context, call number), in the order the members
    count as having entered (the lowest process first). Returns the merged
    first record, and ``(world rank, CollectiveMismatchError)`` for each record
    that differs from it.
    """
    merged = records[0]
    errors: list[tuple[int, CollectiveMismatchError]] = []
    for record in records[1:]:
        label = _as_label(record.label)
        error = mismatch(record.rank, record.seq, record.comm_name, record.signature, record.forced,
                         merged.signature, merged.rank, merged.forced, merged.payload_rank,
                         None if label is None else label[:2], _as_label(merged.label))
        if error is not None:
            errors.append((record.world_rank, error))
        elif merged.payload is None and record.payload is not None:
            merged = merged._replace(payload=record.payload, payload_rank=record.payload_rank)
    return merged, errors


def mismatch(rank: int, seq: int, name: str, mine: Signature, mine_forced: bool, first: Signature,
             first_rank: int, first_forced: bool, payload_rank: int,
             mine_named: tuple[str, str] | None = None, first_label: Label | None = None
             ) -> CollectiveMismatchError | None:
    """Return the error for member ``rank`` whose signature ``mine`` differs from ``first``, or None.

    None when they agree: equal, or different only where one member passed a
    broadcast placeholder (payload None). ``mine_named`` and ``first_label``
    are the calls as a facade's user wrote them (``calls``), where known: the
    report then names those (``Bcast(root=0)``, not ``broadcast(src=0)``) and
    the first member's line.
    """
    call, algorithm, payload, op = mine
    first_call, first_algorithm, first_payload, first_op = first
    shown = call if mine_named is None else mine_named[0]  # the call as this rank's user wrote it
    if call != first_call:
        first_shown = first_call
        if first_label is not None:
            where = first_label[2]
            first_shown = first_label[0] if where == "?" else f"{first_label[0]} at {where}"
        if mine_named is not None and mine_named[1]:
            name = mine_named[1]
        if call.partition("(")[0] != first_call.partition("(")[0]:
            fix = "every rank must call collectives in the same order"
        else:
            differ = _differ(call, first_call)
            if mine_named is not None and first_label is not None:  # in the words the user wrote
                differ = _differ(mine_named[0], first_label[0]) or differ
            fix = f"every rank must pass the same {' and '.join(differ) or 'arguments'}"
        return CollectiveMismatchError(
            rank, shown, f"this is collective #{seq} on comm {name!r}, but rank {first_rank} called "
            f"{first_shown}", fix)
    call = shown
    if op != first_op:
        return CollectiveMismatchError(
            rank, call, f"rank {first_rank} passed {_op_text(first_op)} but this rank passed "
            f"{_op_text(op)}", "every rank must pass an op made from the same function")
    if payload != first_payload and payload is not None and first_payload is not None:
        return CollectiveMismatchError(
            rank, call, f"rank {payload_rank} passed {first_payload or 'an object'} but this rank "
            f"passed {payload or 'an object'}", "every rank must pass arrays of one shape and dtype")
    if algorithm != first_algorithm:
        fix = "pass the same algorithm= on every rank" if mine_forced or first_forced else \
            "pass the same kind of payload (array or object) on every rank, or force algorithm="
        return CollectiveMismatchError(
            rank, call, f"rank {first_rank} runs collective #{seq} with algorithm {first_algorithm!r} "
            f"but this rank chose {algorithm!r}", fix)
    return None


def _label(comm: Any) -> Label | None:
    """Member ``comm``'s call as its facade's user wrote it, with their line; None outside a facade."""
    named = calls.get(comm)
    return None if named is None else (named[0], named[1], _frames.user_line())


def _as_label(label: Sequence[str] | None) -> Label | None:
    """A label from its wire form (a list), or None."""
    return None if label is None else (label[0], label[1], label[2])


def _differ(call: str, other: str) -> list[str]:
    """The arguments two calls of one collective pass differently: ``["root"]``."""
    mine_args, first_args = _call_args(call), _call_args(other)
    return [k for k in (*mine_args, *(k for k in first_args if k not in mine_args))
            if mine_args.get(k) != first_args.get(k)]


def _call_args(call: str) -> dict[str, str]:
    """``{"src": "0"}`` for ``broadcast(src=0)``."""
    inner = call.partition("(")[2].rpartition(")")[0]
    return dict(part.partition("=")[::2] for part in inner.split(", ") if part)


def _op_text(op: str) -> str:
    return f"op {op}" if op else "a built-in op"
