"""mpi4py's names for features simcluster does not simulate: they exist, and raise when used.

Code written for mpi4py may import or mention one-sided windows, MPI-IO,
process spawning, intercommunicators or topologies without using them on
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
TOPOLOGY = "process topologies (Cartesian, graph, distributed graph)"
SESSIONS = "MPI sessions"
ERROR_CODES = "user-defined error classes and codes"

CLASSES: dict[str, str] = {
    "Win": WINDOWS, "File": IO, "Intercomm": INTERCOMM, "Topocomm": TOPOLOGY,
    "Cartcomm": TOPOLOGY, "Graphcomm": TOPOLOGY, "Distgraphcomm": TOPOLOGY, "Session": SESSIONS,
}
"""mpi4py classes that stand for an unsimulated feature."""

HANDLES: dict[str, str] = {"WIN_NULL": WINDOWS, "FILE_NULL": IO, "SESSION_NULL": SESSIONS}

FUNCTIONS: dict[str, str] = {
    "Open_port": SPAWN, "Close_port": SPAWN, "Publish_name": SPAWN, "Unpublish_name": SPAWN,
    "Lookup_name": SPAWN, "Register_datarep": IO, "Add_error_class": ERROR_CODES,
    "Add_error_code": ERROR_CODES, "Add_error_string": ERROR_CODES,
    "Remove_error_class": ERROR_CODES, "Remove_error_code": ERROR_CODES,
    "Remove_error_string": ERROR_CODES,
}

COMM_METHODS: dict[str, str] = {
    "Create_cart": TOPOLOGY, "Create_graph": TOPOLOGY, "Create_dist_graph": TOPOLOGY,
    "Create_dist_graph_adjacent": TOPOLOGY, "Cart_map": TOPOLOGY, "Graph_map": TOPOLOGY,
    "Create_intercomm": INTERCOMM, "Spawn": SPAWN, "Spawn_multiple": SPAWN, "Accept": SPAWN,
    "Connect": SPAWN, "Get_parent": SPAWN, "Join": SPAWN,
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


def names() -> dict[str, Unsimulated]:
    """The module-level stand-ins, by name."""
    table = {**CLASSES, **HANDLES, **FUNCTIONS}
    return {name: Unsimulated(name, feature) for name, feature in table.items()}
