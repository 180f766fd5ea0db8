"""The codec's two errors, kept in an interpreted module of their own.

``wire`` re-exports them. They subclass ``TypeError``, which a class compiled
with mypyc cannot do, and ``wire`` is compiled in the fast build.
"""

from __future__ import annotations

from typing import Final

SEND_FIX: Final = 'send a dict/list/array instead, or run(..., serializer="pickle")'


class Unsendable(TypeError):
    """Raised by ``pack()`` for an object the codec cannot carry.

    The engine prefixes the rank and the operation to the message.

    Attributes:
        type_name: the offending type, e.g. ``"Foo"`` or ``"numpy.ndarray[object]"``.
        fix: what to send instead.
    """

    def __init__(self, type_name: str, fix: str = SEND_FIX, problem: str = "") -> None:
        self.type_name = type_name
        self.fix = fix
        self.problem = problem or f"{type_name} is not sendable"
        super().__init__(f"{self.problem}; {fix}")

    def __reduce__(self) -> tuple[type[Unsendable], tuple[str, str, str]]:
        return (type(self), (self.type_name, self.fix, self.problem))


class Unreadable(TypeError):
    """Raised by an ``ArrayCodec`` for an array this process cannot hold.

    The sender's library is not importable here, or the dtype has no type in
    the library asked for (numpy has no bfloat16). ``unpack`` lets it through
    unchanged (it is not a malformed payload); the message says what to do.
    """
