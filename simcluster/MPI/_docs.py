"""Docstrings in mpi4py's form: a signature line, a blank line, then what the name does.

mpi4py's compiled module carries each function's signature as the first line
of its docstring (``Get_rank(self) -> int``), and tools that read mpi4py's
documentation (its own ``test_doc`` among them) take the description from
after that line. ``sign`` gives ``simcluster.MPI``'s functions, methods and
properties the same form, from their Python signatures; a property's line is
``name: type``.
"""

from __future__ import annotations

import inspect
from typing import Any


def _line(name: str, fn: Any) -> str:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"{name}(...)"
    return f"{name}{signature}".replace("'", "")


def _signed(line: str, doc: str | None) -> str | None:
    """``doc`` after ``line``, its first paragraph on one line (mpi4py's summary line)."""
    if not doc or doc.startswith(line.partition("(")[0].partition(":")[0] + "("):
        return doc
    summary, blank, rest = inspect.cleandoc(doc).partition("\n\n")
    return f"{line}\n\n{' '.join(summary.split())}{blank}{rest}"


def sign(namespace: dict[str, Any], classes: list[type]) -> None:
    """Put the signature line on the module's functions in ``namespace`` and on every
    function, property, classmethod and staticmethod of ``classes``."""
    seen: set[int] = set()  # a function under two names (Disconnect = Free) is signed once

    def sign_function(name: str, fn: Any) -> None:
        if id(fn) not in seen:
            seen.add(id(fn))
            fn.__doc__ = _signed(_line(name, fn), fn.__doc__)

    for value in namespace.values():  # by their own names: mpi4py's _sizeof is sizeof
        if inspect.isfunction(value) and not value.__name__.startswith("_"):
            sign_function(value.__name__, value)
    for cls in classes:
        for name, value in vars(cls).items():
            if name.startswith("__"):
                continue
            if isinstance(value, (classmethod, staticmethod)):
                sign_function(name, value.__func__)
            elif inspect.isfunction(value):
                sign_function(name, value)
            elif isinstance(value, property) and value.__doc__:
                kind = inspect.signature(value.fget).return_annotation if value.fget else ""
                shown = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
                try:
                    value.__doc__ = _signed(f"{name}: {shown}" if shown else name, value.__doc__)
                except AttributeError:  # a property of a C type
                    pass
