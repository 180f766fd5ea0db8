"""The ``simcluster`` command: run a script's ``main(comm)``, run benchmarks, read traces.

Thin on purpose: argparse, then a call into the library.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import os
import runpy
import sys
import threading
from time import monotonic  # bound now: a rank's time.* reads virtual time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from . import _build, _command
from ._version import __version__
from .trace import format_seconds

__all__ = ["main"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


BENCHMARKS = ("p2p", "collectives", "transports", "scale", "torch", "rank_imports", "compute", "mpi")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simcluster", description="A simulated cluster for Python.")
    parser.add_argument("--version", action="version",
                        version=f"simcluster {__version__}, {_build.describe()}",
                        help="print the version and which build runs (compiled or interpreted)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run main(comm) from SCRIPT on N virtual ranks")
    run.add_argument("script", help="a Python file defining main(comm): async def, or a plain "
                                    "def for mpi4py-style code")
    run.add_argument("-n", "--world-size", type=int, default=4, help="number of ranks (default 4)")
    run.add_argument("--transport", default=None,
                     help="memory, shm, tcp or mpi (default memory; tcp with --nnodes > 1; "
                          "mpi: the processes of the mpiexec job running this command)")
    run.add_argument("--latency", default="zero",
                     help="latency model, e.g. zero, constant:5us, alphabeta:1us,10GB/s, loggp:L,o,g,G, "
                          "'hierarchical:8;INTRA;INTER', 'jitter:0.1;MODEL'")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--trace", default=None, help="write a Chrome trace JSON to this path")
    run.add_argument("--procs", type=int, default=None, help="OS processes hosting the ranks")
    run.add_argument("--timeout", type=float, default=None, help="wall seconds before giving up")
    run.add_argument("--compute", default=None,
                     metavar="{wall|cpu}[:F][,threshold=T][,record=FILE]|replay:FILE",
                     help="charge the time a rank's own code runs between calls (wall: elapsed; "
                          "cpu: its thread's CPU time, as SMPI) x F to its virtual clock, bursts "
                          "under T (default 5us) left out; record=FILE writes the charges, "
                          "replay:FILE charges them again")
    run.add_argument("--faults", default=None, metavar="PLAN",
                     help="a fault plan, e.g. 'crash:1@0.5ms', "
                          "'crash:2@all_reduce#3;slow:0x4@0..1ms' (docs/faults.md)")
    run.add_argument("--fidelity", choices=("message", "analytic"), default="message",
                     help="message: simulate every collective message; analytic: one step per collective")
    run.add_argument("--nnodes", type=int, default=1,
                     help="hosts taking part (tcp); start this command once on each, like torchrun")
    run.add_argument("--node-rank", type=int, default=0, help="this host's number, 0..nnodes-1")
    run.add_argument("--master-addr", default=None,
                     help="address of node 0 (default: $MASTER_ADDR)")
    run.add_argument("--master-port", type=int, default=None,
                     help="port node 0 listens on (default: $MASTER_PORT)")

    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench.add_argument("which", choices=BENCHMARKS)
    bench.add_argument("--quick", action="store_true", help="fewer repeats, smaller sizes")
    bench.add_argument("--only", default=None, metavar="PART",
                       help="one table of the benchmark (torch: all_reduce, scale or train)")

    from . import mpirun  # its options live with it (simcluster/mpirun.py)

    mpirun.add_parser(sub)

    from . import torchrun  # its options live with it (simcluster/torchrun.py)

    torchrun.add_parser(sub)

    trace = sub.add_parser("trace", help="show or plot a trace written by --trace / run(trace=PATH)")
    trace.add_argument("action", choices=("show", "plot"))
    trace.add_argument("file")
    trace.add_argument("-o", "--output", default="timeline.png", help="PNG path for plot")
    return parser


def _launcher_for(source: str) -> str | None:
    """The launcher for a script with no ``main``: ``mpirun`` if it imports mpi4py, ``torchrun``
    if torch.distributed, else None. Scripts written for those run top to bottom on each rank."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # running it reports the error with its line
    if any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "main"
           for node in tree.body):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    if any(n == "mpi4py" or n.startswith("mpi4py.") for n in names):
        return "mpirun -n N"
    if any(n == "torch.distributed" or n.startswith("torch.distributed.") for n in names):
        return "torchrun --nproc-per-node N"
    return None


def _load_main(script: str) -> Any:
    if not os.path.isfile(script):
        raise SystemExit(f"simcluster run: {script}: no such file; pass the path of a Python script "
                         "that defines async def main(comm)")
    with open(script, encoding="utf-8", errors="replace") as f:
        launcher = _launcher_for(f.read())
    if launcher is not None:
        kind = "an mpi4py" if launcher.startswith("mpirun") else "a torch.distributed"
        raise SystemExit(f"simcluster run: {script} is {kind} script with no main(comm): run it "
                         f"unmodified with simcluster {launcher} {script}; simcluster run takes a "
                         "script that defines async def main(comm)")
    path = os.path.abspath(script)  # as `python SCRIPT` names it in tracebacks
    # like `python SCRIPT`: the script's folder comes first on the import path
    sys.path.insert(0, os.path.dirname(path))
    try:
        namespace = runpy.run_path(path, run_name="__simcluster_script__")
    except Exception as exc:  # noqa: BLE001 - reported as python reports it, then exit status 1
        _print_script_error(exc, path)
        return None
    fn = namespace.get("main")
    if fn is None:
        raise SystemExit(f"simcluster run: {script} defines no main(comm); add `async def main(comm): ...`")
    return fn


