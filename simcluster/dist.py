"""torch.distributed / ignite.distributed-style functions bound to the current rank.

Inside the function passed to ``sc.run``, these module functions find the rank
being run (``engine.current_task()``) and call its world ``Comm``, so code
written against ``torch.distributed`` or ``ignite.distributed`` ports by adding
``await``::

    import simcluster.dist as dist

    async def main(comm):
        t = np.arange(2) + 1 + 2 * dist.get_rank()
        await dist.all_reduce(t, op=dist.ReduceOp.SUM)     # in place, as torch does
        work = dist.broadcast(t, src=0, async_op=True)     # a Request (torch's Work)
        await work.wait()

Every communication function is a plain function that checks its arguments and
binds the rank at the call, then returns an awaitable: a coroutine for blocking
calls, or, with ``async_op=True``, the ``Request`` itself, already started
(it must be awaited, waited or tested to completion, like any request).

Where this facade follows torch rather than simcluster's ``Comm``:

* ``group`` is a ``Comm`` from ``new_group`` (or ``None`` for the world), and
  ``src``/``dst`` are **world** ranks, translated into the group as torch does.
  ``get_rank(group)`` is the rank inside the group. Non-members get ``None``
  from ``new_group`` and must not make calls on the group (torch gives them a
  placeholder whose calls do nothing).
* ``new_group`` orders members by world rank, as torch does.
* ``recv(tensor, src)`` fills ``tensor`` and returns the sender's world rank;
  ``recv(src=...)`` with no tensor returns the payload instead.

Where it follows ignite: ``all_gather(obj)`` returns a list of every rank's
value (ignite concatenates tensors instead), ``broadcast(obj, src)`` returns
``src``'s value, and ops may be given as strings (``op="SUM"``).

Rule 1: this module only translates arguments and copies results into the
caller's containers; every message goes through the rank's ``Comm``.
Rule 2: this module's own checks (outside a rank, a bad group, a src/dst
outside the group, a list of the wrong length) fail at the call, even when the
awaitable is never awaited; the ``Comm`` checks the rest where it always does.
Rule 3: under ``checks="strict"`` each awaitable is noted (``_noted``), so that
one never awaited (``dist.all_reduce(t)``, the torch habit) fails its rank with
the call, its line and "add await", instead of leaving ``t`` unreduced.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, MutableSequence, Sequence
from typing import Any, Literal, TypeVar, overload

import numpy as np

from .engine import awaits as _awaits
from .comm import Comm
from .comm import current_comm
from .engine.assembly import current_task
from .matching import ANY_SOURCE
from .ops import ReduceOp as ReduceOp
from .request import Request, wait_any

__all__ = [
    "ReduceOp", "all_gather", "all_gather_object", "all_reduce", "all_to_all", "barrier",
    "broadcast", "broadcast_object_list", "gather", "gather_object", "get_global_rank",
    "get_group_rank", "get_rank", "get_world_size", "irecv", "is_initialized", "isend",
    "new_group", "recv", "reduce", "reduce_scatter", "scatter", "scatter_object_list", "send",
]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


A = TypeVar("A")
T = TypeVar("T")

Op = ReduceOp | str
"""A reduction: a ``ReduceOp`` or its name (``"SUM"``, ``"MAX"``, ...)."""


# ---- finding the rank and its communicator ----

def _world_comm(name: str) -> Comm:
    comm = current_comm()
    if comm is None:
        raise RuntimeError(f"simcluster.dist.{name}(): called outside a rank; call it from the "
                           "function passed to sc.run")
    return comm


def _comm(name: str, group: Comm | None) -> Comm:
    """Return the communicator a call runs on: ``group``, or the world for None."""
    world = _world_comm(name)
    if group is None:
        return world
    if not isinstance(group, Comm):
        raise TypeError(f"rank {world.rank}: {name}(group={group!r}): group must be a Comm from "
                        "dist.new_group(), or None for the world")
    if group.world_rank != world.rank:
        raise ValueError(f"rank {world.rank}: {name}(group={group!r}): this group handle belongs to "
                         f"world rank {group.world_rank}; pass the Comm that new_group returned on "
                         "this rank")
    return group


def _member(comm: Comm, name: str, what: str, rank: int) -> int:
    """Return the position in ``comm`` of world rank ``rank``."""
    ranks = comm.world_ranks
    try:
        return ranks.index(rank)
    except ValueError:
        raise ValueError(f"rank {comm.world_rank}: {name}({what}={rank!r}): world rank {rank!r} is "
                         f"not a member of this group (world ranks {ranks}); src/dst are world "
                         "ranks, as in torch.distributed") from None


def _local(comm: Comm, name: str, what: str, rank: int) -> int:
    """Translate a world rank into ``comm``'s numbering (torch's src/dst convention)."""
    if comm.name == "world":
        return rank  # the same numbering: Comm checks the range itself
    return _member(comm, name, what, rank)


def _check_list(comm: Comm, name: str, what: str, items: object) -> MutableSequence[Any]:
    if not isinstance(items, MutableSequence) or len(items) != comm.size:
        got = f"{len(items)} items" if isinstance(items, MutableSequence) else f"a {type(items).__name__}"
        raise ValueError(f"rank {comm.world_rank}: {name}: {what} must be a list with one item per "
                         f"rank of the group ({comm.size}), got {got}")
    return items


def _root_items(comm: Comm, name: str, what: str, items: Sequence[Any] | None,
                root: int) -> list[Any] | None:
    """Return the root's list to scatter as a list (None on other ranks, which never read it)."""
    if comm.rank != root:
        return None
    return list(_check_list(comm, name, what, [] if items is None else list(items)))


