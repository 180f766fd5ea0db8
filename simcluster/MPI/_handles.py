"""Handles: ``handle``, ``toint``/``fromint``, ``py2f``/``f2py`` and ``fromhandle`` on every object class.

mpi4py exposes the MPI library's handle of each object. Here every object has
the handle MPICH would give it: MPICH's own values for the predefined objects
(``COMM_WORLD.toint() == 0x44000000``, ``MPI.INT``'s, ``MPI.SUM``'s,
``REQUEST_NULL``'s...), and for the others, on first use, MPICH's layout for an
object the library allocated (``0x84000000`` for the first communicator, then
``0x84000001``...). ``toint()`` and ``py2f()`` give the handle as a C int,
``handle`` as mpi4py shows it (an unsigned address-sized int), and
``Cls.fromhandle(h)``, ``Cls.fromint(i)``, ``Cls.f2py(i)`` return a new object
of class ``Cls`` equal to the one the handle names (``Comm.fromhandle`` an
``Intracomm``). A handle no object has is the ``MPI.Exception`` MPICH raises
for an invalid object of that kind.

Objects are found again by what makes two of them equal (a communicator's
state, a datatype's id, a request's operation), so copies share a handle.
Communicators and requests are held weakly; others are small and kept.

Rule 1: handles identify objects within one process, as in MPI; they mean
nothing to another rank of the run (share data, not handles).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ._constants import (ERR_ARG, ERR_COMM, ERR_GROUP, ERR_INFO, ERR_OP, ERR_REQUEST, ERR_SESSION,
                         ERR_TYPE, ERR_WIN)
from ._errors import error

PREDEFINED: dict[str, dict[str, int]] = {
    "Comm": {
        "COMM_NULL": 0x04000000, "COMM_SELF": 0x44000001, "COMM_WORLD": 0x44000000
    },
    "Datatype": {
        "AINT": 0x4c000843, "BFLOAT16_T": 0x0c000000, "BOOL": 0x4c00013f, "BYTE": 0x4c00010d,
        "CHAR": 0x4c000101, "CHARACTER": 0x4c00011a, "COMPLEX": 0x4c00081e, "COMPLEX16": 0x4c00102a,
        "COMPLEX32": 0x4c00202c, "COMPLEX4": 0x0c000000, "COMPLEX8": 0x4c000828, "COUNT":
        0x4c000845, "CXX_BOOL": 0x4c000133, "CXX_DOUBLE_COMPLEX": 0x4c001035, "CXX_FLOAT_COMPLEX":
        0x4c000834, "CXX_LONG_DOUBLE_COMPLEX": 0x4c002036, "C_BOOL": 0x4c00013f, "C_COMPLEX":
        0x4c000840, "C_DOUBLE_COMPLEX": 0x4c001041, "C_FLOAT_COMPLEX": 0x4c000840,
        "C_LONG_DOUBLE_COMPLEX": 0x4c002042, "DATATYPE_NULL": 0x0c000000, "DOUBLE": 0x4c00080b,
        "DOUBLE_COMPLEX": 0x4c001022, "DOUBLE_INT": 0x8c000001, "DOUBLE_PRECISION": 0x4c00081f,
        "FLOAT": 0x4c00040a, "FLOAT16_T": 0x4c000246, "FLOAT32_T": 0x4c00040a, "FLOAT64_T":
        0x4c00080b, "FLOAT_INT": 0x8c000000, "F_BOOL": 0x4c00041d, "F_COMPLEX": 0x4c00081e,
        "F_DOUBLE": 0x4c00081f, "F_DOUBLE_COMPLEX": 0x4c001022, "F_FLOAT": 0x4c00041c,
        "F_FLOAT_COMPLEX": 0x4c00081e, "F_INT": 0x4c00041b, "INT": 0x4c000405, "INT16_T":
        0x4c000238, "INT32_T": 0x4c000439, "INT64_T": 0x4c00083a, "INT8_T": 0x4c000137, "INTEGER":
        0x4c00041b, "INTEGER1": 0x4c00012d, "INTEGER16": 0x0c000000, "INTEGER2": 0x4c00022f,
        "INTEGER4": 0x4c000430, "INTEGER8": 0x4c000831, "INT_INT": 0x4c000816, "LOGICAL":
        0x4c00041d, "LOGICAL1": 0x0c000000, "LOGICAL16": 0x0c000000, "LOGICAL2": 0x0c000000,
        "LOGICAL4": 0x0c000000, "LOGICAL8": 0x0c000000, "LONG": 0x4c000807, "LONG_DOUBLE":
        0x4c00100c, "LONG_DOUBLE_INT": 0x8c000004, "LONG_INT": 0x8c000002, "LONG_LONG": 0x4c000809,
        "OFFSET": 0x4c000844, "PACKED": 0x4c00010f, "REAL": 0x4c00041c, "REAL16": 0x4c00102b,
        "REAL2": 0x0c000000, "REAL4": 0x4c000427, "REAL8": 0x4c000829, "SHORT": 0x4c000203,
        "SHORT_INT": 0x8c000003, "SIGNED_CHAR": 0x4c000118, "SIGNED_INT": 0x4c000405, "SIGNED_LONG":
        0x4c000807, "SIGNED_LONG_LONG": 0x4c000809, "SIGNED_SHORT": 0x4c000203, "SINT16_T":
        0x4c000238, "SINT32_T": 0x4c000439, "SINT64_T": 0x4c00083a, "SINT8_T": 0x4c000137, "TWOINT":
        0x4c000816, "UINT16_T": 0x4c00023c, "UINT32_T": 0x4c00043d, "UINT64_T": 0x4c00083e,
        "UINT8_T": 0x4c00013b, "UNSIGNED": 0x4c000406, "UNSIGNED_CHAR": 0x4c000102, "UNSIGNED_INT":
        0x4c000406, "UNSIGNED_LONG": 0x4c000808, "UNSIGNED_LONG_LONG": 0x4c000819, "UNSIGNED_SHORT":
        0x4c000204, "WCHAR": 0x4c00040e
    },
    "Errhandler": {
        "ERRHANDLER_NULL": 0x14000000, "ERRORS_ABORT": 0x54000003, "ERRORS_ARE_FATAL": 0x54000000,
        "ERRORS_RETURN": 0x54000001
    },
    "Group": {
        "GROUP_EMPTY": 0x48000000, "GROUP_NULL": 0x08000000
    },
    "Info": {
        "INFO_ENV": 0x5c000001, "INFO_NULL": 0x1c000000
    },
    "Message": {
        "MESSAGE_NO_PROC": 0x6c000000, "MESSAGE_NULL": 0x2c000000
    },
    "Op": {
        "BAND": 0x58000006, "BOR": 0x58000008, "BXOR": 0x5800000a, "LAND": 0x58000005, "LOR":
        0x58000007, "LXOR": 0x58000009, "MAX": 0x58000001, "MAXLOC": 0x5800000c, "MIN": 0x58000002,
        "MINLOC": 0x5800000b, "NO_OP": 0x5800000e, "OP_NULL": 0x18000000, "PROD": 0x58000004,
        "REPLACE": 0x5800000d, "SUM": 0x58000003
    },
    "Request": {
        "REQUEST_NULL": 0x2c000000
    },
    "Session": {
        "SESSION_NULL": 0x38000000
    },
    "Win": {
        "WIN_NULL": 0x20000000
    },
}
"""MPICH 4's handles of mpi4py's predefined objects, by class and name (as 32-bit values)."""

_DIRECT = 0x80000000  # MPICH's "direct" handles: objects the library allocated


def _signed(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 2**32 if v >= 2**31 else v


def _as_int(value: Any, call: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{call}: an integer is required, got {type(value).__name__}")
    v = int(value.__index__())
    if not -2**31 <= v < 2**64:
        raise OverflowError(f"{call}: {v} is not a handle")
    return _signed(v)


class _Kind:
    """The handle table of one class of objects.

    ``key(obj)`` says which object ``obj`` is (equal objects, equal keys): a str for the
    rank-relative predefined communicators, a value, or an object held weakly (``weak``), from
    which ``make(cls, stored)`` builds a new handle object of class ``cls``.
    """

    def __init__(self, name: str, null: int, key: Callable[[Any], Any],
                 make: Callable[[type, Any], Any] | None = None, weak: bool = False) -> None:
        self.name, self.null, self.code = name, _signed(null), null & 0x7C000000
        self.key, self.weak = key, weak
        self.make = make or (lambda cls, stored: cls(stored))
        self.by_key: dict[Any, int] = {}
        self.objects: dict[int, Any] = {}  # handle -> what make() builds from (maybe a weakref)
        self.count = 0
        self.predefined: dict[Any, int] | None = None  # key -> handle, built on first use

    def _load(self) -> dict[Any, int]:
        if self.predefined is None:
            names = _package[0]  # the package's namespace: MPI.COMM_WORLD, ...
            self.predefined = {}
            for name, value in sorted(PREDEFINED[self.name].items()):
                obj = names.get(name)
                v = _signed(value)
                if obj is None or (v == self.null and bool(obj)):
                    continue  # MPICH lacks it (a null handle) but simcluster has it: allocated
                key = self.key(obj)
                if key not in self.predefined and v not in self.objects:
                    self.predefined[key] = v
                    self.objects[v] = obj
        return self.predefined

    def toint(self, obj: Any) -> int:
        key = self.key(obj)
        found = self._load().get(key)
        if found is not None:
            return found
        stored = key if self.weak else type(obj)(obj)  # a copy: Free() of obj leaves it alone
        if self.weak and not isinstance(key, str):
            key = weakref.ref(key)
        found = self.by_key.get(key)
        if found is None:
            found = _signed(_DIRECT | self.code | self.count)
            self.count += 1
            if self.weak and isinstance(key, weakref.ref):
                key = weakref.ref(stored, self._dropper(found))
                stored = weakref.ref(stored)
            self.by_key[key] = found
            self.objects[found] = stored
        return found

    def _dropper(self, handle: int) -> Callable[[Any], None]:
        def drop(ref: Any) -> None:
            self.objects.pop(handle, None)
            self.by_key.pop(ref, None)
        return drop

    def find(self, cls: type, value: Any, call: str, code: int) -> Any:
        v = _as_int(value, f"{cls.__name__}.{call}")
        self._load()
        stored = self.objects.get(v)
        if isinstance(stored, weakref.ref):
            stored = stored()
        if stored is None:
            raise error(code, None, f"{cls.__name__}.{call}({value!r})",
                        f"no {self.name} has handle {v:#x} in this process", "pass a handle "
                        f"that a live {self.name} of this rank gave (obj.handle, obj.toint())")
        return self.make(cls, stored)


def _methods(kind: _Kind, code: int) -> dict[str, Any]:
    """The handle methods of one class, on table ``kind``; invalid handles raise ``code``."""

    def toint(self: Any) -> int:
        """Return the handle as a C int."""
        return kind.toint(self)

    def py2f(self: Any) -> int:
        """Return the Fortran handle (an int)."""
        return kind.toint(self)

    def handle(self: Any) -> int:
        """The MPI handle, as mpi4py shows it (an unsigned int)."""
        v = kind.toint(self)
        return v if v >= 0 else v + 2**64

    def fromhandle(cls: type, handle: int) -> Any:
        """Return a new object of this class for the MPI handle ``handle``."""
        return kind.find(cls, handle, "fromhandle", code)

    def fromint(cls: type, arg: int) -> Any:
        """Return a new object of this class for the C int handle ``arg``."""
        return kind.find(cls, arg, "fromint", code)

    def f2py(cls: type, arg: int) -> Any:
        """Return a new object of this class for the Fortran handle ``arg``."""
        return kind.find(cls, arg, "f2py", code)

    return {"toint": toint, "py2f": py2f, "handle": property(handle),
            "fromhandle": classmethod(fromhandle), "fromint": classmethod(fromint),
            "f2py": classmethod(f2py)}


def _topology_class(comm: Any) -> type:
    """The class ``Comm.fromhandle`` gives ``comm``: its topology's (``Cartcomm``, ...), else ``Intracomm``."""
    names = _package[0]
    kind = comm.Get_topology()
    for constant, name in (("CART", "Cartcomm"), ("GRAPH", "Graphcomm"), ("DIST_GRAPH", "Distgraphcomm")):
        if kind == names[constant]:
            cls: type = names[name]
            return cls
    cls = names["Intracomm"]
    return cls


