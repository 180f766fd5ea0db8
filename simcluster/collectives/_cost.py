"""Virtual time of a collective under analytic fidelity: each algorithm's cost formula.

An algorithm's cost is a list of *stages* run one after another:
``(repeat, fan, nbytes, reduced)`` is ``repeat`` times [``fan`` messages of
``nbytes`` bytes through one port, back to back (1: one dependent step such as
a ``sendrecv``; 0: no message), then a local reduction of ``reduced`` bytes].
The stages are the critical path the algorithm's docstring states: for
example ``ring`` all_reduce is ``(p-1)`` steps of ``alpha + n/p*beta`` plus a
reduction of ``n/p`` bytes, then ``(p-1)`` steps of ``alpha + n/p*beta``.

A stage list is turned into time by the run's own latency model, not by a
formula per model: a message is charged with ``ports.transfer`` on ports bound
for this evaluation, and a reduction with ``model.reduce_time``, in the same
floating-point operations the engine performs. So the time is the textbook
formula for every model (AlphaBeta ``alpha + k*n*beta`` for ``k`` messages
queued on a port; Constant ``c`` per step; Zero 0; LogGP ``2o + L + (n-1)G``
plus the gaps; a third party's model whatever it charges), and for chains of
dependent steps (ring, recursive doubling and its fold, dissemination) it is
exactly what message level gives when every member enters at the same time.
``Jitter`` is charged as its inner model (noise has no formula);
``Hierarchical`` as ``intra`` when every member sits on one node, else as
``inter`` for every step (an upper bound: real schedules mix both).

Rule 1: a stage list depends only on the algorithm, ``p``, the byte counts,
the root and whether the payload splits into pieces: never on the ranks'
values. Rule 2: nothing here sends or waits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import arrays
from ..latency import Hierarchical, Jitter, LatencyModel
from . import _gloo
from ._chunks import ceil_log2
from ._reduction import nbytes_of

if TYPE_CHECKING:
    from .._coll_context import CollContext
    from ._registry import Stage, Stages


def finish_time(stages: Stages, args: list[tuple[Any, ...]], nbytes: list[int], start: float,
                c: CollContext) -> float:
    """Return when a collective whose last member arrived at ``start`` completes.

    ``stages`` is the algorithm's stage list function (``Algorithm.stages``).
    """
    p = len(args)
    if p == 1:
        return start
    model = _effective(c.latency, c.comm.world_ranks)
    gamma = model.reduce_time(1 << 20) > 0
    return elapse(model, stages(p, args, nbytes, gamma), start)


def elapse(model: LatencyModel, stages: Sequence[Stage], t: float) -> float:
    """Return the time after running ``stages`` from ``t`` under ``model`` (see the module docstring)."""
    rng = random.Random(0)
    chain = model.bind(2, rng)
    if chain.zero and not model.reduce_time(1 << 20):
        return t
    transfer = chain.transfer
    for repeat, fan, nbytes, reduced in stages:
        seconds = model.reduce_time(reduced) if reduced else 0.0  # type: ignore[arg-type]
        for _ in range(repeat):
            if fan == 1:
                t = transfer(0, 1, nbytes, t)[1]  # type: ignore[arg-type]
            elif fan > 1:  # one port sends fan messages back to back: the last arrival counts
                ports = model.bind(fan + 1, rng)
                t = max(ports.transfer(0, dst, nbytes, t)[1] for dst in range(1, fan + 1))  # type: ignore[arg-type]
            if seconds > 0:
                t = t + seconds
    return t


def _effective(model: LatencyModel, world_ranks: list[int]) -> LatencyModel:
    """Unwrap Jitter; pick Hierarchical's intra or inter model for these members."""
    while True:
        if isinstance(model, Jitter):
            model = model.model
        elif isinstance(model, Hierarchical):
            per_node = model.ranks_per_node
            one_node = world_ranks[0] // per_node == world_ranks[-1] // per_node and all(
                w // per_node == world_ranks[0] // per_node for w in world_ranks)
            model = model.intra if one_node else model.inter
        else:
            return model


# ---- stage lists, one per algorithm (``Algorithm.stages``) ----
# Each takes ``(p, args, nbytes, gamma)``: the members' arguments and message
# bytes in rank order, and whether reductions cost time under the run's model.

Args = list[tuple[Any, ...]]


def _fold(p: int) -> tuple[int, int]:
    """Return ``(k, rem)``: ``2**k`` is the largest power of two ``<= p`` and ``rem = p - 2**k``."""
    k = p.bit_length() - 1
    return k, p - (1 << k)


def _max(values: Sequence[int]) -> float:
    return float(max(values))


def _mean(values: Sequence[int]) -> float:
    return float(sum(values)) / len(values)


def _reduced(objs: Sequence[Any], gamma: bool) -> float:
    """Bytes a reduction of these operands touches (only needed when reductions cost time)."""
    return float(max(nbytes_of(obj) for obj in objs)) if gamma else 0.0


