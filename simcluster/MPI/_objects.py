"""Collectives on Python objects: ``bcast``, ``scatter``, ``gather``, ``allgather``, ``alltoall``,
``reduce``, ``allreduce``, ``scan``, ``exscan`` and ``barrier``.

Objects travel pickled (``MPI.pickle``), each as a uint8 array of its
pickle's bytes, through the simcluster collective of the same family, so the
algorithms and their virtual times are simcluster's and a message counts the
pickle's length on every transport. Every rank gets fresh objects (the root
of ``bcast`` too), as with mpi4py.

Reductions apply the op to the unpickled objects wherever the algorithm
combines two partial results, and pickle the partial result again for the
next hop: an ``MPI.Op`` uses mpi4py's Python definitions (``SUM`` is ``x +
y``, ``MAXLOC`` compares ``(value, index)`` pairs), and any function
``op(x, y)`` works too. A plain function, and an ``Op.Create`` op made with
``commute=False``, is applied in rank order (``x0 op x1 op ...``), as in MPI.

Rule 1: a payload is wrapped in a 1-tuple where simcluster would otherwise
pick array algorithms or compare shapes across ranks: pickles of different
objects have different lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ..engine.coll_check import calls as _calls
from ..ops import ReduceOp
from ._blocking import block
from ._ops import SUM, as_object_op
from ._pickle import check_transport, dumps, loads
from ._state import CommState, root as check_root

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

T = TypeVar("T")


def _reduce_op(fn: Callable[[Any, Any], Any], commutative: bool, name: str) -> ReduceOp:
    def apply(a: tuple[Any], b: tuple[Any]) -> tuple[Any]:
        return (dumps(fn(loads(a[0]), loads(b[0]))),)

    return ReduceOp.custom(apply, commutative=commutative, name=name)


class ObjectCollectives:
    """The lowercase collectives of ``MPI.Comm``."""

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def _st(self) -> CommState: ...

    def _begin(self, call: str, lock: str = "") -> CommState:
        """The communicator's state, checked for an object call; ``lock``: the key of the lock
        mpi4py makes in the communicator's lock table for this call (``MPI._comm_lock_table``)."""
        st = self._st
        check_transport(st.sc, lambda: call)
        st.rank_state.reap()
        if lock:
            st.lock(lock)
        return st

    @staticmethod
    def _block(st: CommState, call: str, start: Callable[[], Awaitable[T]]) -> T:
        """``block(start())``, with ``call`` as the words of a mismatch report (``coll_check.calls``)."""
        sc = st.sc
        _calls[sc] = (call, st.name)
        try:
            return block(start())
        finally:
            _calls.pop(sc, None)

    def barrier(self) -> None:
        """Wait until every rank of the communicator has called barrier."""
        st = self._st
        st.rank_state.reap()
        self._block(st, "barrier()", st.sc.barrier)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Return ``root``'s object on every rank (a fresh copy everywhere)."""
        call = f"bcast(root={root!r})"
        st = self._begin(call, "bcast")
        sc = st.sc
        r = check_root(st, root, lambda: call)
        payload = (dumps(obj),) if sc.rank == r else None
        got = self._block(st, call, lambda: sc.broadcast(payload, r))
        return loads(got[0])

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        """Return item ``rank`` of ``root``'s sequence (``sendobj`` is read on ``root`` only)."""
        call = f"scatter(root={root!r})"
        st = self._begin(call, "scatter")
        sc = st.sc
        r = check_root(st, root, lambda: call)
        objs = None
        if sc.rank == r:
            items = list(sendobj) if sendobj is not None else [None] * sc.size  # as mpi4py
            if len(items) != sc.size:
                raise ValueError(f"rank {sc.rank}: {call}: expecting {sc.size} items, got "
                                 f"{len(items)}; pass one object per rank")
            objs = [dumps(o) for o in items]
        return loads(self._block(st, call, lambda: sc.scatter(objs, r)))

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Return the list of every rank's object on ``root``, None elsewhere."""
        call = f"gather(root={root!r})"
        st = self._begin(call, "gather")
        r = check_root(st, root, lambda: call)
        got = self._block(st, call, lambda: st.sc.gather(dumps(sendobj), r))
        return None if got is None else [loads(x) for x in got]

    def allgather(self, sendobj: Any) -> list[Any]:
        """Return the list of every rank's object on every rank."""
        st = self._begin("allgather()", "allgather")
        payload = dumps(sendobj)
        return [loads(x) for x in self._block(st, "allgather()", lambda: st.sc.all_gather(payload))]

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Send item ``i`` to rank ``i``; return the items every rank sent to this one."""
        call = "alltoall()"
        st = self._begin(call, "alltoall")
        sc = st.sc
        items = list(sendobj) if sendobj is not None else [None] * sc.size  # as mpi4py
        if len(items) != sc.size:
            raise ValueError(f"rank {sc.rank}: {call}: expecting {sc.size} items, got {len(items)}; "
                             "pass one object per rank")
        payloads = [dumps(o) for o in items]
        return [loads(x) for x in self._block(st, call, lambda: sc.all_to_all(payloads))]

    def _op(self, st: CommState, op: Any, call: str) -> ReduceOp:
        fn, commutative, name = as_object_op(op, st.sc.rank, call)
        return _reduce_op(fn, commutative, name)

    def reduce(self, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
        """Reduce every rank's object with ``op`` onto ``root``; None elsewhere."""
        call = f"reduce(root={root!r})"
        st = self._begin(call, "@commctx_intra")  # mpi4py's reductions run on a private context
        r = check_root(st, root, lambda: call)
        payload, rop = (dumps(sendobj),), self._op(st, op, call)
        got = self._block(st, call, lambda: st.sc.reduce(payload, r, rop))
        return None if got is None else loads(got[0])

    def allreduce(self, sendobj: Any, op: Any = SUM) -> Any:
        """Reduce every rank's object with ``op``; return the result on every rank."""
        call = "allreduce()"
        st = self._begin(call, "@commctx_intra")  # mpi4py's reductions run on a private context
        payload, rop = (dumps(sendobj),), self._op(st, op, call)
        return loads(self._block(st, call, lambda: st.sc.all_reduce(payload, rop))[0])

    def scan(self, sendobj: Any, op: Any = SUM) -> Any:
        """Return the inclusive prefix reduction ``x0 op ... op x(rank)``."""
        call = "scan()"
        st = self._begin(call, "@commctx_intra")  # mpi4py's reductions run on a private context
        payload, rop = (dumps(sendobj),), self._op(st, op, call)
        return loads(self._block(st, call, lambda: st.sc.scan(payload, rop))[0])

    def exscan(self, sendobj: Any, op: Any = SUM) -> Any:
        """Return the exclusive prefix reduction ``x0 op ... op x(rank-1)``; None on rank 0."""
        call = "exscan()"
        st = self._begin(call, "@commctx_intra")  # mpi4py's reductions run on a private context
        payload, rop = (dumps(sendobj),), self._op(st, op, call)
        got = self._block(st, call, lambda: st.sc.exscan(payload, rop))
        return None if got is None else loads(got[0])
