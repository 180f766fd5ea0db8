"""``simcluster mpirun``: run an mpi4py script once per virtual rank, as ``mpiexec`` would.

Owns what a launcher owns: turning one script into N ranks of one process
(or of ``--procs`` hosting processes), and their standard streams and exit
status. The MPI semantics are ``simcluster.MPI``'s; the engine is ``run()``'s.

- Each rank runs the script's code as ``__main__`` in a module of its own,
  with its own ``sys.argv``; ``sys.modules["__main__"]``, ``sys.argv`` and
  ``sys.stdin`` are swapped in each time the rank resumes (``engine.sync.on_switch``).
  Modules of the user's own that the script imports (files outside the
  standard library and installed packages) are imported by each rank for
  itself and swapped in with ``__main__``, as each process of an MPI job has
  its own; installed packages (numpy, ...) are imported once and shared.
- ``import mpi4py`` / ``from mpi4py import MPI`` give ``simcluster.MPI`` for
  the run (``sys.modules`` entries and a meta-path finder installed for the
  run and removed after), whether or not the real mpi4py is installed;
  nothing of the real one is imported. ``mpi4py.__file__`` is
  ``simcluster/_mpi4py/__init__.py``, whose folder holds ``mpi4py.run``,
  ``mpi4py.__main__`` and ``mpi4py.typing`` (``-m mpi4py script.py`` runs
  mpi4py's command line on each rank), and ``mpi4py.rc`` is ``MPI.rc``. As
  with ``mpiexec``, SCRIPT may be ``python`` followed by python's own form
  (``python script.py``, ``python -m mpi4py script.py``, ``python -c CMD``).
  ``mpi4py.util`` (``pkl5``, ``dtlib``,
  ``sync``, ``pool``) is ``simcluster.MPI.util`` and ``mpi4py.futures`` is
  ``simcluster.MPI.futures`` (both imported on first use, ``_Alias``; ``-m
  mpi4py.futures script.py`` is its static mode); other submodules fail saying why.
- Output: ``sys.stdout`` and ``sys.stderr`` are replaced for the run by
  streams that file each completed line under (virtual time, rank, order of
  writing). Lines are written to the real streams in that order, so the
  same program and seed print the same text on every transport.

Rule 1: a line is written out only once no rank can still print one that
sorts before it: a rank prints at the engine's current time or later, so
line (t, r) is final once t < now, or t == now and every rank below r has
finished. Rule 2: everything swapped in for a run is swapped back when it
ends, also when it fails.

With ``--transport shm|tcp`` the ranks live in hosting processes: the rank
function is ``script_rank`` (importable by module path), each process sets
the same things up for its own ranks, and each rank's lines and outcome come
back through a file in a per-run folder, merged and written by the caller.
With ``--transport mpi`` (under ``mpiexec``) every MPI process is a caller
hosting its block: the real mpi4py is imported before the script's name is
redirected, process 0 hands its run id and folder name to the others, the
records reach process 0 by an MPI gather, and only process 0 writes; every
process exits with process 0's status.
"""

from __future__ import annotations

import argparse
import builtins
import heapq
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import traceback
import types
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

from . import _identity, _rank_atexit, _rank_cwd
from ._rank_env import RankEnvironments, mpich_variables, node_places
from ._rank_modules import ModulePolicy

PROG: Final = "simcluster mpirun"
DEFAULT_LATENCY: Final = "alphabeta:1us,10GB/s"
"""``mpirun``'s network when ``--latency`` is not given: a cluster interconnect (docs/mpi.md)."""
OUT: Final = 1  # stream numbers in a line record
ERR: Final = 2
#: mpi4py submodules imported on first use from simcluster's own modules (``_Alias``)
_ALIASES: Final = {
    "mpi4py.futures": "simcluster.MPI.futures",
    "mpi4py.futures._core": "simcluster.MPI.futures._core",
    "mpi4py.futures.pool": "simcluster.MPI.futures.pool",
    "mpi4py.futures.util": "simcluster.MPI.futures.util",
    "mpi4py.util.pool": "simcluster.MPI.util.pool",
}

Record = tuple[float, int, int, int, str]  # (time, rank, seq, stream, text)
_PACKAGE_INIT: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mpi4py",
                                    "__init__.py")
"""``mpi4py.__file__`` during a run; its folder holds ``mpi4py``'s pure-Python modules below."""
_PACKAGE_MODULES: Final = ("run", "__main__", "typing", "_mpiabi", "bench")


# ---- command line ----


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``mpirun`` subcommand to the ``simcluster`` command's subparsers."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "mpirun", help="run an mpi4py SCRIPT once per virtual rank, as mpiexec would",
        description="Run an mpi4py script once per virtual rank, as mpiexec would: "
                    "`from mpi4py import MPI` gives simcluster's MPI, output comes in "
                    "virtual-time order, the exit status is the ranks'.")
    parser.add_argument("-n", "-np", "--world-size", dest="world_size", type=int, default=1,
                        metavar="N", help="number of ranks (default 1, as mpiexec)")
    parser.add_argument("--procs", type=int, default=None,
                        help="OS processes hosting the ranks (shm/tcp)")
    add_script_options(parser, transport="memory (default), shm, tcp, or mpi under mpiexec",
                       prepend=("--prepend-rank", "-prepend-rank"), module=("-m",))
    parser.set_defaults(latency=DEFAULT_LATENCY)
    parser.add_argument("--exact", action="store_true",
                        help="exactly reproducible virtual times: charge no measured compute time "
                             "(the default charges it on the memory transport, as SMPI does)")
    return parser


