"""Point-to-point: lowercase methods for Python objects, uppercase methods for buffers.

Each call checks its arguments (MPI error classes), translates MPI's
``ANY_SOURCE``/``ANY_TAG``/``PROC_NULL`` and calls the rank's simcluster
``Comm``: a blocking call blocks the rank (``engine.sync.block``), a nonblocking one
returns an MPI ``Request`` around simcluster's. Sends and receives with
``PROC_NULL`` complete at once and move nothing; their buffer spec is not read
(any object goes, as in mpi4py).

* lowercase (``send``, ``recv``, ``isend``, ...): the object is pickled
  (``MPI.pickle``) and travels as a uint8 array of the pickle's bytes;
* uppercase (``Send``, ``Recv``, ``Isend``, ...): the buffer spec's items
  travel as a numpy array of the datatype (a view of the user's memory when
  the type is contiguous; derived types are packed), and receives fill the
  user's buffer in place. ``Recv`` of a message larger than the buffer is
  ``ERR_TRUNCATE``, of another datatype ``ERR_TYPE``; a shorter one fills the
  front, as in MPI.

Modes: ``Send`` is simcluster's standard send (eager up to ``eager_limit``,
then rendezvous); ``Ssend`` completes only once matched; ``Rsend`` is a
standard send; ``Bsend`` completes at once, holding space of the buffer given
to ``MPI.Attach_buffer`` until the message has left.

Rule 1: the user's buffers are read when the call is made (sends) and written
only by the receive that completes (receives), as MPI allows.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import payload as _payload
from . import _interop
from ._blocking import block, block_receive, poll
from ._buffers import BUFFER_AUTOMATIC, Buf, message
from ._constants import (
    ANY_SOURCE, ANY_TAG, BSEND_OVERHEAD, PROC_NULL, ERR_BUFFER, ERR_COUNT, ERR_TRUNCATE,
)
from ._errors import error
from ._message import Message
from ._pickle import check_transport, dumps, loads
from ._requests import Finish, Prequest, Request, _Deferred, _Immediate, _noop
from ._state import CommState, dest, recv_tag, send_tag, source
from ._status import Status

from ..request import Request as ScRequestType

if TYPE_CHECKING:
    from ..request import Request as ScRequest


def _fill(status: Status | None, req: ScRequest[Any]) -> None:
    if status is not None:
        st = req.status
        if st is None:
            status._clear()
        else:
            status._set(st.source, st.tag, st.nbytes)


def _obj(obj: object) -> str:
    return type(obj).__name__


def _room(buf: Any, rank: int, call: str, warn: bool) -> int | None:
    """The bytes a lowercase receive's ``buf`` holds (an int, or a writable buffer), None for
    no ``buf``; mpi4py 4 warns that ``recv``'s ``buf`` is deprecated."""
    if buf is None:
        return None
    if warn:
        warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=3)
    if not isinstance(buf, bool) and hasattr(buf, "__index__"):
        return int(buf.__index__())
    try:
        return memoryview(buf).nbytes
    except TypeError:
        raise TypeError(f"rank {rank}: {call}: buf must be None, a size in bytes or a writable "
                        f"buffer, got {type(buf).__name__}; leave buf out (pickles are sized on "
                        "arrival)") from None


def _load(data: Any, room: int | None, rank: int, call: Callable[[], str]) -> Any:
    """Unpickle a lowercase receive's bytes: an empty message is None, as in mpi4py."""
    n = len(data)
    if room is not None and n > room:
        raise error(ERR_TRUNCATE, rank, call(), f"the message is {n} bytes but buf holds {room}",
                    "leave buf out: pickles are sized on arrival")
    return None if n == 0 else loads(data)


def _iprobe(sc: Any, s: int, t: int, call: Any) -> Any:
    """simcluster's iprobe: finding nothing costs the rank the run's poll_cost of virtual time."""
    return poll(lambda: sc.iprobe(s, t), lambda: sc.probe(s, t), call)


