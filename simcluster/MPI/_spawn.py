"""Dynamic processes: ``Spawn``, ``Spawn_multiple``, ``Get_parent``; ports and name publishing.

``Intracomm.Spawn`` starts new ranks in the same run: the root asks the
launcher (``simcluster mpirun``, which sets ``launcher``) for the rank function
that runs the command, and the engine adds the ranks
(``comm.start_ranks``), a ``COMM_WORLD`` of their own. Parents and children
then hold the two sides of one intercommunicator (``_intercomm``), which the
children reach with ``Comm.Get_parent()``.

Timing: the children start at the root's virtual time of the call; the
parents' call costs a broadcast from the root (its group learns the
children's ranks). Starting a process costs nothing here, unlike under an
``mpiexec``, which forks it.

``Open_port``, ``Accept`` and ``Connect`` join two groups of one run: the
n-th ``Accept`` on a port meets its n-th ``Connect`` (the roots wait for each
other, then exchange their groups in one message each way), and each root
broadcasts the other group in its own. Port names and published service
names are the run's, as a name server's are a job's.

Rule 1: what the run shares (the ports, the services, each spawned rank's
parent) lives in ``_Run``, one per engine; a rank's handles live in its own state.
Rule 2: no virtual time here: every step is a message or a broadcast the engine times.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..comm import start_ranks
from . import _comm
from ._blocking import block
from ._constants import ERR_ARG, ERR_COMM, ERR_NAME, ERR_PORT, ERR_SPAWN, SUCCESS
from ._errors import error
from ._info import INFO_NULL, Info
from ._intercomm import Intercomm, _bridge_state, is_inter
from ._state import CommState, RankState, current

_App = tuple[str, "Sequence[str] | None", int, "str | None"]  # command, args, maxprocs, wdir
launcher: Callable[[str, Sequence[str]], tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
"""``simcluster mpirun``'s: ``launcher(command, args)`` -> ``(rank function, its arguments)``;
raises ``ValueError`` saying why a command cannot run. None outside ``mpirun``."""


class _Run:
    """What one run's ranks share about spawning and ports."""

    __slots__ = ("engine", "parents", "spawns", "opened", "ports", "services", "accepts", "connects",
                 "_joins")

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        # world rank of a spawned rank -> (its parents' world ranks, the intercomm's key, APPNUM)
        self.parents: dict[int, tuple[list[int], str, int]] = {}
        self.spawns = 0  # Spawn calls so far: each one's key
        self.opened = 0  # Open_port calls so far: each port's number
        self.ports: dict[str, int] = {}  # open port -> the world rank that opened it
        self.services: dict[str, str] = {}  # published service name -> port
        self.accepts: dict[str, int] = {}  # Accept calls on each port so far
        self.connects: dict[str, int] = {}  # Connect calls on each port so far
        self._joins: dict[tuple[int, int], int] = {}  # (rank, peer) -> its Join calls with peer

    def joins(self, me: int, peer: int) -> int:
        """How many ``Join`` calls ``me`` made with ``peer`` before this one: the n-th of each side meet."""
        n = self._joins.get((me, peer), 0)
        self._joins[(me, peer)] = n + 1
        return n


_runs: dict[int, _Run] = {}
_parent_states: dict[tuple[int, int], CommState | None] = {}


def _run_of(rank_state: RankState) -> _Run:
    engine = rank_state.world.engine
    run = _runs.get(id(engine))
    if run is None or run.engine is not engine:
        for ended in [k for k, r in _runs.items() if r.engine.kernel.unfinished == 0]:
            del _runs[ended]
        for slot in [k for k in _parent_states if k[0] not in _runs]:
            del _parent_states[slot]
        run = _runs[id(engine)] = _Run(engine)
    return run


def _bridge(rank_state: RankState, mine: list[int], theirs: list[int], key: str,
            parent: CommState | None) -> Any:
    return Intercomm._on(_bridge_state(rank_state, mine, theirs, key, parent))


# ---- spawning ----


def Spawn(self: Any, command: str, args: Sequence[str] | None = None, maxprocs: int = 1,
          info: Info | Sequence[Info] = INFO_NULL, root: int = 0,
          errcodes: list[int] | None = None) -> Any:
    """Start ``maxprocs`` ranks running ``command args``; return the intercomm to them.

    Collective over this communicator; only the root's arguments count. The
    command is a Python interpreter and a python command line (``sys.executable``,
    ``["worker.py", ...]``), or a Python script with a ``#!`` line. The
    children's ``COMM_WORLD`` holds them alone; ``Comm.Get_parent()`` gives them
    the other side. ``errcodes``, when given, gets one ``SUCCESS`` per child.
    """
    return _spawn(self, "Spawn", [(command, args, maxprocs, _wdir(info))], root, errcodes)[0]


