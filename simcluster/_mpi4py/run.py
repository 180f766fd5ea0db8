"""``mpi4py.run`` under ``simcluster mpirun``: ``python -m mpi4py [options] <pyfile> | -m mod | -c cmd | - [arg] ...``.

mpi4py's command line, on each rank: the options (``--prefix``, ``--version``,
``--mpi-std-version``, ``--mpi-lib-version``, ``--mpi-library``, ``-h``,
``-rc key=value,...``) answer as mpi4py's do, and the program runs as the
calling rank's ``__main__``. It runs in the module the rank already runs
(not a new one, as ``runpy`` would make), because the launcher swaps that
module in as ``__main__`` each time the rank resumes: one process of an MPI
job has one ``__main__``.

An unhandled exception ends the rank as it ends a script run directly, and the
run reports it; mpi4py calls ``MPI_Abort`` for the same reason (no rank is left
waiting for a rank that died).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from typing import Any

_USAGE = """\
usage: {python} -m {program} [options] <pyfile> [arg] ...
   or: {python} -m {program} [options] -m <mod> [arg] ...
   or: {python} -m {program} [options] -c <cmd> [arg] ...
   or: {python} -m {program} [options] - [arg] ..."""

_OPTIONS = """\
options:
  --prefix             show install path and exit
  --version            show version number and exit
  --mpi-library        show MPI library path and exit
  --mpi-std-version    show MPI standard version and exit
  --mpi-lib-version    show MPI library version and exit
  -h|--help            show this help message and exit
  -rc <key=value,...>  set 'mpi4py.rc.key=value'"""


def _package() -> types.ModuleType:
    return sys.modules[(__spec__.parent if __spec__ is not None else None) or "mpi4py"]


def _code(argv: list[str]) -> tuple[types.CodeType, dict[str, Any]]:
    """The code to run for ``argv`` (``sys.argv`` without the launcher's), and its ``__main__`` names."""
    if argv[0] in ("-", "-c"):
        if argv[0] == "-":
            source, filename = sys.stdin.read(), "<stdin>"
        else:
            source, filename = argv.pop(1), "<string>"
        code = compile(source, filename, "exec", dont_inherit=True)
        return code, {"__file__": argv[0], "__spec__": None, "__package__": None,
                      "__loader__": None, "__cached__": None}
    if argv[0] == "-m":
        del argv[0]
        name = argv[0]
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ImportError(f"No module named {name!r}", name=name)
        if spec.submodule_search_locations is not None:
            name = f"{name}.__main__"
            spec = importlib.util.find_spec(name)
            if spec is None:
                raise ImportError(f"No module named {name!r}", name=name)
        get_code = getattr(spec.loader, "get_code", None)
        code = None if get_code is None else get_code(name)
        if not isinstance(code, types.CodeType):
            raise ImportError(f"No code object available for {name}", name=name)
        argv[0] = spec.origin or name
        return code, {"__file__": spec.origin, "__spec__": spec, "__package__": spec.parent,
                      "__loader__": spec.loader, "__cached__": spec.cached}
    path = argv[0]
    folder = os.path.realpath(os.path.dirname(path))
    if not sys.path or sys.path[0] != folder:
        sys.path.insert(0, folder)  # mpi4py's "Fix sys.path": the script's folder comes first
    with open(path, "rb") as file:
        code = compile(file.read(), path, "exec", dont_inherit=True)
    return code, {"__file__": path, "__spec__": None, "__package__": None, "__loader__": None,
                  "__cached__": None}


def run_command_line(args: Sequence[str] | None = None) -> None:
    """Run ``[pyfile | -m mod | -c cmd | -] [arg] ...`` as this rank's ``__main__``."""
    argv = list(sys.argv[1:] if args is None else args)
    sys.argv[:] = argv  # in place: the rank's own argv list, which the launcher swaps in
    code, names = _code(sys.argv)
    main = sys.modules["__main__"]
    namespace = main.__dict__
    builtins = namespace.get("__builtins__")
    namespace.clear()  # a fresh __main__, as runpy gives; the running frame keeps what it holds
    namespace.update(__name__="__main__", __doc__=None, __builtins__=builtins, **names)
    exec(code, namespace)  # noqa: S102 - running the user's program is the point


def set_abort_status(status: object) -> None:
    """Accepted for mpi4py's API: an unhandled exception already ends the run here."""


def _exit_with(text: str, status: int = 0) -> None:
    print(text, file=sys.stdout if status == 0 else sys.stderr)
    sys.exit(status)


def _usage(error: str | None = None) -> None:
    python = os.path.basename(sys.executable)
    program = __spec__.parent if __spec__ is not None else "mpi4py"
    usage = _USAGE.format(python=python, program=program)
    if error:
        _exit_with(f"{error}\n{usage}\nTry `{python} -m {program} -h` for more information.", 1)
    _exit_with(f"{usage}\n{_OPTIONS}")


def _rc_args(text: str) -> dict[str, Any]:
    from ast import literal_eval

    out: dict[str, Any] = {}
    for entry in text.split(","):
        key, _, val = entry.partition("=")
        if not key or not val:
            _usage("Cannot parse rc option: " + entry)
        try:
            out[key] = literal_eval(val)
        except (ValueError, SyntaxError):
            out[key] = val
    return out


def _answer(option: str) -> None:
    """Print what an informational option shows, and exit."""
    package = _package()
    mpi = package.MPI
    if option == "prefix":
        _exit_with(os.path.dirname(package.__file__ or ""))
    if option == "version":
        _exit_with(f"{package.__name__} {package.__version__}")
    if option == "mpi-library":
        _exit_with(mpi.__file__ or "")
    if option == "mpi-std-version":
        version = f"{mpi.VERSION}.{mpi.SUBVERSION}"
        runtime = ".".join(map(str, mpi.Get_version()))
        note = f" (runtime: MPI {runtime})" if runtime != version else ""
        _exit_with(f"MPI {version}{note}")
    _exit_with(mpi.Get_library_version())


def _parse(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    rc_args: dict[str, Any] = {}
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c", "-"):
        arg0 = args[0]
        if arg0 in ("-h", "-help", "--help"):
            _usage()
        name = arg0.lstrip("-")
        if name in ("prefix", "version", "mpi-library", "mpi-std-version", "mpi-lib-version"):
            _answer(name)
        if arg0.startswith("--rc="):
            args[0:1] = ["-rc", arg0[len("--rc="):]]
            arg0 = "-rc"
        if arg0 not in ("-rc", "--rc"):
            _usage("Unknown option: " + arg0)
        if len(args) < 2 or args[1].startswith("-"):
            _usage("Argument expected for option: " + arg0)
        rc_args.update(_rc_args(args.pop(1)))
        del args[0]
    if not args:
        _usage("No path specified for execution")
    if args[0] in ("-m", "-c") and len(args) < 2:
        _usage("Argument expected for option: " + args[0])
    return rc_args, args


def main() -> None:
    """Entry point of ``python -m mpi4py ...``: parse the options, then run the program."""
    rc_args, args = _parse(sys.argv[1:])
    if rc_args:
        _package().rc(**rc_args)
    run_command_line(args)
