"""Catch simcluster calls whose coroutine was never awaited (``checks="strict"``).

A blocking call (``comm.send``, ``comm.all_reduce``, ``dist.all_reduce``,
``req.wait()``, ``sc.wait_all``) returns a coroutine, and without ``await`` it
never runs: ``dist.all_reduce(t)`` leaves ``t`` unreduced, with only Python's
"was never awaited" warning (often lost). Under strict checks each such call
made from user code is noted with its call site (``note``); whenever a rank
goes back to the engine, ``check`` looks at each noted coroutine:

* started (running, suspended at an await, or done): forgotten;
* never started, and nobody else holds it (the engine's note is its last
  reference) or its rank has finished: nothing can await it any more, so the
  rank fails with an error naming the call and its line;
* never started and owned by an asyncio task (``asyncio.gather``,
  ``create_task``, ``wait_for``): asyncio would run it outside the simulator,
  so the task is cancelled and the rank fails with the advice to use the
  nonblocking forms and ``sc.wait_all``;
* never started but still held (kept in a variable to await later): kept,
  and looked at again at the next return to the engine.

Rule 1: under ``checks="off"`` nothing here runs: the strict ``Comm`` subclass
(``comm._StrictComm``) and the strict branches in ``dist``/``request`` add the notes.
Rule 2: a note holds the caller's frame and the offset of the call, not a
formatted string; text is made only for the error.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from collections.abc import Callable, Coroutine
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol

from . import frames as _frames
from ..errors import SimclusterError

if TYPE_CHECKING:
    from .task import Task

Note = tuple[Coroutine[Any, Any, Any], "Task", FrameType, int, str, "tuple[tuple[str, str], ...] | None"]
"""(coroutine, rank task, calling frame, offset of the call in it, call name, shown arguments)."""


class Noting(Protocol):
    """What a note uses of the kernel (``engine.kernel.Kernel``, as requests see it: ``request.Waker``)."""

    calls: list[Note]  # the noted calls not yet awaited

    @property
    def current(self) -> Task | None:
        """The task being stepped right now."""


class Engine(Noting, Protocol):
    """What the check of the notes uses of the kernel (``engine.kernel.Kernel``)."""

    @property
    def failure(self) -> tuple[Task, BaseException] | None:
        """The task that stopped the run and its exception, if one did."""

    def fail(self, task: Task, exc: BaseException) -> None:
        """Stop the run now: ``task`` failed with ``exc``."""

_HELD = 3
"""``sys.getrefcount`` of a noted coroutine that nobody else holds (the note, a local, the argument)."""

_FACADE_DEPTH = 5
"""Frames of simcluster's own code between a facade's ``note`` and the user's call, at most."""

_OURS: dict[CodeType, bool] = {}
"""Whether a code object is simcluster's own (cached: the path test is slow)."""


def _ours(code: CodeType) -> bool:
    ours = _OURS.get(code)
    if ours is None:
        ours = _OURS[code] = _frames.is_ours(code.co_filename)
    return ours


# ---- noting calls ----

def note(engine: Noting, coro: Coroutine[Any, Any, Any], name: str,
         args: tuple[tuple[str, str], ...] | None = None) -> None:
    """Remember ``coro``, returned by the call ``name``, made by the user code that called simcluster.

    Walks out of a few of simcluster's own frames to the user's call
    (``dist.gather_object`` calls ``dist.gather``); a call that simcluster's own
    code made (a helper task's ``wait_any``) is not noted. ``args`` are the arguments to show, as (name, text)
    pairs (an empty name shows the text alone); None shows those the coroutine
    itself was called with.
    """
    task = engine.current
    if task is None:  # outside any rank: the call fails when awaited (RunChecks.outside)
        return
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_FACADE_DEPTH):
        if frame is None or not _ours(frame.f_code):
            break
        frame = frame.f_back
    if frame is None or _ours(frame.f_code):  # simcluster's own call (a helper task, MPI)
        return
    calls = engine.calls
    if calls and calls[-1][0] is coro:  # a facade call noting what an inner call returned
        calls.pop()
    calls.append((coro, task, frame, frame.f_lasti, name, args))


