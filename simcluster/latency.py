"""Latency and cost models: what a message costs in virtual time.

Design. A model is an immutable, reusable *description* (``AlphaBeta(alpha=1e-6,
beta=1e-10)``) that can be shared by many runs. ``model.bind(world_size, rng)``
makes the per-run state, a :class:`Ports` object holding one send timer and
one receive timer per world rank (plain Python lists, indexed by world rank)
and the run's seeded RNG. The engine charges every message exactly once and
gets back ``(depart, arrive)``: when the sender's port is free of the message
(an isend can complete) and when the receiver has it (a matching receive can
complete). It charges the messages of one virtual instant together, once the
instant's events have run, in a canonical order: each send port takes its
messages in posting order, each receive port in the order they reach it
(``wire`` time, then source rank, then posting order); so the answers never
depend on the order in which the run's seed processes simultaneous events.

Rule 1: no clock here. Models never read or advance virtual time; they only
turn the time they are handed into later times, and keep port timers.
Rule 2: deterministic. Given the same model, seed and sequence of
``transfer`` calls, the answers are the same, bit for bit; the only
randomness is the ``rng`` passed to ``bind`` (which the run seeds), and
built-in models draw from it only there (``Jitter`` hashes its noise per
message), so a model's answers do not depend on how calls interleave.
Rule 3: lean hot path. ``transfer`` runs on every message, so it does a few
float operations on lists and nothing else: it checks no arguments (the
engine has already validated ranks) and allocates only its result tuple.

Port timers start at -inf: an idle port puts no bound on a message.
Arrivals are not necessarily monotone per (src, dst) pair (``Jitter``, or a
rendezvous transfer charged at its match time), so MPI's non-overtaking rule
is kept by matching, not here. ``parse`` turns command-line specs such as
``"alphabeta:1us,10GB/s"`` into models.
"""

from __future__ import annotations

import math
import numbers
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, ClassVar, Final, NoReturn, cast

from .engine.ports import NativePorts, _AlphaBetaPorts, _ConstantPorts, _LogGPPorts, _ZeroPorts

__all__ = [
    "BANDWIDTH_UNITS",
    "FORMS",
    "TIME_UNITS",
    "AlphaBeta",
    "Constant",
    "Hierarchical",
    "Jitter",
    "LatencyModel",
    "LogGP",
    "Placement",
    "Ports",
    "Zero",
    "parse",
]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


# ---- interfaces ----