def Spawn_multiple(self: Any, command: Sequence[str], args: Sequence[Sequence[str]] | None = None,
                   maxprocs: Sequence[int] | int | None = None,
                   info: Info | Sequence[Info] = INFO_NULL, root: int = 0,
                   errcodes: list[Any] | None = None) -> Any:
    """Spawn several commands at once: one ``COMM_WORLD`` for all their ranks, in order.

    Each child's ``APPNUM`` attribute is the index of its command. ``errcodes``,
    when given, gets one list of ``SUCCESS`` per command.
    """
    apps: list[_App] = []
    if _is_root(self, root, "Spawn_multiple"):
        rank = self._st.sc.rank
        if isinstance(command, (str, bytes, os.PathLike)):
            raise ValueError(f"rank {rank}: Spawn_multiple(command={command!r}): expected a "
                             "sequence of commands, one per program; Spawn takes one command")
        commands = list(command)
        count = len(commands)
        arglists = [None] * count if args is None else list(args)
        procs = [1] * count if maxprocs is None else (
            [int(maxprocs)] * count if hasattr(maxprocs, "__index__") else list(maxprocs))
        infos = [info] * count if isinstance(info, Info) or info is None else list(info)
        for what, got in (("argument lists", arglists), ("maxprocs", procs), ("infos", infos)):
            if len(got) != count:
                raise ValueError(f"rank {rank}: Spawn_multiple: {count} commands and {len(got)} "
                                 f"{what}; pass one per command")
        if any(isinstance(a, (str, bytes)) for a in arglists):
            raise ValueError(f"rank {rank}: Spawn_multiple: each command's arguments must be a "
                             "sequence of strings, not a string")
        apps = [(c, a, p, _wdir(i)) for c, a, p, i in zip(commands, arglists, procs, infos)]
    inter, sizes = _spawn(self, "Spawn_multiple", apps, root, None)
    if errcodes is not None:
        errcodes[:] = [[SUCCESS] * n for n in sizes]
    return inter


def _wdir(info: Any) -> str | None:
    """The ``wdir`` an info gives its spawned ranks (MPICH's key): the directory they start in."""
    return info.Get("wdir") if isinstance(info, Info) and info else None


def _is_root(comm: Any, root: int, call: str) -> bool:
    sc = comm._st.sc
    if not (hasattr(root, "__index__") and 0 <= int(root) < sc.size):
        raise error(ERR_ARG, sc.rank, call, f"root must be in range({sc.size})",
                    "pass the rank whose arguments count")
    return bool(sc.rank == int(root))


def _spawn(comm: Any, call: str, apps: list[_App], root: int,
           errcodes: list[int] | None) -> tuple[Any, list[int]]:
    """Spawn ``apps`` (command, args, maxprocs) from ``comm``; the intercomm and each app's count."""
    st = comm._st
    sc = st.sc
    if is_inter(st):
        raise error(ERR_COMM, sc.rank, call, "this is an intercommunicator",
                    "spawn from an intracommunicator (COMM_SELF or COMM_WORLD)")
    rank_state = st.rank_state
    outcome: tuple[Any, ...]
    if _is_root(comm, root, call):
        try:
            outcome = ("ok", *_start(rank_state, list(sc.world_ranks), apps))
        except ValueError as exc:
            outcome = ("error", str(exc))
    else:
        outcome = ("", None)
    got = block(sc.broadcast(outcome, int(root)))
    if got[0] == "error":
        raise error(ERR_SPAWN, sc.rank, call, got[1], "no rank was started")
    _, children, key, sizes = got
    if errcodes is not None:
        errcodes[:] = [SUCCESS] * len(children)
    return _bridge(rank_state, list(sc.world_ranks), list(children), key, st), list(sizes)


