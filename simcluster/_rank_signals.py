"""Each virtual rank's own signal handlers, as each process has its own.

While a launcher's run goes on (``simcluster mpirun``, ``simcluster torchrun``,
``simcluster.torch.spawn``), ``_identity.install`` puts these in place of
``signal.signal``, ``signal.getsignal`` and ``signal.raise_signal``, and
``os.kill`` of a rank's pid comes here:

- a rank's ``signal.signal(signal.SIGTERM, handler)`` sets that rank's
  handler, no other's, and returns its previous one. It works on a rank that
  runs on a thread of its own (torch's) as in a process's main thread, where
  CPython's own would raise ``ValueError``. A rank starts with the handlers
  of an interpreter the launcher started: the signals the launcher ignores
  stay ignored (as across ``exec``), ``SIGINT`` raises ``KeyboardInterrupt``
  (``signal.default_int_handler``), ``SIGPIPE`` and ``SIGXFSZ`` are ignored,
  the others do their default action.
- ``os.kill(pid, sig)`` of a rank's pid (``os.getpid()`` inside a rank) and
  ``signal.raise_signal(sig)`` deliver ``sig`` to that rank. A rank that
  signals itself runs its handler before the call returns; another rank runs
  it when it next returns from a blocking call (where CPython runs a handler:
  in the main thread, once the call it was in comes back), or as its program
  ends if it makes no more (``engine.sync.handle_signals``). What the handler
  raises comes out there. ``SIG_IGN`` does nothing; ``SIG_DFL`` does the
  signal's default action: nothing for ``SIGCHLD``, ``SIGURG``, ``SIGWINCH``
  and ``SIGCONT`` (nor, since a stopped process is not modelled, the stop
  signals), and for the others the rank ends as a process killed by it,
  with the status a shell gives such a process, 128 + sig, and no ``atexit``
  handler run (``_rank_atexit.ProcessExit``).
  Signal 0 checks that the rank is still running. A rank that has ended has
  no process left: ``ProcessLookupError``, as for a pid that is gone.

A thread a rank started signals as its rank does, and a signal it sends to
its own rank runs the handler when the rank next resumes, as CPython runs
handlers in the main thread; its ``os._exit(status)`` ends the rank when it
next resumes (``end``), and that thread at once.

Rule 1: outside the run's ranks and their threads (the launcher, simcluster)
the functions are the process's own.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from ._rank_atexit import ProcessExit

_IGNORED_BY_DEFAULT: Final = frozenset(
    getattr(signal, name) for name in ("SIGCHLD", "SIGURG", "SIGWINCH", "SIGCONT", "SIGSTOP", "SIGTSTP",
                                       "SIGTTIN", "SIGTTOU") if hasattr(signal, name))
"""Signals whose default action leaves a process running (or stops it, which is not modelled)."""
_FRESH: Final = {signal.SIGINT: signal.default_int_handler,
                 **{getattr(signal, name): signal.SIG_IGN for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)}}
"""A fresh interpreter's handlers other than ``SIG_DFL`` (CPython sets these at start-up)."""
_UNCATCHABLE: Final = frozenset(getattr(signal, name) for name in ("SIGKILL", "SIGSTOP") if hasattr(signal, name))

_handlers: dict[int, dict[int, Any]] = {}  # world rank -> {signal: handler it set}
_pending: dict[int, list[int]] = {}  # world rank -> signals sent to it, to run when it resumes
_exits: dict[int, int] = {}  # world rank -> the os._exit status one of its threads called for
_ignored: frozenset[int] = frozenset()  # the signals the launcher ignores: a process it starts does too


def reset(getsignal: Callable[[int], Any] | None = None) -> None:
    """A run begins (``getsignal``: the process's own, to read what it ignores) or ends: every
    rank has a started interpreter's handlers again."""
    global _ignored
    _handlers.clear()
    _pending.clear()
    _exits.clear()
    _ignored = frozenset() if getsignal is None else frozenset(
        number for number in signal.valid_signals() if getsignal(number) is signal.SIG_IGN)


def _check(signalnum: Any) -> int:
    """``signalnum`` as CPython's ``signal.signal`` accepts it; its errors otherwise."""
    if isinstance(signalnum, bool) or not isinstance(signalnum, int):
        raise TypeError(f"'{type(signalnum).__name__}' object cannot be interpreted as an integer")
    if not 1 <= signalnum < signal.NSIG:
        raise ValueError("signal number out of range")
    return int(signalnum)


def getsignal(rank: int, signalnum: Any) -> Any:
    """Rank ``rank``'s handler of ``signalnum`` (``signal.getsignal`` inside a rank)."""
    number = _check(signalnum)
    handler = _handlers.get(rank, {}).get(number)
    if handler is None:
        handler = signal.SIG_IGN if number in _ignored else _FRESH.get(number, signal.SIG_DFL)
    return _as_enum(handler)


def set_handler(rank: int, signalnum: Any, handler: Any) -> Any:
    """Set rank ``rank``'s handler of ``signalnum``; return the one it had (``signal.signal``)."""
    number = _check(signalnum)
    if handler not in (signal.SIG_IGN, signal.SIG_DFL) and not callable(handler):
        raise TypeError("signal handler must be signal.SIG_IGN, signal.SIG_DFL, or a callable object")
    if number in _UNCATCHABLE:
        raise OSError(22, "Invalid argument")
    previous = getsignal(rank, number)
    _handlers.setdefault(rank, {})[number] = handler
    return previous


def _as_enum(handler: Any) -> Any:
    """``SIG_DFL`` and ``SIG_IGN`` as ``signal.Handlers`` members, as ``signal.getsignal`` gives them."""
    if handler is signal.SIG_DFL or handler is signal.SIG_IGN or not isinstance(handler, int):
        return handler
    return signal.Handlers(handler)


def deliver(sender: int, target: int, signalnum: Any, frame: FrameType | None, running: bool,
            on_resume: Callable[[int], None]) -> None:
    """``sender`` sends ``signalnum`` to world rank ``target`` (``os.kill`` of its pid).

    ``frame``: the sender's frame, handed to its own handler when it signals
    itself; ``running``: whether ``target`` has a process (it has not ended);
    ``on_resume``: asks the engine to call ``run_pending`` when ``target`` next resumes.
    """
    number = signalnum if isinstance(signalnum, int) and signalnum == 0 else _check(signalnum)
    if not running:
        raise ProcessLookupError(3, "No such process")
    if number == 0:
        return
    if target == sender:
        _run(target, number, frame)
        return
    _pending.setdefault(target, []).append(number)
    on_resume(target)


def end(target: int, status: int, on_resume: Callable[[int], None]) -> None:
    """A thread of world rank ``target`` called ``os._exit(status)``: the rank ends with
    ``status`` when it next resumes, its handlers and ``atexit`` handlers left out."""
    _exits.setdefault(target, status)
    on_resume(target)


def run_pending(rank: int, frame: FrameType | None) -> None:
    """Rank ``rank`` resumes: end it if one of its threads called ``os._exit``, else run the
    handlers of the signals sent to it meanwhile, in order."""
    status = _exits.pop(rank, None)
    if status is not None:
        _pending.pop(rank, None)
        raise ProcessExit(status)
    for number in _pending.pop(rank, []):
        _run(rank, number, frame)


def _run(rank: int, number: int, frame: FrameType | None) -> None:
    handler = getsignal(rank, number)
    if handler is signal.SIG_IGN:
        return
    if handler is signal.SIG_DFL:
        if number not in _IGNORED_BY_DEFAULT:
            raise ProcessExit(128 + number)
        return
    handler(number, frame)
