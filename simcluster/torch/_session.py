"""One spawn's process-wide setup, and each rank's own torch.distributed world.

torch.distributed keeps its state in module globals of ``distributed_c10d``
(the default group, the group registry, the group counter) and reads
``os.environ``; real ranks are processes, each with its own. Here ranks are
threads of one process that run one at a time (``engine.sync.ThreadRank``), so a
``Session`` gives each rank a ``RankState`` of its own and swaps it in
whenever that rank resumes (``engine.sync.on_switch``): the c10d globals and the
environment, and DTensor's table of custom op handlers (which
``loss_parallel()`` fills on entry and empties on exit). torch's profiler is
one per process; inside a rank it records through torch's thread-local one
(``_profiler.py``). Thread-local torch
state (grad mode, autocast) is per thread already; the default generator is
swapped by ``engine.sync``; the C++ group registry is made per thread
(``_set_thread_isolation_mode``).

Rule 1: whatever a session changes in the process (the c10d globals, the
environment, torch's rendezvous handlers, the C++ registry mode,
``sys.excepthook``, DistributedDataParallel's ``_get_ddp_logging_data``,
``ProcessGroupGloo``, which a rank may not construct: ``_GlooGuard``) is
restored exactly when it ends, also after a failure, so gloo and a second
spawn work afterwards.
Rule 2: swapping is lazy: a rank's state is loaded when it resumes and the
previous owner's saved then, so a rank that resumes twice in a row pays nothing;
the environment is saved and written only where it differs (a rank that set
no variable costs two dict copies in C per switch).
Rule 3: ranks share what torch builds alike in every process and never
changes: ``init_process_group`` fills ``_pg_group_ranks[WORLD]`` with the
identity map of the world ({0: 0, ..., n-1: n-1}), O(n) per rank and O(n^2)
for a spawn (about 1 GiB on 4096 ranks); when a rank's state is saved, a map
equal to it is replaced by one shared map of the session (torch only reads
those maps; it adds and deletes groups' entries, never a map's own).
Rule 4: likewise DTensor's sharding propagation, once DTensor is imported:
computed by the first rank to meet an op's schema and rebound to each
other rank's own meshes (``_shared_propagation.py``).
Rule 5: FSDP2's cut of each parameter into one chunk per rank is made only
where a rank reads it (``_fsdp_chunks.py``), once FSDP2 is imported: N ranks
would otherwise make N x N views of every parameter.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from simcluster import _rank_cwd
from simcluster.engine import sync as _sync
from simcluster.comm import Comm
from simcluster.comm import current_comm
from simcluster.engine.assembly import current_task
from simcluster.errors import SimclusterError
from simcluster.torch._profiler import RankProfilers
from simcluster.torch._process_group import BACKEND, ProcessGroupSimcluster, subcomm
from simcluster.torch import _fsdp_chunks
from simcluster.torch import _shared_propagation
from simcluster.torch._rendezvous import Handlers, RunStore
from simcluster.torch._shared_propagation import SharedPropagation

_C10D_NAMES = ("_world", "_pg_map", "_pg_names", "_pg_group_ranks", "_pg_backend_config",
               "_group_count", "_tags_to_pg", "_pg_to_tag", "_backend", "_default_pg_init_method")
"""The module globals of ``torch.distributed.distributed_c10d`` that hold a process's groups."""


def _fresh_c10d() -> dict[str, Any]:
    """The c10d globals of a process that has not initialised torch.distributed yet."""
    return {"_world": c10d._World(), "_pg_map": {}, "_pg_names": {}, "_pg_group_ranks": {},
            "_pg_backend_config": {}, "_group_count": 0, "_tags_to_pg": {}, "_pg_to_tag": {},
            "_backend": None, "_default_pg_init_method": None}


_c10d_globals = vars(c10d)


def _read_c10d() -> dict[str, Any]:
    return {name: getattr(c10d, name) for name in _C10D_NAMES}


def _write_c10d(values: dict[str, Any]) -> None:
    # one C call (a plain module: the same as setattr for each name); every rank switch writes them
    _c10d_globals.update(values)


def _write_env(target: dict[str, str]) -> None:
    """Make ``os.environ`` equal ``target``, touching only the variables that differ."""
    env = os.environ
    for name in [n for n in env if n not in target]:
        del env[name]
    for name, value in target.items():
        if env.get(name) != value:
            env[name] = value


_FRESH_FLAGS = (torch.float32, False, False)
"""A fresh process's default dtype and deterministic-algorithm flags (enabled, warn only)."""


def _read_flags() -> tuple[Any, bool, bool]:
    return (torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled())


