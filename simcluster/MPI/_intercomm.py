"""Intercommunicators: ``Intercomm``, ``Intracomm.Create_intercomm``, ``Intercomm.Create_from_groups``.

An intercommunicator joins two disjoint groups; a rank names ranks of the
other group in point-to-point calls and as roots. A rank's ``CommState.sc`` is
a ``Bridge`` (``_bridge``: how messages cross, with no translation of sources);
the collectives are ``_intercoll``'s. Here: making intercommunicators, the
handle class, and what derives from one (``Dup``, ``Split``, ``Create``,
``Merge``, ``Shrink``).

``Create_intercomm`` costs what MPICH's does: the leaders exchange their
groups over ``peer_comm`` (one message each way, the user's tag), then each
broadcasts the remote group in its own group. The key naming the new
communicators joins both groups' world ranks with a number from each leader
(its count of intercomms made), so repeated calls between the same groups
get distinct contexts.

Rule 1: every member of both groups derives new communicators in the same
order, numbered by the bridge (``Bridge.next_key``), so keys agree without messages.
Rule 2: ranks left out of a derived intercomm (another color, outside the
group, a color the other group lacks) get ``COMM_NULL``, as MPI says.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._blocking import block
from ._bridge import Bridge, _fold, _lbcast, _lgather
from ._coll import _req
from ._comm import Comm, Intracomm, _hints
from ._constants import (
    COMM_TYPE_SHARED, CONGRUENT, ERR_ARG, ERR_COMM, ERR_GROUP, IDENT, SIMILAR, UNDEFINED, UNEQUAL,
)
from ._errhandler import ERRORS_RETURN, Errhandler
from ._errors import error
from ._group import Group
from ._info import INFO_NULL, Info
from ._intercoll import InterCollectives
from ._requests import Request, immediate
from ._state import CommState, RankState, current, node_of

# ---- making intercommunicators ----

_nonces: weakref.WeakKeyDictionary[RankState, int] = weakref.WeakKeyDictionary()
_from_groups: weakref.WeakKeyDictionary[RankState, dict[Any, int]] = weakref.WeakKeyDictionary()


def _bridge_state(rank_state: RankState, mine: list[int], theirs: list[int], key: str,
                  parent: CommState | None) -> CommState:
    """The state of this rank's side of the intercomm between ``mine`` and ``theirs`` named ``key``."""
    world = rank_state.world
    # joint, not named: the two groups' COMM_WORLDs differ when one spawned the other
    local = world.joint(f"{key}/local/{mine}", mine)
    out = world.joint(f"{key}/{mine}->{theirs}", mine + theirs)
    inb = world.joint(f"{key}/{theirs}->{mine}", theirs + mine, at=len(theirs) + mine.index(world.world_rank))
    bridge = Bridge(local, out, inb, theirs, key)
    state = CommState(bridge, rank_state)  # type: ignore[arg-type]
    if parent is not None:
        state.errhandler = parent.errhandler
    return state


def _canonical(a: tuple[list[int], int], b: tuple[list[int], int]) -> str:
    first, second = sorted([a, b])
    return f"inter:{first[0]}#{first[1]}|{second[0]}#{second[1]}"


