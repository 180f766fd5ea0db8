"""``mpi4py.bench`` under ``simcluster mpirun``: mpi4py's benchmark commands, timed in virtual time.

``python -m mpi4py.bench [--threads | --no-threads | --thread-level LEVEL]
<command> [args]`` with the commands of mpi4py 4.1.2: ``helloworld``,
``ringtest``, ``pingpong`` and ``futures``, the same options and the same
output lines (header, column widths, number formats). Each command is also a
function ``command(comm, args=None, verbose=True)`` returning what it measured.

Rule 1: every time comes from ``MPI.Wtime()``, the rank's virtual clock, so a
run reports what the run's latency model charges (under ``--exact``, exactly
the model's figure: a pingpong row under ``AlphaBeta(alpha, beta)`` reads
``alpha + n*beta``), not how fast this process ran. Rule 2: only rank 0
prints tables; a command fails before its first message, on every rank, so no
rank waits for one that left.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

COMMANDS: dict[str, Callable[..., Any]] = {}
"""The benchmark commands by name, in the order ``--help`` would list them."""

_MAX_SHIFT = 33  # message sizes are the powers of two 1 .. 2**32 that the options allow
_STATS_HEAD = " | Time Mean [s] \u00b1 StdDev [s]  Samples"


def _command(func: Callable[..., Any]) -> Callable[..., Any]:
    COMMANDS[func.__name__] = func
    return func


def _module_name() -> str:
    return __spec__.name if __spec__ is not None else "mpi4py.bench"


def _package() -> Any:
    name = (__spec__.parent if __spec__ is not None else None) or "mpi4py"
    return sys.modules[name]


def _parser(command: str = "", usage: str | None = None) -> argparse.ArgumentParser:
    """A parser whose ``prog`` reads ``python -m mpi4py.bench COMMAND``, as mpi4py's does."""
    prog = " ".join(filter(None, [os.path.basename(sys.executable), "-m", _module_name(), command]))
    return argparse.ArgumentParser(prog=prog, usage=usage)


def _add_quiet(parser: argparse.ArgumentParser, verbose: bool) -> None:
    parser.add_argument("-q", "--quiet", action="store_false", dest="verbose", default=verbose,
                        help="quiet output")


def _add_rounds(parser: argparse.ArgumentParser, limits: dict[str, int]) -> None:
    """The large/huge options and the table switches that pingpong and futures share."""
    for size in ("large", "huge"):
        parser.add_argument(f"--skip-{size}", type=int, dest=f"skip_{size}",
                            default=limits[f"skip_{size}"])
        parser.add_argument(f"--loop-{size}", type=int, dest=f"loop_{size}",
                            default=limits[f"loop_{size}"])
        parser.add_argument(f"--{size}-size", type=int, dest=f"{size}_size",
                            default=limits[f"{size}_size"])
    parser.add_argument("--no-header", action="store_false", dest="print_header", default=True)
    parser.add_argument("--no-stats", action="store_false", dest="print_stats", default=True)


def _fail(parser: argparse.ArgumentParser, comm: Any, problem: str) -> NoReturn:
    """End every rank with status 2; rank 0 says why (as mpi4py does for an unknown command)."""
    if comm.Get_rank() == 0:
        parser.error(problem)
    parser.exit(2)


# ---- measuring ----


def _sizes(low: int, high: int) -> list[int]:
    return [1 << shift for shift in range(_MAX_SHIFT) if low <= 1 << shift <= high]


def _rounds(nbytes: int, opts: argparse.Namespace) -> tuple[int, int]:
    """(warm-up, sampled) iterations for ``nbytes``: fewer for large and huge messages."""
    skip, loop = opts.skip, opts.loop
    if nbytes > opts.large_size:
        skip, loop = min(skip, opts.skip_large), min(loop, opts.loop_large)
    if nbytes > opts.huge_size:
        skip, loop = min(skip, opts.skip_huge), min(loop, opts.loop_huge)
    return skip, loop


