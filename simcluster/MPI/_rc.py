"""``mpi4py.rc``: the runtime options mpi4py reads when ``MPI`` is imported, and how a rank reads them.

Options are read per rank, when the rank first asks (``Query_thread``,
``Is_initialized``, a communicator's default error handler): a simulated run
imports ``MPI`` once for every rank, where each MPI process imports it once.
Rule 1: ``MPI4PY_RC_<NAME>`` in the environment wins over ``rc``, as in
mpi4py; an unexpected value warns (``RuntimeWarning``) and the default holds.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ._constants import THREAD_FUNNELED, THREAD_MULTIPLE, THREAD_SERIALIZED, THREAD_SINGLE


class Rc:
    """mpi4py's runtime settings (``mpi4py.rc``), class attributes as in mpi4py.

    Set before ``from mpi4py import MPI`` (or through ``MPI4PY_RC_<NAME>`` in the environment,
    which wins, as in mpi4py), they are read when a rank first asks: ``initialize`` (whether
    ``Is_initialized`` is True before ``Init``), ``threads`` and ``thread_level``
    (``Query_thread``), ``errors`` (the communicators' default error handler). ``finalize``,
    ``fast_reduce``, ``recv_mprobe`` and ``irecv_bufsz`` are kept and checked; they change no
    simulated cost. An unknown name is a ``TypeError``, an unexpected value a ``RuntimeWarning``
    (and the default is used), as in mpi4py.
    """

    initialize = True
    threads = True
    thread_level = "multiple"
    finalize: bool | None = None
    fast_reduce = True
    recv_mprobe = True
    irecv_bufsz = 32768
    errors = "exception"

    def __init__(self, **kwargs: Any) -> None:
        self(**kwargs)

    def __call__(self, **kwargs: Any) -> None:
        for name in kwargs:
            if not hasattr(self, name):
                raise TypeError(f"mpi4py.rc: unexpected argument {name!r}; valid: {_valid_names()}")
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if not hasattr(self, name):
            raise TypeError(f"mpi4py.rc: object has no attribute {name!r}; valid: {_valid_names()}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return "<mpi4py.rc>"


def _valid_names() -> str:
    return ", ".join(name for name in vars(Rc) if not name.startswith("_"))


LEVELS = {"single": THREAD_SINGLE, "funneled": THREAD_FUNNELED,
           "serialized": THREAD_SERIALIZED, "multiple": THREAD_MULTIPLE}
_ERRORS = ("exception", "default", "abort", "fatal")
_TRUE = ("true", "yes", "on", "y", "1")
_FALSE = ("false", "no", "off", "n", "0")


def _valid(name: str, value: Any) -> Any:
    """``value`` as option ``name`` takes it, or raise ValueError."""
    if isinstance(value, str) and name != "thread_level" and name != "errors":
        word = value.strip().lower()
        if name == "irecv_bufsz":
            value = int(word)
        elif name == "finalize" and word in ("none", ""):
            value = None
        elif word in _TRUE or word in _FALSE:
            value = word in _TRUE
    if name == "thread_level":
        word = str(value).lower().removeprefix("mpi_thread_")
        if word not in LEVELS:
            raise ValueError(value)
        return word
    if name == "errors":
        if value not in _ERRORS:
            raise ValueError(value)
        return value
    if name == "irecv_bufsz":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(value)
        return value
    if name == "finalize" and value is None:
        return None
    if not isinstance(value, bool):
        raise ValueError(value)
    return value


def rc_option(name: str) -> Any:
    """Option ``name`` of ``mpi4py.rc`` as MPI's import reads it: the environment's
    ``MPI4PY_RC_<NAME>`` first, then ``rc``; an unexpected value warns and gives the default."""
    env = os.environ.get(f"MPI4PY_RC_{name.upper()}")
    value = getattr(rc, name) if env is None else env
    try:
        return _valid(name, value)
    except ValueError:
        warnings.warn(f"mpi4py.rc.{name}: unexpected value {value!r}", RuntimeWarning, stacklevel=3)
        return getattr(Rc, name)


rc = Rc()