def add_script_options(parser: argparse.ArgumentParser, transport: str,
                       prepend: Sequence[str], module: Sequence[str]) -> None:
    """Add the options a script launcher shares (``mpirun``, ``torchrun``): run keywords, SCRIPT, ARGS."""
    parser.add_argument("--latency", default="zero",
                        help="latency model, e.g. zero, constant:5us, alphabeta:1us,10GB/s, "
                             "loggp:L,o,g,G, 'hierarchical:8;INTRA;INTER', 'jitter:0.1;MODEL'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--transport", default="memory", help=transport)
    parser.add_argument("--trace", default=None, help="write a Chrome trace JSON to this path")
    parser.add_argument("--compute", default=None,
                        metavar="{wall|cpu}[:F][,threshold=T][,record=FILE]|replay:FILE|gpu:DEVICE",
                        help="charge the time a rank's own code runs between calls (wall: elapsed; "
                             "cpu: its thread's CPU time, as SMPI) x F to its virtual clock, bursts "
                             "under T (default 5us) left out; record=FILE writes the charges, "
                             "replay:FILE charges them again; gpu:DEVICE (torchrun: h100_sxm, "
                             "h100_hbm2e_500w, a100_sxm_80gb) charges the predicted GPU time of "
                             "the rank's aten ops (docs/predict.md)")
    parser.add_argument("--timeout", type=float, default=None, help="wall seconds before giving up")
    parser.add_argument("--faults", default=None, metavar="PLAN",
                        help="a fault plan, e.g. 'crash:1@0.5ms', "
                             "'crash:2@all_reduce#3;slow:0x4@0..1ms' (docs/faults.md)")
    parser.add_argument("--summary", action="store_true",
                        help="after the run, one line on stderr: virtual time, wall time, "
                             "messages and bytes")
    parser.add_argument(*prepend, dest="prepend_rank", action="store_true",
                        help="start every output line with [RANK] (as MPICH)")
    parser.add_argument("--shared", action="append", default=[], metavar="PKG",
                        help="every rank shares top-level package PKG (repeatable; by default each "
                             "rank imports its own copy of pure-Python packages, docs/mpi.md)")
    parser.add_argument("--private", action="append", default=[], metavar="PKG",
                        help="every rank imports its own copy of top-level package PKG (repeatable)")
    parser.add_argument(*module, dest="as_module", action="store_true",
                        help="SCRIPT is a module name, run as `python -m MODULE` runs it")
    parser.add_argument("script", metavar="SCRIPT", help="the Python file (or module, with -m)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="arguments for the script (its sys.argv[1:])")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simcluster mpirun ARGV``; return the exit status."""
    parser = argparse.ArgumentParser(prog="simcluster")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["mpirun", *(sys.argv[1:] if argv is None else argv)])
    return run_args(args)


def run_args(args: argparse.Namespace) -> int:
    """Run what ``simcluster mpirun`` was told (``add_parser``'s namespace); return the exit status."""
    if args.exact and args.compute is not None:
        print(f"{PROG}: --exact charges no measured compute time; leave out --compute {args.compute}",
              file=sys.stderr)
        return 2
    if args.compute is None and not args.exact and args.transport == "memory" and args.faults is None:
        args.compute = "cpu"  # Wtime advances with the work between MPI calls, as under mpiexec
    keywords = script_keywords(args, PROG, ("procs", "trace", "compute"))
    if keywords is None or not _python_form(args):
        return 2
    keywords["transport"] = args.transport
    if args.transport != "memory":
        # the lowercase methods pickle, as mpi4py does; these processes run the user's own script
        keywords["serializer"] = "pickle"
    return mpirun(args.script, args.world_size, args.args, module=args.as_module,
                  prepend_rank=args.prepend_rank, summary=args.summary, shared=args.shared,
                  private=args.private, **keywords)


def _is_python(script: str) -> bool:
    """Whether SCRIPT names a Python interpreter (``mpiexec -n 2 python x.py``), not a script."""
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(script)) or os.path.isfile(script) \
            and not os.access(script, os.X_OK):
        return False
    return script == sys.executable or shutil.which(script) is not None


def _python_form(args: argparse.Namespace) -> bool:
    """Turn ``python [-u ...] SCRIPT|-m MOD|-c CMD ARGS`` into mpirun's SCRIPT (mpiexec's form).

    Returns False (after saying why) when no program follows the interpreter.
    """
    if args.as_module or not _is_python(args.script):
        return True
    program = python_program(list(args.args))
    if program is None:
        print(f"{PROG}: {' '.join([args.script, *args.args])}: no program to run; pass "
              "python SCRIPT, python -m MODULE or python -c CMD", file=sys.stderr)
        return False
    args.script, args.args, args.as_module = program
    return True


def _python_script(path: str) -> bool:
    """Whether ``path`` is a file whose ``#!`` line names a Python interpreter."""
    try:
        with open(path, "rb") as file:
            first = file.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def python_program(argv: list[str]) -> tuple[str, list[str], bool] | None:
    """``(script, args, is_module)`` of a python command line's arguments; None without a program."""
    rest = list(argv)
    while rest and rest[0] in ("-u", "-B", "-E", "-s", "-S", "-O", "-OO", "-q", "-b", "-bb"):
        del rest[0]  # options that change nothing a simulated rank does
    if not rest or rest[0] in ("-m", "-c") and len(rest) < 2:
        return None
    if rest[0] == "-m":
        return rest[1], rest[2:], True
    if rest[0] in ("-c", "-"):  # mpi4py's runner takes the same form, as the rank's __main__
        return "mpi4py", rest, True
    return rest[0], rest[1:], False


def script_keywords(args: argparse.Namespace, prog: str, optional: Sequence[str]
                    ) -> dict[str, Any] | None:
    """The ``run`` keywords of ``add_script_options``' options, or None once a bad one was reported.

    ``optional`` names the options passed on only when given.
    """
    from .engine import sync as _sync
    from . import faults
    from . import platform as _platform  # --latency takes a platform preset too

    try:
        model = _platform.parse(args.latency)  # a latency model's spec, or a platform preset
        _sync.parse_compute(args.compute)
        plan = None if args.faults is None else faults.parse(args.faults)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    keywords: dict[str, Any] = {"latency": model, "seed": args.seed, "timeout": args.timeout}
    if plan is not None:
        keywords["faults"] = plan
    for name in optional:
        if getattr(args, name) is not None:
            keywords[name] = getattr(args, name)
    progress = getattr(args, "progress", None)  # the command line's display on a terminal (cli)
    if progress is not None:
        keywords["_progress"] = progress
    return keywords


# ---- the launcher ----