def _sample(measure: Callable[[], float], skip: int, loop: int) -> tuple[float, float]:
    """Run ``measure`` ``skip + loop`` times; return the mean and sample deviation of the last ``loop``."""
    times = [measure() for _ in range(skip + loop)][skip:]
    mean = statistics.mean(times) if times else float("nan")
    return mean, statistics.stdev(times) if len(times) > 1 else 0.0


def _rate(amount: int, mean: float) -> float:
    """``amount`` per second of ``mean``; infinite when the model charged nothing (``--latency zero``)."""
    return amount / mean if mean else float("inf")


class _Table:
    """Rank 0's output of a size sweep: the header before the first row, then one row per size."""

    def __init__(self, opts: argparse.Namespace, title: str, rate_head: str) -> None:
        self.show = opts.verbose
        self.stats = opts.print_stats
        self.header = [title, rate_head + (_STATS_HEAD if self.stats else "")]
        if not opts.print_header:
            self.header = []

    def __repr__(self) -> str:
        return f"<_Table show={self.show} stats={self.stats} header_due={bool(self.header)}>"

    def row(self, nbytes: int, rate: str, mean: float, stdev: float, loop: int) -> None:
        if not self.show:
            return
        for line in self.header:
            print(line)
        self.header = []
        stats = f" | {mean:.7e} \u00b1 {stdev:.4e} {loop:8d}" if self.stats else ""
        print(f"{nbytes:10d}{rate}{stats}", flush=True)


# ---- helloworld and ringtest ----


@_command
def helloworld(comm: Any, args: Sequence[str] | None = None, verbose: bool = True) -> str:
    """Print a greeting from each rank, in rank order; return this rank's line."""
    parser = _parser("helloworld")
    _add_quiet(parser, verbose)
    opts = parser.parse_args(args)
    mpi = _package().MPI
    rank, size = comm.Get_rank(), comm.Get_size()
    line = (f"Hello, World! I am process {rank:{len(str(size - 1))}d} of {size} "
            f"on {mpi.Get_processor_name()}.\n")
    token = [bytearray(0), 0, mpi.BYTE]  # an empty message passes the turn to print
    comm.Barrier()
    if rank > 0:
        comm.Recv(token, rank - 1)
    if opts.verbose:
        sys.stdout.write(line)
        sys.stdout.flush()
    if rank + 1 < size:
        comm.Send(token, rank + 1)
    comm.Barrier()
    return line


def _ring(comm: Any, nbytes: int, skip: int, loop: int) -> float:
    """Pass ``nbytes`` around the ring ``skip + loop`` times; return the virtual time of the last ``loop``."""
    from array import array

    wtime = _package().MPI.Wtime
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    smsg = array("B", [42]) * nbytes
    rmsg = array("B", [0]) * nbytes
    if rank > 0:
        smsg = rmsg  # forward what came in
    start = wtime()
    for lap in range(skip + loop):
        if lap == skip:
            start = wtime()
        if size == 1:
            comm.Sendrecv(smsg, right, 0, rmsg, left, 0)
        elif rank == 0:
            comm.Send(smsg, right, 0)
            comm.Recv(rmsg, left, 0)
        else:
            comm.Recv(rmsg, left, 0)
            comm.Send(smsg, right, 0)
    elapsed: float = wtime() - start
    if rank == 0 and smsg != rmsg:  # the ring corrupted the message: no time is worth reporting
        print("mpi4py.bench ringtest: received message does not match", file=sys.stderr)
        comm.Abort(2)
    return elapsed


@_command
def ringtest(comm: Any, args: Sequence[str] | None = None, verbose: bool = True) -> float:
    """Time a message going around the ring of ranks; return this rank's elapsed virtual time."""
    parser = _parser("ringtest")
    _add_quiet(parser, verbose)
    parser.add_argument("-n", "--size", type=int, dest="size", default=1, help="message size")
    parser.add_argument("-s", "--skip", type=int, dest="skip", default=0,
                        help="number of warm-up iterations")
    parser.add_argument("-l", "--loop", type=int, dest="loop", default=1,
                        help="number of iterations")
    opts = parser.parse_args(args)
    comm.Barrier()
    elapsed = _ring(comm, opts.size, opts.skip, opts.loop)
    if opts.verbose and comm.Get_rank() == 0:
        print(f"time for {opts.loop} loops = {elapsed:g} seconds "
              f"({comm.Get_size()} processes, {opts.size} bytes)", flush=True)
    return elapsed


