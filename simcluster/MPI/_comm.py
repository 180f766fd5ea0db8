"""Communicators: ``Comm``, ``Intracomm``, ``COMM_WORLD``, ``COMM_SELF``, ``COMM_NULL``.

A communicator object is a handle on a ``CommState`` (see ``_state``): the
rank's simcluster ``Comm`` plus MPI's name and attributes. ``MPI.COMM_WORLD``
and ``MPI.COMM_SELF`` hold no state of their own: they resolve at each use to
the calling rank's communicator, so code written for ``from mpi4py import
MPI`` (``comm = MPI.COMM_WORLD`` at module level) runs unchanged on every
rank. ``MPI.Intracomm(comm)`` and subclasses wrap any of them, as mpi4py
allows. Every communicator here is an intracommunicator.

Creating communicators follows MPI: ``Dup``, ``Split``, ``Split_type`` and
``Create`` are collective over the communicator (simcluster's ``dup``,
``split``, ``new_group``: they cost what those cost); ``Create_group`` is
collective over the group's members only and sends nothing; ranks left out
get ``COMM_NULL``. ``Split_type(COMM_TYPE_SHARED)`` groups the ranks of one
simulated node: ``latency.Hierarchical``'s ``ranks_per_node``, else one node.

Rule 1: a handle never caches a rank: ``COMM_WORLD`` on rank 3 is rank 3's.
Rule 2: ``Abort`` ends the whole run with ``simcluster.errors.Aborted``
(carrying ``.code``), which ``except Exception`` cannot swallow.
"""

from __future__ import annotations

from typing import Any

from ..comm import Comm as ScComm
from ..errors import Aborted
from ._blocking import block
from ._coll import Collectives
from ._constants import (
    APPNUM, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED, COMM_TYPE_SHARED,
    CONGRUENT, IDENT, IO, LASTUSEDCODE, SIMILAR, TAG_UB, UNDEFINED, UNEQUAL, UNIVERSE_SIZE,
    WTIME_IS_GLOBAL, ANY_SOURCE, KEYVAL_INVALID, ERR_ARG, ERR_COMM, ERR_GROUP, ERR_KEYVAL,
)
from ._errors import error
from ._group import Group
from ._info import ERRORS_RETURN, INFO_NULL, Errhandler, Info
from ._objects import ObjectCollectives
from ._p2p import PointToPoint
from ._requests import Request, immediate
from ..engine import current_task
from ._state import OUTSIDE, TAG_MAX, CommState, node_of, rank_state


class _Current:
    """What ``COMM_WORLD``/``COMM_SELF`` refer to: the calling rank's communicator, found at each use."""

    __slots__ = ("which",)

    def __init__(self, which: str) -> None:
        self.which = which

    def resolve(self) -> CommState:
        task = current_task()
        world = None if task is None else task.comm
        if world is None:
            raise RuntimeError(f"MPI.{self.which}: {OUTSIDE}")
        state = rank_state(world)
        return state.world_state if self.which == "COMM_WORLD" else state.self_comm()


_WORLD = _Current("COMM_WORLD")
_SELF = _Current("COMM_SELF")


