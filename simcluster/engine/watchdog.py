"""The wall-clock watchdog behind ``run(timeout=...)`` for ranks that never yield.

The engine checks its deadline between events, but a rank that loops without
awaiting (``while True: pass``) never gives it back control. While a run with
a timeout is going, a daemon thread sleeps until the deadline; past it, if a
rank is being stepped (``Kernel.current``), it raises ``Overtime`` in the
thread running that rank's code (the engine's, or a thread rank's own:
``engine.sync.ThreadRank``) with ``PyThreadState_SetAsyncExc``, the way a debugger
stops a thread. The engine turns that into the usual ``RunTimeoutError`` report.

Rule 1: it fires only while a rank is running, so the exception lands in that
rank's code (or the engine right after it), never in foreign asyncio code.
Rule 2: ``stop()`` ends it under the same lock it fires under, and clears an
exception it raised that has not landed yet: nothing fires after a run ended.
Signals are left alone, so a real Ctrl-C is still a ``KeyboardInterrupt``.
"""

from __future__ import annotations

import os
import threading
from time import monotonic  # bound now: a rank's time.* reads virtual time
import traceback
from typing import TYPE_CHECKING, Any

from . import frames as _frames

if TYPE_CHECKING:
    from .kernel import Kernel as Engine

_POLL = 0.05
"""Seconds between looks once the deadline has passed (no rank was running, or one swallowed it)."""


class Overtime(BaseException):
    """Raised inside a rank that was still running when the run's timeout passed.

    A BaseException, so that a rank's ``except Exception`` does not swallow it.
    """


def _set_async_exc() -> tuple[Any, Any] | None:
    """Return CPython's ``PyThreadState_SetAsyncExc`` twice: to raise, and to clear (NULL).

    None on a Python without it: there, the engine's own checks between events remain.
    """
    try:
        import ctypes

        api = ctypes.pythonapi
        raise_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
            ("PyThreadState_SetAsyncExc", api))
        clear = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
            ("PyThreadState_SetAsyncExc", api))
    except (ImportError, AttributeError):
        return None
    return raise_in, clear


_API: tuple[Any, Any] | None = None


class Watchdog:
    """Interrupt the rank running in this thread once ``deadline`` (time.monotonic) has passed."""

    def __init__(self, engine: Engine, deadline: float) -> None:
        global _API
        if _API is None:
            _API = _set_async_exc()
        self._engine = engine
        self._target = threading.get_ident()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._fired: set[int] = set()  # threads an interrupt was raised in
        if _API is not None:
            threading.Thread(target=self._watch, args=(deadline, _API[0]),
                             name="simcluster-timeout", daemon=True).start()

    def _watch(self, deadline: float, raise_in: Any) -> None:
        wait = deadline - monotonic()
        while not self._stopped.wait(min(max(wait, 0.0), 3600.0)):
            wait = deadline - monotonic()
            if wait > 0:
                continue
            with self._lock:
                if self._stopped.is_set():
                    return
                task = self._engine.current
                if task is not None:  # a rank is running past the deadline
                    target = getattr(task.coro, "thread_ident", None) or self._target
                    raise_in(target, Overtime)
                    self._fired.add(target)
            wait = _POLL  # look again: no rank was running, or one swallowed the interrupt

    def stop(self) -> None:
        """End the watchdog, and clear an interrupt it raised that has not landed yet."""
        with self._lock:
            self._stopped.set()
            if _API is not None:
                for target in self._fired:
                    _API[1](target, None)


def spinning_line(exc: BaseException) -> str:
    """Return ``file:line`` of the innermost user frame an ``Overtime`` interrupted."""
    where = "?"
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if not _frames.is_ours(frame.f_code.co_filename):
            where = f"{os.path.basename(frame.f_code.co_filename)}:{lineno}"
    return where
