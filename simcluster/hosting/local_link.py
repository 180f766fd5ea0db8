"""A control link whose two ends live in one process: the coordinator and the host beside it.

Node 0 of a multi-node run (and MPI process 0 under ``transport="mpi"``)
runs the coordinator and a hosting process's work in one event loop. Their
control messages need no socket: ``LocalLink.pair`` makes two ends that hand
envelopes to each other through queues, with the interface of
``transports.tcp.Link`` that the coordinator and ``hosting.host.Host`` use
(``send``, ``drain``, ``pump``, ``first``, ``rename``, ``close``). Each round
then costs the processes beside it two socket hops fewer.

Rule: ``close`` ends both ends' pumps, as closing a socket does: this end's
quietly, the other's with the TransportError a vanished peer gives, unless
it is closing too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from simcluster.transports.base import Envelope, TransportError

__all__ = ["LocalLink"]

_GONE = "look for that side's own error; it may have failed"


class LocalLink:
    """One end of an in-process control link (see the module docstring)."""

    __slots__ = ("peer", "closing", "_other", "_received")

    def __init__(self, peer: object) -> None:
        self.peer = peer
        self.closing = False
        self._other: LocalLink | None = None
        self._received: asyncio.Queue[Envelope | None] = asyncio.Queue()

    @classmethod
    def pair(cls, first: object, second: object) -> tuple[LocalLink, LocalLink]:
        """Two connected ends; ``first`` and ``second`` name the peer each end talks to."""
        a, b = cls(first), cls(second)
        a._other, b._other = b, a
        return a, b

    def send(self, envelope: Envelope) -> None:
        """Hand ``envelope`` to the other end (it reads it at its next await)."""
        other = self._other
        if not self.closing and other is not None and not other.closing:
            other._received.put_nowait(envelope)

    async def drain(self) -> None:
        """Nothing is ever buffered: return at once."""

    async def pump(self, deliver: Callable[[Envelope], None]) -> None:
        """Hand every envelope the other end sends to ``deliver`` until a close.

        Raises:
            TransportError: the other end closed first.
        """
        while (envelope := await self._received.get()) is not None:
            deliver(envelope)
        if not self.closing:
            raise TransportError(None, "recv", f"peer {self.peer!r} closed its connection", _GONE,
                                 peer=self.peer)

    async def first(self) -> Envelope:
        """The first envelope the other end sends (its introduction)."""
        envelope = await self._received.get()
        if envelope is None:
            raise TransportError(None, "accept", f"peer {self.peer!r} closed before introducing "
                                 "itself", _GONE, peer=self.peer)
        return envelope

    def rename(self, peer: object) -> None:
        self.peer = peer

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self._received.put_nowait(None)
        if self._other is not None:
            self._other._received.put_nowait(None)

    def __repr__(self) -> str:
        return f"<LocalLink peer={self.peer!r}{' closing' if self.closing else ''}>"
