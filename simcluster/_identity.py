"""Each virtual rank's process under a launcher: its pid, its node's host name, its signals, directory and exit.

Under ``mpiexec`` or torchrun every rank is a process of some machine, and
code tells them apart by ``os.getpid()`` (log records, file names, locks) and
``socket.gethostname()`` (which ranks share a node). While a launcher's run
goes on (``simcluster mpirun``, ``simcluster torchrun``,
``simcluster.torch.spawn``), ``install`` replaces those functions by ones
that answer for the calling rank (``engine.sync.current()``):

- ``os.getpid()`` is ``PID_BASE + rank``: distinct per rank, the same on
  every run, and above Linux's largest pid (``2**22``), so that no real
  process has it. Inside a rank, ``os.kill`` of such a pid signals that
  rank, and ``signal.signal``, ``signal.getsignal`` and ``signal.raise_signal``
  are the rank's own (``_rank_signals``: each rank has its own handlers);
  outside the ranks, ``os.kill`` of such a pid signals this process.
- ``atexit.register`` and ``atexit.unregister`` keep the rank's own exit
  handlers, which the launcher runs as the rank's program ends, and
  ``os._exit`` ends the calling rank only (``_rank_atexit``).
- ``os.chdir`` and ``os.fchdir`` change the calling rank's working directory
  only (``_rank_cwd``: the process's is the running rank's).
- ``threading.main_thread()`` is the rank's own thread, the one its script
  runs on: a rank that runs on a thread (torch's) is its process's main
  thread, as a launched process's script is (the launchers also name that
  thread ``MainThread``). ``threading.enumerate()`` and ``active_count()``
  count that thread and the threads the rank started, not the other ranks'.
- a thread a rank starts (``threading.Thread.start``, so also the workers of
  ``concurrent.futures`` and ``multiprocessing.pool.ThreadPool``), and the
  threads that one starts, belong to the rank's process: they see its pid,
  host name, main thread, threads and signal handlers (``calling_process``).
- where psutil is installed, ``psutil.Process()`` (of a rank's pid) is the
  process that hosts the rank: its ``pid`` is the rank's, what it measures
  (memory, CPU times) the hosting process's, as a rank's pid names no real
  process; ``psutil.pid_exists`` is True for the run's ranks' pids.
- ``socket.gethostname()``, ``socket.getfqdn()``, ``platform.node()`` and
  the ``node`` of ``os.uname()`` / ``platform.uname()`` name the rank's node:
  ``node0``, ``node1``, ... (``host_name``), the name ``MPI.Get_processor_name()``
  gives too. ``socket.gethostbyname`` of such a name is a loopback address
  of its own (``node0``: ``127.0.0.1``, ``node1``: ``127.0.0.2``, ...), with
  no DNS lookup; ``socket.getaddrinfo`` and a socket's ``bind``, ``connect``
  and ``connect_ex`` take such names too.
- a blocking socket's ``accept``, ``recv`` and ``recv_into`` wait in virtual
  time (``_ready``): the rank sleeps a few virtual microseconds at a time until
  the socket is ready, so the other ranks, its peers among them, go on, as
  other processes would while one blocks in the call; a socket's timeout runs
  in virtual time too (``TimeoutError`` once it passes).

A rank's node is ``rank // ranks_per_node`` when the launcher says how many
ranks a node runs (``simcluster torchrun --nproc-per-node``), else where the
run's latency model puts it (``node_of_model``: a platform's nodes,
``Hierarchical``'s ``ranks_per_node``; one node for the other models).

Rule 1: outside the run's ranks and their threads (the launcher, simcluster
itself, whose threads' names start with ``simcluster``) the functions answer
as before: they call the ones they replaced. A rank's thread signals as its
rank (``os.kill``, ``raise_signal``; the handler runs on the rank's own
stack), and its ``os._exit`` ends its rank (``_rank_signals.end``). Setting
handlers, the working directory, exit handlers and the socket waits act for
a rank's own code only: a thread a rank starts gets the real
``signal.signal`` (which refuses a thread that is not the process's main
one, as in any process) and the real ``os.chdir``.
Rule 2: ``uninstall`` puts back exactly what ``install`` found, also when
the run failed; installs nest (a hosting process keeps its session to the end).
A process forked while a run goes on (a rank's ``multiprocessing`` worker)
is a real process: it gets the real functions back at once.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import platform as _platform
import re
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from . import _rank_atexit, _rank_cwd, _rank_signals

PID_BASE: Final = 5_000_000
"""Rank ``r``'s ``os.getpid()`` is ``PID_BASE + r``: no real process has it (Linux's pids are below 2**22)."""
PID_SPAN: Final = 1 << 22
"""Pids ``PID_BASE`` to ``PID_BASE + PID_SPAN - 1`` are ranks' (``os.kill`` of one signals this process)."""

