"""MPI matching: posted receives and unexpected messages of one rank on one communicator.

Owns two queues per (communicator, rank):

* posted receives, keyed by the (src, tag) they asked for, wildcards included;
* unexpected messages, keyed by their concrete (src, tag), each stamped with
  its arrival number.

Rule 1: nothing else reorders messages. A message matches the earliest posted
receive whose source and tag fit (lowest post number among the at most four
keys that can hold it); a receive takes the earliest-arrived message that fits.
Messages from one sender with one tag sit in one deque, so they never overtake.
Rule 2: no virtual time here and no payloads opened; the engine decides when
things happen and what a match costs.

Keys hold plain ints (the wildcards are ints too), so lookups are O(1) except
for a wildcard receive, which scans the distinct (src, tag) keys it could take.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from ._wildcard import ANY_SOURCE, ANY_TAG

__all__ = ["ANY_SOURCE", "ANY_TAG", "MatchQueue"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


_ANY: Final = -1


Entry = tuple[int, Any]
"""(sequence number, receive or message): post order for receives, arrival order for messages."""
Slot = Any
"""What a table holds per (src, tag): one Entry, or a deque of Entries when there are several.

Most keys hold a single entry at a time, and a deque costs about 600 bytes,
which at a million idle ranks is most of a rank's footprint; so a lone entry
is stored as is and a deque is made only for the second one.
"""


def _append(table: dict[tuple[int, int], Slot], key: tuple[int, int], entry: Entry) -> None:
    slot = table.get(key)
    if slot is None:
        table[key] = entry
    elif type(slot) is tuple:
        table[key] = deque((slot, entry))
    else:
        slot.append(entry)


def _head(slot: Slot) -> Entry:
    return slot if type(slot) is tuple else slot[0]


def _pop(table: dict[tuple[int, int], Slot], key: tuple[int, int]) -> Entry:
    slot = table[key]
    if type(slot) is tuple:
        del table[key]
        return slot
    entry: Entry = slot.popleft()
    if len(slot) == 1:
        table[key] = slot[0]
    return entry


def _entries(slot: Slot) -> list[Entry]:
    return [slot] if type(slot) is tuple else list(slot)


class MatchQueue:
    """Posted receives and unexpected messages for one rank on one communicator."""

    __slots__ = ("_one", "_one_src", "_one_tag", "_one_seq", "_posted", "unexpected", "_post_seq",
                 "_arrive_seq", "_wild", "probes")

    def __init__(self) -> None:
        # the common case, one receive waiting, is kept in fields (no tuple to build and free per
        # message); a table holds the posted receives once two wait at once
        self._one: Any = None
        self._one_src = 0
        self._one_tag = 0
        self._one_seq = 0
        self._posted: dict[tuple[int, int], Slot] | None = None
        self.unexpected: dict[tuple[int, int], Slot] | None = None
        self._post_seq = 0
        self._arrive_seq = 0
        self._wild = 0  # posted receives with a wildcard; none: one lookup per arrival
        self.probes: list[Any] | None = None  # blocked probes, each (src, tag, request)

    # ---- a message arrives ----

    def take_posted(self, src: int, tag: int) -> Any | None:
        """Remove and return the earliest posted receive that fits (src, tag), or None."""
        receive = self._one
        if receive is not None:  # exactly one posted receive
            psrc, ptag = self._one_src, self._one_tag
            if (psrc == src or psrc == _ANY) and (ptag == tag or ptag == _ANY):
                self._one = None
                if psrc == _ANY or ptag == _ANY:
                    self._wild -= 1
                return receive
            return None
        posted = self._posted
        if posted is None:
            return None
        if not self._wild:
            key = (src, tag)
            if key not in posted:
                return None
            receive = _pop(posted, key)[1]
            if not posted:  # back to the lone-receive fields for the next one
                self._posted = None
            return receive
        best_key = None
        best_seq = -1
        for key in ((src, tag), (_ANY, tag), (src, _ANY), (_ANY, _ANY)):
            slot = posted.get(key)
            if slot is not None and (best_key is None or _head(slot)[0] < best_seq):
                best_key, best_seq = key, _head(slot)[0]
        if best_key is None:
            return None
        if best_key[0] == _ANY or best_key[1] == _ANY:
            self._wild -= 1
        receive = _pop(posted, best_key)[1]
        if not posted:
            self._posted = None
        return receive

    def add_unexpected(self, src: int, tag: int, message: Any) -> None:
        """Queue a message that no posted receive wanted."""
        if self.unexpected is None:
            self.unexpected = {}
        self._arrive_seq += 1
        _append(self.unexpected, (src, tag), (self._arrive_seq, message))

    # ---- a receive is posted ----

    def _find(self, src: int, tag: int) -> tuple[int, int] | None:
        unexpected = self.unexpected
        if not unexpected:
            return None
        if src != _ANY and tag != _ANY:
            return (src, tag) if (src, tag) in unexpected else None
        best_key = None
        best_seq = -1
        for key, slot in unexpected.items():
            if (src == _ANY or key[0] == src) and (tag == _ANY or key[1] == tag):
                seq = _head(slot)[0]
                if best_key is None or seq < best_seq:
                    best_key, best_seq = key, seq
        return best_key

    def take_unexpected(self, src: int, tag: int) -> Any | None:
        """Remove and return the earliest-arrived message that fits (src, tag), or None."""
        key = self._find(src, tag)
        if key is None:
            return None
        assert self.unexpected is not None
        return _pop(self.unexpected, key)[1]

    def peek_unexpected(self, src: int, tag: int) -> Any | None:
        """Return, without removing, the message a receive for (src, tag) would take."""
        key = self._find(src, tag)
        if key is None:
            return None
        assert self.unexpected is not None
        return _head(self.unexpected[key])[1]

    def post(self, src: int, tag: int, receive: Any) -> None:
        """Queue a receive that found no message yet."""
        self._post_seq += 1
        if type(src) is not int or type(tag) is not int:  # numpy ints, the wildcard sentinels
            src, tag = int(src), int(tag)
        if src == _ANY or tag == _ANY:
            self._wild += 1
        posted = self._posted
        if posted is None:
            if self._one is None:  # the common case: the only receive waiting
                self._one, self._one_src, self._one_tag, self._one_seq = receive, src, tag, self._post_seq
                return
            posted = self._posted_table()
        _append(posted, (src, tag), (self._post_seq, receive))

    def _posted_table(self) -> dict[tuple[int, int], Slot]:
        """The posted receives as a table, kept as ``_posted``, with the lone one moved into it."""
        posted = self._posted
        if posted is None:
            posted = self._posted = {}
        one = self._one
        if one is not None:
            posted[(self._one_src, self._one_tag)] = (self._one_seq, one)
            self._one = None
        return posted

    def unpost(self, src: int, tag: int, receive: Any) -> bool:
        """Remove a posted receive (cancel); return whether it was still posted."""
        key = (int(src), int(tag))
        posted = self._posted_table()
        slot = posted.get(key)
        if slot is None:
            return False
        kept = [entry for entry in _entries(slot) if entry[1] is not receive]
        if len(kept) == len(_entries(slot)):
            return False
        del posted[key]
        for entry in kept:
            _append(posted, key, entry)
        self._posted = posted if posted else None
        if key[0] == _ANY or key[1] == _ANY:
            self._wild -= 1
        return True

    # ---- end-of-run report ----

    def leftovers(self) -> tuple[list[Any], list[Any]]:
        """Return (posted receives never matched, messages never received)."""
        posted = [e[1] for slot in self._posted_table().values() for e in _entries(slot)]
        unexpected = [e[1] for slot in (self.unexpected or {}).values() for e in _entries(slot)]
        return posted, unexpected


class EndpointRow:
    """The match queues of one communicator context, by rank in the communicator.

    ``local`` maps world ranks to ranks in the communicator (None where they
    are the same); a queue is made on first use, by the member's ``Comm`` or
    by the first message that reaches the member, whichever comes first.
    """

    __slots__ = ("local", "queues")

    def __init__(self, size: int, local: dict[int, int] | None) -> None:
        self.local = local
        self.queues: list[MatchQueue | None] = [None] * size

    def queue(self, rank: int) -> MatchQueue:
        """Return the match queue of comm rank ``rank``, making it on first use."""
        mq = self.queues[rank]
        if mq is None:
            mq = self.queues[rank] = MatchQueue()
        return mq


class Endpoints:
    """The endpoint table: one match queue per (communicator context, rank) of this process.

    The protocol matches an arriving message here, by its envelope's context
    and destination, without going through the receiver's ``Comm``; a
    ``Comm`` posts its receives into the same queue.
    """

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[int, EndpointRow] = {}

    def add(self, ctx: int, size: int, local: dict[int, int] | None) -> EndpointRow:
        """Open the row of a new communicator context of ``size`` members."""
        row = self.rows[ctx] = EndpointRow(size, local)
        return row

    def queues(self) -> list[tuple[int, int, MatchQueue]]:
        """Every queue made so far, as ``(context, comm rank, queue)``, by context as opened, then rank."""
        return [(ctx, rank, mq) for ctx, row in self.rows.items()
                for rank, mq in enumerate(row.queues) if mq is not None]
