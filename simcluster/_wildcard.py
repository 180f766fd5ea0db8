"""``ANY_SOURCE`` and ``ANY_TAG``: int sentinels with readable reprs.

They live in a module of their own because a subclass of ``int`` cannot be a
compiled (mypyc native) class; this module always runs interpreted.
"""

from __future__ import annotations

from typing import Final


class _Wildcard(int):
    """An int sentinel with a readable repr."""

    _name: str

    def __new__(cls, value: int, name: str) -> _Wildcard:
        self = super().__new__(cls, value)
        self._name = name
        return self

    def __repr__(self) -> str:
        return self._name

    __str__ = __repr__


ANY_SOURCE: Final[int] = _Wildcard(-1, "ANY_SOURCE")
ANY_TAG: Final[int] = _Wildcard(-1, "ANY_TAG")
