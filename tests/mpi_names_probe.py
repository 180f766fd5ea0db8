"""Write what each public name of ``mpi4py`` is, as JSON: run under the real mpi4py and under simcluster.

    python tests/mpi_names_probe.py OUT.json                          # the real mpi4py
    simcluster mpirun -n 1 tests/mpi_names_probe.py OUT.json          # simcluster's

Covers the package ``mpi4py``, ``mpi4py.MPI`` and ``mpi4py.util``'s modules:
every public name, and every public attribute of the classes they define, as
a kind (``class``, ``function``, ``property``, ``int``, ``module``,
``instance:Type``...); integers carry their value. A module that does not
import is recorded as ``"import failed: ..."``. ``tests/test_mpi_names.py``
compares the two files.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
from typing import Any

MODULES = ("mpi4py", "mpi4py.MPI", "mpi4py.util", "mpi4py.util.dtlib", "mpi4py.util.pkl5",
           "mpi4py.util.sync", "mpi4py.util.pool", "mpi4py.run", "mpi4py.typing")
DUNDERS = ("__version__", "__file__", "__path__", "__all__")
_FUNCTIONS = ("method_descriptor", "cython_function_or_method", "classmethod_descriptor",
              "fused_cython_function", "wrapper_descriptor", "builtin_function_or_method",
              "staticmethod", "classmethod", "function")


def kind(value: Any) -> Any:
    """What ``value`` is, in terms that hold for Cython and for Python code alike."""
    if isinstance(value, type):
        return "class"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return ["int", int(value)]
    if isinstance(value, (float, str, bytes)):
        return type(value).__name__
    if isinstance(value, types.ModuleType):
        return "module"
    if type(value).__name__ in _FUNCTIONS or isinstance(value, types.MethodType):
        return "function"
    if isinstance(value, property) or type(value).__name__ in ("getset_descriptor",
                                                                "member_descriptor"):
        return "property"
    if value is None:
        return "None"
    public = next(c for c in type(value).__mro__ if not c.__name__.startswith("_"))
    return "instance:" + public.__name__  # MPI.pickle's class is a private subclass of Pickle


def _own(cls: type, roots: tuple[str, ...]) -> bool:
    return any(cls.__module__ == r or cls.__module__.startswith(r + ".") for r in roots)


def probe(roots: tuple[str, ...]) -> dict[str, Any]:
    """Every public name of ``MODULES``, and of the classes they define, with its kind."""
    out: dict[str, Any] = {}
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - recorded, compared by the test
            out[name] = f"import failed: {type(exc).__name__}"
            continue
        out[name] = "module"
        for attr in [*sorted(dir(module)), *DUNDERS]:
            if attr.startswith("_") and attr not in DUNDERS:
                continue
            try:
                value = getattr(module, attr)
            except Exception as exc:  # noqa: BLE001
                out[f"{name}.{attr}"] = f"error: {type(exc).__name__}"
                continue
            out[f"{name}.{attr}"] = ("list" if attr == "__path__" else
                                     ["str", value] if attr == "__version__" else kind(value))
            if isinstance(value, type) and _own(value, roots) and attr == value.__name__:
                for member in dir(value):
                    if member.startswith("_"):
                        continue
                    try:
                        static = inspect.getattr_static(value, member)
                    except AttributeError:
                        continue
                    out[f"{name}.{attr}.{member}"] = kind(static)
    return out


def main(path: str) -> None:
    from mpi4py import MPI

    real = "simcluster" not in type(MPI.COMM_WORLD).__module__
    table = probe(("mpi4py",) if real else ("mpi4py", "simcluster"))
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(table, file, indent=0, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