def _fill(target: Any, value: Any, name: str, rank: int) -> Any:
    """Copy ``value`` into the array ``target`` in place and return it; else return ``value``."""
    if hasattr(target, "shape") and hasattr(target, "__setitem__") and hasattr(value, "shape"):
        if tuple(target.shape) != tuple(value.shape):
            raise ValueError(f"rank {rank}: {name}: received shape {tuple(value.shape)} does not fit "
                             f"the output array of shape {tuple(target.shape)}; allocate outputs of "
                             "the sender's shape")
        if isinstance(target, np.ndarray):
            np.copyto(target, value, casting="same_kind")  # refuse float -> int, as torch does
        else:
            target[...] = value  # another array library: its own assignment rules
        return target
    return value


def _fill_list(items: MutableSequence[Any], values: Sequence[Any], name: str, rank: int) -> Any:
    """Fill ``items`` in place from ``values``: arrays by copy, other slots by replacement."""
    for i, value in enumerate(values):
        items[i] = _fill(items[i], value, name, rank)
    return items


def _then(comm: Comm, req: Request[Any], then: Callable[[Any], T], op: str) -> Request[T]:
    """Return a request that completes with ``then(result of req)`` when ``req`` completes.

    ``req`` was started at the call (so collectives keep their order and
    receives are posted); a helper of this rank waits for it and applies
    ``then`` at the same virtual time, so the caller's containers are filled
    by the time the returned request is done.
    """
    async def follow() -> T:
        _, value = await wait_any([req])
        return then(value)
    done: Request[T] = comm.kernel.spawn(follow(), op)
    return done


async def _after(awaitable: Coroutine[Any, Any, Any], then: Callable[[Any], T]) -> T:
    return then(await awaitable)


def _noted(comm: Comm, coro: Coroutine[Any, Any, T], name: str, **shown: object) -> Coroutine[Any, Any, T]:
    """Return ``coro``; in strict runs, note it, so that one never awaited fails its rank.

    torch users write ``dist.all_reduce(t)`` without ``await``; the error then
    names ``dist.<name>(shown arguments)`` and the user's line (``engine.awaits``).
    """
    kernel = comm.kernel
    if kernel.strict:
        _awaits.note(kernel, coro, f"dist.{name}",
                     tuple((key, _awaits.show(key, value)) for key, value in shown.items()))
    return coro


# ---- facts ----

def is_initialized() -> bool:
    """Return True when called from inside a rank (there is a world to talk to)."""
    task = current_task()
    return task is not None and task.comm is not None


def get_rank(group: Comm | None = None) -> int:
    """Return this rank's number in ``group`` (the world when None).

    Raises:
        RuntimeError: called outside a rank.
    """
    return _comm("get_rank", group).rank


def get_world_size(group: Comm | None = None) -> int:
    """Return the number of ranks in ``group`` (the world when None)."""
    return _comm("get_world_size", group).size