def _start(rank_state: RankState, parents: list[int], apps: list[_App]) -> tuple[list[int], str, list[int]]:
    """At the root: start every command's ranks; return their world ranks, the key, the counts."""
    if launcher is None:
        raise ValueError("spawning needs a launcher that runs programs: run this one with "
                         "simcluster mpirun (simcluster.run starts a function, not a program)")
    if not apps:
        raise ValueError("no command to spawn; pass at least one")
    programs = []
    for command, args, maxprocs, wdir in apps:
        if not isinstance(command, (str, os.PathLike)):
            raise ValueError(f"command={command!r}: expected a str naming a program; pass "
                             "sys.executable, with the script in args")
        command = os.fspath(command)
        if isinstance(maxprocs, bool) or not hasattr(maxprocs, "__index__") or int(maxprocs) < 1:
            raise ValueError(f"maxprocs={maxprocs!r}: expected an int >= 1; pass how many ranks to start")
        if wdir is not None and not os.path.isdir(wdir):  # (relative: to the root rank's directory)
            raise ValueError(f"info wdir={wdir!r}: no such directory; create it before spawning")
        fn, fn_args = launcher(command, [] if args is None else list(args))
        if wdir is not None:
            fn, fn_args = _in_directory, (os.path.abspath(wdir), fn, fn_args)
        programs.append(((fn, fn_args), int(maxprocs)))
    run = _run_of(rank_state)
    key = f"spawn:{rank_state.world.world_rank}#{run.spawns}"
    run.spawns += 1
    first = rank_state.world.engine.world_size
    children = list(range(first, first + sum(n for _, n in programs)))
    appnums = [appnum for appnum, (_, n) in enumerate(programs) for _ in range(n)]
    for w, appnum in zip(children, appnums):
        run.parents[w] = (parents, key, appnum)
    started = start_ranks(rank_state.world.engine, len(children), f"{key}/world", _dispatch,
                          (programs, first), _comm.world_of)
    assert started == children
    return children, key, [n for _, n in programs]