def _write_flags(flags: tuple[Any, bool, bool], now: tuple[Any, bool, bool]) -> None:
    """Set torch's process-wide flags to ``flags`` where they differ from ``now``."""
    if flags[0] != now[0]:
        torch.set_default_dtype(flags[0])
    if flags[1:] != now[1:]:
        torch.use_deterministic_algorithms(flags[1], warn_only=flags[2])


def _dtensor_dispatcher() -> Any:
    """DTensor's op dispatcher once DTensor is imported, else None (importing it here is slow)."""
    api = sys.modules.get("torch.distributed.tensor._api")
    return getattr(getattr(api, "DTensor", None), "_op_dispatcher", None)


def _fresh_dtensor_ops(dispatcher: Any) -> dict[Any, Any]:
    """The custom op handlers DTensor has in a process that just imported it."""
    ops: dict[Any, Any] = type(dispatcher)()._custom_op_handlers
    return ops


def _env_snapshot() -> dict[Any, Any]:
    """A copy of ``os.environ``, cheap to take and compare: has the environment changed since?

    CPython's ``os.environ`` keeps its encoded variables in a plain dict
    (``_data``): copying and comparing that is done in C, where
    ``dict(os.environ)`` decodes every variable in Python.
    """
    data = getattr(os.environ, "_data", None)
    return data.copy() if type(data) is dict else dict(os.environ)


class RankState:
    """One rank's process state: c10d globals, environment, DTensor op handlers, torch's flags."""

    __slots__ = ("rank", "comm", "c10d", "env", "dtensor_ops", "flags", "created")

    def __init__(self, rank: int, comm: Comm, env: dict[str, str]) -> None:
        self.rank = rank
        self.comm = comm  # the rank's world simcluster Comm
        self.c10d = _fresh_c10d()
        self.env = env  # replaced, never changed in place: ranks share the process's until they differ
        self.dtensor_ops: dict[Any, Any] | None = None  # made when the rank first runs with DTensor
        self.flags = _FRESH_FLAGS  # default dtype, deterministic algorithms (enabled, warn only)
        self.created: ProcessGroupSimcluster | None = None  # the group create() made last

    def __repr__(self) -> str:
        return f"<RankState rank={self.rank}>"


_lock = threading.Lock()
_active: Session | None = None


def active() -> Session | None:
    """Return the session of the spawn running now, if any."""
    return _active