def get_global_rank(group: Comm, group_rank: int) -> int:
    """Return the world rank of member ``group_rank`` of ``group``."""
    comm = _comm("get_global_rank", group)
    if isinstance(group_rank, bool) or not isinstance(group_rank, int) or not 0 <= group_rank < comm.size:
        raise ValueError(f"rank {comm.world_rank}: get_global_rank(group_rank={group_rank!r}): "
                         f"group_rank must be in range({comm.size})")
    return comm.world_ranks[group_rank]


def get_group_rank(group: Comm, global_rank: int) -> int:
    """Return the rank inside ``group`` of world rank ``global_rank``."""
    comm = _comm("get_group_rank", group)
    return _member(comm, "get_group_rank", "global_rank", global_rank)


# ---- groups ----

def new_group(ranks: Sequence[int] | None = None) -> Coroutine[Any, Any, Comm | None]:
    """Make a group of the world ranks ``ranks`` (every rank when None).

    Collective over the world, as in torch: every rank calls it with the same
    ranks, members in any order (the group numbers them by world rank).
    Costs one all_gather of the list.

    Returns:
        An awaitable giving this rank's ``Comm`` on the group, or ``None`` on
        ranks outside it.
    """
    world = _world_comm("new_group")
    members = list(range(world.size)) if ranks is None else sorted(ranks)
    return _noted(world, world.new_group(members), "new_group", ranks=ranks)


# ---- collectives ----

@overload
def barrier(group: Comm | None = None, async_op: Literal[False] = False) -> Coroutine[Any, Any, None]: ...
@overload
def barrier(group: Comm | None = None, *, async_op: Literal[True]) -> Request[None]: ...
@overload
def barrier(group: Comm | None = None,
            async_op: bool = False) -> Coroutine[Any, Any, None] | Request[None]: ...


def barrier(group: Comm | None = None, async_op: bool = False) -> Any:
    """Wait until every rank of ``group`` has called barrier.

    Costs ``ceil(log2 p) * alpha`` under AlphaBeta with the default algorithm.

    Returns:
        An awaitable; with ``async_op=True`` the started ``Request``.
    """
    comm = _comm("barrier", group)
    return comm.ibarrier() if async_op else _noted(comm, comm.barrier(), "barrier")


@overload
def all_reduce(tensor: A, op: Op = ..., group: Comm | None = None,
               async_op: Literal[False] = False) -> Coroutine[Any, Any, A]: ...
@overload
def all_reduce(tensor: A, op: Op = ..., group: Comm | None = None, *,
               async_op: Literal[True]) -> Request[A]: ...
@overload
def all_reduce(tensor: A, op: Op = ..., group: Comm | None = None,
               async_op: bool = False) -> Coroutine[Any, Any, A] | Request[A]: ...


def all_reduce(tensor: Any, op: Op = ReduceOp.SUM, group: Comm | None = None,
               async_op: bool = False) -> Any:
    """Reduce ``tensor`` across ``group`` with ``op``; every rank gets the result.

    Arrays are updated in place (as torch does) and also returned; Python
    values come back as a new value (as ignite does). Completes when this
    rank has the result; the default algorithm depends on size (ring costs
    ``2(p-1)(alpha + n/p*beta)`` under AlphaBeta).

    Args:
        tensor: an array to reduce in place, or a number/object.
        op: a ``ReduceOp`` or its name, e.g. ``"SUM"``.
        group: a group from ``new_group``; None for the world.
        async_op: return the started ``Request`` instead of a coroutine.
    """
    comm = _comm("all_reduce", group)
    if async_op:
        return comm.iall_reduce(tensor, op)
    return _noted(comm, comm.all_reduce(tensor, op), "all_reduce", op=op)


@overload
def broadcast(tensor: A, src: int = 0, group: Comm | None = None, async_op: Literal[False] = False,
              *, safe_mode: bool = False) -> Coroutine[Any, Any, A]: ...
@overload
def broadcast(tensor: A, src: int = 0, group: Comm | None = None, *, async_op: Literal[True],
              safe_mode: bool = False) -> Request[A]: ...
@overload
def broadcast(tensor: A, src: int = 0, group: Comm | None = None, async_op: bool = False,
              *, safe_mode: bool = False) -> Coroutine[Any, Any, A] | Request[A]: ...