_real_getpid: Final = os.getpid  # captured at import, before any run replaces it
_NAME: Final = re.compile(r"node(0|[1-9][0-9]*)")


def real_getpid() -> int:
    """This process's real pid, also from inside a rank (simcluster's own bookkeeping uses it)."""
    return _real_getpid()


def real_gethostname() -> str:
    """This machine's real host name, also from inside a rank."""
    found = _originals.get((socket, "gethostname"))
    return str((found or socket.gethostname)())


def host_name(node: int) -> str:
    """The host name of simulated node ``node``: ``node0``, ``node1``, ..."""
    return f"node{node}"


def pid_of(rank: int) -> int:
    """The ``os.getpid()`` world rank ``rank`` sees under a launcher."""
    return PID_BASE + rank


def node_address(node: int) -> str:
    """The address ``socket.gethostbyname`` gives node ``node``'s name: ``127.0.0.1 + node``."""
    return str(ipaddress.IPv4Address(0x7F000001 + node))


def node_of(model: Any, rank: int) -> int:
    """The node of world rank ``rank``: the launcher's placement while one runs, else the model's."""
    per = _placements[-1] if _placements else None
    return rank // per if per else node_of_model(model, rank)


def node_of_model(model: Any, rank: int) -> int:
    """The node a latency model places world rank ``rank`` on (its ``placement()``: a platform's
    nodes, ``Hierarchical``'s, through ``Jitter``); 0 for models that know no nodes."""
    placed = _placement(model)
    return 0 if placed is None else placed.node_of(rank)


def model_shape(model: Any) -> tuple[int, int | None] | None:
    """(ranks per node, nodes or None for no limit) of a model that places ranks on nodes, else None."""
    placed = _placement(model)
    return None if placed is None else (placed.ranks_per_node, placed.count)


def _placement(model: Any) -> Any:
    from . import latency as _latency

    return model.placement() if isinstance(model, _latency.LatencyModel) else None


# ---- the replacements ----

_originals: dict[tuple[Any, str], Any] = {}  # (module, name) -> what install found there
_placements: list[int | None] = []  # one per install: ranks per node, or None (the model's nodes)
_current: Callable[[], Any] | None = None  # engine.sync.current, once installed
_fork_hooked = False  # _forget is registered to run in forked children
_inherited: set[tuple[Any, str]] = set()  # replaced names the class had from a base class only


class _Process(NamedTuple):
    """The rank a thread belongs to, as a thread belongs to the process that started it."""

    task: Any  # the rank's engine task
    rank: int
    node: int
    main: threading.Thread  # the thread the rank's own code runs on: its process's main thread


# the threads ranks started (and threads those started), each with its rank's process
_threads: weakref.WeakKeyDictionary[threading.Thread, _Process] = weakref.WeakKeyDictionary()


def _put_back() -> None:
    """Put back what ``install`` replaced, exactly as it was found (Rule 2)."""
    for (module, name), original in _originals.items():
        if (module, name) in _inherited:
            delattr(module, name)
        else:
            setattr(module, name, original)
    _originals.clear()
    _inherited.clear()
    _threads.clear()


def _rank() -> tuple[int, int] | None:
    """(world rank, node) of the calling rank; None outside a launcher's ranks."""
    current = _current
    task = current() if current is not None else None
    if task is None:
        return None
    rank: int = task.rank
    per = _placements[-1] if _placements else None
    if per:
        return rank, rank // per
    try:
        model = task.comm.latency
    except (AttributeError, AssertionError):  # a rank whose run binds no model
        return rank, 0
    return rank, node_of_model(model, rank)


