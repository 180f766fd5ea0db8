"""The nodes a communicator's members live on, for the algorithms that know the machine's shape.

A latency model that places ranks on nodes (``simcluster.platform.Platform``
and ``latency.Hierarchical``: ``node_of(world rank)``) gives a communicator a
``layout``: its ranks grouped by node, nodes in the order of their first
rank. ``Subset`` lets an algorithm written for a whole communicator run
among some of its members (a node's ranks, or one leader per node), with
ranks renumbered from 0 in the order given; it talks through the same call
context, so its messages belong to the same collective call.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..latency import LatencyModel
    from ..request import Request

__all__ = ["Layout", "Subset", "layout"]


class Layout:
    """A communicator's ranks by node: ``nodes[i]`` (comm ranks, ascending), and each rank's node."""

    __slots__ = ("nodes", "node_of")

    def __init__(self, nodes: list[list[int]], node_of: list[int]) -> None:
        self.nodes = nodes
        self.node_of = node_of


class Roster(Protocol):
    """What ``layout`` reads of a communicator's group (``comm.Group``)."""

    world_ranks: list[int]
    setups: dict[tuple[Any, ...], tuple[Any, ...]]


class Members(Protocol):
    """What ``layout`` reads of a communicator."""

    @property
    def group(self) -> Roster: ...

    @property
    def latency(self) -> LatencyModel: ...

    @property
    def size(self) -> int: ...


def layout(comm: Members) -> Layout | None:
    """The nodes of ``comm``'s members, or None when the run's model knows none, or when there is
    nothing to gain (one node, or one member per node). Worked out once per communicator."""
    setups = comm.group.setups
    key = ("nodes",)
    if key in setups:
        found: Layout | None = setups[key][0]
        return found
    node_of = getattr(comm.latency, "node_of", None)
    result = None
    if node_of is not None:
        by_node: dict[int, list[int]] = {}
        for rank, world in enumerate(comm.group.world_ranks):
            by_node.setdefault(node_of(world), []).append(rank)
        nodes = list(by_node.values())
        if 1 < len(nodes) < comm.size:
            where = [0] * comm.size
            for i, members in enumerate(nodes):
                for rank in members:
                    where[rank] = i
            result = Layout(nodes, where)
    setups[key] = (result,)
    return result


class Calls(Protocol):
    """What ``Subset`` uses of a call's context (``CollContext``)."""

    rank: int
    free_reductions: bool

    @property
    def latency(self) -> LatencyModel: ...

    def isend(self, obj: object, dst: int) -> Request[None]: ...

    def irecv(self, src: int, buf: Any = None) -> Request[Any]: ...

    def send(self, obj: object, dst: int) -> Awaitable[None]: ...

    def recv(self, src: int, buf: Any = None) -> Awaitable[Any]: ...

    def sendrecv(self, obj: object, dst: int, src: int, buf: Any = None) -> Awaitable[Any]: ...

    def sleep(self, seconds: float) -> Awaitable[None]: ...


class Subset:
    """``CollContext``'s calls among ``members`` (comm ranks) of a call, renumbered 0, 1, ..."""

    __slots__ = ("c", "members", "rank", "size", "free_reductions")

    def __init__(self, c: Calls, members: list[int]) -> None:
        self.c = c
        self.members = members
        self.rank = members.index(c.rank)
        self.size = len(members)
        self.free_reductions = c.free_reductions

    @property
    def latency(self) -> LatencyModel:
        return self.c.latency

    def isend(self, obj: object, dst: int) -> Request[None]:
        return self.c.isend(obj, self.members[dst])

    def irecv(self, src: int, buf: Any = None) -> Request[Any]:
        return self.c.irecv(self.members[src], buf)

    def send(self, obj: object, dst: int) -> Awaitable[None]:
        return self.c.send(obj, self.members[dst])

    def recv(self, src: int, buf: Any = None) -> Awaitable[Any]:
        return self.c.recv(self.members[src], buf)

    def sendrecv(self, obj: object, dst: int, src: int, buf: Any = None) -> Awaitable[Any]:
        return self.c.sendrecv(obj, self.members[dst], self.members[src], buf)

    def sleep(self, seconds: float) -> Awaitable[None]:
        return self.c.sleep(seconds)
