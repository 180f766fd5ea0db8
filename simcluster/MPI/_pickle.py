"""The lowercase methods' codec: ``MPI.pickle``, as in mpi4py (``pickle`` at its highest protocol).

A Python object travels as the bytes ``MPI.pickle.dumps`` makes, carried as a
``uint8`` array so that the message counts exactly those bytes on every
transport (arrays count ``nbytes``; headers are free), and
``Status.Get_count()`` after ``recv`` is the pickle's length, as with mpi4py.
``MPI.pickle.__init__(dumps, loads, protocol)`` swaps the codec (dill,
cloudpickle) the way mpi4py allows.

Pickles run code when loaded, so the tcp transport, whose peers may be other
hosts, accepts the lowercase methods only in runs made with
``serializer="pickle"`` (:func:`check_transport`).
"""

from __future__ import annotations

import pickle as _pickle
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..comm import Comm as ScComm
from ._memory import buffer as _buffer
from ..engine.assembly import current_task


_THRESHOLD = 262144
"""mpi4py's default out-of-band threshold, in bytes (``MPI.Pickle().THRESHOLD``)."""


class Pickle:
    """How lowercase methods turn objects into bytes and back (mpi4py's ``MPI.Pickle``)."""

    def __init__(self, dumps: Callable[..., bytes] | None = None,
                 loads: Callable[..., Any] | None = None, protocol: int | None = None,
                 threshold: int | None = None) -> None:
        self._dumps = _pickle.dumps if dumps is None else dumps
        self._loads = _pickle.loads if loads is None else loads
        self._protocol: int | None = _pickle.HIGHEST_PROTOCOL if protocol is None and dumps is None \
            else protocol
        self._threshold = _THRESHOLD if threshold is None else threshold

    @property
    def PROTOCOL(self) -> int | None:  # noqa: N802 - mpi4py's name
        """The pickle protocol ``dumps`` uses (None: the ``dumps`` function's default)."""
        return self._protocol

    @PROTOCOL.setter
    def PROTOCOL(self, value: int | None) -> None:  # noqa: N802
        self._protocol = _pickle.HIGHEST_PROTOCOL if value is None and self._dumps is _pickle.dumps \
            else value

    @property
    def THRESHOLD(self) -> int:  # noqa: N802
        """The size in bytes from which mpi4py would send pickled buffers out of band."""
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, value: int | None) -> None:  # noqa: N802
        self._threshold = _THRESHOLD if value is None else value

    def dumps(self, obj: Any) -> bytes:
        """Return ``obj`` as bytes."""
        if self.PROTOCOL is None:
            return self._dumps(obj)
        return self._dumps(obj, self.PROTOCOL)

    def loads(self, data: Any) -> Any:
        """Return the object ``data`` holds."""
        return self._loads(data)

    def dumps_oob(self, obj: Any) -> tuple[bytes, list[Any]]:
        """Return ``obj`` pickled with protocol 5 or later, and its large buffers out of band."""
        # buffers of THRESHOLD bytes or more (numpy arrays' memory) come back as MPI.buffer objects,
        # not copied into the pickle, as mpi4py's do
        protocol = max(_pickle.HIGHEST_PROTOCOL if self.PROTOCOL is None else self.PROTOCOL, 5)
        threshold, buffers = self.THRESHOLD, []

        def out_of_band(view: _pickle.PickleBuffer) -> bool:
            memory = _buffer.frombuffer(view)
            if len(memory) >= threshold:
                buffers.append(memory)
                return False
            return True
        return self._dumps(obj, protocol, buffer_callback=out_of_band), buffers

    def loads_oob(self, data: Any, buffers: Any) -> Any:
        """Return the object ``data`` and its out-of-band ``buffers`` hold."""
        return self._loads(data, buffers=buffers)

    def __repr__(self) -> str:
        return f"<MPI.Pickle protocol={self.PROTOCOL}>"


class _EachRank(Pickle):
    """``MPI.pickle``: each rank's own codec, as each MPI process has its own.

    ``MPI.pickle.__init__(dumps, loads)`` (how mpi4py swaps in dill or json)
    swaps the calling rank's codec only; outside any rank, the process's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Pickle.__init__(_own(), *args, **kwargs)

    @property
    def PROTOCOL(self) -> int | None:  # noqa: N802 - mpi4py's name
        return _own().PROTOCOL

    @PROTOCOL.setter
    def PROTOCOL(self, value: int | None) -> None:  # noqa: N802
        _own().PROTOCOL = value

    @property
    def THRESHOLD(self) -> int:  # noqa: N802
        return _own().THRESHOLD

    @THRESHOLD.setter
    def THRESHOLD(self, value: int | None) -> None:  # noqa: N802
        _own().THRESHOLD = value

    def dumps(self, obj: Any) -> bytes:
        return _own().dumps(obj)

    def loads(self, data: Any) -> Any:
        return _own().loads(data)

    def dumps_oob(self, obj: Any) -> tuple[bytes, list[Any]]:
        return _own().dumps_oob(obj)

    def loads_oob(self, data: Any, buffers: Any) -> Any:
        return _own().loads_oob(data, buffers)


_codecs: weakref.WeakKeyDictionary[Any, Pickle] = weakref.WeakKeyDictionary()
_process_codec = Pickle()


def _own() -> Pickle:
    """The calling rank's codec (keyed by its world communicator), made on first use."""
    task = current_task()
    world = None if task is None else task.comm
    if world is None:
        return _process_codec
    codec = _codecs.get(world)
    if codec is None:
        codec = _codecs[world] = Pickle()
    return codec


pickle: Pickle = _EachRank.__new__(_EachRank)


def dumps(obj: Any) -> np.ndarray[Any, Any]:
    """Return ``obj`` pickled, as the uint8 array a message carries."""
    return np.frombuffer(pickle.dumps(obj), dtype=np.uint8)


def loads(payload: Any) -> Any:
    """Return the object a received uint8 array holds."""
    if isinstance(payload, np.ndarray):
        return pickle.loads(np.ascontiguousarray(payload).data.cast("B"))
    return pickle.loads(payload)


def check_transport(sc: ScComm, call: Callable[[], str]) -> None:
    """Raise unless this run's transport may carry pickles (tcp needs ``serializer="pickle"``)."""
    if sc.transport == "tcp" and sc.serializer != "pickle":
        raise TypeError(f"rank {sc.rank}: {call()}: the lowercase methods send pickled objects, and "
                        "the tcp transport accepts pickles only in runs made with "
                        "serializer=\"pickle\"; pass sc.run(..., serializer=\"pickle\") (peers you "
                        "trust only: unpickling runs their code), or use the uppercase buffer "
                        "methods (Send/Recv)")
