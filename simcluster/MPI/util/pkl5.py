"""``mpi4py.util.pkl5``: Python objects sent as several messages, pickled with protocol 5.

mpi4py's ``pkl5`` exists to pass objects beyond MPI's 2 GiB message limit
and to send large buffers (numpy arrays) out of band, without copying them
into the pickle. An object travels as a **header** (an ``int64`` array of
lengths: the pickle's, then each out-of-band buffer's), then the pickle, then
each buffer, all from the same source with the same tag, so a receive
probes the header and then receives exactly what it announced.

Here the same protocol runs over simcluster's MPI: the point-to-point
methods use the uppercase ``Send``/``Isend``/``Issend``/``Bsend``/``Probe``/
``Mprobe`` on the user's communicator and tag, so requests, statuses and
matched probes behave as mpi4py's (a ``Request`` is a tuple of the MPI
requests of the header and parts; ``Message`` a tuple of matched messages).
The collectives (``bcast``, ``gather``, ``scatter``, ``allgather``,
``alltoall``) carry each rank's ``(pickle, buffers)`` through the facade's
own object collectives, whose traffic never meets user messages.
simcluster has no 2 GiB limit; ``_bigmpi`` is kept with mpi4py's API (and
still wraps parts longer than its ``blocksize`` in a contiguous datatype).

Rule 1: the parts of one object are sent in order, to one destination with
one tag, so MPI's non-overtaking order keeps them together.
Rule 2: objects are pickled with this module's ``pickle`` (an ``MPI.Pickle``
that may be replaced), never with ``MPI.pickle``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ... import MPI as _package
from .._comm import Comm as _Comm
from .._comm import Intracomm as _Intracomm
from .._intercomm import Intercomm as _Intercomm
from .._constants import ANY_SOURCE, ANY_TAG, PROC_NULL, ROOT
from .._pickle import Pickle
from .._status import Status

MPI: Any = _package  # names the package sets up at import (constants, datatypes) are not visible to mypy

__all__ = ["Comm", "Intercomm", "Intracomm", "Message", "Pickle", "Request", "Status", "pickle"]

pickle = Pickle()
"""The codec of this module's methods (replace it, or set its ``PROTOCOL``/``THRESHOLD``)."""

_HEADER_CODE = "q"  # the header is an array of C long long: one length per part


def _dumps(obj: Any) -> tuple[Any, list[Any]]:
    return pickle.dumps_oob(obj)


def _loads(data: Any, bufs: list[Any]) -> Any:
    return pickle.loads_oob(data, bufs)


class _BigMPI:
    """Send any part as one message: longer than ``blocksize`` bytes, as one contiguous datatype.

    Used as a context manager around the parts of one message, so the
    datatypes it made are freed afterwards (``cache`` holds them by length).
    """

    blocksize = (1 << 63) - 1  # MPI-4 counts are 64-bit

    def __init__(self) -> None:
        self.cache: dict[int, Any] = {}

    def __enter__(self) -> _BigMPI:
        return self

    def __exit__(self, *exc: object) -> None:
        for datatype in self.cache.values():
            datatype.Free()
        self.cache.clear()

    def __call__(self, buf: Any) -> tuple[Any, int, Any]:
        view = memoryview(buf)
        count = view.nbytes
        if count <= self.blocksize:
            return (view, count, MPI.BYTE)
        datatype = self.cache.get(count)
        if datatype is None:
            datatype = self.cache[count] = MPI.BYTE.Create_contiguous(count).Commit()
        return (view, 1, datatype)


_bigmpi = _BigMPI()


# ---- the header: lengths of the parts ----


def _header_type() -> Any:
    return MPI.Datatype.fromcode(_HEADER_CODE)


def _pack(lengths: Sequence[int]) -> bytes:
    return struct.pack(f"{len(lengths)}{_HEADER_CODE}", *lengths)


def _unpack(raw: Any) -> tuple[int, ...]:
    size = len(raw) // struct.calcsize(_HEADER_CODE)
    return struct.unpack(f"{size}{_HEADER_CODE}", raw)


def _alloc(nbytes: int) -> bytearray:
    return bytearray(nbytes)


# ---- point to point ----

