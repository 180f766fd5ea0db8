"""pytest helpers: run a test on every rank, and explore many schedules.

``distributed`` turns ``async def test_x(comm)`` into a plain (synchronous)
test function that pytest collects like any other: it runs the body on every
rank with ``sc.run`` and, when a rank's assertion fails, fails with that
rank's own message, prefixed with ``rank R: ``.

``explore`` runs one program under many seeds. The seed decides how the
engine breaks ties between events at the same virtual time (which of two
simultaneous messages an ``ANY_SOURCE`` receive takes, which rank runs
first), and with ``jitter=`` it also perturbs every message's delay, so a
race that one schedule hides shows up under another. The first failing seed
is raised as ``ExploreFailure`` with a one-line reproduction.

Rule 1: nothing here changes how a run behaves; a failure found by
``explore`` replays exactly with the ``sc.run(...)`` line it prints.
Rule 2: this module imports pytest nowhere, so ``import simcluster`` never
pulls pytest in; the fixtures live in ``simcluster.pytest_plugin``.
"""

from __future__ import annotations

import functools
import inspect
import random
import re
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from .engine import schedule as _schedule
from . import latency as _latency
from .errors import RankError, SimclusterError, SimclusterWarning, UsageError, UsageTypeError
from .runner import RunResult, run

__all__ = ["Exploration", "ExploreFailure", "distributed", "explore"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


# ---- distributed: one test, every rank ----


def distributed(world_size: int | None = None, **run_kwargs: Any) -> Callable[
        [Callable[..., Awaitable[Any]]], Callable[..., None]]:
    """Turn ``async def test_x(comm, ...)`` into a pytest test that runs on every rank.

    A plain ``def test_x(comm, ...)`` works too: its ranks are synchronous and
    ``comm`` is the rank's ``simcluster.MPI.COMM_WORLD`` (mpi4py's API).

    The decorated function is synchronous, so pytest runs it without an
    asyncio plugin. Parameters after ``comm`` stay in its signature, so pytest
    fills them from fixtures and ``@pytest.mark.parametrize`` as usual, and
    every rank gets them. Two names are special: a ``world_size`` parameter
    sets the number of ranks and a ``seed`` parameter the run's seed (the
    plugin's fixtures give 4 and 0; parametrize them to cover several).

    Example::

        @sc.testing.distributed(world_size=3, latency=sc.latency.Constant(1e-6))
        async def test_ring(comm):
            right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
            assert await comm.sendrecv(comm.rank, right, src=left) == left

        @pytest.mark.parametrize("world_size", [1, 2, 7])
        @sc.testing.distributed()
        async def test_sum(comm, world_size):
            assert await comm.all_reduce(1) == world_size

    Args:
        world_size: number of ranks (4 when neither this nor a ``world_size``
            parameter says otherwise).
        **run_kwargs: keywords for ``sc.run`` (``latency``, ``seed``,
            ``eager_limit``, ``checks``, ``timeout``, ...).

    Returns:
        A decorator.

    Raises:
        AssertionError: (from the test) a rank's assertion failed; the message
            is ``rank R: `` followed by that rank's own message, and
            ``__cause__`` is the rank's AssertionError with its traceback.
        RankError / DeadlockError / ...: (from the test) anything else that
            stops the run, unchanged.
        UsageTypeError: (at decoration; a TypeError) the function is not
            ``def``/``async def f(comm, ...)``, or ``world_size``/``seed`` is given
            both ways.
    """
    for bad in ("args", "kwargs"):
        if bad in run_kwargs:
            raise UsageTypeError(None, f"distributed({bad}=...)", "arguments come from the "
                                 "test's own parameters (pytest fixtures and parametrize)",
                                 "remove it")

    def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., None]:
        name = getattr(fn, "__name__", repr(fn))
        if not inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn):
            raise UsageTypeError(None, f"distributed({name})", f"expected a function (async def "
                                 f"{name}(comm): ..., or a plain def for mpi4py-style code), got "
                                 f"{type(fn).__name__}")
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                inspect.Parameter.POSITIONAL_OR_KEYWORD):
            raise UsageTypeError(None, f"distributed({name})", "the test must take comm as its "
                                 f"first parameter: async def {name}(comm): ...")
        exposed = signature.replace(parameters=params[1:])
        for special, given in (("world_size", world_size), ("seed", run_kwargs.get("seed"))):
            if special in exposed.parameters and given is not None:
                raise UsageTypeError(None, f"distributed({special}={given!r})", f"{name} also "
                                     f"takes a {special} parameter",
                                     f"set {special} in one place only")

        @functools.wraps(fn)
        def test(*args: Any, **kwargs: Any) -> None:
            __tracebackhide__ = True  # pytest: show the rank's frames, not ours
            bound = exposed.bind(*args, **kwargs)
            size = bound.arguments.get("world_size", 4 if world_size is None else world_size)
            keywords = dict(run_kwargs)
            if "seed" in bound.arguments:
                keywords["seed"] = bound.arguments["seed"]
            try:
                run(fn, size, args=bound.args, kwargs=bound.kwargs, **keywords)
            except RankError as exc:
                cause = exc.__cause__
                if isinstance(cause, AssertionError):
                    raise AssertionError(f"rank {exc.rank}: {_assertion_text(cause)}") from cause
                raise

        # pytest reads the signature to find fixtures: hide comm, keep the rest
        test.__signature__ = exposed  # type: ignore[attr-defined]
        return test

    return decorate


