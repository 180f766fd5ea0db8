"""Each virtual rank's own exit: its ``atexit`` handlers, and ``os._exit``.

While a launcher's run goes on, ``_identity.install`` puts ``register`` and
``unregister`` in place of ``atexit.register`` and ``atexit.unregister``,
and ``exit_now`` in place of ``os._exit``:

- a rank's ``atexit.register(fn, *args, **kwargs)`` keeps ``fn`` for that
  rank, and the launcher runs the rank's handlers, last registered first, as
  the rank's program ends (``run``): normally, by ``sys.exit``, or by an
  exception, as an interpreter runs them as it exits; still inside the
  rank, with its pid, environment and output. What a handler raises is
  printed to the rank's stderr as CPython prints it ("Exception ignored in
  atexit callback"), and the next one runs. A launched process's handlers
  so run before its process ends, not when this process does.
- a rank's ``os._exit(code)`` ends that rank at once with status ``code``
  (``ProcessExit``), its ``atexit`` handlers left out, as the process would
  end; the other ranks go on. ``finally`` blocks on the rank's stack still
  run, as the rank's stack unwinds.

Rule 1: outside the run's ranks the functions are the process's own.
"""

from __future__ import annotations

import atexit
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

_real_register = atexit.register
_real_unregister = atexit.unregister
_real_exit = os._exit
_handlers: dict[int, list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]] = {}
_rank: Callable[[], Any] = lambda: None  # (world rank, node) of the calling rank, or None


class ProcessExit(SystemExit):
    """A rank called ``os._exit(code)``: it ends now, with ``code``, and runs no ``atexit`` handler."""


def install(rank: Callable[[], Any]) -> None:
    """A run begins: no rank has handlers."""
    global _rank
    _handlers.clear()
    _rank = rank


def uninstall() -> None:
    _handlers.clear()


def register(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``atexit.register`` inside a rank: the rank's own handler."""
    found = _rank()
    if found is None:
        return _real_register(func, *args, **kwargs)
    if not callable(func):
        raise TypeError("the first argument must be callable")
    _handlers.setdefault(found[0], []).append((func, args, kwargs))
    return func


def unregister(func: Callable[..., Any], /) -> None:
    """``atexit.unregister`` inside a rank: every registration of ``func`` by this rank goes."""
    found = _rank()
    if found is None:
        _real_unregister(func)
        return
    own = _handlers.get(found[0])
    if own:
        own[:] = [entry for entry in own if entry[0] != func]


def exit_now(status: int, /) -> None:
    """``os._exit`` inside a rank: the rank ends with ``status`` (``ProcessExit``)."""
    if _rank() is None:
        _real_exit(status)
    raise ProcessExit(status)


def run(rank: int, ending: BaseException | None = None) -> None:
    """Rank ``rank``'s program ends (``ending``: what it raised, if anything): run its handlers,
    last registered first, unless it ended by ``os._exit``; print what one raises and go on."""
    own = _handlers.pop(rank, [])
    if isinstance(ending, ProcessExit):
        return
    while own:
        func, args, kwargs = own.pop()
        try:
            func(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - printed as CPython prints it, then the next
            print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
            tb = exc.__traceback__
            traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None,  # (not this frame)
                                      file=sys.stderr)
