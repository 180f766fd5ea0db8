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


class _Wildcard(int):
    """An int sentinel with a readable repr."""

    _name: str

    def __new__(cls, value: int, name: str) -> _Wildcard:
        self = super().__new__(cls, value)
        self._name = name
        return self

    def __repr__(self) -> str:
        return self._name

    __str__ = __repr__


ANY_SOURCE: Final[int] = _Wildcard(-1, "ANY_SOURCE")
ANY_TAG: Final[int] = _Wildcard(-1, "ANY_TAG")
_ANY: Final = -1


class MatchQueue:
    """Posted receives and unexpected messages for one rank on one communicator."""

    __slots__ = ("_posted", "_unexpected", "_post_seq", "_arrive_seq", "_wild", "probes")

    def __init__(self) -> None:
        self._posted: dict[tuple[int, int], deque[tuple[int, Any]]] | None = None
        self._unexpected: dict[tuple[int, int], deque[tuple[int, Any]]] | None = None
        self._post_seq = 0
        self._arrive_seq = 0
        self._wild = 0  # posted receives with a wildcard; none: one lookup per arrival
        self.probes: list[Any] = []  # blocked probes, each (src, tag, request)

    # ---- a message arrives ----

    def take_posted(self, src: int, tag: int) -> Any | None:
        """Remove and return the earliest posted receive that fits (src, tag), or None."""
        posted = self._posted
        if not posted:
            return None
        if not self._wild:
            key = (src, tag)
            q = posted.get(key)
            if not q:
                return None
            item = q.popleft()[1]
            if not q:
                del posted[key]
            return item
        best_key = None
        best_seq = -1
        for key in ((src, tag), (_ANY, tag), (src, _ANY), (_ANY, _ANY)):
            q = posted.get(key)
            if q and (best_key is None or q[0][0] < best_seq):
                best_key, best_seq = key, q[0][0]
        if best_key is None:
            return None
        q = posted[best_key]
        item = q.popleft()[1]
        if not q:
            del posted[best_key]
        if best_key[0] == _ANY or best_key[1] == _ANY:
            self._wild -= 1
        return item

    def add_unexpected(self, src: int, tag: int, message: Any) -> None:
        """Queue a message that no posted receive wanted."""
        if self._unexpected is None:
            self._unexpected = {}
        self._arrive_seq += 1
        key = (src, tag)
        q = self._unexpected.get(key)
        if q is None:
            q = self._unexpected[key] = deque()
        q.append((self._arrive_seq, message))

    # ---- a receive is posted ----

    def _find(self, src: int, tag: int) -> tuple[int, int] | None:
        unexpected = self._unexpected
        if not unexpected:
            return None
        if src != _ANY and tag != _ANY:
            return (src, tag) if (src, tag) in unexpected else None
        best_key = None
        best_seq = -1
        for key, q in unexpected.items():
            if (src == _ANY or key[0] == src) and (tag == _ANY or key[1] == tag):
                if best_key is None or q[0][0] < best_seq:
                    best_key, best_seq = key, q[0][0]
        return best_key

    def take_unexpected(self, src: int, tag: int) -> Any | None:
        """Remove and return the earliest-arrived message that fits (src, tag), or None."""
        key = self._find(src, tag)
        if key is None:
            return None
        assert self._unexpected is not None
        q = self._unexpected[key]
        message = q.popleft()[1]
        if not q:
            del self._unexpected[key]
        return message

    def peek_unexpected(self, src: int, tag: int) -> Any | None:
        """Return, without removing, the message a receive for (src, tag) would take."""
        key = self._find(src, tag)
        if key is None:
            return None
        assert self._unexpected is not None
        return self._unexpected[key][0][1]

    def post(self, src: int, tag: int, receive: Any) -> None:
        """Queue a receive that found no message yet."""
        if self._posted is None:
            self._posted = {}
        self._post_seq += 1
        key = (int(src), int(tag))
        if key[0] == _ANY or key[1] == _ANY:
            self._wild += 1
        q = self._posted.get(key)
        if q is None:
            q = self._posted[key] = deque()
        q.append((self._post_seq, receive))

    def unpost(self, src: int, tag: int, receive: Any) -> bool:
        """Remove a posted receive (cancel); return whether it was still posted."""
        posted = self._posted
        key = (int(src), int(tag))
        q = posted.get(key) if posted else None
        if not q:
            return False
        for item in q:
            if item[1] is receive:
                q.remove(item)
                if not q:
                    del posted[key]  # type: ignore[union-attr]
                if key[0] == _ANY or key[1] == _ANY:
                    self._wild -= 1
                return True
        return False

    # ---- end-of-run report ----

    def leftovers(self) -> tuple[list[Any], list[Any]]:
        """Return (posted receives never matched, messages never received)."""
        posted = [item[1] for q in (self._posted or {}).values() for item in q]
        unexpected = [item[1] for q in (self._unexpected or {}).values() for item in q]
        return posted, unexpected
