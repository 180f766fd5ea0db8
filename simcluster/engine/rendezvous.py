"""The handshakes under way: one record per message that waits for its receiver, and its moves.

A send of more than ``eager_limit`` bytes is a rendezvous (``engine.protocol``,
Rule 5): its request to send (RTS) goes first, the receive that matches it
answers with a clear to send (CTS), then the data travel. A synchronous send
small enough to go eagerly waits instead for its receiver's acknowledgement
(ACK). ``Handshakes`` holds one ``Handshake`` per such message, keyed by
``(sender's world rank, message id)``; ``P2P`` owns it, and the deliveries and
the failure model move a handshake only through its transitions, which refuse
a move its state does not allow (``RuntimeError`` naming the message, its state
and the move: a bug of the engine's, never a user's).

A process sees a handshake from the side it hosts: a hosting process may hold
only the send (its receiver lives elsewhere) or only the receive.

States and moves (``move: from -> to``)::

    request      (none) -> REQUESTED   the send was posted (P2P.post_send)
    clear        REQUESTED or (none) -> CLEARED   a receive here matched its RTS and sent the CTS
    start        REQUESTED, CLEARED -> SENDING    the CTS reached the sender: its data leave
    land         SENDING, CLEARED (sender elsewhere) -> DONE   the data reached the receive here
    acknowledge  REQUESTED (synchronous), SENDING -> DONE   the receiver's ACK reached the sender
    drop_send    REQUESTED, CLEARED -> FAILED     the send failed (its rank crashed, or its
                                                  receiver did, or its communicator was revoked)
    drop_receive CLEARED, SENDING, FAILED: the receive failed (its sender's crash was detected)

Rule 1: a handshake leaves the table when it is DONE, or when neither of its
sides is left here; a move on a message not in the table is one a crash cut
short, and is ignored (None).
Rule 2: a send that failed while its data were on their way (SENDING) is not
dropped: the data still land (the memory transport's behaviour, which every
transport keeps).
"""

from __future__ import annotations

from typing import Any, Final

REQUESTED: Final = 0
CLEARED: Final = 1
SENDING: Final = 2
DONE: Final = 3
FAILED: Final = 4

STATE_NAMES: Final = ("REQUESTED", "CLEARED", "SENDING", "DONE", "FAILED")


class Handshake:
    """One message's handshake, as this process sees it.

    ``send`` is the sender's request while its rank is here and the send is
    under way, ``recv`` the matched receive while its rank is here; the
    payload (``buffers``, ``header``) and when the send was posted wait for
    the clear to send. ``rendezvous`` is False for an eager synchronous send.
    """

    def __init__(self, src: int, dst: int, ctx: int, tag: int, nbytes: int, rendezvous: bool,
                 state: int) -> None:
        self.src = src
        self.dst = dst
        self.ctx = ctx
        self.tag = tag
        self.nbytes = nbytes
        self.rendezvous = rendezvous
        self.state = state
        self.send: Any = None  # the send's Request, while its rank is here
        self.recv: Any = None  # the matched receive (protocol._RecvRequest), while its rank is here
        self.buffers: Any = None
        self.header: Any = None
        self.posted = 0.0
        self.cleared = 0  # the order its receive matched in, among this process's (Handshakes.clear)

    def where(self) -> str:
        """Where the handshake stands, in words."""
        state = self.state
        if not self.rendezvous:
            if state == REQUESTED:
                return "message sent, waiting for its receive to match it"
            return STATE_NAMES[state].lower()
        if state == REQUESTED:
            return "request to send sent, waiting for clear to send"
        if state == CLEARED:
            if self.send is None:
                return "clear to send sent, waiting for the data"
            return "receive matched, clear to send on its way to the sender"
        if state == SENDING:
            return "data on their way"
        if state == FAILED:
            return "the send failed; its receive waits for the failure to be detected"
        return "done"

    def describe(self, names: dict[int, str]) -> str:
        """``rank 0's send of 400,000 bytes to rank 1 (tag 0): request to send sent, ...``."""
        what = "send" if self.rendezvous else "synchronous send"
        ctx = self.ctx
        name = names.get(ctx & ~1, "?")
        if ctx & 1:
            on = f"a collective's message on comm {name!r}"
        elif ctx == 0:
            on = f"tag {self.tag}"
        else:
            on = f"tag {self.tag} on comm {name!r}"
        size = f"{self.nbytes:,} byte{'' if self.nbytes == 1 else 's'}"
        return f"rank {self.src}'s {what} of {size} to rank {self.dst} ({on}): {self.where()}"


def _first(item: tuple[int, Any]) -> int:
    return item[0]


def refuse(hs: Handshake, msg_id: int, move: str) -> RuntimeError:
    """The internal error of a move that ``hs``'s state does not allow."""
    return RuntimeError(
        f"internal error: handshake of message {msg_id} (rank {hs.src} to rank {hs.dst}, "
        f"{hs.nbytes} bytes) is {STATE_NAMES[hs.state]}: it cannot {move}")


