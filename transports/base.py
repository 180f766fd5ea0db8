"""The transport interface and the envelope that crosses it.

A transport moves envelopes between ranks and knows nothing else: not
matching, not virtual time, not collectives. The engine hands it an envelope
whose times and sizes are already decided, and the transport calls the
``deliver`` callback it was opened with, on the side that hosts ``dst``.

Rule 1: a transport never reorders envelopes between one (src, dst) pair;
the engine relies on that for MPI's non-overtaking rule.
Rule 2: a transport never imports ``simcluster``; the error classes every
layer shares live here so that dependencies point one way only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Any, Final, NamedTuple

# ---- errors shared by every layer ----


class SimclusterError(Exception):
    """Base class of every simcluster error.

    The message has the shape ``rank R: op(args): what happened; what to do``.
    ``rank`` and ``op`` are kept as attributes for programs.
    """

    def __init__(self, rank: int | None, op: str, problem: str, fix: str = "") -> None:
        self.rank = rank
        self.op = op
        self.problem = problem
        self.fix = fix
        prefix = "" if rank is None else f"rank {rank}: "
        tail = f"; {fix}" if fix else ""
        super().__init__(f"{prefix}{op}: {problem}{tail}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (shm/tcp hosts); subclasses take
        # other constructor arguments, so rebuild from args and attributes.
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(cls: type[SimclusterError], args: tuple[Any, ...],
                   state: dict[str, Any]) -> SimclusterError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class TransportError(SimclusterError):
    """A transport failed: a malformed frame, a lost peer, a refused connection.

    ``peer`` names the other side (a rank, a process or an address) when known.
    """

    def __init__(
        self, rank: int | None, op: str, problem: str, fix: str = "", peer: object = None
    ) -> None:
        self.peer = peer
        super().__init__(rank, op, problem, fix)


# ---- the envelope ----

EAGER: Final = 0
"""Payload travels with the envelope; the send completes without a receive."""
RTS: Final = 1
"""Rendezvous request to send: header only, the data waits for a match."""
CTS: Final = 2
"""Clear to send, from the receiver back to the sender, carrying the match time."""
DATA: Final = 3
"""Rendezvous payload, sent after a CTS."""
ACK: Final = 4
"""Match acknowledgement for a synchronous-mode (ssend) eager message."""

KIND_NAMES: Final = ("EAGER", "RTS", "CTS", "DATA", "ACK")


class Envelope(NamedTuple):
    """One message between two world ranks, as the transport sees it.

    Immutable. A NamedTuple rather than a frozen dataclass because one is
    built per message and a frozen dataclass's ``__init__`` costs about four
    times as much (it goes through ``object.__setattr__`` field by field).

    Attributes:
        kind: one of EAGER, RTS, CTS, DATA, ACK.
        ctx: communicator context id (matching happens per context).
        src: world rank of the sender of this envelope.
        dst: world rank of its receiver.
        tag: user tag, or a private collective tag.
        msg_id: id of the user message, unique per original sender; control
            envelopes (CTS, ACK) carry the id of the message they answer.
        nbytes: bytes the latency model charged for the message.
        time: virtual time attached by the sender: arrival for EAGER/RTS/DATA,
            the match time for CTS/ACK.
        header: msgpack payload header from ``transports.wire`` (``b""`` for
            control envelopes).
        buffers: raw array buffers that belong to the header, in order. In
            process only (``Transport.in_process``), under the header
            ``wire.INLINE``, a float, bool or int itself (``wire.inline_nbytes``).
        sync: the sender wants an ACK when the message is matched (ssend).
        meta: opaque bytes of the layer above, carried as they are; simcluster
            sends ``b""`` (collectives are verified at the call, not per
            message), a third-party layer may use it.
    """

    kind: int
    ctx: int
    src: int
    dst: int
    tag: int
    msg_id: int
    nbytes: int
    time: float
    header: bytes = b""
    buffers: Any = ()  # a tuple of buffers; in process, under wire.INLINE, the scalar itself
    sync: bool = False
    meta: bytes = b""

    def __repr__(self) -> str:
        return (
            f"<Envelope {KIND_NAMES[self.kind]} ctx={self.ctx} {self.src}->{self.dst} "
            f"tag={self.tag} id={self.msg_id} nbytes={self.nbytes} t={self.time:.9g}>"
        )


make_envelope: Final = partial(tuple.__new__, Envelope)
"""``make_envelope(fields)``: an Envelope from all twelve fields, in the order declared above.

The fast constructor for the hot path (one envelope per message): it skips
the NamedTuple's Python-level ``__new__`` and its defaults, so every field
must be given, in order (``tests/test_hot_path.py`` pins the order).
"""



def retimed(env: Envelope, time: float) -> Envelope:
    """``env`` with another ``time``: ``env._replace(time=time)``, without its cost (a hot path)."""
    return make_envelope(env[:7] + (time,) + env[8:])


def rebuffered(env: Envelope, buffers: tuple[Any, ...]) -> Envelope:
    """``env`` with other ``buffers``: ``env._replace(buffers=buffers)``, without its cost."""
    return make_envelope(env[:9] + (buffers,) + env[10:])


Deliver = Callable[[Envelope], None]


class Transport(ABC):
    """Moves envelopes between the ranks of one run.

    A run opens the transport once with its world size and a ``deliver``
    callback, sends envelopes through it, and closes it at the end.
    A third-party transport implements these methods and adds itself to the
    ``TRANSPORTS`` list in ``tests/conftest.py`` to run the conformance suite.
    """

    __slots__ = ()

    name: str = "transport"

    in_process: bool = False
    """True for a transport whose ``send`` only calls ``deliver`` with the same
    envelope, in this process. The engine then delivers its envelopes itself
    (one call less per message), arrays of other libraries travel as objects
    (a CuPy array stays on its device) instead of staged bytes, and numbers
    travel as themselves (``wire.INLINE``: the envelope's ``buffers`` is the
    value, not a tuple)."""

    @abstractmethod
    def open(self, world_size: int, deliver: Deliver) -> None:
        """Prepare to carry envelopes among ``world_size`` ranks.

        ``deliver`` must be called exactly once per envelope, on the side that
        hosts ``envelope.dst``, in send order for each (src, dst) pair.
        """

    @abstractmethod
    def send(self, envelope: Envelope) -> None:
        """Start moving ``envelope`` towards ``envelope.dst``; never blocks."""

    @abstractmethod
    def close(self) -> None:
        """Release everything the transport holds; safe to call twice."""
