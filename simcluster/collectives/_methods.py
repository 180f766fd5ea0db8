"""The collective methods of ``Comm``: argument checks, algorithm choice, in-place copies.

Each public method validates its arguments at the call (so errors name the
rank and the call), picks an algorithm (``algorithm=`` on the call, then
``run(algorithms=...)``, then the family's size-based default), runs it on a
fresh private context, and copies the result into the caller's array where
torch.distributed works in place. The ``i``-prefixed twins start the same
body as a helper task and return a ``Request`` at once.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import arrays
from ..ops import ReduceOp, as_op
from ..payload import describe
from . import check_algorithm, family
from ._registry import lookup
from .analytic import twin as _twin

SHAPED = {"all_reduce": ("smp", ()), "broadcast": ("smp", ("scatter_allgather",)), "barrier": ("smp", ()),
          "reduce": ("smp", ())}
"""The defaults on a platform whose ranks share nodes (``_nodes.layout``), at message fidelity (for
all_reduce and reduce, with a commutative op), so only one rank per node crosses the network; each with the
usual defaults it leaves in place (a large broadcast's pieces spread better on their own)."""

if TYPE_CHECKING:
    from .._coll_context import CollContext
    from .._comm_types import CollGroup
    from ..latency import LatencyModel
    from ..request import Request

R = TypeVar("R")


def _on_nodes(comm: Any) -> bool:
    """Whether ``comm``'s members share nodes of the run's platform (``_nodes.layout``)."""
    placed = comm.latency.placement()
    if placed is None or not placed.routed:  # the common case: no platform, no import
        return False
    from . import _nodes

    return _nodes.layout(comm) is not None


def _nbytes(obj: object) -> int:
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    return arrays.nbytes(obj) if arrays.is_array(obj) else 0


def _payload(same: object) -> str:
    """Describe a payload every rank must pass with one shape and dtype ("" for non-arrays)."""
    return describe(same) if _is_array(same) else ""


def _payloads(items: Sequence[Any]) -> str:
    """Describe a list whose items every rank must pass alike ("" when none is an array)."""
    described = [describe(o) if _is_array(o) else "object" for o in items]
    return f"[{', '.join(described)}]" if any(d != "object" for d in described) else ""


def _op_key(rop: ReduceOp) -> str:
    """What every rank's op must agree on beyond its name: a user op's definition ("" for built-ins).

    Ops made on each rank from one function (``ReduceOp.custom(f)``, a lambda
    at one place in the source, ``MPI.Op.Create(f)``) agree, in any process:
    functions are compared by name and place of definition, not identity.
    """
    fn = rop.fn
    if fn is None:
        return ""
    text = _definition(fn, 0)
    if not rop.commutative:
        text += ", not commutative"
    if rop.elementwise:
        text += ", elementwise"
    return text


def _definition(fn: Any, depth: int) -> str:
    """``name defined at file.py:12``, with the definitions of the functions a closure holds."""
    func = getattr(fn, "__func__", None)
    if func is not None:  # a bound method: its function and what the object holds
        owner = getattr(fn, "__self__", None)
        return f"{_definition(func, depth)} of {_held(owner, depth + 1)}"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    if code is None:  # a builtin, a ufunc, a callable object
        return f"{getattr(fn, '__module__', None) or type(fn).__module__}.{name}"
    text = f"{name} defined at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    cells = getattr(fn, "__closure__", None)
    if cells and depth < 3:
        inner = []
        for cell in cells:
            try:
                held = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(held) and not isinstance(held, type):
                inner.append(_definition(held, depth + 1))
        if inner:
            text += f" ({', '.join(inner)})"
    return text


def _held(owner: object, depth: int) -> str:
    """The functions an object holds (a bound method's ``__self__``), as ``_definition`` names them."""
    names = [n for cls in type(owner).__mro__ for n in getattr(cls, "__slots__", ())
             if not n.startswith("__")]
    values = [getattr(owner, n, None) for n in names] + list(getattr(owner, "__dict__", {}).values())
    inner = [_definition(v, depth) for v in values
             if callable(v) and not isinstance(v, type) and depth < 3]
    return f"{type(owner).__qualname__}({', '.join(inner)})"


_SETUPS_LIMIT = 256
"""Setups a communicator remembers (``_all_reduce_call``); calls past it work theirs out each time."""


def _setup_key(obj: object, op: object, algorithm: str | None) -> tuple[Any, ...] | None:
    """What a collective's setup depends on, for the payloads and ops whose setup is remembered."""
    if op is not None and not (type(op) is ReduceOp and op.fn is None):
        return None
    t = type(obj)
    if t is float:
        return (op, algorithm, t)
    if t is np.ndarray:
        return (op, algorithm, t, obj.dtype, obj.shape)  # type: ignore[attr-defined]
    return None


def _is_array(obj: object) -> bool:
    return arrays.is_array(obj)


def _in_place(target: object, value: Any) -> Any:
    """Copy ``value`` into the caller's array ``target`` and return it; else return ``value``."""
    if isinstance(target, np.ndarray) and target.ndim >= 0 and isinstance(value, np.ndarray) \
            and target.flags.writeable:
        if value.shape != target.shape or value.dtype != target.dtype:
            np.copyto(target, np.asarray(value).reshape(target.shape), casting="same_kind")
        else:
            target[...] = value  # what np.copyto does for one dtype and shape, in a third of the time
        return target
    if arrays.is_array(target) and arrays.is_array(value):
        return _in_place_any(target, value)
    return value


_KIND_ORDER = "buifc"  # numpy's same_kind casting: along this order, never signed to unsigned


def _in_place_any(target: Any, value: Any) -> Any:
    """``_in_place`` where either side is another library's array (torch, CuPy, ...)."""
    if tuple(value.shape) != tuple(target.shape):
        value = arrays.reshape(value, tuple(target.shape))
    have, want = arrays.kind(value), arrays.kind(target)
    if have != want and (have not in _KIND_ORDER or want not in _KIND_ORDER
                         or _KIND_ORDER.index(have) > _KIND_ORDER.index(want)
                         or (have, want) == ("i", "u")):
        raise TypeError(f"cannot copy a {arrays.describe(value)} result into "
                        f"{arrays.describe(target)} in place (same_kind casting); pass an array "
                        f"of dtype {arrays.dtype_name(value)}")
    return arrays.copy_into(target, value)


class CollectiveMethods:
    """Mixin giving ``Comm`` every collective and its nonblocking twin."""

    __slots__ = ()

    if TYPE_CHECKING:  # what the methods use of Comm, the class this is mixed into
        rank: int
        size: int

        @property
        def latency(self) -> LatencyModel: ...
        # the run's settings are read as group.engine: declaring engine here would need the
        # Engine type, which this layer never names (tests/test_layers.py)
        group: CollGroup

        async def _run_collective(self, call: str, body: Callable[..., Awaitable[R]], algorithm: str = "",
                                  payload: str | None = None, op: str = "", forced: bool = False) -> R: ...

        def _start_collective(self, call: str, body: Callable[[CollContext], Awaitable[R]],
                              algorithm: str = "", payload: str | None = None, op: str = "",
                              forced: bool = False) -> Request[R]: ...

        def _enter_collective(self, call: str, algorithm: str = "", payload: str | None = None,
                              op: str = "", forced: bool = False
                              ) -> tuple[CollContext, Any, float]: ...  # Any: the call it is inside

        def _leave_collective(self, outer: Any) -> None: ...

        def _trace_collective(self, ctx: CollContext, start: float) -> None: ...

    # ---- plumbing ----

    def _choose(self, name: str, algorithm: str | None, nbytes: int,
                commutative: bool = True, arrays: bool = True) -> str:
        """Return the algorithm: ``algorithm=``, then ``run(algorithms=...)``, then the default.

        The default may look only at what every member agrees on (the world
        size, the op, and the payload that ``_collective`` compares), so that
        members never choose differently.
        """
        if algorithm is None:
            algorithm = self.group.engine.algorithms.get(name)
        if algorithm is None:
            chosen = str(family(name).default(self.size, nbytes, commutative=commutative, arrays=arrays))
            shaped = SHAPED.get(name)
            if (shaped is not None and chosen not in shaped[1] and commutative
                    and self.group.engine.fidelity == "message" and _on_nodes(self)):
                return shaped[0]  # a platform with nodes: the node-aware one
            return chosen
        check_algorithm(name, algorithm)
        return algorithm

    def _root(self, call: str, what: str, root: int) -> None:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
            raise ValueError(f"rank {self.rank}: {call}: {what} must be in range({self.size}) for "
                             f"this comm; pass the rank that holds the data")

    def _op(self, call: str, op: object) -> ReduceOp:
        if op is None:  # the default, on every reduction call: no lookup
            return ReduceOp.SUM
        try:
            return as_op(op)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"rank {self.rank}: {call}: {exc}") from None

    def _seq_arg(self, call: str, what: str, objs: object) -> Sequence[Any]:
        if not isinstance(objs, (list, tuple)) or len(objs) != self.size:
            got = f"a {type(objs).__name__} of length {len(objs)}" if isinstance(objs, (list, tuple)) \
                else type(objs).__name__
            raise ValueError(f"rank {self.rank}: {call}: {what} must be a list with one item per "
                             f"rank ({self.size}), got {got}")
        return objs

    def _algorithm(self, name: str, algo: str) -> Callable[..., Any]:
        """Return the function that runs ``algo``: the algorithm, or its analytic twin.

        Under ``run(fidelity="analytic")`` the twin has the same signature but
        resolves the whole call in one step (``analytic.py``); the body around
        it (in-place copies, traces, nonblocking helpers) is the same.
        """
        algorithm = lookup(name, algo)
        if self.group.engine.fidelity == "analytic":
            if algorithm.shaped and _on_nodes(self):
                raise ValueError(f"rank {self.rank}: {name}(algorithm={algo!r}): it follows the nodes "
                                 "of the run's platform, at message fidelity only; run with "
                                 "fidelity='message', or pick another algorithm")
            return _twin(algorithm)
        return algorithm.run

    def _forced(self, name: str, algorithm: str | None) -> bool:
        """Whether the algorithm was asked for (on the call or the run) rather than the default."""
        return algorithm is not None or name in self.group.engine.algorithms

    def _go(self, call: str, algorithm: str, body: Callable[[CollContext], Awaitable[R]],
            nonblocking: bool, payload: str | None = None, op: str = "", forced: bool = False) -> Any:
        # payload: what every rank must pass alike (None: nothing compared); op: a user op's
        # definition. Both are compared with the first member's at the call (Comm._collective).
        if nonblocking:
            return self._start_collective(call, body, algorithm, payload, op, forced)
        return self._run_collective(call, body, algorithm, payload, op, forced)

    # ---- barrier ----

    def _barrier(self, algorithm: str | None, nonblocking: bool) -> Any:
        call = "barrier()"
        algo = self._choose("barrier", algorithm, 0)
        fn = self._algorithm("barrier", algo)
        return self._go(call, algo, fn, nonblocking, forced=self._forced("barrier", algorithm))

    async def barrier(self, *, algorithm: str | None = None) -> None:
        """Wait until every member has called barrier.

        Costs ``ceil(log2 p) * alpha`` under AlphaBeta with the default
        dissemination algorithm (its messages count 0 bytes).
        """
        algo = self._choose("barrier", algorithm, 0)
        fn = self._algorithm("barrier", algo)
        ctx, outer, start = self._enter_collective(  # _run_collective, inline
            "barrier()", algo, None, "", algorithm is not None or "barrier" in self.group.engine.algorithms)
        try:
            await fn(ctx)
        finally:
            self._leave_collective(outer)
        if self.group.engine.kernel.trace is not None:
            self._trace_collective(ctx, start)

    def ibarrier(self, *, algorithm: str | None = None) -> Request[None]:
        """Start a barrier; the request completes once every member has entered it."""
        req: Request[None] = self._barrier(algorithm, True)
        return req

    # ---- broadcast ----

    def _broadcast(self, obj: Any, src: int, algorithm: str | None, nonblocking: bool) -> Any:
        call = f"broadcast(src={src})"
        self._root(call, "src", src)
        # every member passes an array of one shape and dtype (compared, so the size-based
        # default agrees), or a placeholder (None, an object) that compares with anything
        array = _is_array(obj)
        algo = self._choose("broadcast", algorithm, _nbytes(obj), arrays=array)
        fn = self._algorithm("broadcast", algo)

        async def body(c: CollContext) -> Any:
            value = await fn(c, obj, src)
            return obj if c.rank == src else _in_place(obj, value)
        return self._go(call, algo, body, nonblocking, describe(obj) if array else None,
                        forced=self._forced("broadcast", algorithm))

    async def broadcast(self, obj: Any, src: int = 0, *, algorithm: str | None = None) -> Any:
        """Return ``src``'s ``obj`` on every rank; an array is filled in place and returned.

        On ranks other than ``src``, ``obj`` is only a placeholder (an array of the
        right shape and dtype to fill, or anything for objects).
        """
        return await self._broadcast(obj, src, algorithm, False)

    def ibroadcast(self, obj: Any, src: int = 0, *, algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``broadcast``."""
        req: Request[Any] = self._broadcast(obj, src, algorithm, True)
        return req

    # ---- scatter / gather ----

    def _scatter(self, objs: Any, src: int, buf: Any, algorithm: str | None,
                 nonblocking: bool) -> Any:
        call = f"scatter(src={src})"
        self._root(call, "src", src)
        if self.rank == src:
            objs = self._seq_arg(call, "objs", objs)
        algo = self._choose("scatter", algorithm, _nbytes(buf), arrays=_is_array(buf))
        fn = self._algorithm("scatter", algo)

        async def body(c: CollContext) -> Any:
            mine = await fn(c, objs if c.rank == src else None, src)
            return _in_place(buf, mine) if buf is not None else mine
        return self._go(call, algo, body, nonblocking, forced=self._forced("scatter", algorithm))

    async def scatter(self, objs: Sequence[Any] | None, src: int = 0, buf: Any = None, *,
                      algorithm: str | None = None) -> Any:
        """Return element ``rank`` of ``src``'s list (``objs`` is read on ``src`` only).

        With ``buf``, the element (an array) is copied into it and ``buf`` is returned.
        """
        return await self._scatter(objs, src, buf, algorithm, False)

    def iscatter(self, objs: Sequence[Any] | None, src: int = 0, buf: Any = None, *,
                 algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``scatter``."""
        req: Request[Any] = self._scatter(objs, src, buf, algorithm, True)
        return req

    def _gather(self, obj: Any, dst: int, algorithm: str | None, nonblocking: bool) -> Any:
        call = f"gather(dst={dst})"
        self._root(call, "dst", dst)
        algo = self._choose("gather", algorithm, _nbytes(obj), arrays=_is_array(obj))
        fn = self._algorithm("gather", algo)
        return self._go(call, algo, lambda c: fn(c, obj, dst), nonblocking,
                        forced=self._forced("gather", algorithm))

    async def gather(self, obj: Any, dst: int = 0, *, algorithm: str | None = None) -> list[Any] | None:
        """Return the list of every rank's ``obj`` on ``dst`` and ``None`` elsewhere."""
        result: list[Any] | None = await self._gather(obj, dst, algorithm, False)
        return result

    def igather(self, obj: Any, dst: int = 0, *, algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``gather``."""
        req: Request[Any] = self._gather(obj, dst, algorithm, True)
        return req

    # ---- reductions ----

    def _reduce(self, obj: Any, dst: int, op: Any, algorithm: str | None,
                nonblocking: bool) -> Any:
        rop = self._op("reduce", op)
        call = f"reduce(dst={dst}, op={rop.name})"
        self._root(call, "dst", dst)
        rop.check(obj, self.rank, call)
        algo = self._choose("reduce", algorithm, _nbytes(obj), rop.commutative, _is_array(obj))
        fn = self._algorithm("reduce", algo)

        async def body(c: CollContext) -> Any:
            value = await fn(c, obj, rop, dst)
            return _in_place(obj, value) if c.rank == dst else None
        return self._go(call, algo, body, nonblocking, _payload(obj), _op_key(rop),
                        self._forced("reduce", algorithm))

    async def reduce(self, obj: Any, dst: int = 0, op: Any = None, *,
                     algorithm: str | None = None) -> Any:
        """Reduce every rank's ``obj`` with ``op`` (default SUM) onto ``dst``.

        On ``dst`` an array is updated in place and returned; other ranks get
        ``None`` and their buffers stay unchanged.
        """
        return await self._reduce(obj, dst, op, algorithm, False)

    def ireduce(self, obj: Any, dst: int = 0, op: Any = None, *,
                algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``reduce``."""
        req: Request[Any] = self._reduce(obj, dst, op, algorithm, True)
        return req

    def _all_reduce_setup(self, obj: Any, op: Any, algorithm: str | None
                          ) -> tuple[str, str, Callable[..., Awaitable[Any]], ReduceOp]:
        rop = self._op("all_reduce", op)
        call = f"all_reduce(op={rop.name})"
        rop.check(obj, self.rank, call)
        algo = self._choose("all_reduce", algorithm, _nbytes(obj), rop.commutative, _is_array(obj))
        return call, algo, self._algorithm("all_reduce", algo), rop

    def _all_reduce_call(self, obj: Any, op: Any, algorithm: str | None) -> tuple[
            str, str, Callable[..., Awaitable[Any]], ReduceOp, str, str, bool]:
        """``_all_reduce_setup`` with what the call is verified by (payload, op, forced).

        Remembered on the communicator for a float or a numpy array under a
        built-in op: the next call with the same op, algorithm, dtype and
        shape looks it up instead of checking and choosing again. A call that
        fails its checks is never remembered.
        """
        key = _setup_key(obj, op, algorithm)
        setups = self.group.setups
        if key is not None:
            found = setups.get(key)
            if found is not None:
                return found
        call, algo, fn, rop = self._all_reduce_setup(obj, op, algorithm)
        setup = (call, algo, fn, rop, _payload(obj), "" if rop.fn is None else _op_key(rop),
                 self._forced("all_reduce", algorithm))
        if key is not None and len(setups) < _SETUPS_LIMIT:
            setups[key] = setup
        return setup

    def _all_reduce(self, obj: Any, op: Any, algorithm: str | None, nonblocking: bool) -> Any:
        call, algo, fn, rop = self._all_reduce_setup(obj, op, algorithm)

        async def body(c: CollContext) -> Any:
            return _in_place(obj, await fn(c, obj, rop))
        return self._go(call, algo, body, nonblocking, _payload(obj), _op_key(rop),
                        self._forced("all_reduce", algorithm))

    async def all_reduce(self, obj: Any, op: Any = None, *, algorithm: str | None = None) -> Any:
        """Reduce every rank's ``obj`` with ``op`` (default SUM) and return it everywhere.

        Arrays are updated in place and returned; Python values come back new.
        With the ring algorithm under AlphaBeta it costs ``2(p-1)(alpha + n/p*beta)``.
        """
        call, algo, fn, rop, payload, op_key, forced = self._all_reduce_call(obj, op, algorithm)
        ctx, outer, start = self._enter_collective(call, algo, payload, op_key, forced)  # _run_collective, inline
        try:
            result = await fn(ctx, obj, rop)
        finally:
            self._leave_collective(outer)
        if self.group.engine.kernel.trace is not None:
            self._trace_collective(ctx, start)
        return _in_place(obj, result)

    def iall_reduce(self, obj: Any, op: Any = None, *, algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``all_reduce``."""
        req: Request[Any] = self._all_reduce(obj, op, algorithm, True)
        return req

    def _reduce_scatter(self, objs: Any, op: Any, algorithm: str | None,
                        nonblocking: bool) -> Any:
        rop = self._op("reduce_scatter", op)
        call = f"reduce_scatter(op={rop.name})"
        objs = self._seq_arg(call, "objs", objs)
        for item in objs:
            rop.check(item, self.rank, call)
        nbytes = sum(_nbytes(o) for o in objs)
        algo = self._choose("reduce_scatter", algorithm, nbytes, rop.commutative,
                            all(_is_array(o) for o in objs))
        fn = self._algorithm("reduce_scatter", algo)
        return self._go(call, algo, lambda c: fn(c, list(objs), rop), nonblocking, _payloads(objs),
                        _op_key(rop), self._forced("reduce_scatter", algorithm))

    async def reduce_scatter(self, objs: Sequence[Any], op: Any = None, *,
                             algorithm: str | None = None) -> Any:
        """Return element ``rank`` of the elementwise reduction of every rank's list."""
        return await self._reduce_scatter(objs, op, algorithm, False)

    def ireduce_scatter(self, objs: Sequence[Any], op: Any = None, *,
                        algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``reduce_scatter``."""
        req: Request[Any] = self._reduce_scatter(objs, op, algorithm, True)
        return req

    def _scan(self, name: str, obj: Any, op: Any, algorithm: str | None,
              nonblocking: bool) -> Any:
        rop = self._op(name, op)
        call = f"{name}(op={rop.name})"
        rop.check(obj, self.rank, call)
        algo = self._choose(name, algorithm, _nbytes(obj), rop.commutative, _is_array(obj))
        fn = self._algorithm(name, algo)
        return self._go(call, algo, lambda c: fn(c, obj, rop), nonblocking, _payload(obj), _op_key(rop),
                        self._forced(name, algorithm))

    async def scan(self, obj: Any, op: Any = None, *, algorithm: str | None = None) -> Any:
        """Return the inclusive prefix reduction ``obj_0 op ... op obj_rank`` (a new value)."""
        return await self._scan("scan", obj, op, algorithm, False)

    def iscan(self, obj: Any, op: Any = None, *, algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``scan``."""
        req: Request[Any] = self._scan("scan", obj, op, algorithm, True)
        return req

    async def exscan(self, obj: Any, op: Any = None, *, algorithm: str | None = None) -> Any:
        """Return the exclusive prefix reduction ``obj_0 op ... op obj_(rank-1)``; ``None`` on rank 0."""
        return await self._scan("exscan", obj, op, algorithm, False)

    def iexscan(self, obj: Any, op: Any = None, *, algorithm: str | None = None) -> Request[Any]:
        """Nonblocking ``exscan``."""
        req: Request[Any] = self._scan("exscan", obj, op, algorithm, True)
        return req

    # ---- all_gather / all_to_all ----

    def _all_gather(self, obj: Any, algorithm: str | None, nonblocking: bool) -> Any:
        call = "all_gather()"
        algo = self._choose("all_gather", algorithm, _nbytes(obj), arrays=_is_array(obj))
        fn = self._algorithm("all_gather", algo)
        return self._go(call, algo, lambda c: fn(c, obj), nonblocking,
                        forced=self._forced("all_gather", algorithm))

    async def all_gather(self, obj: Any, *, algorithm: str | None = None) -> list[Any]:
        """Return the list of every rank's ``obj`` on every rank (shapes may differ per rank)."""
        result: list[Any] = await self._all_gather(obj, algorithm, False)
        return result

    def iall_gather(self, obj: Any, *, algorithm: str | None = None) -> Request[list[Any]]:
        """Nonblocking ``all_gather``."""
        req: Request[list[Any]] = self._all_gather(obj, algorithm, True)
        return req

    def _all_to_all(self, objs: Any, algorithm: str | None, nonblocking: bool) -> Any:
        call = "all_to_all()"
        objs = self._seq_arg(call, "objs", objs)
        algo = self._choose("all_to_all", algorithm, sum(_nbytes(o) for o in objs),
                            arrays=all(_is_array(o) for o in objs))
        fn = self._algorithm("all_to_all", algo)
        return self._go(call, algo, lambda c: fn(c, list(objs)), nonblocking,
                        forced=self._forced("all_to_all", algorithm))

    async def all_to_all(self, objs: Sequence[Any], *, algorithm: str | None = None) -> list[Any]:
        """Return a list whose element ``i`` is rank ``i``'s ``objs[rank]``."""
        result: list[Any] = await self._all_to_all(objs, algorithm, False)
        return result

    def iall_to_all(self, objs: Sequence[Any], *, algorithm: str | None = None) -> Request[list[Any]]:
        """Nonblocking ``all_to_all``."""
        req: Request[list[Any]] = self._all_to_all(objs, algorithm, True)
        return req