class Handshakes:
    """The table of handshakes under way in this process, and the only code that changes it."""

    def __init__(self) -> None:
        self._table: dict[tuple[int, int], Handshake] = {}
        self.clears = 0  # receives matched so far

    def __len__(self) -> int:
        return len(self._table)

    # ---- moves ----

    def request(self, key: tuple[int, int], send: Any, dst: int, ctx: int, tag: int, nbytes: int,
                rendezvous: bool, buffers: Any, header: Any, posted: float) -> None:
        """A send that waits for its receiver was posted: REQUESTED."""
        hs = Handshake(key[0], dst, ctx, tag, nbytes, rendezvous, REQUESTED)
        hs.send = send
        hs.buffers = buffers
        hs.header = header
        hs.posted = posted
        old = self._table.setdefault(key, hs)  # one lookup: every send that waits comes here
        if old is not hs:
            raise refuse(old, key[1], "be requested again")

    def clear(self, key: tuple[int, int], recv: Any, dst: int, ctx: int, tag: int,
              nbytes: int) -> None:
        """A receive here matched the request to send ``key`` and sends its clear to send: CLEARED."""
        hs = self._table.get(key)
        if hs is None:  # the sender is in another process, or its send failed already
            hs = self._table[key] = Handshake(key[0], dst, ctx, tag, nbytes, True, CLEARED)
        elif hs.state != REQUESTED or not hs.rendezvous:
            raise refuse(hs, key[1], "be cleared to send")
        hs.state = CLEARED
        hs.recv = recv
        self.clears += 1
        hs.cleared = self.clears

    def start(self, key: tuple[int, int]) -> Handshake | None:
        """The clear to send reached the sender: SENDING; the handshake, with the send's payload.

        None when there is no send left to start: its rank crashed, or it failed.
        """
        hs = self._table.get(key)
        if hs is None:
            return None
        state = hs.state
        if hs.send is None and (state == CLEARED or state == FAILED):
            return None  # the send failed after its receive matched: that receive fails later
        if (state != REQUESTED and state != CLEARED) or not hs.rendezvous:
            raise refuse(hs, key[1], "start sending")
        hs.state = SENDING
        return hs

    def land(self, key: tuple[int, int]) -> Handshake | None:
        """The data reached the receiver here: DONE. The handshake (its ``send`` if the sender is
        here, its ``recv`` unless the receive failed meanwhile), or None if nothing here waits."""
        hs = self._table.pop(key, None)
        if hs is None:
            return None
        state = hs.state
        if state != SENDING and not (state == CLEARED and hs.send is None):
            self._table[key] = hs
            raise refuse(hs, key[1], "land")
        hs.state = DONE
        hs.buffers = None
        return hs

    def acknowledge(self, key: tuple[int, int]) -> Any:
        """The receiver acknowledged the message (a synchronous send's match, or rendezvous data
        that landed in another process): DONE. The send's request, or None if it failed."""
        hs = self._table.pop(key, None)
        if hs is None:
            return None
        state = hs.state
        if not (state == SENDING or (state == REQUESTED and not hs.rendezvous)):
            self._table[key] = hs
            raise refuse(hs, key[1], "be acknowledged")
        hs.state = DONE
        hs.buffers = None
        return hs.send

    def drop_send(self, key: tuple[int, int]) -> None:
        """The send ``key`` failed: FAILED. One whose data are on their way still lands (Rule 2)."""
        hs = self._table.get(key)
        if hs is None or hs.send is None:
            return
        state = hs.state
        if state != REQUESTED and state != CLEARED:
            return
        hs.send = None
        hs.buffers = None
        hs.state = FAILED
        if hs.recv is None:
            del self._table[key]

    def drop_sends_of(self, rank: int) -> None:
        """World rank ``rank`` crashed: its sends here that still wait fail (``drop_send``)."""
        for key in [k for k in self._table if k[0] == rank]:
            self.drop_send(key)

    def drop_receives_from(self, rank: int) -> list[Any]:
        """The crash of world rank ``rank`` is known: the receives here that matched its requests
        to send, which its data will never reach, in the order they matched; they are taken out of
        their handshakes."""
        dropped = []
        for key in [k for k in self._table if k[0] == rank]:
            hs = self._table[key]
            if hs.recv is None:
                continue
            dropped.append((hs.cleared, hs.recv))
            hs.recv = None
            if hs.state != SENDING or hs.send is None:  # nothing left here to complete
                hs.state = FAILED
                del self._table[key]
        dropped.sort(key=_first)
        return [recv for _, recv in dropped]

    # ---- what the reports and the hosting read ----

    def waiting_sends(self) -> list[Any]:
        """The send requests still waiting for their clear to send or their acknowledgement."""
        return [hs.send for hs in self._table.values()
                if hs.send is not None and (hs.state == REQUESTED or hs.state == CLEARED)]

    def open_to_others(self, lo: int, hi: int) -> int:
        """Sends from here to ranks outside ``[lo, hi)`` whose handshake has not finished."""
        count = 0
        for hs in self._table.values():
            if hs.send is not None and not lo <= hs.dst < hi:
                count += 1
        return count

    def lines(self, names: dict[int, str]) -> list[str]:
        """A line per handshake, by sender and message (``Handshake.describe``)."""
        return [self._table[key].describe(names) for key in sorted(self._table)]
