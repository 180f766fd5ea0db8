"""spawn(): ``torch.multiprocessing.spawn`` on virtual ranks.

``spawn(fn, args, nprocs)`` runs ``fn(rank, *args)`` once per rank, as
``torch.multiprocessing.spawn`` does, but every rank is a thread of this
process stepped by simcluster's engine (``engine.sync.ThreadRank``): one runs at a
time, in virtual time, with the run's latency model, checks and trace. Inside
a rank, ``dist.init_process_group("simcluster")`` rendezvous in memory
(``_rendezvous.py``) and each rank has a torch.distributed world of its own
(``_session.py``), and a pid and host name of its own, as a process has
(``simcluster._identity``: ``os.getpid()``, ``socket.gethostname()``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from simcluster import _identity, _rank_atexit
from simcluster.engine import sync as _sync
from simcluster.runner import RunResult, run
from simcluster.torch import _fake, _gpu, _report
from simcluster.torch._session import Session

RUN_KEYWORDS = ("latency", "seed", "trace", "checks", "timeout", "algorithms", "eager_limit",
                "compute", "faults")
"""The keywords of ``simcluster.run`` that ``spawn`` passes on."""

START_METHODS = ("spawn", "fork", "forkserver")


def _check(fn: object, args: object, nprocs: object, join: object, daemon: object,
           start_method: object, run_keywords: dict[str, Any]) -> None:
    if not callable(fn):
        raise TypeError(f"spawn(fn={fn!r}): fn must be a function called as fn(rank, *args)")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"spawn(args={args!r}): args must be a tuple; fn is called as fn(rank, *args)")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"spawn(nprocs={nprocs!r}): nprocs must be an int >= 1 (virtual ranks)")
    if join is not True:
        raise ValueError(f"spawn(join={join!r}): simcluster runs every rank inside this call and "
                         "returns their results when all have finished, so there is no process "
                         "context to join later; use join=True (the default)")
    if not isinstance(daemon, bool):
        raise TypeError(f"spawn(daemon={daemon!r}): daemon must be a bool")
    if start_method not in START_METHODS:
        raise ValueError(f"spawn(start_method={start_method!r}): unknown start method; valid: "
                         f"{', '.join(START_METHODS)} (all the same here: each rank starts as a "
                         "fresh process would)")
    for name in run_keywords:
        if name not in RUN_KEYWORDS:
            raise TypeError(f"spawn() got an unexpected keyword argument {name!r}; valid: fn, "
                            f"args, nprocs, join, daemon, start_method, tensors, report, tokens_per_step, "
                            f"flops_per_token, {', '.join(RUN_KEYWORDS)}")


def spawn(fn: Callable[..., Any], args: Sequence[Any] = (), nprocs: int = 1, join: bool = True,
          daemon: bool = False, start_method: str = "spawn", tensors: str = "real",
          report: bool = False, tokens_per_step: int | None = None,
          flops_per_token: float | None = None, **run_keywords: Any) -> RunResult:
    """Run ``fn(rank, *args)`` on ``nprocs`` virtual ranks, as ``torch.multiprocessing.spawn`` does.

    Each rank is a thread of this process that the simulator runs one at a
    time, so the schedule, the virtual times and the results are the same on
    every run with the same seed. Inside a rank,
    ``dist.init_process_group("simcluster")`` (with or without ``rank``,
    ``world_size``, ``init_method`` and ``MASTER_ADDR``/``MASTER_PORT``) opens
    no socket; each rank has its own torch.distributed world, environment
    variables, default generator and thread-local torch state, as a process
    would.

    Args:
        fn: called as ``fn(rank, *args)`` on every rank.
        args: the extra arguments of ``fn``.
        nprocs: the number of ranks (the world size).
        join: must be True: the call returns once every rank has finished.
        daemon: accepted for compatibility; ranks always end with the run.
        start_method: ``"spawn"``, ``"fork"`` or ``"forkserver"``, all alike:
            every rank starts from this process's state at the call, with an
            empty torch.distributed world, as a fresh process would.
        **run_keywords: ``latency``, ``seed``, ``trace``, ``checks``,
            ``timeout``, ``algorithms``, ``eager_limit``, ``compute``, as for
            ``simcluster.run``.
        tensors: ``"real"`` (the default), or ``"fake"``: a shape-only run,
            every floating-point tensor a ``FakeTensor`` (shape, dtype and
            device, no data), collectives timed from their sizes
            (``_fake.py``, docs/predict.md).
        report: record each rank's steps (each ``optimizer.step()``) and
            memory, and put the step report (``simcluster.predict.report.StepReport``)
            on the result as ``result.report`` (docs/predict.md, Reports).
        tokens_per_step: with ``report``, the tokens each rank processes per
            step (else what the ranks give ``simcluster.predict.report.tokens``).
        flops_per_token: with ``report``, the model FLOPs per token for MFU
            (else the program's ``report.model_flops``, else 6 x parameters).

    Returns:
        The ``RunResult``: what ``fn`` returned on each rank, with
        ``elapsed`` (virtual seconds), ``times``, ``stats``, ``trace`` and,
        with ``report=True``, ``report``.

    Raises:
        RankError: a rank raised (the others are cancelled); ``__cause__`` is
            its exception, where ``torch.multiprocessing.spawn`` raises
            ``ProcessRaisedException``.
        DeadlockError: every rank waits and nothing can arrive.
    """
    _check(fn, args, nprocs, join, daemon, start_method, run_keywords)
    shapes = _fake.Shapes() if _fake.check(tensors) == "fake" else None
    recording = _report.Recording() if _report_asked(report, tokens_per_step, flops_per_token) else None
    with Session(nprocs) as session:
        def rank_main(_comm_world: object) -> Any:
            rank = _sync.current()
            threading.current_thread().name = "MainThread"  # its process's main thread (_identity)
            _sync.stop_clock(rank, None)  # measured compute: setting the rank up is not its work
            state = session.start_rank()
            gpu = _gpu.attach(rank)  # compute="gpu:...": the rank's ops timed on the modelled GPU
            _sync.start_clock(rank)
            recorder = (contextlib.nullcontext() if recording is None  # above the clock: it sees
                        else recording.rank(state.rank, gpu))        # every storage made
            if shapes is None:
                with _gpu.clocked(gpu), recorder:
                    return _exiting(state.rank, fn, args)
            with shapes.rank(state.rank), _gpu.clocked(gpu), recorder:
                return _exiting(state.rank, fn, args)

        rank_main.__simcluster_stack__ = "thread"  # type: ignore[attr-defined]
        rank_main.__qualname__ = rank_main.__name__ = getattr(fn, "__name__", "fn")
        _identity.install()  # each rank's os.getpid() and host name, as a process's
        try:
            with shapes or contextlib.nullcontext(), recording or contextlib.nullcontext():
                result = run(rank_main, nprocs, **run_keywords)
        finally:
            _identity.uninstall()
    if recording is not None:
        result.report = recording.report(tokens_per_step=tokens_per_step,
                                         flops_per_token=flops_per_token,
                                         trace=run_keywords.get("trace"))
    return result


def _exiting(rank: int, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    """Run the rank's ``fn``, then its ``atexit`` handlers, as its process would exit: also after
    an exception or ``sys.exit``, not when the run cancels it (``_rank_atexit``)."""
    try:
        value = fn(rank, *args)
        _sync.handle_signals()
    except (Exception, SystemExit) as exc:
        _rank_atexit.run(rank, exc)
        raise
    _rank_atexit.run(rank)
    return value


def _report_asked(report: object, tokens_per_step: object, flops_per_token: object) -> bool:
    """Whether the step report was asked for; its options are refused without it."""
    if not isinstance(report, bool):
        raise TypeError(f"spawn(report={report!r}): report must be a bool")
    if tokens_per_step is not None and (isinstance(tokens_per_step, bool)
                                        or not isinstance(tokens_per_step, int) or tokens_per_step < 1):
        raise ValueError(f"spawn(tokens_per_step={tokens_per_step!r}): give the tokens each rank "
                         "processes per step, an int >= 1")
    if flops_per_token is not None and not (isinstance(flops_per_token, (int, float))
                                            and flops_per_token > 0):
        raise ValueError(f"spawn(flops_per_token={flops_per_token!r}): give the model FLOPs per "
                         "token, > 0")
    if not report and (tokens_per_step is not None or flops_per_token is not None):
        raise ValueError("spawn(tokens_per_step=..., flops_per_token=...) are options of the step "
                         "report: add report=True")
    return report