def mpirun(script: str, world_size: int, argv: Sequence[str] = (), *, module: bool = False,
           prepend_rank: bool = False, summary: bool = False, shared: Sequence[str] = (),
           private: Sequence[str] = (), **keywords: Any) -> int:
    """Run ``script`` (a path, or a module name with ``module=True``) once per rank.

    Each rank's lines go to this process's ``sys.stdout`` / ``sys.stderr`` in
    virtual-time order (ties by rank); ``keywords`` go to ``simcluster.run``.
    ``summary`` adds one line on stderr after a run that finished: its
    virtual time, wall time, messages and bytes. Each rank imports its own
    copy of the pure-Python modules it imports (``simcluster._rank_modules``);
    ``shared`` and ``private`` name top-level packages to share between the
    ranks or to copy per rank, whatever that rule says.

    Returns:
        The exit status: 0 when every rank finished; else the first nonzero
        ``sys.exit`` code by virtual time (ties by rank), the code given to
        ``Abort``, 1 for an exception (its traceback printed as the rank's
        stderr), a deadlock or a timeout (the report printed), 2 when the
        script or the options are refused.
    """
    if isinstance(world_size, int) and world_size < 1:  # run()'s own message, before sizing for it
        print(f"{PROG}: run(world_size={world_size!r}): world_size must be an int >= 1; pass the "
              "number of virtual ranks", file=sys.stderr)
        return 2
    spec = script_spec(script, list(argv), module, shared=shared, private=private)
    if isinstance(spec, int):
        return spec
    transport = keywords.get("transport", "memory")
    world = None
    if transport == "mpi":  # hosted by the processes of an mpiexec job
        world = _mpi_world()
        if world is None:
            return 2
    first = world is None or world.Get_rank() == 0
    if first:
        spec["records"] = (tempfile.mkdtemp(prefix="simcluster-mpirun-")
                           if transport != "memory" else None)
    if world is not None:  # one run id and one folder name for every process of the job
        spec = world.bcast(spec, root=0)
        os.makedirs(spec["records"], exist_ok=True)
    out, err = (sys.stdout, sys.stderr) if first else (io.StringIO(), io.StringIO())
    session = Session(spec, world_size, prepend_rank, out, err)
    session.mpi = world
    session.summary = summary
    try:
        return session.launch(keywords)
    finally:
        if first and spec["records"] is not None:
            shutil.rmtree(spec["records"], ignore_errors=True)


def _mpi_world() -> Any:
    """The real ``MPI.COMM_WORLD``, imported before the script's ``mpi4py`` is redirected; None if absent."""
    from .hosting import mpi_job as _mpi_job
    from .errors import UsageError

    try:
        return _mpi_job.real_mpi().COMM_WORLD
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return None


def script_spec(script: str, argv: list[str], module: bool, prog: str = PROG, *,
                shared: Sequence[str] = (), private: Sequence[str] = ()) -> dict[str, Any] | int:
    """What every hosting process needs to run the script: plain data (it travels by msgpack).

    Returns 2 (the exit status) when ``script`` is not a file or ``shared`` /
    ``private`` name no top-level package or the same one; ``prog`` names
    the command in that message.
    """
    for option, names in (("--shared", shared), ("--private", private)):
        for name in names:
            if not name.isidentifier():
                print(f"{prog}: {option} {name!r}: name a top-level package, e.g. {option} "
                      f"{name.partition('.')[0] or 'accelerate'} (its submodules go with it)",
                      file=sys.stderr)
                return 2
    both = sorted(set(shared) & set(private))
    if both:
        print(f"{prog}: --shared and --private both name {', '.join(both)}; name each package "
              "in one of them", file=sys.stderr)
        return 2
    if module:
        path0 = os.getcwd()  # as `python -m`: the current folder comes first on sys.path
        target = script
        argv0 = script  # replaced by the module's file once it is found
    else:
        if not os.path.isfile(script):
            print(f"{prog}: {script}: no such file; pass the path of a Python script "
                  "(or -m MODULE)", file=sys.stderr)
            return 2
        target = os.path.abspath(script)
        path0 = os.path.dirname(target)
        argv0 = script
    return {"id": uuid.uuid4().hex, "module": module, "target": target, "path0": path0,
            "argv": [argv0, *argv], "shared": list(shared), "private": list(private)}


class _Refused(Exception):
    """The script cannot be run (not found, a syntax error): the message is for the user."""


def _load_code(spec: dict[str, Any]) -> tuple[types.CodeType, dict[str, Any]]:
    """Return the script's code and the ``__main__`` attributes python would give it.

    Raises:
        _Refused: no such module, or a package without ``__main__``.
        SyntaxError: the source does not compile.
    """
    target: str = spec["target"]
    if not spec["module"]:
        with open(target, "rb") as file:
            source = file.read()
        code = compile(source, target, "exec", dont_inherit=True)
        return code, {"__file__": target, "__spec__": None, "__package__": None,
                      "__loader__": importlib.machinery.SourceFileLoader("__main__", target),
                      "__cached__": None}
    name = target
    found = _find_module(name)
    if found.submodule_search_locations is not None:  # a package: run its __main__, as python does
        name = f"{target}.__main__"
        try:
            found = _find_module(name)
        except _Refused:
            raise _Refused(f"-m {target}: {target} is a package and has no __main__ module; "
                           "name a module inside it") from None
    loader = found.loader
    get_code = getattr(loader, "get_code", None)
    module_code = None if get_code is None else get_code(name)
    if not isinstance(module_code, types.CodeType):
        raise _Refused(f"-m {target}: {name} has no Python code to run")
    return module_code, {"__file__": found.origin, "__spec__": found, "__package__": found.parent,
                         "__loader__": loader, "__cached__": found.cached}


def _find_module(name: str) -> importlib.machinery.ModuleSpec:
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise _Refused(f"-m {name}: {exc}") from None
    if found is None:
        raise _Refused(f"-m {name}: no module named {name!r}; check the name and that its "
                       "folder is the current one or on PYTHONPATH")
    return found


