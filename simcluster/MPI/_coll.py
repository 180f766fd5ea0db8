"""Collectives on buffers: ``Bcast``, ``Gather(v)``, ``Scatter(v)``, ``Allgather(v)``, ``Alltoall(v/w)``,
``Reduce``, ``Allreduce``, ``Reduce_scatter(_block)``, ``Scan``, ``Exscan``, their ``I`` twins and
the persistent ``*_init`` forms.

Each call parses its buffer specs, takes the items to contribute (copies where
simcluster's collective would write into them), runs the simcluster
collective of the same family on the rank's ``Comm`` (so the algorithms,
their virtual times, the ``algorithms=`` choices and the mismatch checks are
simcluster's), and writes the result into the receive buffer: blocking calls
at once, nonblocking ones when their request completes (``Wait``/``Test``).

``MPI.IN_PLACE`` is accepted where MPI accepts it: as the send buffer of
``Allreduce``, ``Reduce`` (root), ``Scan``, ``Exscan``, ``Allgather(v)``,
``Gather(v)`` (root), ``Alltoall(v)``, ``Reduce_scatter(_block)``, and as the
receive buffer of ``Scatter(v)`` at the root; ``None`` there means IN_PLACE too,
as in mpi4py.

The reductions (``Allreduce``, ``Scan``, ``Exscan``) of two plain numpy arrays
with a predefined op take a fast path (``_plain_operands``) once a call of the
same name, op and datatype has passed the general path's checks: one copy of
the send array, no spec parsing; anything else takes the general path.

Rule 1: nothing is written into a receive buffer before its collective completes.
Rule 2: a result that does not fit its receive buffer is ``ERR_TRUNCATE``, a
send and receive buffer of different datatypes or counts is ``ERR_TYPE`` /
``ERR_COUNT`` (a ValueError too, as mpi4py raises it), raised on the rank that
passed them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import arrays
from ..engine.coll_check import calls as _calls
from ._blocking import block
from ._buffers import Buf, blocked, is_in_place, message, per_rank, vector
from ._constants import ERR_ARG, ERR_COUNT, ERR_OP, ERR_TRUNCATE, ERR_TYPE
from ._datatypes import Datatype, from_dtype
from ._errors import error
from ._ops import MAXLOC, MINLOC, SUM, Op, as_buffer_op
from ._requests import Prequest, Request
from ._state import CommState, root as check_root

if TYPE_CHECKING:
    from ..ops import ReduceOp

Start = Callable[[bool], Any]
"""start(nonblocking) -> simcluster awaitable (blocking) or Request (nonblocking)."""
Finish = Callable[[Any], object]
"""finish(raw value): fill the receive buffer. A nonblocking call's ``wait()`` returns its result."""


def _copy(x: Any) -> Any:
    return np.array(x, copy=True) if isinstance(x, np.ndarray) else arrays.clone(x)


def _op_name(op: object) -> str:
    return op._name.removeprefix("MPI_") if isinstance(op, Op) else repr(op)


def _put(b: Buf, start: int, value: Any, items: int, rank: int, call: str) -> None:
    """Write a received block into ``b`` at item ``start`` (room for ``items`` items), or ERR_TRUNCATE."""
    room = items * b._elems
    n = int(value.size) if isinstance(value, np.ndarray) else arrays.size(value)
    if n > room:
        size = b.datatype._base._size
        raise error(ERR_TRUNCATE, rank, call, f"a block of {n * size} bytes arrived for {room * size} "
                    "bytes of the receive buffer", "give every rank the same counts (or larger "
                    "receive counts)")
    b.put(start, value, items)