def calling_process() -> _Process | None:
    """The rank whose process the calling code is part of: a rank's own code, or a thread it
    started (at any depth); None outside the ranks (the launcher, simcluster's own threads).
    ``mpirun`` files a rank's thread's lines as the rank's by it."""
    found = _rank()
    if found is None:
        return _threads.get(threading.current_thread())
    assert _current is not None
    return _Process(_current(), found[0], found[1], threading.current_thread())


def _original(module: Any, name: str) -> Any:
    """What ``install`` replaced; once uninstalled (a reference kept from a run), the module's own."""
    found = _originals.get((module, name))
    return getattr(module, name) if found is None else found


def _getpid() -> int:
    found = calling_process()
    return _real_getpid() if found is None else PID_BASE + found.rank


def _kill(pid: int, signalnum: int, /) -> None:
    if isinstance(pid, int) and PID_BASE <= pid < PID_BASE + PID_SPAN:
        found = calling_process()
        if found is not None:  # a rank (or its thread) signals a rank: its handlers (``_rank_signals``)
            _signal_rank(found, pid - PID_BASE, signalnum)
            return
        pid = _real_getpid()  # from outside the ranks: the process that hosts them
    _original(os, "kill")(pid, signalnum)


def _signal_rank(sender: _Process, target: int, signalnum: int) -> None:
    """``sender``'s code signals world rank ``target`` (``os.kill`` of its pid, ``raise_signal``)."""
    from .engine import sync as _sync
    from .engine.task import FINISHED
    from .errors import UsageError

    kernel = sender.task.comm.kernel
    task = next((t for t in kernel.tasks if t.rank == target and not t.serial), None)
    if task is None and target < kernel.world_size:
        raise UsageError(sender.rank, f"os.kill({pid_of(target)}, {signalnum})", f"rank {target} runs in "
                         "another hosting process, and a signal reaches only the ranks of its sender's",
                         "run on the memory transport to signal any rank")
    own = sender.main is threading.current_thread()  # not a thread of it: a signal to itself runs now
    _rank_signals.deliver(sender.rank if own else -1, target, signalnum, sys._getframe(2),
                          task is not None and task.state != FINISHED, _sync.signal_on_resume)


def _signal(signalnum: int, handler: Any, /) -> Any:
    found = _rank()
    if found is None:
        return _original(signal, "signal")(signalnum, handler)
    return _rank_signals.set_handler(found[0], signalnum, handler)


def _getsignal(signalnum: int, /) -> Any:
    found = calling_process()
    if found is None:
        return _original(signal, "getsignal")(signalnum)
    return _rank_signals.getsignal(found.rank, signalnum)


def _main_thread() -> threading.Thread:
    found = calling_process()
    if found is None:
        return _original(threading, "main_thread")()  # type: ignore[no-any-return]
    return found.main


def _enumerate() -> list[threading.Thread]:
    every: list[threading.Thread] = _original(threading, "enumerate")()
    found = calling_process()
    if found is None:
        return every
    task = found.task
    return [found.main, *(t for t in every if (owner := _threads.get(t)) is not None and owner.task is task)]


def _active_count() -> int:
    return len(_enumerate())


def _start(self: threading.Thread) -> None:
    found = calling_process()
    if found is not None and not self.name.startswith("simcluster"):  # not simcluster's own threads
        _threads[self] = found
    _original(threading.Thread, "start")(self)


def _raise_signal(signalnum: int, /) -> None:
    found = calling_process()
    if found is None:
        _original(signal, "raise_signal")(signalnum)
        return
    _signal_rank(found, found.rank, signalnum)


def _os_exit(status: int, /) -> None:
    found = calling_process()
    if found is not None and found.main is not threading.current_thread():  # a rank's thread: its
        from .engine import sync as _sync

        _rank_signals.end(found.rank, status, _sync.signal_on_resume)  # rank's process ends
        raise SystemExit  # and this thread with it, at once
    _rank_atexit.exit_now(status)