class Session:
    """What one ``spawn`` changes in the process, and every rank's state."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.store = RunStore()
        self.ranks: dict[int, RankState] = {}
        self._owner: RankState | None = None  # whose state the process holds (None: its own)
        self._process_c10d: dict[str, Any] = {}
        self._process_env: dict[str, str] = {}
        self._handlers = Handlers(self._lookup)
        self._excepthook: Any = None
        self._identity: dict[int, int] | None = None  # the world's rank map, shared (Rule 3)
        self._env_seen: dict[Any, Any] = {}  # _env_snapshot() when the owner's env was written
        self._dispatcher: Any = None  # DTensor's op dispatcher, once imported
        self._process_dtensor_ops: dict[Any, Any] | None = None
        self._fresh_ops: dict[Any, Any] | None = None
        self._process_flags = _FRESH_FLAGS
        self._sharing: SharedPropagation | None = None  # DTensor's propagation, shared (Rule 4)
        self._fsdp: Any = None  # FSDP2's _fsdp_param module once its chunks are lazy (Rule 5)
        self._ddp_logging: Any = None  # DDP's _get_ddp_logging_data, restored at exit
        self._profilers = RankProfilers()  # torch's profiler, per rank (_profiler.py)
        self._gloo = _GlooGuard(self)

    # ---- process-wide ----

    def __enter__(self) -> Session:
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError("simcluster.torch.spawn(): another spawn is running in this "
                                   "process; start spawns one after another, not from a rank")
            _active = self
        self._process_c10d = _read_c10d()
        self._process_env = dict(os.environ)
        self._excepthook = sys.excepthook
        self._dispatcher = _dtensor_dispatcher()
        if self._dispatcher is not None:
            self._process_dtensor_ops = self._dispatcher._custom_op_handlers
            self._sharing = _shared_propagation.install(self._dispatcher)
        self._fsdp = _fsdp_chunks.install()
        self._handlers.install()
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        ddp = torch.nn.parallel.DistributedDataParallel
        self._ddp_logging = ddp.__dict__["_get_ddp_logging_data"]
        ddp._get_ddp_logging_data = _ddp_logging_data(self._ddp_logging)
        self._profilers.install()
        self._gloo.install()
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        try:
            torch._C._distributed_c10d._set_thread_isolation_mode(False)
            self._gloo.restore()
            self._profilers.restore()
            torch.nn.parallel.DistributedDataParallel._get_ddp_logging_data = self._ddp_logging
            self._handlers.restore()
            dispatcher = self._dispatcher or _dtensor_dispatcher()
            if self._sharing is not None:
                _shared_propagation.restore(self._sharing)
            if self._fsdp is not None:
                _fsdp_chunks.restore(self._fsdp)
            if dispatcher is not None:
                ops = self._process_dtensor_ops
                if ops is None:  # DTensor was imported during the run
                    ops = _fresh_dtensor_ops(dispatcher)
                dispatcher._custom_op_handlers = ops
            sys.excepthook = self._excepthook
            if self._owner is not None:
                self._owner = None
                _write_c10d(self._process_c10d)
                _write_env(self._process_env)
                _write_flags(self._process_flags, _read_flags())
            self.ranks.clear()
        finally:
            _active = None

    # ---- per rank ----

    def start_rank(self) -> RankState:
        """From a new rank's thread: make its state and have it swapped in whenever it resumes."""
        task = current_task()
        comm = current_comm()
        assert task is not None and comm is not None, "called from a spawned rank"
        state = RankState(task.rank, comm, self._process_env)
        self.ranks[task.rank] = state
        _sync.on_switch(lambda: self._switch(state), None)
        return state

    def _switch(self, state: RankState) -> None:
        _rank_cwd.enter(state.rank)  # its own working directory (the launchers install it)
        owner = self._owner
        if owner is state:
            return
        flags = _read_flags()
        if owner is None:
            self._process_flags = flags
            _write_c10d(state.c10d)
            _write_env(state.env)
            seen = _env_snapshot()
        else:
            owner.flags = flags
            owner.c10d = _read_c10d()
            seen = _env_snapshot()
            if seen != self._env_seen:  # the owner changed its environment
                owner.env = dict(os.environ)
            self._share_rank_maps(owner.c10d["_pg_group_ranks"])
            _write_c10d(state.c10d)
            if state.env is not owner.env and state.env != owner.env:
                _write_env(state.env)
                seen = _env_snapshot()
        self._env_seen = seen
        _write_flags(state.flags, flags)
        self._switch_dtensor_ops(owner, state)
        if self._fsdp is None:  # until FSDP2 is imported (Rule 5)
            self._fsdp = _fsdp_chunks.install()
        self._owner = state

    def _switch_dtensor_ops(self, owner: RankState | None, state: RankState) -> None:
        """Give each rank its own DTensor custom op handlers, as each process has its own."""
        dispatcher = self._dispatcher
        if dispatcher is None:
            dispatcher = self._dispatcher = _dtensor_dispatcher()
            if dispatcher is None:
                return
            self._sharing = _shared_propagation.install(dispatcher)
        if owner is not None:
            owner.dtensor_ops = dispatcher._custom_op_handlers
        if state.dtensor_ops is None:
            if self._fresh_ops is None:
                self._fresh_ops = _fresh_dtensor_ops(dispatcher)
            state.dtensor_ops = dict(self._fresh_ops)
        dispatcher._custom_op_handlers = state.dtensor_ops

    def _share_rank_maps(self, group_ranks: dict[Any, dict[int, int]]) -> None:
        """Replace the identity maps of the world in ``group_ranks`` by the shared one (Rule 3)."""
        n = self.world_size
        identity = self._identity
        for group, ranks in group_ranks.items():
            if ranks is identity or len(ranks) != n or type(ranks) is not dict:
                continue
            if identity is None:
                identity = self._identity = {i: i for i in range(n)}
            if ranks == identity:
                group_ranks[group] = identity

    def current(self) -> RankState | None:
        """Return the state of the rank running now, or None outside this run's ranks."""
        task = current_task()
        if task is None or _sync.current() is None:
            return None
        return self.ranks.get(task.rank)

    def _lookup(self) -> tuple[int, int, RunStore] | None:
        state = self.current()
        return None if state is None else (state.rank, self.world_size, self.store)


