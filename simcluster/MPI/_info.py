"""``Info``: key/value string hints, as mpi4py has them (``Get``/``Set``/``Delete`` and a dict's methods).

An ``Info`` handle refers to a table of strings; ``MPI.Info(info)`` is a second
handle on the same table (equal to it), ``Dup`` a copy. ``INFO_NULL`` refers to
none: its MPI methods raise ``MPI.Exception`` (``ERR_ARG``, as MPICH reports a
null info) and its Python methods act as an empty mapping that cannot be
written (``KeyError``). Keys are at most ``MAX_INFO_KEY`` characters and values
``MAX_INFO_VAL``; a missing key is ``ERR_INFO_NOKEY`` for ``Delete`` and None
for ``Get``.

``INFO_ENV`` and ``Info.Create_env()`` describe how the run was started
(``command``, ``argv``, ``maxprocs``, ``thread_level``, ...).
``Get_hw_resource_info()`` says what simcluster simulates: one node per
``latency.Hierarchical`` group of ranks.

Rule 1: handles compare by the table they refer to; ``INFO_NULL`` is falsy.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._constants import ERR_ARG, ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE, MAX_INFO_KEY, MAX_INFO_VAL
from ._errhandler import (  # noqa: F401 - re-exported: Errhandler used to live here
    ERRHANDLER_NULL, ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler,
)
from ._errors import error


class Info:
    """Key/value hints (mpi4py's ``MPI.Info``)."""

    __slots__ = ("_items", "__weakref__")

    _items: dict[str, str] | None

    def __new__(cls, info: Info | None = None) -> Info:
        if info is not None and not isinstance(info, Info):
            raise TypeError(f"MPI.Info({info!r}): expected an MPI.Info, got {type(info).__name__}")
        self = object.__new__(cls)
        self._items = None if info is None else info._items
        return self

    @classmethod
    def Create(cls, items: Info | Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> Info:
        """Return a new info object, optionally filled from ``items`` (a mapping or pairs)."""
        self = cls.__new__(cls)
        self._items = {}
        if items is not None:
            self.update(items)
        return self

    @classmethod
    def Create_env(cls, args: Any = None) -> Info:
        """Return an info object describing how the run was started (MPI-4's ``Info_create_env``)."""
        return _environment_info(cls, args)

    def _dict(self, call: str) -> dict[str, str]:
        if self._items is None:
            raise error(ERR_ARG, None, f"Info.{call}", "the info is INFO_NULL or was freed",
                        "use MPI.Info.Create()")
        return self._items

    def Free(self) -> None:
        """Free the info object; this handle becomes ``INFO_NULL`` (``INFO_ENV`` stays)."""
        self._dict("Free()")
        if self is not INFO_ENV:
            self._items = None

    def free(self) -> None:
        """Free the info object when it is not null (never raises)."""
        if self:
            self.Free()

    def Dup(self) -> Info:
        """Return a copy, of this object's class (as mpi4py: a subclass's Dup is of the subclass)."""
        return type(self).Create(dict(self._dict("Dup()")))

    def Get(self, key: str) -> str | None:
        """Return the value of ``key``, or None when it is not set."""
        table = self._dict(f"Get({key!r})")
        return table.get(_key(key, f"Get({key!r})"))

    def Set(self, key: str, value: str) -> None:
        """Set ``key`` to ``value``."""
        call = f"Set({key!r}, {value!r})"
        table = self._dict(call)
        value = str(value)
        if len(value) > MAX_INFO_VAL:
            raise error(ERR_INFO_VALUE, None, f"Info.{call}", f"the value is longer than "
                        f"MAX_INFO_VAL ({MAX_INFO_VAL})", "store a shorter value")
        table[_key(key, call)] = value

    def Delete(self, key: str) -> None:
        """Delete ``key`` (``ERR_INFO_NOKEY`` when it is not set)."""
        call = f"Delete({key!r})"
        table = self._dict(call)
        if _key(key, call) not in table:
            raise error(ERR_INFO_NOKEY, None, f"Info.{call}", "the key is not set",
                        "check with `key in info` first")
        del table[key]

    def Get_nkeys(self) -> int:
        """Return the number of keys."""
        return len(self._dict("Get_nkeys()"))

    def Get_nthkey(self, n: int) -> str:
        """Return the ``n``-th key."""
        keys = list(self._dict(f"Get_nthkey({n!r})"))
        if not 0 <= n < len(keys):
            raise error(ERR_ARG, None, f"Info.Get_nthkey({n!r})",
                        f"n must be in range({len(keys)}), the number of keys", "pass a smaller n")
        return keys[n]

    # ---- object model ----

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Info) and other._items is self._items

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __bool__(self) -> bool:
        return self._items is not None

    def __repr__(self) -> str:
        return "<MPI.Info INFO_NULL>" if self._items is None else f"<MPI.Info {self._items!r}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self is INFO_NULL:
            return "INFO_NULL"
        if self is INFO_ENV:
            return "INFO_ENV"
        if self._items is None:
            return (type(self), ())
        if self._items is INFO_ENV._items:
            return (type(self), (INFO_ENV,))
        return (_create, (type(self), list(self._items.items())))

    # ---- a mapping's methods ----

    def __len__(self) -> int:
        return 0 if self._items is None else len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(() if self._items is None else list(self._items))

    def __contains__(self, key: object) -> bool:
        return self._items is not None and key in self._items

    def _mapping(self, key: object) -> dict[str, str]:
        if self._items is None:
            raise KeyError(key)
        return self._items

    def __getitem__(self, key: str) -> str:
        return self._mapping(key)[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._mapping(key)
        self.Set(key, value)

    def __delitem__(self, key: str) -> None:
        del self._mapping(key)[key]

    def get(self, key: str, default: str | None = None) -> str | None:
        """Return the value of ``key`` or ``default``."""
        return default if self._items is None else self._items.get(key, default)

    def keys(self) -> list[str]:
        """Return the keys."""
        return list(self)

    def values(self) -> list[str]:
        """Return the values."""
        return [] if self._items is None else list(self._items.values())

    def items(self) -> list[tuple[str, str]]:
        """Return the ``(key, value)`` pairs."""
        return [] if self._items is None else list(self._items.items())

    def update(self, items: Any = (), **kwds: str) -> None:
        """Set several keys from a mapping or ``(key, value)`` pairs, and keywords."""
        self._mapping(None)
        pairs = items.items() if hasattr(items, "items") else items
        for k, v in [*pairs, *kwds.items()]:
            self.Set(k, v)

    def pop(self, key: str, *default: str) -> str:
        """Remove ``key`` and return its value (or ``default``)."""
        if self._items is None and default:
            return default[0]
        return self._mapping(key).pop(key, *default)

    def popitem(self) -> tuple[str, str]:
        """Remove and return a ``(key, value)`` pair."""
        return self._mapping(None).popitem()

    def copy(self) -> Info:
        """Return a copy (``INFO_NULL`` copies to a null handle)."""
        return type(self)() if self._items is None else self.Dup()

    def clear(self) -> None:
        """Remove every key."""
        if self._items is not None:
            self._items.clear()


def _key(key: object, call: str) -> str:
    text = str(key)
    if not text or len(text) > MAX_INFO_KEY:
        raise error(ERR_INFO_KEY, None, f"Info.{call}", f"a key must have 1 to MAX_INFO_KEY "
                    f"({MAX_INFO_KEY}) characters", "use a shorter key")
    return text


def _create(cls: type[Info], pairs: list[tuple[str, str]]) -> Info:
    info = Info.Create(pairs)
    if cls is not Info:
        info = cls(info)
    return info


def _environment(args: Any = None) -> dict[str, str]:
    """The keys of ``INFO_ENV``: the command, its arguments, the number of ranks, the thread level."""
    argv = list(sys.argv) if args is None else [args] if isinstance(args, str) else list(args)
    env = {"command": argv[0] if argv else sys.executable, "thread_level": "MPI_THREAD_SINGLE"}
    if len(argv) > 1:
        env["argv"] = " ".join(argv[1:])
    return env


def _environment_info(cls: type[Info], args: Any = None) -> Info:
    """An info object of ``_environment(args)``, whatever its length: the values are the run's,
    not the user's (a command line may exceed ``MAX_INFO_VAL``; ``Get`` returns it whole)."""
    info = cls.Create()
    info._dict("Create_env").update(_environment(args))
    return info


INFO_NULL = Info()
INFO_ENV = _environment_info(Info)


def Get_hw_resource_info() -> Info:
    """Return the simulated hardware: ``mpi_hw_resource_type`` is ``mpi_shared_memory`` (nodes)."""
    return Info.Create({"mpi_hw_resource_type": "mpi_shared_memory"})