# ---- pingpong ----


def _pingpong_parser(verbose: bool) -> argparse.ArgumentParser:
    parser = _parser("pingpong")
    _add_quiet(parser, verbose)
    parser.add_argument("-m", "--min-size", type=int, dest="min_size", default=1,
                        help="minimum message size")
    parser.add_argument("-n", "--max-size", type=int, dest="max_size", default=1 << 30,
                        help="maximum message size")
    parser.add_argument("-s", "--skip", type=int, dest="skip", default=100,
                        help="number of warm-up iterations")
    parser.add_argument("-l", "--loop", type=int, dest="loop", default=10000,
                        help="number of iterations")
    parser.add_argument("-a", "--array", dest="array", default="numpy",
                        choices=["numpy", "cupy", "numba", "none"],
                        help="use NumPy/CuPy/Numba arrays")
    parser.add_argument("-p", "--pickle", action="store_true", dest="pickle", default=False,
                        help="use pickle-based send and receive")
    parser.add_argument("--protocol", type=int, dest="protocol", default=None,
                        help="pickle protocol version")
    parser.add_argument("-o", "--outband", action="store_true", dest="outband", default=False,
                        help="use out-of-band pickle-based send and receive")
    parser.add_argument("--threshold", type=int, dest="threshold", default=None,
                        help="size threshold for out-of-band pickle buffers")
    _add_rounds(parser, {"skip_large": 10, "loop_large": 1000, "large_size": 1 << 14,
                         "skip_huge": 1, "loop_huge": 10, "huge_size": 1 << 20})
    return parser


def _allocator(kind: str) -> Callable[[int], Any] | str:
    """A function making an n-byte buffer of ``kind``, or why ``kind`` cannot be had here."""
    if kind == "numpy":
        try:
            import numpy
        except ImportError:
            return bytearray  # as mpi4py: plain bytes when NumPy is missing
        return lambda nbytes: numpy.empty(nbytes, "B")
    if kind == "none":
        return bytearray
    module = "numba.cuda" if kind == "numba" else kind
    try:
        device = __import__(module, fromlist=["_"])
    except ImportError as exc:
        return (f"argument -a/--array: {kind} is not installed ({exc}); "
                "use -a numpy or -a none")
    if kind == "cupy":
        return lambda nbytes: device.empty(nbytes, "B")
    return lambda nbytes: device.device_array(nbytes, "B")