Post = Callable[[Any, Any, int, int], Any]
"""send(comm, buffer spec, dest, tag): one of MPI.Comm's uppercase sends, or one that keeps a request."""


def _send_parts(comm: Any, send: Post, data: Any, bufs: list[Any], dest: int, tag: int) -> None:
    lengths = [len(memoryview(data).cast("B")), *(memoryview(b).nbytes for b in bufs)]
    send(comm, (_pack(lengths), _header_type()), dest, tag)
    with _bigmpi as big:
        send(comm, big(data), dest, tag)
        for buf in bufs:
            send(comm, big(buf), dest, tag)


def _send(comm: Any, send: Post, obj: Any, dest: int, tag: int) -> None:
    if dest == PROC_NULL:
        send(comm, (None, 0, MPI.BYTE), dest, tag)
        return
    data, bufs = _dumps(obj)
    _send_parts(comm, send, data, bufs, dest, tag)


def _isend(comm: Any, isend: Callable[..., Any], obj: Any, dest: int, tag: int) -> Request:
    started: list[Any] = []

    def post(comm: Any, buf: Any, dest: int, tag: int) -> None:
        started.append(isend(comm, buf, dest, tag))

    _send(comm, post, obj, dest, tag)
    return Request(started)


def _recv_parts(comm: Any, buf: Any, source: int, tag: int,
                status: Status | None = None) -> tuple[Any, list[Any]]:
    """Receive one object's parts (probing its header first); return (pickle, buffers)."""
    if status is None:
        status = Status()
    MPI.Comm.Probe(comm, source, tag, status)
    source, tag = status.Get_source(), status.Get_tag()
    header_type = _header_type()
    header = _alloc(status.Get_elements(header_type) * header_type.Get_size())
    MPI.Comm.Recv(comm, (header, header_type), source, tag, status)
    lengths = _unpack(header)
    data: Any = None
    if buf is not None:  # the user's buffer holds the pickle when it is large enough
        view = memoryview(buf).cast("B")
        data = view[:lengths[0]] if len(view) >= lengths[0] else None
    if data is None:
        data = _alloc(lengths[0])
    bufs = [_alloc(n) for n in lengths[1:]]
    with _bigmpi as big:
        MPI.Comm.Recv(comm, big(data), source, tag)
        for part in bufs:
            MPI.Comm.Recv(comm, big(part), source, tag)
    status.Set_elements(MPI.BYTE, sum(lengths))
    return data, bufs


def _recv(comm: Any, buf: Any, source: int, tag: int, status: Status | None) -> Any:
    if source == PROC_NULL:
        MPI.Comm.Recv(comm, (None, 0, MPI.BYTE), source, tag, status)
        return None
    data, bufs = _recv_parts(comm, buf, source, tag, status)
    return _loads(data, bufs)


def _mprobe(comm: Any, mprobe: Callable[..., Any], source: int, tag: int,
            status: Status | None) -> Message | None:
    """Take an object's header and parts out of matching; None when ``Improbe`` finds nothing."""
    if source == PROC_NULL:
        return Message([MPI.Comm.Mprobe(comm, source, tag, status)])
    if status is None:
        status = Status()
    first = mprobe(comm, source, tag, status)
    if first is None:
        return None
    taken = [first]
    source, tag = status.Get_source(), status.Get_tag()
    nbytes = 0
    for _ in range(status.Get_elements(_header_type())):
        taken.append(MPI.Comm.Mprobe(comm, source, tag, status))
        nbytes += status.Get_elements(MPI.BYTE)
    status.Set_elements(MPI.BYTE, nbytes)
    return Message(taken)


def _mrecv_header(msg: Any, count: int, status: Status | None) -> tuple[int, ...]:
    header_type = _header_type()
    header = _alloc(count * header_type.Get_size())
    MPI.Message.Recv(msg, (header, header_type), status)
    return _unpack(header)


