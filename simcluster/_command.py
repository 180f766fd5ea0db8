"""Ctrl-C while the ``simcluster`` command starts: one line and exit status 130, no traceback;
and telling a closed stdout (``simcluster ... | head``) from other broken pipes.

The console script (``simcluster``) and ``python -m simcluster`` import the
whole package before ``cli.main`` runs, which takes a noticeable moment;
a Ctrl-C then would print a ``KeyboardInterrupt`` traceback through
numpy's or the engine's imports. ``guard`` (run when this module is
imported, first thing in the package's ``__init__``) installs a SIGINT
handler that prints ``simcluster: interrupted`` and exits with 130, only
when this process is that command and SIGINT still has Python's default
handler; ``cli.main`` hands Ctrl-C back (``release``) once it can report it
itself. Library users importing simcluster are never affected.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["guard", "reader_gone", "release"]

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C, as a shell reports it (128 + SIGINT)."""


def _is_the_command() -> bool:
    """Whether this process is ``simcluster ...`` or ``python -m simcluster ...``, still starting."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":  # python -m: the package is imported while the module is being found
        orig = list(getattr(sys, "orig_argv", ()))
        return "-m" in orig[:-1] and orig[orig.index("-m") + 1] == "simcluster"
    name = os.path.splitext(os.path.basename(argv0))[0]
    if name not in ("simcluster", "simcluster-script"):  # the console script (-script: Windows)
        return False
    # not a hosting process: multiprocessing's spawned children carry the parent's argv
    mp = sys.modules.get("multiprocessing")
    return mp is None or mp.parent_process() is None


def _starting(signum: int, frame: FrameType | None) -> None:
    """SIGINT before ``cli.main`` took over: one line, then exit as a shell expects."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sys.stderr.write("simcluster: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    raise SystemExit(INTERRUPTED)


def guard() -> None:
    """Make a Ctrl-C while the command starts print one line (see the module docstring)."""
    try:
        if _is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _starting)
    except (ValueError, OSError):  # not the main thread, or no signals here
        pass


def release() -> None:
    """``cli.main`` reports Ctrl-C from here on: give SIGINT back to Python's default handler."""
    try:
        if signal.getsignal(signal.SIGINT) is _starting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except (ValueError, OSError):
        pass


def reader_gone(stream: object) -> bool:
    """Whether ``stream`` is a pipe whose reader has gone away (``simcluster ... | head``).

    A rank's own ``BrokenPipeError`` may come from any pipe; this tells the
    command's stdout apart. False where it cannot be told (no file descriptor,
    no ``poll``).
    """
    try:
        import select

        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)  # type: ignore[attr-defined]
        return any(event & select.POLLERR for _fd, event in poller.poll(0))
    except (AttributeError, ValueError, OSError):
        return False


guard()  # on import: the package's __init__ imports this module first
