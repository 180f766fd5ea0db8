"""Fault plans: crash, slow and cut ranks on purpose, deterministically, to test recovery code.

A plan is a list of faults, given to ``run(..., faults=...)`` (or ``--faults``
on the command line, in the text form ``parse`` reads):

* ``Crash(rank, at=t)``: world rank ``rank`` stops for good at virtual time ``t``;
* ``Crash(rank, call="all_reduce", nth=3)``: it stops when it makes its 3rd
  ``all_reduce`` (the call does not happen);
* ``RandomCrashes(rate)``: each rank crashes at a time drawn by the run's seed
  (exponential, ``rate`` crashes per rank per virtual second), at most ``limit``;
* ``Slow(rank, factor, start, end)``: between ``start`` and ``end`` the rank's
  ``sleep`` and compute charges, and the messages it sends or receives, take
  ``factor`` times as long (a straggler);
* ``Cut(ranks_a, ranks_b, start, end)``: messages between the two sets posted
  in the window wait until it ends (MPI's delivery is reliable: they are
  late, not lost);
* ``Delay(ranks_a, ranks_b, seconds)``: every message between the sets takes
  ``seconds`` longer;
* ``SlowLink(link, factor, start, end)``: on a platform whose links flows
  share, between ``start`` and ``end`` the links named ``link`` (a name as
  ``Platform.link_name`` gives it, or a pattern such as ``"leaf 0-spine *"``)
  carry ``factor`` times fewer bytes per second (a degraded cable).

The same plan and seed give the same run, byte for byte. What survivors of a
crash see (``ProcessFailedError``, revoke, shrink, agree) is in docs/faults.md.

Where each fault takes effect (one place each; a run times its messages
either by its latency model's ports or, on a platform whose links flows
share, by ``engine.flows``, and the plan shapes whichever it is):

==========  ==========================================  ============================================
fault       ports (``ShapedPorts``)                     flows (``ShapedPlatform``)
==========  ==========================================  ============================================
Crash       ``engine.failures`` (the rank stops; what reaches it is lost), on either
Slow        the message's charge, ``factor`` times as    each flow to or from the rank moves its
            long when it is posted in the window         bytes ``factor`` times slower while the
                                                         window is open (re-shared where it opens
                                                         and closes)
            and the rank's compute and ``sleep``: the kernel's ``slowdown`` hook, on either
Cut         a message posted in the window leaves at its end (its flow starts then), on either
Delay       ``seconds`` added on the receiver's side     ``seconds`` added to the route's latency
SlowLink    refused: ports have no links               the link's capacity over ``factor`` while
                                                        the window is open (its flows re-shared
                                                        where it opens and closes)
==========  ==========================================  ============================================
"""

from __future__ import annotations

import fnmatch
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Union

from .latency import Ports

if TYPE_CHECKING:
    from .trace import Trace

