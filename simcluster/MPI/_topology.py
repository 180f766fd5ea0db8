"""Process topologies as data: Cartesian grids, graphs, distributed graphs, and ``Compute_dims``.

A topology is attached to one rank's ``CommState`` (kept here, weakly, so a
freed communicator leaves nothing behind) and answers what MPI asks of it: the
grid's dimensions and this rank's coordinates, the graph's adjacency, and for
every kind the ordered in- and out-neighbours the neighbourhood collectives
use (``PROC_NULL`` where a non-periodic grid ends). Nothing here sends a
message: ``_topo`` builds the communicators and the collectives on top.

Rule 1: neighbour order is MPI's: a Cartesian grid lists, dimension by
dimension, the neighbour in the negative direction, then the positive one; a
graph lists its adjacency in ``edges`` order (in = out); a distributed graph
keeps the order it was given (``Create_dist_graph`` orders the edges by the
rank that specified them, then by position).
Rule 2: each neighbour slot carries a *direction* (``send_dirs``/``recv_dirs``)
so that a message sent towards the positive neighbour of dimension ``d``
lands in the receiver's negative slot of ``d``, even when both neighbours are
the same rank (periodic dimensions of size 1 or 2), as MPICH does.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Final

from ._constants import CART, DIST_GRAPH, ERR_ARG, ERR_DIMS, GRAPH, PROC_NULL, UNDEFINED
from ._errors import error

if TYPE_CHECKING:
    from ._state import CommState


class Topology:
    """What every topology answers: its kind and this rank's ordered neighbours."""

    __slots__ = ("rank", "sources", "destinations")

    kind: int = UNDEFINED

    def __init__(self, rank: int, sources: list[int], destinations: list[int]) -> None:
        self.rank = rank
        self.sources = sources  # in-neighbours, in MPI's order (PROC_NULL allowed)
        self.destinations = destinations  # out-neighbours

    @property
    def directions(self) -> int:
        """How many message directions there are (tags per neighbour call)."""
        return 1

    def send_dirs(self) -> list[int]:
        """The direction a message to each out-neighbour travels in."""
        return [0] * len(self.destinations)

    def recv_dirs(self) -> list[int]:
        """The direction a message from each in-neighbour travelled in."""
        return [0] * len(self.sources)

    def on(self, rank: int) -> Topology:
        """The same topology seen from ``rank`` of the new communicator (``Dup``)."""
        return self


class Cart(Topology):
    """A Cartesian grid of ``dims`` (row-major ranks), periodic where ``periods`` says."""

    __slots__ = ("dims", "periods")

    kind = CART

    def __init__(self, dims: list[int], periods: list[bool], rank: int) -> None:
        self.dims = dims
        self.periods = periods
        sources: list[int] = []
        destinations: list[int] = []
        for d in range(len(dims)):
            src, dst = self.shift(rank, d, 1)
            sources += [src, dst]  # the negative neighbour, then the positive one
            destinations += [src, dst]
        super().__init__(rank, sources, destinations)

    @property
    def directions(self) -> int:
        return max(1, 2 * len(self.dims))

    def send_dirs(self) -> list[int]:
        return list(range(2 * len(self.dims)))  # slot 2d: towards -, slot 2d+1: towards +

    def recv_dirs(self) -> list[int]:
        # what arrives from the negative neighbour travelled towards +, and the other way round
        return [slot ^ 1 for slot in range(2 * len(self.dims))]

    def on(self, rank: int) -> Cart:
        return Cart(self.dims, self.periods, rank)

    def coords(self, rank: int) -> list[int]:
        """Return the coordinates of ``rank`` (row-major: the last dimension varies fastest)."""
        out = []
        for size in reversed(self.dims):
            rank, c = divmod(rank, size)
            out.append(c)
        return out[::-1]

    def rank_at(self, coords: Sequence[int]) -> int | None:
        """Return the rank at ``coords`` (wrapped in periodic dimensions), None outside the grid."""
        rank = 0
        for c, size, periodic in zip(coords, self.dims, self.periods):
            if periodic:
                c %= size
            elif not 0 <= c < size:
                return None
            rank = rank * size + c
        return rank

    def shift(self, rank: int, direction: int, disp: int) -> tuple[int, int]:
        """Return (source, dest) of a shift by ``disp`` along ``direction`` (PROC_NULL off the grid)."""
        here = self.coords(rank)
        ends = []
        for step in (-disp, disp):
            there = list(here)
            there[direction] += step
            found = self.rank_at(there)
            ends.append(PROC_NULL if found is None else found)
        return ends[0], ends[1]


class Graph(Topology):
    """A graph given whole on every rank: ``index`` (cumulative degrees) and ``edges``."""

    __slots__ = ("index", "edges")

    kind = GRAPH

    def __init__(self, index: list[int], edges: list[int], rank: int) -> None:
        self.index = index
        self.edges = edges
        neighbours = self.neighbours(rank)
        super().__init__(rank, neighbours, list(neighbours))

    def on(self, rank: int) -> Graph:
        return Graph(self.index, self.edges, rank)

    def neighbours(self, rank: int) -> list[int]:
        """Return the neighbours of ``rank`` in ``edges`` order."""
        start = self.index[rank - 1] if rank > 0 else 0
        return self.edges[start:self.index[rank]]