def _mrecv_parts(message: Message, mrecv: Callable[[Any, Any], None],
                 status: Status | None = None) -> tuple[Any, list[Any]]:
    """Receive a matched object's parts with ``mrecv(msg, buffer spec)``; return (pickle, buffers)."""
    if message[0] == MPI.MESSAGE_NO_PROC:  # from PROC_NULL: the object is None
        _mrecv_header(message[0], 0, status)
        mrecv(MPI.MESSAGE_NO_PROC, (None, 0, MPI.BYTE))
        data, bufs = _dumps(None)
        return bytearray(data), bufs
    parts = iter(message)
    lengths = _mrecv_header(next(parts), len(message) - 1, status)
    data = _alloc(lengths[0])
    bufs = [_alloc(n) for n in lengths[1:]]
    with _bigmpi as big:
        mrecv(next(parts), big(data))
        for buf in bufs:
            mrecv(next(parts), big(buf))
    if status is not None:
        status.Set_elements(MPI.BYTE, sum(lengths))
    return data, bufs


def _load_when_done(request: Request) -> Any:
    """The object a completed ``Message.irecv`` request received (None for sends)."""
    pending = request.__dict__.get("_data_bufs")
    if pending is None:
        return None
    if request == MPI.REQUEST_NULL:
        del request.__dict__["_data_bufs"]
    return _loads(*pending)


def _complete(requests: Sequence[Request], complete: Callable[..., bool],
              statuses: Any) -> tuple[bool, list[Any] | None]:
    """Test or wait every MPI request of ``requests``; statuses go to each one's first part."""
    if isinstance(statuses, list):
        statuses.extend(Status() for _ in range(len(requests) - len(statuses)))
    flat = [part for req in requests for part in req]
    flat_statuses = None
    if statuses is not None:
        flat_statuses = [sts for req, sts in zip(requests, statuses) for sts in [sts] * len(req)]
    if not complete(flat, flat_statuses):
        return False, None
    return True, [_load_when_done(req) for req in requests]


# ---- collectives ----


def _payload(obj: Any) -> tuple[Any, list[bytes]]:
    """``obj`` as what a facade collective carries: its pickle and its out-of-band buffers."""
    data, bufs = _dumps(obj)
    return bytes(memoryview(data).cast("B")), [bytes(memoryview(b).cast("B")) for b in bufs]


def _unload(payload: tuple[Any, list[bytes]]) -> Any:
    data, bufs = payload
    return _loads(data, [bytearray(b) for b in bufs])


def _items(objs: Any, size: int, call: str, comm: Any) -> list[Any]:
    items = [None] * size if objs is None else list(objs)
    if len(items) != size:
        raise ValueError(f"rank {comm.Get_rank()}: pkl5.{call}: expecting {size} items, got "
                         f"{len(items)}; pass one object per rank")
    return items


# ---- the public objects ----