__all__ = ["CALL_KINDS", "FORMS", "Crash", "Cut", "Delay", "Fault", "FaultPlan", "RandomCrashes", "ShapedPlatform",
           "ShapedPorts", "Slow", "SlowLink", "parse"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


CALL_KINDS: Final = ("send", "recv", "probe", "barrier", "broadcast", "reduce", "all_reduce", "gather",
                     "all_gather", "scatter", "all_to_all", "reduce_scatter", "scan", "exscan",
                     "neighbor_allgather", "neighbor_alltoall")
"""The kinds of call a rank's calls are counted by (``Crash(call=...)``, ``RunResult.calls``)."""

_SPELLINGS: Final = {
    "send": ("send", "ssend", "bsend", "rsend", "sendrecv", "sendrecvreplace", "isendrecv",
             "isendrecvreplace"),
    "recv": ("recv", "mrecv"),
    "probe": ("probe", "mprobe"),
    "broadcast": ("bcast", "broadcastobjectlist"),
    "all_reduce": ("allreduce", "allreducecoalesced"),
    "gather": ("gatherv", "gatherobject"),
    "all_gather": ("allgather", "allgatherv", "allgatherintotensor", "allgathercoalesced",
                   "allgatherobject", "allgatherintotensorcoalesced"),
    "scatter": ("scatterv", "scatterobjectlist"),
    "all_to_all": ("alltoall", "alltoallv", "alltoallw", "alltoallsingle"),
    "reduce_scatter": ("reducescatter", "reducescatterblock", "reducescattertensor",
                       "reducescattertensorcoalesced"),
    "neighbor_allgather": ("neighborallgatherv",),
    "neighbor_alltoall": ("neighboralltoallv", "neighboralltoallw"),
}
_KINDS: Final = {**{kind.replace("_", ""): kind for kind in CALL_KINDS},
                 **{spelling: kind for kind, spellings in _SPELLINGS.items() for spelling in spellings}}


def call_kind(name: str) -> str | None:
    """The kind (``CALL_KINDS``) a call's name counts as, in any API's spelling; None for no call.

    Case and underscores do not matter, nor a nonblocking ``I`` prefix: mpi4py's
    ``Allreduce``, ``allreduce`` and ``Iallreduce`` and torch's ``all_reduce`` are
    ``"all_reduce"``; ``Bcast`` and ``broadcast`` are ``"broadcast"``; torch's
    ``all_gather_into_tensor`` is ``"all_gather"``.
    """
    key = name.lower().replace("_", "")
    kind = _KINDS.get(key)
    if kind is None and key.startswith("i"):
        kind = _KINDS.get(key[1:])
    return kind


@dataclass(frozen=True)
class Crash:
    """World rank ``rank`` crash-stops at virtual time ``at``, or at its ``nth`` call of kind ``call``.

    ``call`` is ``"send"`` (every send), ``"recv"`` (every receive), or a
    collective's name (``"all_reduce"``, ``"barrier"``, ...) in any API's
    spelling: mpi4py's ``Allreduce`` and torch's ``all_reduce`` count as
    ``all_reduce`` (``call_kind``); a name of no kind is refused.
    """

    rank: int
    at: float | None = None
    call: str | None = None
    nth: int = 1

    def __post_init__(self) -> None:
        _check_rank(self, self.rank)
        if (self.at is None) == (self.call is None):
            raise ValueError(f"{self!r}: give exactly one of at= (a virtual time) and call= (a "
                             "kind of call, with nth=)")
        if self.at is not None:
            _check_time(self, "at", self.at)
        if self.call is not None:
            kind = call_kind(self.call) if isinstance(self.call, str) else None
            if kind is None:
                raise ValueError(f"{self!r}: no call is of kind {self.call!r}; name one of "
                                 f"{', '.join(CALL_KINDS)} (mpi4py's and torch's names for them, "
                                 "such as Allreduce or all_gather_into_tensor, work too)")
            object.__setattr__(self, "call", kind)
        if isinstance(self.nth, bool) or not isinstance(self.nth, int) or self.nth < 1:
            raise ValueError(f"{self!r}: nth must be an int >= 1 (the 1st, 2nd, ... call)")

    def describe(self) -> str:
        where = f"{_time(self.at)}" if self.at is not None else f"{self.call}#{self.nth}"
        return f"crash:{self.rank}@{where}"


@dataclass(frozen=True)
class RandomCrashes:
    """Each rank crashes at a time drawn from the run's seed: exponential, ``rate`` per virtual second.

    At most ``limit`` ranks crash (the earliest draws); rank 0 is spared
    unless ``spare_root=False``, since many programs gather their answer there.
    """

    rate: float
    limit: int | None = None
    spare_root: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not 0 < self.rate < math.inf:
            raise ValueError(f"{self!r}: rate must be a positive number of crashes per rank per "
                             "virtual second")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 0):
            raise ValueError(f"{self!r}: limit must be an int >= 0, or None for no limit")

    def crashes(self, world_size: int, seed: int) -> list[Crash]:
        """The crashes this draws for a world of ``world_size`` under ``seed``."""
        rng = random.Random(f"faults:{seed}")
        draws = sorted((rng.expovariate(self.rate), rank) for rank in range(world_size))
        chosen = [(t, r) for t, r in draws if not (self.spare_root and r == 0)]
        if self.limit is not None:
            chosen = chosen[: self.limit]
        return [Crash(rank, at=t) for t, rank in chosen]

    def describe(self) -> str:
        limit = "" if self.limit is None else f":{self.limit}"
        return f"random:{self.rate:g}{limit}" + ("" if self.spare_root else ":all")