def _assertion_text(exc: AssertionError) -> str:
    """Return an assertion's own message, or where it failed when it has none."""
    text = str(exc)
    if text:
        return text
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = "" if tb is None else f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}"
    return f"assertion failed{where}"


# ---- explore: many schedules, first failure ----


class ExploreFailure(SimclusterError, AssertionError):
    """A schedule under which the explored program failed.

    Both an ``AssertionError`` (pytest reports it as a test failure) and a
    ``SimclusterError`` (``.rank``, ``.op``). ``__cause__`` is what the run
    raised (None when ``check`` returned False).

    Attributes:
        seed: the failing run's seed.
        schedule: its schedule: ``"shuffle"`` (or the ``schedule`` passed to
            explore) over seeds, a list of choices under ``"exhaustive"``.
        reproduction: one line of Python that replays it, e.g.
            ``sc.run(race, world_size=3, seed=7, schedule='shuffle')``.
        passed: the seeds (exhaustive: the lists of choices) that passed before it.
        result: the ``RunResult`` when ``check`` rejected it, else None.
    """

    def __init__(self, fn_name: str, world_size: int, seed: int, reproduction: str, problem: str,
                 rank: int | None, passed: list[Any], result: RunResult | None = None,
                 schedule: str | list[int] = "shuffle") -> None:
        self.seed = seed
        self.schedule = schedule
        self.reproduction = reproduction
        self.passed = passed
        self.result = result
        unit, which = ("schedule", f"schedule {schedule}") if isinstance(schedule, list) else (
            "seed", f"seed {seed}")
        after = f" after {len(passed)} passing {unit}{'s' if len(passed) != 1 else ''}" if passed else ""
        super().__init__(None, f"explore({fn_name}, world_size={world_size})",
                         f"{which} failed{after}: {problem}", f"reproduce with {reproduction}")
        self.rank = rank  # the failing rank, when a rank raised


class Exploration(list[RunResult]):
    """What ``explore`` returns when every run passed: the ``RunResult`` of each, in order.

    A list, with two attributes more.

    Attributes:
        runs: how many times the program ran. Exhaustive exploration also
            counts the runs it stopped early because they could only repeat
            a schedule already run, so ``runs >= len(self)``.
        complete: True when every distinct order of simultaneous events ran
            (``schedule="exhaustive"`` within ``max_runs``), or every crash
            point (``crashes="each"``); always False over seeds, which sample.
    """

    def __init__(self, results: list[RunResult], runs: int, complete: bool) -> None:
        super().__init__(results)
        self.runs = runs
        self.complete = complete

    def __repr__(self) -> str:
        return f"<Exploration {len(self)} passed, runs={self.runs}, complete={self.complete}>"


_EXPLORE_SCHEDULES = ("shuffle", "batch", "exhaustive")