class Request(tuple):  # type: ignore[type-arg]
    """The requests of the parts of one object (a tuple of ``MPI.Request``)."""

    def __new__(cls, request: MPI.Request | Iterable[MPI.Request] | None = None) -> Request:
        if request is None:
            request = (MPI.REQUEST_NULL,)
        elif isinstance(request, MPI.Request):
            request = (request,)
        return super().__new__(cls, request)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Request):
            return tuple(self) == tuple(other)
        if isinstance(other, MPI.Request):
            return all(req == other for req in self)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, Request):
            return tuple(self) != tuple(other)
        if isinstance(other, MPI.Request):
            return any(req != other for req in self)
        return NotImplemented

    __hash__ = tuple.__hash__

    def __bool__(self) -> bool:
        return any(self)

    def Free(self) -> None:  # noqa: N802 - mpi4py's name
        """Free every part's request (pending sends still complete)."""
        for req in self:
            req.Free()

    def free(self) -> None:
        """Free every part's request."""
        for req in self:
            req.free()

    def cancel(self) -> None:
        """Ask to cancel every part's request."""
        for req in self:
            req.Cancel()

    def get_status(self, status: Status | None = None) -> bool:
        """Return whether every part has completed, without completing them (``status``: the first part's)."""
        statuses = [status] + [None] * (len(self) - 1)
        return all(req.Get_status(sts) for req, sts in zip(self, statuses))

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        """Return ``(True, object)`` once every part has completed, else ``(False, None)``.

        ``status`` describes the first part (the header, for a receive).
        """
        if not MPI.Request.Testall(list(self), None if status is None else [status]):
            return (False, None)
        return (True, _load_when_done(self))

    def wait(self, status: Status | None = None) -> Any:
        """Wait for every part; return the received object (None for a send)."""
        MPI.Request.Waitall(list(self), None if status is None else [status])
        return _load_when_done(self)

    @classmethod
    def get_status_all(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        """Return whether every request has completed, without completing them."""
        if statuses is None:
            return all(req.get_status() for req in requests)
        statuses += [Status() for _ in range(len(statuses), len(requests))]
        return all(req.get_status(sts) for req, sts in zip(requests, statuses))

    @classmethod
    def testall(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                ) -> tuple[bool, list[Any] | None]:
        """Return ``(True, objects)`` once every request has completed, else ``(False, None)``."""
        return _complete(requests, MPI.Request.Testall, statuses)

    @classmethod
    def waitall(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> list[Any]:
        """Wait for every request; return their objects (None for sends)."""
        objs = _complete(requests, MPI.Request.Waitall, statuses)[1]
        assert objs is not None
        return objs


class Message(tuple):  # type: ignore[type-arg]
    """The matched messages of one object's parts (a tuple of ``MPI.Message``)."""

    def __new__(cls, message: MPI.Message | Iterable[MPI.Message] | None = None) -> Message:
        if message is None:
            message = (MPI.MESSAGE_NULL,)
        elif isinstance(message, MPI.Message):
            message = (message,)
        return super().__new__(cls, message)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Message):
            return tuple(self) == tuple(other)
        if isinstance(other, MPI.Message):
            return all(msg == other for msg in self)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, Message):
            return tuple(self) != tuple(other)
        if isinstance(other, MPI.Message):
            return any(msg != other for msg in self)
        return NotImplemented

    __hash__ = tuple.__hash__

    def __bool__(self) -> bool:
        return any(self)

    def free(self) -> None:
        """Drop the handles."""
        for msg in self:
            msg.free()

    def recv(self, status: Status | None = None) -> Any:
        """Receive the matched object and return it."""
        def mrecv(msg: Any, buf: Any) -> None:
            MPI.Message.Recv(msg, buf)
        return _loads(*_mrecv_parts(self, mrecv, status))

    def irecv(self) -> Request:
        """Start receiving the matched object; ``wait()`` on the request returns it."""
        started: list[Any] = []

        def mrecv(msg: Any, buf: Any) -> None:
            started.append(MPI.Message.Irecv(msg, buf))
        data_bufs = _mrecv_parts(self, mrecv)
        request = Request(started)
        request.__dict__["_data_bufs"] = data_bufs
        return request

    @classmethod
    def probe(cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
              status: Status | None = None) -> Message:
        """Wait for an object from ``source`` with ``tag`` and take it out of matching."""
        found = _mprobe(comm, MPI.Comm.Mprobe, source, tag, status)
        assert found is not None
        return found

    @classmethod
    def iprobe(cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               status: Status | None = None) -> Message | None:
        """Like ``probe``, but None at once when no object has arrived."""
        return _mprobe(comm, MPI.Comm.Improbe, source, tag, status)


