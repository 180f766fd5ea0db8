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

A platform shaped by a fault plan (``faults.ShapedPlatform``) changes four
things: a flow posted inside a cut between its ends starts at the cut's end
(``departure``); a delay adds to its route's latency (``path``); while a
rank is slow (``slow_changes``: its factor from a time on) each flow it sends
or receives keeps its part of every link but moves its bytes ``factor`` times
slower; and while a link is slow (``link_changes``) its capacity is divided by
its factor. The flows concerned are re-shared where a window opens or closes,
their bytes left moving at the new rate from then on. Without a plan none of
this costs anything.

Rates and times depend only on the flows and their order of posting, never
on the seed. A traced run records each link's utilisation (the sum of its
flows' rates over its bandwidth) as a counter track whenever it changes.

The cost. Max-min rates split along connected components (flows joined by
shared links), so a change re-shares only the component of the links it
touched, once per instant however many flows joined or ended at it. A flow
keeps its bytes left as of its last change of rate, so an instant costs
nothing for the flows it does not touch. An instant's joins and ends are
batches: the flows that join at one time are one list, the flows a share
gives one end time are one entry of the ends' heap, and each channel is a
chain of its flows. Within a share, a link only one flow crosses is that
flow's alone: it never takes part in the filling, and a flow whose links
are all its own takes the lowest of their levels (or its bound) directly.

What keeps the shortcuts honest: every rate is the one progressive filling
over the whole component gives, bit for bit (they leave out only steps that
change nothing), and the flows of an instant join, end and arrive in their
order of posting (``seq``), whatever batches they came in.
tests/test_platforms_exact.py pins every time of a set of runs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from simcluster.transports.base import RTS, Envelope

if TYPE_CHECKING:
    from .kernel import Kernel
    from .protocol import Booking
    from ..platform import Platform

__all__ = ["Flows"]

RANK = 0  # a fault plan's change of a rank's factor
LINK = 1  # ... of a link's


class _Flow:
    __slots__ = ("booking", "route", "back", "left", "since", "rate", "batch", "done", "seq", "fixed", "share",
                 "weight", "bound", "next", "head")

    def __init__(self, booking: Booking, route: tuple[int, ...], left: float, seq: int, weight: float,
                 bound: float, back: tuple[int, ...]) -> None:
        self.booking = booking
        self.route = route
        self.back = back  # the reverse route, where its acknowledgements take a part
        self.left = left  # bytes still to move at ``since``
        self.since = 0.0
        self.rate = 0.0  # bytes per second from ``since`` on
        self.batch: _Batch | None = None  # its entry in the ends' heap that counts
        self.done = False
        self.seq = seq
        self.fixed = 0  # the share that last set ``share``, its rate in that share
        self.share = 0.0
        self.weight = weight  # its part of a link, against its other flows'
        self.bound = bound  # the most it may move per second
        self.next: _Flow | None = None  # the next flow on its channel
        self.head = True  # no earlier flow on its channel is still to arrive


class _Batch:
    """The flows one share gave one end time: an entry of the ends' heap."""

    __slots__ = ("flows", "live")

    def __init__(self) -> None:
        self.flows: list[_Flow] = []
        self.live = 0  # how many of ``flows`` still end then (a later share moves the others)


