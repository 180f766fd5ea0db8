"""mpi4py's names for features simcluster does not simulate: they exist, and raise when used.

Code written for mpi4py may import or mention one-sided windows, MPI-IO,
process spawning or intercommunicators without using them on
every path, so each of those names is here; using one (calling it, or any of
its attributes) raises ``NotImplementedError`` that names the feature. Names
mpi4py does not have at all stay ``AttributeError``.
"""

from __future__ import annotations

from typing import Any, NoReturn

WINDOWS = "one-sided communication (MPI windows)"
IO = "MPI-IO (MPI.File)"
SPAWN = "dynamic processes (spawn, ports, name publishing)"
INTERCOMM = "intercommunicators"
SESSIONS = "MPI sessions"

CLASSES: dict[str, str] = {}
"""mpi4py classes that stand for an unsimulated feature."""

HANDLES: dict[str, str] = {}

FUNCTIONS: dict[str, str] = {
    "Open_port": SPAWN, "Close_port": SPAWN, "Publish_name": SPAWN, "Unpublish_name": SPAWN,
    "Lookup_name": SPAWN,
}

COMM_METHODS: dict[str, str] = {
    "Spawn": SPAWN, "Spawn_multiple": SPAWN, "Accept": SPAWN,
    "Connect": SPAWN, "Join": SPAWN,
}
"""Methods of mpi4py's ``Intracomm`` (and ``Comm``) that need an unsimulated feature."""


def _refuse(name: str, feature: str) -> NoReturn:
    raise NotImplementedError(f"MPI.{name}: {feature} are not simulated by simcluster; "
                              "the simulated API is point-to-point, collectives, groups, "
                              "communicators, datatypes and requests")


class Unsimulated:
    """A stand-in for an mpi4py class, handle or function: every use raises NotImplementedError."""

    __slots__ = ("_name", "_feature")

    def __init__(self, name: str, feature: str) -> None:
        self._name = name
        self._feature = feature

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self._name, self._feature)

    def __getattr__(self, attr: str) -> NoReturn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _refuse(f"{self._name}.{attr}", self._feature)

    def __repr__(self) -> str:
        return f"<MPI.{self._name}: {self._feature}, not simulated>"


def method(name: str, feature: str) -> Any:
    """A communicator method that raises NotImplementedError naming ``feature``."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(f"Comm.{name}", feature)

    refuse.__name__ = name
    refuse.__doc__ = f"Not simulated ({feature}): raises NotImplementedError."
    return refuse


class _UnsimulatedType(type):
    """The metaclass of ``Win``, ``File`` and ``Session``: a class attribute in use raises."""

    _feature: str

    def __getattr__(cls, attr: str) -> NoReturn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _refuse(f"{cls.__name__}.{attr}", cls._feature)


class NullHandle(metaclass=_UnsimulatedType):
    """A handle of an unsimulated kind (``Win``, ``File``, ``Session``): every one is null.

    It has mpi4py's object model (``WIN_NULL`` is falsy, compares equal to ``MPI.Win()``,
    pickles, frees, subclasses); anything else raises ``NotImplementedError``.
    """

    _feature = ""
    _null_name = ""

    def __new__(cls, handle: Any = None) -> NullHandle:
        base = _base(cls)
        if handle is not None and not isinstance(handle, base):
            raise TypeError(f"MPI.{base.__name__}({handle!r}): expected an MPI.{base.__name__}")
        return object.__new__(cls)

    def __getattr__(self, attr: str) -> NoReturn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _refuse(f"{_base(type(self)).__name__}.{attr}", self._feature)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _base(type(self)))

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<MPI.{type(self).__name__} {self._null_name}: {self._feature}, not simulated>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self is _NULLS.get(self._null_name):
            return self._null_name
        return (type(self), ())

    def free(self) -> None:
        """Nothing to free: the handle is null."""


def _base(cls: type) -> type:
    return next(c for c in cls.__mro__ if c.__base__ is NullHandle)


def _null_class(name: str, feature: str, null_name: str) -> type[NullHandle]:
    cls = _UnsimulatedType(name, (NullHandle,), {
        "__doc__": f"mpi4py's MPI.{name}: {feature}, not simulated; only the null handle exists.",
        "_feature": feature, "_null_name": null_name, "__module__": "simcluster.MPI",
        "__qualname__": name})
    return cls  # type: ignore[return-value]


NULL_HANDLE_CLASSES: dict[str, tuple[str, str]] = {}
"""Unsimulated classes whose null handle mpi4py code compares against, by name."""

_CLASSES = {name: _null_class(name, feature, null) for name, (feature, null) in
            NULL_HANDLE_CLASSES.items()}
_NULLS: dict[str, NullHandle] = {null: _CLASSES[name]() for name, (_, null) in
                                 NULL_HANDLE_CLASSES.items()}


def names() -> dict[str, Any]:
    """The module-level stand-ins, by name."""
    table = {**CLASSES, **HANDLES, **FUNCTIONS}
    out: dict[str, Any] = {name: Unsimulated(name, feature) for name, feature in table.items()}
    out.update(_CLASSES)
    out.update(_NULLS)
    return out


NOT_PROVIDED: dict[str, str] = {
    "Get_address": "memory addresses of buffers are not simulated",
    "_comm_lock": "an internal helper of mpi4py.util, which is not provided",
    "_comm_lock_table": "an internal helper of mpi4py.util, which is not provided",
    "_commctx_inter": "an internal helper of mpi4py.util, which is not provided",
    "_commctx_intra": "an internal helper of mpi4py.util, which is not provided",
    "_datatype_create": "an internal helper of mpi4py.util.dtlib, which is not provided",
    "_datatype_decode": "an internal helper of mpi4py.util.dtlib, which is not provided",
    "_typedict": "an internal table of mpi4py.util.dtlib, which is not provided",
    "_typedict_c": "an internal table of mpi4py.util.dtlib, which is not provided",
    "_typedict_f": "an internal table of mpi4py.util.dtlib, which is not provided",
    "_keyval_registry": "mpi4py's internal table of keyvals (simcluster keeps its own)",
    "_set_abort_status": "mpi4py's internal exit-status hook (Comm.Abort ends the run here)",
}
"""Module-level names of mpi4py 4.1.2's ``MPI`` that ``simcluster.MPI`` does not have, and why.

``tests/test_mpi_names.py`` checks this list against the real mpi4py: every name it
has is either provided or listed here.
"""
