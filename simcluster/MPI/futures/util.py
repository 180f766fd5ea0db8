"""``mpi4py.futures.util``: ``collect`` and ``compose``, futures made of other futures.

The futures they return are completed by the callbacks of their inputs; waiting
on one waits on its inputs the way ``mpi4py.futures.wait`` does, so the
masters of MPI executors among them make progress (``_core.DerivedFuture``).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ._core import DerivedFuture, get_comm_workers

__all__ = ["collect", "compose", "get_comm_workers"]


def _settle(future: cf.Future, how: Callable[[], None]) -> None:  # type: ignore[type-arg]
    """Complete ``future`` with ``how()`` unless it is already done (cancelled, or another input won)."""
    if future.done():
        return
    try:
        how()
    except cf.InvalidStateError:
        pass


def collect(fs: Iterable[cf.Future]) -> cf.Future:  # type: ignore[type-arg]
    """Gather futures in a new future whose result is the list of their results.

    It fails with the first exception of an input, is cancelled when an input
    is, and cancelling it cancels the inputs.
    """
    fs = list(fs)
    out = DerivedFuture(fs)
    if not fs:
        out.set_result([])
        return out
    lock = threading.Lock()
    left = [len(fs)]

    def input_done(future: cf.Future) -> None:  # type: ignore[type-arg]
        if future.cancelled():
            out.cancel()
            return
        exc = future.exception(0)
        if exc is not None:
            _settle(out, lambda: out.set_exception(exc))
            return
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            _settle(out, lambda: out.set_result([f.result(0) for f in fs]))

    def output_done(future: cf.Future) -> None:  # type: ignore[type-arg]
        if future.cancelled():
            for f in fs:
                f.cancel()

    out.add_done_callback(output_done)
    for future in fs:
        future.add_done_callback(input_done)
    return out


def compose(future: cf.Future, resulthook: Callable[[Any], Any] | None = None,  # type: ignore[type-arg]
            excepthook: Callable[[BaseException], Any] | None = None) -> cf.Future:  # type: ignore[type-arg]
    """A future completed from ``future``'s outcome through ``resulthook`` / ``excepthook``.

    ``resulthook(result)`` gives its result (None: the input's result);
    ``excepthook(exc)`` gives its exception if it returns one, else its
    result (None: the input's exception). A hook that raises fails it.
    """
    out = DerivedFuture([future])

    def input_done(source: cf.Future) -> None:  # type: ignore[type-arg]
        if source.cancelled():
            out.cancel()
            return
        exc = source.exception(0)
        try:
            if exc is None:
                value = source.result(0)
                if resulthook is not None:
                    value = resulthook(value)
                _settle(out, lambda: out.set_result(value))
            elif excepthook is None:
                _settle(out, lambda: out.set_exception(exc))
            else:
                value = excepthook(exc)
                if isinstance(value, BaseException):
                    _settle(out, lambda: out.set_exception(value))
                else:
                    _settle(out, lambda: out.set_result(value))
        except Exception as hook_exc:  # noqa: BLE001 - a failing hook fails the output
            _settle(out, lambda: out.set_exception(hook_exc))

    def output_done(source: cf.Future) -> None:  # type: ignore[type-arg]
        if source.cancelled():
            future.cancel()

    out.add_done_callback(output_done)
    future.add_done_callback(input_done)
    return out