class Collectives:
    """The buffer collectives of ``MPI.Comm``."""

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def _st(self) -> CommState: ...

    def _run(self, st: CommState, call: str, start: Start, finish: Finish, nonblocking: bool
             ) -> Request | None:
        st.rank_state.reap()
        sc = st.sc
        _calls[sc] = (call, st.name)  # a mismatch report names the call as the user wrote it
        try:
            if nonblocking:
                return Request._of(start(True), sc.rank, lambda: call,
                                   lambda raw, _status: finish(raw), owner=st.rank_state)
            finish(block(start(False)))
            return None
        finally:
            _calls.pop(sc, None)

    def _reduce_op(self, st: CommState, op: object, b: Buf, data: Any, call: str) -> ReduceOp:
        rank = st.sc.rank
        pair = b.datatype._base._np is not None and b.datatype._base._np.names is not None
        if op in (MAXLOC, MINLOC) and not pair:
            raise error(ERR_OP, rank, call, f"{_op_name(op)} reduces (value, index) pairs, not "
                        f"{b.datatype._base._name}", "pass [buf, MPI.DOUBLE_INT] (or FLOAT_INT, "
                        "LONG_INT, TWOINT, SHORT_INT) with pairs")
        rop = as_buffer_op(op, b.datatype, rank, call)
        try:
            rop.check(data, rank, call)
        except TypeError as exc:
            problem = str(exc).split(f"{call}: ", 1)[-1].split("; ")[0]
            raise error(ERR_OP, rank, call, problem, "use an op defined for this datatype") from None
        return rop

    @staticmethod
    def _match(st: CommState, send: Buf, recv: Buf, call: str) -> None:
        rank = st.sc.rank
        if send.datatype._base._np != recv.datatype._base._np:
            raise error(ERR_TYPE, rank, call, f"the send buffer holds {send.datatype._base._name} but "
                        f"the receive buffer {recv.datatype._base._name}",
                        "pass buffers of the same datatype", mismatch=True)
        if send.count * send._elems != recv.count * recv._elems:
            raise error(ERR_COUNT, rank, call, f"the send buffer has {send.count} items but the "
                        f"receive buffer {recv.count}", "pass buffers of the same count", mismatch=True)

    # ---- barrier, broadcast ----

    def Barrier(self) -> None:
        """Wait until every rank of the communicator has called Barrier."""
        st = self._st
        self._run(st, "Barrier()", lambda nb: st.sc.ibarrier() if nb else st.sc.barrier(),
                  lambda _: None, False)

    def Ibarrier(self) -> Request:
        """Start a barrier; the request completes once every rank has entered it."""
        st = self._st
        req = self._run(st, "Ibarrier()", lambda nb: st.sc.ibarrier(), lambda _: None, True)
        assert req is not None
        return req

    def _bcast(self, buf: Any, root: int, name: str, nonblocking: bool) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}(root={root!r})"
        r = check_root(st, root, lambda: call)
        b = message(buf, sc.rank, call, sc.rank != r)
        keep = b._pos and sc.rank != r  # a non-root rank copies the value into its buffer

        def finish(value: Any) -> None:  # wait() returns None, as mpi4py's buffer requests do
            if keep:
                b.put(b.displ, value, b.count)

        # without an offset (b._pos), simcluster's broadcast fills the buffer in place
        data = b.empty(b.count) if keep else b.take(b.displ, b.count)
        return self._run(st, call, lambda nb: sc.ibroadcast(data, r) if nb else sc.broadcast(data, r),
                         finish, nonblocking)

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast ``root``'s buffer into every rank's ``buf``."""
        self._bcast(buf, root, "Bcast", False)

    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        """Start a broadcast; ``buf`` is filled when the request completes."""
        req = self._bcast(buf, root, "Ibcast", True)
        assert req is not None
        return req

    # ---- gather ----

    def _gather(self, sendbuf: Any, recvbuf: Any, root: int, name: str, v: bool, nonblocking: bool
                ) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}(root={root!r})"
        r = check_root(st, root, lambda: call)
        rb: Buf | None = None
        if sc.rank == r:
            rb = vector(recvbuf, sc.size, sc.rank, call, True) if v else \
                blocked(recvbuf, sc.size, sc.rank, call, True)
        starts, counts = _layout(rb, sc.size)
        if is_in_place(sendbuf):
            if rb is None:
                raise error(ERR_ARG, sc.rank, call, "MPI.IN_PLACE (or None) is the root's send buffer only",
                            "pass the send buffer on the other ranks")
            data = _copy(rb.take(starts[sc.rank], counts[sc.rank]))
        else:
            sb = message(sendbuf, sc.rank, call, False)
            if rb is not None and not v:
                self._match(st, sb, _sized(rb, rb.count), call)
            data = sb.take(sb.displ, sb.count)

        def finish(values: Any) -> None:
            if rb is None:
                return
            for i, value in enumerate(values):
                if i == sc.rank and is_in_place(sendbuf):
                    continue
                _put(rb, starts[i], value, counts[i], sc.rank, call)
        return self._run(st, call, lambda nb: sc.igather(data, r) if nb else sc.gather(data, r),
                         finish, nonblocking)

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather every rank's ``sendbuf`` into ``root``'s ``recvbuf``, in rank order."""
        self._gather(sendbuf, recvbuf, root, "Gather", False, False)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather blocks of different sizes: ``recvbuf = [buf, (counts, displs), datatype]`` on ``root``."""
        self._gather(sendbuf, recvbuf, root, "Gatherv", True, False)

    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Gather``."""
        return _req(self._gather(sendbuf, recvbuf, root, "Igather", False, True))

    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Gatherv``."""
        return _req(self._gather(sendbuf, recvbuf, root, "Igatherv", True, True))

    # ---- scatter ----

    def _scatter(self, sendbuf: Any, recvbuf: Any, root: int, name: str, v: bool, nonblocking: bool
                 ) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}(root={root!r})"
        r = check_root(st, root, lambda: call)
        objs: list[Any] | None = None
        in_place = is_in_place(recvbuf)
        if sc.rank == r:
            sb = vector(sendbuf, sc.size, sc.rank, call, False) if v else \
                blocked(sendbuf, sc.size, sc.rank, call, False)
            starts, counts = _layout(sb, sc.size)
            objs = [sb.take(starts[i], counts[i]) for i in range(sc.size)]
        elif in_place:
            raise error(ERR_ARG, sc.rank, call, "MPI.IN_PLACE (or None) is the root's receive buffer only",
                        "pass a receive buffer on the other ranks")
        rb = None if in_place else message(recvbuf, sc.rank, call, True)

        def finish(value: Any) -> None:
            if rb is not None:
                _put(rb, rb.displ, value, rb.count, sc.rank, call)
        return self._run(st, call, lambda nb: sc.iscatter(objs, r) if nb else sc.scatter(objs, r),
                         finish, nonblocking)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Send block ``i`` of ``root``'s ``sendbuf`` into rank ``i``'s ``recvbuf``."""
        self._scatter(sendbuf, recvbuf, root, "Scatter", False, False)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Scatter blocks of different sizes: ``sendbuf = [buf, (counts, displs), datatype]`` on ``root``."""
        self._scatter(sendbuf, recvbuf, root, "Scatterv", True, False)

    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Scatter``."""
        return _req(self._scatter(sendbuf, recvbuf, root, "Iscatter", False, True))

    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """Nonblocking ``Scatterv``."""
        return _req(self._scatter(sendbuf, recvbuf, root, "Iscatterv", True, True))

    # ---- allgather, alltoall ----

    def _allgather(self, sendbuf: Any, recvbuf: Any, name: str, v: bool, nonblocking: bool
                   ) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}()"
        rb = vector(recvbuf, sc.size, sc.rank, call, True) if v else \
            blocked(recvbuf, sc.size, sc.rank, call, True)
        starts, counts = _layout(rb, sc.size)
        in_place = is_in_place(sendbuf)
        if in_place:
            data = _copy(rb.take(starts[sc.rank], counts[sc.rank]))
        else:
            sb = message(sendbuf, sc.rank, call, False)
            if not v:
                self._match(st, sb, _sized(rb, rb.count), call)
            data = sb.take(sb.displ, sb.count)

        def finish(values: Any) -> None:
            for i, value in enumerate(values):
                if not (in_place and i == sc.rank):
                    _put(rb, starts[i], value, counts[i], sc.rank, call)
        return self._run(st, call, lambda nb: sc.iall_gather(data) if nb else sc.all_gather(data),
                         finish, nonblocking)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Gather every rank's ``sendbuf`` into every rank's ``recvbuf``, in rank order."""
        self._allgather(sendbuf, recvbuf, "Allgather", False, False)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """``Allgather`` with blocks of different sizes: ``recvbuf = [buf, (counts, displs), dt]``."""
        self._allgather(sendbuf, recvbuf, "Allgatherv", True, False)

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Allgather``."""
        return _req(self._allgather(sendbuf, recvbuf, "Iallgather", False, True))

    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Allgatherv``."""
        return _req(self._allgather(sendbuf, recvbuf, "Iallgatherv", True, True))

    def _alltoall(self, sendbuf: Any, recvbuf: Any, name: str, v: bool, nonblocking: bool
                  ) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}()"
        parse = vector if v else blocked
        rb = parse(recvbuf, sc.size, sc.rank, call, True)
        rstarts, rcounts = _layout(rb, sc.size)
        if is_in_place(sendbuf):
            objs = [_copy(rb.take(rstarts[i], rcounts[i])) for i in range(sc.size)]
        else:
            sb = parse(sendbuf, sc.size, sc.rank, call, False)
            sstarts, scounts = _layout(sb, sc.size)
            objs = [sb.take(sstarts[i], scounts[i]) for i in range(sc.size)]

        def finish(values: Any) -> None:
            for i, value in enumerate(values):
                _put(rb, rstarts[i], value, rcounts[i], sc.rank, call)
        return self._run(st, call, lambda nb: sc.iall_to_all(objs) if nb else sc.all_to_all(objs),
                         finish, nonblocking)

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Send block ``i`` of ``sendbuf`` to rank ``i``; block ``j`` of ``recvbuf`` comes from rank ``j``."""
        self._alltoall(sendbuf, recvbuf, "Alltoall", False, False)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """``Alltoall`` with blocks of different sizes (``[buf, (counts, displs), dt]`` on both sides)."""
        self._alltoall(sendbuf, recvbuf, "Alltoallv", True, False)

    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Alltoall``."""
        return _req(self._alltoall(sendbuf, recvbuf, "Ialltoall", False, True))

    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Alltoallv``."""
        return _req(self._alltoall(sendbuf, recvbuf, "Ialltoallv", True, True))

    def _alltoallw(self, sendbuf: Any, recvbuf: Any, name: str, nonblocking: bool) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}()"
        rbufs = per_rank(recvbuf, sc.size, sc.rank, call, True)
        if is_in_place(sendbuf):
            objs = [_copy(b.take(0, b.count)) for b in rbufs]
        else:
            objs = [b.take(0, b.count) for b in per_rank(sendbuf, sc.size, sc.rank, call, False)]

        def finish(values: Any) -> None:
            for b, value in zip(rbufs, values):
                _put(b, 0, value, b.count, sc.rank, call)
        return self._run(st, call, lambda nb: sc.iall_to_all(objs) if nb else sc.all_to_all(objs),
                         finish, nonblocking)

    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """``Alltoall`` with a datatype per rank and displacements in bytes.

        Both specs are ``[buf, (counts, displs), datatypes]`` or ``[buf, counts, displs, datatypes]``;
        ``sendbuf`` may be ``MPI.IN_PLACE``.
        """
        self._alltoallw(sendbuf, recvbuf, "Alltoallw", False)

    def Ialltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Nonblocking ``Alltoallw``."""
        return _req(self._alltoallw(sendbuf, recvbuf, "Ialltoallw", True))

    # ---- reductions ----

    def _operands(self, st: CommState, sendbuf: Any, recvbuf: Any, call: str, receives: bool
                  ) -> tuple[Buf | None, Buf, Any]:
        """Return (receive Buf or None, the Buf the data comes from, a private copy of the data)."""
        rank = st.sc.rank
        rb = message(recvbuf, rank, call, True) if receives else None
        if is_in_place(sendbuf):
            if rb is None:
                raise error(ERR_ARG, rank, call, "MPI.IN_PLACE (or None) needs a receive buffer on this rank",
                            "pass the send buffer instead (IN_PLACE is for the rank that receives)")
            return rb, rb, _copy(rb.take(rb.displ, rb.count))
        sb = message(sendbuf, rank, call, False)
        if rb is not None:
            self._match(st, sb, rb, call)
        return rb, sb, _copy(sb.take(sb.displ, sb.count))

    def _reduce(self, sendbuf: Any, recvbuf: Any, op: Any, root: int, name: str, nonblocking: bool
                ) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}(op={_op_name(op)}, root={root!r})"
        r = check_root(st, root, lambda: call)
        rb, sb, data = self._operands(st, sendbuf, recvbuf, call, sc.rank == r)
        rop = self._reduce_op(st, op, sb, data, call)

        def finish(value: Any) -> None:
            if rb is not None:
                rb.put(rb.displ, value, rb.count)
        return self._run(st, call, lambda nb: sc.ireduce(data, r, rop) if nb else sc.reduce(data, r, rop),
                         finish, nonblocking)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> None:
        """Reduce every rank's ``sendbuf`` with ``op`` into ``root``'s ``recvbuf``."""
        self._reduce(sendbuf, recvbuf, op, root, "Reduce", False)

    def Ireduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> Request:
        """Nonblocking ``Reduce``."""
        return _req(self._reduce(sendbuf, recvbuf, op, root, "Ireduce", True))

    def _allreduce(self, sendbuf: Any, recvbuf: Any, op: Any, name: str, nonblocking: bool,
                   family: str = "all_reduce") -> Request | None:
        st = self._st
        sc = st.sc
        fast = _plain_operands(sendbuf, recvbuf, op, name)
        if fast is not None:  # two plain arrays, a predefined op seen before: nothing to parse
            call, rop, data, rflat = fast

            def finish(value: Any) -> None:
                if value is not None:  # exscan gives rank 0 nothing: its recvbuf stays as it was
                    _put_plain(rflat, recvbuf, value)
        else:
            call = f"{name}(op={_op_name(op)})"
            rb, sb, data = self._operands(st, sendbuf, recvbuf, call, True)
            assert rb is not None
            rop = self._reduce_op(st, op, sb, data, call)
            if isinstance(op, Op) and op._predefined and _plain(sendbuf) is sb.datatype:
                _PLAIN_OPS[name, op._id, sb.datatype._id] = (call, rop)

            def finish(value: Any) -> None:
                if value is not None:  # exscan gives rank 0 nothing: its recvbuf stays as it was
                    rb.put(rb.displ, value, rb.count)

        def start(nb: bool) -> Any:
            if family == "scan":
                return sc.iscan(data, rop) if nb else sc.scan(data, rop)
            if family == "exscan":
                return sc.iexscan(data, rop) if nb else sc.exscan(data, rop)
            return sc.iall_reduce(data, rop) if nb else sc.all_reduce(data, rop)
        return self._run(st, call, start, finish, nonblocking)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Reduce every rank's ``sendbuf`` with ``op`` into every rank's ``recvbuf``."""
        self._allreduce(sendbuf, recvbuf, op, "Allreduce", False)

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """Nonblocking ``Allreduce``."""
        return _req(self._allreduce(sendbuf, recvbuf, op, "Iallreduce", True))

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Inclusive prefix reduction: rank ``i`` gets ``x0 op ... op xi``."""
        self._allreduce(sendbuf, recvbuf, op, "Scan", False, "scan")

    def Iscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """Nonblocking ``Scan``."""
        return _req(self._allreduce(sendbuf, recvbuf, op, "Iscan", True, "scan"))

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Exclusive prefix reduction: rank ``i`` gets ``x0 op ... op x(i-1)``; rank 0's recvbuf is unchanged."""
        self._allreduce(sendbuf, recvbuf, op, "Exscan", False, "exscan")

    def Iexscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """Nonblocking ``Exscan``."""
        return _req(self._allreduce(sendbuf, recvbuf, op, "Iexscan", True, "exscan"))

    def _reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any, op: Any, name: str,
                        block_form: bool, nonblocking: bool) -> Request | None:
        st = self._st
        sc = st.sc
        call = f"{name}(op={_op_name(op)})"
        in_place = is_in_place(sendbuf)
        rb = message(recvbuf, sc.rank, call, True)
        if block_form:
            count = rb.count // sc.size if in_place else rb.count
            counts = [count] * sc.size
        elif recvcounts is not None:
            counts = [int(c) for c in recvcounts]
            if len(counts) != sc.size:
                raise error(ERR_COUNT, sc.rank, call, f"{len(counts)} recvcounts for {sc.size} ranks",
                            "pass one count per rank")
        else:  # as mpi4py: every rank's receive count, gathered first
            counts = [int(c) for c in block(sc.all_gather(rb.count))]
        sb = rb if in_place else message(sendbuf, sc.rank, call, False)
        if sb.datatype._base._np != rb.datatype._base._np:  # as mpi4py: a ValueError
            raise error(ERR_TYPE, sc.rank, call, f"the send buffer holds {sb.datatype._base._name} but "
                        f"the receive buffer {rb.datatype._base._name}",
                        "pass buffers of the same datatype", mismatch=True)
        if sb.count != sum(counts):  # as mpi4py: exactly every rank's block
            raise error(ERR_COUNT, sc.rank, call, f"the {'receive' if in_place else 'send'} buffer has "
                        f"{sb.count} items but the receive counts add up to {sum(counts)}",
                        "pass a buffer of exactly every rank's block", mismatch=True)
        if not in_place and rb.count != counts[sc.rank]:
            raise error(ERR_COUNT, sc.rank, call, f"the receive buffer has {rb.count} items but "
                        f"recvcounts[{sc.rank}] is {counts[sc.rank]}", "pass a receive buffer of "
                        "this rank's count", mismatch=True)
        starts = [sb.displ + sum(counts[:i]) for i in range(sc.size)]
        objs = [_copy(sb.take(starts[i], counts[i])) for i in range(sc.size)]
        rop = self._reduce_op(st, op, sb, objs[sc.rank], call)

        def finish(value: Any) -> None:
            _put(rb, rb.displ, value, counts[sc.rank] if in_place else rb.count, sc.rank, call)
        return self._run(st, call, lambda nb: sc.ireduce_scatter(objs, rop) if nb else
                         sc.reduce_scatter(objs, rop), finish, nonblocking)

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Reduce ``size`` equal blocks elementwise; rank ``i`` gets block ``i`` in ``recvbuf``."""
        self._reduce_scatter(sendbuf, recvbuf, None, op, "Reduce_scatter_block", True, False)

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """Nonblocking ``Reduce_scatter_block``."""
        return _req(self._reduce_scatter(sendbuf, recvbuf, None, op, "Ireduce_scatter_block", True,
                                         True))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM) -> None:
        """Reduce blocks of ``recvcounts`` items elementwise; rank ``i`` gets block ``i``.

        Without ``recvcounts``, each rank's receive buffer size is its count (gathered first, as
        mpi4py does).
        """
        self._reduce_scatter(sendbuf, recvbuf, recvcounts, op, "Reduce_scatter", False, False)

    def Ireduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM
                        ) -> Request:
        """Nonblocking ``Reduce_scatter``."""
        return _req(self._reduce_scatter(sendbuf, recvbuf, recvcounts, op, "Ireduce_scatter", False,
                                         True))

    # ---- persistent collectives (MPI-4): each Start runs the nonblocking form ----

    def _init(self, nonblocking: Callable[..., Request], *args: Any) -> Prequest:
        st = self._st

        def start() -> tuple[Any, Any]:
            req = nonblocking(*args)
            return req._req, req._finish
        name = getattr(nonblocking, "__name__", "collective")
        return Prequest._persistent(start, st.sc.rank, lambda: f"{name[1:]}_init()", st.rank_state)

    def Barrier_init(self, info: Any = None) -> Prequest:
        """Persistent ``Barrier``: each ``Start`` runs an ``Ibarrier``."""
        return self._init(self.Ibarrier)

    def Bcast_init(self, buf: Any, root: int = 0, info: Any = None) -> Prequest:
        """Persistent ``Bcast``."""
        return self._init(self.Ibcast, buf, root)

    def Gather_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Prequest:
        """Persistent ``Gather``."""
        return self._init(self.Igather, sendbuf, recvbuf, root)

    def Gatherv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Prequest:
        """Persistent ``Gatherv``."""
        return self._init(self.Igatherv, sendbuf, recvbuf, root)

    def Scatter_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Prequest:
        """Persistent ``Scatter``."""
        return self._init(self.Iscatter, sendbuf, recvbuf, root)

    def Scatterv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Prequest:
        """Persistent ``Scatterv``."""
        return self._init(self.Iscatterv, sendbuf, recvbuf, root)

    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Allgather``."""
        return self._init(self.Iallgather, sendbuf, recvbuf)

    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Allgatherv``."""
        return self._init(self.Iallgatherv, sendbuf, recvbuf)

    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Alltoall``."""
        return self._init(self.Ialltoall, sendbuf, recvbuf)

    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Alltoallv``."""
        return self._init(self.Ialltoallv, sendbuf, recvbuf)

    def Alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        """Persistent ``Alltoallw``."""
        return self._init(self.Ialltoallw, sendbuf, recvbuf)

    def Reduce_init(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0,
                    info: Any = None) -> Prequest:
        """Persistent ``Reduce``."""
        return self._init(self.Ireduce, sendbuf, recvbuf, op, root)

    def Allreduce_init(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Any = None) -> Prequest:
        """Persistent ``Allreduce``."""
        return self._init(self.Iallreduce, sendbuf, recvbuf, op)

    def Reduce_scatter_block_init(self, sendbuf: Any, recvbuf: Any, op: Op = SUM,
                                  info: Any = None) -> Prequest:
        """Persistent ``Reduce_scatter_block``."""
        return self._init(self.Ireduce_scatter_block, sendbuf, recvbuf, op)

    def Reduce_scatter_init(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM,
                            info: Any = None) -> Prequest:
        """Persistent ``Reduce_scatter``."""
        return self._init(self.Ireduce_scatter, sendbuf, recvbuf, recvcounts, op)

    def Scan_init(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Any = None) -> Prequest:
        """Persistent ``Scan``."""
        return self._init(self.Iscan, sendbuf, recvbuf, op)

    def Exscan_init(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Any = None) -> Prequest:
        """Persistent ``Exscan``."""
        return self._init(self.Iexscan, sendbuf, recvbuf, op)


# ---- the reductions' fast path: two plain arrays ----

_PLAIN: dict[str, Datatype | None] = {}
"""numpy type character -> the predefined datatype ``from_dtype`` gives it (None: none, or not one
element of its own dtype); ``from_dtype`` depends on the character alone for unstructured dtypes."""
_PLAIN_OPS: dict[tuple[str, int, int], tuple[str, ReduceOp]] = {}
"""(call name, predefined op, datatype) -> (the call as errors name it, the checked ReduceOp)."""


def _plain(arr: Any) -> Datatype | None:
    """The datatype of a plain numpy array (C-contiguous, native byte order, a predefined type
    of one element of its dtype), which ``message`` would read whole as a view of itself; else None."""
    if type(arr) is not np.ndarray or not arr.flags.c_contiguous:
        return None
    dtype = arr.dtype
    if not dtype.isnative or dtype.fields is not None:
        return None
    char = dtype.char
    if char in _PLAIN:
        found = _PLAIN[char]
    else:
        found = from_dtype(dtype)
        if found is not None and (found._base is not found or found._elements() != 1 or found._freed):
            found = None
        _PLAIN[char] = found
    return found if found is not None and found._np == dtype else None


def _plain_operands(sendbuf: Any, recvbuf: Any, op: Any, name: str
                    ) -> tuple[str, ReduceOp, Any, Any] | None:
    """(call, op, a private copy of the send data, the receive buffer's elements) when both
    buffers are plain arrays (``_plain``) of one datatype and size, the receive one writeable,
    and ``op`` a predefined op that already passed ``_reduce_op``'s checks for the datatype;
    else None (the general path parses and checks everything, and raises what it finds)."""
    if not isinstance(op, Op):
        return None
    dt = _plain(sendbuf)
    if dt is None or _plain(recvbuf) is not dt or sendbuf.size != recvbuf.size \
            or not recvbuf.flags.writeable:
        return None
    known = _PLAIN_OPS.get((name, op._id, dt._id))
    if known is None:
        return None
    data = np.array(sendbuf if sendbuf.ndim == 1 else sendbuf.reshape(-1), copy=True)
    return known[0], known[1], data, recvbuf if recvbuf.ndim == 1 else recvbuf.reshape(-1)


def _put_plain(rflat: Any, recvbuf: Any, value: Any) -> None:
    """Write a reduction's result into a plain receive buffer's elements (as ``Buf.put`` would)."""
    if type(value) is np.ndarray and value.size == rflat.size:
        rflat[...] = value.reshape(-1)
    else:
        b = message(recvbuf, -1, "", True)
        b.put(0, value, b.count)


def _req(req: Request | None) -> Request:
    assert req is not None
    return req


def _layout(b: Buf | None, size: int) -> tuple[list[int], list[int]]:
    """Return (start item, item count) of each rank's block in ``b``."""
    if b is None:
        return [0] * size, [0] * size
    if b.counts is not None and b.displs is not None:
        return [b.displ + d for d in b.displs], list(b.counts)
    return [b.displ + i * b.count for i in range(size)], [b.count] * size


def _sized(b: Buf, count: int) -> Buf:
    """A view of ``b``'s description with ``count`` items (to compare one block with a send buffer)."""
    other = Buf(b.obj, b.flat, b.datatype, count, b.displ, b.origin, b._item)
    return other
