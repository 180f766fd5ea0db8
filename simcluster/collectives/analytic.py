"""Analytic fidelity: each collective resolved in one step, without its messages.

Under ``run(fidelity="analytic")`` every collective algorithm is replaced by its
*twin* (:func:`twin`), a function with the algorithm's signature that deposits
this member's arguments in a meeting (``CollContext.meet``) instead of sending
anything. When the last member arrives, :func:`_resolve` computes every
member's result at once and the virtual time at which all of them complete:
the latest arrival plus the algorithm's cost under the run's latency model.
Both come from the algorithm's record (``_registry``): its ``results`` (built
by the functions below) and its ``stages`` (``_cost.py``). The body in
``_methods`` around the twin is unchanged, so in-place copies, traces,
nonblocking twins and algorithm choice behave as at message level;
point-to-point calls are never affected.

Rule 1: same result as the message-level algorithm, value and type. Reductions
combine operands in the order the algorithm does (its :class:`Order`:
``BALANCED`` for recursive doubling, Rabenseifner and recursive halving;
``BINOMIAL`` for binomial trees; ``LEFT`` for the linear and pairwise ones;
``RING`` for the ring), so floating-point results are equal bit for bit, not
just close. What a rank receives is a copy as a message would deliver it
(``payload_copy``); a rank's own item is ``fresh``, as in the algorithms.
Rule 2: one meeting holds one list of contributions, never per-rank dicts,
and arrays are reduced as one stacked numpy array (``log2 p`` ufunc calls for
a tree), so a million ranks stay cheap.
Rule 3: nothing raised while resolving escapes into the engine: an op that
fails becomes each member's error, raised where it awaits. Members that
called different things never meet: ``Comm._collective`` stopped the one that
differs at its call, as at message level.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

from .. import arrays
from . import _cost, _gloo
from ._chunks import fresh, split_bounds
from ._reduction import flatten, nbytes_of, unflatten

if TYPE_CHECKING:
    from .._coll_context import CollContext
    from ..ops import ReduceOp
    from ._registry import Algorithm, Deliver as Delivers, Results


class _Call(NamedTuple):
    """One member's contribution to a meeting: the algorithm, its context, arguments and message size."""

    algorithm: Algorithm
    c: CollContext
    args: tuple[Any, ...]
    nbytes: int


class _Failed:
    """A member's result that is an error, raised by the twin where the member awaits."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


# ---- the twin: what runs on each rank ----


@functools.cache
def twin(algorithm: Algorithm) -> Callable[..., Awaitable[Any]]:
    """Return the analytic stand-in for ``algorithm`` (the signature of ``algorithm.run``)."""
    sent = _SENT[algorithm.collective]
    listed = algorithm.wraps  # objects travel as [obj]

    async def analytic(c: CollContext, *args: Any) -> Any:
        nbytes = sent(c, args, listed)  # also refuses an unsendable payload at the call, as a send would
        result = await c.meet(_Call(algorithm, c, args, nbytes), _resolve)
        if type(result) is _Failed:
            raise result.error
        return result

    analytic.__name__ = analytic.__qualname__ = f"analytic_{algorithm.collective}_{algorithm.name}"
    return analytic


_FIXED: dict[tuple[type, bool], int] = {}
"""Message sizes of payloads whose size depends only on their type (float, bool, None)."""


def _nbytes(c: CollContext, obj: object, listed: bool = False) -> int:
    """Return the bytes a message carrying ``obj`` (or ``[obj]`` when ``listed``) counts."""
    kind = type(obj)
    if kind is np.ndarray:
        c.payload_nbytes(obj)  # refuses object arrays
        return int(obj.nbytes)  # type: ignore[attr-defined]
    if arrays.is_array(obj):
        return arrays.nbytes(obj)  # an array of another library: counted as arrays are, never staged
    if kind is float or kind is bool or obj is None:
        size = _FIXED.get((kind, listed))
        if size is None:
            size = _FIXED[kind, listed] = c.payload_nbytes([obj] if listed else obj)
        return size
    return c.payload_nbytes([obj] if listed else obj)


def _sent_nothing(c: CollContext, args: tuple[Any, ...], listed: bool) -> int:
    return 0


def _sent_obj(c: CollContext, args: tuple[Any, ...], listed: bool) -> int:
    return _nbytes(c, args[0], listed)


def _sent_by_root(c: CollContext, args: tuple[Any, ...], listed: bool) -> int:
    return _nbytes(c, args[0]) if c.rank == args[-1] else 0


def _sent_items(c: CollContext, args: tuple[Any, ...], listed: bool) -> int:
    """Total bytes of the list every member sends pieces of (all_to_all, reduce_scatter)."""
    return sum(_nbytes(c, item) for item in args[0])


def _sent_scatter(c: CollContext, args: tuple[Any, ...], listed: bool) -> int:
    objs, root = args
    return sum(_nbytes(c, item) for item in objs) if c.rank == root else 0


_SENT: dict[str, Callable[[CollContext, tuple[Any, ...], bool], int]] = {
    "barrier": _sent_nothing, "broadcast": _sent_by_root, "scatter": _sent_scatter,
    "gather": _sent_obj, "reduce": _sent_obj, "all_reduce": _sent_obj, "all_gather": _sent_obj,
    "reduce_scatter": _sent_items, "all_to_all": _sent_items, "scan": _sent_obj, "exscan": _sent_obj,
}


# ---- resolving a meeting ----


def _resolve(calls: list[_Call], times: list[float]) -> tuple[list[Any], float]:
    """Return every member's result and the time they all complete (never raises)."""
    start = max(times)
    try:
        algorithm, c = calls[0].algorithm, calls[0].c
        args = [call.args for call in calls]
        results = algorithm.results(args, Deliver(c))
        done = _cost.finish_time(algorithm.stages, args, [call.nbytes for call in calls], start, c)
    except Exception as exc:  # an op that fails on these payloads: every member's error
        return [_Failed(exc)] * len(calls), start
    return results, done