@dataclass(frozen=True)
class Slow:
    """Between ``start`` and ``end``, rank ``rank``'s compute and messages take ``factor`` times as long."""

    rank: int
    factor: float
    start: float = 0.0
    end: float = math.inf

    def __post_init__(self) -> None:
        _check_rank(self, self.rank)
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not 0 < self.factor < math.inf:
            raise ValueError(f"{self!r}: factor must be a positive number (4 for four times as slow)")
        _check_window(self, self.start, self.end)

    def scale(self, rank: int, t: float) -> float:
        """The factor for ``rank`` at virtual time ``t`` (1 outside the window or for another rank)."""
        return self.factor if rank == self.rank and self.start <= t < self.end else 1.0

    def describe(self) -> str:
        return f"slow:{self.rank}x{self.factor:g}@{_window(self.start, self.end)}"


class _Between:
    """A fault on the messages between two sets of ranks, ``a`` and ``b`` (either way)."""

    a: frozenset[int]
    b: frozenset[int]

    def _sides(self, a: Iterable[int], b: Iterable[int]) -> None:
        object.__setattr__(self, "a", _ranks(self, a))
        object.__setattr__(self, "b", _ranks(self, b))

    def between(self, src: int, dst: int) -> bool:
        return (src in self.a and dst in self.b) or (src in self.b and dst in self.a)


@dataclass(frozen=True)
class Cut(_Between):
    """Messages between ranks ``a`` and ranks ``b`` posted in ``[start, end)`` wait until ``end``."""

    a: frozenset[int]
    b: frozenset[int]
    start: float = 0.0
    end: float = math.inf

    def __init__(self, a: Iterable[int], b: Iterable[int], start: float = 0.0, end: float = math.inf) -> None:
        self._sides(a, b)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        _check_window(self, start, end)
        if math.isinf(end):
            raise ValueError(f"{self!r}: a cut must end (messages wait for it; one that never ends "
                             "would hang them); give end=")

    def describe(self) -> str:
        return f"cut:{_set(self.a)}|{_set(self.b)}@{_window(self.start, self.end)}"


@dataclass(frozen=True)
class Delay(_Between):
    """Every message between ranks ``a`` and ranks ``b`` takes ``seconds`` longer."""

    a: frozenset[int]
    b: frozenset[int]
    seconds: float

    def __init__(self, a: Iterable[int], b: Iterable[int], seconds: float) -> None:
        self._sides(a, b)
        object.__setattr__(self, "seconds", seconds)
        _check_time(self, "seconds", seconds)

    def describe(self) -> str:
        return f"delay:{_set(self.a)}|{_set(self.b)}+{_time(self.seconds)}"


@dataclass(frozen=True)
class SlowLink:
    """Between ``start`` and ``end``, the links named ``link`` carry ``factor`` times fewer bytes per second.

    ``link`` is a link's name as the platform gives it (``Platform.link_name``:
    ``"leaf 0-spine 1 up"``, ``"rank 3 (node 0) down"``) or a pattern of them
    in ``fnmatch``'s form (``"leaf 0-spine *"``: every cable between leaf 0
    and the spines, both ways); the run refuses a pattern that names no link
    of its platform. The platform's links must be shared by flows (a
    ``Platform`` with ``sharing=True``, the default): ports have no links.
    """

    link: str
    factor: float
    start: float = 0.0
    end: float = math.inf

    def __post_init__(self) -> None:
        if not isinstance(self.link, str) or not self.link.strip():
            raise ValueError(f"{self!r}: link must be a link's name or a pattern of names, such as "
                             "'leaf 0-spine 1 up' or 'leaf 0-spine *'")
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not 0 < self.factor < math.inf:
            raise ValueError(f"{self!r}: factor must be a positive number (4 for a quarter of the bandwidth)")
        _check_window(self, self.start, self.end)

    def links(self, names: Sequence[str]) -> list[int]:
        """The indices of the links among ``names`` (the platform's, in order) this fault names."""
        return [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, self.link)]

    def describe(self) -> str:
        return f"slowlink:{self.link} x{self.factor:g}@{_window(self.start, self.end)}"


Fault = Union[Crash, RandomCrashes, Slow, Cut, Delay, SlowLink]
_FAULTS: Final = (Crash, RandomCrashes, Slow, Cut, Delay, SlowLink)


