"""Per-rank and per-communicator state, finding the calling rank, and argument checks.

An MPI communicator object is only a handle: what it refers to is a
``CommState`` (the rank's simcluster ``Comm``, its MPI name, attributes, whether
it was freed), one per simcluster ``Comm``, so that two handles on the same
communicator (``MPI.Intracomm(comm)``, ``MPI.COMM_WORLD`` and the ``comm`` a
rank function gets) see one name and compare equal. What a rank keeps across
communicators (its ``Attach_buffer`` space, buffered sends still in flight,
``Init``/``Finalize``) is its ``RankState``.

``MPI.COMM_WORLD`` and ``MPI.COMM_SELF`` are module-level handles that resolve
at each use to the calling rank's communicator, found from the task the
engine is stepping (``engine.current_task()``), so module-level code written
for mpi4py works unchanged on every rank.

Rule 1: states are created lazily and cached weakly by simcluster ``Comm``, so
a finished run leaves nothing behind.
Rule 2: every check here raises the MPI error class MPI would (``ERR_RANK``,
``ERR_TAG``, ``ERR_ROOT``, ``ERR_COMM``) with ``rank R: Call(args): problem; fix``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

from ..engine import sync as _sync
from .. import _identity
from ..comm import Comm as ScComm
from ..comm import current_comm
from ..matching import ANY_SOURCE as SC_ANY_SOURCE
from ..matching import ANY_TAG as SC_ANY_TAG
from ..request import Request as ScRequest
from ._constants import ANY_SOURCE, ANY_TAG, PROC_NULL, ERR_COMM, ERR_RANK, ERR_ROOT, ERR_REVOKED, ERR_TAG
from ._errors import error

TAG_MAX: Final = 2**31 - 1
"""The largest tag (``comm.Get_attr(MPI.TAG_UB)``): simcluster's tags are ints in ``range(2**31)``."""

Call = Callable[[], str]
"""Builds the text of the call for an error message, only when one is raised."""


class RankState:
    """What one rank keeps across its communicators."""

    __slots__ = ("world", "world_state", "self_state", "bsend", "bsend_used", "pending",
                 "initialized", "finalized", "thread_level", "__weakref__")

    def __init__(self, world: ScComm) -> None:
        self.world = world
        self.world_state: CommState = CommState(world, self, "MPI_COMM_WORLD")
        self.self_state: CommState | None = None
        self.bsend: Any = None  # the buffer given to Attach_buffer
        self.bsend_used = 0  # bytes of it held by buffered sends in flight
        self.pending: list[tuple[ScRequest[Any], int]] = []  # (request, bytes): Bsend, Free
        self.initialized: bool | None = None  # None: as mpi4py.rc.initialize says (_env)
        self.finalized = False
        self.thread_level: int | None = None  # None: as mpi4py.rc.threads/thread_level say

    def adopt(self, req: ScRequest[Any], nbytes: int = 0) -> None:
        """Keep a request the user let go of (Bsend, Request.Free) until it completes.

        Nobody is to wait for it, so the run's leak check leaves it out even when it completes
        after the rank's last call (a message that is never received is still reported).
        """
        req._retrieved = True
        self.pending.append((req, nbytes))

    def reap(self) -> None:
        """Retire the kept requests that have completed, releasing their buffer space."""
        if not self.pending:
            return
        still = []
        for req, nbytes in self.pending:
            if req.done():
                req.test()  # retrieves it: the run's leak check sees it completed
                self.bsend_used -= nbytes
            else:
                still.append((req, nbytes))
        self.pending = still

    def self_comm(self) -> CommState:
        """This rank's ``COMM_SELF``, made on first use (not collective)."""
        if self.self_state is None:
            w = self.world.world_rank
            self.self_state = CommState(self.world.named(f"self:{w}", [w]), self, "MPI_COMM_SELF")
        return self.self_state


class CommState:
    """What one rank's handle on one communicator refers to."""

    __slots__ = ("sc", "rank_state", "name", "freed", "attrs", "create_groups", "errhandler", "hints",
                 "locks", "__weakref__")

    def __init__(self, sc: ScComm, rank_state: RankState, name: str = "") -> None:
        self.sc = sc
        self.rank_state = rank_state
        self.name = name
        self.freed = False
        self.attrs: dict[int, Any] = {}
        self.create_groups: dict[tuple[tuple[int, ...], int], int] = {}  # Create_group calls so far
        self.errhandler: Any = None  # the MPI.Errhandler set on it (None: ERRORS_RETURN)
        self.hints: dict[str, str] = {}  # the info hints it keeps (Set_info, Dup_with_info)
        self.locks: dict[Any, threading.Lock] = {}  # MPI._comm_lock_table: one lock per key
        _states[sc] = self

    def child(self, sc: ScComm | None) -> CommState | None:
        """Return the state of a communicator made from this one (None for COMM_NULL)."""
        if sc is None:
            return None
        found = _states.get(sc)
        if found is None:
            found = CommState(sc, self.rank_state)
            found.errhandler = self.errhandler  # a new communicator inherits the error handler
        return found

    def lock(self, key: Any) -> threading.Lock:
        """The communicator's lock for ``key`` (mpi4py's ``_comm_lock``), made on first use."""
        found = self.locks.get(key)
        if found is None:
            found = self.locks[key] = threading.Lock()
        return found

    def __repr__(self) -> str:
        return f"<CommState {self.name or self.sc.name!r} rank={self.sc.rank} size={self.sc.size}>"