def _splits(obj: Any, op: Any, p: int) -> bool:
    """True when an algorithm cuts the payload into ``p`` pieces (an array under an elementwise op)."""
    return arrays.is_array(obj) and op.elementwise and arrays.size(obj) >= p


def _tree_of_pieces(p: int, n: float) -> list[Stage]:
    """Binomial scatter or gather of ``p`` items of ``n`` bytes: ``log2(p)*alpha + (p-1)*n*beta`` on 2**k."""
    return [(1, 1, n * p / (1 << i), 0.0) for i in range(1, ceil_log2(p) + 1)]


def _halving(k: int, n: float, r: float) -> list[Stage]:
    """Recursive halving: step ``i`` moves and reduces ``1/2**i`` of the payload."""
    return [(1, 1, n / (1 << i), r / (1 << i)) for i in range(1, k + 1)]


def _doubling(k: int, n: float) -> list[Stage]:
    """The reverse of halving (all_gather or gather of the pieces): ``n/2**k, ..., n/2``."""
    return [(1, 1, n / (1 << i), 0.0) for i in range(k, 0, -1)]


def _operands(args: Args, nbytes: list[int], gamma: bool) -> tuple[float, float]:
    """Return ``(n, r)`` for a reduction: the largest message and the bytes a reduction touches."""
    return _max(nbytes), _reduced([a[0] for a in args], gamma)


def barrier_dissemination(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(ceil_log2(p), 1, 0.0, 0.0)]


def barrier_tree(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(2 * (p.bit_length() - 1), 1, 0.0, 0.0)]  # fan in to rank 0 and back out


def _root_bytes(args: Args, nbytes: list[int]) -> float:
    return float(nbytes[args[0][1]])


def broadcast_binomial(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(ceil_log2(p), 1, _root_bytes(args, nbytes), 0.0)]


def broadcast_scatter_allgather(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    obj = args[args[0][1]][0]
    if not (arrays.is_array(obj) and arrays.size(obj) >= p):  # goes down the binomial tree whole
        return broadcast_binomial(p, args, nbytes, gamma)
    n = _root_bytes(args, nbytes)
    scatter = [(1, 1, n / (1 << i), 0.0) for i in range(1, ceil_log2(p) + 1)]
    return [*scatter, (p - 1, 1, n / p, 0.0)]


def broadcast_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(1, p - 1, _root_bytes(args, nbytes), 0.0)]


def scatter_binomial(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return _tree_of_pieces(p, nbytes[args[0][1]] / p)


def scatter_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(1, p - 1, nbytes[args[0][1]] / p, 0.0)]


def gather_binomial(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return _tree_of_pieces(p, _mean(nbytes))


def gather_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(1, p - 1, _mean(nbytes), 0.0)]