@_command
def pingpong(comm: Any, args: Sequence[str] | None = None,
             verbose: bool = True) -> list[tuple[int, float, float]]:
    """Time messages between ranks 0 and 1; return ``(nbytes, mean, stdev)`` per size.

    A sample is half a round trip in virtual seconds; on one rank, half of two
    ``Sendrecv`` to itself. Ranks above 1 only join the barriers.
    """
    parser = _pingpong_parser(verbose)
    opts = parser.parse_args(args)
    allocate = _allocator(opts.array)
    if isinstance(allocate, str):
        _fail(parser, comm, allocate)
    package = _package()
    mpi = package.MPI
    use_pickle = opts.pickle or opts.outband
    if opts.outband:
        from importlib import import_module

        pkl5 = import_module(f"{package.__name__}.util.pkl5")
        comm = pkl5.Intracomm(comm)
        if opts.threshold is not None:
            pkl5.pickle.THRESHOLD = opts.threshold
    if use_pickle and opts.protocol is not None:
        mpi.pickle.PROTOCOL = opts.protocol  # process-wide, as in mpi4py
    if use_pickle:
        send, recv, sendrecv = comm.send, comm.recv, comm.sendrecv
    else:
        send, recv, sendrecv = comm.Send, comm.Recv, comm.Sendrecv
    rank, size = comm.Get_rank(), comm.Get_size()
    table = _Table(opts, "# MPI PingPong Test", "# Size [B]  Bandwidth [MB/s]")
    results = []
    for nbytes in _sizes(opts.min_size, opts.max_size):
        skip, loop = _rounds(nbytes, opts)
        if use_pickle:
            smsg, rmsg = allocate(nbytes), None
        else:
            smsg = [allocate(nbytes), nbytes, mpi.BYTE]
            rmsg = [allocate(nbytes), nbytes, mpi.BYTE]

        def round_trip() -> float:
            start = mpi.Wtime()
            if size == 1:
                sendrecv(smsg, 0, 0, rmsg, 0, 0)
                sendrecv(smsg, 0, 0, rmsg, 0, 0)
            elif rank == 0:
                send(smsg, 1, 0)
                recv(rmsg, 1, 0)
            elif rank == 1:
                recv(rmsg, 0, 0)
                send(smsg, 0, 0)
            return float(mpi.Wtime() - start) / 2

        comm.Barrier()
        mean, stdev = _sample(round_trip, skip, loop)
        results.append((nbytes, mean, stdev))
        if rank == 0:
            table.row(nbytes, f"{_rate(nbytes, mean) / 1e6:18.2f}", mean, stdev, loop)
    return results


# ---- futures ----


def _identity(arg: Any) -> Any:
    return arg


def _futures_parser(verbose: bool) -> argparse.ArgumentParser:
    parser = _parser("futures")
    _add_quiet(parser, verbose)
    parser.add_argument("-e", "--executor", dest="executor", default="mpi",
                        choices=["mpi", "process", "thread", "interpreter"],
                        help="executor backend")
    parser.add_argument("-w", "--num-workers", type=int, dest="workers", default=None,
                        help="number or workers")
    parser.add_argument("-t", "--num-tasks", type=int, dest="tasks", default=50,
                        help="number of tasks per worker")
    parser.add_argument("-m", "--min-size", type=int, dest="min_size", default=0,
                        help="minimum task data size")
    parser.add_argument("-n", "--max-size", type=int, dest="max_size", default=1 << 20,
                        help="maximum task data size")
    parser.add_argument("-a", "--allocator", dest="allocator", default="numpy",
                        choices=["numpy", "array", "bytes"], help="task data allocator")
    parser.add_argument("-c", "--chunksize", type=int, dest="chunksize", default=1,
                        help="chunksize parameter")
    parser.add_argument("-b", "--backoff", type=float, dest="backoff", default=0.0,
                        help="backoff parameter")
    parser.add_argument("-o", "--outband", action="store_true", dest="outband", default=False,
                        help="use out-of-band pickle")
    parser.add_argument("-s", "--skip", type=int, dest="skip", default=1,
                        help="number of warm-up iterations")
    parser.add_argument("-l", "--loop", type=int, dest="loop", default=10,
                        help="number of sample iterations")
    _add_rounds(parser, {"skip_large": 1, "loop_large": 5, "large_size": 1 << 16,
                         "skip_huge": 1, "loop_huge": 3, "huge_size": 1 << 18})
    return parser


def _task_data(kind: str) -> Callable[[int], Any]:
    if kind == "numpy":
        try:
            import numpy
        except ImportError:
            return bytes
        return lambda nbytes: numpy.zeros(nbytes, "B")
    if kind == "array":
        from array import array

        return lambda nbytes: array("B", bytes(nbytes))
    return bytes