def explore(
    fn: Callable[..., Awaitable[Any]],
    world_size: int,
    seeds: Iterable[int] | None = None,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    check: Callable[[RunResult], object] | None = None,
    jitter: float | None = None,
    schedule: str = "shuffle",
    max_runs: int | None = None,
    crashes: str | None = None,
    **run_kwargs: Any,
) -> Exploration:
    """Run ``fn`` on ``world_size`` ranks under many schedules; raise on the first that fails.

    A run fails when it raises (a rank's exception, a deadlock, a collective
    mismatch, a timeout, a leak warning turned into an error), or when
    ``check(result)`` returns a false value or raises.

    Over seeds (``schedule="shuffle"``, the default), each seed orders every
    batch of simultaneous events by a full seeded permutation, so every order
    of n simultaneous events occurs under some seed; ``schedule="batch"``
    keeps ``sc.run``'s default, cheaper order (rotations of each batch).
    ``jitter=0.1`` also wraps the latency model in
    ``sc.latency.Jitter(model, rel=0.1)`` so each seed perturbs message
    delays by up to 10% (it has no effect on ``Zero()`` latency).

    ``schedule="exhaustive"`` runs every distinct order of simultaneous
    events once, as a stateless model checker does (depth-first over the
    choice points, replaying a recorded prefix of choices): two orders are
    distinct when some pair of simultaneous events that touch the same rank
    (its messages, its requests, its ports) runs in the other order; events
    of unrelated ranks are not reordered against each other. It stops after
    ``max_runs`` runs and says whether it covered every order
    (``.complete``, with a ``SimclusterWarning`` when not). Ranks must share
    nothing but messages, and each run must depend only on its arguments.

    ``crashes="each"`` explores failures instead of orders: a first run
    counts each rank's calls by kind, then the program runs once per crash
    point, each rank crashing at each of its calls in turn
    (``faults="crash:R@KIND#N"``, docs/faults.md), under the first seed; a run
    that fails or hangs is raised with its plan in the reproduction line.
    ``crashes="sample"`` runs one crash point per seed, drawn by that seed,
    for programs with too many points to try each.

    Example::

        sc.testing.explore(race, world_size=3, seeds=range(50))
        sc.testing.explore(resilient, world_size=4, crashes="each")
        done = sc.testing.explore(race, world_size=3, schedule="exhaustive")
        assert done.complete

    Args:
        fn: the rank function, ``async def fn(comm, *args, **kwargs)``.
        world_size: number of ranks.
        seeds: the seeds to try, in order (default ``range(100)``; exhaustive:
            ``[0]``, and each seed given is explored exhaustively in turn).
        args, kwargs: passed to every rank, as in ``sc.run``.
        check: optional test of each ``RunResult``.
        jitter: relative delay noise, or None for none.
        schedule: ``"shuffle"`` (default), ``"batch"`` or ``"exhaustive"``.
        max_runs: the most runs exhaustive exploration makes (default 1000).
        crashes: ``"each"`` or ``"sample"`` to explore crash points (above), or None.
        **run_kwargs: other ``sc.run`` keywords (``latency``, ``eager_limit``, ...).

    Returns:
        An ``Exploration``: the ``RunResult`` of every run that passed, in
        order, with ``.runs`` and ``.complete``.

    Raises:
        ExploreFailure: the first failing run, with ``.seed``, ``.schedule``
            and ``.reproduction``; its message gives the first line of what
            went wrong, and ``__cause__`` is the run's whole exception.
        UsageError: bad keywords, of explore or of ``sc.run`` (raised at once, not as a
            failure; a ValueError, and UsageTypeError also a TypeError).
        RuntimeError: (exhaustive) a replayed run went otherwise than recorded.
    """
    __tracebackhide__ = True  # pytest: show the failure, not this loop
    if "seed" in run_kwargs:
        raise UsageTypeError(None, "explore(seed=...)", "explore picks the seeds",
                             "pass seeds=[...] instead")
    if schedule not in _EXPLORE_SCHEDULES:
        raise UsageError(None, f"explore(schedule={schedule!r})", "unknown schedule", "valid: "
                         "'shuffle' (the default: a full seeded permutation per seed), 'batch' "
                         "(sc.run's default order per seed), 'exhaustive' (every distinct order "
                         "once)")
    exhaustive = schedule == "exhaustive"
    if max_runs is not None and not exhaustive:
        raise UsageTypeError(None, f"explore(max_runs={max_runs!r})", "max_runs bounds "
                             "schedule='exhaustive' only", "over seeds, pass fewer seeds")
    if max_runs is not None and (isinstance(max_runs, bool) or not isinstance(max_runs, int)
                                 or max_runs < 1):
        cls = UsageError if isinstance(max_runs, int) and not isinstance(max_runs, bool) else \
            UsageTypeError
        raise cls(None, f"explore(max_runs={max_runs!r})", "max_runs must be an int >= 1")
    model = run_kwargs.pop("latency", None)
    if jitter is not None:
        model = _latency.Jitter(_latency.Zero() if model is None else model, rel=jitter)
    if model is not None:
        run_kwargs["latency"] = model
    trial = _Trial(fn, world_size, args, kwargs, check, run_kwargs)
    if crashes is not None:
        return _explore_crashes(trial, crashes, seeds, schedule)
    if exhaustive:
        return _exhaustive(trial, [0] if seeds is None else seeds,
                           1000 if max_runs is None else max_runs)
    results: list[RunResult] = []
    for seed in range(100) if seeds is None else seeds:
        results.append(trial.run(seed, schedule, schedule, results))
    return Exploration(results, len(results), False)


