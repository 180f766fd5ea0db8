"""NCCL's collectives across nodes: its rings, its double binary tree, and its choice between them.

``all_reduce``'s ``nccl_ring`` and ``nccl_tree``, ``all_gather``'s and
``reduce_scatter``'s ``nccl_ring`` run these on a platform whose members
share nodes (``_nodes.layout``); the torch backend on a platform with
``gpus`` picks all_reduce's by ``choose``, as NCCL's tuner picks the
algorithm whose estimated time is least, and runs all_gather and
reduce_scatter on NCCL's rings, as NCCL does (``algorithm``). Loaded only
on such a platform.

- ``rings``, ``gather_rings``, ``scatter_rings``: ``C`` rings side by side,
  each carrying ``1/C`` of the array (of each item for all_gather and
  reduce_scatter: NCCL's channels), ``C`` the NICs per node (at most the
  ranks of the smallest node). Every ring visits the nodes in order and
  the ranks of a node in a row, ring ``k`` starting each node at its
  ``k``-th rank: a ring crosses each node boundary once, and the rings
  leave a node from different ranks, and so through different NICs.
- ``double_tree``: two binary trees over the nodes' first ranks, side by
  side, each reducing half the array up to its root and broadcasting it
  down; the second tree is the first over the ranks shifted by one, so the
  two send through different links.

Each ring moves its part at the rate of the links it crosses, so at large
sizes the bus bandwidth is the rings times a NIC's rate: what NCCL's own
tuning model gives a ring with its Simple protocol, the one it runs at large
sizes (src/graph/tuning.cc: channels times their speed, no protocol factor;
LL's quarter and LL128's 0.92 apply to the protocols of small sizes). The
NIC's rate is the platform's (``dgx_h100``: NCCL's 48 of 50 GB/s).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .. import arrays
from ._chunks import ceil_log2, fresh, split_bounds
from ._reduction import Flat, combine_flat, length

if TYPE_CHECKING:
    from ..comm import CollContext
    from ..ops import ReduceOp
    from ._nodes import Layout

__all__ = ["algorithm", "choose", "double_tree", "gather_rings", "rings", "scatter_rings", "splittable",
           "tree_links"]


# ---- rings ----

def _orders(comm: Any, found: Layout) -> list[tuple[list[int], list[int], list[int]]]:
    """Each ring's members (world ranks, in ring order), each comm rank's place in it, and the comm
    rank at each place; once per communicator."""
    known = found.shared.get("rings")
    if known is None:
        nics = comm.latency.placement().nics_per_node
        count = max(1, min(nics, min(len(members) for members in found.nodes)))
        world = comm.group.world_ranks
        known = []
        for k in range(count):
            order = [r for members in found.nodes for r in members[k:] + members[:k]]
            place = [0] * len(order)
            for i, r in enumerate(order):
                place[r] = i
            known.append(([world[r] for r in order], place, order))
        found.shared["rings"] = known
    return known


def _contexts(c: CollContext, found: Layout) -> list[CollContext]:
    """This member's call contexts on the rings' communicators (ring ``k``'s ranked in its order),
    made on first use and shared by all_reduce, all_gather and reduce_scatter."""
    comm = c.comm
    made = found.channels.get(("rings", comm.rank))
    if made is None:
        made = found.channels[("rings", comm.rank)] = [
            comm.named(f"nccl ring {k}", world, at=place[comm.rank])
            for k, (world, place, _) in enumerate(_orders(comm, found))]
    make = type(c)
    return [make(on, c.seq, c.call, c.algorithm) for on in made]


async def rings(c: CollContext, found: Layout, flat: Flat, op: ReduceOp,
                ring: Callable[[CollContext, Flat, ReduceOp], Coroutine[Any, Any, Flat]]) -> None:
    """All-reduce the 1-D array ``flat`` in place: part ``k`` by ``ring`` (all_reduce's) on a
    communicator ranked in ring ``k``'s order, the rings side by side."""
    made = _contexts(c, found)
    parts = split_bounds(length(flat), len(made))
    views = [flat[parts[k]:parts[k + 1]] for k in range(len(made))]
    done = await c.together([ring(on, view, op) for on, view in zip(made, views)])
    for view, value in zip(views, done):
        view[:] = value


def splittable(obj: Any) -> bool:
    """True when ``gather_rings`` can split ``obj``: an array with at least one axis."""
    return arrays.is_array(obj) and len(getattr(obj, "shape", ())) >= 1


async def gather_rings(c: CollContext, found: Layout, obj: Any,
                       ring: Callable[[CollContext, Any], Coroutine[Any, Any, list[Any]]]) -> list[Any]:
    """All_gather the array ``obj`` (``splittable``): part ``k`` of it, cut along its first axis,
    by ``ring`` (all_gather's) on ring ``k``'s communicator, the rings side by side; every rank's
    parts joined back in rank order."""
    made = _contexts(c, found)
    bounds = split_bounds(int(obj.shape[0]), len(made))
    done = await c.together([ring(on, obj[bounds[k]:bounds[k + 1]]) for k, on in enumerate(made)])
    places = [place for _, place, _ in _orders(c.comm, found)]
    return [arrays.concat([got[place[r]] for got, place in zip(done, places)]) for r in range(c.size)]


async def scatter_rings(c: CollContext, found: Layout, flats: list[Flat], op: ReduceOp,
                        ring: Callable[[CollContext, list[Any], ReduceOp], Coroutine[Any, Any, Any]]) -> Flat:
    """Reduce-scatter the 1-D arrays ``flats`` (item ``j`` for rank ``j``): part ``k`` of every
    item by ``ring`` (reduce_scatter's) on ring ``k``'s communicator, whose rank ``i`` takes the
    item of the comm rank at place ``i``; this rank's item, its parts joined back."""
    made = _contexts(c, found)
    orders = _orders(c.comm, found)
    cuts = [split_bounds(length(flat), len(made)) for flat in flats]
    done = await c.together([
        ring(on, [flats[j][cuts[j][k]:cuts[j][k + 1]] for j in order], op)
        for k, (on, (_, _, order)) in enumerate(zip(made, orders))])
    return arrays.concat(list(done))


# ---- the double binary tree ----

def tree_links(rank: int, size: int) -> tuple[int, list[int]]:
    """(parent or -1, children) of ``rank`` in the balanced in-order binary tree over ``range(size)``:
    the root is the middle rank, each subtree's root the middle of its range."""
    lo, hi, parent = 0, size, -1
    while True:
        mid = (lo + hi) // 2
        if rank == mid:
            children = [(lo + mid) // 2] if lo < mid else []
            if mid + 1 < hi:
                children.append((mid + 1 + hi) // 2)
            return parent, children
        parent = mid
        if rank < mid:
            hi = mid
        else:
            lo = mid + 1


async def _tree(c: CollContext, half: Flat, op: ReduceOp) -> Flat:
    """Reduce ``half`` up the tree over ``c``'s ranks to its root, then broadcast it down."""
    parent, children = tree_links(c.rank, c.size)
    for child in children:
        half = await combine_flat(c, op, await c.irecv(child), half)
    if parent >= 0:
        await c.send(half, parent)
        half = await c.irecv(parent)
    sends = [c.isend(half, child) for child in children]
    for req in sends:
        await req
    return half


async def double_tree(c: CollContext, leaders: CollContext, found: Layout, flat: Flat, op: ReduceOp) -> None:
    """All-reduce the 1-D array ``flat`` in place among the leaders: its first half over the tree
    of ``leaders``' ranks, its second over the leaders shifted by one, side by side.

    Costs ``2 * depth`` steps of ``alpha + n*beta`` (a parent takes two
    halves in), ``depth = floor(log2(m))`` for ``m`` leaders.
    """
    comm = c.comm
    made = found.channels.get(("second tree", comm.rank))
    if made is None:
        world = comm.group.world_ranks
        shifted = [world[members[0]] for members in found.nodes[1:] + found.nodes[:1]]
        made = found.channels[("second tree", comm.rank)] = [
            comm.named("nccl second tree", shifted, at=(found.node_of[comm.rank] - 1) % len(shifted))]
    second = type(c)(made[0], c.seq, c.call, c.algorithm)
    half = length(flat) // 2
    done = await c.together([_tree(leaders, fresh(flat[:half]), op), _tree(second, fresh(flat[half:]), op)])
    flat[:half] = done[0]
    flat[half:] = done[1]


# ---- NCCL's choice ----

def algorithm(comm: Any, collective: str, nbytes: int) -> str | None:
    """What NCCL would run for ``collective`` of ``nbytes`` on ``comm``: for all_reduce ``choose``'s
    pick, for all_gather and reduce_scatter its rings (``nccl_ring``); where the members share
    nodes of a platform with ``gpus``, at message fidelity. None elsewhere, or where
    ``run(algorithms=...)`` names one (the torch backend asks: NCCL is torch's GPU backend)."""
    from . import _nodes

    engine = comm.group.engine
    placed = comm.latency.placement()
    if placed is None or not placed.gpus or collective in engine.algorithms \
            or engine.fidelity != "message":
        return None
    found = _nodes.layout(comm)
    if found is None:
        return None
    return choose(comm, found, nbytes) if collective == "all_reduce" else "nccl_ring"


def choose(comm: Any, found: Layout, nbytes: int) -> str:
    """``"nccl_tree"`` or ``"nccl_ring"``: whichever takes less time by these estimates on the run's
    platform.

    With ``p`` ranks, ``m`` nodes of ``q``, ``C`` rings, a route within a
    node of latency ``Lq`` and narrowest bandwidth ``Bq``, and across nodes
    ``Lx`` and ``Bx``:

    - ring: ``2(p-1) * max(Lx + n/(p*C*Bx), Lq + n/(p*Bq))``;
    - tree: ``2*ceil(log2 q) * (Lq + n/Bq) + 2*floor(log2 m) * (Lx + n/Bx)``.

    A tie goes to the ring.
    """
    platform, world = comm.latency, comm.group.world_ranks
    nodes = [[world[r] for r in members] for members in found.nodes]
    p, m, q = len(found.node_of), len(nodes), min(len(members) for members in nodes)
    count = max(1, min(platform.placement().nics_per_node, q))
    inside = _route(platform, nodes[0][0], nodes[0][1]) if len(nodes[0]) > 1 else (0.0, math.inf)
    across = _route(platform, nodes[0][0], nodes[1][0])
    n = float(nbytes)
    ring = 2 * (p - 1) * max(across[0] + n / (p * count * across[1]), inside[0] + n / (p * inside[1]))
    tree = (2 * ceil_log2(q) * (inside[0] + n / inside[1])
            + 2 * (m.bit_length() - 1) * (across[0] + n / across[1]))
    return "nccl_tree" if tree < ring else "nccl_ring"


def _route(platform: Any, a: int, b: int) -> tuple[float, float]:
    _, latency, bandwidth = platform.path(a, b)
    return float(latency), float(bandwidth)
