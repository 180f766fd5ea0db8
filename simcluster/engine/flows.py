"""Messages as flows that share a platform's links max-min fairly (``simcluster.platform``).

``Flows`` is the engine part that carries messages on a platform with
sharing, in place of the ports' charge (``LocalDelivery.book`` hands it the
instant's messages):

1. A flow starts when its message is charged (an eager message at the
   instant it was posted, a rendezvous transfer at the later posting of its
   send and its receive, as the protocol's Rule 5 charges it), waits its
   route's latency, then joins the links of its route.
2. The joined flows share every link's bandwidth max-min fairly (progressive
   filling: the most loaded link fixes the rate of its flows, which leave
   the problem, and so on), re-shared at each instant at which flows join or
   end; between those instants the rates stay as they are.
3. A flow ends when its bytes have moved. Its message reaches its receiver
   then, but never before an earlier message on the same (source,
   destination) channel: MPI's messages do not overtake (a request to send
   is a flow of no bytes, so it keeps its place too).

Rates and times depend only on the flows and their order of posting, never
on the seed. A traced run records each link's utilisation (the sum of its
flows' rates over its bandwidth) as a counter track whenever it changes. Each change costs one pass over the flows sharing links, so an
instant at which many flows start or end together is re-shared once.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from simcluster.transports.base import RTS, Envelope

if TYPE_CHECKING:
    from .kernel import Kernel
    from .protocol import Booking
    from ..platform import Platform

__all__ = ["Flows"]


class _Flow:
    __slots__ = ("booking", "route", "left", "rate", "finish", "done", "seq")

    def __init__(self, booking: Booking, route: tuple[int, ...], left: float, seq: int) -> None:
        self.booking = booking
        self.route = route
        self.left = left  # bytes still to move
        self.rate = 0.0
        self.finish = math.inf  # when it ends at its current rate (shared at the next settle)
        self.done = False
        self.seq = seq


class Flows:
    """The flows in flight on one run's platform, and the kernel event of the next change."""

    def __init__(self, kernel: Kernel, platform: Platform, deliver: Callable[[Envelope], None]) -> None:
        self.kernel = kernel
        self.platform = platform
        self.capacity = platform.capacity
        self.deliver = deliver
        self.joining: list[tuple[float, int, _Flow]] = []  # (when it joins the links, seq, flow)
        self.active: list[_Flow] = []
        self.channels: dict[tuple[int, int], deque[_Flow]] = {}
        self.seq = 0
        self.last = 0.0  # when the active flows' ``left`` was last brought up to date
        self.token = 0  # the wake event that counts (earlier ones are stale)
        self.wake_at: float | None = None
        self.reshares = 0
        self.shown: dict[int, float] = {}  # a traced run: each link's utilisation as last recorded

    def start(self, booking: Booking) -> None:
        """A message was charged now: its flow starts (rule 1)."""
        now = self.kernel.now
        self.seq += 1
        platform = self.platform
        if booking.kind == RTS:  # no bytes: it reaches its receiver when the protocol says
            flow = _Flow(booking, (), 0.0, self.seq)
            joins = max(booking.time, now)
        else:
            route = platform.route(booking.src, booking.dst)
            flow = _Flow(booking, route, float(booking.nbytes), self.seq)
            # a rendezvous transfer is charged from the later posting of its two sides (the
            # protocol's Rule 5): its latency overlaps the handshake, which never lasts longer
            joins = max(booking.time + platform.flow_latency(booking.src, booking.dst), now)
        key = (booking.src, booking.dst)
        channel = self.channels.get(key)
        if channel is None:
            channel = self.channels[key] = deque()
        channel.append(flow)
        heapq.heappush(self.joining, (joins, self.seq, flow))

    def settle(self) -> None:
        """Re-share (rule 2) and set the event of the next change: a join or an end."""
        now = self.kernel.now
        self._progress(now)
        self._share()
        nxt = self.joining[0][0] if self.joining else None
        for flow in self.active:
            if nxt is None or flow.finish < nxt:
                nxt = flow.finish
        if nxt is not None and nxt != self.wake_at:
            self.token += 1
            self.wake_at = nxt
            self.kernel.schedule(max(nxt, now), self._wake, self.token)

    def _wake(self, token: int) -> None:
        if token != self.token:
            return
        self.wake_at = None
        now = self.kernel.now
        self._progress(now)
        ended: list[_Flow] = []
        joining = self.joining
        while joining and joining[0][0] <= now:
            flow = heapq.heappop(joining)[2]
            if flow.left <= 0.0:
                ended.append(flow)
            else:
                self.active.append(flow)
        if any(flow.finish <= now for flow in self.active):
            kept: list[_Flow] = []
            for flow in self.active:
                (ended if flow.finish <= now else kept).append(flow)
            self.active = kept
        ended.sort(key=lambda f: f.seq)
        for flow in ended:
            flow.done = True
            self._arrive(flow, now)
        self.settle()

    def _arrive(self, flow: _Flow, now: float) -> None:
        """Hand over the channel's ended flows, from its head (rule 3)."""
        b = flow.booking
        channel = self.channels[(b.src, b.dst)]
        while channel and channel[0].done:
            head = channel.popleft()
            booked = head.booking
            booked.time = now
            self.deliver(booked.envelope())
        if not channel:
            del self.channels[(b.src, b.dst)]

    def _progress(self, now: float) -> None:
        elapsed = now - self.last
        if elapsed > 0:
            for flow in self.active:
                flow.left = max(0.0, flow.left - flow.rate * elapsed)
        self.last = now

    def _share(self) -> None:
        """Max-min fair rates for the active flows, by progressive filling (rule 2)."""
        active = self.active
        if not active:
            if self.shown:
                self._show({})
            return
        self.reshares += 1
        users: dict[int, list[_Flow]] = {}
        for flow in active:
            flow.rate = -1.0
            for link in flow.route:
                found = users.get(link)
                if found is None:
                    users[link] = [flow]
                else:
                    found.append(flow)
        capacity = self.capacity
        left = {link: capacity[link] for link in users}
        count = {link: len(flows) for link, flows in users.items()}
        heap = [(left[link] / n, link) for link, n in count.items()]
        heapq.heapify(heap)
        while heap:
            share, link = heapq.heappop(heap)
            n = count[link]
            if n == 0:
                continue
            current = max(0.0, left[link]) / n
            if current > share * (1 + 1e-12):  # others on it were fixed lower: look again later
                heapq.heappush(heap, (current, link))
                continue
            for flow in users[link]:
                if flow.rate >= 0.0:
                    continue
                flow.rate = current
                for other in flow.route:
                    left[other] -= current
                    count[other] -= 1
        now = self.last
        for flow in active:
            flow.finish = now + flow.left / flow.rate if flow.rate > 0 else now
        if self.kernel.trace is not None:
            self._show({link: 1.0 - max(0.0, rest) / capacity[link] for link, rest in left.items()})

    def _show(self, used: dict[int, float]) -> None:
        """Record in the trace the links whose utilisation changed (a counter track each)."""
        trace = self.kernel.trace
        assert trace is not None
        shown, now, name = self.shown, self.last, self.platform.link_name
        for link in sorted(set(shown) | set(used)):
            value = round(used.get(link, 0.0), 12)
            if shown.get(link, 0.0) != value:
                trace.counter(name(link), now, value)
            if value:
                shown[link] = value
            else:
                shown.pop(link, None)

