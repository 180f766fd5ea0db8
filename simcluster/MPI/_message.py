"""Matched probes: ``Mprobe``/``Improbe``/``mprobe``/``improbe`` and the ``Message`` they return.

A matched probe must take the message out of matching, so that no other
receive can get it. Here the probe finds the message (source and tag), then
posts a receive for exactly that source and tag at once: it matches the same
message, since any earlier one from that source with that tag would have been
the one probed. ``Message.Recv(buf)``/``recv()`` then wait for that receive
and copy the data into ``buf`` (or unpickle it).

Rule 1: the receive is posted before the probe call returns, so nothing can
overtake it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import request as _sc
from ._blocking import block_receive
from ._buffers import message
from ._constants import ANY_TAG, PROC_NULL, ERR_REQUEST, ERR_TRUNCATE
from ._errors import error
from ._pickle import loads
from ._requests import Request, _Immediate
from ._status import Status


class Message:
    """A message taken out of matching by a matched probe; receive it with ``Recv``/``recv``."""

    __slots__ = ("_req", "_rank", "_call", "_null", "__weakref__")

    _req: _sc.Request[Any] | None
    _rank: int
    _call: Callable[[], str]
    _null: bool

    def __new__(cls, message: Message | None = None) -> Message:
        if message is not None and not isinstance(message, Message):
            raise TypeError(f"MPI.Message({message!r}): expected an MPI.Message, got "
                            f"{type(message).__name__}")
        self = object.__new__(cls)
        self._req = None if message is None else message._req
        self._rank = -1 if message is None else message._rank
        self._call = (lambda: "Message") if message is None else message._call
        self._null = False if message is None else message._null
        return self

    @classmethod
    def _of(cls, req: _sc.Request[Any] | None, rank: int, call: Callable[[], str],
            null: bool = False) -> Message:
        self = cls.__new__(cls)
        self._req, self._rank, self._call, self._null = req, rank, call, null
        return self

    def __bool__(self) -> bool:
        return self._req is not None or self._null

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return other._req is self._req and other._null == self._null

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self is MESSAGE_NULL:
            return "MESSAGE_NULL"
        if self is MESSAGE_NO_PROC:
            return "MESSAGE_NO_PROC"
        if self._req is None:  # a subclass pickles as itself, as in mpi4py
            return (type(self), (MESSAGE_NO_PROC,) if self._null else ())
        raise ValueError(f"cannot serialize {self!r}: a matched message belongs to the rank "
                         "that probed it; receive it and send the data instead")

    def __repr__(self) -> str:
        if self._null:
            return "<MPI.Message MESSAGE_NO_PROC>"
        return "<MPI.Message MESSAGE_NULL>" if self._req is None else f"<MPI.Message of {self._call()}>"

    def _no_proc(self, status: Status | None) -> None:
        """Receive a message from ``PROC_NULL``: nothing; the handle becomes MESSAGE_NULL (MPI_Mrecv),
        except the predefined ``MESSAGE_NO_PROC`` itself, as in mpi4py."""
        if status is not None:
            status._null()
        if self is not MESSAGE_NO_PROC:
            self._null = False

    def _take(self, call: str) -> _sc.Request[Any]:
        req = self._req
        if req is None:
            raise error(ERR_REQUEST, self._rank, call, "the message was already received (or is "
                        "MESSAGE_NULL)", "receive each matched message once")
        self._req = None
        return req

    def recv(self, status: Status | None = None) -> Any:
        """Receive the matched (pickled) message and return its object."""
        if self._null:
            self._no_proc(status)
            return None
        req = self._take("Message.recv()")
        data = block_receive(req, self._rank, self._call)
        _fill(status, req)
        return _load(data)

    def irecv(self) -> Request:
        """Start receiving the matched message; ``wait()`` returns its object."""
        if self._null:
            self._no_proc(None)
            return Request._of(_Immediate(None, True), self._rank, self._call)
        req = self._take("Message.irecv()")
        return Request._of(req, self._rank, self._call, lambda raw, st: _load(raw))

    def Recv(self, buf: Any, status: Status | None = None) -> None:
        """Receive the matched message into ``buf`` (a buffer spec)."""
        if self._null:
            self._no_proc(status)
            return
        call: Callable[[], str] = lambda: f"Message.Recv(buf=...) of {self._call()}"  # noqa: E731
        b = message(buf, self._rank, call(), True)
        req = self._take("Message.Recv()")
        data = block_receive(req, self._rank, call)
        _into(b, data, self._rank, call)
        _fill(status, req)

    def Irecv(self, buf: Any) -> Request:
        """Start receiving the matched message into ``buf``; completes when waited or tested."""
        if self._null:
            self._no_proc(None)
            return Request._of(_Immediate(None, True), self._rank, self._call)
        call: Callable[[], str] = lambda: f"Message.Irecv(buf=...) of {self._call()}"  # noqa: E731
        b = message(buf, self._rank, call(), True)
        req = self._take("Message.Irecv()")

        def finish(raw: Any, status: Any) -> None:
            _into(b, raw, self._rank, call)
        return Request._of(req, self._rank, call, finish)

    @classmethod
    def Probe(cls, comm: Any, source: int = -2, tag: int = ANY_TAG, status: Status | None = None
              ) -> Message:
        """Probe for a message and take it out of matching: ``comm.Mprobe(source, tag, status)``."""
        msg: Message = comm.Mprobe(source, tag, status)
        return msg

    @classmethod
    def Iprobe(cls, comm: Any, source: int = -2, tag: int = ANY_TAG, status: Status | None = None
               ) -> Message | None:
        """Probe for a message without blocking: ``comm.Improbe(source, tag, status)``."""
        msg: Message | None = comm.Improbe(source, tag, status)
        return msg

    probe = Probe
    iprobe = Iprobe

    def free(self) -> None:
        """Drop the handle: it becomes ``MESSAGE_NULL`` (``MESSAGE_NO_PROC`` itself stays)."""
        self._req = None
        if self is not MESSAGE_NO_PROC:
            self._null = False


def _load(data: Any) -> Any:
    """Unpickle a matched message's bytes: an empty message is None, as in mpi4py."""
    return None if len(data) == 0 else loads(data)


def _fill(status: Status | None, req: _sc.Request[Any]) -> None:
    if status is not None and req.status is not None:
        status._set(req.status.source, req.status.tag, req.status.nbytes)


def _into(b: Any, data: Any, rank: int, call: Callable[[], str]) -> None:
    """Copy a received array into the receive buffer ``b``, as a receive into it would."""
    base = b.datatype._base._np
    if getattr(data, "dtype", None) != base:
        from ._constants import ERR_TYPE

        raise error(ERR_TYPE, rank, call(), f"the message has dtype {getattr(data, 'dtype', type(data))} "
                    f"but the buffer holds {base}", "receive with the datatype the sender used")
    room = b.count * b.datatype._elements()
    if data.size > room:
        raise error(ERR_TRUNCATE, rank, call(), f"the message is {data.nbytes} bytes but the buffer "
                    f"holds {room * base.itemsize}", "pass a larger buffer, or size it with "
                    "Status.Get_count() first")
    b.put(b.displ, data)


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._of(None, -1, lambda: "MESSAGE_NO_PROC", null=True)
assert PROC_NULL == -1