def broadcast(tensor: Any, src: int = 0, group: Comm | None = None, async_op: bool = False,
              *, safe_mode: bool = False) -> Any:
    """Send world rank ``src``'s ``tensor`` to every rank of ``group``.

    On other ranks an array is filled in place (it must have src's shape and
    dtype); any other value there is only a placeholder, and the result is
    ``src``'s value, as ``ignite.distributed.broadcast`` returns it. Completes
    when this rank holds the value.

    Args:
        tensor: the value on ``src``; an array to fill or a placeholder elsewhere.
        src: the world rank that holds the value.
        group: a group from ``new_group``; None for the world.
        async_op: return the started ``Request`` instead of a coroutine.
        safe_mode: accepted for ignite compatibility; placeholders are never
            read, so every call is safe.
    """
    comm = _comm("broadcast", group)
    root = _local(comm, "broadcast", "src", src)
    if async_op:
        return comm.ibroadcast(tensor, root)
    return _noted(comm, comm.broadcast(tensor, root), "broadcast", src=src)


@overload
def reduce(tensor: A, dst: int = 0, op: Op = ..., group: Comm | None = None,
           async_op: Literal[False] = False) -> Coroutine[Any, Any, A | None]: ...
@overload
def reduce(tensor: A, dst: int = 0, op: Op = ..., group: Comm | None = None, *,
           async_op: Literal[True]) -> Request[A | None]: ...
@overload
def reduce(tensor: A, dst: int = 0, op: Op = ..., group: Comm | None = None,
           async_op: bool = False) -> Coroutine[Any, Any, A | None] | Request[A | None]: ...


def reduce(tensor: Any, dst: int = 0, op: Op = ReduceOp.SUM, group: Comm | None = None,
           async_op: bool = False) -> Any:
    """Reduce ``tensor`` across ``group`` onto world rank ``dst``.

    On ``dst`` an array is updated in place and returned; other ranks get
    ``None`` and keep their buffers unchanged (torch's gloo backend leaves
    partial sums there; simcluster does not).
    """
    comm = _comm("reduce", group)
    root = _local(comm, "reduce", "dst", dst)
    if async_op:
        return comm.ireduce(tensor, root, op)
    return _noted(comm, comm.reduce(tensor, root, op), "reduce", dst=dst, op=op)


@overload
def all_gather(tensor_list_or_obj: Any, tensor: None = None, group: Comm | None = None,
               async_op: Literal[False] = False) -> Coroutine[Any, Any, list[Any]]: ...
@overload
def all_gather(tensor_list_or_obj: Any, tensor: None = None, group: Comm | None = None, *,
               async_op: Literal[True]) -> Request[list[Any]]: ...
@overload
def all_gather(tensor_list_or_obj: MutableSequence[Any], tensor: object, group: Comm | None = None,
               async_op: Literal[False] = False) -> Coroutine[Any, Any, list[Any]]: ...
@overload
def all_gather(tensor_list_or_obj: MutableSequence[Any], tensor: object, group: Comm | None = None,
               *, async_op: Literal[True]) -> Request[list[Any]]: ...
@overload
def all_gather(tensor_list_or_obj: Any, tensor: object = None, group: Comm | None = None,
               async_op: bool = False) -> Coroutine[Any, Any, list[Any]] | Request[list[Any]]: ...


def all_gather(tensor_list_or_obj: Any, tensor: object = None, group: Comm | None = None,
               async_op: bool = False) -> Any:
    """Collect one value from every rank of ``group``, on every rank.

    Two forms:

    * torch: ``all_gather(tensor_list, tensor)`` fills ``tensor_list`` in place
      (arrays are copied into, other items replaced) and returns it;
    * ignite: ``all_gather(obj)`` returns a new list of every rank's ``obj``.

    Completes when this rank holds every value.

    Raises:
        ValueError: ``tensor_list`` does not have one item per rank of the group.
    """
    comm = _comm("all_gather", group)
    if tensor is None:
        if async_op:
            return comm.iall_gather(tensor_list_or_obj)
        return _noted(comm, comm.all_gather(tensor_list_or_obj), "all_gather")
    name = "all_gather(tensor_list, tensor)"
    out = _check_list(comm, name, "tensor_list", tensor_list_or_obj)

    def then(values: list[Any]) -> Any:
        return _fill_list(out, values, name, comm.world_rank)
    if async_op:
        return _then(comm, comm.iall_gather(tensor), then, name)
    return _noted(comm, _after(comm.all_gather(tensor), then), "all_gather")