def _proc_null(peer: object) -> bool:
    """Whether ``peer`` is ``PROC_NULL``: mpi4py then ignores the buffer spec (any object goes)."""
    return not isinstance(peer, bool) and hasattr(peer, "__index__") and peer.__index__() == PROC_NULL


class PointToPoint:
    """The point-to-point methods of ``MPI.Comm``."""

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def _st(self) -> CommState: ...

    # ---- lowercase: Python objects ----

    def _post_send(self, obj: Any, dst: int, tag: int, name: str, nonblocking: bool) -> Any:
        st = self._st
        sc = st.sc
        call = lambda: f"{name}(obj={_obj(obj)}, dest={dst!r}, tag={tag!r})"  # noqa: E731
        d = dest(st, dst, call)
        t = send_tag(st, tag, call)
        check_transport(sc, call)
        st.rank_state.reap()
        if d is None:
            return Request._of(_Immediate(), sc.rank, call) if nonblocking else None
        payload = dumps(obj)
        if name in ("send", "bsend"):
            return block(sc.send(payload, d, t))
        if name == "ssend":
            return block(sc.ssend(payload, d, t))
        req = sc.issend(payload, d, t) if name == "issend" else sc.isend(payload, d, t)
        return Request._of(req, sc.rank, call, owner=st.rank_state)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send a Python object (pickled) to ``dest``; returns when the send buffer is free."""
        self._post_send(obj, dest, tag, "send", False)

    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Buffered send of a Python object (a standard send here: pickles are copied anyway)."""
        self._post_send(obj, dest, tag, "bsend", False)

    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Synchronous send of a Python object: returns once ``dest`` has matched it."""
        self._post_send(obj, dest, tag, "ssend", False)

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Start sending a Python object; return a Request."""
        req: Request = self._post_send(obj, dest, tag, "isend", True)
        return req

    def ibsend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Start a buffered send of a Python object (a standard ``isend`` here)."""
        req: Request = self._post_send(obj, dest, tag, "isend", True)
        return req

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Start a synchronous send of a Python object; the request completes once matched."""
        req: Request = self._post_send(obj, dest, tag, "issend", True)
        return req

    def _recv_args(self, name: str, source_: int, tag: int) -> tuple[CommState, Any, int | None, int]:
        st = self._st
        call = lambda: f"{name}(source={source_!r}, tag={tag!r})"  # noqa: E731
        s = source(st, source_, call)
        t = recv_tag(st, tag, call)
        return st, call, s, t

    def recv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             status: Status | None = None) -> Any:
        """Receive a Python object and return it.

        ``buf`` is not needed (pickles are sized on arrival): mpi4py 4 deprecates it with a
        ``UserWarning``; given, a message larger than it is ``ERR_TRUNCATE``.
        """
        st, call, s, t = self._recv_args("recv", source, tag)
        check_transport(st.sc, call)
        room = _room(buf, st.sc.rank, call(), True)
        st.rank_state.reap()
        if s is None:
            if status is not None:
                status._null()
            return None
        sc = st.sc
        if status is None:
            data = block_receive(sc.recv(src=s, tag=t), sc.rank, call)
        else:
            req = sc.irecv(src=s, tag=t)
            data = block_receive(req, sc.rank, call)
            _fill(status, req)
        return _load(data, room, sc.rank, call)

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Start receiving a Python object; ``req.wait()`` returns it."""
        st, call, s, t = self._recv_args("irecv", source, tag)
        check_transport(st.sc, call)
        rank = st.sc.rank
        room = _room(buf, rank, call(), False)
        if s is None:
            return Request._of(_Immediate(None, True), rank, call)
        return Request._of(st.sc.irecv(src=s, tag=t), rank, call,
                           lambda raw, _: _load(raw, room, rank, call), owner=st.rank_state)

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = ANY_SOURCE, recvtag: int = ANY_TAG, status: Status | None = None) -> Any:
        """Send an object to ``dest`` and receive one from ``source`` at once; return the received one."""
        sreq = self._post_send(sendobj, dest, sendtag, "isend", True)
        rreq = self.irecv(None, source, recvtag)
        value = rreq.wait(status)
        sreq.Wait()
        return value

    def _probe(self, name: str, source_: int, tag: int, status: Status | None,
               blocking: bool) -> bool:
        st, call, s, t = self._recv_args(name, source_, tag)
        st.rank_state.reap()
        if s is None:
            if status is not None:
                status._null()
            return True
        sc = st.sc
        found = block(sc.probe(s, t)) if blocking else _iprobe(sc, s, t, call)
        if found is None:
            return False
        if status is not None:
            status._set(found.source, found.tag, found.nbytes)
        return True

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Wait until a message from ``source`` with ``tag`` has arrived; fill ``status``; return True."""
        return self._probe("Probe", source, tag, status, True)

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Return whether a matching message has arrived (filling ``status``); never blocks."""
        return self._probe("Iprobe", source, tag, status, False)

    probe = Probe
    iprobe = Iprobe

    def _mprobe(self, name: str, source_: int, tag: int, status: Status | None,
                blocking: bool) -> Message | None:
        st, call, s, t = self._recv_args(name, source_, tag)
        sc = st.sc
        if s is None:
            if status is not None:
                status._null()
            return Message._of(None, sc.rank, call, null=True)
        found = block(sc.probe(s, t)) if blocking else _iprobe(sc, s, t, call)
        if found is None:
            return None
        if status is not None:
            status._set(found.source, found.tag, found.nbytes)
        req = sc.irecv(src=found.source, tag=found.tag)  # claims that very message (see _message)
        where = lambda: f"{name}(source={found.source}, tag={found.tag})"  # noqa: E731
        return Message._of(req, sc.rank, where)

    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message:
        """Wait for a matching message and take it out of matching; receive it with ``Message.Recv``."""
        msg = self._mprobe("Mprobe", source, tag, status, True)
        assert msg is not None
        return msg

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
                ) -> Message | None:
        """Like ``Mprobe`` but never blocks: None when no matching message has arrived."""
        return self._mprobe("Improbe", source, tag, status, False)

    mprobe = Mprobe
    improbe = Improbe

    # ---- uppercase: buffers ----

    def _send_buf(self, buf: Any, dst: int, tag: int, name: str) -> tuple[CommState, Any, int | None,
                                                                          int, Buf | None]:
        """Check a buffer send's arguments; the Buf is None for ``PROC_NULL`` (never parsed, as mpi4py)."""
        st = self._st
        holder: list[Buf] = []
        call = lambda: (f"{name}(buf={holder[0].describe() if holder else _payload.describe(buf)}, "  # noqa: E731
                        f"dest={dst!r}, tag={tag!r})")
        b = None
        if not _proc_null(dst):
            b = message(buf, st.sc.rank, f"{name}(dest={dst!r}, tag={tag!r})", False)
            holder.append(b)
        d = dest(st, dst, call)
        t = send_tag(st, tag, call)
        st.rank_state.reap()
        return st, call, d, t, b

    def _start_send(self, buf: Any, dst: int, tag: int, name: str) -> Request:
        st, call, d, t, b = self._send_buf(buf, dst, tag, name)
        sc = st.sc
        if d is None or b is None:
            return Request._of(_Immediate(), sc.rank, call)
        data = b.take(b.displ, b.count)
        if name == "Ibsend":
            self._bsend(st, b, data, d, t, call)
            return Request._of(_Immediate(), sc.rank, call)
        req = sc.issend(data, d, t) if name == "Issend" else sc.isend(data, d, t)
        return Request._of(req, sc.rank, call, owner=st.rank_state)

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Send a buffer (standard mode): returns once the buffer may be reused."""
        st, call, d, t, b = self._send_buf(buf, dest, tag, "Send")
        if d is not None and b is not None:
            block(st.sc.send(b.take(b.displ, b.count), d, t))

    def Rsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Ready-mode send (a standard send here: the receive need not be posted already)."""
        st, call, d, t, b = self._send_buf(buf, dest, tag, "Rsend")
        if d is not None and b is not None:
            block(st.sc.send(b.take(b.displ, b.count), d, t))

    def Ssend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Synchronous send: returns once ``dest`` has matched the message."""
        st, call, d, t, b = self._send_buf(buf, dest, tag, "Ssend")
        if d is not None and b is not None:
            block(st.sc.ssend(b.take(b.displ, b.count), d, t))

    def Bsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Buffered send: returns at once, holding space of the attached buffer until the data leaves.

        Raises:
            MPI.Exception: ``ERR_BUFFER`` when no buffer is attached or it has no room left.
        """
        st, call, d, t, b = self._send_buf(buf, dest, tag, "Bsend")
        if d is not None and b is not None:
            self._bsend(st, b, b.take(b.displ, b.count), d, t, call)

    def _bsend(self, st: CommState, b: Buf, data: Any, d: int, t: int, call: Any) -> None:
        rs = st.rank_state
        need = b.nbytes + BSEND_OVERHEAD
        size = (0 if rs.bsend is None else sys.maxsize if rs.bsend is BUFFER_AUTOMATIC
                else _interop.nbytes_of(rs.bsend))
        if rs.bsend_used + need > size:
            raise error(ERR_BUFFER, st.sc.rank, call(), f"the buffered send needs {need} bytes "
                        f"(data + MPI.BSEND_OVERHEAD) but the attached buffer has "
                        f"{size - rs.bsend_used} of {size} free",
                        "MPI.Attach_buffer(bytearray(n)) with n large enough for every buffered "
                        "send in flight")
        copy = np.array(data, copy=True) if isinstance(data, np.ndarray) else data
        req = st.sc.isend(copy, d, t)
        if not req.test():  # eager: done at once; rendezvous: kept until it leaves
            rs.bsend_used += need
            rs.adopt(req, need)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start a standard-mode send of a buffer; do not change it until the request completes."""
        return self._start_send(buf, dest, tag, "Isend")

    def Ibsend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start a buffered send (completes at once; see ``Bsend``)."""
        return self._start_send(buf, dest, tag, "Ibsend")

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start a synchronous send; the request completes once ``dest`` has matched it."""
        return self._start_send(buf, dest, tag, "Issend")

    def Irsend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start a ready-mode send (a standard ``Isend`` here)."""
        return self._start_send(buf, dest, tag, "Irsend")

    def _recv_buf(self, buf: Any, source_: int, tag: int, name: str
                  ) -> tuple[CommState, Any, int | None, int, Buf | None]:
        """Check a buffer receive's arguments; the Buf is None for ``PROC_NULL`` (never parsed, as mpi4py)."""
        st = self._st
        holder: list[Buf] = []
        call = lambda: (f"{name}(buf={holder[0].describe() if holder else _payload.describe(buf)}, "  # noqa: E731
                        f"source={source_!r}, tag={tag!r})")
        b = None
        if not _proc_null(source_):
            b = message(buf, st.sc.rank, f"{name}(source={source_!r}, tag={tag!r})", True)
            holder.append(b)
        s = source(st, source_, call)
        t = recv_tag(st, tag, call)
        st.rank_state.reap()
        return st, call, s, t, b

    @staticmethod
    def _target(b: Buf) -> tuple[Any, Finish]:
        """Return the array a receive fills and what to do once it has (unpack derived types)."""
        if not b._pos:
            return b.take(b.displ, b.count), _noop
        temp = b.empty(b.count)

        def finish(raw: Any, status: Any) -> None:
            n = 0 if status is None else status.nbytes // temp.itemsize
            b.put(b.displ, temp[:n])
        return temp, finish

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             status: Status | None = None) -> None:
        """Receive into ``buf`` (filled in place); fill ``status``."""
        st, call, s, t, b = self._recv_buf(buf, source, tag, "Recv")
        if s is None or b is None:
            if status is not None:
                status._null()
            return
        sc = st.sc
        target, finish = self._target(b)
        if status is None and finish is _noop:
            block_receive(sc.recv(target, src=s, tag=t), sc.rank, call)
            return
        req = sc.irecv(target, src=s, tag=t)
        block_receive(req, sc.rank, call)
        finish(None, req.status)
        _fill(status, req)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Start receiving into ``buf``; the buffer is filled once the request completes."""
        st, call, s, t, b = self._recv_buf(buf, source, tag, "Irecv")
        sc = st.sc
        if s is None or b is None:
            return Request._of(_Immediate(None, True), sc.rank, call)
        target, finish = self._target(b)
        return Request._of(sc.irecv(target, src=s, tag=t), sc.rank, call,
                           lambda raw, status: finish(raw, status), owner=st.rank_state)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = ANY_SOURCE, recvtag: int = ANY_TAG, status: Status | None = None) -> None:
        """Send ``sendbuf`` to ``dest`` and receive into ``recvbuf`` from ``source`` at once."""
        self._send_buf(sendbuf, dest, sendtag, "Sendrecv")  # a bad send buffer fails before the receive is posted
        rreq = self.Irecv(recvbuf, source, recvtag)
        sreq = self.Isend(sendbuf, dest, sendtag)
        Request.Waitall([rreq, sreq], [status if status is not None else Status(), Status()])

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Status | None = None) -> None:
        """Send ``buf`` to ``dest``, then replace its contents with what ``source`` sends."""
        st, call, d, t, b = self._send_buf(buf, dest, sendtag, "Sendrecv_replace")
        copy = None
        if b is not None:
            data = b.take(b.displ, b.count)
            copy = np.array(data, copy=True) if isinstance(data, np.ndarray) else data
        rreq = self.Irecv(buf, source, recvtag)
        sreq = (Request._of(_Immediate(), st.sc.rank, call) if d is None
                else Request._of(st.sc.isend(copy, d, t), st.sc.rank, call))
        Request.Waitall([rreq, sreq], [status if status is not None else Status(), Status()])

    def Isendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                  source: int = ANY_SOURCE, recvtag: int = ANY_TAG) -> Request:
        """Start ``Sendrecv``: the request completes once both the send and the receive have."""
        self._send_buf(sendbuf, dest, sendtag, "Isendrecv")  # a bad send buffer fails first
        rreq = self.Irecv(recvbuf, source, recvtag)
        sreq = self.Isend(sendbuf, dest, sendtag)
        return _joined(rreq, sreq, lambda: f"Isendrecv(dest={dest!r}, source={source!r})",
                       self._st)

    def Isendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                          recvtag: int = ANY_TAG) -> Request:
        """Start ``Sendrecv_replace``: ``buf`` is sent as it is now, then refilled by the receive."""
        st, call, d, t, b = self._send_buf(buf, dest, sendtag, "Isendrecv_replace")
        sreq = self._send_copy(st, call, d, t, b)
        rreq = self.Irecv(buf, source, recvtag)
        return _joined(rreq, sreq, call, st)

    def _send_copy(self, st: CommState, call: Any, d: int | None, t: int, b: Buf | None) -> Request:
        """Send a copy of ``b``'s items now (the buffer is about to be received into)."""
        if d is None or b is None:
            return Request._of(_Immediate(), st.sc.rank, call)
        data = b.take(b.displ, b.count)
        copy = np.array(data, copy=True) if isinstance(data, np.ndarray) else data
        return Request._of(st.sc.isend(copy, d, t), st.sc.rank, call, owner=st.rank_state)

    # ---- partitioned communication (MPI-4) ----

    def Psend_init(self, buf: Any, partitions: int, dest: int, tag: int = 0,
                   info: Any = None) -> Prequest:
        """Return a partitioned send request: ``buf`` split into ``partitions`` equal parts.

        Each ``Start`` begins a send of the buffer's contents; the message leaves, whole, when
        the last partition is marked ready (``Pready``, ``Pready_range``, ``Pready_list``).
        """
        st, call, _, _, b = self._send_buf(buf, dest, tag, "Psend_init")
        n = self._partitions(st, partitions, b, call)

        def start() -> tuple[Any, Finish]:
            req = self._start_send(buf, dest, tag, "Isend")
            return req._req, req._finish
        return Prequest._persistent(start, st.sc.rank, call, st.rank_state, n, send=True)

    def Precv_init(self, buf: Any, partitions: int, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                   info: Any = None) -> Prequest:
        """Return a partitioned receive request; each ``Start`` posts a receive into ``buf``.

        ``Parrived(i)`` tells whether partition ``i`` has arrived: here every partition arrives
        with the whole message.
        """
        st, call, _, _, b = self._recv_buf(buf, source, tag, "Precv_init")
        n = self._partitions(st, partitions, b, call)

        def start() -> tuple[Any, Finish]:
            req = self.Irecv(buf, source, tag)
            return req._req, req._finish
        return Prequest._persistent(start, st.sc.rank, call, st.rank_state, n, send=False)

    @staticmethod
    def _partitions(st: CommState, partitions: Any, b: Buf | None, call: Any) -> int:
        """Check a partition count: at least 1, and it divides the buffer's items."""
        if isinstance(partitions, bool) or not hasattr(partitions, "__index__") or (
                partitions.__index__() < 1):
            raise error(ERR_COUNT, st.sc.rank, call(), f"partitions must be an int >= 1, got "
                        f"{partitions!r}", "split the buffer into 1 or more partitions")
        n = int(partitions.__index__())
        if b is not None and b.count % n:
            raise error(ERR_COUNT, st.sc.rank, call(), f"{b.count} items do not split into "
                        f"{n} equal partitions", "pass a buffer whose item count partitions "
                        "divides")
        return n

    # ---- persistent requests ----

    def _persistent(self, name: str, start: Any, call: Any) -> Prequest:
        st = self._st
        return Prequest._persistent(start, st.sc.rank, call, st.rank_state)

    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        """Return a persistent send request; each ``Start`` sends the buffer's current contents."""
        return self._send_init(buf, dest, tag, "Isend")

    def Bsend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        """Persistent buffered send."""
        return self._send_init(buf, dest, tag, "Ibsend")

    def Ssend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        """Persistent synchronous send."""
        return self._send_init(buf, dest, tag, "Issend")

    def Rsend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        """Persistent ready-mode send."""
        return self._send_init(buf, dest, tag, "Irsend")

    def _send_init(self, buf: Any, dst: int, tag: int, name: str) -> Prequest:
        st, call, _, _, _ = self._send_buf(buf, dst, tag, name.replace("I", "", 1) + "_init")

        def start() -> tuple[Any, Finish]:
            req = self._start_send(buf, dst, tag, name)
            return req._req, req._finish
        return Prequest._persistent(start, st.sc.rank, call, st.rank_state)

    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Prequest:
        """Return a persistent receive request; each ``Start`` posts a receive into ``buf``."""
        st, call, _, _, _ = self._recv_buf(buf, source, tag, "Recv_init")

        def start() -> tuple[Any, Finish]:
            req = self.Irecv(buf, source, tag)
            return req._req, req._finish
        return Prequest._persistent(start, st.sc.rank, call, st.rank_state)



def _joined(rreq: Request, sreq: Request, call: Callable[[], str], st: CommState) -> Request:
    """One request for a receive and a send (``Isendrecv``): done when both are; its status and
    value are the receive's."""
    also = (sreq._req,) if isinstance(sreq._req, ScRequestType) else ()
    assert rreq._req is not None and not isinstance(rreq._req, _Deferred)  # a receive: never deferred
    return Request._of(rreq._req, st.sc.rank, call, rreq._finish, owner=st.rank_state, also=also)