def _explore_crashes(trial: _Trial, crashes: str, seeds: Iterable[int] | None,
                     schedule: str) -> Exploration:
    """Run the program once per crash point (``"each"``), or one drawn per seed (``"sample"``)."""
    __tracebackhide__ = True
    call = f"explore({trial.name}, crashes={crashes!r})"
    if crashes not in ("each", "sample"):
        raise UsageError(None, call, "unknown way to explore crashes", "valid: 'each' (every "
                         "rank at every call) or 'sample' (one crash point per seed)")
    if schedule == "exhaustive":
        raise UsageError(None, call, "crash points are explored under one schedule per run",
                         "use schedule='shuffle' or 'batch' with crashes=")
    if "faults" in trial.run_kwargs:
        raise UsageTypeError(None, call, "explore makes the fault plans", "leave faults= out")
    from .faults import FaultPlan

    order = list(range(100) if seeds is None else seeds)
    first = order[0] if order else 0
    results = [trial.run(first, schedule, schedule, [])]  # without a crash, it must pass
    counted = run(trial.fn, trial.world_size, seed=first, schedule=schedule, args=trial.args,
                  kwargs=trial.kwargs, faults=FaultPlan((), count_calls=True), **trial.run_kwargs)
    calls = counted.calls or {}
    points = [(rank, kind, nth) for (rank, kind), n in sorted(calls.items()) for nth in range(1, n + 1)]
    plans = ([(first, p) for p in points] if crashes == "each"
             else [(seed, random.Random(f"crash-point:{seed}").choice(points)) for seed in order
                   if points])
    for seed, (rank, kind, nth) in plans:
        trial.run_kwargs["faults"] = f"crash:{rank}@{kind}#{nth}"
        results.append(trial.run(seed, schedule, schedule, results))
    trial.run_kwargs.pop("faults", None)
    return Exploration(results, len(results), crashes == "each")


def _exhaustive(trial: _Trial, seeds: Iterable[int], max_runs: int) -> Exploration:
    """Run every distinct order of simultaneous events under each seed, at most ``max_runs`` runs."""
    __tracebackhide__ = True
    results: list[RunResult] = []
    runs = 0
    for seed in seeds:
        explorer = _schedule.Explorer()
        more = True
        while more and runs < max_runs:
            runs += 1
            try:
                results.append(trial.run(seed, explorer, explorer.choices, results))
            except _schedule.Pruned:
                pass  # it could only have repeated a schedule already run
            more = explorer.advance()
        if more:
            warnings.warn(f"explore({trial.name}, world_size={trial.world_size}, schedule="
                          f"'exhaustive'): stopped after max_runs={max_runs} runs with "
                          f"{len(results)} passed; not every order of simultaneous events ran; "
                          "raise max_runs=, or explore a smaller program",
                          SimclusterWarning, stacklevel=3)
            return Exploration(results, runs, False)
    return Exploration(results, runs, True)


