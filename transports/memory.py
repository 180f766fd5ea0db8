"""The in-memory transport: every rank in one process, envelopes handed over.

Delivery is a direct call, so an envelope reaches the engine before ``send``
returns; the engine's event heap, not this module, decides when in virtual
time the receiver sees it.
"""

from __future__ import annotations

from .base import Deliver, Envelope, Transport, TransportError


class MemoryTransport(Transport):
    """Hands each envelope straight to the receiving side of the same process."""

    __slots__ = ("_deliver", "_world_size")

    name = "memory"
    in_process = True

    def __init__(self) -> None:
        self._deliver: Deliver | None = None
        self._world_size = 0

    def open(self, world_size: int, deliver: Deliver) -> None:
        self._world_size = world_size
        self._deliver = deliver

    def send(self, envelope: Envelope) -> None:
        deliver = self._deliver
        if deliver is None:
            raise TransportError(
                envelope.src, "send", "the memory transport is closed", "open it before sending",
                peer=envelope.dst,
            )
        deliver(envelope)

    def close(self) -> None:
        self._deliver = None

    def __repr__(self) -> str:
        state = "open" if self._deliver is not None else "closed"
        return f"<MemoryTransport world_size={self._world_size} {state}>"