def _gethostname() -> str:
    found = calling_process()
    return str(_original(socket, "gethostname")()) if found is None else host_name(found.node)


def _getfqdn(name: str = "") -> str:
    found = calling_process()
    if found is not None:
        if not name or name == "0.0.0.0":  # noqa: S104 - socket.getfqdn's own test
            return host_name(found.node)
        if _NAME.fullmatch(name):
            return name
    return str(_original(socket, "getfqdn")(name))


def _gethostbyname(hostname: str, /) -> str:
    if calling_process() is not None and isinstance(hostname, str):
        match = _NAME.fullmatch(hostname)
        if match is not None:
            return node_address(int(match.group(1)))
    return str(_original(socket, "gethostbyname")(hostname))


def _address(address: Any) -> Any:
    """A socket address with a simulated node's name put as its loopback address (inside a rank)."""
    if isinstance(address, tuple) and address and isinstance(address[0], str) and calling_process() is not None:
        match = _NAME.fullmatch(address[0])
        if match is not None:
            return (node_address(int(match.group(1))), *address[1:])
    return address


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(host, str) and calling_process() is not None:
        match = _NAME.fullmatch(host)
        if match is not None:
            host = node_address(int(match.group(1)))
    return _original(socket, "getaddrinfo")(host, *args, **kwargs)


def _bind(self: socket.socket, address: Any, /) -> None:
    _original(socket.socket, "bind")(self, _address(address))


def _connect(self: socket.socket, address: Any, /) -> None:
    _original(socket.socket, "connect")(self, _address(address))


def _connect_ex(self: socket.socket, address: Any, /) -> int:
    return int(_original(socket.socket, "connect_ex")(self, _address(address)))


POLL: Final = 1e-6
"""Virtual seconds a rank waits first, before it looks again, while its blocking socket has nothing."""
POLL_MAX: Final = 64e-6
"""The longest such wait: each fruitless look doubles it up to this."""


def _ready(sock: socket.socket) -> None:
    """Inside a rank, wait in virtual time until a blocking ``sock`` can be read (or accepted).

    A blocking call would stop the whole process, every rank with it, while the
    peer it waits for is another rank of it; so the rank looks, and sleeps a
    little virtual time (letting the others run) until the socket is ready, as
    a process blocked in the call would resume when its peer had acted.
    """
    timeout = sock.gettimeout()
    if _rank() is None or timeout == 0.0:  # a nonblocking socket: the call itself answers at once
        return
    import select

    from .engine import sync as _sync

    rank = _sync.current()
    wait, waited = POLL, 0.0
    while rank is not None and not select.select([sock], [], [], 0)[0]:
        if timeout is not None and waited >= timeout:  # the socket's timeout, in virtual time
            raise TimeoutError("timed out")
        step = wait if timeout is None else min(wait, timeout - waited)
        _sync.block(rank.comm.sleep(step), rank)
        waited += step
        wait = min(2 * wait, POLL_MAX)


def _accept(self: socket.socket) -> Any:
    _ready(self)
    return _original(socket.socket, "accept")(self)


def _recv(self: socket.socket, *args: Any) -> Any:
    _ready(self)
    return _original(socket.socket, "recv")(self, *args)


def _recv_into(self: socket.socket, *args: Any) -> Any:
    _ready(self)
    return _original(socket.socket, "recv_into")(self, *args)


def _node() -> str:
    found = calling_process()
    return str(_original(_platform, "node")()) if found is None else host_name(found.node)


def _uname() -> Any:
    got = _original(os, "uname")()
    found = calling_process()
    if found is None:
        return got
    return type(got)((got[0], host_name(found.node), *tuple(got)[2:]))


def _platform_uname() -> Any:
    got = _original(_platform, "uname")()
    found = calling_process()
    if found is None:
        return got
    try:
        return got._replace(node=host_name(found.node))
    except (AttributeError, TypeError):  # an uname_result without namedtuple's _replace
        return got


