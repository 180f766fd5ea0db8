"""Communicators: ``Comm``, ``Intracomm``, ``COMM_WORLD``, ``COMM_SELF``, ``COMM_NULL``.

A communicator object is a handle on a ``CommState`` (see ``_state``): the
rank's simcluster ``Comm`` plus MPI's name and attributes. ``MPI.COMM_WORLD``
and ``MPI.COMM_SELF`` hold no state of their own: they resolve at each use to
the calling rank's communicator, so code written for ``from mpi4py import
MPI`` (``comm = MPI.COMM_WORLD`` at module level) runs unchanged on every
rank. ``MPI.Intracomm(comm)`` and subclasses wrap any of them, as mpi4py
allows. Intercommunicators (``MPI.Intercomm``) are ``_intercomm``'s.

Creating communicators follows MPI: ``Dup``, ``Split``, ``Split_type`` and
``Create`` are collective over the communicator (simcluster's ``dup``,
``split``, ``new_group``: they cost what those cost); ``Create_group`` is
collective over the group's members only and sends nothing; ranks left out
get ``COMM_NULL``. ``Split_type(COMM_TYPE_SHARED)`` groups the ranks of one
simulated node, where the engine places them: a platform's nodes
(``Platform.node_of``), ``latency.Hierarchical``'s ``ranks_per_node``, else one node.

Rule 1: a handle never caches a rank: ``COMM_WORLD`` on rank 3 is rank 3's.
Rule 2: ``Abort`` ends the whole run with ``simcluster.errors.Aborted``
(carrying ``.code``), which ``except Exception`` cannot swallow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..comm import Comm as ScComm
from ..errors import Aborted
from ._blocking import block
from ._coll import Collectives
from ._constants import (
    APPNUM, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED, COMM_TYPE_SHARED,
    CONGRUENT, IDENT, IO, LASTUSEDCODE, SIMILAR, TAG_UB, UNDEFINED, UNEQUAL, UNIVERSE_SIZE,
    WTIME_IS_GLOBAL, ANY_SOURCE, ERR_ARG, ERR_COMM, ERR_GROUP,
)
from ._attributes import AttributeCache
from . import _errhandler
from ._errhandler import ERRORS_RETURN, Errhandler
from ._errors import error, last_used_code
from ._group import Group
from ._info import INFO_NULL, Info
from ._objects import ObjectCollectives
from ._p2p import PointToPoint
from ._requests import Request, immediate
from ..comm import current_comm
from ..engine.assembly import current_task
from ._state import TAG_MAX, CommState, node_of, outside, rank_state
from ._topology import inherit as inherit_topology, kind_of as topology_kind


class _Current:
    """What ``COMM_WORLD``/``COMM_SELF`` refer to: the calling rank's communicator, found at each use."""

    __slots__ = ("which",)

    def __init__(self, which: str) -> None:
        self.which = which

    def resolve(self) -> CommState:
        world = current_comm()
        if world is None:
            raise outside(f"MPI.{self.which}")
        state = rank_state(world)
        return state.world_state if self.which == "COMM_WORLD" else state.self_comm()


_WORLD = _Current("COMM_WORLD")
_SELF = _Current("COMM_SELF")


def _launched() -> int:
    return 0


appnum_of: Callable[[], int] = _launched
"""The calling rank's ``APPNUM``: 0 for launched ranks; ``_spawn`` (which imports this module)
puts its own, which knows the spawned ones."""


