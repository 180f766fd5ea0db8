"""Orders of simultaneous events: ``run(schedule=...)`` and explore's exhaustive search.

Events due at one virtual time run in batches (engine, Rule 2); the run's
schedule decides the order inside each batch:

- ``"batch"`` (the default): the batch rotated by a seeded offset and maybe
  reversed (``Kernel.order``). Cheap at a million ranks, but it reaches only
  2n of the n! orders of n events.
- ``"shuffle"``: a full seeded permutation, so every order of n simultaneous
  events occurs under some seed (``sc.testing.explore`` uses it).
- a chooser, which picks the events of a batch one at a time: ``Replay``
  follows a list of choices (``run(schedule=[0, 2, 1])``), ``Explorer`` runs
  every distinct order once (``explore(schedule="exhaustive")``).

The engine talks to a chooser through three calls: ``batch(n)`` when a batch
of n events begins, ``pick(n)`` before each of its events, returning the
position of the next one among the n still waiting (in the order they were
scheduled), and ``ran(footprint)`` after it: the world ranks whose state the
event read or wrote (its own rank, the ranks it stepped, both ends of every
envelope it delivered), or None when that is unknown (it touches everything).

Rule 1: a list of choices names only the choice points where two or more
events wait, so the same list replays the same run of the same program and
keywords, and nothing else.
Rule 2: two events of a batch are independent when their footprints are
disjoint; orders that differ only by swapping independent events are one
schedule (a Mazurkiewicz trace). ``Explorer`` is a stateless model checker:
depth-first over the choice points, replaying a recorded prefix of choices
each run, with dynamic partial-order reduction (Flanagan and Godefroid, 2005:
a backtrack point wherever two dependent events ran in one order) and sleep
sets (Godefroid, 1996: a run that could only repeat a schedule already run is
stopped early, ``Pruned``). Every distinct schedule runs once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, Protocol

from .. import latency as _latency
from ..errors import UsageError

SCHEDULES: Final = ("batch", "shuffle")


class Chooser(Protocol):
    """What the engine calls under a chosen schedule (see the module docstring)."""

    footprints: bool  # whether ``ran`` needs real footprints (the engine notes them only then)

    def batch(self, n: int) -> None: ...
    def pick(self, n: int) -> int: ...
    def ran(self, footprint: set[int] | None) -> None: ...


def check(schedule: object, transport: str | None = None) -> None:
    """Raise if ``schedule`` is not a schedule ``run`` takes (on ``transport``, when several processes)."""
    if isinstance(schedule, str):
        if schedule in SCHEDULES:
            return
        if schedule == "exhaustive":
            raise ValueError("run(schedule='exhaustive'): exhaustive exploration runs the program "
                             "once per order of simultaneous events; call "
                             "sc.testing.explore(fn, world_size, schedule='exhaustive')")
    elif isinstance(schedule, (list, tuple)):
        if not all(type(c) is int and c >= 0 for c in schedule):
            raise ValueError(f"run(schedule={list(schedule)!r}): choices must be ints >= 0 (positions "
                             "among simultaneous events), as sc.testing.explore prints them")
    elif not all(hasattr(schedule, name) for name in ("batch", "pick", "ran")):
        schedule = repr(schedule)
    if not isinstance(schedule, str) and transport is not None:
        raise ValueError(f"run(schedule={_shown(schedule)}, transport={transport!r}): choices replay "
                         "on the memory transport only; use transport='memory'")
    if isinstance(schedule, str):
        raise ValueError(f"run(schedule={schedule!r}): unknown schedule; valid: 'batch' (the default: "
                         "each batch of simultaneous events rotated and maybe reversed by the seed), "
                         "'shuffle' (a full seeded permutation), or a list of choices to replay, as "
                         "sc.testing.explore prints them")


def _shown(schedule: object) -> str:
    return repr(list(schedule)) if isinstance(schedule, (list, tuple)) else "<explore>"


def chooser(schedule: object) -> Chooser:
    """Return the chooser for a checked schedule other than ``"batch"``/``"shuffle"``."""
    if isinstance(schedule, (list, tuple)):
        return Replay(schedule)
    return schedule  # type: ignore[return-value]


def draws_noise(model: _latency.LatencyModel | None) -> bool:
    """True when ``model`` may draw from the run's RNG per message (its draws depend on order).

    Built-in models are pure (``Jitter`` hashes its noise per message); any
    other class might draw. The engine only asks when it charges messages as
    they are posted (``Ports.ordered`` False): otherwise it charges them in a
    canonical order between events, so no event's order reaches the model.
    """
    if model is None:
        return False
    pure = (_latency.Zero, _latency.Constant, _latency.AlphaBeta, _latency.LogGP)
    if type(model) in pure:
        return False
    if type(model) is _latency.Hierarchical:
        return draws_noise(model.intra) or draws_noise(model.inter)
    if type(model) is _latency.Jitter:
        return draws_noise(model.model)
    return True


# ---- replaying a list of choices ----


class Replay:
    """Pick each event from a list of choices (``run(schedule=[...])``); the first one after it."""

    footprints = False

    def __init__(self, choices: Sequence[int]) -> None:
        self.choices = list(choices)
        self.point = 0

    def batch(self, n: int) -> None:
        pass

    def pick(self, n: int) -> int:
        if n < 2:
            return 0
        point = self.point
        self.point += 1
        if point >= len(self.choices):
            return 0
        choice = self.choices[point]
        if choice >= n:
            raise UsageError(None, f"run(schedule={self.choices!r})",
                             f"choice {choice} at choice point {point} is out of range: {n} events "
                             "were simultaneous there",
                             "replay a schedule with the program and keywords it was recorded with")
        return choice

    def ran(self, footprint: set[int] | None) -> None:
        pass


# ---- exploring every distinct order ----


class Pruned(Exception):
    """This run could only repeat a schedule already run (every waiting event sleeps); it was stopped."""


class Diverged(RuntimeError):
    """A replayed prefix of choices met another batch than it was recorded at."""


def _dependent(a: set[int] | None, b: set[int] | None) -> bool:
    return a is None or b is None or not a.isdisjoint(b)


class _Node:
    """One choice point of the current path: an event of a batch about to run."""

    __slots__ = ("waiting", "first", "chosen", "backtrack", "done", "sleep", "footprints")

    def __init__(self, waiting: tuple[int, ...], first: int, sleep: dict[int, set[int] | None]) -> None:
        self.waiting = waiting  # ids (positions in the batch as scheduled) of the events not yet run
        self.first = first  # depth of the first node of this batch
        self.chosen = -1
        self.backtrack: set[int] = set()  # events that must be tried first here
        self.done: set[int] = set()  # events tried first here already
        self.sleep = sleep  # events whose orders from here are covered: id -> footprint
        self.footprints: dict[int, set[int] | None] = {}  # events run here -> footprint


class Explorer:
    """Run every distinct order of simultaneous events once, depth-first (the module's Rule 2).

    Use: ``start()``, one run with ``schedule=explorer``, then ``advance()``
    (False once every schedule has run); ``choices`` is the last run's list of
    choices (what ``run(schedule=...)`` replays).
    """

    footprints = True

    def __init__(self) -> None:
        self.stack: list[_Node] = []
        self.start()

    def start(self) -> None:
        """Begin a run: replay the path's prefix, then take the first waiting event that is awake."""
        self.depth = 0
        self.waiting: list[int] = []
        self.first = 0
        self.sleep: dict[int, set[int] | None] = {}
        self.choices: list[int] = []

    def batch(self, n: int) -> None:
        self.waiting = list(range(n))
        self.first = self.depth
        self.sleep = {}  # a batch starts after every event of the previous one ran

    def pick(self, n: int) -> int:
        depth, waiting = self.depth, self.waiting
        if depth < len(self.stack):
            node = self.stack[depth]
            if node.waiting != tuple(waiting):
                raise Diverged(
                    "explore(schedule='exhaustive'): the program ran differently when the same "
                    "choices were replayed; it depends on something simcluster does not control "
                    "(wall-clock time, unseeded random numbers, state shared between ranks or "
                    "kept between runs); make each run depend only on its arguments")
            event = node.chosen
        else:
            node = _Node(tuple(waiting), self.first, self.sleep)
            event = next((e for e in waiting if e not in node.sleep), -1)
            if event < 0:
                raise Pruned
            node.chosen = event
            node.done.add(event)
            node.backtrack.add(event)
            self.stack.append(node)
        position = waiting.index(event)
        del waiting[position]
        if n > 1:
            self.choices.append(position)
        return position

    def ran(self, footprint: set[int] | None) -> None:
        depth = self.depth
        node = self.stack[depth]
        event = node.chosen
        node.footprints[event] = footprint
        self._reverse_races(node.first, depth)
        asleep = itertools.chain(node.sleep.items(),
                                 ((e, node.footprints[e]) for e in node.done if e != event))
        self.sleep = {e: f for e, f in asleep if not _dependent(f, footprint)}
        self.depth += 1

    def _reverse_races(self, first: int, last: int) -> None:
        """Make sure each race of the event at ``last`` with an earlier one of its batch gets reversed.

        Source-DPOR (Abdulla et al., 2014): events i < j race when they are
        dependent and no event between them happens after i and before j. The
        other order needs, at i's node, an event that can start the events
        after i that do not happen after it, followed by j: one of those
        "initials" joins i's backtrack set unless one is there already.
        """
        stack = self.stack
        prints = [stack[k].footprints[stack[k].chosen] for k in range(first, last + 1)]
        n = len(prints) - 1  # the new event's index in prints
        before = [False] * n  # before[k]: event k happens before the new event
        for i in range(n - 1, -1, -1):
            direct = _dependent(prints[i], prints[n])
            chained = any(before[k] and _dependent(prints[i], prints[k]) for k in range(i + 1, n))
            before[i] = direct or chained
            if not direct or chained:
                continue  # no race: independent, or ordered through an event between them
            after = [False] * (n + 1)  # events that happen after event i
            v = []
            for k in range(i + 1, n):
                after[k] = _dependent(prints[i], prints[k]) or any(
                    after[m] and _dependent(prints[m], prints[k]) for m in range(i + 1, k))
                if not after[k]:
                    v.append(k)
            v.append(n)
            initials = [k for x, k in enumerate(v)
                        if not any(_dependent(prints[y], prints[k]) for y in v[:x])]
            node = stack[first + i]
            ids = [stack[first + k].chosen for k in initials]
            if node.backtrack.isdisjoint(ids):
                node.backtrack.add(ids[0])

    def advance(self) -> bool:
        """Set up the next run from the deepest choice point with an order left; False when none is."""
        del self.stack[self.depth:]
        while self.stack:
            node = self.stack[-1]
            todo = [e for e in node.waiting
                    if e in node.backtrack and e not in node.done and e not in node.sleep]
            if todo:
                node.chosen = todo[0]
                node.done.add(todo[0])
                self.start()
                return True
            self.stack.pop()
        self.start()
        return False


def replayable(choices: list[int]) -> list[int]:
    """Return ``choices`` without trailing zeros (``Replay`` picks the first event after its list)."""
    end = len(choices)
    while end and choices[end - 1] == 0:
        end -= 1
    return choices[:end]

