"""What one hosting process sees of the run's ports and trace (used by ``hosting.hosted_engine``).

Kept apart from ``hosting.hosted_engine``, which the fast build compiles: these
subclass interpreted public classes (``Ports``, ``Trace``), which compiled
classes cannot do.
"""

from __future__ import annotations

from typing import Any

from ..latency import Ports
from ..trace import Trace


class SplitPorts(Ports):
    """The run's ports as one process sees them: whole charges for local receivers,
    the send side only for remote ones (their process charges the receive side)."""

    __slots__ = ("inner", "zero", "ordered", "_lo", "_hi")

    def __init__(self, inner: Ports, lo: int, hi: int) -> None:
        self.inner = inner
        self.zero = inner.zero
        self.ordered = bool(getattr(inner, "ordered", True))
        self._lo = lo
        self._hi = hi

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        if self._lo <= dst < self._hi:
            return self.inner.transfer(src, dst, nbytes, t)
        return self.inner.send_side(src, dst, nbytes, t)


class HostTrace(Trace):
    """A trace that also keeps receives of messages sent from other processes."""

    def __init__(self, world_size: int) -> None:
        super().__init__(world_size)
        self.receipts: list[list[Any]] = []

    def received(self, src: int, msg_id: int, now: float) -> None:
        if (src, msg_id) in self._open:
            super().received(src, msg_id, now)
        else:
            self.receipts.append([src, msg_id, now])
