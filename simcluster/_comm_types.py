"""What the layers beside ``Comm`` read of it, declared as Protocols.

``comm`` imports the collectives' context (``_coll_context``), the compiled
point-to-point calls (``_p2p_calls``) and the collective methods
(``collectives._methods``); they name these Protocols instead of ``comm.Comm``
and ``comm.Group``, so no import runs back up to ``comm``
(tests/test_structure.py counts such knots).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from .engine.protocol import Member, Roster

if TYPE_CHECKING:
    from .engine.kernel import Kernel
    from .engine.protocol import P2P
    from .latency import LatencyModel


class CollGroup(Roster, Protocol):
    """A communicator's shared part (``comm.Group``) as collectives read it."""

    engine: Any  # the run's Engine: its settings (algorithms, fidelity, kernel)
    setups: dict[tuple[Any, ...], tuple[Any, ...]]


class CollComm(Member, Protocol):
    """A rank's handle on a communicator (``comm.Comm``) as the collectives' context and the
    compiled point-to-point calls read it."""

    @property
    def size(self) -> int: ...

    @property
    def group(self) -> CollGroup: ...

    @property
    def world_ranks(self) -> list[int]: ...

    @property
    def kernel(self) -> Kernel: ...

    @property
    def p2p(self) -> P2P: ...

    @property
    def engine(self) -> Any: ...

    @property
    def latency(self) -> LatencyModel: ...

    @property
    def coll(self) -> CollComm: ...

    def named(self, key: str, world_ranks: list[int], at: int | None = None) -> CollComm: ...

    def send_coroutine(self, obj: object, dst: int, tag: int = 0) -> Coroutine[Any, Any, None]: ...

    def recv_coroutine(self, buf: Any = None, src: int = ..., tag: int = ...) -> Coroutine[Any, Any, Any]: ...
