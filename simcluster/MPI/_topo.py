"""Topology communicators and neighbourhood collectives: ``Topocomm``, ``Cartcomm``, ``Graphcomm``,
``Distgraphcomm``, ``Intracomm.Create_cart``/``Create_graph``/``Create_dist_graph(_adjacent)``,
``Cart_map``/``Graph_map``, and ``Neighbor_*`` in their blocking, ``I`` and ``_init`` forms.

Creating a topology is collective over the old communicator: the ranks
compare what they passed (one ``all_gather``: a rank that passed other dims
or another graph gets an error naming the rank it disagrees with) and then
get a new communicator (one ``split``), as MPI makes a new one. Ranks left
out (a grid smaller than the communicator) get ``COMM_NULL``. ``reorder`` is
accepted and ranks stay as they are, as MPICH keeps them; ``Cart_map`` and
``Graph_map`` say so.

A neighbourhood collective is one simcluster collective call on the
topology communicator (numbered, checked against the other ranks' calls,
traced, and run by a helper when nonblocking) whose body sends one message
per out-neighbour and receives one per in-neighbour, point to point, on a
private communicator of the same ranks (``Comm.named``) that user code never
holds. Each message's tag is the call's number and the direction it travels
(``_topology``), so messages of different calls, or of the two neighbours of
a periodic dimension of size 2, never match each other. Slots whose
neighbour is ``PROC_NULL`` are neither sent nor written.

Rule 1: as in ``_coll``, nothing is written into a receive buffer before the
collective completes; a block larger than its slot is ``ERR_TRUNCATE``.
Rule 2: ``MPI.IN_PLACE`` is refused (MPI does not define it for
neighbourhood collectives) with ``ERR_BUFFER``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..engine import waits as _waits
from ._blocking import block
from ._buffers import Buf, blocked, is_in_place, message, per_rank, vector
from ._coll import _layout, _put
from ._comm import Comm, Intracomm, _target
from ._constants import (
    CART, DIST_GRAPH, ERR_ARG, ERR_BUFFER, ERR_DIMS, ERR_RANK, ERR_TOPOLOGY, GRAPH, PROC_NULL,
    UNDEFINED, UNWEIGHTED, WEIGHTS_EMPTY,
)
from ._errors import error
from ._pickle import check_transport, dumps, loads
from ._requests import Prequest, Request
from ._state import TAG_MAX, CommState
from ._topology import Cart, DistGraph, Graph, Topology, attach, kind_of, topology_of

_KINDS = {CART: "Cartesian", GRAPH: "graph", DIST_GRAPH: "distributed graph"}


def _ints(values: Any, rank: int, call: str, what: str) -> list[int]:
    """Return ``values`` as a list of ints (a TypeError for anything else, as mpi4py)."""
    if values is None:
        return []
    try:
        return [int(v.__index__()) for v in values]
    except (AttributeError, TypeError):
        raise TypeError(f"rank {rank}: {call}: {what} must be a sequence of integers, got "
                        f"{values!r}") from None


def _expect(n: int, values: Sequence[Any], rank: int, call: str, what: str) -> None:
    if len(values) != n:
        raise ValueError(f"rank {rank}: {call}: expecting {n} items, got {len(values)} in {what}; "
                         f"pass one per {'dimension' if what != 'sendobj' else 'out-neighbour'}")


# ---- the communicators ----


class Topocomm(Intracomm):
    """A communicator with a process topology (mpi4py's ``MPI.Topocomm``)."""

    __slots__ = ()

    _kind: int | None = None  # the kind a subclass holds (None: any)

    def __new__(cls, comm: Comm | None = None) -> Topocomm:
        self = super().__new__(cls, comm)
        state = None if comm is None else _target(comm)
        if state is not None:
            kind = kind_of(state)
            want = cls._kind
            if kind == UNDEFINED or (want is not None and kind != want):
                what = "topology" if want is None else _KINDS[want]
                maker = {CART: "cart", GRAPH: "graph"}.get(want or 0, "dist_graph")
                raise TypeError(f"MPI.{cls.__name__}(comm): expecting a {what} communicator, got "
                                f"one with {_KINDS.get(kind, 'no topology')}; make one with "
                                f"Create_{maker}()")
        assert isinstance(self, Topocomm)
        return self

    def _new(self, state: CommState | None) -> Comm:
        """A handle on a communicator made from this one: of its topology's class, else Intracomm."""
        if state is None:
            return Comm._on(None)
        cls = _class_of(state)
        if cls is not Intracomm and isinstance(self, cls):  # a Dup or Clone: the handle's own subclass
            cls = type(self)
        return cls._on(state)

    def _topo(self) -> Topology:
        topo = topology_of(self._st)
        assert topo is not None, "a Topocomm handle on a communicator without a topology"
        return topo

    # ---- neighbours ----

    @property
    def degrees(self) -> tuple[int, int]:
        """``(indegree, outdegree)``."""
        topo = self._topo()
        return len(topo.sources), len(topo.destinations)

    @property
    def indegree(self) -> int:
        """Number of in-neighbours (``PROC_NULL`` slots of a grid's edge count)."""
        return len(self._topo().sources)

    @property
    def outdegree(self) -> int:
        """Number of out-neighbours."""
        return len(self._topo().destinations)

    @property
    def inedges(self) -> list[int]:
        """The in-neighbours, in the order neighbourhood collectives receive from them."""
        return list(self._topo().sources)

    @property
    def outedges(self) -> list[int]:
        """The out-neighbours, in the order neighbourhood collectives send to them."""
        return list(self._topo().destinations)

    @property
    def inoutedges(self) -> tuple[list[int], list[int]]:
        """``(inedges, outedges)``."""
        topo = self._topo()
        return list(topo.sources), list(topo.destinations)

    # ---- neighbourhood collectives: buffers ----

    def _exchange(self, name: str, sends: Callable[[Topology, int], list[Any]],
                  finish: Callable[[list[Any]], Any], nonblocking: bool) -> Any:
        """Run one neighbourhood collective: ``sends`` builds one payload per out-neighbour.

        Returns the Request when nonblocking, else what ``finish`` made of the blocks received.
        """
        st = self._st
        topo = self._topo()
        sc = st.sc
        call = f"{name}()"
        payloads = sends(topo, sc.rank)
        st.rank_state.reap()
        body = _body(st, topo, payloads)
        mpi_call = name[1:] if name.startswith("I") and name[1].isupper() else name
        if nonblocking:
            req = sc._start_collective(mpi_call + "()", body)
            return Request._of(req, sc.rank, lambda: call, lambda raw, _status: finish(raw),
                               owner=st.rank_state)
        return finish(block(sc._run_collective(mpi_call + "()", body)))

    def _gather_into(self, sendbuf: Any, recvbuf: Any, name: str, v: bool, nonblocking: bool
                     ) -> Request | None:
        st = self._st
        topo = self._topo()
        rank, call = st.sc.rank, f"{name}()"
        _no_in_place(sendbuf, rank, call)
        sb = message(sendbuf, rank, call, False)
        rb, starts, counts = _blocks(recvbuf, len(topo.sources), rank, call, True, v)
        data = sb.take(sb.displ, sb.count)
        req: Request | None = self._exchange(name, lambda t, _: [data] * len(t.destinations),
                                             _filler(rb, starts, counts, rank, call), nonblocking)
        return req

    def _to_all(self, sendbuf: Any, recvbuf: Any, name: str, v: bool, nonblocking: bool
                ) -> Request | None:
        st = self._st
        topo = self._topo()
        rank, call = st.sc.rank, f"{name}()"
        _no_in_place(sendbuf, rank, call)
        sb, sstarts, scounts = _blocks(sendbuf, len(topo.destinations), rank, call, False, v)
        rb, rstarts, rcounts = _blocks(recvbuf, len(topo.sources), rank, call, True, v)
        blocks = [sb.take(s, c) for s, c in zip(sstarts, scounts)]
        req: Request | None = self._exchange(name, lambda t, _: blocks,
                                             _filler(rb, rstarts, rcounts, rank, call), nonblocking)
        return req

    def _to_all_w(self, sendbuf: Any, recvbuf: Any, name: str, nonblocking: bool) -> Request | None:
        st = self._st
        topo = self._topo()
        rank, call = st.sc.rank, f"{name}()"
        _no_in_place(sendbuf, rank, call)
        sbufs = per_rank(sendbuf, len(topo.destinations), rank, call, False)
        rbufs = per_rank(recvbuf, len(topo.sources), rank, call, True)
        blocks = [b.take(0, b.count) for b in sbufs]

        def finish(values: list[Any]) -> None:
            for b, value in zip(rbufs, values):
                if value is not None:
                    _put(b, 0, value, b.count, rank, call)
        req: Request | None = self._exchange(name, lambda t, _: blocks, finish, nonblocking)
        return req

    def Neighbor_allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Send ``sendbuf`` to every out-neighbour; block ``j`` of ``recvbuf`` comes from in-neighbour
        ``j``."""
        self._gather_into(sendbuf, recvbuf, "Neighbor_allgather", False, False)

    def Neighbor_allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Gather from every neighbour as ``Neighbor_allgather`` does, with blocks of different sizes (``[buf, (counts, displs), dt]``)."""
        self._gather_into(sendbuf, recvbuf, "Neighbor_allgatherv", True, False)

    def Neighbor_alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Send block ``i`` of ``sendbuf`` to out-neighbour ``i``; block ``j`` of ``recvbuf`` comes from
        in-neighbour ``j``."""
        self._to_all(sendbuf, recvbuf, "Neighbor_alltoall", False, False)

    def Neighbor_alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Exchange with every neighbour as ``Neighbor_alltoall`` does, with blocks of different sizes (``[buf, (counts, displs), dt]``)."""
        self._to_all(sendbuf, recvbuf, "Neighbor_alltoallv", True, False)

    def Neighbor_alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """Exchange with every neighbour as ``Neighbor_alltoall`` does, with a datatype per neighbour and displacements in bytes:
        ``[buf, (counts, displs), datatypes]`` on both sides."""
        self._to_all_w(sendbuf, recvbuf, "Neighbor_alltoallw", False)

    def Ineighbor_allgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Neighbor_allgather``; ``recvbuf`` is filled when the request completes."""
        return _req(self._gather_into(sendbuf, recvbuf, "Ineighbor_allgather", False, True))

    def Ineighbor_allgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Neighbor_allgatherv``."""
        return _req(self._gather_into(sendbuf, recvbuf, "Ineighbor_allgatherv", True, True))

    def Ineighbor_alltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Neighbor_alltoall``."""
        return _req(self._to_all(sendbuf, recvbuf, "Ineighbor_alltoall", False, True))

    def Ineighbor_alltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Neighbor_alltoallv``."""
        return _req(self._to_all(sendbuf, recvbuf, "Ineighbor_alltoallv", True, True))

    def Ineighbor_alltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Neighbor_alltoallw``."""
        return _req(self._to_all_w(sendbuf, recvbuf, "Ineighbor_alltoallw", True))

    # ---- persistent (MPI-4): each Start runs the nonblocking form ----

    def _neighbor_init(self, nonblocking: Callable[..., Request], name: str, *args: Any) -> Prequest:
        st = self._st

        def start() -> tuple[Any, Any]:
            req = nonblocking(*args)
            return req._req, req._finish
        return Prequest._persistent(start, st.sc.rank, lambda: f"{name}()", st.rank_state)

    def Neighbor_allgather_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Neighbor_allgather``: each ``Start`` runs an ``Ineighbor_allgather``."""
        return self._neighbor_init(self.Ineighbor_allgather, "Neighbor_allgather_init", sendbuf, recvbuf)

    def Neighbor_allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Neighbor_allgatherv``."""
        return self._neighbor_init(self.Ineighbor_allgatherv, "Neighbor_allgatherv_init", sendbuf,
                                recvbuf)

    def Neighbor_alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Neighbor_alltoall``."""
        return self._neighbor_init(self.Ineighbor_alltoall, "Neighbor_alltoall_init", sendbuf, recvbuf)

    def Neighbor_alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Neighbor_alltoallv``."""
        return self._neighbor_init(self.Ineighbor_alltoallv, "Neighbor_alltoallv_init", sendbuf,
                                recvbuf)

    def Neighbor_alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Neighbor_alltoallw``."""
        return self._neighbor_init(self.Ineighbor_alltoallw, "Neighbor_alltoallw_init", sendbuf,
                                recvbuf)

    # ---- neighbourhood collectives: Python objects ----

    def neighbor_allgather(self, sendobj: Any) -> list[Any]:
        """Send ``sendobj`` to every out-neighbour; return one object per in-neighbour (None for
        ``PROC_NULL``)."""
        st = self._st
        check_transport(st.sc, lambda: "neighbor_allgather()")
        payload = dumps(sendobj)
        got: list[Any] = self._exchange("neighbor_allgather",
                                        lambda t, _: [payload] * len(t.destinations), _unpickled,
                                        False)
        return got

    def neighbor_alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Send item ``i`` to out-neighbour ``i``; return one object per in-neighbour (None for
        ``PROC_NULL``)."""
        st = self._st
        call = "neighbor_alltoall()"
        check_transport(st.sc, lambda: call)
        items = list(sendobj)
        _expect(len(self._topo().destinations), items, st.sc.rank, call, "sendobj")
        payloads = [dumps(o) for o in items]
        got: list[Any] = self._exchange("neighbor_alltoall", lambda t, _: payloads, _unpickled,
                                        False)
        return got


class Cartcomm(Topocomm):
    """A communicator with a Cartesian grid (mpi4py's ``MPI.Cartcomm``)."""

    __slots__ = ()

    _kind = CART

    def _cart(self) -> Cart:
        topo = self._topo()
        assert isinstance(topo, Cart)
        return topo

    def Get_dim(self) -> int:
        """Return the number of dimensions."""
        return len(self._cart().dims)

    dim = property(Get_dim, doc="Number of dimensions.")
    ndim = property(Get_dim, doc="Number of dimensions.")

    @property
    def dims(self) -> list[int]:
        """The size of each dimension."""
        return list(self._cart().dims)

    @property
    def periods(self) -> list[int]:
        """Whether each dimension is periodic (1) or not (0)."""
        return [int(p) for p in self._cart().periods]

    @property
    def coords(self) -> list[int]:
        """This rank's coordinates."""
        cart = self._cart()
        return cart.coords(cart.rank)

    def Get_topo(self) -> tuple[list[int], list[int], list[int]]:
        """Return ``(dims, periods, coords)``."""
        return self.dims, self.periods, self.coords

    topo = property(Get_topo, doc="``(dims, periods, coords)``.")

    def Get_coords(self, rank: int) -> list[int]:
        """Return the coordinates of ``rank``."""
        st = self._st
        r = _rank_in(st, rank, f"Cartcomm.Get_coords({rank!r})")
        return self._cart().coords(r)

    def Get_cart_rank(self, coords: Sequence[int]) -> int:
        """Return the rank at ``coords`` (wrapped in periodic dimensions)."""
        st = self._st
        cart = self._cart()
        call = f"Cartcomm.Get_cart_rank({coords!r})"
        where = _ints(coords, st.sc.rank, call, "coords")
        _expect(len(cart.dims), where, st.sc.rank, call, "coords")
        found = cart.rank_at(where)
        if found is None:
            raise error(ERR_ARG, st.sc.rank, call, f"coords {where} are outside the grid "
                        f"{cart.dims} in a non-periodic dimension", "pass coordinates in "
                        "range(dims[i]) for the non-periodic dimensions")
        return found

    def Shift(self, direction: int, disp: int) -> tuple[int, int]:
        """Return ``(source, dest)``: the ranks ``disp`` steps back and forward along ``direction``.

        ``PROC_NULL`` where the step leaves a non-periodic dimension. Sends nothing.
        """
        st = self._st
        cart = self._cart()
        call = f"Cartcomm.Shift(direction={direction!r}, disp={disp!r})"
        if not 0 <= int(direction) < len(cart.dims):
            raise error(ERR_ARG, st.sc.rank, call, f"direction must be in range({len(cart.dims)}) "
                        "for this grid", "pass the index of a dimension")
        return cart.shift(cart.rank, int(direction), int(disp))

    def Sub(self, remain_dims: Sequence[bool]) -> Cartcomm:
        """Return the grid of the dimensions kept (``remain_dims[i]`` true) through this rank.

        Collective: one ``split`` by the coordinates of the dimensions dropped.
        """
        st = self._st
        cart = self._cart()
        call = f"Cartcomm.Sub({remain_dims!r})"
        keep = [bool(k) for k in remain_dims]
        _expect(len(cart.dims), keep, st.sc.rank, call, "remain_dims")
        here = cart.coords(cart.rank)
        color = 0
        for c, size, kept in zip(here, cart.dims, keep):
            if not kept:
                color = color * size + c
        st.rank_state.reap()
        made = st.child(block(st.sc.split(color, st.sc.rank)))
        assert made is not None
        dims = [d for d, k in zip(cart.dims, keep) if k]
        periods = [p for p, k in zip(cart.periods, keep) if k]
        attach(made, Cart(dims, periods, made.sc.rank))
        return Cartcomm._on(made)  # type: ignore[return-value]


class Graphcomm(Topocomm):
    """A communicator with a graph topology (mpi4py's ``MPI.Graphcomm``)."""

    __slots__ = ()

    _kind = GRAPH

    def _graph(self) -> Graph:
        topo = self._topo()
        assert isinstance(topo, Graph)
        return topo

    def Get_dims(self) -> tuple[int, int]:
        """Return ``(nnodes, nedges)``."""
        g = self._graph()
        return len(g.index), len(g.edges)

    dims = property(Get_dims, doc="``(nnodes, nedges)``.")
    nnodes = property(lambda self: len(self._graph().index), doc="Number of nodes.")
    nedges = property(lambda self: len(self._graph().edges), doc="Number of edges.")
    index = property(lambda self: list(self._graph().index), doc="Cumulative degrees.")
    edges = property(lambda self: list(self._graph().edges), doc="The edges, node by node.")

    def Get_topo(self) -> tuple[list[int], list[int]]:
        """Return ``(index, edges)``."""
        g = self._graph()
        return list(g.index), list(g.edges)

    topo = property(Get_topo, doc="``(index, edges)``.")

    def Get_neighbors_count(self, rank: int) -> int:
        """Return the number of neighbours of ``rank``."""
        return len(self.Get_neighbors(rank))

    def Get_neighbors(self, rank: int) -> list[int]:
        """Return the neighbours of ``rank``."""
        st = self._st
        r = _rank_in(st, rank, f"Graphcomm.Get_neighbors({rank!r})")
        return self._graph().neighbours(r)

    neighbors = property(lambda self: list(self._graph().sources), doc="This rank's neighbours.")
    nneighbors = property(lambda self: len(self._graph().sources), doc="Number of this rank's neighbours.")


class Distgraphcomm(Topocomm):
    """A communicator with a distributed graph topology (mpi4py's ``MPI.Distgraphcomm``)."""

    __slots__ = ()

    _kind = DIST_GRAPH

    def _dist(self) -> DistGraph:
        topo = self._topo()
        assert isinstance(topo, DistGraph)
        return topo

    def Get_dist_neighbors_count(self) -> tuple[int, int, bool]:
        """Return ``(indegree, outdegree, weighted)``."""
        d = self._dist()
        return len(d.sources), len(d.destinations), d.weights is not None

    def Get_dist_neighbors(self) -> tuple[list[int], list[int], tuple[list[int], list[int]] | None]:
        """Return ``(sources, destinations, (sourceweights, destweights) or None)``."""
        d = self._dist()
        return list(d.sources), list(d.destinations), d.weights


_CLASSES: dict[int, type[Topocomm]] = {CART: Cartcomm, GRAPH: Graphcomm, DIST_GRAPH: Distgraphcomm}


def _class_of(state: CommState) -> type[Comm]:
    topo = topology_of(state)
    return Intracomm if topo is None else _CLASSES[topo.kind]


def _req(req: Request | None) -> Request:
    assert req is not None
    return req


def _rank_in(st: CommState, rank: Any, call: str) -> int:
    if isinstance(rank, bool) or not hasattr(rank, "__index__") or not 0 <= int(rank) < st.sc.size:
        raise error(ERR_RANK, st.sc.rank, call, f"rank must be in range({st.sc.size}) for this "
                    "communicator", "pass a rank of this communicator")
    return int(rank)


def _no_in_place(sendbuf: Any, rank: int, call: str) -> None:
    if is_in_place(sendbuf):
        raise error(ERR_BUFFER, rank, call, "MPI.IN_PLACE (or None) is not allowed as the send "
                    "buffer of a neighbourhood collective", "pass a send buffer")


def _blocks(spec: Any, n: int, rank: int, call: str, writable: bool, v: bool
            ) -> tuple[Buf, list[int], list[int]]:
    """Parse a spec of ``n`` neighbour blocks; return it with each block's start and count (items)."""
    if n == 0:  # no neighbour on this side: the spec is only checked
        return message(spec, rank, call, writable), [], []
    b = vector(spec, n, rank, call, writable) if v else blocked(spec, n, rank, call, writable)
    starts, counts = _layout(b, n)
    return b, starts, counts


def _filler(rb: Buf, starts: list[int], counts: list[int], rank: int, call: str
            ) -> Callable[[list[Any]], None]:
    def finish(values: list[Any]) -> None:
        for value, start, count in zip(values, starts, counts):
            if value is not None:  # PROC_NULL slots stay as they were
                _put(rb, start, value, count, rank, call)
    return finish


def _unpickled(values: list[Any]) -> list[Any]:
    return [None if v is None else loads(v) for v in values]


# ---- the exchange: point to point on a private communicator ----

_NEIGHBOURS = "neighbours"
"""The key of each topology communicator's private twin (``Comm.named``)."""


def _body(st: CommState, topo: Topology, payloads: list[Any]) -> Callable[[Any], Any]:
    """The collective's body: send ``payloads`` to the out-neighbours, receive from the in-neighbours.

    Returns what arrived, one item per in-neighbour (None for ``PROC_NULL``).
    """
    sc = st.sc
    private = sc.named(_NEIGHBOURS, sc.world_ranks)
    ways = topo.directions

    async def exchange(ctx: Any) -> list[Any]:
        base = (ctx.seq * ways) % (TAG_MAX + 1 - ways)
        recvs = [None if src == PROC_NULL else private.irecv(src=src, tag=base + way)
                 for src, way in zip(topo.sources, topo.recv_dirs())]
        sends = [private.isend(data, dst, base + way)
                 for data, dst, way in zip(payloads, topo.destinations, topo.send_dirs())
                 if dst != PROC_NULL]
        posted = [r for r in recvs if r is not None]
        got = iter(await _waits.wait_all(posted) if posted else [])
        if sends:
            await _waits.wait_all(sends)
        return [None if r is None else next(got) for r in recvs]
    return exchange


# ---- creating topologies (Intracomm methods) ----


def _agree(st: CommState, call: str, what: object) -> None:
    """Check that every rank passed the same ``what`` (one all_gather)."""
    seen = block(st.sc.all_gather(what))
    for r, other in enumerate(seen):
        if other != what:
            raise error(ERR_ARG, st.sc.rank, call, f"rank {r} passed {other!r} but this rank "
                        f"{what!r}", "pass the same topology on every rank")


def _made(st: CommState, members: int, call: str) -> CommState | None:
    """The new communicator of ranks ``0..members-1`` (None on the others). Collective."""
    st.rank_state.reap()
    color = 0 if st.sc.rank < members else None
    return st.child(block(st.sc.split(color, st.sc.rank)))


def _periods(periods: Any, ndims: int, rank: int, call: str) -> list[bool]:
    if periods is None:
        return [False] * ndims
    if isinstance(periods, (bool, int)):
        return [bool(periods)] * ndims
    flags = [bool(p) for p in periods]
    _expect(ndims, flags, rank, call, "periods")
    return flags


def Create_cart(self: Intracomm, dims: Sequence[int], periods: Sequence[bool] | None = None,
                reorder: bool = False) -> Cartcomm:
    """Return a new communicator with a Cartesian grid of ``dims`` (row-major ranks).

    ``periods`` (default all False) says which dimensions wrap around. Ranks past the grid's
    size get ``COMM_NULL``. ``reorder`` is accepted; ranks keep their order (as MPICH keeps
    them). Collective: every rank passes the same ``dims`` and ``periods``.

    Raises:
        ValueError: ``periods`` does not have one entry per dimension.
        MPI.Exception: ``ERR_DIMS`` for a negative size, ``ERR_ARG`` for a grid larger than the
            communicator or ranks that passed different grids.
    """
    st = self._st
    rank = st.sc.rank
    call = f"Create_cart(dims={dims!r}, periods={periods!r})"
    shape = _ints(dims, rank, call, "dims")
    flags = _periods(periods, len(shape), rank, call)
    _check_grid(st, shape, call)
    _agree(st, call, (shape, flags))
    made = _made(st, _prod(shape), call)
    if made is None:
        return Cartcomm._on(None)  # type: ignore[return-value]
    attach(made, Cart(shape, flags, made.sc.rank))
    return Cartcomm._on(made)  # type: ignore[return-value]


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _check_grid(st: CommState, shape: list[int], call: str) -> None:
    if any(d < 0 for d in shape):
        raise error(ERR_DIMS, st.sc.rank, call, "dims must be >= 0", "pass the size of each "
                    "dimension (MPI.Compute_dims(size, ndims) chooses them)")
    if _prod(shape) > st.sc.size:
        raise error(ERR_ARG, st.sc.rank, call, f"the grid has {_prod(shape)} ranks but the "
                    f"communicator {st.sc.size}", "pass dims whose product is at most comm.size "
                    "(MPI.Compute_dims(comm.size, ndims))")


def Cart_map(self: Intracomm, dims: Sequence[int], periods: Sequence[bool] | None = None) -> int:
    """Return the rank this rank would have in ``Create_cart(dims, periods)``: its own rank, or
    ``UNDEFINED`` past the grid's size (ranks are never reordered here)."""
    st = self._st
    call = f"Cart_map(dims={dims!r}, periods={periods!r})"
    shape = _ints(dims, st.sc.rank, call, "dims")
    _periods(periods, len(shape), st.sc.rank, call)
    _check_grid(st, shape, call)
    return st.sc.rank if st.sc.rank < _prod(shape) else UNDEFINED


def _graph_args(st: CommState, index: Any, edges: Any, call: str) -> tuple[list[int], list[int]]:
    rank = st.sc.rank
    idx = _ints(index, rank, call, "index")
    edg = _ints(edges, rank, call, "edges")
    if len(idx) > 1 and idx[0] == 0:  # as mpi4py: a leading 0 (the CSR form) is dropped
        idx = idx[1:]
    if len(idx) > st.sc.size:
        raise error(ERR_ARG, rank, call, f"the graph has {len(idx)} nodes but the communicator "
                    f"{st.sc.size}", "pass at most comm.size nodes")
    if any(b < a for a, b in zip([0, *idx], idx)) or (idx and idx[-1] != len(edg)):
        raise error(ERR_ARG, rank, call, f"index {idx} is not the running total of the degrees "
                    f"of {len(edg)} edges", "pass index[i] = degree(0) + ... + degree(i)")
    bad = [e for e in edg if not 0 <= e < len(idx)]
    if bad:
        raise error(ERR_ARG, rank, call, f"edges {bad} are not nodes of the graph "
                    f"(range({len(idx)}))", "pass edges between the graph's nodes")
    return idx, edg


def Create_graph(self: Intracomm, index: Sequence[int], edges: Sequence[int],
                 reorder: bool = False) -> Graphcomm:
    """Return a new communicator with the graph ``(index, edges)``, given whole on every rank.

    ``index[i]`` is the running total of the degrees of nodes ``0..i``; a leading 0 (the CSR
    form) is accepted, as in mpi4py. Ranks past the number of nodes get ``COMM_NULL``;
    ``reorder`` keeps ranks as they are. Collective.
    """
    st = self._st
    call = "Create_graph(index, edges)"
    idx, edg = _graph_args(st, index, edges, call)
    _agree(st, call, (idx, edg))
    made = _made(st, len(idx), call)
    if made is None:
        return Graphcomm._on(None)  # type: ignore[return-value]
    attach(made, Graph(idx, edg, made.sc.rank))
    return Graphcomm._on(made)  # type: ignore[return-value]


def Graph_map(self: Intracomm, index: Sequence[int], edges: Sequence[int]) -> int:
    """Return this rank's rank in ``Create_graph(index, edges)``: its own, or ``UNDEFINED``."""
    st = self._st
    idx, _ = _graph_args(st, index, edges, "Graph_map(index, edges)")
    return st.sc.rank if st.sc.rank < len(idx) else UNDEFINED


def _weights(weights: Any, n: int, rank: int, call: str, what: str) -> list[int] | None:
    """Return a weight list, or None for ``UNWEIGHTED`` (and None)."""
    if weights is None or (type(weights) is int and weights == UNWEIGHTED):
        return None
    if type(weights) is int and weights == WEIGHTS_EMPTY:
        if n:
            raise ValueError(f"rank {rank}: {call}: MPI.WEIGHTS_EMPTY is for an empty {what} list, "
                             f"this one has {n}; pass one weight per neighbour, or MPI.UNWEIGHTED")
        return []
    values = _ints(weights, rank, call, what + " weights")
    if len(values) != n:
        raise ValueError(f"rank {rank}: {call}: expecting {n} items, got {len(values)} in the "
                         f"{what} weights; pass one weight per neighbour")
    return values


def _ranks_ok(st: CommState, ranks: list[int], call: str, what: str) -> None:
    bad = [r for r in ranks if not 0 <= r < st.sc.size]
    if bad:
        raise error(ERR_RANK, st.sc.rank, call, f"{what} {bad} are not ranks of this communicator "
                    f"(range({st.sc.size}))", "pass ranks of this communicator")


def Create_dist_graph_adjacent(self: Intracomm, sources: Sequence[int] | None,
                               destinations: Sequence[int] | None,
                               sourceweights: Any = None, destweights: Any = None,
                               info: Any = None, reorder: bool = False) -> Distgraphcomm:
    """Return a new communicator where this rank receives from ``sources`` and sends to
    ``destinations``, in the order given.

    Weights are lists (one per neighbour), ``MPI.UNWEIGHTED`` or None, or ``MPI.WEIGHTS_EMPTY``
    for an empty list. Every rank gets the new communicator. Collective (one ``dup``).

    Raises:
        ValueError: a weight list of the wrong length, or ``WEIGHTS_EMPTY`` for neighbours.
        MPI.Exception: ``ERR_RANK`` for a neighbour outside the communicator, ``ERR_TOPOLOGY``
            when one side is weighted and the other not.
    """
    st = self._st
    rank = st.sc.rank
    call = "Create_dist_graph_adjacent(sources, destinations)"
    srcs = _ints(sources, rank, call, "sources")
    dsts = _ints(destinations, rank, call, "destinations")
    _ranks_ok(st, srcs, call, "sources")
    _ranks_ok(st, dsts, call, "destinations")
    sw = _weights(sourceweights, len(srcs), rank, call, "source")
    dw = _weights(destweights, len(dsts), rank, call, "destination")
    if srcs and dsts and (sw is None) != (dw is None):
        raise error(ERR_TOPOLOGY, rank, call, "the sources are "
                    f"{'un' if sw is None else ''}weighted but the destinations "
                    f"{'un' if dw is None else ''}weighted", "give weights on both sides or on "
                    "neither (MPI.UNWEIGHTED)")
    weights = None if sw is None else (sw, [] if dw is None else dw)
    made = _dist_comm(st)
    attach(made, DistGraph(made.sc.rank, srcs, dsts, weights))
    return Distgraphcomm._on(made)  # type: ignore[return-value]


def _dist_comm(st: CommState) -> CommState:
    st.rank_state.reap()
    made = st.child(block(st.sc.dup()))
    assert made is not None
    return made


def Create_dist_graph(self: Intracomm, sources: Sequence[int], degrees: Sequence[int],
                      destinations: Sequence[int], weights: Any = None, info: Any = None,
                      reorder: bool = False) -> Distgraphcomm:
    """Return a new communicator with the edges every rank specified: ``degrees[i]`` edges from
    ``sources[i]``, to the next ``degrees[i]`` entries of ``destinations``.

    Each rank's in- and out-neighbours are ordered by the rank that specified the edge, then
    by its position there (MPI leaves the order open; MPICH's depends on message arrival).
    Collective: one ``all_gather`` of the edges, then a ``dup``.
    """
    st = self._st
    rank = st.sc.rank
    call = "Create_dist_graph(sources, degrees, destinations)"
    srcs = _ints(sources, rank, call, "sources")
    degs = _ints(degrees, rank, call, "degrees")
    dsts = _ints(destinations, rank, call, "destinations")
    _expect(len(srcs), degs, rank, call, "degrees")
    if any(d < 0 for d in degs):
        raise error(ERR_ARG, rank, call, "degrees must be >= 0", "pass each source's edge count")
    _expect(sum(degs), dsts, rank, call, "destinations")
    _ranks_ok(st, srcs, call, "sources")
    _ranks_ok(st, dsts, call, "destinations")
    w = _weights(weights, len(dsts), rank, call, "edge")
    froms = [s for s, d in zip(srcs, degs) for _ in range(d)]
    edges = list(zip(froms, dsts, w if w is not None else [0] * len(dsts)))
    everyone = block(st.sc.all_gather(edges))
    ins = [(s, wt) for spec in everyone for s, d, wt in spec if d == rank]
    outs = [(d, wt) for spec in everyone for s, d, wt in spec if s == rank]
    made = _dist_comm(st)
    weighted = None if w is None else ([wt for _, wt in ins], [wt for _, wt in outs])
    attach(made, DistGraph(made.sc.rank, [s for s, _ in ins], [d for d, _ in outs], weighted))
    return Distgraphcomm._on(made)  # type: ignore[return-value]


INTRACOMM_METHODS: dict[str, Callable[..., Any]] = {
    "Create_cart": Create_cart, "Create_graph": Create_graph,
    "Create_dist_graph": Create_dist_graph, "Create_dist_graph_adjacent": Create_dist_graph_adjacent,
    "Cart_map": Cart_map, "Graph_map": Graph_map,
}
"""Methods ``__init__`` gives ``Intracomm`` (defined here, beside the classes they return)."""
