"""The coordinator: starts the hosting processes, hears how their rounds ended, gathers the result.

Runs in the caller's event loop (``launch``). For a local run it starts
``procs`` processes (``multiprocessing``, forkserver where the OS has it,
else spawn), each running ``hosting.host.child_main``; for a multi-node run every
node process runs ``hosting.host.Host`` itself and node 0 also runs this
coordinator at ``master_addr:master_port``. Either way each hosting process
connects back over an authenticated stream (the control link) and the
protocol of ``hosting.host`` takes over, in the typed messages of ``hosting.control``:
HELLO, START, READY, GO; the processes then run their rounds among
themselves (``hosting.rounds``) and each sends DONE, the same verdict from all: every
rank has finished (then FINISH/RESULTS), a rank failed, or the run deadlocked
(DESCRIBE/BLOCKED). A multi-node run ends with FINAL (the result, for every
node) answered by BYE: node 0 closes the control links only after every BYE,
so no node mistakes the close for a failure.

Rule 1: never a hang. Every wait here has a deadline or watches the
processes: a control link that closes or a process that exits ends the run
at once with an error naming the lost ranks; the run's ``timeout`` bounds the
rest; whatever happens, every process is stopped, killed after a short grace
period if it does not go, and every shared-memory segment of the run unlinked.
Rule 2: errors keep the memory transport's shape: ``RankError`` with the
rank's exception (rebuilt, traceback included) as ``__cause__``,
``DeadlockError`` with the same report, built by ``engine.deadlock_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import pickle
import secrets
import signal
import sys
from time import monotonic as _monotonic, perf_counter as _perf_counter  # bound now: a rank's time.* reads virtual time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from simcluster.transports import shm as _shm
from simcluster.transports.mpi import MpiTransport
from simcluster.transports.base import Envelope, TransportError
from simcluster.transports.tcp import STREAM_LIMIT, Link, TcpTransport, accept_handshake
from simcluster.transports.tcp import log as _log

from . import control as C
from . import host as H
from . import mpi_job as _mpi_job, remote as _remote
from .._config import SECRET_ENV, RunConfig
from .local_link import LocalLink
from .._result import RunResult, Stats
from ..engine.assembly import deadlock_error
from ..errors import RankError, RunTimeoutError, SimclusterError, UsageError
from ..trace import Counter, Message, Span, Trace

_GRACE: Final = 2.0  # seconds a process gets to exit before it is killed
_FAREWELL: Final = 10.0  # seconds node 0 waits for every node to acknowledge the result (BYE)
_NO_MAIN_GUARD: Final = 87  # exit code of a hosting process that re-ran an unguarded script
_VERBOSE_ENV: Final = "SIMCLUSTER_VERBOSE"
_LOST_WAIT: Final = 1.0  # seconds to wait for a peer's own death notice after a link error
_SECRET_ENV: Final = SECRET_ENV

_LOST = object()

M = TypeVar("M", bound=C.Message)


class _Proc:
    """One hosting process as the coordinator sees it."""

    __slots__ = ("index", "lo", "hi", "process", "link", "pid", "addr", "unfinished", "dead",
                 "errored")

    def __init__(self, index: int, lo: int, hi: int) -> None:
        self.index = index
        self.lo = lo
        self.hi = hi
        self.process: Any = None  # multiprocessing.Process for local runs
        self.link: Link | LocalLink | None = None
        self.pid: int | None = None
        self.addr: tuple[str, int] | None = None
        self.unfinished = hi - lo
        self.dead = asyncio.Event()
        self.errored = False  # it reported an error of its own before going away

    @property
    def ranks(self) -> str:
        return f"rank {self.lo}" if self.hi - self.lo == 1 else f"ranks {self.lo}-{self.hi - 1}"

    def name(self) -> str:
        pid = f", pid {self.pid}" if self.pid is not None else ""
        return f"process {self.index} ({self.ranks}{pid})"


class Coordinator:
    """Drives one multi-process run; see the module docstring."""

    def __init__(self, config: RunConfig, secret: bytes, run_id: str, *,
                 progress: Callable[[int, int, float], None] | None,
                 check_digest: bool) -> None:
        self.config = config
        self.transport = _hosted_transport(config)
        self.secret = secret
        self.run_id = run_id
        self.timeout = timeout = config.timeout
        self.progress = progress
        self.check_digest = check_digest
        self.procs = [_Proc(p, *config.block(p)) for p in range(config.nprocs)]
        self.queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self.server: asyncio.AbstractServer | None = None
        self.started = _monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.now = 0.0
        self.finished = False
        self.rounds = 0  # the processes' rounds (from DONE), windows among them
        self.windows = 0
        pickled = config.serializer == "pickle"
        self.dumps = pickle.dumps if pickled else None
        self.loads = pickle.loads if pickled else None
        self._pumps: list[asyncio.Task[None]] = []

    # ---- connections ----

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Accept hosting processes on ``host:port`` (0: any free port); return the address."""
        try:
            self.server = await asyncio.start_server(self._accepted, host, port,
                                                     limit=STREAM_LIMIT)
        except OSError as exc:
            raise TransportError(None, "run", f"cannot listen on {host}:{port} ({exc})",
                                 "pick another master port, or free this one",
                                 peer=f"{host}:{port}") from None
        got = self.server.sockets[0].getsockname()
        return str(got[0]), int(got[1])

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        tp = self.transport
        try:
            await accept_handshake(reader, writer, self.secret, tp.connect_timeout)
            link = Link(reader, writer, f"{peer}", tp.max_frame)
            first = await asyncio.wait_for(link.first(), tp.connect_timeout)
        except (TransportError, asyncio.TimeoutError, OSError) as exc:
            _log.warning("simcluster: refused a connection from %s: %s", peer, exc)
            writer.close()
            return
        except asyncio.CancelledError:
            # the run stopped (Ctrl-C) while this process connected; raising would make
            # asyncio's server log the cancelled handler as "Exception in callback"
            writer.close()
            return
        index = first.src
        if first.tag not in (C.HELLO, C.ERROR) or not 0 <= index < len(self.procs) \
                or self.procs[index].link is not None:
            _log.warning("simcluster: refused a connection from %s: it introduced itself as "
                         "process %r, which is not expected", peer, index)
            writer.close()
            return
        proc = self.procs[index]
        link.rename(proc.name())
        proc.link = link
        self.queue.put_nowait((index, first))
        self._pumps.append(asyncio.ensure_future(self._pump(proc, link)))

    def attach(self, link: LocalLink) -> None:
        """Take the host beside us in this process, over an in-process link (no handshake needed)."""
        self._pumps.append(asyncio.ensure_future(self._attached(link)))

    async def _attached(self, link: LocalLink) -> None:
        first = await link.first()
        proc = self.procs[first.src]
        link.rename(proc.name())
        proc.link = link
        self.queue.put_nowait((proc.index, first))
        self._pumps.append(asyncio.ensure_future(self._pump(proc, link)))

    async def _pump(self, proc: _Proc, link: Link | LocalLink) -> None:
        def got(env: Envelope) -> None:
            if env.tag == C.ERROR:
                proc.errored = True
            self.queue.put_nowait((proc.index, env))

        try:
            await link.pump(got)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not link.closing:
                self.queue.put_nowait((proc.index, exc))
        proc.dead.set()
        self.queue.put_nowait((proc.index, _LOST))

    def send(self, proc: _Proc, message: C.Message) -> None:
        if proc.link is not None and not proc.link.closing:
            try:
                proc.link.send(C.envelope(message, proc.index, self.dumps))
            except (OSError, RuntimeError):
                pass

    # ---- waiting for messages ----

    def _remaining(self, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        return max(0.0, deadline - _monotonic())

    async def gather(self, kind: type[M], waiting: set[int], deadline: float | None,
                     what: str) -> dict[int, M]:
        """Wait for a message of type ``kind`` from each process in ``waiting``; return them.

        Raises:
            the error a process reported, TransportError for a lost process,
            RunTimeoutError (or TransportError while connecting) at ``deadline``.
        """
        got: dict[int, M] = {}
        while waiting:
            try:
                index, item = await asyncio.wait_for(self.queue.get(), self._remaining(deadline))
            except asyncio.TimeoutError:
                raise await self._timed_out(what, waiting) from None
            proc = self.procs[index]
            if item is _LOST or isinstance(item, BaseException):
                if self.finished and kind is not C.Results:
                    continue
                raise self._lost(proc, item if isinstance(item, BaseException) else None)
            env: Envelope = item
            if env.tag == C.TICK:
                tick = C.read(env)
                assert isinstance(tick, C.Tick)
                self._tick(tick)
                continue
            if env.tag != kind.op or index not in waiting:
                if env.tag == C.ERROR:
                    error = C.read(env)
                    assert isinstance(error, C.Error)
                    raise await self._reported(proc, error)
                raise TransportError(None, "run", f"{proc.name()} sent {C.OP_NAMES.get(env.tag, env.tag)} "
                                     f"while the coordinator waited for {C.OP_NAMES[kind.op]}",
                                     "every process must run the same simcluster version",
                                     peer=proc.name())
            waiting.discard(index)
            message = C.read(env, self.loads)
            assert isinstance(message, kind)
            got[index] = message
            time = getattr(message, "time", None)
            if time is not None:  # REPORT, BLOCKED, LINES
                self.now = max(self.now, time)
        return got

    def _lost(self, proc: _Proc, exc: BaseException | None) -> SimclusterError:
        """The error for a hosting process that went away."""
        how = "closed its control connection"
        process = proc.process
        if process is not None:
            process.join(0.5)
            code = process.exitcode
            if code is not None and code < 0:
                try:
                    how = f"was killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"was killed by signal {-code}"
            elif code is not None:
                how = f"exited with code {code}"
        elif exc is not None:
            how = f"failed ({exc})"
        fix = "look for that process's own output (out of memory? killed?)"
        if proc.link is None and process is not None and process.exitcode == _NO_MAIN_GUARD:
            script = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
            error = TransportError(
                None, "run", f"{proc.name()} could not start: {script} calls run() when it is "
                "imported, and every hosting process imports it again",
                'put the sc.run(...) call under `if __name__ == "__main__":` '
                f"({_VERBOSE_ENV}=1 shows the hosting processes' tracebacks)", peer=proc.name())
            error.ranks = list(range(proc.lo, proc.hi))  # type: ignore[attr-defined]
            return error
        if proc.link is None:
            how += " before it connected"
            fix = ("look for its own output above; a script that calls run() must do so under "
                   "`if __name__ == \"__main__\":`, as with multiprocessing")
        error = TransportError(None, "run", f"{proc.name()} {how}; {proc.ranks} lost", fix,
                               peer=proc.name())
        error.ranks = list(range(proc.lo, proc.hi))  # type: ignore[attr-defined]
        return error

    async def _reported(self, proc: _Proc, error: C.Error) -> BaseException:
        """Turn an ERROR from a process into the exception to raise (a lost peer wins)."""
        exc = _remote.decode_exception(error.exc, proc.name())
        if error.transport and isinstance(exc, TransportError):
            # a broken link is most often a peer that died: wait for its own notice
            end = _monotonic() + _LOST_WAIT
            while True:
                others = [p for p in self.procs if p is not proc and not p.errored]
                done = [p for p in others if p.dead.is_set()]
                if done:
                    return self._lost(done[0], None)
                left = end - _monotonic()
                if not others or left <= 0:
                    break
                waits = [asyncio.ensure_future(p.dead.wait()) for p in others]
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
        return exc

    async def _timed_out(self, what: str, waiting: set[int]) -> SimclusterError:
        if self.deadline is None or _monotonic() < self.deadline:  # connect deadline
            names = ", ".join(self.procs[i].name() for i in sorted(waiting))
            return TransportError(None, "run", f"{names} did not {what} within "
                                  f"{self.transport.connect_timeout:g}s",
                                  "look for its own error output, or raise connect_timeout",
                                  peer=names)
        lines = [f"timed out after {self.timeout}s of wall time at virtual time {self.now:.9g}s"]
        live = [p for p in self.procs if p.link is not None and not p.dead.is_set()]
        for p in live:
            self.send(p, C.Timeout())
        answers: dict[int, list[str]] = {}
        end = _monotonic() + 1.0
        pending = {p.index for p in live}
        while pending:
            try:
                index, item = await asyncio.wait_for(self.queue.get(), max(0.0, end - _monotonic()))
            except asyncio.TimeoutError:
                break
            if isinstance(item, Envelope) and item.tag == C.LINES:
                try:
                    message = C.read(item)
                except TransportError:
                    continue
                assert isinstance(message, C.Lines)
                answers[index] = message.lines
                pending.discard(index)
        for p in self.procs:
            if p.index in answers:
                lines += answers[p.index]
            elif p.unfinished:
                lines.append(f"  {p.name()} did not answer: a rank there may loop without awaiting")
        lines.append("look for a rank that loops without awaiting, or awaits real I/O that never ends")
        return RunTimeoutError(None, "run", "\n".join(lines), "")

    # ---- the run ----

    async def connect(self) -> None:
        """Wait for every process's HELLO, hand out the peer table, wait for READY."""
        tp = self.transport
        deadline = _monotonic() + tp.connect_timeout
        hello = await self.gather(C.Hello, {p.index for p in self.procs}, deadline, "connect")
        table: list[tuple[str, int]] = []
        for index, message in sorted(hello.items()):
            proc = self.procs[index]
            proc.pid = message.pid
            proc.addr = message.addr
            table.append(message.addr)
            if proc.link is not None:
                proc.link.peer = proc.name()  # now with its pid (the decoder keeps the short name)
            if self.check_digest and message.digest != self.config.digest():
                raise UsageError(
                    None, "run", f"node {index} was started with other settings than node 0:\n"
                    f"  node 0: {self.config.digest()}\n  node {index}: {message.digest}",
                    "start every node with the same script, world size and options")
        for proc in self.procs:
            self.send(proc, C.Start(table))
        deadline = _monotonic() + tp.connect_timeout
        await self.gather(C.Ready, {p.index for p in self.procs}, deadline, "connect to its peers")
        for proc in self.procs:
            self.send(proc, C.Go())

    async def step(self) -> None:
        """Wait while the processes run their rounds (``hosting.rounds``); raise the run's error, if any.

        Every process sends the same verdict (DONE); process 0's is taken. A
        rank that failed first, by virtual time, ends the run with its
        RankError; a deadlock, with every process's blocked ranks and handshakes under way.
        """
        done = await self.gather(C.Done, {p.index for p in self.procs}, self.deadline, "answer")
        verdict = done[0]
        self.rounds, self.windows = verdict.rounds, verdict.windows
        self.now = max(self.now, verdict.time)
        for proc, unfinished in zip(self.procs, verdict.unfinished):
            proc.unfinished = unfinished
        if verdict.exc is not None:
            exc = _remote.decode_exception(verdict.exc, self.procs[verdict.proc].name())
            if not isinstance(exc, Exception) or verdict.rank is None:
                raise exc
            error = RankError(verdict.rank, exc)
            if verdict.crashed:  # what the fault plan crashed, for the report
                error.crashed = {int(rank): float(t) for rank, t in verdict.crashed}
            raise error from exc
        if verdict.deadlock:
            raise await self._deadlock(self.now)

    def _tick(self, tick: C.Tick) -> None:
        self.now = max(self.now, tick.time)
        if self.progress is not None:
            self.progress(tick.finished, self.config.world_size, tick.time)

    async def _deadlock(self, now: float) -> SimclusterError:
        # Every process answers, not only those with ranks left: a finished rank's send may
        # still wait for its receiver, and the report lists its handshake.
        for proc in self.procs:
            self.send(proc, C.Describe())
        got = await self.gather(C.Blocked, {p.index for p in self.procs}, self.deadline, "answer")
        answers = [got[proc.index] for proc in self.procs]  # by process: by the ranks they host
        entries: list[C.BlockedEntry] = []
        for blocked in answers:  # every process's ranks first, then every process's helpers
            entries += blocked.tasks
        for blocked in answers:
            entries += blocked.helpers
        handshakes = [line for blocked in answers for line in blocked.handshakes]
        return deadlock_error(entries, now, handshakes=handshakes[:C.HANDSHAKES_LISTED],
                              handshake_count=sum(blocked.handshake_count for blocked in answers))

    async def finish(self) -> dict[int, C.Results]:
        """Collect every process's results (after the last round)."""
        self.finished = True
        for proc in self.procs:
            self.send(proc, C.Finish())
        got = await self.gather(C.Results, {p.index for p in self.procs}, self.deadline,
                                "send its results")
        for index, results in sorted(got.items()):
            bad = results.unsendable
            if bad is not None:
                exc = _remote.decode_exception(bad.exc, self.procs[index].name())
                raise RankError(bad.rank, exc) from exc
        return got

    async def farewell(self, timeout: float) -> None:
        """Wait until every process has answered FINAL with BYE (or gone away), at most ``timeout`` s.

        Only then may the control links close: a node that saw the close
        before the result would report a failure that never happened.
        """
        waiting = {p.index for p in self.procs if p.link is not None and not p.dead.is_set()}
        end = _monotonic() + timeout
        while waiting:
            try:
                index, item = await asyncio.wait_for(self.queue.get(),
                                                     max(0.0, end - _monotonic()))
            except asyncio.TimeoutError:
                names = ", ".join(self.procs[i].name() for i in sorted(waiting))
                _log.warning("simcluster: %s did not acknowledge the run's result within %gs; "
                             "closing anyway", names, timeout)
                return
            if item is _LOST or (isinstance(item, Envelope) and item.tag == C.BYE):
                waiting.discard(index)

    def stop(self, error: BaseException | None = None) -> None:
        """Tell every process to stop (node processes get ``error`` to raise)."""
        exc = None
        if error is not None and self.check_digest:
            exc = _remote.encode_exception(error, cause=True)
        for proc in self.procs:
            self.send(proc, C.Stop(exc))

    async def close(self, grace: float = _GRACE) -> None:
        """Close every link and the listener; give processes ``grace`` seconds, then kill them.

        A hosting process exits when its control link closes, so closing the
        links is what ends them after a good run. An interrupted run
        (Ctrl-C) passes 0: its processes are killed at once.
        """
        for proc in self.procs:
            if proc.link is not None:
                if grace:
                    try:
                        await asyncio.wait_for(proc.link.drain(), 0.5)
                    except (asyncio.TimeoutError, OSError, RuntimeError):
                        pass
                proc.link.close()
        if self.server is not None:
            self.server.close()
        await _reap([p.process for p in self.procs if p.process is not None], grace)
        for task in self._pumps:
            task.cancel()

    # ---- the result ----

    def result_parts(self, results: dict[int, C.Results]) -> C.FinalResult:
        """Merge every process's RESULTS into the whole run's result (rank order)."""
        w = self.config.world_size
        values: list[Any] = []
        times: list[float] = []
        stats: list[list[int]] = [[], [], [], []]
        leaks: list[str] = []
        spans: list[list[Any]] = []
        messages: list[list[Any]] = []
        receipts: list[list[Any]] = []
        counters: list[list[Any]] = []
        crashed: list[list[Any]] = []
        calls: list[list[Any]] = []
        for index in range(len(self.procs)):
            part = results[index]
            values += part.values
            times += part.times
            crashed += part.crashed
            calls += part.calls
            for mine, theirs in zip(stats, part.stats):
                mine += theirs
            leaks += part.leaks
            if part.trace is not None:
                spans += part.trace.spans
                messages += part.trace.messages
                receipts += part.trace.receipts
                counters += part.trace.counters
        assert len(values) == w
        trace = None
        if self.config.tracing:
            trace = C.TraceParts(spans, messages, receipts, counters)
        return C.FinalResult(C.Results(values, times, stats, leaks, trace, None, crashed, calls),
                             len(self.procs), (self.rounds, self.windows))


def build_result(final: C.FinalResult, world_size: int, wall: float) -> RunResult:
    """Make the RunResult from the whole run's result (also used by node processes)."""
    parts = final.results
    stats = Stats(*(tuple(int(n) for n in column) for column in parts.stats))
    trace = None
    if parts.trace is not None:
        trace = _merge_trace(parts.trace, world_size, final.procs)
    values = [_remote.raise_result(value) for value in parts.values]
    return RunResult(values, [float(t) for t in parts.times], stats, wall,
                     trace, list(parts.leaks), final.rounds,
                     crashed={int(rank): float(t) for rank, t in parts.crashed} if parts.crashed else None,
                     calls={(int(rank), str(kind)): int(n) for rank, kind, n in parts.calls}
                     if parts.calls else None)


def _merge_trace(raw: C.TraceParts, world_size: int, procs: int) -> Trace:
    """Join every process's spans and messages; number messages in the order they were sent."""
    spans = [Span(int(r), str(n), float(s), float(e), dict(a)) for r, n, s, e, a in raw.spans]
    spans.sort(key=lambda s: (s.start, s.end, s.rank))
    by_key: dict[tuple[int, int], Message] = {}
    for mid, src, dst, tag, nbytes, sent, recv, comm in raw.messages:
        by_key[(src, mid)] = Message(mid, src, dst, tag, nbytes, sent, recv, comm)
    for src, mid, now in raw.receipts:
        message = by_key.get((src, mid))
        if message is not None and message.recv is None:
            message.recv = now
    messages = sorted(by_key.values(), key=lambda m: (m.sent, m.src, m.id))
    for number, message in enumerate(messages, 1):
        message.id = number
    counters = [Counter(str(name), float(t), float(value)) for name, t, value in raw.counters]
    return Trace(world_size, spans, messages, procs=procs, counters=counters)


# ---- processes ----

_PRELOAD: Final = ("simcluster.hosting.host", "simcluster.collectives")
_HEAVY: Final = ("pytest", "hypothesis", "scipy", "pandas", "torch", "cupy", "jax",
                 "array_api_strict")
"""Imported once in the forkserver when the caller has them, so children start warm."""
_preloaded: tuple[str, ...] = ()


def _context() -> Any:
    """The multiprocessing context for hosting processes: forkserver where it exists, else spawn.

    ``SIMCLUSTER_START_METHOD`` overrides it. The forkserver imports simcluster
    (and the heavy libraries the caller has imported, such as pytest or torch)
    once, so each hosting process starts in milliseconds instead of importing
    them again; when the caller has imported another heavy library since, the
    server is restarted with it.
    """
    global _preloaded
    method = os.environ.get("SIMCLUSTER_START_METHOD") or (
        "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        wanted = (*_PRELOAD, *(name for name in _HEAVY if name in sys.modules))
        if wanted != _preloaded:
            if _preloaded:
                # XX: a private method (multiprocessing's own tests use it); without it the
                # server keeps its old preload and children import the new library themselves.
                from multiprocessing import forkserver

                stop = getattr(forkserver._forkserver, "_stop", None)
                if stop is not None:
                    stop()
            _preloaded = wanted
            ctx.set_forkserver_preload(list(wanted))
    return ctx


@contextlib.contextmanager
def _ctrl_c_held(ctx: Any) -> Iterator[None]:
    """Hold SIGINT back while hosting processes start; a Ctrl-C meanwhile arrives after.

    A terminal's Ctrl-C reaches every process of the foreground group. The
    processes started here (the forkserver, spawned hosts, and the hosts the
    forkserver forks) inherit the blocked signal: one still importing would
    otherwise die with a ``KeyboardInterrupt`` traceback (or, in Python's own
    start-up, ``Fatal Python error``), and the caller waiting for it with an
    ``EOFError``. A host drops what is pending when it starts ignoring SIGINT
    (``host.child_main``: the caller decides when hosts stop); the caller gets
    its Ctrl-C once they are started, and stops the run with its one line.
    As multiprocessing's resource tracker does when it starts.
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows: nothing to hold
        yield
        return
    if ctx.get_start_method() != "fork":
        # first: starting the resource tracker (which spawn and the forkserver do) unblocks
        # SIGINT again, whatever was blocked before
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


async def _reap(processes: Sequence[Any], grace: float) -> None:
    """Wait up to ``grace`` seconds for ``processes`` to exit, then kill the rest."""
    loop = asyncio.get_running_loop()
    end = loop.time() + grace
    for process in processes:
        while process.exitcode is None and loop.time() < end:
            await asyncio.sleep(0.005)
        if process.exitcode is None:
            process.kill()
            process.join(1.0)
        else:
            process.join(0)
        try:
            process.close()
        except ValueError:
            pass


def _watch(proc: _Proc, coordinator: Coordinator) -> None:
    """Notice a local process that exits before its control link tells us."""
    loop = asyncio.get_running_loop()
    fd = proc.process.sentinel

    def exited() -> None:
        loop.remove_reader(fd)
        if proc.link is None:  # died before it could connect: nothing else will tell us
            proc.dead.set()
            coordinator.queue.put_nowait((proc.index, _LOST))
        else:  # its link's EOF follows; if it does not, report the death ourselves
            loop.call_later(_LOST_WAIT, late)

    def late() -> None:
        if not proc.dead.is_set():
            proc.dead.set()
            coordinator.queue.put_nowait((proc.index, _LOST))

    loop.add_reader(fd, exited)


def _unwatch(procs: list[_Proc]) -> None:
    loop = asyncio.get_running_loop()
    for proc in procs:
        if proc.process is not None:
            try:
                loop.remove_reader(proc.process.sentinel)
            except (ValueError, OSError):
                pass


def _refuse_while_bootstrapping() -> None:
    """End a hosting process that reached run() while importing the caller's script.

    ``multiprocessing`` runs the main script again in every process it starts;
    without ``if __name__ == "__main__":`` that second run reaches ``run()``
    before the process has even started. Each such process would print a
    multiprocessing traceback of its own; instead it exits at once with
    ``_NO_MAIN_GUARD`` (``os._exit``: the forkserver turns any exception,
    SystemExit included, into exit code 1), and the caller, seeing that code,
    raises one clear error (``Coordinator._lost``). With ``SIMCLUSTER_VERBOSE=1``
    the process prints where it was first.
    """
    # XX: ``_inheriting`` is private; it is what multiprocessing's own check
    # (spawn._check_not_importing_main) reads, set only while a child imports the main script.
    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    if os.environ.get(_VERBOSE_ENV, "") not in ("", "0"):
        import traceback

        print(f"simcluster: hosting process {os.getpid()} reached run() while importing the main "
              "script (no `if __name__ == \"__main__\":`); it was here:", file=sys.stderr)
        traceback.print_stack(file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(_NO_MAIN_GUARD)


# ---- entry points ----


async def launch(fn: Callable[..., Any], config: RunConfig,
                 progress: Callable[[int, int, float], None] | None = None) -> RunResult:
    """Run ``fn`` on the ranks of ``config``, hosted by several processes; return the RunResult.

    ``config`` comes from ``_config.configure`` (a shm or tcp transport);
    ``progress(finished, world_size, now)`` is called about ten times a wall
    second.
    """
    _refuse_while_bootstrapping()
    wall_start = _perf_counter()
    if config.nnodes > 1:
        final = await _launch_node(config, fn, progress)
    else:
        final = await _launch_local(config, fn, progress)
    result = build_result(final, config.world_size, _perf_counter() - wall_start)
    if result.trace is not None and config.faults is not None:
        config.faults.mark(result.trace, result.elapsed)
    if result.trace is not None and isinstance(config.trace, (str, os.PathLike)):
        result.trace.save(config.trace)
    return result


def _hosted_transport(config: RunConfig) -> TcpTransport:
    """The run's transport, which hosting processes share out (shm and tcp)."""
    transport = config.transport
    if not isinstance(transport, TcpTransport):
        raise TypeError(f"_coordinator: {transport.name} is not a transport of several processes")
    return transport


async def _launch_local(config: RunConfig, fn: Any,
                        progress: Callable[[int, int, float], None] | None) -> C.FinalResult:
    name = getattr(fn, "__name__", "fn")
    blob = _remote.dumps((config, fn), name)
    secret = secrets.token_bytes(32)
    run_id = secrets.token_hex(4)
    coordinator = Coordinator(config, secret, run_id, progress=progress, check_digest=False)
    ctx = _context()
    grace = _GRACE
    try:
        address = await coordinator.listen("127.0.0.1", 0)
        with _ctrl_c_held(ctx):
            for proc in coordinator.procs:
                process = ctx.Process(
                    target=H.child_main, name=f"simcluster-{proc.index}", daemon=True,
                    args=(address, secret, proc.index, run_id, coordinator.transport, blob))
                process.start()
                proc.process = process
                proc.pid = process.pid
                _watch(proc, coordinator)
        return await _drive(coordinator)
    except asyncio.CancelledError:  # Ctrl-C under run(): stop the processes now, not in _GRACE
        grace = 0.0
        raise
    finally:
        _unwatch(coordinator.procs)
        await coordinator.close(grace)
        if isinstance(config.transport, _shm.ShmTransport):
            _shm.cleanup(run_id)


async def _drive(coordinator: Coordinator) -> C.FinalResult:
    """Connect, step, finish; stop every process whatever happens."""
    try:
        await coordinator.connect()
        await coordinator.step()
        results = await coordinator.finish()
    except BaseException as exc:
        coordinator.stop(exc if isinstance(exc, Exception) else None)
        raise
    return coordinator.result_parts(results)


def _node_secret(master_addr: str, master_port: int) -> bytes:
    secret = os.environ.get(_SECRET_ENV)
    if secret:
        return secret.encode()
    _log.warning("simcluster: %s is not set: any process that can reach %s:%s can join this "
                 "run; set the same %s on every node", _SECRET_ENV, master_addr, master_port,
                 _SECRET_ENV)
    return f"simcluster:{master_addr}:{master_port}".encode()


async def _launch_node(config: RunConfig, fn: Any,
                       progress: Callable[[int, int, float], None] | None) -> C.FinalResult:
    """Run this node's block of a multi-node run; node 0 also runs the coordinator.

    ``config.master_addr`` and ``master_port`` were resolved (from the
    environment too) and checked by ``_config.configure``.
    """
    addr, port = config.master_addr, config.master_port
    assert addr is not None and port is not None
    node_rank = config.node_rank
    secret = config.secret.encode() if config.secret else _node_secret(addr, port)
    run_id = f"n{port:x}"
    tp = _hosted_transport(config)
    listen_host: str | None = tp.host
    if listen_host == "127.0.0.1" and addr not in ("127.0.0.1", "localhost", "::1"):
        listen_host = None  # decided from the control link below

    def load() -> tuple[RunConfig, Any]:
        return config, fn

    if node_rank != 0:
        host = H.Host(_fresh(tp), node_rank, secret, run_id)
        final = await host.serve((addr, port), load, listen_host or await _local_address(addr, port))
        if final is None:
            raise _node_failure(host, node_rank, f"{addr}:{port}")
        return final
    coordinator = Coordinator(config, secret, run_id, progress=progress, check_digest=True)
    host = H.Host(_fresh(tp), 0, secret, run_id)
    serving: asyncio.Task[Any] | None = None
    try:
        await coordinator.listen(addr if addr not in ("localhost",) else "127.0.0.1", port)
        near, far = LocalLink.pair("process 0", "coordinator")  # node 0's host talks in-process
        coordinator.attach(near)
        serving = asyncio.ensure_future(
            host.serve((addr, port), load, listen_host or await _local_address(addr, port), far))
        final = await _drive(coordinator)
        for proc in coordinator.procs:
            coordinator.send(proc, final)
        await coordinator.farewell(_FAREWELL)
        await asyncio.wait_for(serving, _GRACE)
        return final
    finally:
        if serving is not None and not serving.done():
            serving.cancel()
        await coordinator.close()


def _node_failure(host: H.Host, node_rank: int, where: str) -> BaseException:
    """The error a node process raises when the run did not finish there.

    It names only what is known: node 0's error when node 0 sent one, this
    node's own failure, or that node 0 went away or stopped without saying why.
    """
    if host.stop_error is not None:
        return host.stop_error
    if host.failed is not None and not isinstance(host.failed, TransportError):
        return host.failed
    if host.ended == "lost":
        return TransportError(None, "run", f"node {node_rank}: lost node 0 (the coordinator at "
                              f"{where}) before the run finished",
                              "look at node 0's own output: it may have crashed or been killed",
                              peer=where)
    if host.failed is not None:
        return host.failed
    return TransportError(None, "run", f"node {node_rank}: node 0 (the coordinator at {where}) "
                          "stopped the run without an error",
                          "look at node 0's own output: it may have been interrupted", peer=where)


def _fresh(tp: TcpTransport) -> TcpTransport:
    """A copy of the settings, unbound; on the mpi transport, on this job's hosting processes."""
    fresh: TcpTransport = pickle.loads(pickle.dumps(tp))
    if isinstance(fresh, MpiTransport):
        fresh.use(_mpi_job.real_mpi(), _mpi_job.hosting_comm())
    return fresh


async def _local_address(addr: str, port: int) -> str:
    """Return this host's address on the route to ``addr`` (where peers can reach us)."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((addr, port))
            return str(probe.getsockname()[0])
    except OSError:
        return "0.0.0.0"


__all__ = ["Coordinator", "build_result", "launch"]