class Comm(PointToPoint, Collectives, ObjectCollectives, AttributeCache):
    """A communicator handle (mpi4py's ``MPI.Comm``)."""

    __slots__ = ("_ref", "__weakref__")

    _ref: CommState | _Current | None
    _attr_kind = "Comm"

    def __new__(cls, comm: Comm | None = None) -> Comm:
        if comm is not None and not isinstance(comm, Comm):
            raise TypeError(f"MPI.{cls.__name__}({comm!r}): expected an MPI.Comm, got "
                            f"{type(comm).__name__}")
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

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

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
        for name, const in (("COMM_NULL", COMM_NULL), ("COMM_WORLD", COMM_WORLD),
                            ("COMM_SELF", COMM_SELF)):
            if self is const:
                return name
            if self._ref is const._ref:
                return (type(self), (const,))
        raise ValueError(f"cannot pickle {self!r}: a communicator other than COMM_WORLD, "
                         "COMM_SELF and COMM_NULL is a rank's own handle; send the data instead")

    # ---- facts ----

    def Get_size(self) -> int:
        """Return the number of ranks in the communicator (an intercommunicator's local group)."""
        sc = self._st.sc
        if isinstance(sc, ScComm):
            return sc.size
        return len(sc.world_ranks)  # an intercommunicator's Bridge: its local group's

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
        if isinstance(a.sc, ScComm) != isinstance(b.sc, ScComm):  # an intercomm and an intracomm
            return UNEQUAL
        ra, rb = a.sc.world_ranks, b.sc.world_ranks
        if ra == rb:
            return CONGRUENT
        return SIMILAR if sorted(ra) == sorted(rb) else UNEQUAL

    def Is_inter(self) -> bool:
        """Return whether this is an intercommunicator (``MPI.Intercomm``)."""
        return not isinstance(self._st.sc, ScComm)  # an intercomm's state holds a Bridge

    def Is_intra(self) -> bool:
        """Return whether this is an intracommunicator."""
        return isinstance(self._st.sc, ScComm)

    is_inter = property(Is_inter, doc="Whether this is an intercommunicator.")
    is_intra = property(Is_intra, doc="Whether this is an intracommunicator.")

    def Get_topology(self) -> int:
        """Return ``CART``, ``GRAPH`` or ``DIST_GRAPH`` for a topology communicator, else ``UNDEFINED``."""
        return topology_kind(self._st)

    topology = property(Get_topology, doc="The topology's kind (``UNDEFINED``: none).")
    is_topo = property(lambda self: topology_kind(self._st) != UNDEFINED,
                       doc="Whether the communicator has a topology.")

    def Get_name(self) -> str:
        """Return the communicator's name (``MPI_COMM_WORLD``, ``MPI_COMM_SELF``, ``MPI_COMM_NULL``,
        else ``""`` until set)."""
        if _target(self) is None:
            return "MPI_COMM_NULL"
        return self._st.name

    def Set_name(self, name: str) -> None:
        """Name the communicator (every handle on it sees the name)."""
        self._st.name = str(name)

    name = property(Get_name, Set_name, doc="The communicator's name.")

    # ---- fault tolerance: ULFM (docs/faults.md) ----

    def Revoke(self) -> None:
        """Revoke the communicator on every rank: what is pending on it, and what comes, fails
        with ``ERR_REVOKED`` (``Shrink``, ``Agree``, ``Ack_failed`` and ``Get_failed`` still work)."""
        self._st.sc.revoke()

    def Is_revoked(self) -> bool:
        """Return whether the communicator was revoked."""
        return self._st.sc.is_revoked

    def Get_failed(self) -> Group:
        """Return the group of the communicator's ranks known to have failed."""
        sc = self._st.sc
        return Group._of([sc.world_ranks[r] for r in sc.get_failed()], sc.world_rank)

    def Ack_failed(self, num_to_ack: int | None = None) -> int:
        """Acknowledge the first ``num_to_ack`` failed ranks (all: None); return how many were.

        Acknowledged failures no longer fail receives from ``ANY_SOURCE``
        (``ERR_PROC_FAILED_PENDING``) nor ``Agree``.
        """
        st = self._st
        if num_to_ack is not None and not hasattr(num_to_ack, "__index__"):
            raise TypeError(f"rank {st.sc.rank}: Ack_failed(num_to_ack={num_to_ack!r}): expected an int")
        return st.sc.ack_failed(None if num_to_ack is None else int(num_to_ack))

    def Agree(self, flag: int) -> int:
        """Return the bitwise AND of ``flag`` over the live ranks; works on a revoked communicator.

        Raises ``ERR_PROC_FAILED`` (after agreeing) when a rank failed whose
        failure this rank has not acknowledged (``Ack_failed``).
        """
        st = self._st
        if isinstance(flag, bool) or not hasattr(flag, "__index__"):
            raise TypeError(f"rank {st.sc.rank}: Agree(flag={flag!r}): expected an int")
        st.rank_state.reap()
        return int(block(st.sc.agree(_c_int(int(flag)))))

    def Iagree(self, flag: Any) -> Request:
        """Start ``Agree`` on ``flag``, a buffer holding one C int; the result is written there."""
        st = self._st
        rank = st.sc.rank
        try:
            view = memoryview(flag).cast("B")
        except TypeError:
            raise TypeError(f"rank {rank}: Iagree(flag={flag!r}): expected a buffer holding one C int, "
                            "such as memoryview(MPI.buffer.allocate(4)).cast('i')") from None
        if view.nbytes != 4:
            raise ValueError(f"rank {rank}: Iagree(flag): the buffer holds {view.nbytes} bytes, not one "
                             "C int (4 bytes)")
        ints = view.cast("i")
        st.rank_state.reap()

        def finish(raw: Any, _status: Any) -> None:
            ints[0] = _c_int(raw)
        return Request._of(st.sc.iagree(ints[0]), rank, lambda: "Iagree(flag)", finish, owner=st.rank_state)

    def Shrink(self) -> Comm:
        """Return a communicator of the live ranks, in this one's order; works on a revoked one."""
        st = self._st
        st.rank_state.reap()
        return self._new(st.child(block(st.sc.shrink())))

    def Ishrink(self) -> tuple[Comm, Request]:
        """Start ``Shrink``: the new communicator's handle, usable once the request completes."""
        st = self._st
        st.rank_state.reap()
        new = type(self)._on(None)

        def finish(made: Any, _status: Any) -> None:
            new._ref = st.child(made)
        return new, Request._of(st.sc.ishrink(), st.sc.rank, lambda: "Ishrink()", finish,
                                owner=st.rank_state)

    # ---- new communicators ----

    def _dup(self, call: str, hints: dict[str, str] | None) -> Comm:
        st = self._st
        st.rank_state.reap()
        child = st.child(block(st.sc.dup()))
        inherit_topology(st, child)  # a Dup keeps the topology (and the handle its class)
        new = self._new(child)
        new_st = new._st
        new_st.hints = dict(st.hints) if hints is None else hints
        try:
            self._copy_attrs_to(new, call)
        except BaseException:
            new_st.freed = True
            raise
        return new

    def Dup(self, info: Info | None = None) -> Comm:
        """Return a new communicator with the same ranks whose traffic never meets this one's.

        Attributes are copied through their keyvals' ``copy_fn``; the error handler and the
        hints (or ``info``'s, when given) carry over. Collective.
        """
        hints = None if info is None or not info else _hints(info)
        return self._dup("Dup()", hints)

    def Clone(self) -> Comm:
        """Duplicate the communicator: ``Dup``, by mpi4py's name for it on every kind of communicator."""
        return self._dup("Clone()", None)

    def Dup_with_info(self, info: Info) -> Comm:
        """Duplicate the communicator, as ``Dup`` does, with the hints of ``info`` instead of its own."""
        return self._dup("Dup_with_info()", _hints(info))

    def Idup(self, info: Info | None = None) -> tuple[Comm, Request]:
        """Duplicate the communicator nonblocking: ``Dup``, with a request that is already complete (the copy is made at once)."""
        new = self.Dup(info)
        return new, immediate(new.Get_rank(), lambda: "Idup()")

    def Idup_with_info(self, info: Info) -> tuple[Comm, Request]:
        """Duplicate with ``info``'s hints nonblocking: ``Dup_with_info``, with a request already complete."""
        new = self.Dup_with_info(info)
        return new, immediate(new.Get_rank(), lambda: "Idup_with_info()")

    def Split(self, color: int = 0, key: int = 0) -> Comm:
        """Split into one communicator per ``color``, ranked by ``(key, rank)``.

        ``color=MPI.UNDEFINED`` gets ``COMM_NULL``; a bool counts as 0 or 1, as in mpi4py.
        Collective.
        """
        st = self._st
        sc = st.sc
        call = f"Split(color={color!r}, key={key!r})"
        if not hasattr(color, "__index__") or not hasattr(key, "__index__"):
            raise TypeError(f"rank {sc.rank}: {call}: color and key must be integers, got "
                            f"{type(color).__name__} and {type(key).__name__}")
        c: int | None = int(color)
        if c == UNDEFINED:
            c = None
        elif c < 0:  # type: ignore[operator]
            raise error(ERR_ARG, sc.rank, call, "color must be an int >= 0 or MPI.UNDEFINED",
                        "pass a non-negative color")
        st.rank_state.reap()
        return self._new(st.child(block(sc.split(c, int(key)))))

    def Split_type(self, split_type: int, key: int = 0, info: Info = INFO_NULL) -> Comm:
        """Split by the ranks' simulated node, the one hardware level simcluster simulates.

        ``COMM_TYPE_SHARED`` splits by node. ``COMM_TYPE_HW_GUIDED`` and
        ``COMM_TYPE_RESOURCE_GUIDED`` do when ``info`` has ``mpi_hw_resource_type`` set to
        ``mpi_shared_memory``, and give ``COMM_NULL`` otherwise. ``COMM_TYPE_HW_UNGUIDED``
        gives the node when that is smaller than this communicator (and sets
        ``mpi_hw_resource_type`` in ``info``), else ``COMM_NULL``. ``UNDEFINED`` gets
        ``COMM_NULL``. Collective.
        """
        st = self._st
        sc = st.sc
        node = node_of(sc, sc.world_rank)
        if split_type == UNDEFINED:
            color = UNDEFINED
        elif split_type == COMM_TYPE_SHARED:
            color = node
        elif split_type in (COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
            kind = info.get("mpi_hw_resource_type") if info else None
            color = node if kind == _SHARED_MEMORY else UNDEFINED
        elif split_type == COMM_TYPE_HW_UNGUIDED:
            nodes = {node_of(sc, w) for w in sc.world_ranks}
            color = node if len(nodes) > 1 else UNDEFINED
            if color != UNDEFINED and info:
                info.Set("mpi_hw_resource_type", _SHARED_MEMORY)
        else:
            raise error(ERR_ARG, sc.rank, f"Split_type({split_type!r})", "unknown split type",
                        "pass MPI.COMM_TYPE_SHARED (ranks of one simulated node), another "
                        "MPI.COMM_TYPE_* or MPI.UNDEFINED")
        return self.Split(color, key)

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
        call = f"Create_group(group, tag={tag!r})"
        if isinstance(tag, bool) or not hasattr(tag, "__index__"):
            raise TypeError(f"rank {st.sc.rank}: {call}: the tag must be an integer, got "
                            f"{type(tag).__name__}")
        ranks = self._members(group, call)
        return self._new(_group_comm(st, ranks, ("tag", int(tag))))

    def Free(self) -> None:
        """Free the communicator; this handle becomes ``COMM_NULL``.

        Each attribute's ``delete_fn`` runs first.
        """
        st = self._st
        if st is st.rank_state.world_state or st is st.rank_state.self_state:
            raise error(ERR_COMM, st.sc.rank, f"{st.name}.Free()", "COMM_WORLD and COMM_SELF cannot "
                        "be freed", "free only communicators you created")
        try:
            self._delete_attrs(f"{st.name or 'Comm'}.Free()")
        finally:
            st.freed = True
            self._ref = None

    def free(self) -> None:
        """Free the communicator, never raising: a null handle stays null, and a handle on
        ``COMM_WORLD`` or ``COMM_SELF`` becomes ``COMM_NULL`` (the constants themselves stay)."""
        if self is COMM_WORLD or self is COMM_SELF:
            return
        st = _target(self)
        if st is None or st is st.rank_state.world_state or st is st.rank_state.self_state:
            self._ref = None
            return
        self.Free()

    Disconnect = Free

    def Abort(self, errorcode: int = 0) -> None:
        """End the whole run with ``errorcode``: raises ``simcluster.errors.Aborted`` (``.code``)."""
        sc = self._st.sc
        raise Aborted(sc.world_rank, int(errorcode), "Abort")

    # ---- attributes, info, error handlers ----

    def _attr_table(self, call: str) -> dict[int, Any]:
        return self._st.attrs

    def _attr_rank(self) -> int | None:
        return _rank_or_none()

    def _attr_builtin(self, keyval: int) -> tuple[bool, Any]:
        self._st  # COMM_NULL has no attributes, predefined or not: ERR_COMM
        if keyval == TAG_UB:
            return True, TAG_MAX
        if keyval == WTIME_IS_GLOBAL:
            return True, True
        if keyval == IO:
            return True, ANY_SOURCE
        if keyval == APPNUM:
            return True, appnum_of()
        if keyval == UNIVERSE_SIZE:
            return True, self._st.rank_state.world.size
        if keyval == LASTUSEDCODE:
            return True, last_used_code()
        return False, None

    def Get_info(self) -> Info:
        """Return a new info with the communicator's hints (MPI-4's assertions, ``"false"`` unless set)."""
        return Info.Create({**_DEFAULT_HINTS, **self._st.hints})

    def Set_info(self, info: Info) -> None:
        """Keep the hints of ``info`` simcluster knows (MPI-4's ``mpi_assert_*``); others are ignored."""
        st = self._st
        st.hints = {**st.hints, **_hints(info)}

    info = property(Get_info, Set_info, doc="The communicator's hints.")

    def Get_errhandler(self) -> Errhandler:
        """Return (a new handle on) the communicator's error handler; ``ERRORS_RETURN`` by default."""
        current = self._st.errhandler
        return Errhandler(_errhandler.default() if current is None else current)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the error handler that ``Call_errhandler`` runs (new communicators inherit it)."""
        st = self._st
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"rank {st.sc.rank}: Set_errhandler({errhandler!r}): expected an "
                            "MPI.Errhandler")
        errhandler._check_settable(f"Set_errhandler({errhandler!r})", st.sc.rank)
        st.errhandler = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Run the error handler for ``errorcode``: ``ERRORS_RETURN`` returns, ``ERRORS_ARE_FATAL``
        and ``ERRORS_ABORT`` end the run with the code, a user handler is called as ``fn(comm, code)``."""
        current = self._st.errhandler
        (_errhandler.default() if current is None else current)._invoke(self, int(errorcode))

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """Return an error handler that calls ``errhandler_fn(comm, errorcode)`` (at most 32 live)."""
        return Errhandler._user("Comm", errhandler_fn)

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

    def Iflush_buffer(self) -> Any:
        """The rank's buffered sends, flushed (one attach buffer a rank, as ``Attach_buffer``); a request."""
        from ._env import Iflush_buffer

        return Iflush_buffer()


_SHARED_MEMORY = "mpi_shared_memory"
"""The ``mpi_hw_resource_type`` of a simulated node (MPI-4's name for shared memory)."""

_DEFAULT_HINTS = {"mpi_assert_no_any_tag": "false", "mpi_assert_no_any_source": "false",
                  "mpi_assert_exact_length": "false", "mpi_assert_allow_overtaking": "false"}
"""The hints a communicator keeps (MPI-4's assertions); MPICH drops the keys it does not know."""


def _hints(info: Info | None) -> dict[str, str]:
    """The hints of ``info`` a communicator keeps."""
    if info is None or not info:
        return {}
    return {k: v for k, v in info.items() if k in _DEFAULT_HINTS}


def _group_comm(st: CommState, ranks: list[int], how: tuple[str, Any]) -> CommState | None:
    """The communicator of world ``ranks`` made without messages (None when the rank is outside).

    Members agree on it by the ranks, ``how`` (a tag, a string tag) and how many such calls
    came before with the same ranks and ``how``.
    """
    if st.sc.world_rank not in ranks:
        return None
    key = (tuple(ranks), how)
    n = st.create_groups.get(key, 0)  # type: ignore[arg-type]
    st.create_groups[key] = n + 1  # type: ignore[index]
    made = st.sc.named(f"group{list(ranks)}/{how[0]}={how[1]}/#{n}", ranks)
    return st.child(made)


def _c_int(value: int) -> int:
    """``value`` as a C int would hold it (two's complement, 32 bits)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


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
    """An intracommunicator (mpi4py's ``MPI.Intracomm``)."""

    __slots__ = ()

    def __new__(cls, comm: Comm | None = None) -> Intracomm:
        self = super().__new__(cls, comm)
        ref = self._ref
        if isinstance(ref, CommState) and not isinstance(ref.sc, ScComm):  # an intercomm's Bridge
            raise TypeError(f"MPI.{cls.__name__}({comm!r}): expected an intracommunicator")
        assert isinstance(self, Intracomm)
        return self

    @classmethod
    def Create_from_group(cls, group: Group, stringtag: str = "org.mpi4py", info: Info = INFO_NULL,
                          errhandler: Errhandler | None = None) -> Intracomm:
        """Return the communicator of ``group``'s ranks (MPI-4); collective over its members only.

        Members agree on it by the group, ``stringtag`` and how many such calls came before;
        nothing is sent. The hints of ``info`` and ``errhandler`` (default ``ERRORS_RETURN``)
        are the new communicator's.
        """
        world = _WORLD.resolve()
        call = f"Intracomm.Create_from_group(group, stringtag={stringtag!r})"
        if not isinstance(stringtag, str):
            raise TypeError(f"rank {world.sc.rank}: {call}: stringtag must be a str")
        ranks = list(group._members(call))
        if world.sc.world_rank not in ranks:
            raise error(ERR_GROUP, world.sc.rank, call, "this rank is not in the group",
                        "call it on the group's members only")
        made = _group_comm(world, ranks, ("stringtag", stringtag))
        assert made is not None
        made.hints = _hints(info)
        if errhandler is not None:
            errhandler._check_settable(call, world.sc.rank)
        made.errhandler = Errhandler(ERRORS_RETURN if errhandler is None else errhandler)
        return cls._on(made)  # type: ignore[return-value]


COMM_NULL = Comm()
COMM_WORLD: Intracomm = Intracomm._on(None)  # type: ignore[assignment]
COMM_WORLD._ref = _WORLD
COMM_SELF: Intracomm = Intracomm._on(None)  # type: ignore[assignment]
COMM_SELF._ref = _SELF


def world_of(comm: ScComm) -> Intracomm:
    """Return the ``comm`` a synchronous rank's function gets: its ``COMM_WORLD`` (``_config.build_world``)."""
    handle: Intracomm = Intracomm._on(rank_state(comm).world_state)  # type: ignore[assignment]
    return handle


def _comm_lock(comm: Comm, key: Any = None) -> threading.Lock:
    """Create or get the communicator's lock for ``key``."""
    # The lowercase collectives put theirs in the table under mpi4py's keys (bcast, gather,
    # scatter, allgather, alltoall; @commctx_intra for the reductions) but do not hold them:
    # each is one simulated operation, which no other call can interleave with.
    if not isinstance(comm, Comm):
        raise TypeError(f"_comm_lock(): expected an MPI.Comm, got {type(comm).__name__}")
    return comm._st.lock(key)


def _comm_lock_table(comm: Comm) -> dict[Any, threading.Lock]:
    """Return the communicator's table of locks, shared by its handles."""
    if not isinstance(comm, Comm):
        raise TypeError(f"_comm_lock_table(): expected an MPI.Comm, got {type(comm).__name__}")
    return comm._st.locks