class DistGraph(Topology):
    """A distributed graph: each rank knows its own in- and out-edges (and their weights)."""

    __slots__ = ("source_weights", "dest_weights")

    kind = DIST_GRAPH

    def __init__(self, rank: int, sources: list[int], destinations: list[int],
                 weights: tuple[list[int], list[int]] | None) -> None:
        super().__init__(rank, sources, destinations)
        self.source_weights = None if weights is None else weights[0]
        self.dest_weights = None if weights is None else weights[1]

    @property
    def weights(self) -> tuple[list[int], list[int]] | None:
        """``(source weights, destination weights)``, or None when unweighted."""
        if self.source_weights is None or self.dest_weights is None:
            return None
        return list(self.source_weights), list(self.dest_weights)


# ---- which communicator has which topology ----

_attached: weakref.WeakKeyDictionary[CommState, Topology] = weakref.WeakKeyDictionary()


def attach(st: CommState, topo: Topology) -> None:
    """Give the communicator ``st`` (one rank's state) the topology ``topo``."""
    _attached[st] = topo


def topology_of(st: CommState | None) -> Topology | None:
    """Return the topology of ``st``, None when it has none."""
    return None if st is None else _attached.get(st)


def kind_of(st: CommState) -> int:
    """Return ``CART``, ``GRAPH``, ``DIST_GRAPH``, or ``UNDEFINED`` without a topology."""
    topo = _attached.get(st)
    return UNDEFINED if topo is None else topo.kind


def inherit(old: CommState, new: CommState | None) -> None:
    """``Dup``: the copy keeps the topology of the original."""
    topo = _attached.get(old)
    if topo is not None and new is not None:
        _attached[new] = topo.on(new.sc.rank)


# ---- Compute_dims (MPI_Dims_create), as MPICH balances it ----

MAX_SEARCH: Final = 200_000
"""Factorizations looked at before settling for the greedy split (huge ``nnodes``)."""


def compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """Return ``dims`` with its zeros replaced so that the product is ``nnodes``, as balanced as can be.

    The free dimensions get the factorization whose largest and smallest factors are closest
    (then whose smallest is largest, then the
    lexicographically smallest), in non-increasing order: MPICH's choice. With no free
    dimension the dims come back as given, as MPICH returns them.

    Raises:
        MPI.Exception: ``ERR_ARG`` for a negative ``nnodes``, ``ERR_DIMS`` for a negative
            entry or fixed entries that do not divide ``nnodes``.
    """
    call = f"Compute_dims({nnodes!r}, {dims!r})"
    shape = [0] * int(dims) if isinstance(dims, int) else [int(d) for d in dims]
    if isinstance(dims, int) and dims < 0:
        raise ValueError(f"{call}: expecting a number of dimensions >= 0, got {dims}; pass the "
                         "number of dimensions or a list of them")
    if nnodes < 0:
        raise error(ERR_ARG, None, call, "nnodes must be >= 0", "pass the number of ranks to split")
    if any(d < 0 for d in shape):
        raise error(ERR_DIMS, None, call, "dims entries must be >= 0 (0: free)",
                    "pass 0 for the dimensions to choose, a positive size for the fixed ones")
    free = [i for i, d in enumerate(shape) if d == 0]
    if not free:
        return shape
    if nnodes == 0:
        raise error(ERR_ARG, None, call, "nnodes=0 cannot be split over free dimensions",
                    "pass the number of ranks (>= 1)")
    fixed = math.prod(d for d in shape if d > 0)
    if nnodes % fixed:
        raise error(ERR_DIMS, None, call, f"the fixed dimensions (product {fixed}) do not divide "
                    f"nnodes={nnodes}", "leave more dimensions 0, or fix sizes that divide nnodes")
    for i, size in zip(free, _balanced(nnodes // fixed, len(free))):
        shape[i] = size
    return shape


def _balanced(n: int, k: int) -> list[int]:
    best: list[int] | None = None
    best_key: tuple[int, int, list[int]] = (0, 0, [])
    for seen, split in enumerate(_factorizations(n, k, n)):
        key = (split[0] - split[-1], -split[-1], split)
        if best is None or key < best_key:
            best, best_key = split, key
        if seen > MAX_SEARCH:
            break
    assert best is not None
    return best


def _factorizations(n: int, k: int, largest: int) -> Iterator[list[int]]:
    """Yield every way to write ``n`` as ``k`` non-increasing factors, each at most ``largest``."""
    if k == 1:
        if n <= largest:
            yield [n]
        return
    for f in range(min(n, largest), 0, -1):
        if n % f == 0 and f ** k >= n:  # below that, the rest cannot stay <= f
            for rest in _factorizations(n // f, k - 1, f):
                yield [f, *rest]