@dataclass(frozen=True)
class FaultPlan:
    """A run's faults, checked against its world size; ``run(faults=...)`` makes one."""

    faults: tuple[Fault, ...]
    count_calls: bool = False
    """Count each rank's calls by kind, into ``RunResult.calls`` (``sc.testing.explore``'s crash points)."""

    @classmethod
    def of(cls, faults: FaultPlan | str | Sequence[Fault] | Fault | None) -> FaultPlan | None:
        """A plan from what ``run(faults=...)`` takes: a plan, its text, a fault or a list of them."""
        if faults is None or isinstance(faults, FaultPlan):
            return faults
        if isinstance(faults, str):
            return parse(faults)
        if isinstance(faults, _FAULTS):
            return cls((faults,))
        if isinstance(faults, (list, tuple)):
            items = tuple(faults)
            for item in items:
                if not isinstance(item, _FAULTS):
                    raise TypeError(f"faults: {item!r} is not a fault; use sc.faults.Crash, "
                                    "RandomCrashes, Slow, Cut, Delay or SlowLink")
            return cls(items)
        raise TypeError(f"faults={faults!r}: expected a list of sc.faults faults, or their text "
                        "such as 'crash:1@0.5ms'")

    def check(self, world_size: int) -> None:
        """Raise ValueError when a fault names a rank outside ``range(world_size)``."""
        for fault in self.faults:
            ranks: set[int] = set()
            if isinstance(fault, (Crash, Slow)):
                ranks = {fault.rank}
            elif isinstance(fault, (Cut, Delay)):
                ranks = set(fault.a | fault.b)
            bad = sorted(r for r in ranks if r >= world_size)
            if bad:
                raise ValueError(f"faults: {fault.describe()} names rank {bad[0]}, but the world has "
                                 f"{world_size} ranks (0 to {world_size - 1})")

    def crashes(self, world_size: int, seed: int) -> list[Crash]:
        """Every crash of the plan, random ones drawn by ``seed``; one per rank (the first given)."""
        found: list[Crash] = []
        for fault in self.faults:
            if isinstance(fault, Crash):
                found.append(fault)
            elif isinstance(fault, RandomCrashes):
                found.extend(fault.crashes(world_size, seed))
        seen: set[int] = set()
        unique = []
        for crash in found:
            if crash.rank not in seen:
                seen.add(crash.rank)
                unique.append(crash)
        return unique

    @property
    def shapes_messages(self) -> bool:
        """Whether the plan changes message or compute times (``Slow``, ``Cut``, ``Delay``, ``SlowLink``)."""
        return any(isinstance(f, (Slow, Cut, Delay, SlowLink)) for f in self.faults)

    def slowdown(self, rank: int, t: float) -> float:
        """The compute factor of ``rank`` at virtual time ``t`` (the product of its ``Slow`` windows)."""
        factor = 1.0
        for fault in self.faults:
            if isinstance(fault, Slow):
                factor *= fault.scale(rank, t)
        return factor

    def mark(self, trace: Trace, end: float) -> None:
        """Put the plan's slow windows and cuts that began before ``end`` in ``trace``, as spans."""
        for fault in self.faults:
            if isinstance(fault, Slow) and fault.start < end:
                trace.span(fault.rank, "slow", fault.start, min(fault.end, end), fault="slow",
                           factor=fault.factor)
            elif isinstance(fault, Cut) and fault.start < end:
                for rank in sorted(fault.a | fault.b):
                    trace.span(rank, "cut", fault.start, min(fault.end, end), fault="cut",
                               a=_set(fault.a), b=_set(fault.b))

    def describe(self) -> str:
        """The plan as ``parse`` reads it: part of a run's reproduction line."""
        return ";".join(f.describe() for f in self.faults)