def Create_intercomm(self: Intracomm, local_leader: int, peer_comm: Comm, remote_leader: int,
                     tag: int = 0) -> Intercomm:
    """Return the intercommunicator between this communicator's group and another one's.

    Collective over both groups. The leaders (``local_leader`` here, ``remote_leader``
    in ``peer_comm``) exchange their groups over ``peer_comm`` with ``tag``; each then
    broadcasts the remote group in its own group: two messages and two broadcasts of
    virtual time, as in MPICH.
    """
    st = self._st
    sc = st.sc
    call = f"Create_intercomm(local_leader={local_leader!r}, peer_comm, remote_leader={remote_leader!r}, tag={tag!r})"
    if isinstance(sc, Bridge):
        raise error(ERR_COMM, sc.rank, call, "this is an intercommunicator",
                    "call it on an intracommunicator holding the local group")
    if not (hasattr(local_leader, "__index__") and 0 <= int(local_leader) < sc.size):
        raise error(ERR_ARG, sc.rank, call, f"local_leader must be in range({sc.size})",
                    "pass the rank of the local group's leader in this communicator")
    rank_state = st.rank_state
    rank_state.reap()
    mine = list(sc.world_ranks)
    info: tuple[list[int], int, int] | None = None
    if sc.rank == int(local_leader):
        peer = peer_comm._st.sc
        if not (hasattr(remote_leader, "__index__") and 0 <= int(remote_leader) < peer.size):
            raise error(ERR_ARG, sc.rank, call, f"remote_leader must be in range({peer.size}) of peer_comm",
                        "pass the remote leader's rank in peer_comm")
        nonce = _nonces.get(rank_state, 0)
        _nonces[rank_state] = nonce + 1
        sreq = peer.isend((mine, nonce), int(remote_leader), int(tag))
        theirs, their_nonce = block(peer.recv(None, int(remote_leader), int(tag)))
        block(sreq)
        info = (list(theirs), int(their_nonce), nonce)
    theirs, their_nonce, nonce = block(sc.broadcast(info, int(local_leader)))
    if set(theirs) & set(mine):
        raise error(ERR_COMM, sc.rank, call, "the local and remote groups overlap",
                    "make the two groups disjoint (split the peer communicator in two)")
    key = _canonical((mine, nonce), (list(theirs), their_nonce))
    return Intercomm._on(_bridge_state(rank_state, mine, list(theirs), key, st))  # type: ignore[return-value]


# ---- the class ----


