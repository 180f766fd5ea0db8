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
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from . import latency as _latency
from .errors import RankError, SimclusterError
from .runner import RunResult, run

__all__ = ["ExploreFailure", "distributed", "explore"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


# ---- distributed: one test, every rank ----


def distributed(world_size: int | None = None, **run_kwargs: Any) -> Callable[
        [Callable[..., Awaitable[Any]]], Callable[..., None]]:
    """Turn ``async def test_x(comm, ...)`` into a pytest test that runs on every rank.

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
        TypeError: (at decoration) the function is not ``async def f(comm, ...)``,
            or ``world_size``/``seed`` is given both ways.
    """
    for bad in ("args", "kwargs"):
        if bad in run_kwargs:
            raise TypeError(f"distributed({bad}=...): arguments come from the test's own "
                            "parameters (pytest fixtures and parametrize); remove it")

    def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., None]:
        name = getattr(fn, "__name__", repr(fn))
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"distributed({name}): expected an async function "
                            f"(async def {name}(comm): ...), got {type(fn).__name__}")
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                inspect.Parameter.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"distributed({name}): the test must take comm as its first "
                            f"parameter: async def {name}(comm): ...")
        exposed = signature.replace(parameters=params[1:])
        for special, given in (("world_size", world_size), ("seed", run_kwargs.get("seed"))):
            if special in exposed.parameters and given is not None:
                raise TypeError(f"distributed({special}={given!r}): {name} also takes a {special} "
                                f"parameter; set {special} in one place only")

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
    """A seed under which the explored program failed.

    Both an ``AssertionError`` (pytest reports it as a test failure) and a
    ``SimclusterError`` (``.rank``, ``.op``). ``__cause__`` is what the run
    raised (None when ``check`` returned False).

    Attributes:
        seed: the first failing seed.
        reproduction: one line of Python that replays it, e.g.
            ``sc.run(race, world_size=3, seed=7)``.
        passed: the seeds that passed before it.
        result: the ``RunResult`` when ``check`` rejected it, else None.
    """

    def __init__(self, fn_name: str, world_size: int, seed: int, reproduction: str, problem: str,
                 rank: int | None, passed: list[int], result: RunResult | None = None) -> None:
        self.seed = seed
        self.reproduction = reproduction
        self.passed = passed
        self.result = result
        after = f" after {len(passed)} passing seed{'s' if len(passed) != 1 else ''}" if passed else ""
        super().__init__(None, f"explore({fn_name}, world_size={world_size})",
                         f"seed {seed} failed{after}: {problem}", f"reproduce with {reproduction}")
        self.rank = rank  # the failing rank, when a rank raised


def explore(
    fn: Callable[..., Awaitable[Any]],
    world_size: int,
    seeds: Iterable[int] = range(100),
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    check: Callable[[RunResult], object] | None = None,
    jitter: float | None = None,
    **run_kwargs: Any,
) -> list[RunResult]:
    """Run ``fn`` on ``world_size`` ranks once per seed; raise on the first failing seed.

    A seed fails when the run raises (a rank's exception, a deadlock, a
    collective mismatch, a timeout, a leak warning turned into an error), or
    when ``check(result)`` returns a false value or raises. Each seed shuffles
    the order of simultaneous events; ``jitter=0.1`` also wraps the latency
    model in ``sc.latency.Jitter(model, rel=0.1)`` so each seed perturbs
    message delays by up to 10% (it has no effect on ``Zero()`` latency,
    whose delays are all 0).

    Example::

        sc.testing.explore(race, world_size=3, seeds=range(50))

    Args:
        fn: the rank function, ``async def fn(comm, *args, **kwargs)``.
        world_size: number of ranks.
        seeds: the seeds to try, in order.
        args, kwargs: passed to every rank, as in ``sc.run``.
        check: optional test of each ``RunResult``.
        jitter: relative delay noise, or None for none.
        **run_kwargs: other ``sc.run`` keywords (``latency``, ``eager_limit``, ...).

    Returns:
        The ``RunResult`` of every seed, in order, when all pass.

    Raises:
        ExploreFailure: the first failing seed, with ``.seed`` and
            ``.reproduction``; its message gives the first line of what went
            wrong, and ``__cause__`` is the run's whole exception.
        TypeError / ValueError: bad keywords (raised at once, not as a failure).
    """
    __tracebackhide__ = True  # pytest: show the failure, not this loop
    if "seed" in run_kwargs:
        raise TypeError("explore(seed=...): explore picks the seeds; pass seeds=[...] instead")
    model = run_kwargs.pop("latency", None)
    if jitter is not None:
        model = _latency.Jitter(_latency.Zero() if model is None else model, rel=jitter)
    if model is not None:
        run_kwargs["latency"] = model
    name = getattr(fn, "__name__", repr(fn))
    results: list[RunResult] = []
    passed: list[int] = []
    for seed in seeds:
        repro = _reproduction(name, world_size, seed, args, kwargs, run_kwargs)
        try:
            result = run(fn, world_size, seed=seed, args=args, kwargs=kwargs, **run_kwargs)
        except (TypeError, ValueError) as exc:
            if not passed and not isinstance(exc, SimclusterError) and _is_usage_error(exc):
                raise  # a bad keyword: the same for every seed, not a schedule
            raise _failure(name, world_size, seed, repro, exc, passed) from exc
        except Exception as exc:
            raise _failure(name, world_size, seed, repro, exc, passed) from exc
        if check is not None:
            try:
                verdict = check(result)
            except Exception as exc:
                raise _failure(name, world_size, seed, f"result = {repro}", exc, passed,
                               "check(result) raised ") from exc
            if not verdict:
                raise ExploreFailure(name, world_size, seed, f"result = {repro}",
                                     f"check(result) returned {verdict!r} for {result!r}", None,
                                     passed, result)
        results.append(result)
        passed.append(seed)
    return results


def _is_usage_error(exc: Exception) -> bool:
    """True for errors sc.run raises about its own keywords (``run(...)``), before any rank runs."""
    text = str(exc)
    return text.startswith(("run(", "run:")) or "unexpected keyword argument" in text


def _failure(name: str, world_size: int, seed: int, repro: str, exc: Exception, passed: list[int],
             lead: str = "") -> ExploreFailure:
    # only the first line of what went wrong, so the message stays short and the
    # reproduction stays in view; the whole error (a deadlock report, pytest's
    # assertion details) is the failure's __cause__
    rank = getattr(exc, "rank", None)
    cause = exc.__cause__ if isinstance(exc, RankError) and exc.__cause__ is not None else exc
    text = (str(cause).splitlines() or [""])[0]
    if isinstance(exc, RankError):
        problem = f"rank {exc.rank} raised {type(cause).__name__}: {text}"
    else:
        problem = f"{type(exc).__name__}: {text}"
    return ExploreFailure(name, world_size, seed, repro, lead + problem, rank, passed)


_MODEL_NAMES = "|".join(sorted(n for n in dir(_latency) if isinstance(getattr(_latency, n), type)
                               and issubclass(getattr(_latency, n), _latency.LatencyModel)
                               and not n.startswith("_")))


def _reproduction(name: str, world_size: int, seed: int, args: Sequence[Any],
                  kwargs: Mapping[str, Any] | None, run_kwargs: Mapping[str, Any]) -> str:
    """Return the one-line ``sc.run(...)`` call that replays one seed."""
    parts = [name, f"world_size={world_size}", f"seed={seed}"]
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
