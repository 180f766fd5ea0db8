"""Delivery between the ranks of one process: the protocol's in-process strategy.

``LocalDelivery`` carries an envelope from its sender's charge to its
receiver's match (``engine.protocol`` states the rules it keeps):

* ``book`` charges the messages of the instant that just ended to the
  latency model's ports together (Rule 4): each send port in posting order,
  each receive port in the order they reach it, then each source's messages
  leave in posting order;
* ``deliver`` (the transport's callback) puts eager messages and requests to
  send on their (source, destination) channel (``protocol.Channels``), whose
  arrival times never decrease (Rule 3), and the channel hands its head to
  ``P2P.arrived`` at its time;
* a clear to send starts the rendezvous transfer, charged from the later of
  the send's and the receive's posting (Rule 5), and the data's arrival
  completes both sides.

``hosting.hosted_engine.HostedDelivery`` is the other strategy: ranks here and in
other processes. It puts what reaches its own ranks on the same channels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simcluster.transports.base import DATA, RTS, Envelope

from .protocol import (Booking, Delivery, P2P, by_arrival, by_source, by_source_and_id, serial_of,
                       sort_by_source, transfer_start)

if TYPE_CHECKING:
    from .flows import Flows

class LocalDelivery(Delivery):
    """Every rank in this process: envelopes go from the charge straight to their channels."""

    def bind(self, p2p: P2P) -> None:
        super().bind(p2p)
        # envelopes are handed over as objects: this strategy puts its own on their channels
        self.in_process = p2p.in_process
        platform = p2p.ports.platform  # a platform whose links flows share
        self.flows: Flows | None = None
        if platform is not None:
            from .flows import Flows as _Flows  # only runs on such a platform load it

            self.flows = _Flows(self.kernel, platform, self._arrive_flow)

    def send(self, env: Envelope) -> None:
        """Hand an eager message or a request to send over (in process: straight to its channel)."""
        if not self.in_process:
            self.p2p.transport.send(env)
        elif self.kernel.touched is None:
            self.channels.enter(env)  # a native call, where the transport's send would be a Python one
        else:  # exploring: deliver notes the ranks it touches
            self.deliver(env)

    def deliver(self, env: Envelope) -> None:
        """Take an envelope from the transport (the transport's ``deliver`` callback)."""
        touched = self.kernel.touched
        if touched is not None:  # exploring: both ends' queues and ports are touched (the RNG too: -1)
            touched.add(env.src)
            touched.add(env.dst)
            if self.p2p.noisy:
                touched.add(-1)
        self.enter(env)

    def clear_to_send(self, env: Envelope) -> None:
        """The receiver matched a request to send: send its data, charged from ``transfer_start``."""
        p2p = self.p2p
        sender, receiver = env.dst, env.src
        # the send completes when its data has been copied out at the receiver (data_arrived):
        # the DATA envelope references the sender's own arrays
        hs = p2p.handshakes.start((sender, env.msg_id))
        if hs is None:  # its sender crashed, or the send failed (engine.failures)
            return
        req, buffers, header = hs.send, hs.buffers, hs.header
        nbytes = env.nbytes
        match_time = transfer_start(hs.posted, env)
        if p2p.book_later:  # charged with this instant's other transfers (Rule 4)
            p2p.book_transfer(Booking(kind=DATA, ctx=env.ctx, src=sender, dst=receiver, tag=env.tag,
                                      msg_id=env.msg_id, nbytes=nbytes, time=match_time, header=header,
                                      buffers=buffers, sync=False, serial=serial_of(req)))
            return
        arrive = env.time if p2p.zero_latency else max(env.time, p2p.arrival(
            sender, receiver, nbytes, match_time))
        p2p.transport.send(Envelope(DATA, env.ctx, sender, receiver, env.tag, env.msg_id,
                                    nbytes, arrive, header, buffers))

    def data_arrived(self, env: Envelope) -> None:
        """A rendezvous transfer's data arrived: complete the receive (copying out), then the send."""
        p2p = self.p2p
        hs = p2p.handshakes.land((env.src, env.msg_id))
        if hs is None:
            return
        recv = hs.recv
        if recv is not None:  # None: the receive failed meanwhile (engine.failures)
            p2p.complete_recv(recv, env, True, -1)
        hs.send.complete()

    # ---- charging an instant's messages (Rule 4) ----

    def book(self) -> bool:
        """Charge and send the messages of the instant that just ended; False when there are none.

        The kernel calls it (through ``P2P.end_instant``) once no event is
        left at ``now``. Eager messages and RTS envelopes go first; the
        rendezvous transfers cleared to send at ``now`` follow once those have
        settled (an RTS delivered here may be matched at once). Each send port
        takes its messages in posting order and each receive port in the order
        they reach it (``charge``), whatever order the instant's events ran
        in; then each source's messages are delivered in posting order, so
        channels stay FIFO.
        """
        p2p = self.p2p
        if self.flows is not None:
            return self._book_flows(self.flows)
        items = p2p.take_bookings()
        if items:
            if len(items) == 1:  # the common case in chains of dependent steps: one message
                b = items[0]
                if b.kind != RTS:
                    b.time = p2p.arrival(b.src, b.dst, b.nbytes, b.time)
                self.send(b.envelope())
                return True
            if len(items) * 4 >= p2p.world_size and self._book_round(items):
                return True
            self.charge(items, by_source)
            for b in items:
                self.send(b.envelope())
            return True
        items = p2p.take_transfers()
        if not items:
            return False
        self.charge(items, by_source_and_id)
        send = p2p.transport.send
        now = self.kernel.now
        for b in items:
            if b.time < now:  # charged from before the match: never lands before it (Rule 5)
                b.time = now
            send(b.envelope())
        return True

    def _arrive_flow(self, env: Envelope) -> None:
        """A flow ended: its eager message or request to send goes on its channel, its data to
        the transport (``data_arrived``)."""
        if env.kind == DATA:
            self.p2p.transport.send(env)
        else:
            self.send(env)

    def _book_flows(self, flows: Flows) -> bool:
        """``book`` on a platform whose links flows share (``engine.flows``): the instant's
        messages start their flows, in posting order, and the flows are re-shared once."""
        p2p = self.p2p
        items, rdv = p2p.take_bookings(), p2p.take_transfers()
        if not items and not rdv:
            return False
        sort_by_source(items, p2p.world_size)
        rdv.sort(key=by_source_and_id)
        for b in items:
            flows.start(b)
        for b in rdv:
            flows.start(b)
        flows.settle()
        return True

    def _book_round(self, items: list[Booking]) -> bool:
        """``book`` for a collective's round, in one pass; False (nothing done) unless it is one.

        A round is an instant in which each rank sends at most one message and
        receives at most one: no two messages share a port, so each is charged
        on its own (``transfer``), and the envelopes leave in source order, as
        ``charge`` and ``book`` would send them. At a million ranks every
        pass over a round's bookings misses the cache; this makes one.
        """
        p2p = self.p2p
        world_size = p2p.world_size
        by_source: list[Booking | None] = [None] * world_size
        receiving = [False] * world_size
        for b in items:
            src: int = b.src
            dst: int = b.dst
            if by_source[src] is not None or receiving[dst]:
                return False
            by_source[src] = b
            receiving[dst] = True
        # what send and P2P.arrival would do, decided once for the round rather than per message
        native = p2p.native_ports
        channels = self.channels
        direct = self.in_process and self.kernel.touched is None
        for booked in by_source:
            if booked is not None:
                if booked.kind != RTS:
                    if native is not None:
                        booked.time = native.arrival(booked.src, booked.dst, booked.nbytes, booked.time)
                    else:
                        booked.time = p2p.arrival(booked.src, booked.dst, booked.nbytes, booked.time)
                if direct:
                    channels.enter(booked.envelope())
                else:
                    self.send(booked.envelope())
        return True

    def charge(self, items: list[Booking], posting: Callable[[Booking], Any]) -> None:
        """Turn each item's time (when it was posted) into its arrival; sort ``items`` by ``posting``.

        Send sides first, in posting order (``posting`` sorts by source and
        task serial, then by message id; a stable sort keeps the order items
        were added in), then receive sides by ``(wire, source, serial, message
        id)``. One item, or one per receive port: one ``transfer`` each, which
        equals the two halves bit for bit.
        """
        p2p = self.p2p
        if len(items) == 1:
            b = items[0]
            if b.kind != RTS:
                b.time = p2p.arrival(b.src, b.dst, b.nbytes, b.time)
            return
        if posting is by_source:
            sort_by_source(items, p2p.world_size)
        else:
            items.sort(key=posting)
        if len({b.dst for b in items}) == len(items):  # one message per receive port
            for b in items:
                if b.kind != RTS:
                    b.time = p2p.arrival(b.src, b.dst, b.nbytes, b.time)
            return
        send_side = p2p.ports.send_side
        for b in items:
            if b.kind != RTS:
                b.time = send_side(b.src, b.dst, b.nbytes, b.time)[1]
        recv_side = p2p.ports.recv_side
        for b in sorted(items, key=by_arrival):
            if b.kind != RTS:
                b.time = recv_side(b.src, b.dst, b.nbytes, b.time)
