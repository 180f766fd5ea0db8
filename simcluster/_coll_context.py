"""``CollContext``: the point-to-point surface a collective algorithm talks through.

A module of its own so that it is compiled with the algorithms
(``_build_manifest``): their calls to it, and its calls to the engine, are
native calls (a 2^16-rank barrier went from 4.0 to 3.2 s). ``comm`` re-exports it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .request import COMPLETED, Request
from .transports import wire

if TYPE_CHECKING:
    from ._comm_types import CollComm
    from .engine.diagnostics import CollectiveInfo
    from .latency import LatencyModel

A = TypeVar("A")

TAG_UB: Final = 2**31
"""Tags are ints in ``range(0, TAG_UB)``; a collective's call number is folded under it."""


async def _both(rreq: Request[A], sreq: Request[None]) -> A:
    """Wait for a receive and then a send; return what was received."""
    value = await rreq
    await sreq
    return value


class CollContext:
    """The private point-to-point context of one collective call.

    Collective algorithms talk only through this: calls like ``Comm``'s
    (``isend``, ``irecv``, ``send``, ``recv``, ``sendrecv``, ``sleep``) without
    tags, and with the peer first (``irecv(src, buf=None)``). Its messages live
    on the communicator's private context and carry the call's number as their
    tag, so they never meet user messages nor another collective's; members
    whose calls differ were stopped before sending anything (``Comm._collective``).
    """

    __slots__ = ("comm", "rank", "size", "seq", "call", "algorithm", "free_reductions", "_coll",
                 "_tag", "_kernel", "_p2p")

    def __init__(self, comm: CollComm, seq: int, call: str, algorithm: str = "") -> None:
        self.comm = comm
        self.rank = comm.rank
        self.size = comm.size
        self.seq = seq
        self.call = call
        self.algorithm = algorithm
        # analytic collectives send nothing: no private-context Comm (and its queues) per rank
        self._coll: CollComm = comm.coll if comm.engine.fidelity == "message" else None  # type: ignore[assignment]
        self._tag = seq & (TAG_UB - 1)
        self._kernel = comm.kernel
        self._p2p = comm.p2p
        # the run's model charges nothing for reductions: skip sizing each partial result
        self.free_reductions: bool = comm.p2p.free_reductions

    @property
    def info(self) -> CollectiveInfo:
        """(context, comm name, call number, call, comm rank, comm size): what reports say of this call."""
        comm = self.comm
        return (comm.ctx, comm.group.name, self.seq, self.call, comm.rank, comm.size)

    @property
    def latency(self) -> LatencyModel:
        """The run's latency model."""
        return self.comm.latency

    def isend(self, obj: object, dst: int) -> Request[None]:
        """Start sending ``obj`` to member ``dst`` (same completion rules as ``Comm.isend``)."""
        req = self._p2p.post_send(self._coll, obj, dst, self._tag, sync=False,
                                     op=("isend", dst), nonblocking=False, need_request=True)
        assert req is not None
        return req

    def irecv(self, src: int, buf: Any = None) -> Request[Any]:
        """Post a receive from member ``src``; ``buf`` is filled in place when given."""
        return self._p2p.post_recv(self._coll, buf, src, self._tag, op="irecv",
                                      nonblocking=False)

    # send, recv and sendrecv return awaitables rather than being coroutines: a coroutine
    # frame per message is most of a message's cost on a million ranks

    def send(self, obj: object, dst: int) -> Awaitable[None]:
        """Send ``obj`` to member ``dst``; await the result."""
        req = self._p2p.post_send(self._coll, obj, dst, self._tag, sync=False,
                                     op="send", nonblocking=False)  # the call (send, dst) made if shown
        return COMPLETED if req is None else req

    def recv(self, src: int, buf: Any = None) -> Awaitable[Any]:
        """Receive from member ``src``; await the result."""
        return self.irecv(src, buf)

    def sendrecv(self, obj: object, dst: int, src: int, buf: Any = None) -> Awaitable[Any]:
        """Send to ``dst`` and receive from ``src`` at once; await what was received."""
        p2p = self._p2p
        rreq = p2p.post_recv(self._coll, buf, src, self._tag, op="irecv", nonblocking=False)
        sreq = p2p.post_send(self._coll, obj, dst, self._tag, sync=False,
                                op="sendrecv", nonblocking=False)
        return rreq if sreq is None else _both(rreq, sreq)

    async def together(self, parts: list[Coroutine[Any, Any, A]]) -> list[A]:
        """Run ``parts`` side by side, each as a helper of this rank (as a nonblocking collective's
        body runs), and return their results in order: an algorithm's independent pieces (rings,
        trees) progress without waiting on one another."""
        kernel = self._kernel
        requests = [kernel.spawn(part, self.call, self) for part in parts]
        return [await req for req in requests]

    async def sleep(self, seconds: float) -> None:
        """Charge ``seconds`` of virtual compute time (reductions) to this rank."""
        if seconds > 0:
            await self._kernel.post_sleep(seconds, f"sleep({seconds!r})")

    # ---- analytic fidelity (collectives/analytic.py) ----

    def meet(self, value: object, resolve: Callable[[list[Any], list[float]], tuple[list[Any], float]]
             ) -> Request[Any]:
        """Deposit ``value`` in this call's meeting and return a request for this member's result.

        Used instead of messages under ``run(fidelity="analytic")``: when the
        last member arrives, ``resolve(values, times)`` computes every member's
        result and the virtual time at which all complete (``engine.meetings``).
        """
        req: Request[Any] = self.comm.engine.meetings.meet((self.comm.ctx, self.seq), self.size, self.rank,
                                                           value, "analytic meeting", resolve)
        return req

    def payload_nbytes(self, obj: object) -> int:
        """Return the bytes a message carrying ``obj`` counts (arrays: ``nbytes``; objects: encoded length).

        Raises:
            TypeError: ``obj`` cannot be sent, named as a send of this call would name it.
        """
        p2p = self._p2p
        try:
            return wire.pack(obj, copy=False, dumps=p2p.dumps, arrays=p2p.arrays).nbytes
        except wire.Unsendable as exc:
            raise TypeError(f"rank {self.rank}: {self.call}: {exc}") from None

    def payload_copy(self, obj: object) -> Any:
        """Return ``obj`` as a receiver of a message carrying it would get it (a decoded copy)."""
        p2p = self._p2p
        packed = wire.pack(obj, copy=False, dumps=p2p.dumps, arrays=p2p.arrays)
        return wire.unpack(packed.header, packed.buffers, copy=True, loads=p2p.loads,
                           arrays=p2p.arrays)

    def __repr__(self) -> str:
        return f"<CollContext #{self.seq} {self.call} rank={self.rank} size={self.size}>"