class Comm(_Comm):
    """A communicator whose lowercase methods use the pkl5 protocol (wrap any communicator)."""

    __slots__ = ()

    def __new__(cls, comm: MPI.Comm | None = None) -> Comm:
        self = MPI.Comm.__new__(cls, comm)
        assert isinstance(self, Comm)
        return self

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send ``obj`` (standard mode)."""
        _send(self, MPI.Comm.Send, obj, dest, tag)

    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send ``obj`` in buffered mode (every part uses the attached buffer)."""
        _send(self, MPI.Comm.Bsend, obj, dest, tag)

    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send ``obj`` in synchronous mode: returns once every part has been matched."""
        MPI.Request.Waitall(list(_isend(self, MPI.Comm.Issend, obj, dest, tag)))

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:  # type: ignore[override]
        """Start sending ``obj``; complete the returned ``Request``."""
        return _isend(self, MPI.Comm.Isend, obj, dest, tag)

    def ibsend(self, obj: Any, dest: int, tag: int = 0) -> Request:  # type: ignore[override]
        """Start a buffered send of ``obj``."""
        return _isend(self, MPI.Comm.Ibsend, obj, dest, tag)

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:  # type: ignore[override]
        """Start a synchronous send of ``obj``."""
        return _isend(self, MPI.Comm.Issend, obj, dest, tag)

    def recv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             status: Status | None = None) -> Any:
        """Receive an object and return it (``buf``, if large enough, holds its pickle)."""
        return _recv(self, buf, source, tag, status)

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE,  # type: ignore[override]
              tag: int = ANY_TAG) -> Request:
        """Not supported, as in mpi4py: raises RuntimeError (use ``mprobe(...).irecv()``)."""
        raise RuntimeError("unsupported")

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                 status: Status | None = None) -> Any:
        """Send ``sendobj`` to ``dest`` while receiving an object from ``source``; return it."""
        sent = _isend(self, MPI.Comm.Isend, sendobj, dest, sendtag)
        got = _recv(self, recvbuf, source, recvtag, status)
        MPI.Request.Waitall(list(sent))
        return got

    def mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,  # type: ignore[override]
               status: Status | None = None) -> Message:
        """Wait for an object and take it out of matching; receive it with ``Message.recv``."""
        return Message.probe(self, source, tag, status)

    def improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,  # type: ignore[override]
                status: Status | None = None) -> Message | None:
        """Like ``mprobe``, but None at once when no object has arrived."""
        return Message.iprobe(self, source, tag, status)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Return ``root``'s object on every rank."""
        payload = _payload(obj) if self.Get_rank() == root else None
        got = MPI.Comm.bcast(self, payload, root)
        return _unload(got)

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Return every rank's object on ``root`` (a list by rank), None elsewhere."""
        got = MPI.Comm.gather(self, _payload(sendobj), root)
        return None if got is None else [_unload(p) for p in got]

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        """Return item ``rank`` of ``root``'s sequence (None on ``root`` means None everywhere)."""
        payloads = None
        if self.Get_rank() == root:
            payloads = [_payload(o) for o in _items(sendobj, self.Get_size(), "scatter()", self)]
        return _unload(MPI.Comm.scatter(self, payloads, root))

    def allgather(self, sendobj: Any) -> list[Any]:
        """Return every rank's object on every rank."""
        return [_unload(p) for p in MPI.Comm.allgather(self, _payload(sendobj))]

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Send item ``i`` to rank ``i``; return what every rank sent to this one."""
        items = _items(sendobj, self.Get_size(), "alltoall()", self)
        return [_unload(p) for p in MPI.Comm.alltoall(self, [_payload(o) for o in items])]


class Intracomm(Comm, _Intracomm):
    """An intracommunicator with the pkl5 lowercase methods."""

    __slots__ = ()


class Intercomm(Comm, _Intercomm):
    """An intercommunicator with the pkl5 methods: roots and counts as ``MPI.Intercomm``'s."""

    __slots__ = ()

    def __new__(cls, comm: MPI.Comm | None = None) -> Intercomm:
        self = _Intercomm.__new__(cls, comm)
        assert isinstance(self, Intercomm)
        return self

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Return the root's object on the other group (None in the root's group)."""
        got = _Intercomm.bcast(self, _payload(obj) if root == MPI.ROOT else None, root)
        return None if got is None else _unload(got)

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Return the other group's objects on the root (a list by remote rank), None elsewhere."""
        got = _Intercomm.gather(self, _payload(sendobj), root)
        return None if got is None else [_unload(p) for p in got]

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        """Return item ``rank`` of the root's sequence on the other group (None in the root's)."""
        payloads = None
        if root == MPI.ROOT:
            payloads = [_payload(o) for o in _items(sendobj, self.Get_remote_size(), "scatter()", self)]
        got = _Intercomm.scatter(self, payloads, root)
        return None if got is None else _unload(got)

    def allgather(self, sendobj: Any) -> list[Any]:
        """Return the remote group's objects, by remote rank."""
        return [_unload(p) for p in _Intercomm.allgather(self, _payload(sendobj))]

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Send item ``i`` to remote rank ``i``; return what every remote rank sent to this one."""
        items = _items(sendobj, self.Get_remote_size(), "alltoall()", self)
        return [_unload(p) for p in _Intercomm.alltoall(self, [_payload(o) for o in items])]