_package: list[dict[str, Any]] = [{}]
"""The package's namespace (``MPI.COMM_WORLD``, ...), handed over by ``install``."""


def install(classes: dict[str, type], names: dict[str, Any]) -> None:
    """Give the package's object classes their handle methods (called once, by ``MPI/__init__``).

    ``names`` is the package's namespace, where the predefined objects are found.
    """
    _package[0] = names
    from ._comm import Comm, Intracomm, _Current, _target

    def comm_key(obj: Any) -> Any:
        if isinstance(obj._ref, _Current):
            return obj._ref.which  # COMM_WORLD/COMM_SELF: every rank's has MPICH's handle
        st = _target(obj)
        if st is None:
            return "COMM_NULL"
        rs = st.rank_state
        if st is rs.world_state:
            return "COMM_WORLD"
        if st is rs.self_state:
            return "COMM_SELF"
        return st

    def comm_make(cls: type, stored: Any) -> Any:
        if isinstance(stored, Comm):
            if cls is Comm and stored:
                cls = _topology_class(Intracomm(stored))
            return cls(stored)
        if cls is Comm:
            from ._intercomm import Intercomm, is_inter
            if is_inter(stored):
                return Intercomm._on(stored)
        comm = (Intracomm if cls is Comm else cls)._on(stored)  # type: ignore[attr-defined]
        return _topology_class(comm)(comm) if cls is Comm else comm

    def request_key(obj: Any) -> Any:
        if not obj._alive:
            return "REQUEST_NULL"
        start = getattr(obj, "_start", None)
        return id(start if start is not None else obj._req)

    def message_key(obj: Any) -> Any:
        if obj._req is None:
            return "MESSAGE_NO_PROC" if obj._null else "MESSAGE_NULL"
        return id(obj._req)

    kinds = {
        "Comm": (_Kind("Comm", 0x04000000, comm_key, comm_make, weak=True), ERR_COMM),
        "Group": (_Kind("Group", 0x08000000, lambda g: g._ranks), ERR_GROUP),
        "Datatype": (_Kind("Datatype", 0x0C000000, lambda t: t._id), ERR_TYPE),
        "Op": (_Kind("Op", 0x18000000, lambda o: o._id,
                     lambda cls, stored: getattr(cls, "_from_handle")(stored)), ERR_OP),
        "Errhandler": (_Kind("Errhandler", 0x14000000, lambda e: e._id), ERR_ARG),
        "Info": (_Kind("Info", 0x1C000000, lambda i: id(i._items) if i._items is not None
                       else "INFO_NULL"), ERR_INFO),
        "Request": (_Kind("Request", 0x2C000000, request_key), ERR_REQUEST),
        "Message": (_Kind("Message", 0x2C000000, message_key), ERR_REQUEST),
        "Session": (_Kind("Session", 0x38000000, lambda s: s._st or "SESSION_NULL"), ERR_SESSION),
        "Win": (_Kind("Win", 0x20000000, lambda w: w._live() or "WIN_NULL",
                      lambda cls, stored: getattr(cls, "_from_state")(stored)), ERR_WIN),
    }
    for name, (kind, code) in kinds.items():
        for attr, value in _methods(kind, code).items():
            setattr(classes[name], attr, value)


