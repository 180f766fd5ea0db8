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
   end; between those instants the rates stay as they are. Each flow's
   weight and bound are the platform's (``Platform.flow_terms``: with
   ``weighting="latency"`` a flow's part is inversely proportional to its
   route's latency, TCP's round-trip unfairness as SimGrid's models share;
   with a ``tcp_window`` no flow moves more than a window per round trip).
   With the platform's ``crosstraffic`` a flow also takes that part of its
   rate on each link of its reverse route.
3. A flow ends when its bytes have moved (flows that would end within the
   platform's ``precision``, 1 ns by default, of the first to end at an
   instant end with it: a re-share per distinct end would cost more than
   the nanosecond is worth). Its message reaches its receiver
   then, but never before an earlier message on the same (source,
   destination) channel: MPI's messages do not overtake (a request to send
   is a flow of no bytes, so it keeps its place too).

Rates and times depend only on the flows and their order of posting, never
on the seed. A traced run records each link's utilisation (the sum of its
flows' rates over its bandwidth) as a counter track whenever it changes.

The cost. Max-min rates split along connected components (flows joined by
shared links), so a change re-shares only the component of the links it
touched, once per instant however many flows joined or ended at it. A flow
keeps its bytes left as of its last change of rate, and its end sits in a
heap, so an instant costs nothing for the flows it does not touch.
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
    __slots__ = ("booking", "route", "back", "left", "since", "rate", "finish", "version", "done", "seq",
                 "fixed", "share", "weight", "bound")

    def __init__(self, booking: Booking, route: tuple[int, ...], left: float, seq: int) -> None:
        self.booking = booking
        self.route = route
        self.back: tuple[int, ...] = ()  # the reverse route, where its acknowledgements take a part
        self.left = left  # bytes still to move at ``since``
        self.since = 0.0
        self.rate = 0.0  # bytes per second from ``since`` on
        self.finish = 0.0  # when it ends at that rate
        self.version = 0  # its entry in the ends' heap that counts
        self.done = False
        self.seq = seq
        self.fixed = 0  # the share that last set ``share``, its rate in that share
        self.share = 0.0
        self.weight = 1.0  # its part of a link, against its other flows'
        self.bound = math.inf  # the most it may move per second


