"""MPI sessions: ``Session.Init``, process sets, ``Create_group`` and the session's own handlers.

A simulated run has the two process sets MPI requires: ``mpi://WORLD`` (every
rank of the run) and ``mpi://SELF`` (the calling rank), as MPICH lists them.
``Session.Init`` is local and costs no virtual time; ``Create_group(name)``
gives the set's group, from which ``Intracomm.Create_from_group`` makes a
communicator (that call is collective, as everywhere).

Each session keeps its hints (``Get_info``: MPICH's keys), its error handler
(``mpi4py.rc.errors``'s, ``ERRORS_RETURN`` by default, as mpi4py sets it) and a buffer for buffered
sends (``Attach_buffer``; sends still use the rank's buffer, as MPICH's
sessions share the process's). ``Finalize`` makes the handle ``SESSION_NULL``.

Rule 1: a null or finalized session raises ``ERR_SESSION``; a pset that does not
exist, or a pset number out of range, raises ``ERR_ARG`` (MPICH's classes).
"""

from __future__ import annotations

from typing import Any

from . import _errhandler
from ._constants import ERR_ARG, ERR_SESSION
from ._errhandler import ERRORS_ABORT, ERRORS_ARE_FATAL, Errhandler
from ._errors import error
from ._group import Group
from ._info import INFO_NULL, Info
from ._requests import Request
from ._state import current

PSETS = ("mpi://WORLD", "mpi://SELF")
"""The process sets of a simulated run, in the order MPICH numbers them."""

_LEVELS = ("MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
           "MPI_THREAD_MULTIPLE")


class _SessionState:
    """What one initialised session holds: shared by every handle on it."""

    __slots__ = ("rank", "size", "hints", "errhandler", "buffer", "__weakref__")

    def __init__(self, rank: int, size: int, hints: dict[str, str], errhandler: Errhandler) -> None:
        self.rank, self.size, self.hints, self.errhandler = rank, size, hints, errhandler
        self.buffer: Any = None

    def __repr__(self) -> str:
        return f"<session of rank {self.rank}>"


