"""The nodes a communicator's members live on, for the algorithms that know the machine's shape.

A latency model that routes messages over the links of nodes (``simcluster.platform.Platform``,
whose ``placement()`` is ``routed``) gives a communicator a ``layout``: its ranks grouped
by node, nodes in the order of their first rank. ``contexts`` gives a member
the call contexts to run a part of a collective among the ranks of its node,
and, for a node's first rank, among those first ranks (the leaders): each on
a communicator every member names alike (``Comm.named``), made on first use,
whose private context carries the call's number, so their messages belong to
that call and no other. Loaded only on such a platform.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..latency import LatencyModel

__all__ = ["Layout", "contexts", "layout"]


class Layout:
    """A communicator's ranks by node: ``nodes[i]`` (comm ranks, ascending), each rank's node, and
    each member's node and leaders' communicators once it has asked for them."""

    __slots__ = ("nodes", "node_of", "comms", "channels", "shared")

    def __init__(self, nodes: list[list[int]], node_of: list[int]) -> None:
        self.nodes = nodes
        self.node_of = node_of
        self.comms: dict[int, tuple[Any, Any]] = {}  # comm rank -> (its node's Comm, the leaders' or None)
        self.channels: dict[tuple[str, int], list[Any]] = {}  # (kind, comm rank) -> its Comms (_nccl)
        self.shared: dict[str, Any] = {}  # what every member's parts of an algorithm build on (_nccl)


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
    placed = comm.latency.placement()
    result = None
    if placed is not None and placed.routed:
        by_node: dict[int, list[int]] = {}
        for rank, world in enumerate(comm.group.world_ranks):
            by_node.setdefault(placed.node_of(world), []).append(rank)
        nodes = list(by_node.values())
        if 1 < len(nodes) < comm.size:
            where = [0] * comm.size
            for i, members in enumerate(nodes):
                for rank in members:
                    where[rank] = i
            result = Layout(nodes, where)
    setups[key] = (result,)
    return result


def contexts(c: Any, found: Layout) -> tuple[Any, Any]:
    """This member's call contexts (``c``'s class, ``CollContext``) among its node's ranks, and
    among the leaders (None unless it is the first rank of its node)."""
    comm = c.comm
    known = found.comms.get(comm.rank)
    if known is None:
        world = comm.group.world_ranks
        i = found.node_of[comm.rank]
        members = found.nodes[i]
        node = comm.named(f"node {i}", [world[r] for r in members])
        leaders = None
        if members[0] == comm.rank:
            leaders = comm.named("leaders", [world[n[0]] for n in found.nodes])
        known = found.comms[comm.rank] = (node, leaders)
    node, leaders = known
    make = type(c)
    return (make(node, c.seq, c.call, c.algorithm),
            None if leaders is None else make(leaders, c.seq, c.call, c.algorithm))