def noting(name: str, method: Callable[..., Coroutine[Any, Any, Any]],
           shown: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Wrap a ``Comm`` coroutine method so that calls from user code are noted.

    A call from simcluster's own code (``split`` calling ``all_gather``, the
    ``dist`` facade, ``simcluster.MPI``) is not noted: the caller awaits it, or
    notes its own awaitable. ``shown``: the method whose name and docstring the
    wrapper takes (default ``method``).
    """
    def call(self: Any, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        coro = method(self, *args, **kwargs)
        frame = sys._getframe(1)
        code = frame.f_code
        ours = _OURS.get(code)
        if ours is None:
            ours = _ours(code)
        if not ours:
            engine = self.kernel
            task = engine.current
            if task is not None:
                engine.calls.append((coro, task, frame, frame.f_lasti, name, None))
        return coro

    shown = shown or method
    call.__name__ = shown.__name__
    call.__qualname__ = shown.__qualname__
    call.__doc__ = shown.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]
    return call


# ---- checking them ----

def check(engine: Engine) -> None:
    """Look at every noted call after a rank went back to the engine; fail its rank if unawaited."""
    calls = engine.calls
    kept: list[Note] = []
    for call in calls:
        coro = call[0]
        if inspect.getcoroutinestate(coro) != inspect.CORO_CREATED:
            continue  # awaited: done, waiting at an await, or running
        task = call[1]
        if engine.failure is not None:  # the run is stopping: only tidy up
            _drop(coro)
            continue
        held = sys.getrefcount(coro) > _HELD
        if held and task.state != 4:  # FINISHED: its rank can no longer await it
            owner = _asyncio_task(coro)
            if owner is None:
                kept.append(call)  # kept to be awaited later: look again next time
                continue
            owner.cancel()
            engine.fail(task, _handed_to_asyncio(call))
            continue
        error = _never_awaited(call)
        coro.close()
        engine.fail(task, error)
    engine.calls = kept


def _drop(coro: Coroutine[Any, Any, Any]) -> None:
    """Make sure an unstarted coroutine never runs, nor warns that it was never awaited."""
    owner = _asyncio_task(coro)
    if owner is not None:
        owner.cancel()
    else:
        coro.close()


def _asyncio_task(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
    """Return the asyncio task that holds ``coro`` (it was passed to gather/create_task), if any."""
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no running loop
        return None
    for task in tasks:
        if task.get_coro() is coro:
            return task
    return None


# ---- what the errors say ----

_NONBLOCKING = {
    "send": "isend", "ssend": "issend", "recv": "irecv", "sendrecv": "isend and irecv",
    "barrier": "ibarrier", "broadcast": "ibroadcast", "scatter": "iscatter", "gather": "igather",
    "reduce": "ireduce", "all_reduce": "iall_reduce", "reduce_scatter": "ireduce_scatter",
    "scan": "iscan", "exscan": "iexscan", "all_gather": "iall_gather", "all_to_all": "iall_to_all",
}
"""The nonblocking twin of each blocking ``Comm`` call."""

_SHOWN = {
    "send": ("dst", "tag"), "ssend": ("dst", "tag"), "recv": ("buf", "src", "tag"),
    "sendrecv": ("dst", "src"), "probe": ("src", "tag"), "sleep": ("seconds",),
    "split": ("color", "key"), "new_group": ("ranks",), "broadcast": ("src",), "scatter": ("src",),
    "gather": ("dst",), "reduce": ("dst", "op"), "all_reduce": ("op",), "reduce_scatter": ("op",),
    "scan": ("op",), "exscan": ("op",),
}
"""The arguments an error shows for each ``Comm`` call, as the call's own errors show them."""


def show(name: str, value: object) -> str:
    """Format one argument as simcluster's messages do (ops by name, buffers described)."""
    if name == "op":
        return "SUM" if value is None else str(getattr(value, "name", value))
    if name == "buf":
        from ..payload import describe

        return describe(value)
    return repr(value)


def _call_text(call: Note) -> str:
    coro, name, args = call[0], call[4], call[5]
    if name == "Request.wait":  # the request is the argument of _waits.wait_one
        local = inspect.getcoroutinelocals(coro)
        return f"{getattr(local.get('request'), 'op', 'request')}.wait()"
    if args is None:
        local = inspect.getcoroutinelocals(coro)
        args = tuple((key, show(key, local[key])) for key in _SHOWN.get(name, ())
                     if key in local and not (key == "buf" and local[key] is None))
    return f"{name}({', '.join(f'{key}={text}' if key else text for key, text in args)})"


def _where(call: Note) -> str:
    """``file.py:42``: the line of the noted call (from the frame's code and the call's offset)."""
    code, offset = call[2].f_code, call[3]
    line = code.co_firstlineno
    for start, end, number in code.co_lines():
        if start <= offset < end and number is not None:
            line = number
            break
    return f"{os.path.basename(code.co_filename)}:{line}"


def _bare(name: str) -> str:
    return name.rpartition(".")[2]


def _never_awaited(call: Note) -> SimclusterError:
    name = call[4]
    text, where = _call_text(call), _where(call)
    if name.startswith("dist."):
        fix = (f"add await: await {name}(...), as every simcluster.dist call is a coroutine "
               "(torch.distributed's return at once); to run torch code unchanged, use "
               "torch.distributed with the 'simcluster' backend (simcluster.torch)")
    elif name == "Request.wait":
        fix = "write await req.wait(), or await req"
    elif name.startswith("wait_"):
        fix = f"write await sc.{name}(...)"
    else:
        twin = _NONBLOCKING.get(name)
        fix = f"write await comm.{name}(...)" + (
            f", or start it with comm.{twin}(...) and wait on the request" if twin else "")
    return SimclusterError(call[1].rank, text, f"the call at {where} was never awaited, so it never "
                           "ran", fix)


def _handed_to_asyncio(call: Note) -> RuntimeError:
    name = _bare(call[4])
    twin = _NONBLOCKING.get(name)
    form = f"the nonblocking form comm.{twin}(...)" if twin else \
        "the nonblocking forms (comm.isend/irecv/i<collective>)"
    return RuntimeError(
        f"rank {call[1].rank}: {_call_text(call)}: the call at {_where(call)} was handed to "
        "asyncio.gather/create_task, which run coroutines outside the simulator; use "
        f"{form} and sc.wait_all instead")


def advice(call: str) -> str:
    """The fix for a simcluster call made or awaited outside its rank (``RunChecks.outside``)."""
    twin = _NONBLOCKING.get(_bare(call.partition("(")[0]))
    if twin is None:
        return "use the nonblocking forms (isend/irecv/i<collective>) and sc.wait_all instead"
    return f"use the nonblocking form comm.{twin}(...) and sc.wait_all instead"
