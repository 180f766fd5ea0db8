"""An intercommunicator's plumbing: the ``Bridge`` a rank's ``CommState.sc`` holds, and the local steps.

An intercommunicator joins two disjoint groups, A (this rank's, the *local*
group) and B (the *remote* group). It is built from simcluster communicators
made with ``Comm.named`` (every member of both groups derives the same keys):

* ``local``: the local group, for the collectives' traffic inside a group;
* ``out`` = A's ranks then B's: A sends there to B's rank ``j`` at ``len(A) + j``;
* ``inb`` = B's ranks then A's (B's ``out``): A receives there, and the source of
  what B sent is B's own rank, so ``ANY_SOURCE``, statuses and probes need no
  translation.

``Bridge`` has the point-to-point surface of a simcluster ``Comm`` (``isend``,
``irecv``, ``probe``, ...) with ``size`` the remote group's, so ``_p2p``'s checks
and calls work unchanged on an intercommunicator; anything else it does not
have comes from ``local`` (clock, transport, serializer), except simcluster's
collectives and communicator makers (``_NOT_BRIDGED``), which would be the
local group's alone.

Rule 1: collective traffic never meets user messages: it goes on the private
contexts (``Comm.coll``), tagged with the intercommunicator's call number
(cross-group, ``next_tag``) or the local call's (``CollContext``).
Rule 2: no virtual time here: every step is a message the engine times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..comm import Comm as ScComm
from ..matching import ANY_SOURCE as SC_ANY_SOURCE
from ..matching import ANY_TAG as SC_ANY_TAG

_TAG_MASK = 2**31 - 1


class Bridge:
    """One rank's side of an intercommunicator: a simcluster ``Comm`` look-alike for p2p."""

    __slots__ = ("local", "out", "inb", "remote", "key", "rank", "size", "world_rank", "world_ranks",
                 "_seq", "_made", "__weakref__")

    def __init__(self, local: ScComm, out: ScComm, inb: ScComm, remote: list[int], key: str) -> None:
        self.local, self.out, self.inb = local, out, inb
        self.remote = list(remote)
        self.key = key
        self.rank = local.rank
        self.size = len(remote)  # what p2p's dest/source checks compare with
        self.world_rank = local.world_rank
        self.world_ranks = local.world_ranks
        self._seq = 0  # intercomm collectives so far: the cross-group tag
        self._made = 0  # communicators derived so far

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_BRIDGED:
            raise AttributeError(f"rank {self.rank}: {name}: an intercommunicator has no "
                                 "intracommunicator form of this call; call it on an MPI.Intercomm "
                                 "handle (MPI.Intercomm(comm)), which follows MPI's intercomm rules")
        return getattr(self.local, name)

    def __repr__(self) -> str:
        return f"<Bridge {self.key!r} rank={self.rank} local={self.local.size} remote={self.size}>"

    # ---- point-to-point: send on out at len(local) + dst, receive on inb ----

    def isend(self, obj: object, dst: int, tag: int = 0) -> Any:
        return self.out.isend(obj, self.local.size + dst, tag)

    def issend(self, obj: object, dst: int, tag: int = 0) -> Any:
        return self.out.issend(obj, self.local.size + dst, tag)

    def send(self, obj: object, dst: int, tag: int = 0) -> Awaitable[None]:
        return self.out.send(obj, self.local.size + dst, tag)

    def ssend(self, obj: object, dst: int, tag: int = 0) -> Awaitable[None]:
        return self.out.ssend(obj, self.local.size + dst, tag)

    def irecv(self, buf: Any = None, src: int = SC_ANY_SOURCE, tag: int = SC_ANY_TAG) -> Any:
        return self.inb.irecv(buf, src, tag)

    def recv(self, buf: Any = None, src: int = SC_ANY_SOURCE, tag: int = SC_ANY_TAG) -> Awaitable[Any]:
        return self.inb.recv(buf, src, tag)

    def iprobe(self, src: int = SC_ANY_SOURCE, tag: int = SC_ANY_TAG) -> Any:
        return self.inb.iprobe(src, tag)

    def probe(self, src: int = SC_ANY_SOURCE, tag: int = SC_ANY_TAG) -> Awaitable[Any]:
        return self.inb.probe(src, tag)

    async def sendrecv(self, obj: object, dst: int, buf: Any = None, src: int = SC_ANY_SOURCE,
                       sendtag: int = 0, recvtag: int = SC_ANY_TAG) -> Any:
        rreq = self.inb.irecv(buf, src, recvtag)
        sreq = self.out.isend(obj, self.local.size + dst, sendtag)
        value = await rreq
        await sreq
        return value

    # ---- revocation (ULFM): both groups' traffic ----

    def revoke(self) -> None:
        for comm in (self.local, self.out, self.inb):
            comm.revoke()

    @property
    def is_revoked(self) -> bool:
        return self.local.is_revoked or self.out.is_revoked or self.inb.is_revoked

    # ---- collective steps (tag: this intercomm call's number) ----

    def next_tag(self) -> int:
        self._seq += 1
        return self._seq & _TAG_MASK

    def next_key(self, how: str) -> str:
        self._made += 1
        return f"{self.key}/{how}#{self._made}"

    async def xsend(self, obj: object, dst: int, tag: int) -> None:
        await self.out.coll.isend(obj, self.local.size + dst, tag)

    async def xrecv(self, src: int, tag: int) -> Any:
        return await self.inb.coll.irecv(None, src, tag)

    async def exchange(self, obj: object, tag: int) -> Any:
        """Leaders only: send ``obj`` to the remote leader and return what it sent."""
        sreq = self.out.coll.isend(obj, self.local.size, tag)
        value = await self.inb.coll.irecv(None, 0, tag)
        await sreq
        return value


_NOT_BRIDGED = frozenset({
    "barrier", "ibarrier", "broadcast", "ibroadcast", "gather", "igather", "scatter", "iscatter",
    "all_gather", "iall_gather", "all_to_all", "iall_to_all", "reduce", "ireduce", "all_reduce",
    "iall_reduce", "reduce_scatter", "ireduce_scatter", "scan", "iscan", "exscan", "iexscan",
    "split", "dup", "new_group", "shrink", "agree", "iagree",
})
"""simcluster ``Comm`` calls an intercommunicator must not hand to its local group."""


# ---- local steps over the CollContext of the local group ----


async def _lgather(c: Any, obj: object) -> list[Any] | None:
    if c.rank != 0:
        await c.send(obj, 0)
        return None
    reqs = [c.irecv(r) for r in range(1, c.size)]
    return [obj] + [await q for q in reqs]


async def _lbcast(c: Any, obj: object) -> Any:
    if c.rank != 0:
        return await c.recv(0)
    reqs = [c.isend(obj, r) for r in range(1, c.size)]
    for q in reqs:
        await q
    return obj


async def _lscatter(c: Any, objs: Sequence[Any] | None) -> Any:
    if c.rank != 0:
        return await c.recv(0)
    assert objs is not None
    reqs = [c.isend(objs[r], r) for r in range(1, c.size)]
    for q in reqs:
        await q
    return objs[0]


def _fold(fn: Callable[[Any, Any], Any], values: list[Any]) -> Any:
    acc = values[0]
    for v in values[1:]:
        acc = fn(acc, v)
    return acc


Body = Callable[[Bridge, Any, int], Awaitable[Any]]
"""body(bridge, the local CollContext, the cross-group tag) -> the call's raw result."""

