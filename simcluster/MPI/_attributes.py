"""Attribute caching: ``Create_keyval``/``Free_keyval`` and ``Set_attr``/``Get_attr``/``Delete_attr``.

A keyval is an int naming a slot that any communicator (or datatype) can
fill with a Python object. ``Create_keyval(copy_fn, delete_fn, nopython)``
takes mpi4py's callbacks, and they are honoured as MPI does:

* ``Dup`` (and ``Dup_with_info``, ``Idup``) copies each attribute through its
  keyval's ``copy_fn``: ``None`` or ``False`` leaves it out of the copy,
  ``True`` shares the object, a function ``copy_fn(obj, keyval, value)``
  returns the copy's value (``NotImplemented`` leaves it out);
* ``Delete_attr``, ``Free``, and ``Set_attr`` over an existing value call
  ``delete_fn(obj, keyval, value)`` on the value that goes.

A callback that raises prints its traceback on stderr and the call raises
``MPI.Exception`` of class ``ERR_OTHER``, as mpi4py on MPICH does (the
attribute is gone all the same). ``nopython=True`` keyvals hold ints only.
``Free_keyval`` retires the number; attributes already set keep their
callbacks until they are deleted.

Rule 1: keyvals are never reused, and each belongs to one kind of object
(a communicator keyval on a datatype is ``ERR_KEYVAL``).
Rule 2: the holder supplies its table (``_attr_table``); this module never
looks at what a communicator or datatype is.
"""

from __future__ import annotations

import itertools
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine.assembly import current_task
from ._constants import ERR_KEYVAL, ERR_OTHER, KEYVAL_INVALID
from ._errors import error

_numbers = itertools.count(0x1000)


@dataclass(slots=True)
class Keyval:
    """What ``Create_keyval`` registered: the kind of object and the callbacks."""

    kind: str
    copy_fn: Any
    delete_fn: Any
    nopython: bool
    freed: bool = False


_keyvals: dict[int, Keyval] = {}


def _callback_failed(fn: Any, call: str, rank: int | None) -> Exception:
    """Print the running exception's traceback (as mpi4py does) and return ERR_OTHER for ``call``."""
    traceback.print_exc(file=sys.stderr)
    name = getattr(fn, "__name__", repr(fn))
    return error(ERR_OTHER, rank, call, f"the attribute callback {name} raised "
                 f"{sys.exc_info()[1]!r} (traceback above)", "fix the callback; it must not raise")