_states: weakref.WeakKeyDictionary[ScComm, CommState] = weakref.WeakKeyDictionary()
_ranks: weakref.WeakKeyDictionary[ScComm, RankState] = weakref.WeakKeyDictionary()


def rank_state(world: ScComm) -> RankState:
    """Return the RankState of the rank whose world communicator is ``world``."""
    found = _ranks.get(world)
    if found is None:
        found = _ranks[world] = RankState(world)
    return found


OUTSIDE: Final = ("used outside any rank; run the script with `simcluster mpirun -n 4 script.py`, "
                  "or call it from the plain function passed to sc.run(fn, world_size=4)")


def current() -> RankState:
    """Return the calling rank's state.

    Raises:
        RuntimeError: called outside any rank.
    """
    world = current_comm()
    if world is None:
        raise outside("MPI")
    return rank_state(world)


def outside(what: str) -> RuntimeError:
    """The error for MPI used outside any rank; a rank of a run that has ended stops here for good.

    A run that ended (another rank failed, a deadlock) unwinds its ranks; one
    whose code caught that and calls MPI again is parked forever (``engine.sync.abandon``)
    instead of running on with an error per call.
    """
    rank = _sync.current()
    if rank is not None and rank.closing:
        _sync.abandon(rank)
    return RuntimeError(f"{what}: {OUTSIDE}")


def node_of(comm: ScComm, world_rank: int) -> int:
    """Return the simulated node of a world rank, where the engine places it.

    A platform's node (``Platform.node_of``, as the collectives group ranks),
    ``Hierarchical``'s ``ranks_per_node``, or the launcher's placement
    (``simcluster torchrun --nproc-per-node``); 0 for models without nodes.
    """
    return _identity.node_of(comm.latency, world_rank)


# ---- argument checks: they return simcluster's values ----


def _int(value: object) -> bool:
    return not isinstance(value, bool) and hasattr(value, "__index__")


def dest(st: CommState, dest: int, call: Call) -> int | None:
    """Return ``dest`` as a simcluster rank, or None for ``PROC_NULL``."""
    if _int(dest):
        d = int(dest)
        if 0 <= d < st.sc.size:
            return d
        if d == PROC_NULL:
            _not_revoked(st, call)
            return None
    raise error(ERR_RANK, st.sc.rank, call(), f"dest must be in range({st.sc.size}) or PROC_NULL "
                "for this comm", "for a ring use (comm.rank + 1) % comm.size")


def _not_revoked(st: CommState, call: Call) -> None:
    """A call with ``PROC_NULL`` sends nothing, but on a revoked communicator it fails as any call does."""
    if st.sc.is_revoked:
        raise error(ERR_REVOKED, st.sc.rank, call(), "the communicator was revoked",
                    "go on with Shrink(), which still works on it")


def source(st: CommState, source: int, call: Call) -> int | None:
    """Return ``source`` as a simcluster rank (or ANY_SOURCE), or None for ``PROC_NULL``."""
    if _int(source):
        s = int(source)
        if 0 <= s < st.sc.size:
            return s
        if s == ANY_SOURCE:
            return SC_ANY_SOURCE
        if s == PROC_NULL:
            _not_revoked(st, call)
            return None
    raise error(ERR_RANK, st.sc.rank, call(), f"source must be in range({st.sc.size}), ANY_SOURCE "
                "or PROC_NULL for this comm", "pass a rank of this comm, or ANY_SOURCE")


def send_tag(st: CommState, tag: int, call: Call) -> int:
    """Return a send's tag, checked."""
    if _int(tag) and 0 <= int(tag) <= TAG_MAX:
        return int(tag)
    raise error(ERR_TAG, st.sc.rank, call(), "tag must be in range(0, 2**31) (MPI.TAG_UB is "
                f"{TAG_MAX})", "use a non-negative int below 2**31")


def recv_tag(st: CommState, tag: int, call: Call) -> int:
    """Return a receive's tag (or simcluster's ANY_TAG), checked."""
    if _int(tag):
        t = int(tag)
        if 0 <= t <= TAG_MAX:
            return t
        if t == ANY_TAG:
            return SC_ANY_TAG
    raise error(ERR_TAG, st.sc.rank, call(), "tag must be in range(0, 2**31) or ANY_TAG",
                "use a non-negative int below 2**31, or ANY_TAG")


def root(st: CommState, root: int, call: Call) -> int:
    """Return a collective's root, checked."""
    if _int(root) and 0 <= int(root) < st.sc.size:
        return int(root)
    raise error(ERR_ROOT, st.sc.rank, call(), f"root must be in range({st.sc.size}) for this comm",
                "pass the rank that holds the data (the same on every rank)")


def null_comm(call: str) -> Exception:
    """The error for a call on ``COMM_NULL`` or a freed communicator."""
    return error(ERR_COMM, None, call, "the communicator is COMM_NULL or was freed",
                 "use a communicator you hold (COMM_WORLD, or one from Split/Dup/Create)")
