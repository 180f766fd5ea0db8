"""Groups: ordered sets of world ranks (``Incl``, ``Excl``, ``Union``, ``Translate_ranks``, ...).

A group is local and immutable, as in MPI: an ordered tuple of world ranks
and the world rank of the process holding it, so ``Get_rank`` is its position
(``UNDEFINED`` outside). Groups are made from a communicator (``Get_group``)
and turned back into one by ``Comm.Create``/``Create_group``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._constants import IDENT, PROC_NULL, SIMILAR, UNDEFINED, UNEQUAL, ERR_ARG, ERR_GROUP, ERR_RANK
from ._errors import error


class Group:
    """An ordered set of processes."""

    __slots__ = ("_ranks", "_me", "_freed", "__weakref__")

    _ranks: tuple[int, ...] | None
    _me: int
    _freed: bool

    def __new__(cls, group: Group | None = None) -> Group:
        if group is not None and not isinstance(group, Group):
            raise TypeError(f"MPI.Group({group!r}): expected an MPI.Group, got {type(group).__name__}")
        self = object.__new__(cls)
        self._ranks = None if group is None else group._ranks
        self._me = -1 if group is None else group._me
        self._freed = False
        return self

    @classmethod
    def _of(cls, ranks: Sequence[int], me: int) -> Group:
        self = cls.__new__(cls)
        self._ranks = tuple(int(r) for r in ranks)
        self._me = me
        return self

    def _members(self, call: str) -> tuple[int, ...]:
        if self._ranks is None or self._freed:
            raise error(ERR_GROUP, None, f"Group.{call}",
                        "the group is GROUP_NULL or was freed", "use a group from Comm.Get_group()")
        return self._ranks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and self._ranks == other._ranks

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __reduce__(self) -> str | tuple[Any, ...]:
        for name, const in (("GROUP_NULL", GROUP_NULL), ("GROUP_EMPTY", GROUP_EMPTY)):
            if self is const:
                return name
            if self == const:
                return (type(self), (const,))
        raise ValueError(f"cannot pickle {self!r}: a group other than GROUP_NULL and GROUP_EMPTY "
                         "belongs to the rank that made it; send its ranks instead")

    def __bool__(self) -> bool:
        return self._ranks is not None and not self._freed

    def __repr__(self) -> str:
        if self._ranks is None:
            return "<MPI.Group GROUP_NULL>"
        return f"<MPI.Group world ranks {list(self._ranks)}>"

    # ---- facts ----

    def Get_size(self) -> int:
        """Return the number of processes in the group."""
        return len(self._members("Get_size()"))

    def Get_rank(self) -> int:
        """Return this process's rank in the group, or ``UNDEFINED``."""
        ranks = self._members("Get_rank()")
        return ranks.index(self._me) if self._me in ranks else UNDEFINED

    size = property(Get_size, doc="Number of processes in the group.")
    rank = property(Get_rank, doc="This process's rank in the group, or UNDEFINED.")

    def Translate_ranks(self, ranks: Sequence[int] | None = None, group: Group | None = None) -> list[int]:
        """Return the rank in ``group`` of each of ``ranks`` of this group (``UNDEFINED`` if absent).

        ``ranks=None``: every rank of this group. ``group=None``: the world group (world ranks).
        """
        mine = self._members("Translate_ranks()")
        wanted = range(len(mine)) if ranks is None else list(ranks)
        theirs = None if group is None else group._members("Translate_ranks()")
        out = []
        for r in wanted:
            if r == PROC_NULL:
                out.append(PROC_NULL)
                continue
            if not 0 <= r < len(mine):
                raise error(ERR_RANK, None, f"Group.Translate_ranks(ranks={list(wanted)})",
                            f"rank {r} is not in range({len(mine)})", "pass ranks of this group")
            world = mine[r]
            out.append(world if theirs is None else theirs.index(world) if world in theirs else UNDEFINED)
        return out

    def Compare(self, group: Group) -> int:
        """Return ``IDENT`` (same members, same order), ``SIMILAR`` (same members) or ``UNEQUAL``."""
        return _compare(self._members("Compare()"), group._members("Compare()"))

    # ---- new groups ----

    def _check(self, ranks: Sequence[int], call: str) -> list[int]:
        mine = self._members(call)
        out = [int(r) for r in ranks]
        if len(set(out)) != len(out) or any(not 0 <= r < len(mine) for r in out):
            raise error(ERR_RANK, None, f"Group.{call}(ranks={out})",
                        f"ranks must be distinct and in range({len(mine)})", "pass ranks of this group")
        return out

    def Incl(self, ranks: Sequence[int]) -> Group:
        """Return the group of this group's ``ranks``, in that order."""
        mine = self._members("Incl()")
        return Group._of([mine[r] for r in self._check(ranks, "Incl")], self._me)

    def Excl(self, ranks: Sequence[int]) -> Group:
        """Return this group without ``ranks``."""
        mine = self._members("Excl()")
        drop = set(self._check(ranks, "Excl"))
        return Group._of([w for i, w in enumerate(mine) if i not in drop], self._me)

    def _ranges(self, triplets: Sequence[tuple[int, int, int]], call: str) -> list[int]:
        out: list[int] = []
        for first, last, stride in triplets:
            if stride == 0:
                raise error(ERR_ARG, None, f"Group.{call}({list(triplets)})", "a stride of 0",
                            "pass (first, last, stride) with a nonzero stride")
            out.extend(range(first, last + (1 if stride > 0 else -1), stride))
        return out

    def Range_incl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        """Return the group of the ranks in ``(first, last, stride)`` triplets."""
        return self.Incl(self._ranges(ranks, "Range_incl"))

    def Range_excl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        """Return this group without the ranks in ``(first, last, stride)`` triplets."""
        return self.Excl(self._ranges(ranks, "Range_excl"))

    def Dup(self) -> Group:
        """Return a copy of the group."""
        return Group._of(self._members("Dup()"), self._me)

    @classmethod
    def Union(cls, group1: Group, group2: Group) -> Group:
        """Return ``group1``'s members, then ``group2``'s that are not in ``group1``."""
        a, b = group1._members("Union()"), group2._members("Union()")
        return Group._of([*a, *[w for w in b if w not in a]], group1._me)

    @classmethod
    def Intersection(cls, group1: Group, group2: Group) -> Group:
        """Return ``group1``'s members that are also in ``group2``, in ``group1``'s order."""
        a, b = group1._members("Intersection()"), group2._members("Intersection()")
        return Group._of([w for w in a if w in b], group1._me)

    Intersect = Intersection

    @classmethod
    def Difference(cls, group1: Group, group2: Group) -> Group:
        """Return ``group1``'s members that are not in ``group2``."""
        a, b = group1._members("Difference()"), group2._members("Difference()")
        return Group._of([w for w in a if w not in b], group1._me)

    def Free(self) -> None:
        """Free the group: this handle becomes ``GROUP_NULL`` (``GROUP_EMPTY`` itself stays)."""
        self._members("Free()")
        if self is not GROUP_EMPTY:
            self._ranks, self._me = None, -1

    def free(self) -> None:
        """Free the group unless it is null (never raises)."""
        if self:
            self.Free()

    @classmethod
    def Create_from_session_pset(cls, session: Any, pset_name: str) -> Group:
        """Return the group of process set ``pset_name`` of ``session`` (``Session.Create_group``)."""
        group: Group = session.Create_group(pset_name)
        return group if cls is Group else cls(group)


def _compare(a: Sequence[int], b: Sequence[int]) -> int:
    if tuple(a) == tuple(b):
        return IDENT
    if sorted(a) == sorted(b):
        return SIMILAR
    return UNEQUAL


GROUP_NULL = Group()
GROUP_EMPTY = Group._of((), -1)
