"""What ``comm.send(...)`` and ``comm.recv(...)`` return under ``checks="off"``: compiled awaitables.

Under strict checks both calls return coroutines, so that ``engine.awaits`` can
catch one that is never awaited. A coroutine costs an interpreted frame per
call, and with the call's own checks that was 40% of a small-message round
trip. Under ``checks="off"`` ``Comm`` returns a ``Send`` or a ``Recv``
instead. These are compiled classes, and they behave as the coroutine did:

* the call starts when it is awaited, not when it is made, so a call kept
  and awaited later posts its message or receive then;
* awaiting one a second time raises ``RuntimeError``, as a reused coroutine does;
* whatever the fast path does not take goes to ``Comm``'s coroutine, which
  checks, converts, explains and traces as under strict checks. That covers
  a traced run, a rank or tag that is not a plain int in range (numpy
  integers, mistakes), and a receive into ``buf``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Final

from ._coll_context import TAG_UB
from .request import COMPLETED

if TYPE_CHECKING:
    from ._comm_types import CollComm

_TAG_UB: Final = TAG_UB


class _Call:
    """A blocking call made but not started: its comm, payload (``obj`` or ``buf``), peer and tag."""

    __slots__ = ("_comm", "_payload", "_peer", "_tag", "_awaited")

    def __init__(self, comm: CollComm, payload: Any, peer: Any, tag: Any) -> None:
        self._comm = comm
        self._payload = payload
        self._peer = peer
        self._tag = tag
        self._awaited = False

    def _start(self, call: str) -> None:
        """Mark the call started; a second await raises, as a reused coroutine does."""
        if self._awaited:
            raise RuntimeError(f"rank {self._comm.rank}: {call} was awaited twice; a call runs once, "
                               "when first awaited: call it again for another message")
        self._awaited = True


class Send(_Call):
    """``await comm.send(obj, dst, tag)`` under ``checks="off"``."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        self._start("comm.send(...)")
        comm = self._comm
        obj, self._payload = self._payload, None
        dst, tag = self._peer, self._tag
        if (comm.kernel.trace is None and type(dst) is int and 0 <= dst < comm.size
                and type(tag) is int and 0 <= tag < _TAG_UB):
            req = comm.p2p.post_send(comm, obj, dst, tag, False, ("send", dst, tag), False)
            return COMPLETED.__await__() if req is None else req.__await__()
        return comm.send_coroutine(obj, dst, tag).__await__()


class Recv(_Call):
    """``await comm.recv(buf, src, tag)`` under ``checks="off"``."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, Any]:
        self._start("comm.recv(...)")
        comm = self._comm
        buf, src, tag = self._payload, self._peer, self._tag
        # -1 is the wildcard (ANY_SOURCE, ANY_TAG: an int subclass, hence isinstance); bools go
        # the long way, to be refused there
        if (buf is None and comm.kernel.trace is None
                and isinstance(src, int) and type(src) is not bool and -1 <= src < comm.size
                and isinstance(tag, int) and type(tag) is not bool and -1 <= tag < _TAG_UB):
            return comm.p2p.post_recv(comm, None, src, tag, "recv", False).__await__()
        return comm.recv_coroutine(buf, src, tag).__await__()


# Comm calls these rather than the classes: a compiled function takes its arguments from the
# interpreter in half the time a compiled class's constructor does (45 against 85 ns). Ranks and
# tags are untyped here: a compiled int parameter would refuse numpy integers.

def send(comm: CollComm, obj: object, dst: Any, tag: Any) -> Send:
    """Return ``Send(comm, obj, dst, tag)``."""
    return Send(comm, obj, dst, tag)


def recv(comm: CollComm, buf: Any, src: Any, tag: Any) -> Recv:
    """Return ``Recv(comm, buf, src, tag)``."""
    return Recv(comm, buf, src, tag)
