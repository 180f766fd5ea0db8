"""The ``simcluster`` command: run a script's ``main(comm)``, run benchmarks, read traces.

Thin on purpose: argparse, then a call into the library.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from typing import Any, TextIO

from . import _build
from ._version import __version__
from .trace import format_seconds

__all__ = ["main"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


BENCHMARKS = ("p2p", "collectives", "transports", "scale", "torch", "rank_imports")


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
    run.add_argument("--compute", default=None, metavar="wall[:F][,threshold=T][,record=FILE]|replay:FILE",
                     help="charge the wall time a synchronous rank's own code runs between calls "
                          "(x F; bursts under T, default 1us, are not) to its virtual clock; "
                          "record=FILE writes the charges, replay:FILE charges them again")
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
    # like `python SCRIPT`: the script's folder comes first on the import path
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    namespace = runpy.run_path(script, run_name="__simcluster_script__")
    fn = namespace.get("main")
    if fn is None:
        raise SystemExit(f"simcluster run: {script} defines no main(comm); add `async def main(comm): ...`")
    return fn


class _Progress:
    """One status line on a terminal: ranks finished and virtual time, redrawn in place.

    The runner calls it about ten times a wall second (never for runs shorter
    than that), so a short run prints nothing.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.width = 0

    def __call__(self, finished: int, world_size: int, now: float) -> None:
        line = f"simcluster: {finished}/{world_size} ranks finished, virtual time {format_seconds(now)}"
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def close(self) -> None:
        """Erase the status line, if one was drawn."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .hosting import mpi_job as _mpi_job
    from . import errors, runner
    from . import platform as _platform  # --latency takes a platform preset too

    try:
        model = _platform.parse(args.latency)  # a latency model's spec, or a platform preset
    except ValueError as exc:
        raise SystemExit(f"simcluster run --latency: {exc}") from None
    fn = _load_main(args.script)
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
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    if progress is not None:
        kwargs["_progress"] = progress
    try:
        result = runner.run(fn, args.world_size, **kwargs)
    except errors.SimclusterError as exc:
        # a rank's failure, a deadlock, a timeout; or run() refusing its arguments (UsageError).
        # Any other error is not a message written for users: it keeps its traceback.
        if progress is not None:
            progress.close()  # erase the status line before the report
        if not _mpi_job.first_process():  # an MPI job: process 0 reports for all
            return 1
        if isinstance(exc, errors.RankError) and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__)
        for rank, when in sorted(getattr(exc, "crashed", {}).items()):
            print(f"simcluster run: rank {rank} crashed at virtual time {format_seconds(when)} "
                  "(the fault plan)", file=sys.stderr)
        print(f"simcluster run: {exc}", file=sys.stderr)
        return 1
    finally:
        if progress is not None:
            progress.close()
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

    return mpirun.run_args(args)


def _cmd_torchrun(args: argparse.Namespace) -> int:
    from . import torchrun

    return torchrun.run_args(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"simcluster.bench.{args.which}")
    if args.quick:
        module.main(**getattr(module, "QUICK", {}))
    else:
        module.main()
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simcluster`` console script."""
    args = _parser().parse_args(argv)
    handlers = {"run": _cmd_run, "bench": _cmd_bench, "trace": _cmd_trace, "mpirun": _cmd_mpirun,
                "torchrun": _cmd_torchrun}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line on where the run stood, no traceback
        print(str(exc) or f"simcluster {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