# ---- the text form ----

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_TIME_RE: Final = re.compile(rf"(?P<num>{_NUMBER})\s*(?P<unit>s|ms|us|µs|ns)?")
_UNITS: Final = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
FORMS: Final = (
    "crash:RANK@TIME            crash-stop RANK at virtual TIME (1.5ms, 2us, 0.5)",
    "crash:RANK@CALL#N          crash-stop RANK at its N-th call of kind CALL (send, recv, all_reduce, ...)",
    "random:RATE[:LIMIT][:all]  each rank crashes at a seeded exponential time, RATE per second; at most "
    "LIMIT; rank 0 spared unless :all",
    "slow:RANKxFACTOR[@T1..T2]  RANK's compute and messages FACTOR times slower (in the window; T1.. for no end)",
    "cut:RANKS|RANKS@T1..T2     messages between the two sets posted in the window wait for its end",
    "delay:RANKS|RANKS+TIME     messages between the two sets take TIME longer",
    "slowlink:LINKxFACTOR[@T1..T2]  the platform's links named LINK (a pattern: 'leaf 0-spine *') "
    "carry FACTOR times fewer bytes per second",
)
"""The text forms ``parse`` reads, joined with ``;``. RANKS: ``0,2,4-7``."""


def parse(text: str) -> FaultPlan:
    """Read a fault plan from its text: faults separated by ``;`` (``FORMS`` lists each form).

    ``parse("crash:1@0.5ms;slow:2x4@0..1ms")``. The reproduction line of a run
    with faults gives its plan in this form.

    Raises:
        ValueError: the text names no fault this reads, saying which part and how to write it.
    """
    if not isinstance(text, str):
        raise TypeError(f"faults={text!r}: expected the plan's text, such as 'crash:1@0.5ms'")
    faults: list[Fault] = []
    for part in (p.strip() for p in text.split(";")):
        if part:
            faults.append(_parse_one(text, part))
    if not faults:
        raise ValueError(f"faults={text!r}: no fault given; write e.g. 'crash:1@0.5ms' (forms: "
                         + "; ".join(f.split()[0] for f in FORMS) + ")")
    return FaultPlan(tuple(faults))


def _parse_one(text: str, part: str) -> Fault:
    kind, _, rest = part.partition(":")
    try:
        if kind == "crash":
            rank, _, where = rest.partition("@")
            if "#" in where:
                call, _, nth = where.partition("#")
                return Crash(_int(rank), call=call.strip(), nth=_int(nth))
            return Crash(_int(rank), at=_seconds(where))
        if kind == "random":
            fields = rest.split(":")
            spare = not (fields and fields[-1] == "all")
            if not spare:
                fields = fields[:-1]
            limit = _int(fields[1]) if len(fields) > 1 else None
            return RandomCrashes(float(fields[0]), limit, spare)
        if kind == "slow":
            who, _, window = rest.partition("@")
            rank, _, factor = who.partition("x")
            start, end = _window_of(window) if window else (0.0, math.inf)
            return Slow(_int(rank), float(factor), start, end)
        if kind == "cut":
            sets, _, window = rest.partition("@")
            a, _, b = sets.partition("|")
            start, end = _window_of(window)
            return Cut(_rank_set(a), _rank_set(b), start, end)
        if kind == "delay":
            sets, _, extra = rest.partition("+")
            a, _, b = sets.partition("|")
            return Delay(_rank_set(a), _rank_set(b), _seconds(extra))
        if kind == "slowlink":
            what, _, window = rest.rpartition("@") if "@" in rest else (rest, "", "")
            link, _, factor = what.rpartition("x")
            start, end = _window_of(window) if window else (0.0, math.inf)
            return SlowLink(link.strip(), float(factor), start, end)
    except ValueError as exc:
        raise ValueError(f"faults={text!r}: cannot read {part!r} ({exc}); forms: "
                         + "; ".join(f.split()[0] for f in FORMS)) from None
    raise ValueError(f"faults={text!r}: {part!r} is no fault this knows; forms: "
                     + "; ".join(f.split()[0] for f in FORMS))


def _int(text: str) -> int:
    text = text.strip()
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _seconds(text: str) -> float:
    match = _TIME_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a time such as 1.5ms, 2us or 0.5 (seconds)")
    return float(match["num"]) * _UNITS[match["unit"] or ""]


def _window_of(text: str) -> tuple[float, float]:
    start, sep, end = text.partition("..")
    if not sep:
        raise ValueError(f"{text!r} is not a window T1..T2 such as 0..1ms (T1.. for no end)")
    return _seconds(start), (_seconds(end) if end.strip() else math.inf)


