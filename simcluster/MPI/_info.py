"""``Info`` (string hints) and ``Errhandler``: accepted everywhere MPI takes them.

simcluster uses no hints, and every MPI error is raised as a Python
exception (mpi4py's default, ``ERRORS_RETURN`` plus an exception), so these are
small value objects: an ``Info`` is a dict of strings, an ``Errhandler`` a name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


class Info:
    """Key/value hints (a dict of strings)."""

    __slots__ = ("_items", "_null")

    _items: dict[str, str] | None
    _null: bool

    def __new__(cls, info: Info | None = None) -> Info:
        self = object.__new__(cls)
        self._items = None if info is None else info._items
        self._null = info is None or info._null
        return self

    @classmethod
    def Create(cls, items: Info | Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> Info:
        """Return a new info object, optionally filled from ``items``."""
        self = cls.__new__(cls)
        self._items, self._null = {}, False
        if items is not None:
            self.update(items)
        return self

    @classmethod
    def Create_env(cls, args: Any = None) -> Info:
        """Return an info object describing the environment (``command``, ``maxprocs``)."""
        return cls.Create({"maxprocs": os.environ.get("SIMCLUSTER_WORLD_SIZE", "1")})

    def _dict(self) -> dict[str, str]:
        if self._items is None:
            raise ValueError("INFO_NULL holds no keys; use MPI.Info.Create()")
        return self._items

    def Free(self) -> None:
        """Free the info object."""
        self._items, self._null = None, True

    free = Free

    def Dup(self) -> Info:
        """Return a copy."""
        return Info.Create(dict(self._dict()))

    copy = Dup

    def Get(self, key: str) -> str | None:
        """Return the value of ``key`` or None."""
        return self._dict().get(key)

    def Set(self, key: str, value: str) -> None:
        """Set ``key`` to ``value``."""
        self._dict()[str(key)] = str(value)

    def Delete(self, key: str) -> None:
        """Delete ``key``."""
        del self._dict()[key]

    def Get_nkeys(self) -> int:
        """Return the number of keys."""
        return len(self._dict())

    def Get_nthkey(self, n: int) -> str:
        """Return the ``n``-th key."""
        return list(self._dict())[n]

    def __len__(self) -> int:
        return 0 if self._items is None else len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(() if self._items is None else list(self._items))

    def __getitem__(self, key: str) -> str:
        return self._dict()[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.Set(key, value)

    def __delitem__(self, key: str) -> None:
        self.Delete(key)

    def __contains__(self, key: object) -> bool:
        return self._items is not None and key in self._items

    def __bool__(self) -> bool:
        return not self._null

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Info) and other._items is self._items and other._null == self._null

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "<MPI.Info INFO_NULL>" if self._null else f"<MPI.Info {self._items!r}>"

    def get(self, key: str, default: str | None = None) -> str | None:
        """Return the value of ``key`` or ``default``."""
        return self._dict().get(key, default)

    def keys(self) -> list[str]:
        """Return the keys."""
        return list(self._dict())

    def values(self) -> list[str]:
        """Return the values."""
        return list(self._dict().values())

    def items(self) -> list[tuple[str, str]]:
        """Return the ``(key, value)`` pairs."""
        return list(self._dict().items())

    def update(self, items: Any = (), **kwds: str) -> None:
        """Set several keys."""
        pairs = items.items() if hasattr(items, "items") else items
        for k, v in [*pairs, *kwds.items()]:
            self.Set(k, v)

    def pop(self, key: str, *default: str) -> str:
        """Remove ``key`` and return its value."""
        return self._dict().pop(key, *default)

    def popitem(self) -> tuple[str, str]:
        """Remove and return a ``(key, value)`` pair."""
        return self._dict().popitem()

    def clear(self) -> None:
        """Remove every key."""
        self._dict().clear()


INFO_NULL = Info()
INFO_ENV = Info.Create()


class Errhandler:
    """An error handler (errors are always raised as Python exceptions here)."""

    __slots__ = ("_name",)

    _name: str

    def __new__(cls, errhandler: Errhandler | None = None) -> Errhandler:
        self = object.__new__(cls)
        self._name = "MPI_ERRHANDLER_NULL" if errhandler is None else errhandler._name
        return self

    @classmethod
    def _named(cls, name: str) -> Errhandler:
        self = cls.__new__(cls)
        self._name = name
        return self

    def Free(self) -> None:
        """Free the handler."""

    free = Free

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Errhandler) and other._name == self._name

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        return self._name != "MPI_ERRHANDLER_NULL"

    def __repr__(self) -> str:
        return f"<MPI.Errhandler {self._name}>"


ERRHANDLER_NULL = Errhandler()
ERRORS_RETURN = Errhandler._named("MPI_ERRORS_RETURN")
ERRORS_ABORT = Errhandler._named("MPI_ERRORS_ABORT")
ERRORS_ARE_FATAL = Errhandler._named("MPI_ERRORS_ARE_FATAL")