@overload
def gather(tensor: object, gather_list: MutableSequence[Any] | None = None, dst: int = 0,
           group: Comm | None = None, async_op: Literal[False] = False
           ) -> Coroutine[Any, Any, list[Any] | None]: ...
@overload
def gather(tensor: object, gather_list: MutableSequence[Any] | None = None, dst: int = 0,
           group: Comm | None = None, *, async_op: Literal[True]) -> Request[list[Any] | None]: ...
@overload
def gather(tensor: object, gather_list: MutableSequence[Any] | None = None, dst: int = 0,
           group: Comm | None = None, async_op: bool = False
           ) -> Coroutine[Any, Any, list[Any] | None] | Request[list[Any] | None]: ...


def gather(tensor: object, gather_list: MutableSequence[Any] | None = None, dst: int = 0,
           group: Comm | None = None, async_op: bool = False) -> Any:
    """Collect every rank's ``tensor`` on world rank ``dst``.

    On ``dst``, ``gather_list`` (when given) is filled in place and returned;
    without it a new list is returned. Other ranks get ``None`` and their
    ``gather_list`` is ignored (torch's tutorials pass ``[]`` there).
    Completes on ``dst`` once every value has arrived, elsewhere once this
    rank's value has been sent.
    """
    comm = _comm("gather", group)
    root = _local(comm, "gather", "dst", dst)
    if gather_list is None or comm.rank != root:
        if async_op:
            return comm.igather(tensor, root)
        return _noted(comm, comm.gather(tensor, root), "gather", dst=dst)
    name = f"gather(dst={dst})"
    out = _check_list(comm, name, "gather_list", gather_list)

    def then(values: list[Any]) -> Any:
        return _fill_list(out, values, name, comm.world_rank)
    if async_op:
        return _then(comm, comm.igather(tensor, root), then, name)
    return _noted(comm, _after(comm.gather(tensor, root), then), "gather", dst=dst)


@overload
def scatter(tensor: Any, scatter_list: Sequence[Any] | None = None, src: int = 0,
            group: Comm | None = None, async_op: Literal[False] = False) -> Coroutine[Any, Any, Any]: ...
@overload
def scatter(tensor: Any, scatter_list: Sequence[Any] | None = None, src: int = 0,
            group: Comm | None = None, *, async_op: Literal[True]) -> Request[Any]: ...
@overload
def scatter(tensor: Any, scatter_list: Sequence[Any] | None = None, src: int = 0,
            group: Comm | None = None, async_op: bool = False) -> Coroutine[Any, Any, Any] | Request[Any]: ...


def scatter(tensor: Any, scatter_list: Sequence[Any] | None = None, src: int = 0,
            group: Comm | None = None, async_op: bool = False) -> Any:
    """Give rank ``i`` of ``group`` item ``i`` of world rank ``src``'s ``scatter_list``.

    ``tensor`` is the output: an array is filled in place and returned; pass
    ``None`` to get the item itself. ``scatter_list`` is read on ``src`` only
    (other ranks may pass ``None`` or ``[]``). Completes when this rank holds
    its item.
    """
    comm = _comm("scatter", group)
    root = _local(comm, "scatter", "src", src)
    items = _root_items(comm, f"scatter(src={src})", "scatter_list", scatter_list, root)
    if async_op:
        return comm.iscatter(items, root, buf=tensor)
    return _noted(comm, comm.scatter(items, root, buf=tensor), "scatter", src=src)


@overload
def reduce_scatter(output: Any, input_list: Sequence[Any], op: Op = ..., group: Comm | None = None,
                   async_op: Literal[False] = False) -> Coroutine[Any, Any, Any]: ...
@overload
def reduce_scatter(output: Any, input_list: Sequence[Any], op: Op = ..., group: Comm | None = None,
                   *, async_op: Literal[True]) -> Request[Any]: ...
@overload
def reduce_scatter(output: Any, input_list: Sequence[Any], op: Op = ..., group: Comm | None = None,
                   async_op: bool = False) -> Coroutine[Any, Any, Any] | Request[Any]: ...