def _rank_set(text: str) -> frozenset[int]:
    ranks: set[int] = set()
    for item in text.split(","):
        lo, dash, hi = item.partition("-")
        if dash:
            ranks.update(range(_int(lo), _int(hi) + 1))
        else:
            ranks.add(_int(lo))
    return frozenset(ranks)


# ---- checks and descriptions ----

def _check_rank(fault: object, rank: object) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"{fault!r}: rank must be a world rank (an int >= 0)")


def _check_time(fault: object, name: str, t: object) -> None:
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf:
        raise ValueError(f"{fault!r}: {name} must be a virtual time in seconds, >= 0 and finite")


def _check_window(fault: object, start: object, end: object) -> None:
    _check_time(fault, "start", start)
    if isinstance(end, bool) or not isinstance(end, (int, float)) or not end > start:  # type: ignore[operator]
        raise ValueError(f"{fault!r}: end must be a virtual time after start")


def _ranks(fault: object, ranks: Iterable[int]) -> frozenset[int]:
    found = frozenset(ranks)
    for rank in found:
        _check_rank(fault, rank)
    if not found:
        raise ValueError(f"{type(fault).__name__}: each side needs at least one rank")
    return found


def _time(t: float) -> str:
    return f"{t:g}"


def _window(start: float, end: float) -> str:
    return f"{_time(start)}..{'' if math.isinf(end) else _time(end)}"


def _set(ranks: frozenset[int]) -> str:
    return ",".join(str(r) for r in sorted(ranks))


# ---- what slow ranks, cuts and delays do to messages ----