class Flows:
    """The flows in flight on one run's platform, and the kernel event of the next change."""

    def __init__(self, kernel: Kernel, platform: Platform, deliver: Callable[[Envelope], None],
                 show: bool = True) -> None:
        self.kernel = kernel
        self.show = show  # record link utilisation in a traced run (one hosting process does)
        self.platform = platform
        self.capacity = platform.capacity
        self.precision = platform.precision
        self.cross = platform.crosstraffic
        # each link's capacity not yet given out, and its flows not yet fixed, in a share
        self.left = [0.0] * len(platform.capacity)
        self.count = [0.0] * len(platform.capacity)  # the weights of a link's flows not yet fixed
        self.deliver = deliver
        self.joining: list[tuple[float, int, _Flow]] = []  # (when it joins the links, seq, flow)
        self.ends: list[tuple[float, int, int, _Flow]] = []  # (finish, seq, version, flow)
        self.users: dict[int, dict[int, _Flow]] = {}  # link -> the flows moving bytes on it, by seq
        self.moving: dict[int, _Flow] = {}  # every flow moving bytes, by seq
        self.dirty: set[int] = set()  # links whose flows changed since the last share
        self.channels: dict[tuple[int, int], deque[_Flow]] = {}
        self.seq = 0
        self.token = 0  # the wake event that counts (earlier ones are stale)
        self.wake_at: float | None = None
        self.reshares = 0
        self.shown: dict[int, float] = {}  # a traced run: each link's utilisation as last recorded
        self.pairs: dict[tuple[int, int], tuple[tuple[int, ...], float, float, float, tuple[int, ...]]] = {}

    def _terms(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float, float, tuple[int, ...]]:
        """(route, latency, weight, bound, reverse route) of a flow from ``src`` to ``dst``, made once
        per pair (``Platform.path``, ``flow_terms``)."""
        key = (src, dst)
        known = self.pairs.get(key)
        if known is None:
            platform = self.platform
            route, latency, _ = platform.path(src, dst)
            weight, bound = platform.flow_terms(src, dst)
            known = self.pairs[key] = (route, latency, weight, bound,
                                       platform.route(dst, src) if self.cross else ())
        return known

    def joins(self, booking: Booking, now: float) -> float:
        """When the flow of ``booking``, charged at ``now``, joins its links (rule 1)."""
        if booking.kind == RTS:  # no bytes: it reaches its receiver when the protocol says
            return max(booking.time, now)
        # a rendezvous transfer is charged from the later posting of its two sides (the
        # protocol's Rule 5): its latency overlaps the handshake, which never lasts longer
        return max(booking.time + self._terms(booking.src, booking.dst)[1], now)

    def start(self, booking: Booking, instant: float | None = None) -> None:
        """A message was charged now (or at ``instant``, a hosting process's record of it): its
        flow starts (rule 1)."""
        now = self.kernel.now if instant is None else instant
        self.seq += 1
        if booking.kind == RTS:
            flow = _Flow(booking, (), 0.0, self.seq)
        else:
            route, _, weight, bound, back = self._terms(booking.src, booking.dst)
            flow = _Flow(booking, route, float(booking.nbytes), self.seq)
            flow.weight, flow.bound, flow.back = weight, bound, back
        joins = self.joins(booking, now)
        key = (booking.src, booking.dst)
        channel = self.channels.get(key)
        if channel is None:
            channel = self.channels[key] = deque()
        channel.append(flow)
        heapq.heappush(self.joining, (joins, self.seq, flow))

    def settle(self) -> None:
        """Re-share what changed (rule 2) and set the event of the next change: a join or an end."""
        now = self.kernel.now
        if self.dirty:
            self._share(now)
        ends = self.ends
        while ends and ends[0][2] != ends[0][3].version:  # superseded by a later rate
            heapq.heappop(ends)
        nxt = self.joining[0][0] if self.joining else None
        if ends and (nxt is None or ends[0][0] < nxt):
            nxt = ends[0][0]
        if nxt is not None and nxt != self.wake_at:
            self.token += 1
            self.wake_at = nxt
            self.kernel.schedule(max(nxt, now), self._wake, self.token)

    def _wake(self, token: int) -> None:
        if token != self.token:
            return
        self.wake_at = None
        now = self.kernel.now
        ended: list[_Flow] = []
        joining, users, dirty = self.joining, self.users, self.dirty
        while joining and joining[0][0] <= now:
            flow = heapq.heappop(joining)[2]
            if flow.left <= 0.0:
                ended.append(flow)
                continue
            flow.since = now
            flow.rate = 0.0
            self.moving[flow.seq] = flow
            for link in flow.route + flow.back:
                found = users.get(link)
                if found is None:
                    users[link] = {flow.seq: flow}
                else:
                    found[flow.seq] = flow
                dirty.add(link)
        ends = self.ends
        limit = now + self.precision  # flows that end this close together end together
        while ends and ends[0][0] <= limit:
            _, _, version, flow = heapq.heappop(ends)
            if version != flow.version:
                continue
            ended.append(flow)
            del self.moving[flow.seq]
            for link in flow.route + flow.back:
                on_link = users.get(link)
                if on_link is None:  # a link on both its routes, left already
                    continue
                on_link.pop(flow.seq, None)
                if not on_link:
                    del users[link]
                dirty.add(link)
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

    def _component(self) -> tuple[list[int], list[_Flow]]:
        """The links and flows connected to the dirty links by shared links (in a fixed order)."""
        users = self.users
        dirty = self.dirty
        if 4 * len(dirty) >= len(users):  # most of them: all, without the search
            self.dirty = set()
            moving = self.moving
            return list(dirty.union(users)), [moving[seq] for seq in sorted(moving)]  # links: any order
        seen_links: set[int] = set()
        seen_flows: dict[int, _Flow] = {}
        todo = sorted(self.dirty)
        self.dirty = set()
        links = []
        while todo:
            link = todo.pop()
            if link in seen_links:
                continue
            seen_links.add(link)
            links.append(link)
            for seq, flow in users.get(link, {}).items():
                if seq not in seen_flows:
                    seen_flows[seq] = flow
                    todo += [other for other in flow.route + flow.back if other not in seen_links]
        return links, [seen_flows[seq] for seq in sorted(seen_flows)]

    def _share(self, now: float) -> None:
        """Max-min fair rates for the component of the dirty links, by progressive filling.

        Weighted: a flow of weight ``w`` gets ``w`` times a link's level (its
        capacity left over the weights of its flows not yet fixed, a flow on
        its reverse route counting ``crosstraffic`` times its weight), and a
        flow with a ``bound`` is fixed at it once the levels reach it. The
        lowest level goes first; levels only grow as flows are fixed.
        """
        links, flows = self._component()
        self.reshares += 1
        users, capacity, left, weights = self.users, self.capacity, self.left, self.count
        order: list[tuple[float, int, int]] = []  # (level, 0, link) or (level, 1, index in flows)
        for link in links:
            left[link] = capacity[link]
            weights[link] = 0.0
        cross = self.cross
        for flow in flows:
            for link in flow.route:
                weights[link] += flow.weight
            for link in flow.back:
                weights[link] += cross * flow.weight
        for link in links:
            if weights[link] > 0.0:
                order.append((capacity[link] / weights[link], 0, link))
        for index, flow in enumerate(flows):
            if flow.bound < math.inf:
                order.append((flow.bound / flow.weight, 1, index))
        # a sorted list, and a heap for the links looked at again, taken from in merged order
        order.sort()
        again: list[tuple[float, int, int]] = []
        stamp = self.reshares  # a flow whose ``fixed`` is this has its rate of this share
        i, total = 0, len(order)
        while i < total or again:
            if again and (i == total or again[0] < order[i]):
                level, kind, key = heapq.heappop(again)
            else:
                level, kind, key = order[i]
                i += 1
            if kind == 1:  # a flow's bound
                flow = flows[key]
                if flow.fixed != stamp:
                    self._fix(flow, flow.bound, stamp)
                continue
            weight = weights[key]
            if weight <= 1e-12:
                continue
            current = max(0.0, left[key]) / weight
            if current > level * (1 + 1e-12):  # others on it were fixed lower: look again later
                heapq.heappush(again, (current, 0, key))
                continue
            for flow in users[key].values():
                if flow.fixed != stamp:
                    self._fix(flow, flow.weight * current, stamp)
        ends = self.ends
        for flow in flows:
            rate = flow.share
            if rate == flow.rate:
                continue
            flow.left = max(0.0, flow.left - flow.rate * (now - flow.since))
            flow.since = now
            flow.rate = rate
            flow.finish = now + flow.left / rate if rate > 0 else now
            flow.version += 1
            heapq.heappush(ends, (flow.finish, flow.seq, flow.version, flow))
        if self.show and self.kernel.trace is not None:
            self._show(now, {link: 1.0 - max(0.0, left[link]) / capacity[link] for link in links})

    def _fix(self, flow: _Flow, rate: float, stamp: int) -> None:
        """Give ``flow`` its rate in this share and take it from its links."""
        flow.fixed = stamp
        flow.share = rate
        left, weights = self.left, self.count
        for link in flow.route:
            left[link] -= rate
            weights[link] -= flow.weight
        cross = self.cross
        for link in flow.back:
            left[link] -= cross * rate
            weights[link] -= cross * flow.weight

    def _show(self, now: float, used: dict[int, float]) -> None:
        """Record in the trace the links of ``used`` whose utilisation changed (a counter track each)."""
        trace = self.kernel.trace
        assert trace is not None
        shown, name = self.shown, self.platform.link_name
        for link in sorted(used):
            value = round(used[link], 12)
            if shown.get(link, 0.0) != value:
                trace.counter(name(link), now, value)
            if value:
                shown[link] = value
            else:
                shown.pop(link, None)