def _ddp_logging_data(original: Any) -> Any:
    """DistributedDataParallel's ``_get_ddp_logging_data``, naming the backend the program named.

    DDP's C++ logger records the group's ``getBackendName()``, which is
    ``"simcluster"`` also for a group made as gloo (``_process_group.py``,
    Rule 4); the program reads the name ``dist.get_backend`` gives it, and for
    gloo the fields gloo's logger adds (its environment variables, "N/A"
    where unset, and its default of 2 threads).
    """
    def logging_data(self: Any) -> Any:
        data = original(self)
        if data.get("backend_name") == BACKEND and self.process_group is not None:
            try:
                named = str(dist.get_backend(self.process_group))
            except (ValueError, RuntimeError):  # not this rank's group (or none): leave it
                return data
            data["backend_name"] = named
            if named == "gloo":
                data["gloo_socket_ifname"] = os.environ.get("GLOO_SOCKET_IFNAME", "N/A")
                data["gloo_device_transport"] = os.environ.get("GLOO_DEVICE_TRANSPORT", "N/A")
                data["gloo_num_threads"] = 2
        return data
    logging_data.__wrapped__ = original  # type: ignore[attr-defined]
    logging_data.__doc__ = original.__doc__
    return logging_data


class _GlooGuard:
    """``ProcessGroupGloo`` while a spawn runs: constructed by one of its ranks, a clear error.

    ``ProcessGroupGloo(store, rank, size, options)`` is torch's real gloo: its
    constructor connects every rank of the group to every other before it
    returns, which needs them all inside it at once, and the ranks of a spawn
    run one at a time, so a rank that called it would wait for gloo's timeout
    and fail. The names ``torch.distributed.ProcessGroupGloo`` and
    ``distributed_c10d.ProcessGroupGloo`` are a subclass for the session's
    time, whose constructor raises in a rank and is gloo's elsewhere (its
    options and ``create_device`` are gloo's).
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.real: Any = None

    def install(self) -> None:
        self.real = getattr(c10d, "ProcessGroupGloo", None)
        if self.real is None:  # a build without gloo
            return
        session, real = self.session, self.real

        class ProcessGroupGloo(real):  # type: ignore[misc, valid-type]
            __doc__ = real.__doc__

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                state = session.current()
                if state is not None:
                    raise _direct_gloo(state.rank, args, kwargs)
                super().__init__(*args, **kwargs)

        ProcessGroupGloo.__module__ = real.__module__
        ProcessGroupGloo.__qualname__ = real.__qualname__
        dist.ProcessGroupGloo = c10d.ProcessGroupGloo = ProcessGroupGloo

    def restore(self) -> None:
        if self.real is not None:
            dist.ProcessGroupGloo = c10d.ProcessGroupGloo = self.real


def _direct_gloo(rank: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> SimclusterError:
    size = args[2] if len(args) > 2 else kwargs.get("size", "?")
    group_rank = args[1] if len(args) > 1 else kwargs.get("rank", "?")
    return SimclusterError(
        rank, f"ProcessGroupGloo(store, rank={group_rank}, size={size})",
        "a gloo group is torch's real gloo, which connects all its ranks at once inside this "
        "constructor, and the ranks of a spawn run one at a time, so it could only time out",
        "inside simcluster.torch.spawn use dist.init_process_group('simcluster') (simcluster "
        "torchrun runs a program's 'gloo' groups there itself)")


# ---- the backend's creator ----


def create(options: Any, _backend_options: Any = None) -> ProcessGroupSimcluster:
    """Make the ``"simcluster"`` process group torch asks for (extended API of register_backend).

    Raises:
        SimclusterError: called outside ``simcluster.torch.spawn``.
        ValueError: a rank or world size other than the run's.
    """
    session = _active
    state = session.current() if session is not None else None
    if session is None or state is None:
        raise SimclusterError(None, f"init_process_group(backend={BACKEND!r})",
                              "no simcluster.torch.spawn is running this code",
                              "launch the function with simcluster.torch.spawn(fn, args=..., "
                              "nprocs=N), which runs fn(rank, *args) on N virtual ranks")
    ranks = list(options.global_ranks_in_group)
    rank, size = options.group_rank, options.group_size
    if not ranks:  # the default group: the world
        if rank != state.rank or size != session.world_size:
            raise ValueError(f"rank {state.rank}: init_process_group(rank={rank}, world_size={size}): "
                             f"this function runs as rank {state.rank} of "
                             f"simcluster.torch.spawn(nprocs={session.world_size}); pass the rank "
                             "spawn gave fn and world_size=nprocs, or leave both out")
        comm = state.comm
    else:
        comm = subcomm(state.comm, str(options.group_id), ranks)
    state.created = ProcessGroupSimcluster(comm, str(options.group_id), options.timeout)
    return state.created


def register() -> None:
    """Register the ``"simcluster"`` backend with torch.distributed (once per process)."""
    if BACKEND.upper() in dist.Backend._plugins:
        return
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    dist.Backend.register_backend(BACKEND, create, extended_api=True, devices=devices)
