"""``MPI._typecode`` and ``MPI._typealign``: mpi4py's private helpers for ``mpi4py.util.dtlib``.

``_typecode(datatype)`` is the numpy type code of a predefined type (or of a
``Dup`` of one), None for pair and derived types. ``_typealign(datatype)`` is
the alignment, in bytes, a C compiler gives the type: a predefined type's
numpy alignment, the widest member's for the ``MINLOC``/``MAXLOC`` pair
types, None for derived types. Both read the public ``Datatype`` API only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._constants import COMBINER_DUP, COMBINER_NAMED

_PAIR_VALUES = {"SHORT_INT": "h", "INT_INT": "i", "TWOINT": "i", "LONG_INT": "l",
                "FLOAT_INT": "f", "DOUBLE_INT": "d", "LONG_DOUBLE_INT": "g"}
"""The value member's type code of each pair type (the index member is a C int)."""


def _named(datatype: Any) -> Any:
    """The predefined type ``datatype`` is, or copies through a chain of ``Dup``; None otherwise."""
    seen = datatype
    while seen.combiner == COMBINER_DUP:
        seen = seen.decode()[0]
    return seen if seen.is_predefined else None


def _typecode(datatype: Any) -> str | None:
    """Return the numpy type code of a predefined type (or a Dup of one); None for the rest."""
    if not datatype:
        return None
    named = _named(datatype)
    if named is None:
        return None
    try:
        code = str(named.tocode())
    except ValueError:
        return None
    return "c" if code == "S" else code  # numpy's "S" alone is a string of length 0; "c" is one char


def _pair_value(datatype: Any) -> str | None:
    """The value member's type code when ``datatype`` is a pair type (``DOUBLE_INT``...), else None."""
    if not datatype or datatype.combiner != COMBINER_NAMED:
        return None
    from . import _datatypes

    for name, code in _PAIR_VALUES.items():
        pair = getattr(_datatypes, name, None)
        if pair is not None and pair == datatype:
            return code
    return None


def _typealign(datatype: Any) -> int | None:
    """Return a predefined type's alignment in bytes (pair types: their widest member's); None for the rest."""
    code = _typecode(datatype)
    if code is not None:
        return int(np.dtype(code).alignment)
    named = None if not datatype else _named(datatype)
    value = None if named is None else _pair_value(named)
    if value is None:
        return None
    return int(np.dtype(f"{value},i", align=True).alignment)
