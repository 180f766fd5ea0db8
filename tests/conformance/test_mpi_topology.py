"""Process topologies and neighbourhood collectives through ``simcluster.MPI``, rank by rank.

Cartesian grids (coordinates, shifts, sub-grids, ``PROC_NULL`` at the edges
of non-periodic dimensions, the two neighbours of a periodic dimension of size
1 or 2 told apart), graphs and distributed graphs (their adjacency and
weights), every neighbourhood collective in its blocking, ``I``, ``_init`` and
lowercase forms, ``Compute_dims`` against MPICH's choices, and the errors, with
their text. Expected values were checked against the real mpi4py on MPICH.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI
from mpi_helpers import mpi_errors


def _run(fn: Any, n: int) -> list[Any]:
    return list(sc.run(fn, world_size=n))


# ---- Cartesian grids ----


def cart_facts(comm: MPI.Intracomm) -> dict[str, Any]:
    cart = comm.Create_cart([3, 2], periods=[True, False])
    out = {"type": type(cart).__name__, "topo": cart.topo, "kind": cart.Get_topology(),
           "in": cart.inedges, "out": cart.outedges, "degrees": cart.degrees,
           "shift0": cart.Shift(0, 1), "shift1": cart.Shift(1, -1),
           "rank_at": cart.Get_cart_rank([4, 1]), "coords_of_5": cart.Get_coords(5),
           "dup": (type(cart.Dup()).__name__, cart.Dup().topo),
           "split": type(cart.Split(0, cart.rank)).__name__}
    sub = cart.Sub([False, True])
    out["sub"] = (sub.size, sub.rank, sub.topo)
    out["world"] = (comm.Get_topology(), comm.is_topo, cart.is_topo)
    cart.Free()
    return out


def test_cart_facts_on_every_rank() -> None:
    got = _run(cart_facts, 6)
    for rank, facts in enumerate(got):
        row, col = divmod(rank, 2)
        left = rank - 1 if col == 1 else MPI.PROC_NULL
        right = rank + 1 if col == 0 else MPI.PROC_NULL
        neighbours = [(rank - 2) % 6, (rank + 2) % 6, left, right]
        assert facts["type"] == "Cartcomm" and facts["kind"] == MPI.CART
        assert facts["topo"] == ([3, 2], [1, 0], [row, col])
        assert facts["in"] == facts["out"] == neighbours
        assert facts["degrees"] == (4, 4)
        assert facts["shift0"] == ((rank - 2) % 6, (rank + 2) % 6)
        assert facts["shift1"] == (right, left)
        assert facts["rank_at"] == 3  # row 4 wraps to row 1
        assert facts["coords_of_5"] == [2, 1]
        assert facts["dup"] == ("Cartcomm", ([3, 2], [1, 0], [row, col]))
        assert facts["split"] == "Intracomm"
        assert facts["sub"] == (2, col, ([2], [0], [col]))
        assert facts["world"] == (MPI.UNDEFINED, False, True)


def small_grid(comm: MPI.Intracomm) -> tuple[Any, ...]:
    cart = comm.Create_cart([2])
    null = cart == MPI.COMM_NULL
    return null, type(cart).__name__, comm.Cart_map([2]), None if null else cart.topo


def test_ranks_past_the_grid_get_a_null_cartcomm() -> None:
    assert _run(small_grid, 3) == [(False, "Cartcomm", 0, ([2], [0], [0])),
                                   (False, "Cartcomm", 1, ([2], [0], [1])),
                                   (True, "Cartcomm", MPI.UNDEFINED, None)]


def ring_alltoall(comm: MPI.Intracomm, periodic: bool) -> list[int]:
    cart = comm.Create_cart([comm.size], periods=[periodic])
    rbuf = np.full(2, -1, dtype="i")
    cart.Neighbor_alltoall(np.array([10 * comm.rank, 10 * comm.rank + 1], dtype="i"), rbuf)
    return rbuf.tolist()


@pytest.mark.parametrize("n, periodic, want", [
    (1, True, [[1, 0]]),  # the block sent "up" arrives from "below", even from oneself
    (2, True, [[11, 10], [1, 0]]),
    (3, False, [[-1, 10], [1, 20], [11, -1]]),  # PROC_NULL slots are left as they were
])
def test_neighbor_alltoall_keeps_directions_apart(n: int, periodic: bool, want: list[list[int]]) -> None:
    assert list(sc.run(ring_alltoall, world_size=n, args=(periodic,))) == want


# ---- graphs ----


def graph_facts(comm: MPI.Intracomm) -> tuple[Any, ...]:
    n = comm.size
    index = [0] + [2 * (i + 1) for i in range(n)]  # the CSR form, with its leading 0
    edges = [e for i in range(n) for e in ((i - 1) % n, (i + 1) % n)]
    g = comm.Create_graph(index, edges)
    return (g.topo, g.dims, g.neighbors, g.nneighbors, g.Get_neighbors(0), g.inoutedges,
            comm.Graph_map(index, edges), g.neighbor_allgather(comm.rank))


def test_graph_facts_and_allgather() -> None:
    got = _run(graph_facts, 3)
    for rank, facts in enumerate(got):
        ring = [(rank - 1) % 3, (rank + 1) % 3]
        assert facts == (([2, 4, 6], [2, 1, 0, 2, 1, 0]), (3, 6), ring, 2, [2, 1], (ring, ring),
                         rank, ring)


def dist_graph_facts(comm: MPI.Intracomm) -> tuple[Any, ...]:
    r, n = comm.rank, comm.size
    adj = comm.Create_dist_graph_adjacent([(r - 2) % n, (r - 1) % n], [(r + 1) % n, (r + 2) % n],
                                          [6, 7], [8, 9])
    spec = comm.Create_dist_graph([r], [2], [(r + 1) % n, (r + 2) % n], [10 * r, 10 * r + 1])
    empty = comm.Create_dist_graph_adjacent([], [], MPI.WEIGHTS_EMPTY, MPI.WEIGHTS_EMPTY)
    rbuf = np.full((2, 2), -1.0)
    adj.Neighbor_alltoall(np.array([[r, 0.5], [r, 1.5]]), rbuf)
    return (adj.Get_dist_neighbors(), adj.Get_dist_neighbors_count(), spec.Get_dist_neighbors(),
            empty.Get_dist_neighbors(), rbuf.tolist())


def test_dist_graph_facts_and_alltoall() -> None:
    got = _run(dist_graph_facts, 3)
    for r, facts in enumerate(got):
        left = (r - 1) % 3
        ins = sorted([(left, 10 * left), ((r - 2) % 3, 10 * ((r - 2) % 3) + 1)])  # by source rank
        sources = [(r - 2) % 3, left]
        assert facts[0] == (sources, [(r + 1) % 3, (r + 2) % 3], ([6, 7], [8, 9]))
        assert facts[1] == (2, 2, True)
        assert facts[2] == ([s for s, _ in ins], [(r + 1) % 3, (r + 2) % 3],
                            ([w for _, w in ins], [10 * r, 10 * r + 1]))
        assert facts[3] == ([], [], ([], []))
        # r is the second destination of r - 2 (its block 1), the first of r - 1 (its block 0)
        assert facts[4] == [[sources[0], 1.5], [left, 0.5]]


# ---- every neighbourhood collective ----


def every_collective(comm: MPI.Intracomm) -> dict[str, Any]:
    r = comm.rank
    cart = comm.Create_cart([comm.size], periods=[True])
    out: dict[str, Any] = {}
    rbuf = np.full((2, 2), -1, dtype="i")
    cart.Neighbor_allgather(np.array([r, r], dtype="i"), rbuf)
    out["allgather"] = rbuf.tolist()
    rbuf = np.full(3, -1, dtype="i")
    cart.Neighbor_allgatherv(np.array([r] * (r + 1), dtype="i")[:1], [rbuf, ([1, 1], [0, 2])])
    out["allgatherv"] = rbuf.tolist()
    sbuf = np.array([[r, 0], [r, 1]], dtype="i")
    rbuf = np.full((2, 2), -1, dtype="i")
    cart.Ineighbor_alltoall(sbuf, rbuf).Wait()
    out["ialltoall"] = rbuf.tolist()
    rbuf = np.full(4, -1, dtype="i")
    cart.Neighbor_alltoallv([sbuf, ([1, 2], [0, 2])], [rbuf, ([2, 1], [0, 3])])
    out["alltoallv"] = rbuf.tolist()
    rbuf = np.full(2, -1.0)
    ext = MPI.DOUBLE.extent
    cart.Neighbor_alltoallw([np.array([r + 0.25, r + 0.75]), ([1, 1], [0, ext]), [MPI.DOUBLE] * 2],
                            [rbuf, ([1, 1], [ext, 0]), [MPI.DOUBLE] * 2])
    out["alltoallw"] = rbuf.tolist()
    rbuf = np.full((2, 2), -1, dtype="i")
    req = cart.Neighbor_alltoall_init(sbuf, rbuf)
    runs = []
    for step in range(2):
        sbuf[:, 1] = 10 * step
        req.Start()
        req.Wait()
        runs.append(rbuf.tolist())
    req.Free()
    out["persistent"] = runs
    out["objects"] = (cart.neighbor_allgather({"r": r}), cart.neighbor_alltoall([f"{r}-", f"{r}+"]))
    cart.Free()
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_every_neighbor_collective_on_every_rank(n: int) -> None:
    for r, out in enumerate(_run(every_collective, n)):
        lo, hi = (r - 1) % n, (r + 1) % n
        assert out["allgather"] == [[lo, lo], [hi, hi]]
        assert out["allgatherv"] == [lo, -1, hi]
        assert out["ialltoall"] == [[lo, 1], [hi, 0]]  # lo sent its "+" block 1 here
        assert out["alltoallv"] == [lo, 1, -1, hi]  # lo's 2-item block to "+", hi's 1-item one
        assert out["alltoallw"] == [hi + 0.25, lo + 0.75]  # receive displacements swapped
        assert out["persistent"] == [[[lo, 0], [hi, 0]], [[lo, 10], [hi, 10]]]
        assert out["objects"] == ([{"r": lo}, {"r": hi}], [f"{lo}+", f"{hi}-"])


# ---- Compute_dims ----


@pytest.mark.parametrize("nnodes, dims, want", [
    (6, 2, [3, 2]), (12, 3, [3, 2, 2]), (7, [0, 0], [7, 1]), (16, [0, 4, 0], [2, 4, 2]),
    (72, 2, [9, 8]), (20, 4, [5, 2, 2, 1]), (360, 3, [10, 6, 6]), (1, 0, []), (4, [3, 5], [3, 5]),
])
def test_compute_dims_agrees_with_mpich(nnodes: int, dims: Any, want: list[int]) -> None:
    assert MPI.Compute_dims(nnodes, dims) == want


def test_compute_dims_errors() -> None:
    got = mpi_errors([lambda: MPI.Compute_dims(6, [4, 0]), lambda: MPI.Compute_dims(-1, 2)])
    assert got == [
        (MPI.ERR_DIMS, "Compute_dims(6, [4, 0]): the fixed dimensions (product 4) do not divide "
         "nnodes=6; leave more dimensions 0, or fix sizes that divide nnodes", True),
        (MPI.ERR_ARG, "Compute_dims(-1, 2): nnodes must be >= 0; pass the number of ranks to split",
         True)]


# ---- errors ----


def topology_errors(comm: MPI.Intracomm) -> tuple[Any, ...]:
    cart = comm.Create_cart([2], periods=[False])
    classes = mpi_errors([lambda: comm.Create_cart([3]), lambda: cart.Get_cart_rank([2]),
                          lambda: cart.Shift(1, 1), lambda: cart.Get_coords(5),
                          lambda: cart.Neighbor_allgather(MPI.IN_PLACE, np.zeros(2))])
    texts = []
    for call in (lambda: comm.Create_cart([2], [True, True]), lambda: cart.neighbor_alltoall([1]),
                 lambda: MPI.Cartcomm(comm), lambda: MPI.Graphcomm(cart)):
        try:
            call()
        except (ValueError, TypeError) as exc:
            texts.append((type(exc).__name__, str(exc)))
    return classes, texts


def test_topology_errors_name_the_rank_call_and_fix() -> None:
    classes, texts = _run(topology_errors, 2)[1]
    assert classes == [
        (MPI.ERR_ARG, "rank 1: Create_cart(dims=[3], periods=None): the grid has 3 ranks but the "
         "communicator 2; pass dims whose product is at most comm.size "
         "(MPI.Compute_dims(comm.size, ndims))", True),
        (MPI.ERR_ARG, "rank 1: Cartcomm.Get_cart_rank([2]): coords [2] are outside the grid [2] in "
         "a non-periodic dimension; pass coordinates in range(dims[i]) for the non-periodic "
         "dimensions", True),
        (MPI.ERR_ARG, "rank 1: Cartcomm.Shift(direction=1, disp=1): direction must be in range(1) "
         "for this grid; pass the index of a dimension", True),
        (MPI.ERR_RANK, "rank 1: Cartcomm.Get_coords(5): rank must be in range(2) for this "
         "communicator; pass a rank of this communicator", True),
        (MPI.ERR_BUFFER, "rank 1: Neighbor_allgather(): MPI.IN_PLACE (or None) is not allowed as "
         "the send buffer of a neighbourhood collective; pass a send buffer", False)]
    assert texts == [
        ("ValueError", "rank 1: Create_cart(dims=[2], periods=[True, True]): expecting 1 items, got "
         "2 in periods; pass one per dimension"),
        ("ValueError", "rank 1: neighbor_alltoall(): expecting 2 items, got 1 in sendobj; pass one "
         "per out-neighbour"),
        ("TypeError", "MPI.Cartcomm(comm): expecting a Cartesian communicator, got one with no "
         "topology; make one with Create_cart()"),
        ("TypeError", "MPI.Graphcomm(comm): expecting a graph communicator, got one with Cartesian; "
         "make one with Create_graph()")]


def mismatched_grids(comm: MPI.Intracomm) -> None:
    comm.Create_cart([comm.size] if comm.rank == 0 else [1, comm.size])


def test_ranks_that_pass_different_grids_are_told() -> None:
    with pytest.raises(sc.RankError, match=r"rank \d: Create_cart\(dims=\[.*\], periods=None\): "
                       r"rank \d passed \(\[.*\]\) but this rank \(\[.*\]\); pass the same "
                       r"topology on every rank"):
        sc.run(mismatched_grids, world_size=2)