class AttributeCache:
    """The attribute methods of ``Comm`` and ``Datatype``.

    A holder defines ``_attr_kind`` (its class name as MPI says it), ``_attr_table(call)`` (the
    dict of its attributes, raising when the handle is null) and ``_attr_rank()``.
    """

    __slots__ = ()

    _attr_kind = ""

    def _attr_table(self, call: str) -> dict[int, Any]:
        raise NotImplementedError  # each handle class says where its attributes live

    def _attr_rank(self) -> int | None:
        return None

    def _attr_builtin(self, keyval: int) -> tuple[bool, Any]:
        """(True, value) for a predefined attribute of this holder."""
        return False, None

    def _keyval(self, keyval: Any, call: str) -> Keyval:
        found = _keyvals.get(keyval) if isinstance(keyval, int) else None
        if found is None or found.kind != self._attr_kind:
            what = ("KEYVAL_INVALID" if keyval == KEYVAL_INVALID else
                    "a predefined attribute, which cannot be set or deleted" if found is None
                    and self._attr_builtin(keyval)[0] else
                    f"a keyval of {found.kind}" if found is not None else "not a keyval")
            raise error(ERR_KEYVAL, self._attr_rank(), call, f"keyval {keyval!r} is {what}",
                        f"use a keyval from {self._attr_kind}.Create_keyval()")
        return found

    @classmethod
    def Create_keyval(cls, copy_fn: Callable[[Any, int, Any], Any] | bool | None = None,
                      delete_fn: Callable[[Any, int, Any], Any] | None = None,
                      nopython: bool = False) -> int:
        """Return a new attribute key; ``copy_fn``/``delete_fn`` run on ``Dup`` and on deletion."""
        number = next(_numbers)
        _keyvals[number] = Keyval(cls._attr_kind, copy_fn, delete_fn, bool(nopython))
        return number

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Retire an attribute key; return ``KEYVAL_INVALID``. Attributes set with it stay."""
        found = _keyvals.get(keyval) if isinstance(keyval, int) else None
        if found is None or found.kind != cls._attr_kind or found.freed:
            raise error(ERR_KEYVAL, None, f"{cls._attr_kind}.Free_keyval({keyval!r})",
                        "not a live keyval of this kind", f"free keyvals from {cls._attr_kind}"
                        ".Create_keyval() once")
        found.freed = True
        return KEYVAL_INVALID

    def Get_attr(self, keyval: int) -> Any:
        """Return the value cached under ``keyval``, or None when none is set."""
        builtin, value = self._attr_builtin(keyval)
        if builtin:
            return value
        call = f"Get_attr({keyval!r})"
        table = self._attr_table(call)
        if keyval not in table:
            kv = self._keyval(keyval, call)
            if kv.freed:
                return None
        return table.get(keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        """Cache ``attrval`` under ``keyval`` (a value already there is deleted first)."""
        call = f"Set_attr({keyval!r})"
        table = self._attr_table(call)
        kv = self._keyval(keyval, call)
        if kv.freed:
            raise error(ERR_KEYVAL, self._attr_rank(), call, "the keyval was freed",
                        f"create another with {self._attr_kind}.Create_keyval()")
        if kv.nopython and (isinstance(attrval, bool) or not hasattr(attrval, "__index__")):
            raise TypeError(f"{self._attr_kind}.{call}: the keyval was made with nopython=True and "
                            f"holds integers only, not {type(attrval).__name__}")
        if keyval in table:
            self._delete_value(kv, keyval, table.pop(keyval), call)
        table[keyval] = int(attrval) if kv.nopython else attrval

    def Delete_attr(self, keyval: int) -> None:
        """Delete the value cached under ``keyval``, calling the keyval's ``delete_fn``."""
        call = f"Delete_attr({keyval!r})"
        table = self._attr_table(call)
        if keyval not in table:
            self._keyval(keyval, call)
            return
        self._delete_value(_keyvals[keyval], keyval, table.pop(keyval), call)

    def _delete_value(self, kv: Keyval, keyval: int, value: Any, call: str) -> None:
        if callable(kv.delete_fn):
            try:
                kv.delete_fn(self, keyval, value)
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    raise
                raise _callback_failed(kv.delete_fn, call, self._attr_rank()) from exc

    # ---- what Dup and Free call ----

    def _copy_attrs_to(self, new: AttributeCache, call: str) -> None:
        """Fill ``new``'s table from this object's through each keyval's ``copy_fn``."""
        table = self._attr_table(call)
        target = new._attr_table(call)
        for keyval, value in list(table.items()):
            copy_fn = _keyvals[keyval].copy_fn
            if copy_fn is True:
                target[keyval] = value
            elif callable(copy_fn):
                try:
                    got = copy_fn(self, keyval, value)
                except Exception as exc:
                    raise _callback_failed(copy_fn, call, self._attr_rank()) from exc
                if got is not NotImplemented:
                    target[keyval] = got

    def _delete_attrs(self, call: str) -> None:
        """Delete every attribute (``Free``); the first callback error is raised after all ran."""
        table = self._attr_table(call)
        failed: Exception | None = None
        for keyval in list(table):
            try:
                self._delete_value(_keyvals[keyval], keyval, table.pop(keyval), call)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


_type_tables: dict[int, dict[int, Any]] = {}


class TypeAttributes(AttributeCache):
    """The attribute methods of ``Datatype``: tables kept by the type's identity.

    Every handle on one type (``MPI.Datatype(t)``) sees the same attributes.
    """

    __slots__ = ()

    _attr_kind = "Datatype"

    def _attr_table(self, call: str) -> dict[int, Any]:
        ident: int = self._id  # type: ignore[attr-defined]
        table = _type_tables.get(ident)
        if table is None:
            table = _type_tables[ident] = {}
        return table

    def _attr_rank(self) -> int | None:
        task = current_task()
        return None if task is None else task.rank

    def _forget_attrs(self) -> None:
        """Drop the (empty) table of a freed type."""
        _type_tables.pop(self._id, None)  # type: ignore[attr-defined]