class _Trial:
    """One program and its keywords: run it under a schedule; turn a failure into ExploreFailure."""

    def __init__(self, fn: Callable[..., Awaitable[Any]], world_size: int, args: Sequence[Any],
                 kwargs: Mapping[str, Any] | None, check: Callable[[RunResult], object] | None,
                 run_kwargs: dict[str, Any]) -> None:
        self.fn, self.world_size, self.args, self.kwargs = fn, world_size, args, kwargs
        self.check, self.run_kwargs = check, run_kwargs
        self.name = getattr(fn, "__name__", repr(fn))
        self.passed: list[Any] = []

    def run(self, seed: int, schedule: object, choices: str | list[int],
            results: list[RunResult]) -> RunResult:
        """Run once; return the result, or raise ExploreFailure (``choices``: what replays it)."""
        __tracebackhide__ = True
        name, size, passed = self.name, self.world_size, self.passed
        try:
            result = run(self.fn, size, seed=seed, schedule=schedule, args=self.args,
                         kwargs=self.kwargs, **self.run_kwargs)
        except UsageError as exc:
            if not passed:
                raise  # a bad keyword: the same for every seed, not a schedule
            raise self._failure(seed, choices, exc) from exc
        except (_schedule.Pruned, _schedule.Diverged):
            raise
        except Exception as exc:
            raise self._failure(seed, choices, exc) from exc
        if self.check is not None:
            try:
                verdict = self.check(result)
            except Exception as exc:
                raise self._failure(seed, choices, exc, "check(result) raised ") from exc
            if not verdict:
                kept = self._kept(choices)
                raise ExploreFailure(name, size, seed, f"result = {self._line(seed, kept)}",
                                     f"check(result) returned {verdict!r} for {result!r}", None,
                                     list(passed), result, kept)
        passed.append(seed if isinstance(choices, str) else self._kept(choices))
        return result

    @staticmethod
    def _kept(choices: str | list[int]) -> str | list[int]:
        return choices if isinstance(choices, str) else _schedule.replayable(choices)

    def _line(self, seed: int, schedule: str | list[int]) -> str:
        return _reproduction(self.name, self.world_size, seed, schedule, self.args, self.kwargs,
                             self.run_kwargs)

    def _failure(self, seed: int, choices: str | list[int], exc: Exception,
                 lead: str = "") -> ExploreFailure:
        # only the first line of what went wrong, so the message stays short and the
        # reproduction stays in view; the whole error (a deadlock report, pytest's
        # assertion details) is the failure's __cause__
        kept = self._kept(choices)
        line = self._line(seed, kept)
        if lead:
            line = f"result = {line}"
        rank = getattr(exc, "rank", None)
        cause = exc.__cause__ if isinstance(exc, RankError) and exc.__cause__ is not None else exc
        text = (str(cause).splitlines() or [""])[0]
        if isinstance(exc, RankError):
            problem = f"rank {exc.rank} raised {type(cause).__name__}: {text}"
        else:
            problem = f"{type(exc).__name__}: {text}"
        return ExploreFailure(self.name, self.world_size, seed, line, lead + problem, rank,
                              list(self.passed), None, kept)


_MODEL_NAMES = "|".join(sorted(n for n in dir(_latency) if isinstance(getattr(_latency, n), type)
                               and issubclass(getattr(_latency, n), _latency.LatencyModel)
                               and not n.startswith("_")))


def _reproduction(name: str, world_size: int, seed: int, schedule: str | list[int],
                  args: Sequence[Any], kwargs: Mapping[str, Any] | None,
                  run_kwargs: Mapping[str, Any]) -> str:
    """Return the one-line ``sc.run(...)`` call that replays one run."""
    parts = [name, f"world_size={world_size}", f"seed={seed}", f"schedule={schedule!r}"]
    if args:
        parts.append(f"args={tuple(args)!r}")
    if kwargs:
        parts.append(f"kwargs={dict(kwargs)!r}")
    for key, value in run_kwargs.items():
        text = repr(value)
        if isinstance(value, _latency.LatencyModel) and _MODEL_NAMES:
            text = re.sub(rf"\b({_MODEL_NAMES})\(", r"sc.latency.\1(", text)
        parts.append(f"{key}={text}")
    return f"sc.run({', '.join(parts)})"