def script_rank(comm: Any, spec: dict[str, Any]) -> int:
    """The rank function: run the script as this rank's ``__main__``; return its exit code.

    Module-level, so that hosting processes (shm/tcp) import it by name.
    """
    from .engine import sync as _sync

    task = _sync.current()
    assert task is not None, "script_rank runs as a synchronous rank"
    _sync.stop_clock(task, None)  # measured compute: the launcher's work is not the rank's
    session = Session.current(spec)
    if spec["id"] != session.spec["id"]:  # a rank that MPI.Comm.Spawn started
        session.spawned[task.rank] = spec["id"]
    state = session.start_rank(task)
    code = 0
    program = session.program(task.rank)[0]
    _sync.start_clock(task)  # the script's work between its MPI calls is
    try:
        _run_main(program, state.module.__dict__)
    except SystemExit as exc:
        _rank_atexit.run(task.rank, exc)
        _sync.stop_clock(task, "exit")
        code = state.exit_code(exc)
    except BaseException as exc:
        _sync.stop_clock(task, None)
        abort = _abort_code(exc)
        if abort is not None:
            state.outcome = ["abort", abort, state.now()]
        elif isinstance(exc, Exception):  # not GreenletExit: the run cancelling this rank
            state.print_exception(exc)
            _rank_atexit.run(task.rank, exc)  # as an interpreter does, after the traceback
            state.outcome = ["error", 1, state.now()]
        raise
    else:
        _rank_atexit.run(task.rank)
        _sync.stop_clock(task, "exit")
        state.outcome = ["exit", 0, state.now()]
    finally:
        state.finish()
    return code


def _run_main(program: types.CodeType, namespace: dict[str, Any]) -> None:
    """Run the script, then what its process would run as it exits (also after ``sys.exit``)."""
    from .engine import sync as _sync

    try:
        exec(program, namespace)  # noqa: S102 - running the user's script is the point
    except SystemExit:
        _at_exit()
        raise
    _sync.handle_signals()
    _at_exit()


def _at_exit() -> None:
    """The rank's script is done: its ``mpi4py.futures`` executors finish and stop, as at exit."""
    futures = sys.modules.get("simcluster.MPI.futures._core")
    if futures is not None:
        futures.at_exit()


def _abort_code(exc: BaseException) -> int | None:
    """The code of ``MPI.Comm.Abort(code)`` when ``exc`` is its exception, else None."""
    from .errors import Aborted

    return exc.code if isinstance(exc, Aborted) else None


# ---- one run in one process ----


class RankState:
    """One rank's process state (``__main__``, ``sys.argv``, stdin) and its pending output."""

    def __init__(self, session: Session, task: Any, module: types.ModuleType,
                 argv: list[str], stdin: TextIO) -> None:
        self.session = session
        self.task = task  # the _sync.SyncRank (its .comm.now is the virtual time)
        self.rank: int = task.rank
        self.module = module
        self.argv = argv
        self.stdin = stdin
        self.excepthook: Any = sys.__excepthook__  # its own sys.excepthook, a fresh process's at first
        self.partial = {OUT: "", ERR: ""}
        self.seq = 0
        self.writing = threading.Lock()  # the rank's own threads print beside it
        self.modules: dict[str, types.ModuleType] = {}  # this rank's copies of private modules
        # the root logger's configuration (logging.basicConfig's), a fresh process's at first, and
        # the loggers this rank's modules create (its own copy of logging's registry, made on entry)
        self.log_handlers: list[Any] = []
        self.log_level = 30  # logging.WARNING
        self.loggers: dict[str, Any] | None = None
        self.env: dict[str, str | None] = {}  # its variables unlike the launcher's (_rank_env)
        # its warning filters and where warnings go (catch_warnings(record=True) swaps that), the
        # launcher's at first, with what the libraries it imported added, as the process would
        filters, *shown = session.saved_warnings
        self.warning_state = (list(filters), *shown)
        # hosted: each line is appended to this rank's file at once, so that what a rank
        # printed before its process was stopped still reaches the caller
        self.sink: TextIO | None = None
        if session.records_dir is not None:
            path = os.path.join(session.records_dir, f"rank-{self.rank}.jsonl")
            self.sink = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by finish()
        # ["exit" | "abort" | "error", code, virtual time]; None: cancelled (another rank failed)
        self.outcome: list[Any] | None = None

    def now(self) -> float:
        now: float = self.task.comm.now
        return now

    def enter(self) -> None:
        _rank_cwd.enter(self.rank)
        modules = sys.modules
        modules["__main__"] = self.module
        sys.argv = self.argv
        sys.stdin = self.stdin
        sys.excepthook = self.excepthook
        _set_warnings(self.warning_state)
        root = self.session.root_logger
        if self.loggers is None:
            self.loggers = dict(self.session.saved_logging[2])
        root.manager.loggerDict = self.loggers
        root.handlers = self.log_handlers
        if root.level != self.log_level:
            root.setLevel(self.log_level)  # also clears the loggers' cached levels
        session = self.session
        if session.envs is not None:
            session.envs.enter(self.env)
        if session.local:
            for name in session.local:
                modules.pop(name, None)
            modules.update(self.modules)
        session.seen = len(modules)

    def leave(self) -> None:
        session = self.session
        assert session.saved is not None
        session.sort_new_modules()
        if session.envs is not None:
            session.envs.leave(self.env)
        modules = sys.modules
        if session.local:
            own = self.modules
            for name in session.local:
                module = modules.pop(name, None)
                if module is not None:
                    own[name] = module
        root = session.root_logger
        self.log_handlers, self.log_level = root.handlers, root.level
        self.excepthook = sys.excepthook
        self.warning_state = _get_warnings()
        _set_warnings(session.saved_warnings)
        modules["__main__"], sys.argv, sys.stdin, sys.excepthook = session.saved
        root.handlers, root.manager.loggerDict = session.saved_logging[0], session.saved_logging[2]
        if root.level != session.saved_logging[1]:
            root.setLevel(session.saved_logging[1])
        session.seen = len(modules)
        session.flush_final(self.now())

    def write(self, stream: int, text: str) -> None:
        if self.task.closing:  # the run has ended: under mpiexec, the job is being killed
            return
        with self.writing:
            lines = (self.partial[stream] + text).split("\n")
            self.partial[stream] = lines.pop()
            for line in lines:
                self._file(stream, line + "\n")

    def _file(self, stream: int, text: str) -> None:
        record = (self.now(), self.rank, self.seq, stream, text)
        self.seq += 1
        if self.sink is None:
            self.session.file(record)
        else:
            self.sink.write(json.dumps(record) + "\n")
            self.sink.flush()

    def exit_code(self, exc: SystemExit) -> int:
        """Like the interpreter: None is 0, an int is itself, anything else is printed and 1."""
        code = exc.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            self.write(ERR, f"{code}\n")
            status = 1
        self.outcome = ["exit", status, self.now()]
        return status

    def print_exception(self, exc: BaseException) -> None:
        """Write ``exc``'s traceback as this rank's stderr, from the script's frames inward, or
        hand it to the ``sys.excepthook`` the rank's script set, as the interpreter would.

        An error simcluster wrote for users (an MPI error, a collective mismatch)
        ends at the user's call, as a compiled MPI's does (``frames.user_traceback``).
        """
        from .engine import frames as _frames

        tb = _frames.user_traceback(exc)
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        hook = sys.excepthook  # the rank's own, swapped in while it runs (``enter``)
        if hook is not sys.__excepthook__:
            whole = exc.__traceback__
            exc.__traceback__ = tb  # (the interpreter's own hook prints the exception's traceback)
            try:
                hook(type(exc), exc, tb)
                return
            except BaseException as failed:  # noqa: BLE001 - reported as the interpreter does
                self.write(ERR, "Error in sys.excepthook:\n")
                for chunk in traceback.format_exception(type(failed), failed, failed.__traceback__):
                    self.write(ERR, chunk)
                self.write(ERR, "\nOriginal exception was:\n")
            finally:
                exc.__traceback__ = whole
        for chunk in traceback.format_exception(type(exc), exc, tb):
            self.write(ERR, chunk)

    def finish(self) -> None:
        for stream in (OUT, ERR):
            if self.partial[stream]:
                self._file(stream, self.partial[stream])
                self.partial[stream] = ""
        self.session.finished(self)
        if self.sink is not None:
            self.sink.write(json.dumps({"outcome": self.outcome}) + "\n")
            self.sink.close()


