"""The worker side of ``mpi4py.futures`` on simcluster: the loop a worker rank runs, and its modes.

A worker serves one master (``serve``): it runs each task it receives as
its own compute and sends back the result, or the exception with its
traceback's text, until told to stop. Before its first task it puts the
master's ``__main__`` in place as ``__worker__`` (``import_main``), so that
functions the master pickled by reference unpickle. The modes that start
workers: ``static_main`` (``-m mpi4py.futures``: ranks 1..N-1 of
``COMM_WORLD``) and ``spawned_main`` (``-m mpi4py.futures.server``, on ranks
``MPI.COMM_SELF.Spawn`` started); ``MPICommExecutor`` calls ``serve`` itself.
The protocol and the master are ``_core``'s.

Rule 1: a worker holds one task at a time and answers with the tag the task
came with (its executor's). Rule 2: only a failure of the task itself goes
back to the master; the run cancelling the rank (``GreenletExit``) passes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ._core import STOP_TAG, _mpi, _reply, drop_rank_state, peek_rank_state, rank_state


# ---- the workers ----


def import_main(info: dict[str, Any]) -> None:
    """On a worker: put the master's ``__main__`` in place (as ``__worker__``), its path, globals,
    environment and working directory (the executor's ``wdir``).

    The worker rank's own ``__main__`` module gets the script's names, so that
    functions the master pickled as ``__main__.f`` unpickle here; its
    ``if __name__ == "__main__"`` block does not run.
    """
    state = rank_state()
    for entry in info.get("path", ()):
        if entry not in sys.path:
            sys.path.append(entry)
    wdir = info.get("wdir")
    if wdir is not None:  # the worker rank's own directory (as mpi4py's worker: os.chdir)
        os.chdir(wdir)
    env = info.get("env")
    if env:
        os.environ.update({str(k): str(v) for k, v in env.items()})
    main = sys.modules["__main__"]
    target = info.get("main")
    if target is not None and state.get("main") != target:
        state["main"] = target
        code, names = _main_code(target)
        namespace = main.__dict__
        builtins = namespace.get("__builtins__")
        namespace.clear()  # as run.py: the running frame keeps what it holds
        namespace.update(__name__="__worker__", __doc__=None, __builtins__=builtins, **names)
        state["importing"] = target[1]  # an executor made now would spawn workers for ever
        try:
            exec(code, namespace)  # noqa: S102 - the user's own script, as mpi4py imports it
        finally:
            del state["importing"]
    main.__dict__.update(info.get("globals") or {})


def _main_code(target: tuple[str, str]) -> tuple[Any, dict[str, Any]]:
    kind, name = target
    if kind == "module":
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ImportError(f"No module named {name!r}", name=name)
        code = spec.loader.get_code(name)  # type: ignore[attr-defined]
        return code, {"__file__": spec.origin, "__spec__": None, "__package__": spec.parent,
                      "__loader__": spec.loader, "__cached__": None}
    with open(name, "rb") as file:
        code = compile(file.read(), name, "exec", dont_inherit=True)
    folder = os.path.dirname(os.path.abspath(name))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return code, {"__file__": name, "__spec__": None, "__package__": None, "__loader__": None,
                  "__cached__": None}


def serve(comm: Any, master: int, workers: Any) -> None:
    """A worker's loop: run the tasks ``master`` sends until it says stop.

    Each task runs as this rank's own compute; its result (or its exception,
    with the traceback's text) goes back with the tag it came with.
    """
    mpi = _mpi()
    state = rank_state()
    state["workers"] = workers
    status = mpi.Status()
    try:
        while True:
            message = comm.recv(source=master, tag=mpi.ANY_TAG, status=status)
            if message is None:
                return
            tag = status.Get_tag()
            kind = message[0]
            if kind == "setup":
                import_main(message[1])
                continue
            if kind == "init":
                task_id, fn, args, kwargs = -1, message[1], message[2], {}
            else:
                _kind, task_id, fn, args, kwargs = message
            try:
                reply = (task_id, True, fn(*args, **kwargs), "")
            except Exception as exc:  # noqa: BLE001 - sent back as the task's result
                reply = (task_id, *_reply(exc))
            try:
                comm.send(reply, dest=master, tag=tag)
            except Exception as exc:  # noqa: BLE001 - the result does not pickle: say so instead
                comm.send((task_id, *_reply(exc)), dest=master, tag=tag)
    finally:
        state.pop("workers", None)
        if not state:
            drop_rank_state()


# ---- the static mode ----


_USAGE = """\
usage: {python} -m {program} <pyfile> [arg] ...
   or: {python} -m {program} -m <module> [arg] ...
   or: {python} -m {program} -c <string> [arg] ..."""


def _command_line(args: list[str]) -> list[str]:
    """``-m mpi4py.futures``'s own arguments checked as mpi4py checks them; exits on ``-h`` or an error."""
    usage = _USAGE.format(python=os.path.basename(sys.executable), program="mpi4py.futures")
    problem = None
    if not args:
        problem = "No path specified for execution"
    elif args[0] in ("-h", "--help"):
        print(usage)
        sys.exit(0)
    elif args[0] in ("-m", "-c") and len(args) < 2:
        problem = f"Argument expected for option: {args[0]}"
    elif args[0].startswith("-") and args[0] not in ("-m", "-c", "-"):
        problem = f"Unknown option: {args[0]}"
    if problem is not None:
        print(problem, file=sys.stderr)
        print(usage)
        sys.exit(1)
    return args


def static_main() -> None:
    """``-m mpi4py.futures``: rank 0 runs the program, the other ranks serve its executors.

    Collective over ``COMM_WORLD``. The workers stop once the program ends
    (after the tasks it left running are done), also when it fails.
    """
    import importlib

    mpi = _mpi()
    world = mpi.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    program = importlib.import_module("mpi4py.run")  # simcluster's, under simcluster mpirun
    if size == 1:  # no ranks to serve: executors spawn theirs, as without -m mpi4py.futures
        program.run_command_line(_command_line(sys.argv[1:]))
        return
    comm = world.Dup()
    workers = world.Split(mpi.UNDEFINED if rank == 0 else 0, rank)
    state = rank_state()
    try:
        if rank != 0:
            serve(comm, 0, workers)
            return
        state["static"] = comm
        state["masters"] = []
        try:
            program.run_command_line(_command_line(sys.argv[1:]))
        finally:
            for master in state["masters"]:
                master.drain(False)
            for worker in range(1, size):
                comm.send(None, dest=worker, tag=STOP_TAG)
    finally:
        drop_rank_state()
        if workers != mpi.COMM_NULL:
            workers.Free()
        comm.Free()


def spawned_main() -> None:
    """``-m mpi4py.futures.server`` on a spawned rank: serve the parent, then let go of it."""
    mpi = _mpi()
    parent = mpi.Comm.Get_parent()
    if parent == mpi.COMM_NULL:
        raise RuntimeError("mpi4py.futures.server: no parent communicator; MPIPoolExecutor "
                           "runs this module on the ranks it spawns")
    try:
        serve(parent, 0, mpi.COMM_WORLD)
    finally:
        drop_rank_state()
    parent.Disconnect()