def _executor(opts: argparse.Namespace) -> Any:
    """The executor ``-e`` names (``mpi4py.futures``' own classes), or why it cannot run here."""
    import concurrent.futures as cf
    from importlib import import_module

    pool = import_module(f"{_package().__name__}.futures")
    if opts.executor == "mpi":
        return pool.MPIPoolExecutor(max_workers=opts.workers, backoff=opts.backoff,
                                    use_pkl5=opts.outband)
    if opts.executor == "thread":  # waiting for its threads is charged the wall time waited
        return pool.ThreadPoolExecutor(max_workers=opts.workers)
    if opts.executor == "process":
        try:
            return pool.ProcessPoolExecutor(max_workers=opts.workers)
        except RuntimeError as exc:  # a rank is not an OS process and cannot fork
            return f"argument -e/--executor: {exc}"
    interpreters = getattr(cf, "InterpreterPoolExecutor", None)
    if interpreters is None:
        return ("argument -e/--executor: interpreter needs concurrent.futures."
                "InterpreterPoolExecutor (Python 3.14 or later); use -e mpi or -e thread")
    return interpreters(max_workers=opts.workers)


@_command
def futures(comm: Any, args: Sequence[str] | None = None,
            verbose: bool = True) -> list[tuple[int, float, float]]:
    """Time ``map`` of tasks over an executor's workers; return ``(nbytes, mean, stdev)`` per size.

    A sample is the virtual time one ``map`` of ``workers * tasks`` identity
    tasks takes, with ``nbytes`` of data each.
    """
    import time

    parser = _futures_parser(verbose)
    opts = parser.parse_args(args)
    wtime = _package().MPI.Wtime
    allocate = _task_data(opts.allocator)
    executor = _executor(opts)
    if isinstance(executor, str):
        _fail(parser, comm, executor)
    # an MPIPoolExecutor says; concurrent.futures' pools take max_workers or their documented default
    workers = getattr(executor, "num_workers", None) or opts.workers or min(32, (os.cpu_count() or 1) + 4)
    count = workers * opts.tasks

    def run_map(func: Callable[[Any], Any], data: list[Any]) -> None:
        for _ in executor.map(func, data, chunksize=opts.chunksize):
            pass

    run_map(time.sleep, [0.001] * workers)  # start every worker before the clock runs
    title = f"# {type(executor).__name__} - {workers} workers, {opts.tasks} tasks/worker"
    table = _Table(opts, title, "# Size [B]  Tasks/s")
    results = []
    for nbytes in _sizes(opts.min_size, opts.max_size):
        skip, loop = _rounds(nbytes, opts)
        data = [allocate(nbytes) for _ in range(count)]

        def one_map() -> float:
            start = wtime()
            run_map(_identity, data)
            return float(wtime() - start)

        mean, stdev = _sample(one_map, skip, loop)
        results.append((nbytes, mean, stdev))
        if comm.Get_rank() == 0:
            table.row(nbytes, f"{_rate(count, mean):9.0f}", mean, stdev, loop)
    executor.shutdown()
    return results


# ---- command line ----


def main(args: Sequence[str] | None = None) -> None:
    """Run ``python -m mpi4py.bench [options] <command> [args]`` on this rank, then exit."""
    parser = _parser(usage="%(prog)s [options] <command> [args]")
    parser.add_argument("--threads", action="store_true", dest="threads", default=None,
                        help="initialize MPI with thread support")
    parser.add_argument("--no-threads", action="store_false", dest="threads", default=None,
                        help="initialize MPI without thread support")
    parser.add_argument("--thread-level", dest="thread_level", default=None, metavar="LEVEL",
                        choices=["single", "funneled", "serialized", "multiple"],
                        help="initialize MPI with required thread level")
    parser.add_argument("command", metavar="<command>", help="benchmark command to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="[args]",
                        help="arguments for benchmark command")
    opts = parser.parse_args(args)
    package = _package()
    # read when a rank first asks (Query_thread), so setting them here still counts
    if opts.threads is not None:
        package.rc.threads = opts.threads
    if opts.thread_level is not None:
        package.rc.thread_level = opts.thread_level
    comm = package.MPI.COMM_WORLD
    command = COMMANDS.get(opts.command)
    if command is None:
        _fail(parser, comm, f"unknown command {opts.command!r}")
    else:
        command(comm, opts.args)
    parser.exit()


if __name__ == "__main__":
    main()