_WARNINGS: Final = ("filters", "showwarning", "_showwarnmsg_impl")
"""The ``warnings`` module's state a process has of its own (the interpreter reads the
module's attributes at each warning, so assigning them is enough)."""


def _get_warnings() -> tuple[Any, ...]:
    return tuple(getattr(warnings, name) for name in _WARNINGS)


def _set_warnings(state: tuple[Any, ...]) -> None:
    for name, value in zip(_WARNINGS, state):
        setattr(warnings, name, value)


class Session:
    """Everything one run swaps in a process, and the lines its ranks printed there.

    The caller's process has one per ``mpirun`` call; a hosting process makes
    one (``current``) when its first rank starts, and keeps it until it exits.
    Other launchers (``simcluster torchrun``) subclass it: ``prog`` names the
    command in messages, ``run_ranks`` runs the ranks, ``start_rank`` sets a
    rank's process state up.
    """

    _sessions: dict[str, Session] = {}
    prog: str = PROG
    ranks_per_node: int | None = None  # each rank's node (_identity); None: the latency model's

    def __init__(self, spec: dict[str, Any], world_size: int, prepend: bool,
                 out: TextIO, err: TextIO) -> None:
        self.spec = spec
        self.world_size = world_size
        self.prepend = prepend
        self.real = {OUT: out, ERR: err}
        self.records_dir: str | None = spec.get("records")
        self.pid = _identity.real_getpid()  # os.getpid() answers for the rank inside one
        self.code: types.CodeType | None = None
        self.attrs: dict[str, Any] = {}
        self.states: dict[int, RankState] = {}
        self.heap: list[Record] = []
        self.done = bytearray(world_size)
        self.lowest = 0  # lowest rank not finished
        self.saved: tuple[Any, list[str], TextIO, Any] | None = None
        self.saved_warnings = _get_warnings()  # the launcher's warnings state (each rank has its own)
        self.undo: list[Any] = []
        self.hosted_outcomes: dict[int, list[Any] | None] = {}
        self.notes = 0  # launcher lines filed so far (their order among themselves)
        self.mpi: Any = None  # the real MPI.COMM_WORLD when the ranks are hosted by an MPI job
        self.summary = False  # --summary: one line on stderr after the run
        self.result: Any = None  # the run's RunResult, once it finished
        self.gathered: dict[int, str] = {}  # rank -> its records, sent to MPI process 0
        # modules each rank imports a copy of, as each process of a job does (_rank_modules)
        self.policy = ModulePolicy(spec.get("shared", ()), spec.get("private", ()))
        # each rank's os.environ; None where another layer keeps it (torchrun's torch session)
        self.envs: RankEnvironments | None = RankEnvironments()
        self.places: tuple[list[int], list[int]] | None = None  # each rank's place on its node
        # what MPI.Comm.Spawn runs: each spawned program's code, __main__ attributes and argv by
        # its spec's id, and the program of each spawned rank, by world rank (spawn_program)
        self.programs: dict[str, tuple[types.CodeType, dict[str, Any], list[str]]] = {}
        self.spawned: dict[int, str] = {}
        self.spawn_paths: list[str] = []  # the folders of spawned scripts put on sys.path
        import logging

        self.root_logger = logging.root  # its handlers and level are each rank's own
        self.saved_logging: tuple[list[Any], int, dict[str, Any]] = (
            logging.root.handlers, logging.root.level, logging.root.manager.loggerDict)
        self.local: set[str] = set()
        self.checked: set[str] = set()  # module names already sorted into shared or local
        self.seen = 0  # len(sys.modules) when last sorted

    @classmethod
    def current(cls, spec: dict[str, Any]) -> Session:
        """The session of the run ``spec`` belongs to in this process (made here when hosted)."""
        session = cls._sessions.get(spec["id"])
        if session is not None and session.pid == _identity.real_getpid():
            return session
        # a hosting process: set up once, for good (the process ends with the run)
        from .engine import sync as _sync

        task = _sync.current()
        assert task is not None
        session = cls(spec, task.comm.size, False, sys.stdout, sys.stderr)
        session.install()  # first: -m finds the module on the run's sys.path
        session.code, session.attrs = _load_code(spec)
        return session

    def load(self) -> int | None:
        """Compile the script here; return an exit status when it cannot run, else None."""
        try:
            self.code, self.attrs = _load_code(self.spec)
        except _Refused as exc:
            print(f"{self.prog}: {exc}", file=self.real[ERR])
            return 2
        except SyntaxError as exc:
            traceback.print_exception(type(exc), exc, None, file=self.real[ERR])
            return 1
        except OSError as exc:
            print(f"{self.prog}: {self.spec['target']}: {exc.strerror}", file=self.real[ERR])
            return 2
        if self.spec["module"]:
            self.spec["argv"][0] = self.attrs["__file__"] or self.spec["target"]
        return None

    def launch(self, keywords: dict[str, Any]) -> int:
        """Load the script, run it on every rank, write out its lines; return the exit status."""
        from . import errors

        self.install()  # first: -m finds the module on the run's sys.path, as python does
        error: BaseException | None = None
        try:
            refused = self.load()
            if refused is not None:
                return refused
            self.run_ranks(keywords)
        except errors.UsageError as exc:  # run() refused the options; other errors keep their traceback
            print(f"{self.prog}: {exc}", file=self.real[ERR])
            return 2
        except (errors.SimclusterError, errors.Aborted) as exc:
            error = exc
        finally:
            self.uninstall()
        if isinstance(error, errors.RankError) and isinstance(error.__cause__, BrokenPipeError):
            from . import _command

            if _command.reader_gone(self.real[OUT]):  # `| head` exited: cli.main ends quietly
                raise error.__cause__
        if self.mpi is not None:
            self._gather_records(error)
        if self.records_dir is not None:
            self._collect()
        self.flush_all()
        if self.summary and self.result is not None and self.mpi_first():
            self.print_summary()
        crashed = self.result.crashed if self.result is not None else getattr(error, "crashed", {})
        if self.mpi_first():
            from .trace import format_seconds

            for rank, when in sorted(crashed.items()):
                print(f"{self.prog}: rank {rank} crashed at virtual time {format_seconds(when)} "
                      "(the fault plan)", file=self.real[ERR])
        status = self._status(error)
        if self.mpi is not None and not isinstance(error, errors.TransportError):
            status = self.mpi.bcast(status, root=0)  # every process exits as process 0 does
        return status

    def mpi_first(self) -> bool:
        """Whether this process reports for the run (always, unless an MPI job hosts the ranks)."""
        return self.mpi is None or self.mpi.Get_rank() == 0

    def print_summary(self) -> None:
        """``--summary``: virtual time, wall time, messages and bytes, on one line of stderr."""
        from .trace import format_seconds

        result = self.result
        print(f"{self.prog}: elapsed {format_seconds(result.elapsed)} virtual, {result.wall:.3f} s wall, "
              f"{result.stats.total_messages} messages, {result.stats.total_bytes} bytes",
              file=self.real[ERR])

    def _gather_records(self, error: BaseException | None) -> None:
        """MPI: bring the records of every process's ranks to process 0 (they may be on other machines).

        Skipped after a TransportError (a process may be gone, and a collective
        would wait for it): process 0 then reads what is on its own machine.
        """
        from . import errors

        if isinstance(error, errors.TransportError):
            return
        mine: dict[int, str] = {}
        for rank in self.states:
            path = os.path.join(self.records_dir or "", f"rank-{rank}.jsonl")
            try:
                with open(path, encoding="utf-8") as file:
                    mine[rank] = file.read()
            except FileNotFoundError:
                continue
        got = self.mpi.gather(mine, root=0)
        if got is not None:
            for part in got:
                self.gathered.update(part)

    def run_ranks(self, keywords: dict[str, Any]) -> None:
        """Run ``script_rank`` on every rank (``keywords`` go to ``simcluster.run``)."""
        from . import runner

        self.result = runner.run(script_rank, self.world_size, args=(self.spec,), **keywords)

    def _status(self, error: BaseException | None) -> int:
        from . import errors

        outcomes = sorted((o[2], rank, o[0], o[1]) for rank, o in self.outcomes().items()
                          if o is not None)
        for _time, rank, kind, code in outcomes:
            if kind == "abort":
                print(f"{self.prog}: rank {rank} called Abort({code}); the run stopped with exit "
                      f"status {code}", file=self.real[ERR])
                return int(code)
        reported = {rank for _t, rank, kind, _c in outcomes if kind == "error"}
        if error is not None and not (isinstance(error, errors.RankError) and error.rank in reported):
            cause = error.__cause__
            if isinstance(error, errors.RankError) and cause is not None:
                traceback.print_exception(type(cause), cause, cause.__traceback__,
                                          file=self.real[ERR])
            print(f"{self.prog}: {error}", file=self.real[ERR])
        for _time, _rank, kind, code in outcomes:
            if code:
                return int(code)
        return 1 if error is not None else 0

    def outcomes(self) -> dict[int, list[Any] | None]:
        """How each rank ended: its own state here, or what its hosting process wrote."""
        got = {rank: state.outcome for rank, state in self.states.items()}
        got.update(self.hosted_outcomes)
        return got

    # ---- ranks ----

    def program(self, rank: int) -> tuple[types.CodeType, dict[str, Any], list[str]]:
        """What world rank ``rank`` runs: its code, its ``__main__``'s attributes and its ``sys.argv``."""
        spawned = self.spawned.get(rank)
        if spawned is not None:
            return self.programs[spawned]
        assert self.code is not None
        return self.code, self.attrs, self.spec["argv"]

    def rank_state(self, task: Any) -> RankState:
        _code, attrs, argv = self.program(task.rank)
        module = types.ModuleType("__main__")
        module.__dict__.update(attrs)
        module.__builtins__ = builtins  # type: ignore[attr-defined]
        stdin = self.saved[2] if task.rank == 0 and self.saved is not None else io.StringIO("")
        state = RankState(self, task, module, list(argv), stdin)
        self.states[task.rank] = state
        if task.rank >= len(self.done):  # spawned ranks: their lines are ordered as the others'
            self.done.extend(bytes(task.rank + 1 - len(self.done)))
        return state

    def start_rank(self, task: Any) -> RankState:
        """From a new rank: make its state and have it swapped in whenever the rank resumes."""
        from .engine import sync as _sync
        from .MPI._state import node_of

        state = self.rank_state(task)
        comm = task.comm  # its COMM_WORLD: the launch's, or the group Spawn started it in
        if task.rank not in self.spawned:
            if self.places is None:
                self.places = node_places([node_of(comm, r) for r in range(self.world_size)])
            local, on_node = self.places
        else:
            local, on_node = node_places([node_of(comm, r) for r in comm.group.world_ranks])
        state.env = mpich_variables(comm.rank, comm.size, local[comm.rank], on_node[comm.rank],
                                    socket.gethostname())
        _sync.on_switch(state.enter, state.leave)
        return state

    def spawn_program(self, command: str, args: Sequence[str]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The rank function and its arguments that run ``command args`` as a spawned rank.

        ``MPI.Comm.Spawn`` calls this (``MPI._spawn``'s launcher): ``command`` is a Python
        interpreter followed by a python command line in ``args`` (``SCRIPT``, ``-m MODULE``,
        ``-c CMD``), or a Python script whose ``#!`` line names one.

        Raises:
            ValueError: what cannot be run, and why.
        """
        argv = [str(arg) for arg in args]
        if _is_python(command):
            program = python_program(argv)
            if program is None:
                raise ValueError(f"{' '.join([command, *argv])}: no program to run; pass python "
                                 "SCRIPT, python -m MODULE or python -c CMD")
            script, rest, module = program
        elif _python_script(command):
            script, rest, module = command, argv, False
        else:
            raise ValueError(f"{command}: not a Python interpreter or a Python script; {self.prog} "
                             "spawns Python programs as ranks (pass sys.executable with the "
                             "script in args)")
        if not module and not os.path.isfile(script):
            raise ValueError(f"{script}: no such file; pass the path of a Python script")
        spec = script_spec(script, rest, module, self.prog, shared=self.spec["shared"],
                           private=self.spec["private"])
        assert isinstance(spec, dict)
        spec["records"] = self.records_dir
        try:
            code, attrs = _load_code(spec)
        except _Refused as exc:
            raise ValueError(str(exc)) from None
        except (SyntaxError, OSError) as exc:
            raise ValueError(f"{script}: {exc}") from None
        if module:
            spec["argv"][0] = attrs["__file__"] or spec["target"]
        self.programs[spec["id"]] = (code, attrs, spec["argv"])
        Session._sessions[spec["id"]] = self
        if spec["path0"] not in sys.path:  # its imports find its folder, as its process's would
            sys.path.insert(1, spec["path0"])
            self.spawn_paths.append(spec["path0"])
        return script_rank, (spec,)

    def sort_new_modules(self) -> None:
        """Sort the modules imported since last time into shared and local (each rank's own)."""
        modules = sys.modules
        if len(modules) == self.seen:
            return
        private = self.policy.private
        for name in modules.keys() - self.checked:
            self.checked.add(name)
            if private(name):
                self.local.add(name)

    def finished(self, state: RankState) -> None:
        self.done[state.rank] = 1
        while self.lowest < len(self.done) and self.done[self.lowest]:
            self.lowest += 1

    def _collect(self) -> None:
        """Read back what each hosted rank printed and how it ended."""
        hosted: dict[int, list[Any] | None] = {}
        for rank in range(self.world_size):
            text = self.gathered.get(rank)
            if text is None:
                path = os.path.join(self.records_dir or "", f"rank-{rank}.jsonl")
                try:
                    with open(path, encoding="utf-8") as file:
                        text = file.read()
                except FileNotFoundError:
                    continue  # the rank never started
            lines = text.splitlines()
            for line in lines:
                try:
                    got = json.loads(line)
                except ValueError:
                    break  # cut short by its process stopping mid-write
                if isinstance(got, dict):
                    hosted[rank] = got["outcome"]
                else:
                    time, r, seq, stream, text = got
                    heapq.heappush(self.heap, (time, r, seq, stream, text))
        self.hosted_outcomes = hosted

    # ---- output ----

    def file(self, record: Record) -> None:
        heapq.heappush(self.heap, record)

    def note(self, text: str) -> None:
        """File a line of the launcher's own for stderr, at the running rank's virtual time.

        It comes out before the ranks' lines of that time and never takes a
        ``--prepend-rank`` prefix.
        """
        from .engine import sync as _sync

        task = _sync.current()
        now: float = 0.0 if task is None else task.comm.now
        self.file((now, -1, self.notes, ERR, text if text.endswith("\n") else text + "\n"))
        self.notes += 1

    def flush_final(self, now: float) -> None:
        """Write out every line no rank can still precede (Rule 1)."""
        heap = self.heap
        if not heap:
            return
        limit = (now, self.lowest)
        wrote = False
        while heap and heap[0][:2] < limit:
            self._emit(heapq.heappop(heap))
            wrote = True
        if wrote:
            self._flush_real()

    def flush_all(self) -> None:
        heap = self.heap
        while heap:
            self._emit(heapq.heappop(heap))
        self._flush_real()

    def _emit(self, record: Record) -> None:
        _time, rank, _seq, stream, text = record
        if self.prepend and rank >= 0:
            text = f"[{rank}] {text}"
        self.real[stream].write(text)

    def _flush_real(self) -> None:
        for stream in self.real.values():
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    # ---- process state ----

    def install(self) -> None:
        """Swap in the run's mpi4py, streams and import path (Rule 2: ``uninstall`` undoes it)."""
        from . import MPI
        from .MPI import _rc

        self.saved = (sys.modules.get("__main__"), sys.argv, sys.stdin, sys.excepthook)
        self.saved_warnings = _get_warnings()
        root = self.root_logger
        self.saved_logging = (root.handlers, root.level, root.manager.loggerDict)
        saved_modules = {name: mod for name, mod in sys.modules.items()
                         if name == "mpi4py" or name.startswith("mpi4py.")}
        for name in saved_modules:
            del sys.modules[name]
        package = _mpi4py_package(MPI)
        sys.modules["mpi4py"] = package
        sys.modules["mpi4py.MPI"] = MPI
        sys.modules["mpi4py.rc"] = package.rc  # as mpi4py registers it
        sys.modules.update(_mpi4py_util())
        package.util = sys.modules["mpi4py.util"]  # type: ignore[attr-defined]
        finder = _Finder()
        sys.meta_path.insert(0, finder)
        out, err = sys.stdout, sys.stderr
        sys.stdout = _Stream(self, OUT, out)
        sys.stderr = _Stream(self, ERR, err)
        sys.path.insert(0, self.spec["path0"])
        self.checked = set(sys.modules)  # what is imported already stays shared
        self.policy.install()
        if self.envs is not None:
            self.envs.install()
        self.seen = len(sys.modules)
        self.undo = [saved_modules, finder, out, err, sys.path[0], dict(vars(_rc.rc))]
        Session._sessions[self.spec["id"]] = self
        from .MPI import _spawn

        _spawn.launcher = self.spawn_program  # MPI.Comm.Spawn starts its programs as ranks here
        _identity.install(self.ranks_per_node)  # each rank's os.getpid() and host name

    def uninstall(self) -> None:
        if not self.undo:
            return
        from .MPI import _rc

        saved_modules, finder, out, err, path0, saved_rc = self.undo
        vars(_rc.rc).clear()  # the script's mpi4py.rc settings were its process's, not ours
        vars(_rc.rc).update(saved_rc)
        self.undo = []
        from .MPI import _spawn

        _spawn.launcher = None
        _identity.uninstall()
        self.policy.uninstall()
        if self.envs is not None:
            self.envs.uninstall()
        for name in self.local:  # the last rank's copies: the ranks' modules go with the run
            sys.modules.pop(name, None)
        Session._sessions.pop(self.spec["id"], None)
        for spawned in self.programs:
            Session._sessions.pop(spawned, None)
        for path in self.spawn_paths:
            if path in sys.path:
                sys.path.remove(path)
        if sys.path and sys.path[0] == path0:
            del sys.path[0]
        elif path0 in sys.path:
            sys.path.remove(path0)
        sys.stdout, sys.stderr = out, err
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "mpi4py" or n.startswith("mpi4py.")]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        if self.saved is not None:
            main_module, sys.argv, sys.stdin, sys.excepthook = self.saved
            if main_module is not None:
                sys.modules["__main__"] = main_module


class _Stream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` during a run: lines go to the writing rank's record.

    Text written outside any rank (the launcher, warnings at the end of the
    run) goes straight to the real stream.
    """

    def __init__(self, session: Session, stream: int, real: TextIO) -> None:
        super().__init__()
        self._session = session
        self._stream = stream
        self._real = real
        self.buffer = _Bytes(self)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._real, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._real, "errors", None)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        from .engine import sync as _sync

        task = _sync.current()
        if task is None:  # a thread a rank started prints as the rank's process does
            process = _identity.calling_process()
            state = None if process is None else self._session.states.get(process.rank)
            if state is None or process is None or state.task is not process.task:
                return self._real.write(text)
            state.write(self._stream, text)  # at the rank's virtual time now
            return len(text)
        state = self._session.states.get(task.rank)
        if state is None or state.task is not task:
            return self._real.write(text)
        _sync.stop_clock(task, "print")  # measured compute: the line comes after the work before it,
        try:
            state.write(self._stream, text)  # and capturing it is not the rank's work
        finally:
            _sync.start_clock(task)
        return len(text)

    def flush(self) -> None:
        pass  # lines are written out in virtual-time order, not when a rank flushes

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._real.fileno()


class _Bytes(io.RawIOBase):
    """``sys.stdout.buffer`` during a run: bytes decoded and written as text."""

    def __init__(self, text: _Stream) -> None:
        super().__init__()
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raw = bytes(data)
        self._text.write(raw.decode(self._text.encoding, errors="surrogateescape"))
        return len(raw)


# ---- the mpi4py that scripts import ----


def _mpi4py_package(mpi: types.ModuleType) -> types.ModuleType:
    package = types.ModuleType("mpi4py", "mpi4py's API on simcluster (set up by simcluster mpirun).")
    # a package in a real folder (simcluster/_mpi4py): mpi4py.run and mpi4py.__main__ load from it;
    # other submodule imports reach _Finder, which explains
    package.__file__ = _PACKAGE_INIT
    package.__path__ = [os.path.dirname(_PACKAGE_INIT)]
    package.__spec__ = importlib.machinery.ModuleSpec("mpi4py", None, origin=_PACKAGE_INIT,
                                                      is_package=True)
    package.__spec__.submodule_search_locations = list(package.__path__)
    package.__spec__.has_location = True
    package.__all__ = ["MPI"]  # type: ignore[attr-defined]
    package.__version__ = "4.1.2"  # type: ignore[attr-defined]  # the mpi4py API simcluster.MPI follows
    package.rc = mpi.rc  # type: ignore[attr-defined]
    package.Rc = type(mpi.rc)  # type: ignore[attr-defined]
    from .MPI import _toplevel

    package.get_config = _toplevel.get_config  # type: ignore[attr-defined]
    package.get_include = _toplevel.get_include  # type: ignore[attr-defined]
    package.profile = _toplevel.profile  # type: ignore[attr-defined]
    package.MPI = mpi  # type: ignore[attr-defined]
    return package


def _mpi4py_util() -> dict[str, types.ModuleType]:
    """``mpi4py.util`` and the submodules simcluster provides (``simcluster.MPI.util``), by mpi4py name."""
    from .MPI import util
    from .MPI.util import dtlib, pkl5, sync

    return {"mpi4py.util": util, "mpi4py.util.dtlib": dtlib, "mpi4py.util.pkl5": pkl5,
            "mpi4py.util.sync": sync}


class _Finder(importlib.abc.MetaPathFinder):
    """During a run, ``mpi4py.futures`` and ``mpi4py.util.pool`` are simcluster's; other unknown submodules fail saying why."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("mpi4py."):
            return None
        parts = fullname.split(".")
        if len(parts) == 2 and parts[1] in _PACKAGE_MODULES:
            return None  # beside _PACKAGE_INIT: the path finder loads it from mpi4py.__path__
        if fullname in _ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _Alias(_ALIASES[fullname]),
                                                  is_package=fullname == "mpi4py.futures")
        if fullname in ("mpi4py.futures.__main__", "mpi4py.futures.server"):
            return None  # scripts (-m): the path finder loads them from mpi4py.futures.__path__
        raise ModuleNotFoundError(f"No module named {fullname!r} under {PROG} (simcluster's mpi4py "
                                  "has MPI, bench, futures, run, typing and util (pkl5, dtlib, "
                                  "sync, pool) only)", name=fullname)


class _Alias(importlib.abc.Loader):
    """Load ``mpi4py.X`` as simcluster's module ``target``: the same module object under both names."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        # the import system returns what sys.modules holds under the name once this returns
        sys.modules[module.__name__] = importlib.import_module(self.target)
