"""Each virtual rank's own working directory, as each process has its own.

While a launcher's run goes on, ``_identity.install`` puts ``chdir`` and
``fchdir`` here in place of ``os.chdir`` and ``os.fchdir``: a rank that
changes its directory changes it for itself, the others keep theirs (every
rank starts in the launcher's). The process's directory is the running
rank's: each launcher's switch calls ``enter`` as a rank resumes, which
changes it only when that rank's differs, so that ``open``, ``os.listdir``
and every other relative path resolve as in the rank's own process, and a
run where no rank changes its directory costs nothing. Once the run ends
the launcher's directory is back.

Rule 1: outside the run's ranks the functions are the process's own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

_real_chdir = os.chdir
_real_fchdir = os.fchdir
_launch: str | None = None  # the launcher's directory: where every rank starts
_own: dict[int, str] = {}  # world rank -> its directory, for the ranks that changed theirs
_now: str | None = None  # the process's directory as the ranks last left it
_rank: Callable[[], Any] = lambda: None  # (world rank, node) of the calling rank, or None


def install(rank: Callable[[], Any]) -> None:
    """A run begins: every rank in the launcher's directory."""
    global _launch, _now, _rank
    _launch = _now = os.getcwd()
    _own.clear()
    _rank = rank


def uninstall() -> None:
    """The run ends: the launcher's directory again, whatever the last rank left."""
    global _launch, _now
    if _own and _launch is not None and _now != _launch:
        _real_chdir(_launch)
    _own.clear()
    _launch = _now = None


def enter(rank: int) -> None:
    """World rank ``rank`` resumes: make its directory the process's (if some rank changed one)."""
    global _now
    if _own:
        want = _own.get(rank, _launch)
        if want is not None and want != _now:
            try:
                _real_chdir(want)
            except OSError:  # removed meanwhile: a process would stay in the removed directory
                return
            _now = want


def chdir(path: Any) -> None:
    """``os.chdir`` inside a rank: its own directory changes."""
    _real_chdir(path)
    _moved()


def fchdir(fd: Any) -> None:
    """``os.fchdir`` inside a rank: its own directory changes."""
    _real_fchdir(fd)
    _moved()


def _moved() -> None:
    global _now
    found = _rank()
    _now = os.getcwd()
    if found is not None:
        _own[found[0]] = _now