def reduce_binomial(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    op, root = args[0][1], args[0][2]
    n, r = _operands(args, nbytes, gamma)
    extra: list[Stage] = [(1, 1, n, 0.0)] if not op.commutative and root != 0 else []
    return [(ceil_log2(p), 1, n, r), *extra]


def reduce_rabenseifner(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    obj, op, root = args[0]
    n, r = _operands(args, nbytes, gamma)
    k, rem = _fold(p)
    stages: list[Stage] = [(1, 1, n, r)] if rem else []
    stages += _halving(k, n, r) + _doubling(k, n) if _splits(obj, op, 1 << k) else [(2 * k, 1, n, r)]
    if rem and root < 2 * rem and root % 2 == 0:  # a set-aside root gets it from root + 1
        stages.append((1, 1, n, 0.0))
    return stages


def _gloo_blocks(objs: Sequence[Any], p: int, bounds: Any) -> tuple[list[int], float]:
    """gloo's blocks of ``objs`` end to end (``_gloo``: ``bounds`` is its all_reduce or reduce
    layout) and the bytes of the largest."""
    size = sum(arrays.size(obj) for obj in objs)
    itemsize = sum(arrays.nbytes(obj) for obj in objs) // size if size else 1
    blocks = _gloo.blocks(objs[0], size, p, bounds)
    return blocks, float(max(b - a for a, b in zip(blocks, blocks[1:])) * itemsize)


def _gloo_all_reduce(p: int, objs: Sequence[Any], gamma: bool) -> list[Stage]:
    """gloo's ring all_reduce of ``objs`` end to end: ``2(p-1)`` steps of its largest block."""
    piece = _gloo_blocks(objs, p, _gloo.all_reduce_bounds)[1]
    return [(p - 1, 1, piece, piece if gamma else 0.0), (p - 1, 1, piece, 0.0)]


def reduce_gloo_ring(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    obj, op, root = args[0]
    if not _gloo.applies(obj, op):
        return reduce_binomial(p, args, nbytes, gamma)
    blocks, piece = _gloo_blocks([obj], p, _gloo.reduce_bounds)
    sent = sum(1 for k in range(p) if k != root and blocks[k + 1] > blocks[k])
    gather: list[Stage] = [(1, sent, piece, 0.0)] if sent else []
    return [(p - 1, 1, piece, piece if gamma else 0.0), *gather]


def reduce_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(1, p - 1, n, 0.0), (p - 1, 0, 0.0, r)]


def _folded(p: int, n: float, r: float, middle: list[Stage]) -> list[Stage]:
    """MPICH's fold around ``middle`` on sizes that are not powers of two: one step in, one out."""
    rem = _fold(p)[1]
    return [(1, 1, n, r), *middle, (1, 1, n, 0.0)] if rem else middle


def all_reduce_recursive_doubling(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return _folded(p, n, r, [(_fold(p)[0], 1, n, r)])


def all_reduce_rabenseifner(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    obj, op = args[0]
    n, r = _operands(args, nbytes, gamma)
    k = _fold(p)[0]
    middle = _halving(k, n, r) + _doubling(k, n) if _splits(obj, op, 1 << k) else [(2 * k, 1, n, r)]
    return _folded(p, n, r, middle)


def all_reduce_ring(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    obj, op = args[0]
    n, r = _operands(args, nbytes, gamma)
    piece, rpiece = (n / p, r / p) if _splits(obj, op, p) else (n, r)
    tail: list[Stage] = [] if op.commutative else [(1, 0, 0.0, rpiece)]
    return [(p - 1, 1, piece, rpiece), *tail, (p - 1, 1, piece, 0.0)]


def all_reduce_gloo_ring(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    obj, op = args[0]
    if not _gloo.applies(obj, op):
        return all_reduce_ring(p, args, nbytes, gamma)
    return _gloo_all_reduce(p, [obj], gamma)


def all_reduce_reduce_broadcast(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(ceil_log2(p), 1, n, r), (ceil_log2(p), 1, n, 0.0)]


def all_reduce_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(1, p - 1, n, 0.0), (p - 1, 0, 0.0, r), (1, p - 1, n, 0.0)]


def _lists(args: Args, nbytes: list[int], gamma: bool) -> tuple[float, float]:
    """``_operands`` for reduce_scatter: a reduction touches a whole list."""
    return _max(nbytes), _reduced([list(a[0]) for a in args], gamma)


def reduce_scatter_recursive_halving(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _lists(args, nbytes, gamma)
    k, rem = _fold(p)
    fold_in: list[Stage] = [(1, 1, n, r)] if rem else []
    fold_out: list[Stage] = [(1, 1, n / p, 0.0)] if rem else []
    return [*fold_in, *_halving(k, n, r), *fold_out]


def reduce_scatter_pairwise(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _lists(args, nbytes, gamma)
    return [(p - 1, 1, n / p, 0.0), (p - 1, 0, 0.0, r / p)]


def reduce_scatter_ring(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _lists(args, nbytes, gamma)
    tail: list[Stage] = [] if args[0][1].commutative else [(1, 0, 0.0, r / p)]
    return [(p - 1, 1, n / p, r / p), *tail]


def reduce_scatter_gloo_items(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    objs, op = args[0]
    if not all(_gloo.applies(item, op) for item in objs):
        return reduce_scatter_ring(p, args, nbytes, gamma)
    return [stage for item in objs for stage in _gloo_all_reduce(p, [item], gamma)]


def reduce_scatter_gloo_whole(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    objs, op = args[0]
    if not all(_gloo.applies(item, op) for item in objs):
        return reduce_scatter_ring(p, args, nbytes, gamma)
    return _gloo_all_reduce(p, objs, gamma)


def reduce_scatter_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _lists(args, nbytes, gamma)
    return [(1, p - 1, n, 0.0), (p - 1, 0, 0.0, r), (1, p - 1, n / p, 0.0)]


def all_gather_ring(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(p - 1, 1, _mean(nbytes), 0.0)]


def all_gather_recursive_doubling(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n = _mean(nbytes)
    k, rem = _fold(p)
    steps: list[Stage] = [(1, 1, n * (1 << i), 0.0) for i in range(k)]
    return [(1, 1, n, 0.0), *steps, (1, 1, n * p, 0.0)] if rem else steps


def all_gather_bruck(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n = _mean(nbytes)
    return [(1, 1, n * min(d, p - d), 0.0) for d in (1 << i for i in range(ceil_log2(p)))]


def all_to_all_pairwise(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    return [(p - 1, 1, _mean(nbytes) / p, 0.0)]


def all_to_all_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    # the upper end of alpha + (p-1)*n*beta .. alpha + (2p-3)*n*beta
    return [(1, 2 * p - 3, _mean(nbytes) / p, 0.0)]


def scan_recursive_doubling(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(ceil_log2(p), 1, n, r), (1, 0, 0.0, r)]  # then my own operand


def scan_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(p - 1, 1, n, r)]


def exscan_recursive_doubling(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(ceil_log2(p), 1, n, r)]


def exscan_linear(p: int, args: Args, nbytes: list[int], gamma: bool) -> list[Stage]:
    n, r = _operands(args, nbytes, gamma)
    return [(p - 1, 1, n, r)]
