"""Port state of the built-in latency models: the charge every message pays, compiled.

``latency`` holds the models (immutable descriptions) and the public
``Ports`` interface, which users subclass; ``model.bind`` of a built-in
model makes one of these per run instead, and the engine calls its
``transfer`` once per message. This module is compiled with the engine
(``_build_manifest``), so when the run's ports are ``NativePorts`` that call
is a native one (``P2P.native_ports``); other ports are called as Python
objects. ``latency`` registers each of these classes as a virtual
subclass of ``Ports`` (``Ports.register``), so they are ``Ports`` to
everyone else.

A separate hierarchy rather than subclasses of ``Ports``: a compiled class
may not change the argument types of a method it overrides, nor could the
public ``Ports`` be compiled without its subclasses' signatures changing.
``nbytes`` is a float here because the analytic cost model
(``collectives._cost``) charges fractions of a payload, which a compiled
``int`` parameter would refuse; messages pass ints.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar, Final, Protocol


# What the ports read of their model (a ``latency`` model), declared here so that this module
# names nothing of ``latency``, which imports it
class _Model(Protocol):
    def describe(self) -> str: ...


class _ConstantModel(_Model, Protocol):
    @property
    def seconds(self) -> float: ...


class _AlphaBetaModel(_Model, Protocol):
    @property
    def alpha(self) -> float: ...

    @property
    def beta(self) -> float: ...


class _LogGPModel(_Model, Protocol):
    @property
    def L(self) -> float: ...  # noqa: N802 - LogGP's parameter names

    @property
    def o(self) -> float: ...

    @property
    def g(self) -> float: ...

    @property
    def G(self) -> float: ...  # noqa: N802

_IDLE: Final = -math.inf
"""Timer value of a port that has carried nothing yet."""


class NativePorts(ABC):
    """The compiled ports of a built-in model; see ``latency.Ports`` for the contract."""

    zero: ClassVar[bool] = False
    ordered: ClassVar[bool] = True
    platform: ClassVar[None] = None  # never a platform whose links flows share

    def __init__(self, model: _Model, world_size: int) -> None:
        self._model = model
        self._world_size = world_size

    @abstractmethod
    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        """Charge one message; return ``(depart, arrive)``."""

    def arrival(self, src: int, dst: int, nbytes: float, t: float) -> float:
        """``transfer(...)[1]``, which the engine asks of every message: no tuple to build."""
        return self.transfer(src, dst, nbytes, t)[1]

    def send_side(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        """The sender's half of ``transfer``: ``(depart, wire)``."""
        return self.transfer(src, dst, nbytes, t)

    def recv_side(self, src: int, dst: int, nbytes: float, wire: float) -> float:
        """The receiver's half of ``transfer``: the arrival of a message that left at ``wire``."""
        return wire

    def __repr__(self) -> str:
        return f"<ports of {self._model.describe()} world_size={self._world_size}>"

    def grow(self, world_size: int) -> None:
        """Room for ranks added during the run (``latency.Ports.grow``): their ports start idle."""
        self._world_size = world_size


class _ZeroPorts(NativePorts):
    zero: ClassVar[bool] = True
    ordered: ClassVar[bool] = False

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        return t, t


class _ConstantPorts(NativePorts):
    ordered: ClassVar[bool] = False  # no port state: each message is charged as it is posted

    def __init__(self, model: _ConstantModel, world_size: int) -> None:
        super().__init__(model, world_size)
        self._seconds = model.seconds

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        return t, t + self._seconds

    def arrival(self, src: int, dst: int, nbytes: float, t: float) -> float:
        return t + self._seconds


class _AlphaBetaPorts(NativePorts):
    def __init__(self, model: _AlphaBetaModel, world_size: int) -> None:
        super().__init__(model, world_size)
        self._alpha = model.alpha
        self._beta = model.beta
        self._send_free = [_IDLE] * world_size
        self._recv_free = [_IDLE] * world_size

    def grow(self, world_size: int) -> None:
        super().grow(world_size)
        more = world_size - len(self._send_free)
        self._send_free.extend([_IDLE] * more)
        self._recv_free.extend([_IDLE] * more)

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        arrive = self.arrival(src, dst, nbytes, t)
        return self._send_free[src], arrive

    def arrival(self, src: int, dst: int, nbytes: float, t: float) -> float:
        # send_side and recv_side in one body: this runs once per message of a run
        send_free = self._send_free
        start = send_free[src]
        if t > start:
            start = t
        busy = nbytes * self._beta
        send_free[src] = start + busy
        arrive = start + self._alpha + busy
        queued = self._recv_free[dst] + busy
        if queued > arrive:
            arrive = queued
        self._recv_free[dst] = arrive
        return arrive

    def send_side(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        send_free = self._send_free
        start = send_free[src]
        if t > start:
            start = t
        busy = nbytes * self._beta
        depart = send_free[src] = start + busy
        return depart, start + self._alpha + busy

    def recv_side(self, src: int, dst: int, nbytes: float, wire: float) -> float:
        arrive = wire
        queued = self._recv_free[dst] + nbytes * self._beta
        if queued > arrive:
            arrive = queued
        self._recv_free[dst] = arrive
        return arrive


class _LogGPPorts(NativePorts):
    def __init__(self, model: _LogGPModel, world_size: int) -> None:
        super().__init__(model, world_size)
        self._L, self._o, self._g, self._G = model.L, model.o, model.g, model.G
        self._send_free = [_IDLE] * world_size
        self._recv_free = [_IDLE] * world_size

    def grow(self, world_size: int) -> None:
        super().grow(world_size)
        more = world_size - len(self._send_free)
        self._send_free.extend([_IDLE] * more)
        self._recv_free.extend([_IDLE] * more)

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        depart, wire = self.send_side(src, dst, nbytes, t)
        return depart, self.recv_side(src, dst, nbytes, wire)

    def _busy(self, nbytes: float) -> float:
        inject = self._o + (nbytes - 1) * self._G if nbytes > 1 else self._o
        return inject if inject > self._g else self._g

    def send_side(self, src: int, dst: int, nbytes: float, t: float) -> tuple[float, float]:
        o = self._o
        send_free = self._send_free
        start = send_free[src]
        if t > start:
            start = t
        inject = o + (nbytes - 1) * self._G if nbytes > 1 else o
        send_free[src] = start + (inject if inject > self._g else self._g)
        depart = start + inject
        return depart, depart + self._L + o

    def recv_side(self, src: int, dst: int, nbytes: float, wire: float) -> float:
        arrive = wire
        queued = self._recv_free[dst] + self._busy(nbytes)
        if queued > arrive:
            arrive = queued
        self._recv_free[dst] = arrive
        return arrive
