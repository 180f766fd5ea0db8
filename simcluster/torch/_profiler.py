"""torch's profiler inside a rank: each rank profiles its own work, as each process does.

torch's profiler (``torch.profiler.profile``, ``torch.autograd.profiler.profile``)
records through kineto, which is one per process: two ranks of one process
profiling at once crash it (SIGSEGV). torch also keeps a thread-local
profiler, the legacy one, whose state and callbacks belong to the thread that
enabled it; ranks are threads (``engine.sync.ThreadRank``), so inside a rank
the profiler records through that one instead, and a rank's trace holds its
own ops, ``record_function`` spans and collectives, and nothing of the other
ranks.

What a rank gets is torch's own ``profile`` object: ``function_events``,
``events()``, ``key_averages()``, ``table()`` and ``export_chrome_trace()``
work as in a process. Times are the wall clock's, as torch measures them
(the ops ran on this machine); kineto-only outputs (device activity, the
memory timeline, ``experimental_event_tree``) are not there.

The seams (restored when the spawn ends, Rule 1 of ``_session``): ``profile.config``
gives a ``RankConfig`` inside a rank; the module functions
``_prepare_profiler`` / ``_enable_profiler`` / ``_disable_profiler`` that
``profile`` calls enable the thread's legacy profiler for it and return a
``RankTrace``; ``profile._parse_kineto_results`` parses a ``RankTrace``.
Outside ranks every one of them is torch's own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import profiler as _profiler
from torch.autograd import profiler_legacy as _legacy
from torch.autograd.profiler_util import EventList

from simcluster.engine import sync as _sync

_SEAMS = ("_prepare_profiler", "_enable_profiler", "_disable_profiler")


class RankConfig:
    """A rank's profiler configuration: the legacy profiler's, from the ``profile`` asking."""

    def __init__(self, prof: Any) -> None:
        self.legacy = torch._C._profiler.ProfilerConfig(
            torch._C._profiler.ProfilerState.CPU, prof.record_shapes, prof.profile_memory,
            prof.with_stack, prof.with_flops, prof.with_modules,
            torch._C._profiler._ExperimentalConfig())


class RankTrace:
    """What a rank's profile holds once stopped: its own records, read as torch reads them."""

    def __init__(self, records: Any) -> None:
        self._records = records
        self._events: list[Any] | None = None

    def function_events(self) -> list[Any]:
        """The records as torch's ``FunctionEvent`` objects."""
        if self._events is None:
            self._events = _legacy._parse_legacy_records(self._records)
        return list(self._events)

    def save(self, path: str) -> None:
        """Write the trace in Chrome's JSON format, as kineto lays it out (``export_chrome_trace``).

        torch writes the events (``EventList.export_chrome_trace``); kineto's
        file is an object whose ``"traceEvents"`` holds them, and tools read that.
        """
        EventList(self.function_events()).export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"schemaVersion": 1, "traceEvents": events}, f)

    def __bool__(self) -> bool:
        return True


class RankProfilers:
    """Puts the seams in place for one spawn and takes them out again."""

    def __init__(self) -> None:
        self._saved: dict[str, Any] = {}
        self._local = threading.local()

    def install(self) -> None:
        module = _profiler
        for name in _SEAMS:
            self._saved[name] = getattr(module, name)
        self._saved["config"] = module.profile.__dict__["config"]
        self._saved["parse"] = module.profile.__dict__["_parse_kineto_results"]
        module._prepare_profiler = self._prepare
        module._enable_profiler = self._enable
        module._disable_profiler = self._disable
        module.profile.config = self._config(self._saved["config"])
        module.profile._parse_kineto_results = self._parse(self._saved["parse"])

    def restore(self) -> None:
        if not self._saved:
            return
        module = _profiler
        for name in _SEAMS:
            setattr(module, name, self._saved[name])
        module.profile.config = self._saved["config"]
        module.profile._parse_kineto_results = self._saved["parse"]
        self._saved.clear()

    # ---- the seams ----

    def _config(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def config(prof: Any, create_trace_id: bool = False) -> Any:
            if _sync.current() is None:
                return original(prof, create_trace_id)
            return RankConfig(prof)
        config.__doc__ = original.__doc__
        return config

    def _prepare(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(config, RankConfig):
            self._saved["_prepare_profiler"](config, *args, **kwargs)

    def _enable(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(config, RankConfig):
            self._saved["_enable_profiler"](config, *args, **kwargs)
            return
        torch.autograd._enable_profiler_legacy(config.legacy)
        self._local.legacy = True

    def _disable(self) -> Any:
        if not getattr(self._local, "legacy", False):
            return self._saved["_disable_profiler"]()
        self._local.legacy = False
        return RankTrace(torch.autograd._disable_profiler_legacy())

    def _parse(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def parse(prof: Any, result: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(result, RankTrace):
                return result.function_events()
            return original(prof, result, *args, **kwargs)
        return parse


# ---- the backend's spans ----

def open_span(title: str, inputs: list[Any]) -> Any:
    """Start the span a backend records for one operation (gloo's ``"gloo:all_reduce"``).

    Only while this rank profiles (otherwise None, at the cost of one check).
    The span carries the operation's input tensors, so a trace recording
    shapes shows them, as gloo's does.
    """
    if not torch.autograd._profiler_enabled():
        return None
    return torch.autograd._record_function_with_args_enter(title, *inputs)


def close_span(handle: Any) -> None:
    """End a span from another thread, as gloo's worker thread ends its own.

    The span is then an async event (``FunctionEvent.is_async``), as a gloo
    collective's is: the profiler reads a span that ends on another thread
    than it started on as one. The end runs with this rank's profiler state
    (torch propagates it to the future's callback), so it lands in this
    rank's trace; the rank waits for it, so the span is closed before the
    rank's code goes on.
    """
    fut: torch.futures.Future[None] = torch.futures.Future()
    done = torch.ops.profiler._call_end_callbacks_on_jit_fut(handle, fut)
    closer = threading.Thread(target=fut.set_result, args=(None,), name="simcluster-span-end")
    closer.start()
    closer.join()
    done.wait()
