"""Collectives on intercommunicators, with MPI's intercommunicator semantics.

In ``Bcast``, ``Gather(v)``, ``Scatter(v)`` and ``Reduce`` the root passes
``ROOT``, the rest of its group ``PROC_NULL`` and the other group the root's
rank; ``Allgather(v)``/``Alltoall(v/w)`` give each rank the remote group's
blocks; ``Allreduce`` and ``Reduce_scatter(_block)`` give each group the
reduction of the other group's values. The algorithms are MPICH's linear
ones: the group's values gathered to its leader (local rank 0) over the local
group's private context, the leaders exchange over ``out``/``inb``'s private
contexts (or the leader sends to the root), the leader broadcasts or scatters.
Every step is a message, so the latency model times them as point-to-point.

Each call parses its buffers as ``_coll`` does (its helpers), runs its body as
a collective of the local group (``Comm._run_collective``/``_start_collective``:
mismatch checks, traces, nonblocking requests) and fills the receive buffer
when it completes.

Rule 1: nothing is written into a receive buffer before its collective completes.
Rule 2: a call's cross-group tag is taken when it is called, so nonblocking
calls in flight at once never meet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..collectives._reduction import apply as _apply
from ._blocking import block
from ._bridge import Body, Bridge, _fold, _lbcast, _lgather, _lscatter
from ._buffers import blocked, message, per_rank, vector
from ._coll import Collectives, _copy, _layout, _op_name, _put, _req
from ._constants import ERR_COMM, ERR_COUNT, ERR_ROOT, PROC_NULL, ROOT
from ._errors import error
from ._ops import SUM, as_object_op
from ._pickle import check_transport, dumps, loads
from ._requests import Request

if TYPE_CHECKING:
    from ._state import CommState


class InterCollectives(Collectives):
    """The collectives of ``MPI.Intercomm`` (buffers and objects)."""

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def _st(self) -> CommState: ...

    @property
    def _br(self) -> Bridge:
        sc = self._st.sc
        assert isinstance(sc, Bridge)
        return sc

    # ---- running collectives ----

    def _coll(self, call: str, body: Body, finish: Callable[[Any], object], nonblocking: bool
              ) -> Request | None:
        st = self._st
        br = self._br
        st.rank_state.reap()
        tag = br.next_tag()
        name = f"{call.partition('(')[0]}(intercomm)"  # the root differs between a group's ranks

        async def run(c: Any) -> Any:
            return await body(br, c, tag)
        if nonblocking:
            return Request._of(br.local._start_collective(name, run), br.rank, lambda: call,
                               lambda raw, _status: finish(raw), owner=st.rank_state)
        finish(block(br.local._run_collective(name, run)))
        return None

    def _pickles(self, call: str, lock: str = "") -> None:
        """The lowercase methods' check: pickles go only where the run accepts them; ``lock``: the
        key of the lock mpi4py makes in the communicator's lock table for this call."""
        st = self._st
        check_transport(st.sc, lambda: call)
        if lock:
            st.lock(lock)

    def _root(self, root: Any, call: str) -> int:
        br = self._br
        if not isinstance(root, bool) and hasattr(root, "__index__"):
            r = int(root)
            if r in (ROOT, PROC_NULL) or 0 <= r < br.size:
                return r
        raise error(ERR_ROOT, br.rank, call, f"root must be MPI.ROOT, MPI.PROC_NULL or in "
                    f"range({br.size}) (the remote group)", "the root's rank passes MPI.ROOT, the "
                    "rest of its group MPI.PROC_NULL, the other group the root's rank")

    # ---- barrier, bcast ----

    def _barrier(self, nonblocking: bool, call: str) -> Request | None:
        async def body(br: Bridge, c: Any, tag: int) -> None:
            await _lgather(c, None)
            if c.rank == 0:
                await br.exchange(None, tag)
            await _lbcast(c, None)
        return self._coll(call, body, lambda _: None, nonblocking)

    def Barrier(self) -> None:
        """Wait until every rank of both groups has called Barrier."""
        self._barrier(False, "Barrier()")

    def Ibarrier(self) -> Request:
        """Start a barrier over both groups."""
        return _req(self._barrier(True, "Ibarrier()"))

    def barrier(self) -> None:
        """Wait until every rank of both groups has called barrier."""
        self._barrier(False, "barrier()")

    def _bcast_body(self, r: int, data: Any) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            if r == ROOT:
                await br.xsend(data, 0, tag)
                return None
            if r == PROC_NULL:
                return None
            got = await br.xrecv(r, tag) if c.rank == 0 else None
            return await _lbcast(c, got)
        return body

    def _bcast(self, buf: Any, root: int, name: str, nonblocking: bool) -> Request | None:
        call = f"{name}(root={root!r})"
        r = self._root(root, call)
        rank = self._br.rank
        b = None if r == PROC_NULL else message(buf, rank, call, r != ROOT)
        data = b.take(b.displ, b.count) if b is not None and r == ROOT else None

        def finish(value: Any) -> None:
            if b is not None and r not in (ROOT, PROC_NULL):
                _put(b, b.displ, value, b.count, rank, call)
        return self._coll(call, self._bcast_body(r, data), finish, nonblocking)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Return the root's object on the other group's ranks (None in the root's group)."""
        call = f"bcast(root={root!r})"
        self._pickles(call, "bcast")
        r = self._root(root, call)
        got: list[Any] = []
        self._coll(call, self._bcast_body(r, dumps(obj) if r == ROOT else None), got.append, False)
        return None if r in (ROOT, PROC_NULL) else loads(got[0])

    # ---- gather, scatter ----

    def _gather_body(self, r: int, data: Any) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            if r == ROOT:
                return await br.xrecv(0, tag)
            if r == PROC_NULL:
                return None
            got = await _lgather(c, data)
            if c.rank == 0:
                await br.xsend(got, r, tag)
            return None
        return body

    def _gather(self, sendbuf: Any, recvbuf: Any, root: int, name: str, v: bool, nonblocking: bool
                ) -> Request | None:
        call = f"{name}(root={root!r})"
        r = self._root(root, call)
        br = self._br
        rank = br.rank
        data = None
        rb = None
        if r == ROOT:
            rb = (vector if v else blocked)(recvbuf, br.size, rank, call, True)
        elif r != PROC_NULL:
            sb = message(sendbuf, rank, call, False)
            data = _copy(sb.take(sb.displ, sb.count))
        starts, counts = _layout(rb, br.size)

        def finish(values: Any) -> None:
            if rb is not None:
                for i, value in enumerate(values):
                    _put(rb, starts[i], value, counts[i], rank, call)
        return self._coll(call, self._gather_body(r, data), finish, nonblocking)

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather the other group's ``sendbuf`` into the root's ``recvbuf``."""
        self._gather(sendbuf, recvbuf, root, "Gather", False, False)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """``Gather`` with blocks of different sizes."""
        self._gather(sendbuf, recvbuf, root, "Gatherv", True, False)

    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Gather``."""
        return _req(self._gather(sendbuf, recvbuf, root, "Igather", False, True))

    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Gatherv``."""
        return _req(self._gather(sendbuf, recvbuf, root, "Igatherv", True, True))

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Return the other group's objects on the root, None elsewhere."""
        call = f"gather(root={root!r})"
        self._pickles(call, "gather")
        r = self._root(root, call)
        got: list[Any] = []
        self._coll(call, self._gather_body(r, dumps(sendobj)), got.append, False)
        return [loads(x) for x in got[0]] if r == ROOT else None

    def _scatter_body(self, r: int, objs: Any) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            if r == ROOT:
                await br.xsend(objs, 0, tag)
                return None
            if r == PROC_NULL:
                return None
            got = await br.xrecv(r, tag) if c.rank == 0 else None
            return await _lscatter(c, got)
        return body

    def _scatter(self, sendbuf: Any, recvbuf: Any, root: int, name: str, v: bool, nonblocking: bool
                 ) -> Request | None:
        call = f"{name}(root={root!r})"
        r = self._root(root, call)
        br = self._br
        rank = br.rank
        objs = None
        rb = None
        if r == ROOT:
            sb = (vector if v else blocked)(sendbuf, br.size, rank, call, False)
            starts, counts = _layout(sb, br.size)
            objs = [_copy(sb.take(starts[i], counts[i])) for i in range(br.size)]
        elif r != PROC_NULL:
            rb = message(recvbuf, rank, call, True)

        def finish(value: Any) -> None:
            if rb is not None:
                _put(rb, rb.displ, value, rb.count, rank, call)
        return self._coll(call, self._scatter_body(r, objs), finish, nonblocking)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Send block ``i`` of the root's ``sendbuf`` to rank ``i`` of the other group."""
        self._scatter(sendbuf, recvbuf, root, "Scatter", False, False)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """``Scatter`` with blocks of different sizes."""
        self._scatter(sendbuf, recvbuf, root, "Scatterv", True, False)

    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Scatter``."""
        return _req(self._scatter(sendbuf, recvbuf, root, "Iscatter", False, True))

    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Scatterv``."""
        return _req(self._scatter(sendbuf, recvbuf, root, "Iscatterv", True, True))

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        """Return item ``rank`` of the root's sequence on the other group, None in the root's."""
        call = f"scatter(root={root!r})"
        self._pickles(call, "scatter")
        r = self._root(root, call)
        br = self._br
        objs = None
        if r == ROOT:
            items = list(sendobj) if sendobj is not None else [None] * br.size
            if len(items) != br.size:
                raise ValueError(f"rank {br.rank}: {call}: expecting {br.size} items, got "
                                 f"{len(items)}; pass one object per rank of the remote group")
            objs = [dumps(o) for o in items]
        got: list[Any] = []
        self._coll(call, self._scatter_body(r, objs), got.append, False)
        return None if r in (ROOT, PROC_NULL) else loads(got[0])

    # ---- allgather, alltoall ----

    @staticmethod
    def _allgather_body(data: Any) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            got = await _lgather(c, data)
            theirs = await br.exchange(got, tag) if c.rank == 0 else None
            return await _lbcast(c, theirs)
        return body

    def _allgather(self, sendbuf: Any, recvbuf: Any, name: str, v: bool, nonblocking: bool
                   ) -> Request | None:
        call = f"{name}()"
        br = self._br
        rank = br.rank
        rb = (vector if v else blocked)(recvbuf, br.size, rank, call, True)
        starts, counts = _layout(rb, br.size)
        sb = message(sendbuf, rank, call, False)
        data = _copy(sb.take(sb.displ, sb.count))

        def finish(values: Any) -> None:
            for i, value in enumerate(values):
                _put(rb, starts[i], value, counts[i], rank, call)
        return self._coll(call, self._allgather_body(data), finish, nonblocking)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Gather the remote group's ``sendbuf`` into every rank's ``recvbuf``, in remote rank order."""
        self._allgather(sendbuf, recvbuf, "Allgather", False, False)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """``Allgather`` with blocks of different sizes."""
        self._allgather(sendbuf, recvbuf, "Allgatherv", True, False)

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Allgather``."""
        return _req(self._allgather(sendbuf, recvbuf, "Iallgather", False, True))

    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Allgatherv``."""
        return _req(self._allgather(sendbuf, recvbuf, "Iallgatherv", True, True))

    def allgather(self, sendobj: Any) -> list[Any]:
        """Return the remote group's objects, in remote rank order."""
        self._pickles("allgather()", "allgather")
        got: list[Any] = []
        self._coll("allgather()", self._allgather_body(dumps(sendobj)), got.append, False)
        return [loads(x) for x in got[0]]

    @staticmethod
    def _alltoall_body(objs: list[Any]) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            recvs = [br.inb.coll.irecv(None, j, tag) for j in range(br.size)]
            sends = [br.out.coll.isend(objs[j], br.local.size + j, tag) for j in range(br.size)]
            values = [await q for q in recvs]
            for q in sends:
                await q
            return values
        return body

    def _xalltoall(self, sendbuf: Any, recvbuf: Any, name: str, kind: str, nonblocking: bool
                  ) -> Request | None:
        call = f"{name}()"
        br = self._br
        rank = br.rank
        if kind == "w":
            rbufs = per_rank(recvbuf, br.size, rank, call, True)
            objs = [_copy(b.take(0, b.count)) for b in per_rank(sendbuf, br.size, rank, call, False)]

            def finish(values: Any) -> None:
                for b, value in zip(rbufs, values):
                    _put(b, 0, value, b.count, rank, call)
            return self._coll(call, self._alltoall_body(objs), finish, nonblocking)
        parse = vector if kind == "v" else blocked
        rb = parse(recvbuf, br.size, rank, call, True)
        rstarts, rcounts = _layout(rb, br.size)
        sb = parse(sendbuf, br.size, rank, call, False)
        sstarts, scounts = _layout(sb, br.size)
        objs = [_copy(sb.take(sstarts[i], scounts[i])) for i in range(br.size)]

        def finish_blocks(values: Any) -> None:
            for i, value in enumerate(values):
                _put(rb, rstarts[i], value, rcounts[i], rank, call)
        return self._coll(call, self._alltoall_body(objs), finish_blocks, nonblocking)

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Send block ``i`` to remote rank ``i``; block ``j`` of ``recvbuf`` comes from remote rank ``j``."""
        self._xalltoall(sendbuf, recvbuf, "Alltoall", "", False)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """``Alltoall`` with blocks of different sizes."""
        self._xalltoall(sendbuf, recvbuf, "Alltoallv", "v", False)

    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """``Alltoall`` with a datatype per rank."""
        self._xalltoall(sendbuf, recvbuf, "Alltoallw", "w", False)

    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Alltoall``."""
        return _req(self._xalltoall(sendbuf, recvbuf, "Ialltoall", "", True))

    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Alltoallv``."""
        return _req(self._xalltoall(sendbuf, recvbuf, "Ialltoallv", "v", True))

    def Ialltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Alltoallw``."""
        return _req(self._xalltoall(sendbuf, recvbuf, "Ialltoallw", "w", True))

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Send item ``i`` to remote rank ``i``; return what each remote rank sent to this one."""
        self._pickles("alltoall()", "alltoall")
        br = self._br
        items = list(sendobj) if sendobj is not None else [None] * br.size
        if len(items) != br.size:
            raise ValueError(f"rank {br.rank}: alltoall(): expecting {br.size} items, got "
                             f"{len(items)}; pass one object per rank of the remote group")
        got: list[Any] = []
        self._coll("alltoall()", self._alltoall_body([dumps(o) for o in items]), got.append, False)
        return [loads(x) for x in got[0]]

    # ---- reductions: a group's values reduced land in the other group ----

    @staticmethod
    def _reduce_body(r: int, data: Any, fn: Callable[[Any, Any], Any] | None) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            if r == ROOT:
                return await br.xrecv(0, tag)
            if r == PROC_NULL:
                return None
            got = await _lgather(c, data)
            if c.rank == 0:
                assert got is not None and fn is not None
                await br.xsend(_fold(fn, got), r, tag)
            return None
        return body

    @staticmethod
    def _allreduce_body(data: Any, fn: Callable[[Any, Any], Any]) -> Body:
        async def body(br: Bridge, c: Any, tag: int) -> Any:
            got = await _lgather(c, data)
            theirs = await br.exchange(_fold(fn, got), tag) if got is not None else None
            return await _lbcast(c, theirs)
        return body

    def _buffer_op(self, op: Any, b: Any, data: Any, call: str) -> Callable[[Any, Any], Any]:
        rop = self._reduce_op(self._st, op, b, data, call)
        return lambda x, y: _apply(rop, x, y)

    def _object_op(self, op: Any, call: str) -> Callable[[Any, Any], Any]:
        fn, _commutative, _name = as_object_op(op, self._br.rank, call)
        return lambda x, y: dumps(fn(loads(x), loads(y)))

    def _reduce(self, sendbuf: Any, recvbuf: Any, op: Any, root: int, name: str, nonblocking: bool
                ) -> Request | None:
        call = f"{name}(op={_op_name(op)}, root={root!r})"
        r = self._root(root, call)
        rank = self._br.rank
        rb = message(recvbuf, rank, call, True) if r == ROOT else None
        data, fn = None, None
        if r not in (ROOT, PROC_NULL):
            sb = message(sendbuf, rank, call, False)
            data = _copy(sb.take(sb.displ, sb.count))
            fn = self._buffer_op(op, sb, data, call)

        def finish(value: Any) -> None:
            if rb is not None:
                _put(rb, rb.displ, value, rb.count, rank, call)
        return self._coll(call, self._reduce_body(r, data, fn), finish, nonblocking)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
        """Reduce the other group's ``sendbuf`` with ``op`` into the root's ``recvbuf``."""
        self._reduce(sendbuf, recvbuf, op, root, "Reduce", False)

    def Ireduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> Request:
        """Nonblocking ``Reduce``."""
        return _req(self._reduce(sendbuf, recvbuf, op, root, "Ireduce", True))

    def reduce(self, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
        """Reduce the other group's objects onto the root; None elsewhere."""
        call = f"reduce(root={root!r})"
        self._pickles(call)
        r = self._root(root, call)
        fn = self._object_op(op, call)
        got: list[Any] = []
        self._coll(call, self._reduce_body(r, dumps(sendobj), fn), got.append, False)
        return loads(got[0]) if r == ROOT else None

    def _xallreduce(self, sendbuf: Any, recvbuf: Any, op: Any, name: str, nonblocking: bool
                   ) -> Request | None:
        call = f"{name}(op={_op_name(op)})"
        rank = self._br.rank
        rb = message(recvbuf, rank, call, True)
        sb = message(sendbuf, rank, call, False)
        self._match(self._st, sb, rb, call)
        data = _copy(sb.take(sb.displ, sb.count))
        fn = self._buffer_op(op, sb, data, call)

        def finish(value: Any) -> None:
            _put(rb, rb.displ, value, rb.count, rank, call)
        return self._coll(call, self._allreduce_body(data, fn), finish, nonblocking)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        """Reduce the remote group's ``sendbuf`` with ``op`` into every local rank's ``recvbuf``."""
        self._xallreduce(sendbuf, recvbuf, op, "Allreduce", False)

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Request:
        """Nonblocking ``Allreduce``."""
        return _req(self._xallreduce(sendbuf, recvbuf, op, "Iallreduce", True))

    def allreduce(self, sendobj: Any, op: Any = SUM) -> Any:
        """Return the reduction of the remote group's objects."""
        call = "allreduce()"
        self._pickles(call)
        fn = self._object_op(op, call)
        got: list[Any] = []
        self._coll(call, self._allreduce_body(dumps(sendobj), fn), got.append, False)
        return loads(got[0])

    def _reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any, op: Any, name: str,
                        block_form: bool, nonblocking: bool) -> Request | None:
        call = f"{name}(op={_op_name(op)})"
        br = self._br
        rank = br.rank
        rb = message(recvbuf, rank, call, True)
        mine = rb.count
        if recvcounts is not None and not block_form:
            counts = [int(x) for x in recvcounts]
            if len(counts) != br.local.size:
                raise error(ERR_COUNT, rank, call, f"{len(counts)} recvcounts for {br.local.size} "
                            "ranks of the local group", "pass one count per local rank")
            mine = counts[rank]
        sb = message(sendbuf, rank, call, False)
        total = mine * br.local.size if block_form else sum(counts) if recvcounts is not None else None
        if total is not None and sb.count != total:  # MPI: n * recvcount, n the local group's size
            raise error(ERR_COUNT, rank, call, f"the send buffer has {sb.count} items but the local "
                        f"group's receive counts add up to {total}", "pass a send buffer of every "
                        "local rank's block (both groups' totals must be equal)", mismatch=True)
        data = _copy(sb.take(sb.displ, sb.count))
        fn = self._buffer_op(op, sb, data, call)
        elems = rb._elems

        async def body(br: Bridge, c: Any, tag: int) -> Any:
            got = await _lgather(c, (mine, data))
            parts = None
            if got is not None:
                theirs = await br.exchange(_fold(fn, [d for _, d in got]), tag)
                flat = np.asarray(theirs).reshape(-1)
                offsets = np.cumsum([0] + [n * elems for n, _ in got])
                parts = [flat[offsets[i]:offsets[i + 1]] for i in range(len(got))]
            return await _lscatter(c, parts)

        def finish(value: Any) -> None:
            _put(rb, rb.displ, value, mine, rank, call)
        return self._coll(call, body, finish, nonblocking)

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        """Reduce the remote group's ``sendbuf``; local rank ``i`` gets block ``i``."""
        self._reduce_scatter(sendbuf, recvbuf, None, op, "Reduce_scatter_block", True, False)

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Request:
        """Nonblocking ``Reduce_scatter_block``."""
        return _req(self._reduce_scatter(sendbuf, recvbuf, None, op, "Ireduce_scatter_block", True, True))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM) -> None:
        """Reduce the remote group's ``sendbuf``; local rank ``i`` gets ``recvcounts[i]`` items."""
        self._reduce_scatter(sendbuf, recvbuf, recvcounts, op, "Reduce_scatter", False, False)

    def Ireduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM
                        ) -> Request:
        """Nonblocking ``Reduce_scatter``."""
        return _req(self._reduce_scatter(sendbuf, recvbuf, recvcounts, op, "Ireduce_scatter", False, True))

    def _intra_only(self, name: str) -> Any:
        raise error(ERR_COMM, self._br.rank, f"{name}()", "it is defined on intracommunicators only",
                    "Merge() the intercommunicator first")

    def Scan(self, *args: Any, **kwargs: Any) -> None:
        """Not defined on intercommunicators (MPI): raises ``ERR_COMM``."""
        self._intra_only("Scan")

    def Exscan(self, *args: Any, **kwargs: Any) -> None:
        """Not defined on intercommunicators (MPI): raises ``ERR_COMM``."""
        self._intra_only("Exscan")

    def scan(self, *args: Any, **kwargs: Any) -> Any:
        """Not defined on intercommunicators (MPI): raises ``ERR_COMM``."""
        return self._intra_only("scan")

    def exscan(self, *args: Any, **kwargs: Any) -> Any:
        """Not defined on intercommunicators (MPI): raises ``ERR_COMM``."""
        return self._intra_only("exscan")