def reduce_scatter(output: Any, input_list: Sequence[Any], op: Op = ReduceOp.SUM,
                   group: Comm | None = None, async_op: bool = False) -> Any:
    """Reduce every rank's ``input_list`` item by item; rank ``i`` gets item ``i``.

    ``output`` (an array) is filled in place and returned; pass ``None`` to
    get the reduced item itself.
    """
    comm = _comm("reduce_scatter", group)
    name = "reduce_scatter(output, input_list)"

    def then(value: Any) -> Any:
        return value if output is None else _fill(output, value, name, comm.world_rank)
    if async_op:
        return _then(comm, comm.ireduce_scatter(input_list, op), then, name)
    return _noted(comm, _after(comm.reduce_scatter(input_list, op), then), "reduce_scatter", op=op)


@overload
def all_to_all(output_list: MutableSequence[Any] | None, input_list: Sequence[Any],
               group: Comm | None = None, async_op: Literal[False] = False
               ) -> Coroutine[Any, Any, list[Any]]: ...
@overload
def all_to_all(output_list: MutableSequence[Any] | None, input_list: Sequence[Any],
               group: Comm | None = None, *, async_op: Literal[True]) -> Request[list[Any]]: ...
@overload
def all_to_all(output_list: MutableSequence[Any] | None, input_list: Sequence[Any],
               group: Comm | None = None, async_op: bool = False
               ) -> Coroutine[Any, Any, list[Any]] | Request[list[Any]]: ...


def all_to_all(output_list: MutableSequence[Any] | None, input_list: Sequence[Any],
               group: Comm | None = None, async_op: bool = False) -> Any:
    """Send item ``j`` of ``input_list`` to rank ``j``; item ``i`` of the result came from rank ``i``.

    ``output_list`` is filled in place and returned (arrays copied into,
    other items replaced); pass ``None`` to get a new list.
    """
    comm = _comm("all_to_all", group)
    name = "all_to_all(output_list, input_list)"
    if output_list is None:
        if async_op:
            return comm.iall_to_all(input_list)
        return _noted(comm, comm.all_to_all(input_list), "all_to_all")
    out = _check_list(comm, name, "output_list", output_list)

    def then(values: list[Any]) -> Any:
        return _fill_list(out, values, name, comm.world_rank)
    if async_op:
        return _then(comm, comm.iall_to_all(input_list), then, name)
    return _noted(comm, _after(comm.all_to_all(input_list), then), "all_to_all")


# ---- object collectives (torch's *_object functions; blocking only, as in torch) ----

def all_gather_object(object_list: MutableSequence[Any], obj: object,
                      group: Comm | None = None) -> Coroutine[Any, Any, MutableSequence[Any]]:
    """Fill ``object_list`` (one slot per rank) with every rank's ``obj``; return it."""
    comm = _comm("all_gather_object", group)
    out = _check_list(comm, "all_gather_object", "object_list", object_list)

    def then(values: list[Any]) -> MutableSequence[Any]:
        out[:] = values
        return out
    return _noted(comm, _after(comm.all_gather(obj), then), "all_gather_object")


def broadcast_object_list(object_list: MutableSequence[Any], src: int = 0,
                          group: Comm | None = None) -> Coroutine[Any, Any, MutableSequence[Any]]:
    """Replace the items of ``object_list`` with world rank ``src``'s items; return it.

    Every rank passes a list of the same length; only ``src``'s items are read.
    """
    comm = _comm("broadcast_object_list", group)
    root = _local(comm, "broadcast_object_list", "src", src)
    if not isinstance(object_list, MutableSequence):
        raise TypeError(f"rank {comm.world_rank}: broadcast_object_list(src={src}): object_list must "
                        f"be a list, got {type(object_list).__name__}")
    size = len(object_list)

    def then(values: list[Any]) -> MutableSequence[Any]:
        if len(values) != size:
            raise ValueError(f"rank {comm.world_rank}: broadcast_object_list(src={src}): src sent "
                             f"{len(values)} objects but object_list holds {size}; pass lists of "
                             "the same length on every rank")
        object_list[:] = values
        return object_list
    coro = _after(comm.broadcast(list(object_list) if comm.rank == root else None, root), then)
    return _noted(comm, coro, "broadcast_object_list", src=src)