# ---- mpi4py's low-level helpers: _sizeof, _addressof, _handleof ----

_HANDLE_CLASSES = ("Status", "Datatype", "Request", "Message", "Op", "Group", "Info",
                   "Errhandler", "Session", "Comm", "Win", "File")


def _handle_class(obj: Any, call: str, types_too: bool) -> type:
    names = _package[0]
    classes = tuple(c for c in (names.get(n) for n in _HANDLE_CLASSES) if isinstance(c, type))
    if types_too and isinstance(obj, type) and issubclass(obj, classes):
        return obj
    if isinstance(obj, classes):
        return type(obj)
    raise TypeError(f"MPI.{call}({obj!r}): expecting an MPI {'type or ' if types_too else ''}"
                    "instance")


def sizeof(arg: Any) -> int:
    """Return the bytes of the C object behind ``arg`` (an MPI object or class), as MPICH's:
    20 for a ``Status`` (five C ints), 4 for a handle (MPICH's handles are C ints)."""
    cls = _handle_class(arg, "_sizeof", True)
    return 20 if issubclass(cls, _package[0]["Status"]) else 4


def addressof(arg: Any) -> int:
    """Return where ``arg``'s handle lives: the address of the Python object holding it."""
    _handle_class(arg, "_addressof", False)
    return id(arg)


def handleof(arg: Any) -> int:
    """Return ``arg``'s handle (``arg.handle``); for a ``Status``, the address of its fields."""
    cls = _handle_class(arg, "_handleof", False)
    if issubclass(cls, _package[0]["Status"]):
        return id(arg)
    value: int = arg.handle
    return value