_REPLACEMENTS: Final[tuple[tuple[Any, str, Callable[..., Any]], ...]] = (
    (os, "getpid", _getpid), (os, "kill", _kill), (os, "uname", _uname),
    (socket, "gethostname", _gethostname), (socket, "getfqdn", _getfqdn),
    (socket, "gethostbyname", _gethostbyname), (socket, "getaddrinfo", _getaddrinfo),
    (socket.socket, "bind", _bind), (socket.socket, "connect", _connect),
    (socket.socket, "connect_ex", _connect_ex), (socket.socket, "accept", _accept),
    (socket.socket, "recv", _recv), (socket.socket, "recv_into", _recv_into),
    (_platform, "node", _node), (_platform, "uname", _platform_uname),
    (signal, "signal", _signal), (signal, "getsignal", _getsignal), (signal, "raise_signal", _raise_signal),
    (threading, "main_thread", _main_thread), (threading, "enumerate", _enumerate),
    (threading, "active_count", _active_count), (threading.Thread, "start", _start),
    (os, "chdir", _rank_cwd.chdir), (os, "fchdir", _rank_cwd.fchdir),
    (atexit, "register", _rank_atexit.register), (atexit, "unregister", _rank_atexit.unregister),
    (os, "_exit", _os_exit),
)


def _hosting(pid: Any) -> Any:
    """A rank's pid as the real pid of the process hosting the rank, for psutil; others as they are."""
    if isinstance(pid, int) and PID_BASE <= pid < PID_BASE + PID_SPAN:
        found = calling_process()
        if found is None or pid - PID_BASE < found.task.comm.kernel.world_size:
            return _real_getpid()
    return pid


def _ps_process_init(self: Any, pid: Any, *args: Any, **kwargs: Any) -> None:
    import psutil

    _original(psutil._psplatform.Process, "__init__")(self, _hosting(pid), *args, **kwargs)


def _ps_pid_exists(pid: Any) -> bool:
    import psutil

    return bool(_original(psutil, "pid_exists")(_hosting(pid)))


def _psutil_replacements() -> tuple[tuple[Any, str, Callable[..., Any]], ...]:
    """Where psutil is installed: ``psutil.Process()`` in a rank is the process hosting it (its
    ``pid`` the rank's, its memory and CPU times the hosting process's), as the rank's pid names
    no real process; ``psutil.pid_exists`` of a rank's pid is True."""
    try:
        import psutil

        platform_process = psutil._psplatform.Process
    except (ImportError, AttributeError):  # not installed, or a psutil without these internals
        return ()
    return ((platform_process, "__init__", _ps_process_init), (psutil, "pid_exists", _ps_pid_exists))


def install(ranks_per_node: int | None = None) -> None:
    """Give every rank of the launcher's run its own pid and host name until ``uninstall``.

    ``ranks_per_node``: rank ``r`` lives on node ``r // ranks_per_node``;
    None: where the run's latency model puts it.
    """
    global _current, _fork_hooked
    if not _fork_hooked and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget)
        _fork_hooked = True
    if not _placements:
        from .engine import sync as _sync

        _current = _sync.current
        _rank_signals.reset(signal.getsignal)
        _sync.signalled.clear()
        _rank_cwd.install(_rank)
        _rank_atexit.install(_rank)
        for module, name, replacement in _REPLACEMENTS + _psutil_replacements():
            if hasattr(module, name):
                _originals[(module, name)] = getattr(module, name)
                if name not in vars(module):  # a method socket.socket inherits: removed again after
                    _inherited.add((module, name))
                setattr(module, name, replacement)
    _placements.append(ranks_per_node)


def uninstall() -> None:
    """Undo the latest ``install``; the last one puts back exactly what the first found (Rule 2)."""
    global _current
    if not _placements:
        return
    _placements.pop()
    if _placements:
        return
    _put_back()
    _rank_cwd.uninstall()
    _rank_atexit.uninstall()
    _rank_signals.reset()
    from .engine import sync as _sync

    _sync.signalled.clear()
    _current = None


def _forget() -> None:
    """In a process forked while a run goes on: it is a real process, with its own pid and host."""
    global _current
    _put_back()
    _placements.clear()
    _current = None


def installed() -> bool:
    """Whether a launcher's run has the per-rank identity in place now."""
    return bool(_placements)