class Comm(PointToPoint, Collectives, ObjectCollectives):
    """A communicator handle (mpi4py's ``MPI.Comm``)."""

    __slots__ = ("_ref",)

    _ref: CommState | _Current | None

    def __new__(cls, comm: Comm | None = None) -> Comm:
        self = object.__new__(cls)
        self._ref = None if comm is None else comm._ref
        return self

    @classmethod
    def _on(cls, state: CommState | None) -> Comm:
        self = cls.__new__(cls)
        self._ref = state
        return self

    @property
    def _st(self) -> CommState:
        ref = self._ref
        if type(ref) is CommState and not ref.freed:
            return ref
        if type(ref) is _Current:
            return ref.resolve()
        raise error(ERR_COMM, _rank_or_none(), "Comm", "the communicator is COMM_NULL or was freed",
                    "use a communicator you hold (COMM_WORLD, or one from Split/Dup/Create)")

    def _new(self, state: CommState | None) -> Comm:
        """A handle of this handle's class on ``state`` (COMM_NULL when None)."""
        cls = type(self) if state is not None else Comm
        return cls._on(state)

    # ---- identity ----

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Comm):
            return NotImplemented
        return _target(self) is _target(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return id(_target(self))

    def __bool__(self) -> bool:
        return _target(self) is not None

    def __repr__(self) -> str:
        kind = type(self).__name__
        ref = self._ref
        if type(ref) is _Current and current_task() is None:
            return f"<MPI.{kind} {ref.which}: the calling rank's, resolved at each use>"
        state = _target(self)
        if state is None:
            return f"<MPI.{kind} COMM_NULL>"
        return f"<MPI.{kind} {state.name or repr(state.sc.name)} rank={state.sc.rank} size={state.sc.size}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        raise TypeError(f"cannot pickle {self!r}: a communicator is a rank's own handle; send data")

    # ---- facts ----

    def Get_size(self) -> int:
        """Return the number of ranks in the communicator."""
        return self._st.sc.size

    def Get_rank(self) -> int:
        """Return this rank's number in the communicator."""
        return self._st.sc.rank

    size = property(Get_size, doc="Number of ranks in the communicator.")
    rank = property(Get_rank, doc="This rank's number in the communicator.")

    def Get_group(self) -> Group:
        """Return the group of the communicator's ranks."""
        sc = self._st.sc
        return Group._of(sc.world_ranks, sc.world_rank)

    group = property(Get_group, doc="The group of the communicator's ranks.")

    def Compare(self, comm: Comm) -> int:
        """Return ``IDENT`` (same communicator), ``CONGRUENT`` (same ranks in the same order),
        ``SIMILAR`` (same ranks) or ``UNEQUAL``."""
        a, b = self._st, comm._st
        if a is b:
            return IDENT
        ra, rb = a.sc.world_ranks, b.sc.world_ranks
        if ra == rb:
            return CONGRUENT
        return SIMILAR if sorted(ra) == sorted(rb) else UNEQUAL

    def Is_inter(self) -> bool:
        """Return False: every communicator here is an intracommunicator."""
        self._st
        return False

    def Is_intra(self) -> bool:
        """Return True: every communicator here is an intracommunicator."""
        self._st
        return True

    is_inter = property(Is_inter, doc="False: intercommunicators are not simulated.")
    is_intra = property(Is_intra, doc="True.")

    def Get_topology(self) -> int:
        """Return ``UNDEFINED``: no topology is attached (topologies are not simulated)."""
        self._st
        return UNDEFINED

    topology = property(Get_topology, doc="UNDEFINED: no topology.")
    is_topo = property(lambda self: False, doc="False: no topology.")

    def Get_name(self) -> str:
        """Return the communicator's name (``MPI_COMM_WORLD``, ``MPI_COMM_SELF``, else ``""`` until set)."""
        return self._st.name

    def Set_name(self, name: str) -> None:
        """Name the communicator (every handle on it sees the name)."""
        self._st.name = str(name)

    name = property(Get_name, Set_name, doc="The communicator's name.")

    # ---- new communicators ----

    def Dup(self, info: Info | None = None) -> Comm:
        """Return a new communicator with the same ranks whose traffic never meets this one's."""
        st = self._st
        st.rank_state.reap()
        return self._new(st.child(block(st.sc.dup())))

    Clone = Dup

    def Dup_with_info(self, info: Info) -> Comm:
        """``Dup`` (hints are accepted and ignored)."""
        return self.Dup(info)

    def Idup(self, info: Info | None = None) -> tuple[Comm, Request]:
        """``Dup``, returned with a request that is already complete (the copy is made at once)."""
        new = self.Dup(info)
        return new, immediate(new.Get_rank(), lambda: "Idup()")

    def Idup_with_info(self, info: Info) -> tuple[Comm, Request]:
        """``Idup`` (hints are accepted and ignored)."""
        return self.Idup(info)

    def Split(self, color: int = 0, key: int = 0) -> Comm:
        """Split into one communicator per ``color``, ranked by ``(key, rank)``.

        ``color=MPI.UNDEFINED`` gets ``COMM_NULL``. Collective.
        """
        st = self._st
        sc = st.sc
        if color == UNDEFINED:
            c: int | None = None
        elif isinstance(color, bool) or not hasattr(color, "__index__") or int(color) < 0:
            raise error(ERR_ARG, sc.rank, f"Split(color={color!r}, key={key!r})",
                        "color must be an int >= 0 or MPI.UNDEFINED", "pass a non-negative color")
        else:
            c = int(color)
        st.rank_state.reap()
        return self._new(st.child(block(sc.split(c, int(key)))))

    def Split_type(self, split_type: int, key: int = 0, info: Info = INFO_NULL) -> Comm:
        """Split by the ranks' simulated node (``COMM_TYPE_SHARED``); ``UNDEFINED`` gets ``COMM_NULL``."""
        st = self._st
        sc = st.sc
        if split_type == UNDEFINED:
            return self.Split(UNDEFINED, key)
        if split_type not in (COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED,
                              COMM_TYPE_RESOURCE_GUIDED):
            raise error(ERR_ARG, sc.rank, f"Split_type({split_type!r})", "unknown split type",
                        "pass MPI.COMM_TYPE_SHARED (ranks of one simulated node) or MPI.UNDEFINED")
        return self.Split(node_of(sc, sc.world_rank), key)

    def _members(self, group: Group, call: str) -> list[int]:
        st = self._st
        ranks = group._members(call)
        world = st.sc.world_ranks
        missing = [w for w in ranks if w not in world]
        if missing:
            raise error(ERR_GROUP, st.sc.rank, call, f"world ranks {missing} of the group are not in "
                        "this communicator", "make the group from this communicator's Get_group()")
        return list(ranks)

    def Create(self, group: Group) -> Comm:
        """Return the communicator of ``group``'s ranks (``COMM_NULL`` outside it). Collective."""
        st = self._st
        ranks = self._members(group, "Create(group)")
        local = [st.sc.world_ranks.index(w) for w in ranks]
        st.rank_state.reap()
        return self._new(st.child(block(st.sc.new_group(local))))

    def Create_group(self, group: Group, tag: int = 0) -> Comm:
        """Return the communicator of ``group``'s ranks; collective over the group's members only.

        Ranks outside the group get ``COMM_NULL``. Sends nothing: members agree on the
        communicator by the group, the tag and how many such calls came before.
        """
        st = self._st
        ranks = self._members(group, f"Create_group(group, tag={tag!r})")
        if st.sc.world_rank not in ranks:
            return Comm()
        key = (tuple(ranks), int(tag))
        n = st.create_groups.get(key, 0)
        st.create_groups[key] = n + 1
        made = st.sc.named(f"group{list(ranks)}/tag={tag}/#{n}", ranks)
        return self._new(st.child(made))

    def Free(self) -> None:
        """Free the communicator; this handle becomes ``COMM_NULL``."""
        st = self._st
        if st is st.rank_state.world_state or st is st.rank_state.self_state:
            raise error(ERR_COMM, st.sc.rank, f"{st.name}.Free()", "COMM_WORLD and COMM_SELF cannot "
                        "be freed", "free only communicators you created")
        st.freed = True
        self._ref = None

    free = Free
    Disconnect = Free

    def Abort(self, errorcode: int = 0) -> None:
        """End the whole run with ``errorcode``: raises ``simcluster.errors.Aborted`` (``.code``)."""
        sc = self._st.sc
        raise Aborted(sc.world_rank, int(errorcode), "Abort")

    # ---- attributes, info, error handlers ----

    def Get_attr(self, keyval: int) -> Any:
        """Return an attribute: ``TAG_UB``, ``WTIME_IS_GLOBAL``, ``UNIVERSE_SIZE``, ... or a user keyval's."""
        st = self._st
        builtin = {TAG_UB: TAG_MAX, WTIME_IS_GLOBAL: True, IO: ANY_SOURCE, APPNUM: None,
                   UNIVERSE_SIZE: st.rank_state.world.size, LASTUSEDCODE: None}
        if keyval in builtin:
            return builtin[keyval]
        return st.attrs.get(keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        """Set a user attribute."""
        self._st.attrs[_keyval(keyval)] = attrval

    def Delete_attr(self, keyval: int) -> None:
        """Delete a user attribute."""
        self._st.attrs.pop(_keyval(keyval), None)

    @classmethod
    def Create_keyval(cls, copy_fn: Any = None, delete_fn: Any = None, nopython: bool = False) -> int:
        """Return a new attribute key (copy and delete callbacks are accepted, not called)."""
        global _next_keyval
        _next_keyval += 1
        return _next_keyval

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free an attribute key; return ``KEYVAL_INVALID``."""
        return KEYVAL_INVALID

    def Get_info(self) -> Info:
        """Return the communicator's hints (none are used)."""
        self._st
        return Info.Create()

    def Set_info(self, info: Info) -> None:
        """Accept hints (they are ignored)."""
        self._st

    info = property(Get_info, Set_info, doc="The communicator's hints.")

    def Get_errhandler(self) -> Errhandler:
        """Return ``ERRORS_RETURN``: errors are raised as ``MPI.Exception``, as in mpi4py."""
        self._st
        return ERRORS_RETURN

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Accept an error handler (errors are always raised as Python exceptions)."""
        self._st

    def Call_errhandler(self, errorcode: int) -> None:
        """Raise ``MPI.Exception(errorcode)``."""
        from ._errors import Exception as MPIException

        raise MPIException(errorcode)

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """Return an error handler (never called: errors are raised as Python exceptions)."""
        return Errhandler()

    def Attach_buffer(self, buf: Any) -> None:
        """Attach a buffer for ``Bsend`` (MPI-4's per-communicator form: the rank's buffer)."""
        from ._env import Attach_buffer

        Attach_buffer(buf)

    def Detach_buffer(self) -> Any:
        """Detach the ``Bsend`` buffer once every buffered send has left."""
        from ._env import Detach_buffer

        return Detach_buffer()

    def Flush_buffer(self) -> None:
        """Wait until every buffered send has left."""
        from ._env import Flush_buffer

        Flush_buffer()


_next_keyval = 1 << 20


def _keyval(keyval: int) -> int:
    if not isinstance(keyval, int) or keyval in (TAG_UB, WTIME_IS_GLOBAL, UNIVERSE_SIZE, IO, APPNUM):
        raise error(ERR_KEYVAL, None, f"Set_attr({keyval!r})", "predefined attributes cannot be set",
                    "create a key with Comm.Create_keyval()")
    return keyval


def _target(comm: Comm) -> CommState | None:
    """The state a handle refers to (resolving COMM_WORLD/COMM_SELF), None for COMM_NULL."""
    ref = comm._ref
    if isinstance(ref, _Current):
        return ref.resolve()
    return None if ref is None or ref.freed else ref


def _rank_or_none() -> int | None:
    task = current_task()
    return None if task is None else task.rank


class Intracomm(Comm):
    """An intracommunicator: every communicator here (mpi4py's ``MPI.Intracomm``)."""

    __slots__ = ()

    def __new__(cls, comm: Comm | None = None) -> Intracomm:
        self = super().__new__(cls, comm)
        assert isinstance(self, Intracomm)
        return self


COMM_NULL = Comm()
COMM_WORLD: Intracomm = Intracomm._on(None)  # type: ignore[assignment]
COMM_WORLD._ref = _WORLD
COMM_SELF: Intracomm = Intracomm._on(None)  # type: ignore[assignment]
COMM_SELF._ref = _SELF


def world_of(comm: ScComm) -> Intracomm:
    """Return the ``comm`` a synchronous rank's function gets: its ``COMM_WORLD`` (``_config.build_world``)."""
    handle: Intracomm = Intracomm._on(rank_state(comm).world_state)  # type: ignore[assignment]
    return handle