class Flows:
    """The flows in flight on one run's platform, and the kernel event of the next change."""

    def __init__(self, kernel: Kernel, platform: Platform, deliver: Callable[[Envelope], None],
                 show: bool = True, plain: bool = False) -> None:
        self.kernel = kernel
        self.show = show  # record link utilisation in a traced run (one hosting process does)
        # every flow and every link in every share, no shortcut: what tests hold the shortcuts to
        self.plain = plain
        self.platform = platform
        self.capacity = platform.capacity
        # a fault plan's shaping (``faults.ShapedPlatform``): cuts hold a flow's start, and ranks
        # and links are slow by these (time, RANK or LINK, rank or link, factor from then on), in
        # time order
        self.departure: Callable[[int, int, float], float] | None = getattr(platform, "departure", None)
        self.changes: list[tuple[float, int, int, float]] = []
        slow_ranks = getattr(platform, "slow_changes", None)
        slow_links = getattr(platform, "link_changes", None)
        if slow_ranks is not None and slow_links is not None:
            self.changes = sorted([(t, RANK, rank, f) for t, rank, f in slow_ranks()]
                                  + [(t, LINK, link, f) for t, link, f in slow_links()])
            if any(change[1] == LINK for change in self.changes):
                self.capacity = list(platform.capacity)  # changed in the windows: the platform's own stays
        self.changed = 0  # how many of ``changes`` are in ``slowed`` and ``capacity``
        self.slowed: dict[int, float] = {}  # the ranks slow now, by their factor
        self.precision = platform.sharing_model.precision
        self.cross = platform.sharing_model.crosstraffic
        links = len(platform.capacity)
        # each link's capacity not yet given out, and its flows not yet fixed, in a share
        self.left = [0.0] * links
        self.count = [0.0] * links  # the weights of a link's flows not yet fixed
        self.mark = [0] * links  # the share in which a link was last one flows share
        self.deliver = deliver
        self.join_at: dict[float, list[_Flow]] = {}  # when flows join their links -> those flows
        self.join_times: list[float] = []  # the keys of ``join_at``, a heap
        self.ends: list[tuple[float, int, _Batch]] = []  # (end, batches made before, batch)
        self.batches = 0
        # each link's flows moving bytes, in their order of joining (None: none)
        self.users: list[list[_Flow] | None] = [None] * links
        self.used = 0  # the links with flows
        self.moving: dict[int, _Flow] = {}  # every flow moving bytes, by seq
        self.dirty: set[int] = set()  # links whose flows changed since the last share
        self.tails: dict[tuple[int, int], _Flow] = {}  # (src, dst) -> its last flow still to arrive
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
        posted = booking.time
        if self.departure is not None:  # a cut between its ends holds it
            posted = self.departure(booking.src, booking.dst, posted)
        return max(posted + self._terms(booking.src, booking.dst)[1], now)

    def start(self, booking: Booking, instant: float | None = None) -> None:
        """A message was charged now (or at ``instant``, a hosting process's record of it): its
        flow starts (rule 1)."""
        now = self.kernel.now if instant is None else instant
        self.seq += 1
        src, dst = booking.src, booking.dst
        if booking.kind == RTS:
            flow = _Flow(booking, (), 0.0, self.seq, 1.0, math.inf, ())
            joins = max(booking.time, now)  # as ``joins`` says
        else:
            route, latency, weight, bound, back = self._terms(src, dst)
            flow = _Flow(booking, route, float(booking.nbytes), self.seq, weight, bound, back)
            posted = booking.time
            if self.departure is not None:  # a cut between its ends holds it
                posted = self.departure(src, dst, posted)
            joins = max(posted + latency, now)
        key = (src, dst)
        tails = self.tails
        before = tails.get(key)
        if before is not None:
            before.next = flow
            flow.head = False
        tails[key] = flow
        batch = self.join_at.get(joins)
        if batch is None:
            self.join_at[joins] = [flow]
            heapq.heappush(self.join_times, joins)
        else:
            batch.append(flow)

    def settle(self) -> None:
        """Re-share what changed (rule 2) and set the event of the next change: a join or an end."""
        now = self.kernel.now
        if self.dirty:
            self._share(now)
        ends = self.ends
        while ends and not ends[0][2].live:  # every flow of it given a later end
            heapq.heappop(ends)
        nxt = self.join_times[0] if self.join_times else None
        if ends and (nxt is None or ends[0][0] < nxt):
            nxt = ends[0][0]
        if self.changed < len(self.changes) and self.moving:  # a slow window re-shares flows
            change = self.changes[self.changed][0]
            if nxt is None or change < nxt:
                nxt = change
        if nxt is not None and nxt != self.wake_at:
            self.token += 1
            self.wake_at = nxt
            self.kernel.schedule(max(nxt, now), self._wake, self.token)

    def _wake(self, token: int) -> None:
        if token != self.token:
            return
        self.wake_at = None
        now = self.kernel.now
        if self.changed < len(self.changes):
            self._change(now)
        ended: list[_Flow] = []
        users, moving = self.users, self.moving
        times, join_at = self.join_times, self.join_at
        while times and times[0] <= now:  # the flows that join now, in their order of posting
            for flow in join_at.pop(heapq.heappop(times)):
                if flow.left <= 0.0:
                    ended.append(flow)
                    continue
                flow.since = now
                moving[flow.seq] = flow
                for link in flow.route:
                    on_link = users[link]
                    if on_link is None:
                        users[link] = [flow]
                        self.used += 1
                    else:
                        on_link.append(flow)
                self.dirty.update(flow.route)
                if flow.back:
                    self._enter(flow.back, flow)
        ends = self.ends
        limit = now + self.precision  # flows that end this close together end together
        while ends and ends[0][0] <= limit:
            batch = heapq.heappop(ends)[2]
            if not batch.live:
                continue
            for flow in batch.flows:
                if flow.batch is not batch:  # a later share gave it another end
                    continue
                ended.append(flow)
                del moving[flow.seq]
                for link in flow.route:  # (``_leave``, inline: the common case)
                    on_link = users[link]
                    if on_link is None:  # a link on both its routes, left already
                        continue
                    if len(on_link) == 1:
                        users[link] = None
                        self.used -= 1
                    else:
                        on_link.remove(flow)
                self.dirty.update(flow.route)
                if flow.back:
                    self._leave(flow.back, flow)
        ended.sort(key=_seq)
        tails, deliver = self.tails, self.deliver
        for flow in ended:
            flow.done = True
            flow.batch = None  # its batch lists it back: no cycle left to keep its payload alive
            if flow.head:  # it arrives, and the ended flows behind it on its channel (rule 3)
                booked = flow.booking
                booked.time = now
                deliver(booked.envelope())
                behind = flow.next
                if behind is None:  # it was its channel's last
                    del tails[(booked.src, booked.dst)]
                elif behind.done:
                    self._arrive(behind, now)
                else:
                    behind.head = True
        self.settle()

    def _change(self, now: float) -> None:
        """Make the ranks and links slow that the plan's windows make slow up to ``now``; the flows
        under way on them are re-shared (``settle``)."""
        changes, slowed = self.changes, self.slowed
        i = self.changed
        ranks: set[int] = set()
        while i < len(changes) and changes[i][0] <= now:
            _, kind, key, factor = changes[i]
            if kind == LINK:
                self.capacity[key] = self.platform.capacity[key] / factor
                self.dirty.add(key)
            elif factor == 1.0:
                slowed.pop(key, None)
                ranks.add(key)
            else:
                slowed[key] = factor
                ranks.add(key)
            i += 1
        self.changed = i
        if ranks:
            for flow in self.moving.values():
                booked = flow.booking
                if booked.src in ranks or booked.dst in ranks:
                    self.dirty.update(flow.route)

    def _enter(self, route: tuple[int, ...], flow: _Flow) -> None:
        """Put ``flow`` on the links of ``route``."""
        users = self.users
        for link in route:
            on_link = users[link]
            if on_link is None:
                users[link] = [flow]
                self.used += 1
            else:
                on_link.append(flow)
        self.dirty.update(route)

    def _leave(self, route: tuple[int, ...], flow: _Flow) -> None:
        """Take ``flow`` off the links of ``route``."""
        users = self.users
        for link in route:
            on_link = users[link]
            if on_link is None:  # a link on both its routes, left already
                continue
            if len(on_link) == 1:
                users[link] = None
                self.used -= 1
            else:
                on_link.remove(flow)
        self.dirty.update(route)

    def _arrive(self, flow: _Flow, now: float) -> None:
        """Hand over ``flow``, ended now, whose channel's earlier flows have all arrived, and the
        ended flows behind it (rule 3)."""
        deliver = self.deliver
        while True:
            booked = flow.booking
            booked.time = now
            deliver(booked.envelope())
            behind = flow.next
            if behind is None:  # it was its channel's last
                del self.tails[(booked.src, booked.dst)]
                return
            if not behind.done:
                behind.head = True
                return
            flow = behind

    def _component(self) -> tuple[list[int], list[_Flow]]:
        """The links and flows connected to the dirty links by shared links (in a fixed order; the
        links only where a traced run records them)."""
        users = self.users
        dirty = self.dirty
        if 4 * len(dirty) >= self.used or self.plain:  # most of them: all, without the search
            self.dirty = set()
            moving = self.moving
            flows = [moving[seq] for seq in sorted(moving)]
            if not self.show or self.kernel.trace is None:
                return [], flows
            for flow in flows:
                dirty.update(flow.route + flow.back)
            return list(dirty), flows  # links: any order
        seen_links: set[int] = set()
        seen_flows: dict[int, _Flow] = {}
        todo = sorted(dirty)
        self.dirty = set()
        links = []
        while todo:
            link = todo.pop()
            if link in seen_links:
                continue
            seen_links.add(link)
            links.append(link)
            on_link = users[link]
            if on_link is None:
                continue
            for flow in on_link:
                if flow.seq not in seen_flows:
                    seen_flows[flow.seq] = flow
                    todo += [other for other in flow.route + flow.back if other not in seen_links]
        return links, [seen_flows[seq] for seq in sorted(seen_flows)]

    def _share(self, now: float) -> None:
        """Max-min fair rates for the component of the dirty links, by progressive filling.

        Weighted: a flow of weight ``w`` gets ``w`` times a link's level (its
        capacity left over the weights of its flows not yet fixed, a flow on
        its reverse route counting ``crosstraffic`` times its weight), and a
        flow with a ``bound`` is fixed at it once the levels reach it. The
        lowest level goes first; levels only grow as flows are fixed.

        A link one flow alone crosses (no reverse routes in the platform) keeps
        the level ``capacity / w`` until that flow is fixed and has no flow
        after, so only the lowest of a flow's own links can fix it and the
        others are left out of the filling; a flow whose links are all its own
        is fixed at once, by the lowest of them or by its bound, whichever the
        filling would have come to first: the same rates, bit for bit.
        """
        links, flows = self._component()
        self.reshares += 1
        stamp = self.reshares  # a flow whose ``fixed`` is this has its rate of this share
        users, capacity, left, weights, mark = self.users, self.capacity, self.left, self.count, self.mark
        cross = self.cross
        shared: list[int] = []  # the links of the filling (``mark`` is ``stamp``)
        order: list[tuple[float, int, int]] = []  # (level, 0, link) or (level, 1, index in flows)
        for index, flow in enumerate(flows):
            weight = flow.weight
            best = math.inf  # the lowest level of the flow's own links, and which link
            own = -1
            tied = False  # it crosses a link another flow crosses
            if cross or self.plain:  # (acknowledgements cross other links: no link is one flow's own)
                tied = True
                for link in flow.route:
                    self._take(link, weight, stamp, shared)
                for link in flow.back:
                    self._take(link, cross * weight, stamp, shared)
            else:
                for link in flow.route:
                    on_link = users[link]
                    if on_link is not None and len(on_link) == 1:
                        if weight > 1e-12:  # (a lighter flow's link is passed over in the filling)
                            level = capacity[link] / weight
                            if own < 0 or level < best or (level == best and link < own):
                                best, own = level, link
                        continue
                    tied = True
                    if mark[link] != stamp:
                        mark[link] = stamp
                        left[link] = capacity[link]
                        weights[link] = 0.0
                        shared.append(link)
                    weights[link] += weight
            bounded = flow.bound < math.inf
            if tied:
                if own >= 0:  # its lowest own link joins the filling
                    mark[own] = stamp
                    left[own] = capacity[own]
                    weights[own] = 0.0 + weight
                    shared.append(own)
                if bounded:
                    order.append((flow.bound / weight, 1, index))
            elif own >= 0 and not (bounded and flow.bound / weight < best):
                flow.fixed = stamp
                flow.share = weight * (max(0.0, capacity[own]) / weight)
            elif bounded:
                flow.fixed = stamp
                flow.share = flow.bound
        for link in shared:
            if weights[link] > 0.0:
                order.append((capacity[link] / weights[link], 0, link))
        if order:
            self._fill(order, flows, stamp)
        if self.show and self.kernel.trace is not None:  # (a slow rank's flows hold their shares)
            self._show(now, {link: 1.0 - max(0.0, self._left_of(link, stamp)) / capacity[link] for link in links})
        if self.slowed:
            self._slow(flows, stamp)
        self._rates(flows, now)

    def _slow(self, flows: list[_Flow], stamp: int) -> None:
        """A flow to or from a slow rank keeps its share of the links but moves its bytes the
        slower end's ``factor`` times slower."""
        slowed = self.slowed
        for flow in flows:
            booked = flow.booking
            factor = max(slowed.get(booked.src, 1.0), slowed.get(booked.dst, 1.0))
            if factor != 1.0 and flow.fixed == stamp:  # (once per share)
                flow.share = flow.share / factor

    def _take(self, link: int, part: float, stamp: int, shared: list[int]) -> None:
        """Add ``part`` to the weights on ``link`` in the filling of share ``stamp``."""
        if self.mark[link] != stamp:
            self.mark[link] = stamp
            self.left[link] = self.capacity[link]
            self.count[link] = 0.0
            shared.append(link)
        self.count[link] += part

    def _fill(self, order: list[tuple[float, int, int]], flows: list[_Flow], stamp: int) -> None:
        """The progressive filling of a share: fix flows, lowest level first (``_share``)."""
        users, left, weights = self.users, self.left, self.count
        # a sorted list, and a heap for the links looked at again, taken from in merged order
        order.sort()
        again: list[tuple[float, int, int]] = []
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
            on_link = users[key]
            assert on_link is not None
            for flow in on_link:
                if flow.fixed != stamp:
                    self._fix(flow, flow.weight * current, stamp)

    def _fix(self, flow: _Flow, rate: float, stamp: int) -> None:
        """Give ``flow`` its rate in this share and take it from its links in the filling."""
        flow.fixed = stamp
        flow.share = rate
        left, weights, mark = self.left, self.count, self.mark
        weight = flow.weight
        for link in flow.route:
            if mark[link] == stamp:
                left[link] -= rate
                weights[link] -= weight
        cross = self.cross
        for link in flow.back:
            left[link] -= cross * rate
            weights[link] -= cross * weight

    def _rates(self, flows: list[_Flow], now: float) -> None:
        """Move the flows whose rate changed to it: their bytes left, their end (a batch per end)."""
        ends = self.ends
        made: dict[float, _Batch] = {}
        for flow in flows:
            rate = flow.share
            if rate == flow.rate:
                continue
            flow.left = max(0.0, flow.left - flow.rate * (now - flow.since))
            flow.since = now
            flow.rate = rate
            finish = now + flow.left / rate if rate > 0 else now
            batch = made.get(finish)
            if batch is None:
                batch = made[finish] = _Batch()
                self.batches += 1
                heapq.heappush(ends, (finish, self.batches, batch))
            batch.flows.append(flow)
            batch.live += 1
            before = flow.batch
            if before is not None:
                before.live -= 1
            flow.batch = batch

    def _left_of(self, link: int, stamp: int) -> float:
        """A link's capacity left after this share (a traced run's utilisation)."""
        if self.mark[link] == stamp:
            return self.left[link]
        capacity = self.capacity[link]
        on_link = self.users[link]
        if on_link is not None and on_link[0].fixed == stamp:  # one flow's own link
            return capacity - on_link[0].share
        return capacity

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


def _seq(flow: _Flow) -> int:
    return flow.seq