class Session:
    """An MPI session (mpi4py's ``MPI.Session``): a handle on the process sets of the run."""

    __slots__ = ("_st", "__weakref__")

    _st: _SessionState | None

    def __new__(cls, session: Session | None = None) -> Session:
        if session is not None and not isinstance(session, Session):
            raise TypeError(f"MPI.Session({session!r}): expected an MPI.Session, got "
                            f"{type(session).__name__}")
        self = object.__new__(cls)
        self._st = None if session is None else session._st
        return self

    @classmethod
    def Init(cls, info: Info = INFO_NULL, errhandler: Errhandler | None = None) -> Session:
        """Start a session on the calling rank (local: no message, no virtual time)."""
        world = current().world
        hints = {"thread_level": _LEVELS[_thread_level(info)], "strict_finalize": "0",
                 "mpi_memory_alloc_kinds": "mpi,system"}
        handler = _errhandler.default()  # mpi4py.rc.errors's, as for communicators
        if errhandler is not None:
            errhandler._check_settable(f"Session.Init(errhandler={errhandler!r})", world.rank)
            handler = errhandler
        self = object.__new__(cls)
        self._st = _SessionState(world.rank, world.size, hints, Errhandler(handler))
        return self

    def _live(self, call: str) -> _SessionState:
        if self._st is None:
            raise error(ERR_SESSION, None, f"Session.{call}", "the session is SESSION_NULL or "
                        "was finalized", "use a session from MPI.Session.Init()")
        return self._st

    def Finalize(self) -> None:
        """End the session: this handle becomes ``SESSION_NULL``."""
        self._live("Finalize()")
        self._st = None

    def free(self) -> None:
        """Finalize the session when it is not null (never raises)."""
        if self._st is not None:
            self.Finalize()

    # ---- process sets ----

    def Get_num_psets(self, info: Info = INFO_NULL) -> int:
        """Return the number of process sets: 2 (``mpi://WORLD`` and ``mpi://SELF``)."""
        self._live("Get_num_psets()")
        return len(PSETS)

    def Get_nth_pset(self, n: int, info: Info = INFO_NULL) -> str:
        """Return the name of process set ``n`` (0: ``mpi://WORLD``, 1: ``mpi://SELF``)."""
        st = self._live(f"Get_nth_pset({n!r})")
        if not 0 <= n < len(PSETS):
            raise error(ERR_ARG, st.rank, f"Session.Get_nth_pset({n!r})", "invalid pset number",
                        f"pass 0 <= n < Get_num_psets() ({len(PSETS)})")
        return PSETS[n]

    def _pset(self, name: str, call: str) -> tuple[_SessionState, list[int]]:
        st = self._live(call)
        key = str(name).lower()
        if key == "mpi://world":
            return st, list(range(st.size))
        if key == "mpi://self":
            return st, [st.rank]
        raise error(ERR_ARG, st.rank, f"Session.{call}", "invalid pset name",
                    f"use one of {', '.join(PSETS)}")

    def Get_pset_info(self, pset_name: str) -> Info:
        """Return the hints of a process set: its ``mpi_size``."""
        _, ranks = self._pset(pset_name, f"Get_pset_info({pset_name!r})")
        return Info.Create({"mpi_size": str(len(ranks))})

    def Create_group(self, pset_name: str) -> Group:
        """Return the group of process set ``pset_name`` (local)."""
        st, ranks = self._pset(pset_name, f"Create_group({pset_name!r})")
        return Group._of(ranks, st.rank)  # world ranks, and the caller's

    def Get_info(self) -> Info:
        """Return (a new copy of) the session's hints, MPICH's keys."""
        return Info.Create(self._live("Get_info()").hints)

    # ---- error handlers ----

    def Get_errhandler(self) -> Errhandler:
        """Return (a new handle on) the session's error handler."""
        return Errhandler(self._live("Get_errhandler()").errhandler)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the session's error handler."""
        st = self._live(f"Set_errhandler({errhandler!r})")
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"rank {st.rank}: Session.Set_errhandler({errhandler!r}): expected "
                            "an MPI.Errhandler")
        errhandler._check_settable(f"Session.Set_errhandler({errhandler!r})", st.rank)
        st.errhandler = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Run the session's error handler for ``errorcode`` (fatal ones end the run)."""
        handler = self._live(f"Call_errhandler({errorcode!r})").errhandler
        if handler == ERRORS_ARE_FATAL or handler == ERRORS_ABORT:
            from ._comm import COMM_WORLD

            COMM_WORLD.Abort(int(errorcode))
        handler._invoke(self, int(errorcode))

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """Return an error handler that calls ``errhandler_fn(session, errorcode)``."""
        return Errhandler._user("Session", errhandler_fn)

    # ---- buffered sends ----

    def Attach_buffer(self, buf: Any) -> None:
        """Attach a buffer for buffered sends in this session."""
        st = self._live("Attach_buffer()")
        from ._env import Attach_buffer

        Attach_buffer(buf)
        st.buffer = buf

    def Detach_buffer(self) -> Any:
        """Wait for buffered sends to leave; detach and return the session's buffer."""
        st = self._live("Detach_buffer()")
        from ._env import Detach_buffer

        Detach_buffer()
        buf, st.buffer = st.buffer, None
        return buf

    def Flush_buffer(self) -> None:
        """Wait until every buffered send has left."""
        self._live("Flush_buffer()")
        from ._env import Flush_buffer

        Flush_buffer()

    def Iflush_buffer(self) -> Request:
        """Flush the buffered sends and return a completed request."""
        self._live("Iflush_buffer()")
        from ._env import Iflush_buffer

        return Iflush_buffer()

    # ---- object model ----

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Session) and other._st is self._st

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __bool__(self) -> bool:
        return self._st is not None

    def __repr__(self) -> str:
        if self._st is None:
            return "<MPI.Session SESSION_NULL>"
        return f"<MPI.Session of rank {self._st.rank}: psets {', '.join(PSETS)}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self is SESSION_NULL:
            return "SESSION_NULL"
        if self._st is None:
            return (type(self), ())
        raise ValueError(f"cannot pickle {self!r}: a session belongs to the rank that started it; "
                         "call MPI.Session.Init() on every rank")


def _thread_level(info: Info) -> int:
    """The level ``info`` asks for, else the rank's (MPICH reports the process's level)."""
    asked = None if not isinstance(info, Info) or not info else info.Get("thread_level")
    if asked in _LEVELS:
        return _LEVELS.index(asked)
    from ._env import Query_thread

    return Query_thread()


SESSION_NULL = Session()