class Deliver:
    """How a value reaches a member: shared when immutable, else a copy as a message would make."""

    __slots__ = ("copy",)

    _IMMUTABLE = frozenset({int, float, bool, str, bytes, complex, type(None)})

    def __init__(self, c: CollContext) -> None:
        self.copy = c.payload_copy

    def sent(self, value: Any) -> Any:
        """Return ``value`` as a receiver gets it."""
        if type(value) in self._IMMUTABLE or isinstance(value, np.generic):
            return value
        if type(value) is np.ndarray:
            return value.copy()
        if arrays.is_array(value):  # CuPy, torch, ...: copied by its own library, on its device
            return arrays.clone(value)
        return self.copy(value)

    def result(self, value: Any, own: Any) -> Any:
        """Return a reduced ``value`` for a member whose own operand was ``own``."""
        if value is own:
            return fresh(value)
        return self.sent(value)


# ---- results (an algorithm's ``results``: one result per member, in rank order) ----


def nothing(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """Barrier: ``None`` for every member."""
    return [None] * len(args)


def broadcast(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """Broadcast of the whole value: the others get a decoded copy of the root's."""
    root = args[0][1]
    value = args[root][0]
    return [value if rank == root else deliver.sent(value) for rank in range(len(args))]


def broadcast_in_pieces(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """Scatter-allgather broadcast: an array put back together from pieces comes out C-ordered."""
    root = args[0][1]
    value = args[root][0]
    if not (isinstance(value, np.ndarray) and value.size >= len(args)):  # sent whole
        return broadcast(args, deliver)
    return [value if rank == root else np.array(value, order="C") for rank in range(len(args))]


def scatter(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """Scatter: item ``rank`` of the root's list."""
    root = args[0][1]
    items = args[root][0]
    return [fresh(items[rank]) if rank == root else deliver.sent(items[rank]) for rank in range(len(args))]


def _gathered(objs: Sequence[Any], rank: int, deliver: Delivers) -> list[Any]:
    return [fresh(obj) if src == rank else deliver.sent(obj) for src, obj in enumerate(objs)]


def gather(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """Gather: every member's item on the root, ``None`` elsewhere."""
    root = args[0][1]
    out: list[Any] = [None] * len(args)
    out[root] = _gathered([a[0] for a in args], root, deliver)
    return out


def all_gather(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """All_gather: every member's item everywhere."""
    objs = [a[0] for a in args]
    return [_gathered(objs, rank, deliver) for rank in range(len(args))]


def all_to_all(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
    """All_to_all: item ``rank`` of every member's list."""
    lists = [a[0] for a in args]
    return [_gathered([row[rank] for row in lists], rank, deliver) for rank in range(len(args))]


def reduce(order: Order) -> Results:
    """Return the results of a reduce that combines operands in ``order``."""
    def results(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
        op, root = args[0][1], args[0][2]
        objs = [a[0] for a in args]
        # a binomial tree is rooted at the root for commutative ops, at rank 0 otherwise
        # (reduce.binomial); the other orders ignore the root
        value = order.value(objs, op, root if op.commutative else 0)
        out: list[Any] = [None] * len(args)
        out[root] = op.finalize(deliver.result(value, objs[root]), len(args))
        return out
    return results


def all_reduce(order: Order, *, from_rank_0: bool = False) -> Results:
    """Return the results of an all_reduce that combines operands in ``order``.

    ``from_rank_0``: rank 0 finishes the value and sends it to the others
    (reduce then broadcast), so they get copies of one finished value.
    """
    def results(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
        op = args[0][1]
        objs = [a[0] for a in args]
        p = len(objs)
        value = order.value(objs, op, 0)
        if from_rank_0:
            done = op.finalize(deliver.result(value, objs[0]), p)
            return [done if rank == 0 else deliver.sent(done) for rank in range(p)]
        return [op.finalize(deliver.result(value, obj), p) for obj in objs]
    return results


def reduce_scatter(order: Order) -> Results:
    """Return the results of a reduce_scatter that combines items in ``order``."""
    def results(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
        op = args[0][1]
        lists = [list(a[0]) for a in args]
        p = len(lists)
        items = order.items(lists, op)
        return [op.finalize(deliver.result(items[rank], lists[rank][rank]), p) for rank in range(p)]
    return results


Prefixes = Callable[[list[Any], "ReduceOp"], list[Any]]
"""``prefixes(objs, op)``: each rank's exclusive prefix in an algorithm's order (``_NOTHING`` for rank 0)."""


def scan(prefixes: Prefixes) -> Results:
    """Return the results of an inclusive scan whose exclusive prefixes come from ``prefixes``."""
    def results(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
        op = args[0][1]
        objs = [a[0] for a in args]
        below = prefixes(objs, op)
        return [op.finalize(deliver.result(obj if b is _NOTHING else op.apply(b, obj), obj), rank + 1)
                for rank, (obj, b) in enumerate(zip(objs, below))]
    return results


def exscan(prefixes: Prefixes) -> Results:
    """Return the results of an exclusive scan whose prefixes come from ``prefixes``."""
    def results(args: list[tuple[Any, ...]], deliver: Delivers) -> list[Any]:
        op = args[0][1]
        objs = [a[0] for a in args]
        below = prefixes(objs, op)
        return [None if b is _NOTHING else op.finalize(deliver.result(b, obj), rank)
                for rank, (obj, b) in enumerate(zip(objs, below))]
    return results


# ---- reduction trees: the order in which each algorithm combines operands ----
# A tree works on ``rows``: one operand per rank, either a stacked numpy array
# (rows[r] is rank r's operand; ``pair`` combines whole blocks of rows with one
# ufunc call) or a Python list (``pair`` combines item by item). Operands are
# whole values or flat pieces; every tree keeps the lower ranks' operand left.


class _Numpy:
    """Tree operations on a stacked array: a block of rows at a time."""

    __slots__ = ("apply",)

    def __init__(self, op: ReduceOp) -> None:
        self.apply = op.apply

    def pair(self, a: Any, b: Any) -> Any:
        return self.apply(a, b)

    @staticmethod
    def cat(a: Any, b: Any) -> Any:
        return np.concatenate((a, b))

    @staticmethod
    def copy(rows: Any) -> Any:
        return rows.copy()

    @staticmethod
    def take(rows: Any, index: range) -> Any:
        return rows[index.start:index.stop:index.step]

    @staticmethod
    def put(rows: Any, index: range, values: Any) -> None:
        rows[index.start:index.stop:index.step] = values


class _Items:
    """Tree operations on a list of operands, combined one pair at a time with ``combine``."""

    __slots__ = ("apply",)

    def __init__(self, combine: Callable[[Any, Any], Any]) -> None:
        self.apply = combine

    def pair(self, a: list[Any], b: list[Any]) -> list[Any]:
        apply = self.apply
        return [apply(x, y) for x, y in zip(a, b)]

    @staticmethod
    def cat(a: list[Any], b: list[Any]) -> list[Any]:
        return a + b

    @staticmethod
    def copy(rows: list[Any]) -> list[Any]:
        return list(rows)

    @staticmethod
    def take(rows: list[Any], index: range) -> list[Any]:
        return rows[index.start:index.stop:index.step]

    @staticmethod
    def put(rows: list[Any], index: range, values: list[Any]) -> None:
        rows[index.start:index.stop:index.step] = values


def _balanced(ops: Any, rows: Any, root: int, bounds: list[int]) -> Any:
    """Recursive doubling / halving: MPICH's fold of the extra ranks, then pairs 1, 2, 4, ... apart."""
    n = len(rows)
    rem = n - (1 << (n.bit_length() - 1))
    if rem:  # even rank 2i hands its operand to 2i+1: (x_2i op x_2i+1) stands for both
        rows = ops.cat(ops.pair(rows[0:2 * rem:2], rows[1:2 * rem:2]), rows[2 * rem:])
    while len(rows) > 1:
        rows = ops.pair(rows[0::2], rows[1::2])
    return rows[0]


def _binomial(ops: Any, rows: Any, root: int, bounds: list[int]) -> Any:
    """Binomial tree rooted at ``root`` (relative ranks): each node folds in its children, nearest first."""
    n = len(rows)
    rows = ops.cat(rows[root:], rows[:root]) if root else ops.copy(rows)
    mask = 1
    while mask < n:  # level `mask`: node rel (a multiple of 2*mask) takes in child rel + mask
        parents = range(0, n - mask, 2 * mask)
        children = range(mask, n, 2 * mask)[:len(parents)]
        ops.put(rows, parents, ops.pair(ops.take(rows, parents), ops.take(rows, children)))
        mask <<= 1
    return rows[0]


def _left(ops: Any, rows: Any, root: int, bounds: list[int]) -> Any:
    """Linear and pairwise: ``((x0 op x1) op x2) op ...`` in rank order."""
    apply = ops.apply
    value = rows[0]
    for row in rows[1:]:
        value = apply(value, row)
    return value


def _ring_numpy(ops: Any, rows: Any, root: int, bounds: list[int]) -> Any:
    """Ring on a stack of flat operands (a commutative op): piece k is folded from rank k+1 round to k."""
    p = len(rows)
    piece = np.repeat(np.arange(p), np.diff(bounds))
    cols = np.arange(len(piece))
    value = rows[(piece + 1) % p, cols]
    for step in range(2, p + 1):
        value = ops.apply(value, rows[(piece + step) % p, cols])
    return value


def _ring_pieces(flats: list[Any], bounds: Sequence[int], combine: Callable[[Any, Any], Any],
                 commutative: bool) -> list[Any]:
    """Ring on flat operands of any kind: return the reduced pieces in order.

    Piece ``k`` starts at rank ``k+1`` and goes round to ``k``. A commutative op
    folds in that order; otherwise the part after the wrap at rank 0 travels
    as a separate head, and piece ``k`` is ``(x0..xk) op (x(k+1)..x(p-1))``.
    """
    p = len(flats)
    pieces = []
    for k in range(p):
        lo, hi = bounds[k], bounds[k + 1]
        segs = [flat[lo:hi] for flat in flats]
        if commutative or k == p - 1:
            order = [(k + 1 + j) % p for j in range(p)]
            value = segs[order[0]]
            for r in order[1:]:
                value = combine(value, segs[r])
        else:
            head, tail = segs[0], segs[k + 1]
            for r in range(1, k + 1):
                head = combine(head, segs[r])
            for r in range(k + 2, p):
                tail = combine(tail, segs[r])
            value = combine(head, tail)
        pieces.append(value)
    return pieces


def _stack(objs: list[Any], op: ReduceOp, shape: tuple[int, ...]) -> Any:
    """Return the operands stacked as one array ``shape + (items,)``, or None when that is not exact.

    Only for built-in ops (elementwise ufuncs) on numpy arrays of one dtype and
    shape, and Python floats under SUM/PRODUCT/AVG (IEEE the same in numpy).
    """
    if op.is_custom or not objs:
        return None
    first = objs[0]
    if type(first) is float:
        if op.name not in ("SUM", "PRODUCT", "AVG") or any(type(o) is not float for o in objs):
            return None
        return np.array(objs, dtype=np.float64).reshape(*shape, 1)
    if not isinstance(first, np.ndarray):
        return None
    dtype, item_shape = first.dtype, first.shape
    if any(type(o) is not np.ndarray or o.dtype != dtype or o.shape != item_shape for o in objs):
        return None
    return np.stack([o.reshape(-1) for o in objs]).reshape(*shape, -1)


def _unstack(row: Any, like: Any) -> Any:
    """Turn a reduced row of a stack back into a value like ``like`` (a float, or an array's shape)."""
    if type(like) is float:
        return float(row[0])
    return row.reshape(like.shape)


def _combine_flat(op: ReduceOp) -> Callable[[Any, Any], Any]:
    apply = op.apply

    def combine(a: Any, b: Any) -> Any:
        if isinstance(a, list):
            return [apply(x, y) for x, y in zip(a, b, strict=True)]
        return apply(a, b)  # flat arrays, of any library
    return combine


Tree = Callable[[Any, Any, int, list[int]], Any]
"""``tree(ops, rows, root, bounds)``: one of the trees above."""


class Order:
    """The order in which an algorithm combines the ranks' operands: a tree, on stacked rows or on items."""

    __slots__ = ("tree",)

    def __init__(self, tree: Tree) -> None:
        self.tree = tree

    def value(self, objs: list[Any], op: ReduceOp, root: int) -> Any:
        """Reduce one operand per rank; return the value (shaped like the operands)."""
        p = len(objs)
        stack = _stack(objs, op, (p,))
        if stack is not None:
            bounds = split_bounds(stack.shape[1], p)
            return _unstack(self.tree(_Numpy(op), stack, root, bounds), objs[0])
        return self._objects(objs, op, root)

    def items(self, lists: list[list[Any]], op: ReduceOp) -> list[Any]:
        """Reduce_scatter: return item ``j`` of every rank's list reduced over the ranks, for each ``j``."""
        p = len(lists)
        stack = _stack([item for row in lists for item in row], op, (p, p))
        if stack is not None:
            rows = self.tree(_Numpy(op), stack, 0, list(range(p + 1)))
            return [_unstack(row, lists[0][0]) for row in rows]
        return self._object_items(lists, op)

    def _objects(self, objs: list[Any], op: ReduceOp, root: int) -> Any:
        """``value`` for operands that do not stack: combined one pair at a time."""
        return self.tree(_Items(op.apply), list(objs), root, [])

    def _object_items(self, lists: list[list[Any]], op: ReduceOp) -> list[Any]:
        """``items`` for lists that do not stack."""
        reduced: list[Any] = self.tree(_Items(_combine_flat(op)), lists, 0, [])
        return reduced


class _Ring(Order):
    """The ring: operands that do not stack are cut into pieces as the ring cuts them (``_ring_pieces``)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_ring_numpy)

    def _objects(self, objs: list[Any], op: ReduceOp, root: int) -> Any:
        flats = [flatten(obj, op) for obj in objs]
        flat0 = flats[0]
        bounds = split_bounds(len(flat0) if isinstance(flat0, list) else arrays.size(flat0), len(objs))
        pieces = _ring_pieces(flats, bounds, _combine_flat(op), op.commutative)
        if isinstance(flat0, list):
            return [item for piece in pieces for item in piece][0]
        return arrays.reshape(arrays.concat(pieces), tuple(objs[0].shape))

    def _object_items(self, lists: list[list[Any]], op: ReduceOp) -> list[Any]:
        pieces = _ring_pieces(lists, range(len(lists) + 1), _combine_flat(op), op.commutative)
        return [piece[0] for piece in pieces]


class _Gloo(Order):
    """gloo's ring (``_gloo``): blocks laid out as gloo lays them, each folded from the rank before it
    round to its own; payloads gloo's order does not apply to combine in ``fallback``'s order.

    ``whole``: a reduce_scatter that reduces every rank's list as one concatenated array (torch's
    ``reduce_scatter_tensor`` on gloo) rather than item by item (its list ``reduce_scatter``).
    """

    __slots__ = ("bounds", "fallback", "whole")

    def __init__(self, bounds: Callable[[int, int, int], list[int]], fallback: Order,
                 whole: bool = False) -> None:
        super().__init__(fallback.tree)
        self.bounds, self.fallback, self.whole = bounds, fallback, whole

    def _fold(self, objs: list[Any], op: ReduceOp) -> Any:
        flats = [flatten(obj, op) for obj in objs]
        bounds = _gloo.blocks(flats[0], arrays.size(flats[0]), len(objs), self.bounds)
        return _gloo.fold_blocks(flats, bounds, op)

    def value(self, objs: list[Any], op: ReduceOp, root: int) -> Any:
        if not _gloo.applies(objs[0], op):
            return self.fallback.value(objs, op, root)
        return unflatten(self._fold(objs, op), objs[0])

    def items(self, lists: list[list[Any]], op: ReduceOp) -> list[Any]:
        if not all(_gloo.applies(item, op) for item in lists[0]):
            return self.fallback.items(lists, op)
        if not self.whole:
            return [self.value([row[j] for row in lists], op, 0) for j in range(len(lists))]
        flat = self._fold([arrays.concat([flatten(item, op) for item in row]) for row in lists], op)
        out, offset = [], 0
        for item in lists[0]:
            n = arrays.size(item)
            out.append(unflatten(flat[offset:offset + n], item))
            offset += n
        return out


BALANCED: Final[Order] = Order(_balanced)
"""Recursive doubling and halving, Rabenseifner."""
BINOMIAL: Final[Order] = Order(_binomial)
"""Binomial trees (rooted where ``value`` is told)."""
LEFT: Final[Order] = Order(_left)
"""Linear and pairwise: in rank order, one operand at a time."""
RING: Final[Order] = _Ring()
"""The ring reduce-scatter."""
GLOO_RING: Final[Order] = _Gloo(_gloo.all_reduce_bounds, RING)
"""gloo's all_reduce ring; the ring where it does not apply; item by item in a reduce_scatter."""
GLOO_WHOLE: Final[Order] = _Gloo(_gloo.all_reduce_bounds, RING, whole=True)
"""gloo's all_reduce ring over a reduce_scatter's whole list."""
GLOO_REDUCE: Final[Order] = _Gloo(_gloo.reduce_bounds, BINOMIAL)
"""gloo's reduce; a binomial tree where it does not apply."""


# ---- prefixes (scan, exscan) ----

_NOTHING: Any = object()
"""The exclusive prefix of rank 0."""


def chain_prefixes(objs: list[Any], op: ReduceOp) -> list[Any]:
    """Linear scan: the prefix travels down the chain, ``((x0 op x1) op x2) ...``."""
    apply = op.apply
    below: list[Any] = [_NOTHING] * len(objs)
    upto = objs[0]
    for r in range(1, len(objs)):
        below[r] = upto
        upto = apply(upto, objs[r])
    return below


def doubling_prefixes(objs: list[Any], op: ReduceOp) -> list[Any]:
    """Recursive doubling scan: the peer ``2**j`` below sends its aligned block's balanced reduction.

    Blocks from lower ranks go on the left: ``below = B_high op (... op B_low)``.
    """
    apply = op.apply
    p = len(objs)
    below: list[Any] = [_NOTHING] * p
    levels = [list(objs)]  # levels[j][b]: balanced reduction of the aligned block b of 2**j ranks
    while len(levels[-1]) >= 2:
        prev = levels[-1]
        levels.append([apply(prev[2 * b], prev[2 * b + 1]) for b in range(len(prev) // 2)])
    for r in range(1, p):
        value = _NOTHING
        j = 0
        while (1 << j) <= r:
            if r >> j & 1:
                got = levels[j][(r >> (j + 1)) << 1]
                value = got if value is _NOTHING else apply(got, value)
            j += 1
        below[r] = value
    return below