def gather_object(obj: object, object_gather_list: MutableSequence[Any] | None = None, dst: int = 0,
                  group: Comm | None = None) -> Coroutine[Any, Any, list[Any] | None]:
    """Collect every rank's ``obj`` on world rank ``dst`` (into ``object_gather_list`` when given)."""
    coro = gather(obj, object_gather_list, dst, group)
    return _noted(_comm("gather_object", group), coro, "gather_object", dst=dst)


def scatter_object_list(scatter_object_output_list: MutableSequence[Any],
                        scatter_object_input_list: Sequence[Any] | None = None, src: int = 0,
                        group: Comm | None = None) -> Coroutine[Any, Any, Any]:
    """Put item ``rank`` of ``src``'s input list into ``scatter_object_output_list[0]``; return it."""
    comm = _comm("scatter_object_list", group)
    root = _local(comm, "scatter_object_list", "src", src)
    items = _root_items(comm, f"scatter_object_list(src={src})", "scatter_object_input_list",
                        scatter_object_input_list, root)
    if not isinstance(scatter_object_output_list, MutableSequence) or not scatter_object_output_list:
        raise ValueError(f"rank {comm.world_rank}: scatter_object_list(src={src}): "
                         "scatter_object_output_list must be a list of at least one item")

    def then(value: Any) -> Any:
        scatter_object_output_list[0] = value
        return value
    return _noted(comm, _after(comm.scatter(items, root), then), "scatter_object_list", src=src)


# ---- point-to-point ----

def send(tensor: object, dst: int, group: Comm | None = None, tag: int = 0) -> Coroutine[Any, Any, None]:
    """Send ``tensor`` to world rank ``dst`` (standard mode).

    Completes at once up to ``eager_limit`` bytes; above it, once ``dst`` has
    posted a matching receive and the data has arrived (rendezvous).
    """
    comm = _comm("send", group)
    return _noted(comm, comm.send_coroutine(tensor, _local(comm, "send", "dst", dst), tag), "send", dst=dst,
                  tag=tag)


def isend(tensor: object, dst: int, group: Comm | None = None, tag: int = 0) -> Request[None]:
    """Start sending ``tensor`` to world rank ``dst``; return the ``Request`` at once.

    Do not change ``tensor`` until the request has completed (a strict run
    reports it as ``BufferHazardError``).
    """
    comm = _comm("isend", group)
    return comm.isend(tensor, _local(comm, "isend", "dst", dst), tag)


def _source(comm: Comm, name: str, src: int | None) -> int:
    return ANY_SOURCE if src is None else _local(comm, name, "src", src)


@overload
def recv(tensor: None = None, src: int | None = None, group: Comm | None = None,
         tag: int = 0) -> Coroutine[Any, Any, Any]: ...
@overload
def recv(tensor: object, src: int | None = None, group: Comm | None = None,
         tag: int = 0) -> Coroutine[Any, Any, int]: ...


def recv(tensor: object = None, src: int | None = None, group: Comm | None = None,
         tag: int = 0) -> Coroutine[Any, Any, Any]:
    """Receive a message from world rank ``src`` (any rank when None) with ``tag``.

    Completes when a matching message has arrived.

    Returns:
        With ``tensor`` (an array), the world rank of the sender, as torch
        returns it; ``tensor`` is filled in place. Without it, the payload
        itself (the sender is then in ``irecv(...).status``).
    """
    comm = _comm("recv", group)
    req = comm.irecv(tensor, _source(comm, "recv", src), tag)

    async def wait() -> Any:
        value = await req
        if tensor is None:
            return value
        status = req.status
        assert status is not None  # a completed receive always has one
        return comm.world_ranks[status.source]
    return _noted(comm, wait(), "recv", src=src, tag=tag)


def irecv(tensor: object = None, src: int | None = None, group: Comm | None = None,
          tag: int = 0) -> Request[Any]:
    """Post a receive from world rank ``src`` (any rank when None); return the ``Request``.

    ``await req`` returns ``tensor``, filled in place (or the payload when
    ``tensor`` is None); ``req.status.source`` is the sender's rank in the group.
    Do not read ``tensor`` before the request completes.
    """
    comm = _comm("irecv", group)
    return comm.irecv(tensor, _source(comm, "irecv", src), tag)