class ShapedPorts(Ports):
    """A latency model's ports, with a plan's ``Slow``, ``Cut`` and ``Delay`` faults applied.

    A message posted at ``t`` inside a cut between its ends leaves at the
    cut's end; one whose sender or receiver is slow at ``t`` takes the
    slowest factor times as long on its sender's side (the whole message,
    for models that charge no receive port); a delay between its ends adds
    its seconds on the receiver's side. Each side is charged where its rank
    lives, so hosting processes charge them as one process does.

    Over ports whose ``platform`` shares its links, the flows time every
    message instead: ``platform`` is then that platform shaped by the plan
    (``ShapedPlatform``), and these ports charge nothing.
    """

    zero = False

    def __init__(self, inner: Ports, plan: FaultPlan) -> None:
        self.inner = inner
        self.ordered = inner.ordered
        self.slow = [f for f in plan.faults if isinstance(f, Slow)]
        self.cuts = [f for f in plan.faults if isinstance(f, Cut)]
        self.delays = [f for f in plan.faults if isinstance(f, Delay)]
        # a platform whose links flows share times the messages instead (``engine.flows``): the
        # plan shapes the links the flows see, and these ports charge nothing
        shared = inner.platform
        if shared is None:
            for fault in plan.faults:
                if isinstance(fault, SlowLink):
                    raise ValueError(f"faults: {fault.describe()} slows links, and the run's latency model "
                                     "has no links flows share; run on a Platform with sharing=True "
                                     "(latency='dgx_h100:2', ...), or slow a rank (slow:RANKxFACTOR)")
        self.platform = None if shared is None else ShapedPlatform(shared, plan)

    def grow(self, world_size: int) -> None:
        self.inner.grow(world_size)

    def send_side(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        start = t
        for cut in self.cuts:
            if cut.start <= t < cut.end and cut.between(src, dst):
                start = max(start, cut.end)
        depart, wire = self.inner.send_side(src, dst, nbytes, start)
        factor = max([1.0, *(s.scale(src, t) for s in self.slow), *(s.scale(dst, t) for s in self.slow)])
        if factor != 1.0:
            depart = start + (depart - start) * factor
            wire = start + (wire - start) * factor
        return depart, wire

    def recv_side(self, src: int, dst: int, nbytes: int, wire: float) -> float:
        arrive = self.inner.recv_side(src, dst, nbytes, wire)
        for delay in self.delays:
            if delay.between(src, dst):
                arrive += delay.seconds
        return arrive

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        depart, wire = self.send_side(src, dst, nbytes, t)
        return depart, self.recv_side(src, dst, nbytes, wire)


class ShapedPlatform:
    """A platform whose links flows share, as a plan's ``Slow``, ``Cut`` and ``Delay`` faults leave it.

    What ``engine.flows`` reads of a platform, with the faults in: while a
    rank is slow (``slow_changes``) the flows it sends or receives keep their
    part of each link but move their bytes ``factor`` times slower (the flows
    under way are re-shared where its window opens and closes, their bytes
    left moving at the new rate); a message posted inside a cut between its
    ends starts its flow at the cut's end (``departure``); a delay between its
    ends adds its seconds to the route's latency (``path``); a slow link's
    capacity is divided by its factor while its window is open
    (``link_changes``), its flows re-shared where the window opens and closes.
    Every hosting process reads the same plan, so each shares its replica of
    the flows alike.

    Raises:
        ValueError: a ``SlowLink`` names no link of the platform (the error lists some names).
    """

    def __init__(self, platform: Any, plan: FaultPlan) -> None:
        self.inner = platform
        self.sharing_model = platform.sharing_model
        self.capacity: list[float] = platform.capacity
        self.route = platform.route
        self.flow_terms = platform.flow_terms
        self.link_name = platform.link_name
        self.slow = [f for f in plan.faults if isinstance(f, Slow)]
        self.cuts = [f for f in plan.faults if isinstance(f, Cut)]
        self.delays = [f for f in plan.faults if isinstance(f, Delay)]
        self.departure = self._departure if self.cuts else None
        self.slow_links: dict[int, list[SlowLink]] = {}  # link -> the faults that slow it
        names = [platform.link_name(link) for link in range(len(platform.capacity))]
        for fault in plan.faults:
            if isinstance(fault, SlowLink):
                links = fault.links(names)
                if not links:
                    raise ValueError(f"faults: {fault.describe()} names no link of {platform.describe()}; "
                                     f"its links are named as {', '.join(repr(n) for n in _examples(names))} "
                                     "(Platform.link_name); a pattern may use * and ?")
                for link in links:
                    self.slow_links.setdefault(link, []).append(fault)

    def path(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        """The platform's ``path``, its latency plus the delays between ``src`` and ``dst``."""
        route, latency, narrowest = self.inner.path(src, dst)
        for delay in self.delays:
            if delay.between(src, dst):
                latency += delay.seconds
        return route, latency, narrowest

    def _departure(self, src: int, dst: int, t: float) -> float:
        """When a message from ``src`` to ``dst`` posted at ``t`` starts: the end of the cuts it is in."""
        start = t
        for cut in self.cuts:
            if cut.start <= t < cut.end and cut.between(src, dst):
                start = max(start, cut.end)
        return start

    def slow_changes(self) -> list[tuple[float, int, float]]:
        """``(time, rank, factor)``, in time order: each slow rank's factor from ``time`` on, where
        its windows open or close (the product of the factors of its windows open then)."""
        windows: dict[int, list[Slow]] = {}
        for slow in self.slow:
            windows.setdefault(slow.rank, []).append(slow)
        return _changes(windows)

    def link_changes(self) -> list[tuple[float, int, float]]:
        """``(time, link, factor)``, in time order: each slow link's factor from ``time`` on (the
        product of the factors of its ``SlowLink`` windows open then); its capacity is divided by it."""
        return _changes(self.slow_links)


def _changes(windows: dict[int, list[Any]]) -> list[tuple[float, int, float]]:
    """``(time, key, factor)`` in time order: where the product of the factors of ``windows``
    (each key's faults with ``start``, ``end`` and ``factor``) changes."""
    changes: list[tuple[float, int, float]] = []
    for key, faults in sorted(windows.items()):
        current = 1.0
        for t in sorted({f.start for f in faults} | {f.end for f in faults if f.end < math.inf}):
            factor = 1.0
            for fault in faults:
                if fault.start <= t < fault.end:
                    factor *= fault.factor
            if factor != current:
                changes.append((t, key, factor))
                current = factor
    changes.sort()
    return changes


def _examples(names: Sequence[str]) -> list[str]:
    """A few of a platform's link names, one of each kind (the first, and the first past each node)."""
    seen: list[str] = []
    kinds: set[str] = set()
    for name in names:
        kind = re.sub(r"\d+", "N", name)
        if kind not in kinds:
            kinds.add(kind)
            seen.append(name)
    return seen[:6]