def _user_traceback(exc: BaseException) -> Any:
    from .engine import frames

    return frames.user_traceback(exc)


def _print_script_error(exc: BaseException, path: str) -> None:
    """Print an error raised while loading the script as ``python SCRIPT`` would.

    From the script's own frame inward (no cli.py, no runpy); a script that
    does not compile never ran, so its SyntaxError shows alone: file, line, caret.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


PROGRESS_AFTER = 2.0
"""Wall seconds a run goes before its progress line shows: a short run prints nothing."""

BROKEN_PIPE = 141
"""The exit status once stdout's reader is gone (``simcluster ... | head``): 128 + SIGPIPE, as a
shell reports ``cat`` stopped by SIGPIPE."""


class _Progress:
    """One status line on a terminal: ranks finished, virtual time, events a second; redrawn in place.

    The runner calls it about ten times a wall second (from a thread of its
    own, for ranks in this process); it draws only once ``after`` wall
    seconds have passed since it was made, so a short run prints nothing.
    ``events``, the engine's count of events so far, is known for ranks in
    this process only; the rate shown is the run's average since the first
    call, once the count has moved. ``lock`` serializes drawing with what
    ``_ClearsProgress`` writes.
    """

    def __init__(self, stream: TextIO, after: float = 0.0) -> None:
        self.stream = stream
        self.width = 0
        self.start = monotonic() + after  # no line before then
        self.first: tuple[float, int] | None = None  # (wall, events) at the first call
        self.lock = threading.Lock()

    def __call__(self, finished: int, world_size: int, now: float, events: int | None = None) -> None:
        wall = monotonic()
        rate = None
        if events is not None:
            if self.first is None:
                self.first = (wall, events)
            elif events > self.first[1]:  # the count moves each few thousand events, not at each call
                rate = (events - self.first[1]) / (wall - self.first[0])
        if wall < self.start:
            return
        line = f"simcluster: {finished}/{world_size} ranks finished, virtual time {format_seconds(now)}"
        if rate is not None:
            line += f", {_count(rate)} events/s"
        with self.lock:
            self.stream.write("\r" + line.ljust(self.width))
            self.stream.flush()
            self.width = len(line)

    def close(self) -> None:
        """Erase the status line, if one was drawn."""
        with self.lock:
            self.erase()

    def erase(self) -> None:
        """``close`` for a holder of ``lock``."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _count(n: float) -> str:
    """``1.23M`` for 1,234,567: three figures and a unit."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


class _ClearsProgress:
    """``sys.stdout`` / ``sys.stderr`` while a progress line shows: text erases the line first.

    The line is drawn again at the next tick, below what was written.
    """

    def __init__(self, stream: TextIO, progress: _Progress) -> None:
        self._stream = stream
        self._progress = progress

    def write(self, text: str) -> int:
        progress = self._progress
        with progress.lock:
            if text:
                progress.erase()
            return self._stream.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, buffer, isatty, ...
        return getattr(self._stream, name)


@contextlib.contextmanager
def _progress_shown() -> Iterator[_Progress | None]:
    """A progress display for a run when stderr is a terminal (else None, and nothing is drawn)."""
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if not terminal:
        yield None
        return
    progress = _Progress(sys.stderr, PROGRESS_AFTER)
    saved = sys.stdout, sys.stderr
    sys.stdout = _ClearsProgress(saved[0], progress)
    sys.stderr = _ClearsProgress(saved[1], progress)
    try:
        yield progress
    finally:
        sys.stdout, sys.stderr = saved
        progress.close()


def _cmd_run(args: argparse.Namespace) -> int:
    from .hosting import mpi_job as _mpi_job
    from . import errors, runner
    from . import platform as _platform  # --latency takes a platform preset too

    try:
        model = _platform.parse(args.latency)  # a latency model's spec, or a platform preset
    except ValueError as exc:
        raise SystemExit(f"simcluster run --latency: {exc}") from None
    fn = _load_main(args.script)
    if fn is None:  # the script failed to load: the error is printed
        return 1
    transport = args.transport or ("tcp" if args.nnodes > 1 else "memory")
    kwargs: dict[str, Any] = {"transport": transport, "latency": model,
                              "seed": args.seed, "timeout": args.timeout}
    if args.fidelity != "message":
        kwargs["fidelity"] = args.fidelity
    if args.faults is not None:
        kwargs["faults"] = args.faults
    if args.nnodes != 1:
        kwargs.update(nnodes=args.nnodes, node_rank=args.node_rank,
                      master_addr=args.master_addr, master_port=args.master_port)
    if args.trace:
        kwargs["trace"] = args.trace
    if args.compute is not None:
        kwargs["compute"] = args.compute
    if args.procs is not None:
        kwargs["procs"] = args.procs
    try:
        with _progress_shown() as progress:  # erased before any report or result
            if progress is not None:
                kwargs["_progress"] = progress
            result = runner.run(fn, args.world_size, **kwargs)
    except errors.SimclusterError as exc:
        # a rank's failure, a deadlock, a timeout; or run() refusing its arguments (UsageError).
        # Any other error is not a message written for users: it keeps its traceback.
        if not _mpi_job.first_process():  # an MPI job: process 0 reports for all
            return 1
        if isinstance(exc.__cause__, BrokenPipeError) and _command.reader_gone(sys.stdout):
            raise exc.__cause__  # a rank printed to a stdout whose reader went away: main ends quietly
        if isinstance(exc, errors.RankError) and exc.__cause__ is not None:
            cause = exc.__cause__
            traceback.print_exception(type(cause), cause, _user_traceback(cause))
        for rank, when in sorted(getattr(exc, "crashed", {}).items()):
            print(f"simcluster run: rank {rank} crashed at virtual time {format_seconds(when)} "
                  "(the fault plan)", file=sys.stderr)
        print(f"simcluster run: {exc}", file=sys.stderr)
        return 1
    if not _mpi_job.first_process():
        return 0
    for rank, value in enumerate(result):
        if rank in result.crashed:
            print(f"rank {rank}: crashed at virtual time {format_seconds(result.crashed[rank])} "
                  "(the fault plan)")
        elif value is not None:
            print(f"rank {rank}: {value!r}")
    print(f"elapsed {format_seconds(result.elapsed)} virtual, {result.wall:.3f} s wall, "
          f"{result.stats.total_messages} messages, {result.stats.total_bytes} bytes")
    if args.trace:
        print(f"wrote {args.trace}")
    return 0


def _cmd_mpirun(args: argparse.Namespace) -> int:
    from . import mpirun

    with _progress_shown() as args.progress:  # mpirun.script_keywords passes it to run()
        return mpirun.run_args(args)


def _cmd_torchrun(args: argparse.Namespace) -> int:
    from . import torchrun

    with _progress_shown() as args.progress:
        return torchrun.run_args(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"simcluster.bench.{args.which}")
    options = dict(getattr(module, "QUICK", {})) if args.quick else {}
    if args.only is not None:
        if not hasattr(module, "PARTS"):
            print(f"simcluster bench {args.which}: --only is for benchmarks of several tables "
                  "(torch)", file=sys.stderr)
            return 2
        options["only"] = args.only
    module.main(**options)
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from . import trace

    try:
        if args.action == "show":
            print(trace.show(args.file))
        else:
            trace.plot(args.file, args.output)
            print(f"wrote {args.output}")
    except (ImportError, ValueError) as exc:  # no matplotlib, or not a trace file
        raise SystemExit(f"simcluster trace {args.action}: {exc}") from None
    return 0


def _interrupted(args: argparse.Namespace | None) -> str:
    """The Ctrl-C line for an interrupt that came before ``run()`` could say where the run stood."""
    ranks = getattr(args, "world_size", None)
    if getattr(args, "command", None) == "torchrun":
        try:
            ranks = int(getattr(args, "nproc_per_node", "")) * int(getattr(args, "nnodes", ""))
        except (TypeError, ValueError):
            ranks = None
    if isinstance(ranks, int) and ranks >= 1:  # the ranks had not started: virtual time 0
        return (f"simcluster: interrupted at virtual time {format_seconds(0.0)}, with 0 of {ranks} "
                "ranks finished")
    return "simcluster: interrupted"


def _stdout_gone() -> None:
    """stdout's reader went away: point stdout at devnull, so that exiting does not fail flushing it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simcluster`` console script.

    Returns the exit status: the command's; 130 after Ctrl-C (one line on where
    the run stood, no traceback); 141 once stdout's reader has gone away
    (``simcluster ... | head``), quietly, as Python's docs advise for SIGPIPE.
    """
    args: argparse.Namespace | None = None
    try:
        _command.release()  # Ctrl-C from here on is reported below
        args = _parser().parse_args(argv)
        handlers = {"run": _cmd_run, "bench": _cmd_bench, "trace": _cmd_trace, "mpirun": _cmd_mpirun,
                    "torchrun": _cmd_torchrun}
        status = handlers[args.command](args)
        sys.stdout.flush()  # a reader that went away shows here, not as an error at exit
        return status
    except KeyboardInterrupt as exc:  # Ctrl-C: one line on where the run stood, no traceback
        print(str(exc) or _interrupted(args), file=sys.stderr)
        return _command.INTERRUPTED
    except BrokenPipeError:
        _stdout_gone()
        return BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