class Intercomm(InterCollectives, Comm):
    """An intercommunicator (mpi4py's ``MPI.Intercomm``): ranks address the remote group."""

    __slots__ = ()

    def __new__(cls, comm: Comm | None = None) -> Intercomm:
        self = super().__new__(cls, comm)
        ref = self._ref
        if isinstance(ref, CommState) and not ref.freed and not isinstance(ref.sc, Bridge) or (
                comm is not None and ref is not None and not isinstance(ref, CommState)):
            raise TypeError(f"MPI.{cls.__name__}({comm!r}): expected an intercommunicator")
        assert isinstance(self, Intercomm)
        return self

    def __repr__(self) -> str:
        ref = self._ref
        if not isinstance(ref, CommState) or ref.freed:
            return "<MPI.Intercomm COMM_NULL>"
        br = self._br
        return (f"<MPI.{type(self).__name__} {ref.name or repr(br.key)} rank={br.rank} "
                f"size={br.local.size} remote_size={br.size}>")

    # ---- facts ----

    def Get_size(self) -> int:
        """Return the number of ranks in the local group."""
        return self._br.local.size

    size = property(Get_size, doc="Number of ranks in the local group.")

    def Get_remote_size(self) -> int:
        """Return the number of ranks in the remote group."""
        return self._br.size

    remote_size = property(Get_remote_size, doc="Number of ranks in the remote group.")

    def Get_remote_group(self) -> Group:
        """Return the group of the remote ranks."""
        br = self._br
        return Group._of(br.remote, br.world_rank)

    remote_group = property(Get_remote_group, doc="The group of the remote ranks.")

    def Is_inter(self) -> bool:
        """Return True."""
        self._st
        return True

    def Is_intra(self) -> bool:
        """Return False."""
        self._st
        return False

    is_inter = property(Is_inter, doc="True.")
    is_intra = property(Is_intra, doc="False.")

    def Compare(self, comm: Comm) -> int:
        """Compare two communicators: ``IDENT``, ``CONGRUENT`` (same local and remote groups in order), ``SIMILAR`` or ``UNEQUAL``."""
        a, b = self._st, comm._st
        if a is b:
            return IDENT
        if not isinstance(b.sc, Bridge):
            return UNEQUAL
        x, y = self._br, b.sc
        if (x.world_ranks, x.remote) == (y.world_ranks, y.remote):
            return CONGRUENT
        same = sorted(x.world_ranks) == sorted(y.world_ranks) and sorted(x.remote) == sorted(y.remote)
        return SIMILAR if same else UNEQUAL

    # ---- fault tolerance (ULFM) over both groups ----

    def Agree(self, flag: int) -> int:
        """Return the bitwise AND of ``flag`` over both groups."""
        if isinstance(flag, bool) or not hasattr(flag, "__index__"):
            raise TypeError(f"rank {self._br.rank}: Agree(flag={flag!r}): expected an int")
        ours, theirs = self._agree("Agree()", int(flag))
        return _fold(lambda x, y: x & y, ours + theirs)  # type: ignore[no-any-return]

    def Iagree(self, flag: Any) -> Request:
        """Start ``Agree`` on ``flag``, a buffer holding one C int; the result is written there."""
        rank = self._br.rank
        try:
            ints = memoryview(flag).cast("B")
        except TypeError:
            raise TypeError(f"rank {rank}: Iagree(flag={flag!r}): expected a buffer holding one C int") from None
        if ints.nbytes != 4:
            raise ValueError(f"rank {rank}: Iagree(flag): the buffer holds {ints.nbytes} bytes, not one C int")
        cints = ints.cast("i")

        async def body(br: Bridge, c: Any, tag: int) -> Any:
            got = await _lgather(c, cints[0])
            both = None if got is None else got + list(await br.exchange(got, tag))
            both = await _lbcast(c, both)
            return _fold(lambda x, y: x & y, both)

        def finish(value: Any) -> None:
            cints[0] = value
        return _req(self._coll("Iagree(flag)", body, finish, True))

    def Shrink(self) -> Intercomm:
        """Return an intercommunicator of the live ranks of both groups (every rank, unless one failed)."""
        br = self._br
        ours, theirs = self._agree("Shrink()", br.world_rank)
        return self._derived(list(ours), list(theirs), "shrink")

    def Ishrink(self) -> tuple[Intercomm, Request]:
        """Shrink nonblocking: ``Shrink``, with a request that is already complete."""
        new = self.Shrink()
        return new, immediate(self._br.rank, lambda: "Ishrink()")

    # ---- new communicators ----

    def _agree(self, call: str, obj: object) -> tuple[list[Any], list[Any]]:
        """Every local rank's ``obj`` and every remote rank's (one exchange through the leaders)."""
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            got = await _lgather(c, obj)
            theirs = await br.exchange(got, tag) if got is not None else None
            return await _lbcast(c, (got, theirs))
        out: list[Any] = []
        self._coll(call, body, out.append, False)
        return out[0][0], out[0][1]

    def _derived(self, mine: list[int], theirs: list[int], how: str) -> Intercomm:
        br = self._br
        key = br.next_key(how)
        if br.world_rank not in mine or not theirs:
            return Intercomm._on(None)  # type: ignore[return-value]
        st = self._st
        made = _bridge_state(st.rank_state, mine, theirs, key, st)
        return type(self)._on(made)  # type: ignore[return-value]

    def Dup(self, info: Info | None = None) -> Intercomm:
        """Return a new intercommunicator with the same groups whose traffic never meets this one's.

        Collective over both groups: costs a barrier's messages.
        """
        br = self._br
        self._agree("Dup()", None)
        new = self._derived(list(br.world_ranks), list(br.remote), "dup")
        new._st.hints = dict(self._st.hints) if info is None or not info else _hints(info)
        self._copy_attrs_to(new, "Dup()")
        return new

    def Clone(self) -> Intercomm:
        """Duplicate the intercommunicator (``Dup``)."""
        return self.Dup()

    def Dup_with_info(self, info: Info) -> Intercomm:
        """Duplicate the intercommunicator (``Dup``) with the hints of ``info``."""
        return self.Dup(info)

    def Idup(self, info: Info | None = None) -> tuple[Intercomm, Request]:
        """Duplicate nonblocking: ``Dup``, with a request that is already complete."""
        new = self.Dup(info)
        return new, immediate(self._br.rank, lambda: "Idup()")

    def Idup_with_info(self, info: Info) -> tuple[Intercomm, Request]:
        """Duplicate with ``info``'s hints nonblocking: ``Dup_with_info``, with a request already complete."""
        return self.Idup(info)

    def Split(self, color: int = 0, key: int = 0) -> Intercomm:
        """Split both groups by ``color``; ranks of one color in both groups form an intercomm.

        A color found in only one group gives ``COMM_NULL`` there, as does ``UNDEFINED``.
        """
        br = self._br
        call = f"Split(color={color!r}, key={key!r})"
        if not hasattr(color, "__index__") or not hasattr(key, "__index__"):
            raise TypeError(f"rank {br.rank}: {call}: color and key must be integers")
        c = int(color)
        if c != UNDEFINED and c < 0:
            raise error(ERR_ARG, br.rank, call, "color must be an int >= 0 or MPI.UNDEFINED",
                        "pass a non-negative color")
        ours, theirs = self._agree(call, (c, int(key)))

        def members(pairs: list[Any], world: list[int]) -> list[int]:
            return [world[i] for _, i in sorted((k, i) for i, (cc, k) in enumerate(pairs) if cc == c)]
        if c == UNDEFINED:
            br.next_key("split")
            return Intercomm._on(None)  # type: ignore[return-value]
        return self._derived(members(ours, br.world_ranks), members(theirs, br.remote), f"split({c})")

    def Split_type(self, split_type: int, key: int = 0, info: Info = INFO_NULL) -> Intercomm:
        """Split by simulated node (``COMM_TYPE_SHARED``); ``UNDEFINED`` gets ``COMM_NULL``."""
        br = self._br
        color = node_of(br.local, br.world_rank) if split_type == COMM_TYPE_SHARED else UNDEFINED
        return self.Split(color, key)

    def Create(self, group: Group) -> Intercomm:
        """Return the intercomm between ``group`` (a subgroup of the local group) and the remote
        ranks' groups; ``COMM_NULL`` outside ``group``. Collective over both groups."""
        br = self._br
        call = "Create(group)"
        ranks = list(group._members(call))
        missing = [w for w in ranks if w not in br.world_ranks]
        if missing:
            raise error(ERR_GROUP, br.rank, call, f"world ranks {missing} of the group are not in the "
                        "local group", "make the group from this intercommunicator's Get_group()")
        _, theirs = self._agree(call, ranks)
        return self._derived(ranks, list(theirs[0]) if theirs else [], "create")

    def Create_group(self, group: Group, tag: int = 0) -> Comm:
        """Not defined on intercommunicators (MPI): raises ``ERR_COMM``."""
        return self._intra_only("Create_group")  # type: ignore[no-any-return]

    def Merge(self, high: bool = False) -> Intracomm:
        """Return the intracommunicator of both groups: the ``high=False`` group's ranks first.

        Collective over both groups (costs one exchange through the leaders); when both
        groups pass the same ``high``, the group holding the lower world ranks comes first.
        """
        br = self._br
        ours, theirs = self._agree(f"Merge(high={high!r})", bool(high))
        mine_high, their_high = bool(ours[0]), bool(theirs[0])
        if mine_high == their_high:
            mine_first = sorted(br.world_ranks) < sorted(br.remote)
        else:
            mine_first = not mine_high
        ranks = list(br.world_ranks) + br.remote if mine_first else br.remote + list(br.world_ranks)
        key = br.next_key("merge")
        st = self._st
        made = st.child(st.rank_state.world.joint(key, ranks))
        return Intracomm._on(made)  # type: ignore[return-value]

    @classmethod
    def Create_from_groups(cls, local_group: Group, local_leader: int, remote_group: Group,
                           remote_leader: int, stringtag: str = "org.mpi4py", info: Info = INFO_NULL,
                           errhandler: Errhandler | None = None) -> Intercomm:
        """Return the intercomm between two disjoint groups (MPI-4); sends nothing.

        Members agree on it by both groups, ``stringtag`` and how many such calls came before.
        """
        rank_state = current()
        call = f"Intercomm.Create_from_groups(local_group, {local_leader!r}, remote_group, {remote_leader!r})"
        mine = list(local_group._members(call))
        theirs = list(remote_group._members(call))
        if rank_state.world.world_rank not in mine:
            raise error(ERR_GROUP, rank_state.world.rank, call, "this rank is not in local_group",
                        "call it on the local group's members only")
        if set(mine) & set(theirs):
            raise error(ERR_GROUP, rank_state.world.rank, call, "the groups overlap",
                        "pass two disjoint groups")
        pair = tuple(sorted([tuple(mine), tuple(theirs)]))
        seen = _from_groups.setdefault(rank_state, {})
        n = seen.get((pair, stringtag), 0)
        seen[(pair, stringtag)] = n + 1
        key = f"inter:{pair[0]}|{pair[1]}/{stringtag}#{n}"
        made = _bridge_state(rank_state, mine, theirs, key, None)
        made.hints = _hints(info)
        made.errhandler = Errhandler(ERRORS_RETURN if errhandler is None else errhandler)
        return cls._on(made)  # type: ignore[return-value]


def is_inter(state: CommState) -> bool:
    """Whether ``state`` is an intercommunicator's."""
    return isinstance(state.sc, Bridge)