def _in_directory(comm: Any, wdir: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """A spawned rank whose info named a ``wdir``: it starts there, as MPICH starts the process."""
    os.chdir(wdir)
    return fn(comm, *args)


def _dispatch(comm: Any, programs: list[tuple[tuple[Callable[..., Any], tuple[Any, ...]], int]],
              first: int) -> Any:
    """A spawned rank: run its command's program (the block of ranks its world rank is in)."""
    place = current().world.world_rank - first
    for (fn, args), n in programs:
        if place < n:
            return fn(comm, *args)
        place -= n
    raise AssertionError("a spawned rank outside every command's block")


def appnum() -> int:
    """The calling rank's ``APPNUM``: its command's index in ``Spawn_multiple``, else 0."""
    rank_state = current()
    run = _runs.get(id(rank_state.world.engine))
    got = None if run is None else run.parents.get(rank_state.world.world_rank)
    return 0 if got is None else got[2]


_comm.appnum_of = appnum  # a spawned rank's APPNUM attribute


def Get_parent(cls: type) -> Any:
    """Return the intercommunicator to the ranks that spawned this one.

    ``COMM_NULL`` (an ``Intercomm`` handle) for a rank no one spawned, and once
    it was disconnected. Local: sends nothing.
    """
    rank_state = current()
    world = rank_state.world
    run = _runs.get(id(world.engine))
    got = None if run is None or run.engine is not world.engine else run.parents.get(world.world_rank)
    if got is None:
        return Intercomm._on(None)  # a null handle of mpi4py's type for Get_parent
    slot = (id(world.engine), world.world_rank)
    if slot not in _parent_states:
        parents, key, _ = got
        inter = _bridge(rank_state, list(world.world_ranks), parents, key, rank_state.world_state)
        _parent_states[slot] = inter._st
        return inter
    state = _parent_states[slot]
    if state is None or state.freed:
        _parent_states[slot] = None
        return Intercomm._on(None)
    return Intercomm._on(state)


# ---- ports and name publishing ----


def Open_port(info: Info = INFO_NULL) -> str:
    """Return a new port name for ``Accept`` and ``Connect`` within this run."""
    rank_state = current()
    run = _run_of(rank_state)
    w = rank_state.world.world_rank
    port = f"simcluster-port:{w}#{run.opened}"
    run.opened += 1
    run.ports[port] = w
    return port


def Close_port(port_name: str) -> None:
    """Close a port ``Open_port`` gave; later ``Connect`` calls to it fail with ``ERR_PORT``."""
    rank_state = current()
    run = _run_of(rank_state)
    if run.ports.pop(str(port_name), None) is None:
        raise error(ERR_PORT, rank_state.world.rank, f"Close_port({port_name!r})",
                    "no such port is open", "close a port name Open_port returned")


def Publish_name(service_name: str, port_name: str, info: Info = INFO_NULL) -> None:
    """Publish ``port_name`` under ``service_name`` for ``Lookup_name`` anywhere in this run."""
    rank_state = current()
    run = _run_of(rank_state)
    call = f"Publish_name({service_name!r}, {port_name!r})"
    if str(service_name) in run.services:
        raise error(ERR_NAME, rank_state.world.rank, call, "the service name is published already",
                    "unpublish it first, or pick another name")
    run.services[str(service_name)] = str(port_name)


def Unpublish_name(service_name: str, port_name: str, info: Info = INFO_NULL) -> None:
    """Withdraw ``service_name``; ``ERR_NAME`` if it is not published for ``port_name``."""
    rank_state = current()
    run = _run_of(rank_state)
    if run.services.get(str(service_name)) != str(port_name):
        raise error(ERR_NAME, rank_state.world.rank, f"Unpublish_name({service_name!r}, {port_name!r})",
                    "the service is not published for this port", "unpublish what Publish_name published")
    del run.services[str(service_name)]


def Lookup_name(service_name: str, info: Info = INFO_NULL) -> str:
    """The port published under ``service_name``; ``ERR_NAME`` if none is."""
    rank_state = current()
    run = _run_of(rank_state)
    port = run.services.get(str(service_name))
    if port is None:
        raise error(ERR_NAME, rank_state.world.rank, f"Lookup_name({service_name!r})",
                    "no port is published under this name", "publish it first (Publish_name)")
    return port


def Accept(self: Any, port_name: str, info: Info = INFO_NULL, root: int = 0) -> Any:
    """Wait for a ``Connect`` to ``port_name``; return the intercomm to the connecting group.

    Collective over this communicator; ``port_name`` counts at the root.
    """
    return _join(self, "Accept", port_name, root, 0)


def Connect(self: Any, port_name: str, info: Info = INFO_NULL, root: int = 0) -> Any:
    """Connect to the group accepting on ``port_name``; return the intercomm to it.

    Collective over this communicator; ``port_name`` counts at the root. ``ERR_PORT``
    when no such port is open.
    """
    return _join(self, "Connect", port_name, root, 1)


def _join(comm: Any, call: str, port_name: str, root: int, side: int) -> Any:
    """Accept (side 0) or Connect (side 1): the roots meet at the port, then tell their groups."""
    st = comm._st
    sc = st.sc
    if is_inter(st):
        raise error(ERR_COMM, sc.rank, call, "this is an intercommunicator",
                    "accept or connect on an intracommunicator")
    rank_state = st.rank_state
    outcome: tuple[Any, ...] = ("", None)
    if _is_root(comm, root, call):
        outcome = _meet(rank_state, call, str(port_name), side, list(sc.world_ranks))
    got = block(sc.broadcast(outcome, int(root)))
    if got[0] == "error":
        raise error(ERR_PORT, sc.rank, f"{call}({port_name!r})", got[1],
                    "pass a port name that Open_port returned and is still open")
    _, theirs, key = got
    return _bridge(rank_state, list(sc.world_ranks), list(theirs), key, st)


def _meet(rank_state: RankState, call: str, port: str, side: int, mine: list[int]) -> tuple[Any, ...]:
    """At a root: wait for the other side's root at ``port``, then swap groups with it."""
    run = _run_of(rank_state)
    if port not in run.ports:
        return ("error", "no such port is open in this run")
    counts = run.accepts if side == 0 else run.connects
    n = counts.get(port, 0)
    counts[port] = n + 1
    world = rank_state.world
    key = f"{port}/{n}"
    # the n-th Accept on a port meets its n-th Connect: each learns the other's root
    req = world.engine.meetings.meet(("port", key), 2, side, world.world_rank, f"{call}({port!r})",
                            lambda roots, times: ([roots[1], roots[0]], max(times)))
    other = block(req)
    pair = sorted([world.world_rank, other])
    link = world.joint(f"port:{key}", pair)
    sent = link.isend(mine, pair.index(other))
    theirs = block(link.recv(None, pair.index(other)))
    block(sent)
    return ("ok", list(theirs), f"port:{key}")


def Join(cls: type, fd: int) -> Any:
    """Return the intercommunicator to the rank at the other end of the connected socket ``fd``.

    Each side writes its world rank on the socket and reads the other's (looking
    every virtual microsecond, so the other rank gets to run); the two then hold
    the sides of one intercommunicator, numbered by how many ``Join`` calls
    each made with the other before.
    """
    import select
    import socket

    rank_state = current()
    world = rank_state.world
    call = f"Comm.Join({fd!r})"
    try:
        sock = socket.socket(fileno=os.dup(int(fd)))
    except (OSError, TypeError, ValueError) as exc:
        raise error(ERR_ARG, world.rank, call, f"not a connected socket ({exc})",
                    "pass the fileno() of a connected socket") from None
    with sock:
        sock.sendall(world.world_rank.to_bytes(8, "little"))
        got = b""
        while len(got) < 8:
            if select.select([sock], [], [], 0)[0]:
                chunk = sock.recv(8 - len(got))
                if not chunk:
                    raise error(ERR_ARG, world.rank, call, "the peer closed the socket",
                                "join over a socket both ends keep open")
                got += chunk
            else:
                block(world.kernel.post_sleep(1e-6, call))
    other = int.from_bytes(got, "little")
    pair = sorted([world.world_rank, other])
    key = f"join:{pair[0]}-{pair[1]}#{_run_of(rank_state).joins(world.world_rank, other)}"
    return _bridge(rank_state, [world.world_rank], [other], key, None)
