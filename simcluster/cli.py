"""The ``simcluster`` command: run a script's ``main(comm)``, run benchmarks, read traces.

Thin on purpose: argparse, then a call into the library.
"""

from __future__ import annotations

import argparse
import importlib
import runpy
import sys
from collections.abc import Sequence
from typing import Any

BENCHMARKS = ("p2p", "collectives", "transports", "scale")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simcluster", description="A simulated cluster for Python.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run main(comm) from SCRIPT on N virtual ranks")
    run.add_argument("script", help="a Python file defining async def main(comm)")
    run.add_argument("-n", "--world-size", type=int, default=4, help="number of ranks (default 4)")
    run.add_argument("--transport", default="memory", help="memory, shm or tcp")
    run.add_argument("--latency", default="zero",
                     help="latency model, e.g. zero, constant:5us, alphabeta:1us,10GB/s, loggp:L,o,g,G")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--trace", default=None, help="write a Chrome trace JSON to this path")
    run.add_argument("--procs", type=int, default=None, help="OS processes hosting the ranks")
    run.add_argument("--timeout", type=float, default=None, help="wall seconds before giving up")

    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench.add_argument("which", choices=BENCHMARKS)
    bench.add_argument("--quick", action="store_true", help="fewer repeats, smaller sizes")

    trace = sub.add_parser("trace", help="show or plot a trace written by --trace / run(trace=PATH)")
    trace.add_argument("action", choices=("show", "plot"))
    trace.add_argument("file")
    trace.add_argument("-o", "--output", default="timeline.png", help="PNG path for plot")
    return parser


def _load_main(script: str) -> Any:
    namespace = runpy.run_path(script, run_name="__simcluster_script__")
    fn = namespace.get("main")
    if fn is None:
        raise SystemExit(f"simcluster run: {script} defines no main(comm); add `async def main(comm): ...`")
    return fn


def _cmd_run(args: argparse.Namespace) -> int:
    from . import latency, runner

    fn = _load_main(args.script)
    kwargs: dict[str, Any] = {"transport": args.transport, "latency": latency.parse(args.latency),
                              "seed": args.seed, "timeout": args.timeout}
    if args.trace:
        kwargs["trace"] = args.trace
    if args.procs is not None:
        kwargs["procs"] = args.procs
    result = runner.run(fn, args.world_size, **kwargs)
    for rank, value in enumerate(result):
        if value is not None:
            print(f"rank {rank}: {value!r}")
    print(f"elapsed {result.elapsed:.9g} s virtual, {result.wall:.3f} s wall, "
          f"{result.stats.total_messages} messages, {result.stats.total_bytes} bytes")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"simcluster.bench.{args.which}")
    if args.quick:
        module.main(**getattr(module, "QUICK", {}))
    else:
        module.main()
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from . import trace

    if args.action == "show":
        print(trace.show(args.file))
    else:
        trace.plot(args.file, args.output)
        print(f"wrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simcluster`` console script."""
    args = _parser().parse_args(argv)
    handlers = {"run": _cmd_run, "bench": _cmd_bench, "trace": _cmd_trace}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