class Ports(ABC):
    """Per-run state of a latency model: port timers and the run's RNG.

    Made by :meth:`LatencyModel.bind`; one per run, never shared between runs.
    """

    __slots__ = ()

    zero: bool = False
    """True only when ``transfer`` always returns ``(t, t)``, so the engine may skip calls."""

    ordered: bool = True
    """True when an answer may depend on earlier calls (port timers): the engine then
    charges the messages of each virtual instant together, in a canonical order, once
    the instant's events have run. False (``Constant``) lets it charge each message as
    it is posted; leave it True for any model with state."""

    platform: Any = None
    """A platform whose links flows share (``simcluster.platform``): the engine's flows then time
    every message (``engine.flows``) and ``transfer`` is not asked. None for every other model."""

    @abstractmethod
    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        """Charge one n-byte message posted by world rank ``src`` to ``dst`` at virtual time ``t``.

        Called once per message, in a canonical order (see the module
        docstring); updates the port timers.
        ``src`` and ``dst`` must be in ``range(world_size)`` (not checked).

        Args:
            src: world rank of the sender.
            dst: world rank of the receiver.
            nbytes: bytes the message counts (0 for pure synchronisation).
            t: virtual time, in seconds, at which the message is posted.

        Returns:
            ``(depart, arrive)``: when the sender's port is free of the message,
            and when the receiver has it; both are ``>= t``.
        """

    # ---- the same charge split between two processes (shm/tcp hosting) ----
    # When sender and receiver live in different OS processes, each process
    # keeps only its own ranks' port timers: the sender charges its send port
    # with ``send_side`` and puts the returned ``wire`` time on the envelope;
    # the receiver charges its receive port with ``recv_side`` when the
    # envelope reaches it. For one message, ``recv_side(send_side(...)[1])``
    # equals ``transfer(...)[1]`` bit for bit, and both update the same timers.

    def send_side(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        """Charge the sender's half of a message; return ``(depart, wire)``.

        ``wire`` is when the message would arrive at an idle receive port; the
        receiver's process turns it into the arrival with :meth:`recv_side`.
        The default charges the whole message here with :meth:`transfer` (so a
        model without a split counts receive-port contention only among
        messages sent from one process) and :meth:`recv_side` keeps the time.
        """
        return self.transfer(src, dst, nbytes, t)

    def recv_side(self, src: int, dst: int, nbytes: int, wire: float) -> float:
        """Charge the receiver's half of a message that left at ``wire``; return its arrival.

        Called in the receiver's process, once per message, in the order
        messages reach ``dst`` (by ``wire``, then source rank, then posting
        order among those of one instant); the default returns ``wire`` unchanged.
        """
        return wire

    def grow(self, world_size: int) -> None:
        """Make room for ranks added during the run (``MPI.Comm.Spawn``), up to ``world_size``.

        New ports start idle. The default refuses: a model of your own that keeps
        state per rank must size it here before ranks can be spawned on it.
        """
        raise ValueError(f"{type(self).__name__} cannot add ranks during a run; give it a "
                         "grow(world_size) method that sizes its per-rank state")


@dataclass(frozen=True)
class Placement:
    """Where a latency model puts the ranks: its answer to ``placement()``.

    Rank ``r`` lives on node ``r // ranks_per_node`` (``node_of``), and that
    node is the host a rank's ``socket.gethostname()`` names. ``count`` is the
    number of nodes (None: as many as the ranks need). The rest says what a
    platform adds: ``nics_per_node`` network endpoints per node (NCCL runs one
    ring per NIC), ``gpus`` (the ranks are GPUs: the torch backend runs NCCL's
    algorithms) and ``routed`` (the model itself routes each message over the
    nodes' links, so node-aware collectives may ask it for routes).
    """

    ranks_per_node: int
    count: int | None = None
    nics_per_node: int = 1
    gpus: bool = False
    routed: bool = False

    def node_of(self, rank: int) -> int:
        """The node world rank ``rank`` lives on."""
        return rank // self.ranks_per_node


class LatencyModel(ABC):
    """A cost model for messages.

    Models are immutable, reusable descriptions; :meth:`bind` makes the
    per-run state. Third parties subclass this and :class:`Ports`.
    """

    __slots__ = ()

    sharing: bool = False
    """True for a platform whose links flows share (``simcluster.platform``)."""

    @abstractmethod
    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Make the per-run state for ``world_size`` ranks.

        Args:
            world_size: number of world ranks; port timers are sized to it.
            rng: the run's seeded RNG, the only source of randomness a model may use.

        Returns:
            Fresh :class:`Ports` with every port idle.
        """

    def reduce_time(self, nbytes: int) -> float:
        """Return the virtual seconds it takes to reduce ``nbytes`` bytes locally (0 by default)."""
        return 0.0

    def lookahead(self) -> float:
        """Return the least virtual delay of any message under this model, in seconds (0 by default).

        A promise, for every ``(src, dst, nbytes, t)`` and whatever the ports'
        state: ``transfer(...)[1] >= t + lookahead()``, up to rounding. It
        is how long a rank's action takes, at the least, to reach another
        rank: a zero-byte message, and the request to send of a large one,
        which the receiver sees this long after it was posted. Processes
        hosting blocks of ranks run this far ahead of each other between two
        synchronisations. The default, 0, promises nothing: always safe,
        never fast; a subclass may return more only if its ``transfer``
        keeps the promise.
        """
        return 0.0

    @property
    def free_reductions(self) -> bool:
        """True when :meth:`reduce_time` is 0 for every size, so collectives need not size results.

        The default says so exactly when a subclass keeps the default ``reduce_time``.
        """
        return type(self).reduce_time is LatencyModel.reduce_time

    def placement(self) -> Placement | None:
        """Where this model puts the ranks, or None for a model that knows no nodes (the default)."""
        return None

    def check_world(self, world_size: int) -> None:
        """Raise ``ValueError`` if ``world_size`` ranks do not fit the model (a platform's nodes);
        ``run`` turns it into a usage error before any rank starts. Every size fits by default."""

    def describe(self) -> str:
        """Return a short human description, e.g. ``AlphaBeta(alpha=1e-06, beta=1e-10)``."""
        return f"{type(self).__name__}()"

    def __repr__(self) -> str:
        return self.describe()


# ---- shared helpers ----


def _number(model: str, name: str, value: object, hint: str) -> float:
    """Return ``value`` as a float, or raise naming the parameter if it is not finite and >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{model}({name}={value!r}): {name} must be a number, got {type(value).__name__}; "
            f"pass {hint}, or use latency.parse() for a string with units"
        )
    number = float(value)
    if not (math.isfinite(number) and number >= 0.0):
        raise ValueError(f"{model}({name}={value!r}): {name} must be finite and >= 0; pass {hint}")
    return number


def _check_model(model: str, name: str, value: object) -> LatencyModel:
    if not isinstance(value, LatencyModel):
        raise TypeError(
            f"{model}({name}={value!r}): {name} must be a LatencyModel, "
            f"got {type(value).__name__}; "
            f"pass a model such as AlphaBeta(alpha=1e-06, beta=1e-10)"
        )
    return value


def _check_world_size(model: LatencyModel, world_size: object) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(
            f"{model.describe()}.bind(world_size={world_size!r}): world_size must be an int >= 1; "
            f"pass the number of world ranks"
        )
    return world_size


class _Model(LatencyModel):
    """Immutable model whose state is the slots named in ``_fields`` (equality, hash, describe)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new model instead")

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def _field_values(self) -> tuple[object, ...]:
        return tuple(getattr(self, field) for field in self._fields)

    def __reduce__(self) -> tuple[object, ...]:
        # rebuilt through __init__ (which takes the fields in order), so models
        # travel to shm/tcp hosting processes although they refuse setattr
        return (type(self), self._field_values())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Model)
        return self._field_values() == other._field_values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._field_values()))

    def describe(self) -> str:
        args = ", ".join(f"{field}={getattr(self, field)!r}" for field in self._fields)
        return f"{type(self).__name__}({args})"


class _BoundPorts(Ports):
    """Ports that remember their model for ``repr``."""

    __slots__ = ("_model", "_world_size")

    def __init__(self, model: LatencyModel, world_size: int) -> None:
        self._model = model
        self._world_size = world_size

    def __repr__(self) -> str:
        return f"<ports of {self._model.describe()} world_size={self._world_size}>"

    def grow(self, world_size: int) -> None:
        self._world_size = world_size


# Zero, Constant, AlphaBeta and LogGP bind compiled ports (_ports), which the engine
# calls natively; they are Ports to everyone else.
for _ports_class in (_ZeroPorts, _ConstantPorts, _AlphaBetaPorts, _LogGPPorts):
    Ports.register(_ports_class)
del _ports_class


def _native(ports: NativePorts) -> Ports:
    return cast(Ports, ports)  # a virtual subclass (Ports.register), which mypy cannot see


# ---- Zero and Constant ----


class Zero(_Model):
    """No cost: every message departs and arrives at the time it is posted.

    ``transfer`` returns ``(t, t)``; virtual time stays 0 unless ranks sleep.
    """

    __slots__ = ()

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Return ports whose ``transfer`` is ``(t, t)`` and whose ``zero`` is True."""
        return _native(_ZeroPorts(self, _check_world_size(self, world_size)))


class Constant(_Model):
    """A fixed delay per message, whatever its size, with no port contention.

    ``transfer`` returns ``(t, t + seconds)``.

    Args:
        seconds: delay of every message, ``>= 0``.

    Raises:
        ValueError: ``seconds`` is negative or not finite.
        TypeError: ``seconds`` is not a number.
    """

    __slots__ = ("seconds",)
    _fields = ("seconds",)
    seconds: float

    def __init__(self, seconds: float) -> None:
        hint = "seconds, e.g. seconds=5e-06 for 5 us"
        self._set("seconds", _number("Constant", "seconds", seconds, hint))

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Return ports that delay every message by ``seconds``."""
        return _native(_ConstantPorts(self, _check_world_size(self, world_size)))

    def lookahead(self) -> float:
        """``seconds``: every message takes exactly that."""
        return self.seconds


# ---- AlphaBeta ----


class AlphaBeta(_Model):
    """Hockney's alpha-beta model with one full-duplex port per rank.

    An n-byte message costs ``alpha + n*beta`` on an idle network. Every rank
    sends one message at a time and receives one at a time, each port busy
    ``n*beta`` per message, so incast and fan-out serialise as on real links,
    while sending and receiving at once do not slow each other. Exactly: a
    message posted by ``s`` to ``d`` at time ``t`` gets::

        start        = max(t, send_free[s])
        send_free[s] = start + n*beta                 # = depart
        arrive       = max(start + alpha + n*beta, recv_free[d] + n*beta)
        recv_free[d] = arrive

    Reducing n bytes costs ``gamma*n`` (see :meth:`reduce_time`).

    Args:
        alpha: latency per message, seconds ``>= 0``.
        beta: seconds per byte ``>= 0`` (1 / bandwidth in bytes per second).
        gamma: seconds per byte of local reduction ``>= 0``.

    Raises:
        ValueError: a parameter is negative or not finite.
        TypeError: a parameter is not a number.
    """

    __slots__ = ("alpha", "beta", "gamma")
    _fields = ("alpha", "beta", "gamma")
    alpha: float
    beta: float
    gamma: float

    def __init__(self, alpha: float, beta: float, gamma: float = 0.0) -> None:
        hint = "seconds, e.g. alpha=1e-06 for 1 us"
        self._set("alpha", _number("AlphaBeta", "alpha", alpha, hint))
        hint = "seconds per byte, e.g. beta=1e-10 for 10 GB/s"
        self._set("beta", _number("AlphaBeta", "beta", beta, hint))
        self._set(
            "gamma",
            _number("AlphaBeta", "gamma", gamma, "seconds per byte reduced, e.g. gamma=1e-10"),
        )

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Return ports with every send and receive port idle."""
        return _native(_AlphaBetaPorts(self, _check_world_size(self, world_size)))

    def reduce_time(self, nbytes: int) -> float:
        """Return ``gamma * nbytes``, the seconds it takes to reduce ``nbytes`` bytes."""
        return self.gamma * nbytes

    def lookahead(self) -> float:
        """``alpha``: no message arrives sooner after it is posted."""
        return self.alpha

    @property
    def free_reductions(self) -> bool:
        """True when ``gamma`` is 0."""
        return self.gamma == 0

    def describe(self) -> str:
        """Return ``AlphaBeta(alpha=..., beta=...)``, with ``gamma=...`` only when it is not 0."""
        tail = f", gamma={self.gamma!r}" if self.gamma else ""
        return f"AlphaBeta(alpha={self.alpha!r}, beta={self.beta!r}{tail})"


# ---- LogGP ----


class LogGP(_Model):
    """The LogGP model: overhead at both ends, a gap between messages, G per extra byte.

    With ``w = (max(n, 1) - 1) * G`` (a 0-byte message costs like a 1-byte one)
    and ``busy = max(g, o + w)``, a message posted by ``s`` to ``d`` at time
    ``t`` gets::

        start        = max(t, send_free[s])
        depart       = start + o + w                  # sender overhead, then injection
        send_free[s] = start + busy                   # next send starts >= g later
        arrive       = max(depart + L + o, recv_free[d] + busy)
        recv_free[d] = arrive

    so one message on an idle network takes ``2*o + L + (n-1)*G``; messages
    from one sender start ``max(g, o + (n-1)*G)`` apart, and so do arrivals
    at one receiver (the receive side is the mirror of the send side, as in
    :class:`AlphaBeta`). A rank sending and receiving at once is not slowed.
    ``depart`` can be earlier than the next free send slot when ``g > o + w``:
    the send has completed, but the next message still waits for the gap.
    Reductions cost nothing (:meth:`reduce_time` is 0).

    Args:
        L: wire latency, seconds ``>= 0``.
        o: CPU overhead of a send and of a receive, seconds ``>= 0``.
        g: minimum gap between consecutive messages at one port, seconds ``>= 0``.
        G: seconds per byte after the first ``>= 0`` (1 / bandwidth).

    Raises:
        ValueError: a parameter is negative or not finite.
        TypeError: a parameter is not a number.
    """

    __slots__ = ("L", "o", "g", "G")
    _fields = ("L", "o", "g", "G")
    L: float
    o: float
    g: float
    G: float

    def __init__(self, L: float, o: float, g: float, G: float) -> None:  # noqa: N803 (LogGP names)
        self._set("L", _number("LogGP", "L", L, "seconds, e.g. L=1e-06 for 1 us"))
        self._set("o", _number("LogGP", "o", o, "seconds, e.g. o=1e-07 for 100 ns"))
        self._set("g", _number("LogGP", "g", g, "seconds, e.g. g=2e-07 for 200 ns"))
        self._set("G", _number("LogGP", "G", G, "seconds per byte, e.g. G=1e-10 for 10 GB/s"))

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Return ports with every send and receive port idle."""
        return _native(_LogGPPorts(self, _check_world_size(self, world_size)))

    def lookahead(self) -> float:
        """``L + 2*o``: the delay of the smallest message."""
        return self.L + 2.0 * self.o


# ---- Hierarchical and Jitter (models made of models) ----


class _HierarchicalPorts(_BoundPorts):
    __slots__ = ("zero", "ordered", "_ranks_per_node", "_intra", "_inter", "intra", "inter")

    def __init__(self, model: Hierarchical, world_size: int, rng: random.Random) -> None:
        super().__init__(model, world_size)
        self.intra = model.intra.bind(world_size, rng)
        self.inter = model.inter.bind(world_size, rng)
        self.zero = self.intra.zero and self.inter.zero
        self.ordered = self.intra.ordered or self.inter.ordered
        self._ranks_per_node = model.ranks_per_node
        self._intra = self.intra.transfer
        self._inter = self.inter.transfer

    def grow(self, world_size: int) -> None:
        super().grow(world_size)
        self.intra.grow(world_size)
        self.inter.grow(world_size)

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        per_node = self._ranks_per_node
        if src // per_node == dst // per_node:
            return self._intra(src, dst, nbytes, t)
        return self._inter(src, dst, nbytes, t)

    def send_side(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        per_node = self._ranks_per_node
        ports = self.intra if src // per_node == dst // per_node else self.inter
        return ports.send_side(src, dst, nbytes, t)

    def recv_side(self, src: int, dst: int, nbytes: int, wire: float) -> float:
        per_node = self._ranks_per_node
        ports = self.intra if src // per_node == dst // per_node else self.inter
        return ports.recv_side(src, dst, nbytes, wire)


class Hierarchical(_Model):
    """One model inside a node, another between nodes.

    World rank ``r`` lives on node ``r // ranks_per_node``. A message between
    two ranks of one node is charged to ``intra``'s ports, any other to
    ``inter``'s. Each submodel is bound once per run, so a rank has separate
    intra-node and inter-node ports (like shared memory beside a NIC), and
    contention is counted within each network. Reductions cost what ``intra``
    says.

    Args:
        intra: model for messages within a node.
        inter: model for messages between nodes.
        ranks_per_node: ranks per node, an int ``>= 1``.

    Raises:
        TypeError: ``intra``/``inter`` is not a LatencyModel, or ``ranks_per_node`` not an int.
        ValueError: ``ranks_per_node < 1``.
    """

    __slots__ = ("intra", "inter", "ranks_per_node")
    _fields = ("intra", "inter", "ranks_per_node")
    intra: LatencyModel
    inter: LatencyModel
    ranks_per_node: int

    def __init__(self, intra: LatencyModel, inter: LatencyModel, ranks_per_node: int) -> None:
        self._set("intra", _check_model("Hierarchical", "intra", intra))
        self._set("inter", _check_model("Hierarchical", "inter", inter))
        if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int):
            raise TypeError(
                f"Hierarchical(ranks_per_node={ranks_per_node!r}): ranks_per_node must be an int, "
                f"got {type(ranks_per_node).__name__}; pass e.g. ranks_per_node=8"
            )
        if ranks_per_node < 1:
            raise ValueError(
                f"Hierarchical(ranks_per_node={ranks_per_node!r}): ranks_per_node must be >= 1; "
                f"pass e.g. ranks_per_node=8"
            )
        self._set("ranks_per_node", ranks_per_node)

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Bind ``intra`` and ``inter`` once each (in that order) and route messages by node."""
        return _HierarchicalPorts(self, _check_world_size(self, world_size), rng)

    def lookahead(self) -> float:
        """The smaller of the two models' lookaheads (a block of ranks need not be a node)."""
        return min(self.intra.lookahead(), self.inter.lookahead())

    def reduce_time(self, nbytes: int) -> float:
        """Return ``intra.reduce_time(nbytes)``: reductions run on a node."""
        return self.intra.reduce_time(nbytes)

    @property
    def free_reductions(self) -> bool:
        """As ``intra``'s."""
        return self.intra.free_reductions

    def placement(self) -> Placement:
        """``ranks_per_node`` ranks on each node."""
        return Placement(self.ranks_per_node)


_M64: Final = (1 << 64) - 1
_GOLDEN: Final = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    """splitmix64's finalizer: a 64-bit integer to a well-mixed 64-bit integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _unit(key: int, src: int, dst: int, seq: int) -> float:
    """Return a number uniform in [0, 1) that is a pure function of its arguments."""
    z = _mix((key ^ ((src << 32) ^ dst)) & _M64)
    z = _mix((z + (seq + 1) * _GOLDEN) & _M64)
    return (z >> 11) * 1.1102230246251565e-16  # 53 bits, times 2**-53


class _JitterPorts(_BoundPorts):
    __slots__ = ("zero", "inner", "_send_side", "_recv_side", "_rel", "_key", "_sent")

    def __init__(self, model: Jitter, world_size: int, rng: random.Random) -> None:
        super().__init__(model, world_size)
        self._key = rng.getrandbits(64)  # the seed's share of every message's noise
        self.inner = model.model.bind(world_size, rng)
        self.zero = self.inner.zero
        self._send_side = self.inner.send_side
        self._recv_side = self.inner.recv_side
        self._rel = model.rel
        self._sent = [0] * world_size  # messages each rank has sent: their sequence numbers

    def grow(self, world_size: int) -> None:
        super().grow(world_size)
        self.inner.grow(world_size)
        self._sent.extend([0] * (world_size - len(self._sent)))

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        depart, wire = self.send_side(src, dst, nbytes, t)
        return depart, self._recv_side(src, dst, nbytes, wire)

    def send_side(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        depart, wire = self._send_side(src, dst, nbytes, t)
        seq = self._sent[src]
        self._sent[src] = seq + 1
        # u = 2*unit - 1 is uniform in [-1, 1): a pure function of (seed, src, dst, seq)
        wire = t + (wire - t) * (1.0 + self._rel * (2.0 * _unit(self._key, src, dst, seq) - 1.0))
        if wire < t:
            wire = t
        return depart, wire

    def recv_side(self, src: int, dst: int, nbytes: int, wire: float) -> float:
        return self._recv_side(src, dst, nbytes, wire)


class Jitter(_Model):
    """Multiplicative noise on another model's delivery delay, drawn from the run's seed.

    For the message number ``k`` that rank ``s`` sends (counted from 0 in the
    order its send port takes them), posted to ``d`` at time ``t``::

        depart, wire = model's send side            # wire: when it reaches d's port
        u      = uniform in [-1, 1)                 # a hash of (seed, s, d, k)
        wire   = max(t, t + (wire - t) * (1 + rel*u))
        arrive = model's receive side from wire     # d's port contention, if any

    The noise is a pure function of the seed and the message, so it is the
    same on every transport and whatever order simultaneous events run in;
    the receive port takes messages in the order their noisy ``wire`` times
    reach it, so noise can reorder messages posted at one instant. ``depart``
    and the send port are left as they were. Reductions cost what ``model``
    says, without noise.

    Args:
        model: the model to perturb.
        rel: relative amplitude ``>= 0``; delays vary within ``±rel`` of the inner delay.

    Raises:
        TypeError: ``model`` is not a LatencyModel or ``rel`` not a number.
        ValueError: ``rel`` is negative or not finite.
    """

    __slots__ = ("model", "rel")
    _fields = ("model", "rel")
    model: LatencyModel
    rel: float

    def __init__(self, model: LatencyModel, rel: float = 0.1) -> None:
        self._set("model", _check_model("Jitter", "model", model))
        self._set("rel", _number("Jitter", "rel", rel, "a fraction, e.g. rel=0.1 for ±10%"))

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Draw the noise's key from ``rng``, then bind ``model`` with the same ``rng``."""
        return _JitterPorts(self, _check_world_size(self, world_size), rng)

    def lookahead(self) -> float:
        """The wrapped model's, shrunk by ``rel`` (0 when ``rel >= 1``)."""
        return max(0.0, self.model.lookahead() * (1.0 - self.rel))

    def reduce_time(self, nbytes: int) -> float:
        """Return ``model.reduce_time(nbytes)`` (reductions are not jittered)."""
        return self.model.reduce_time(nbytes)

    @property
    def free_reductions(self) -> bool:
        """As the wrapped model's."""
        return self.model.free_reductions

    def placement(self) -> Placement | None:
        """The wrapped model's placement of ranks on nodes; routes and the rest stay the wrapped
        model's own (collectives that follow a platform's links do not see through the noise)."""
        inner = self.model.placement()
        return None if inner is None else Placement(inner.ranks_per_node, inner.count)


# ---- parse: models from command-line specs ----

# Scales are Decimal so that "5us" is exactly float("5e-6"), with one rounding.
_TIME_SCALE: Final[Mapping[str, Decimal]] = MappingProxyType(
    {
        "s": Decimal(1),
        "ms": Decimal("1e-3"),
        "us": Decimal("1e-6"),
        "\u00b5s": Decimal("1e-6"),  # micro sign
        "\u03bcs": Decimal("1e-6"),  # Greek mu
        "ns": Decimal("1e-9"),
    }
)
_RATE_SCALE: Final[Mapping[str, Decimal]] = MappingProxyType(
    {
        "B/s": Decimal(1),
        "KB/s": Decimal("1e3"),
        "kB/s": Decimal("1e3"),
        "MB/s": Decimal("1e6"),
        "GB/s": Decimal("1e9"),
        "TB/s": Decimal("1e12"),
        "KiB/s": Decimal(2**10),
        "MiB/s": Decimal(2**20),
        "GiB/s": Decimal(2**30),
        "TiB/s": Decimal(2**40),
    }
)

TIME_UNITS: Final[Mapping[str, float]] = MappingProxyType(
    {unit: float(scale) for unit, scale in _TIME_SCALE.items()}
)
"""Seconds per unit for times in :func:`parse` (``us``, ``µs`` and ``μs`` are the same)."""

BANDWIDTH_UNITS: Final[Mapping[str, float]] = MappingProxyType(
    {unit: float(scale) for unit, scale in _RATE_SCALE.items()}
)
"""Bytes per second per unit for bandwidths in :func:`parse` (KB = 1e3 bytes, KiB = 1024)."""

FORMS: Final = (
    "zero, constant:TIME, alphabeta:ALPHA,BETA[,GAMMA], loggp:L,o,g,G, "
    "hierarchical:RANKS_PER_NODE;INTRA;INTER, jitter:REL;MODEL "
    "(times take s, ms, us or ns; BETA, GAMMA and G take a bandwidth in B/s, KB/s, MB/s, GB/s, "
    "KiB/s, MiB/s or GiB/s, or seconds per byte; a plain number is seconds or seconds per byte; "
    "INTRA, INTER and MODEL are specs themselves)"
)
"""The spec forms :func:`parse` accepts, as quoted in its error messages."""

_QUANTITY: Final = re.compile(
    r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"  # a decimal literal
    r"\s*(?P<unit>\S*)"
)

_TIME: Final = "time"
_TIME_HINT: Final = "write a number with a unit s, ms, us or ns (none means s)"
_PER_BYTE_HINT: Final = (
    "write a bandwidth in B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s or TiB/s, "
    "or seconds per byte"
)
_PER_BYTE: Final = "per_byte"

# name -> (parameter names, kinds, how many are required, example, constructor)
_Builder = Callable[..., LatencyModel]
_SPECS: Final[Mapping[str, tuple[tuple[str, ...], tuple[str, ...], int, str, _Builder]]] = (
    MappingProxyType(
        {
            "zero": ((), (), 0, "zero", Zero),
            "constant": (("seconds",), (_TIME,), 1, "constant:5us", Constant),
            "alphabeta": (
                ("alpha", "beta", "gamma"),
                (_TIME, _PER_BYTE, _PER_BYTE),
                2,
                "alphabeta:1us,10GB/s",
                AlphaBeta,
            ),
            "loggp": (
                ("L", "o", "g", "G"),
                (_TIME, _TIME, _TIME, _PER_BYTE),
                4,
                "loggp:1us,100ns,200ns,10GB/s",
                LogGP,
            ),
        }
    )
)


_COMPOSITES: Final = {"hierarchical": "hierarchical:8;alphabeta:200ns,100GB/s;alphabeta:2us,25GB/s",
                      "jitter": "jitter:0.1;alphabeta:1us,10GB/s"}
"""The models made of other models, with an example spec of each."""


def _composite(spec: str, name: str, rest: str) -> LatencyModel:
    """``hierarchical:N;INTRA;INTER`` or ``jitter:REL;MODEL``: a number, then specs after ``;``."""
    example = _COMPOSITES[name]
    want = 3 if name == "hierarchical" else 2
    parts = [part.strip() for part in rest.split(";", want - 1)]  # the last may be composite too
    if len(parts) != want:
        what = "ranks per node, an intra-node and an inter-node spec" if want == 3 else \
            "a relative amplitude and the spec of the model it perturbs"
        _parse_error(spec, f"{name} takes {want} parts separated by ';' ({what}), got "
                     f"{len(parts)}", f"write it like {example!r}")
    inner = [parse(part) for part in parts[1:]]
    try:
        if name == "hierarchical":
            return Hierarchical(inner[0], inner[1], ranks_per_node=int(parts[0]))
        return Jitter(inner[0], rel=float(parts[0]))
    except (TypeError, ValueError) as exc:
        _parse_error(spec, f"cannot read {parts[0]!r} ({exc})", f"write it like {example!r}")


def _parse_error(spec: str, problem: str, fix: str) -> NoReturn:
    raise ValueError(f"parse({spec!r}): {problem}; {fix}") from None


def _quantity(spec: str, name: str, kind: str, text: str, example: str) -> float:
    """Read one value: a time in seconds, or a per-byte cost in seconds per byte."""
    match = _QUANTITY.fullmatch(text)
    units = _RATE_SCALE if kind == _PER_BYTE else {}
    unit = match["unit"] if match else ""
    if match is None or not (unit == "" or unit in _TIME_SCALE or unit in units):
        what = "a time" if kind == _TIME else "a bandwidth or seconds per byte"
        hint = _TIME_HINT if kind == _TIME else _PER_BYTE_HINT
        _parse_error(
            spec, f"cannot read {name} from {text!r} as {what}", f"{hint}, e.g. {example!r}"
        )
    number = Decimal(match["num"])  # the regex lets only decimal literals through
    if number < 0:
        _parse_error(spec, f"{name} must be >= 0, got {text!r}", f"write it like {example!r}")
    if unit in units:
        rate = number * units[unit]
        if rate == 0:
            problem = f"{name} bandwidth must be > 0, got {text!r}"
            _parse_error(spec, problem, f"write it like {example!r}")
        value = float(1 / rate)
    else:
        value = float(number * _TIME_SCALE.get(unit, Decimal(1)))
    if not math.isfinite(value):
        _parse_error(spec, f"{name} is out of range, got {text!r}", f"write it like {example!r}")
    return value


def parse(spec: str) -> LatencyModel:
    """Build a latency model from a command-line spec.

    Accepted forms (model names are case-insensitive)::

        zero                      Zero()
        constant:5us              Constant(5e-06)
        alphabeta:1us,10GB/s      AlphaBeta(alpha=1e-06, beta=1e-10)
        alphabeta:1e-6,1e-10      the same, in seconds and seconds per byte
        alphabeta:1us,10GB/s,2GB/s  with gamma = 1 / (2 GB/s) = 5e-10 s/byte
        loggp:1us,100ns,200ns,10GB/s  LogGP(L=1e-06, o=1e-07, g=2e-07, G=1e-10)
        hierarchical:8;alphabeta:200ns,100GB/s;alphabeta:2us,25GB/s
                                  Hierarchical(AlphaBeta(...), AlphaBeta(...), ranks_per_node=8)
        jitter:0.1;alphabeta:1us,10GB/s  Jitter(AlphaBeta(...), rel=0.1)

    The two composite forms take other specs after ``;`` (quote them in a
    shell); the last of them may be a composite spec itself.

    Times take ``s``, ``ms``, ``us`` (or ``µs``) or ``ns``; a plain number is
    seconds. Per-byte costs (beta, gamma, G) take a bandwidth in ``B/s``,
    ``KB/s``, ``MB/s``, ``GB/s``, ``TB/s`` (powers of 1000) or ``KiB/s``,
    ``MiB/s``, ``GiB/s``, ``TiB/s`` (powers of 1024), which becomes
    ``1 / bandwidth``; a plain number or a time is seconds per byte. Unit
    scaling is done in decimal, so ``5us`` is exactly ``5e-06``.

    Args:
        spec: the spec string, e.g. ``"alphabeta:1us,10GB/s"``.

    Returns:
        The model.

    Raises:
        ValueError: an unknown model (the message lists the accepted forms), the
            wrong number of values, or a value that is unreadable, negative, out of
            range or a zero bandwidth (the message shows what to write).
        TypeError: ``spec`` is not a string.
    """
    if not isinstance(spec, str):
        raise TypeError(
            f"parse({spec!r}): spec must be a str, got {type(spec).__name__}; "
            f"pass e.g. 'alphabeta:1us,10GB/s', or a LatencyModel to run() directly"
        )
    head, _, rest = spec.strip().partition(":")
    name = head.strip().lower()
    if name in _COMPOSITES:
        return _composite(spec, name, rest)
    if name not in _SPECS:
        _parse_error(spec, f"unknown latency model {head.strip()!r}", f"accepted forms: {FORMS}")
    params, kinds, required, example, build = _SPECS[name]
    texts = [text.strip() for text in rest.split(",")] if rest.strip() else []
    if not required <= len(texts) <= len(params):
        count = str(required) if required == len(params) else f"{required} or {len(params)}"
        noun = "value" if count == "1" else "values"
        listed = f" ({', '.join(params)})" if params else ""
        problem = f"{name} takes {count} {noun}{listed}, got {len(texts)}"
        _parse_error(spec, problem, f"write it like {example!r}")
    values = [_quantity(spec, p, k, text, example) for p, k, text in zip(params, kinds, texts)]
    return build(*values)
