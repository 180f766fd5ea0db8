"""One rank's side of an open MPI file, and the data path of ``MPI.File`` (see ``_file``).

``_Open`` is the file the ranks that opened it share (descriptor, access mode,
shared file pointer); ``_Handle`` is one rank's (private communicator, view,
own file pointer, hints, error handler). ``DataAccess`` holds every read and
write of ``MPI.File``: explicit offsets, the rank's own pointer, the shared
pointer, each independent, collective (``_all``, ``_ordered``), nonblocking
(``I...``) and split collective (``_begin``/``_end``). ``File`` adds opening,
closing, facts, views and pointers on top.

Rule 1: ``_access`` is the one place data move: it turns the buffer into its
packed bytes (``Datatype.Pack``'s) and the view into file runs, and moves them
with ``pread``/``pwrite`` without yielding to another rank.
Rule 2: time is charged after the I/O: an independent request its own bytes,
a collective one all ranks' bytes after the synchronisation (``_fileview``).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import arrays
from ._blocking import block
from ._buffers import message
from ._comm import Intracomm
from ._constants import (
    ERR_ACCESS, ERR_AMODE, ERR_ARG, ERR_BAD_FILE, ERR_FILE, ERR_FILE_EXISTS, ERR_IO, ERR_NO_SPACE,
    ERR_NO_SUCH_FILE, ERR_OTHER, ERR_READ_ONLY, ERR_TYPE, ERR_UNSUPPORTED_OPERATION, MODE_CREATE,
    MODE_EXCL, MODE_RDONLY, MODE_RDWR, MODE_SEQUENTIAL, MODE_WRONLY,
)
from ._datatypes import BYTE
from ._errhandler import ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler
from ._errors import _Raised, error
from ._fileview import FileSystem, View, file_system_of
from ._requests import Request, immediate
from ._state import current
from ._status import Status

# ---- the open file, shared by the ranks that opened it ----


class _Open:
    """One opened file: the descriptor, the access mode, the shared file pointer (in etypes)."""

    __slots__ = ("path", "fd", "amode", "shared", "attached", "closing")

    def __init__(self, path: str, fd: int, amode: int) -> None:
        self.path, self.fd, self.amode = path, fd, amode
        self.shared = 0
        self.attached = 0
        self.closing = 0


class _Handle:
    """One rank's open file: the private communicator, view, own pointer, hints, error handler."""

    __slots__ = ("open", "comm", "rank", "view", "ptr", "atomic", "info", "errhandler", "split",
                 "fs", "sc")

    def __init__(self, open_: _Open, comm: Intracomm, errhandler: Errhandler) -> None:
        self.open, self.comm = open_, comm
        self.sc = comm._st.sc
        self.rank: int = self.sc.rank
        self.view = View(0, BYTE, BYTE, "native")
        self.ptr = 0
        self.atomic = False
        self.info: dict[str, str] = {}
        self.errhandler = errhandler
        self.split: tuple[str, int] | None = None  # a split collective begun: (its name, bytes)
        self.fs: FileSystem = file_system_of(self.sc.latency)

    def spend(self, seconds: float) -> None:
        if seconds > 0:
            block(self.sc.sleep(seconds))


_null_handlers: weakref.WeakKeyDictionary[Any, Errhandler] = weakref.WeakKeyDictionary()
_outside_handler: list[Errhandler] = [Errhandler(ERRORS_RETURN)]


def _get_null_handler() -> Errhandler:
    """The calling rank's ``FILE_NULL`` handler (the one new files take)."""
    rank = _current_state()
    if rank is None:
        return _outside_handler[0]
    return _null_handlers.setdefault(rank, Errhandler(ERRORS_RETURN))


def _set_null_handler(eh: Errhandler) -> None:
    rank = _current_state()
    if rank is None:
        _outside_handler[0] = eh
    else:
        _null_handlers[rank] = eh


def _os_error(exc: OSError) -> int:
    if isinstance(exc, FileNotFoundError):
        return ERR_NO_SUCH_FILE
    if isinstance(exc, FileExistsError):
        return ERR_FILE_EXISTS
    if isinstance(exc, PermissionError):
        return ERR_ACCESS
    if isinstance(exc, IsADirectoryError):
        return ERR_BAD_FILE
    if exc.errno in (28, 122):  # ENOSPC, EDQUOT
        return ERR_NO_SPACE
    return ERR_IO


def _check_amode(amode: int, rank: int, call: str) -> None:
    access = [m for m in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR) if amode & m]
    problem = ""
    if len(access) != 1:
        problem = "amode must hold exactly one of MODE_RDONLY, MODE_WRONLY and MODE_RDWR"
    elif amode & MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
        problem = "MODE_CREATE and MODE_EXCL cannot go with MODE_RDONLY"
    elif amode & MODE_RDWR and amode & MODE_SEQUENTIAL:
        problem = "MODE_SEQUENTIAL cannot go with MODE_RDWR"
    if problem:
        raise error(ERR_AMODE, rank, call, problem, "pass e.g. MPI.MODE_RDWR | MPI.MODE_CREATE")


def _os_open(path: str, amode: int) -> int:
    flags = os.O_RDONLY if amode & MODE_RDONLY else os.O_WRONLY if amode & MODE_WRONLY else os.O_RDWR
    if amode & MODE_CREATE:
        flags |= os.O_CREAT
    if amode & MODE_EXCL:
        flags |= os.O_EXCL
    return os.open(path, flags, 0o666)


def _int(value: Any, rank: int, call: str, what: str, nonneg: bool = True) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"rank {rank}: {call}: {what} must be an int, got {type(value).__name__}")
    v = int(value.__index__())
    if nonneg and v < 0:
        raise error(ERR_ARG, rank, call, f"{what} {v} is negative", f"pass a {what} >= 0")
    return v



# ---- the data path ----


class DataAccess:
    """The reads and writes of ``MPI.File`` (its base class)."""

    __slots__ = ("_h",)

    _h: _Handle | None

    def _h_or_raise(self, call: str) -> _Handle:
        h = self._h
        if h is None:
            raise error(ERR_FILE, _rank_or_none(), f"File.{call}", "the file is FILE_NULL or "
                        "was closed", "open it with MPI.File.Open(comm, filename, amode)")
        return h

    def _fail(self, exc: _Raised) -> _Raised:
        """Run the file's error handler for ``exc``; return it to raise."""
        eh = self._h.errhandler if self._h is not None else _get_null_handler()
        _invoke(eh, self, exc)
        return exc


    def _access(self, name: str, buf: Any, write: bool, where: str,
                offset: int | None = None) -> tuple[_Handle, int]:
        """Do one rank's I/O for call ``name``; return the handle and the bytes moved.

        ``where``: "at" (explicit ``offset``), "ind" (own pointer), "shared" (shared pointer),
        "ordered" (shared pointer, in rank order: collective).
        """
        h = self._h_or_raise(f"{name}()")
        call = f"File.{name}(" + ("" if offset is None else f"offset={offset!r}, ") + "buf)"
        amode = h.open.amode
        if write and amode & MODE_RDONLY:
            raise self._fail(error(ERR_READ_ONLY, h.rank, call, "the file was opened "
                                   "MODE_RDONLY", "open it with MODE_WRONLY or MODE_RDWR"))
        if not write and amode & MODE_WRONLY:
            raise self._fail(error(ERR_ACCESS, h.rank, call, "the file was opened MODE_WRONLY",
                                   "open it with MODE_RDONLY or MODE_RDWR"))
        if where in ("at", "ind") and amode & MODE_SEQUENTIAL:
            raise self._fail(error(ERR_UNSUPPORTED_OPERATION, h.rank, call, "the file was opened "
                                   "MODE_SEQUENTIAL", "use the shared file pointer"))
        b = message(buf, h.rank, call, not write)
        wire = b.datatype._wire_size()
        nbytes = b.count * wire
        esize = h.view.esize
        if nbytes % esize:
            raise self._fail(error(ERR_TYPE, h.rank, call, f"the buffer holds {nbytes} bytes, "
                                   f"not a whole number of etypes of {esize} bytes",
                                   "read and write whole etypes"))
        count = nbytes // esize
        if where == "at":
            start = _int(offset, h.rank, call, "offset")
        elif where == "ind":
            start, h.ptr = h.ptr, h.ptr + count
        elif where == "shared":
            start = h.open.shared
            h.open.shared += count
        else:
            sizes = h.comm.allgather(count)
            base = None
            if h.comm.Get_rank() == 0:
                base = h.open.shared
                h.open.shared = base + sum(sizes)
            base = h.comm.bcast(base, 0)
            start = base + sum(sizes[:h.comm.Get_rank()])
        runs = h.view.runs(start * esize, nbytes)
        try:
            moved = _write(h.open.fd, b, runs) if write else _read(h.open.fd, b, runs)
        except OSError as exc:
            raise self._fail(error(_os_error(exc), h.rank, call, str(exc.strerror),
                                   "check the file system")) from None
        if where == "ordered":
            h.spend(h.fs.time(sum(sizes) * esize))
        return h, moved

    def _independent(self, name: str, buf: Any, write: bool, where: str, offset: int | None,
                     status: Status | None) -> int:
        h, moved = self._access(name, buf, write, where, offset)
        h.spend(h.fs.time(moved))
        _fill(status, moved)
        return moved

    def _collective(self, name: str, buf: Any, write: bool, where: str, offset: int | None,
                    status: Status | None) -> int:
        h, moved = self._access(name, buf, write, where, offset)
        if where != "ordered":
            total = h.comm.allreduce(moved)
            h.spend(h.fs.time(total))
        _fill(status, moved)
        return moved

    def _nonblocking(self, name: str, buf: Any, write: bool, where: str, offset: int | None,
                     collective: bool) -> Request:
        """Do the I/O of ``I<name>`` now (paying its time); return a complete request."""
        if collective:
            self._collective(name, buf, write, where, offset, None)
        else:
            self._independent(name, buf, write, where, offset, None)
        h = self._h
        return immediate(h.rank if h is not None else -1, lambda: f"File.{name}()", None)

    def _begin(self, name: str, buf: Any, write: bool, where: str, offset: int | None) -> None:
        h = self._h_or_raise(f"{name}_begin()")
        if h.split is not None:
            raise self._fail(error(ERR_OTHER, h.rank, f"File.{name}_begin()", f"split collective "
                                   f"{h.split[0]} is already begun", "call its _end first"))
        moved = self._collective(f"{name}_begin", buf, write, where, offset, None)
        h.split = (name, moved)

    def _end(self, name: str, status: Status | None) -> None:
        h = self._h_or_raise(f"{name}_end()")
        if h.split is None or h.split[0] != name:
            raise self._fail(error(ERR_OTHER, h.rank, f"File.{name}_end()",
                                   f"no {name}_begin() is pending", f"call {name}_begin() first"))
        moved = h.split[1]
        h.split = None
        _fill(status, moved)

    # explicit offsets

    def Read_at(self, offset: int, buf: Any, status: Status | None = None) -> None:
        """Read at etype ``offset`` of the view (independent)."""
        self._independent("Read_at", buf, False, "at", offset, status)

    def Write_at(self, offset: int, buf: Any, status: Status | None = None) -> None:
        """Write at etype ``offset`` of the view (independent)."""
        self._independent("Write_at", buf, True, "at", offset, status)

    def Read_at_all(self, offset: int, buf: Any, status: Status | None = None) -> None:
        """Read at etype ``offset`` (collective)."""
        self._collective("Read_at_all", buf, False, "at", offset, status)

    def Write_at_all(self, offset: int, buf: Any, status: Status | None = None) -> None:
        """Write at etype ``offset`` (collective)."""
        self._collective("Write_at_all", buf, True, "at", offset, status)

    def Iread_at(self, offset: int, buf: Any) -> Request:
        """Read at ``offset``; the I/O happens (and costs) now, the request is complete."""
        return self._nonblocking("Iread_at", buf, False, "at", offset, False)

    def Iwrite_at(self, offset: int, buf: Any) -> Request:
        """Write at ``offset``; the I/O happens (and costs) now, the request is complete."""
        return self._nonblocking("Iwrite_at", buf, True, "at", offset, False)

    def Iread_at_all(self, offset: int, buf: Any) -> Request:
        """``Read_at_all`` returning a complete request."""
        return self._nonblocking("Iread_at_all", buf, False, "at", offset, True)

    def Iwrite_at_all(self, offset: int, buf: Any) -> Request:
        """``Write_at_all`` returning a complete request."""
        return self._nonblocking("Iwrite_at_all", buf, True, "at", offset, True)

    def Read_at_all_begin(self, offset: int, buf: Any) -> None:
        """Begin a split collective ``Read_at_all`` (the data are read now)."""
        self._begin("Read_at_all", buf, False, "at", offset)

    def Read_at_all_end(self, buf: Any, status: Status | None = None) -> None:
        """End a split collective ``Read_at_all``."""
        self._end("Read_at_all", status)

    def Write_at_all_begin(self, offset: int, buf: Any) -> None:
        """Begin a split collective ``Write_at_all`` (the data are written now)."""
        self._begin("Write_at_all", buf, True, "at", offset)

    def Write_at_all_end(self, buf: Any, status: Status | None = None) -> None:
        """End a split collective ``Write_at_all``."""
        self._end("Write_at_all", status)

    # individual file pointer

    def Read(self, buf: Any, status: Status | None = None) -> None:
        """Read at this rank's file pointer and advance it (independent)."""
        self._independent("Read", buf, False, "ind", None, status)

    def Write(self, buf: Any, status: Status | None = None) -> None:
        """Write at this rank's file pointer and advance it (independent)."""
        self._independent("Write", buf, True, "ind", None, status)

    def Read_all(self, buf: Any, status: Status | None = None) -> None:
        """Read at this rank's file pointer (collective)."""
        self._collective("Read_all", buf, False, "ind", None, status)

    def Write_all(self, buf: Any, status: Status | None = None) -> None:
        """Write at this rank's file pointer (collective)."""
        self._collective("Write_all", buf, True, "ind", None, status)

    def Iread(self, buf: Any) -> Request:
        """``Read`` returning a complete request."""
        return self._nonblocking("Iread", buf, False, "ind", None, False)

    def Iwrite(self, buf: Any) -> Request:
        """``Write`` returning a complete request."""
        return self._nonblocking("Iwrite", buf, True, "ind", None, False)

    def Iread_all(self, buf: Any) -> Request:
        """``Read_all`` returning a complete request."""
        return self._nonblocking("Iread_all", buf, False, "ind", None, True)

    def Iwrite_all(self, buf: Any) -> Request:
        """``Write_all`` returning a complete request."""
        return self._nonblocking("Iwrite_all", buf, True, "ind", None, True)

    def Read_all_begin(self, buf: Any) -> None:
        """Begin a split collective ``Read_all``."""
        self._begin("Read_all", buf, False, "ind", None)

    def Read_all_end(self, buf: Any, status: Status | None = None) -> None:
        """End a split collective ``Read_all``."""
        self._end("Read_all", status)

    def Write_all_begin(self, buf: Any) -> None:
        """Begin a split collective ``Write_all``."""
        self._begin("Write_all", buf, True, "ind", None)

    def Write_all_end(self, buf: Any, status: Status | None = None) -> None:
        """End a split collective ``Write_all``."""
        self._end("Write_all", status)

    # shared file pointer

    def Read_shared(self, buf: Any, status: Status | None = None) -> None:
        """Read at the shared file pointer and advance it (independent)."""
        self._independent("Read_shared", buf, False, "shared", None, status)

    def Write_shared(self, buf: Any, status: Status | None = None) -> None:
        """Write at the shared file pointer and advance it (independent)."""
        self._independent("Write_shared", buf, True, "shared", None, status)

    def Iread_shared(self, buf: Any) -> Request:
        """``Read_shared`` returning a complete request."""
        return self._nonblocking("Iread_shared", buf, False, "shared", None, False)

    def Iwrite_shared(self, buf: Any) -> Request:
        """``Write_shared`` returning a complete request."""
        return self._nonblocking("Iwrite_shared", buf, True, "shared", None, False)

    def Read_ordered(self, buf: Any, status: Status | None = None) -> None:
        """Read at the shared file pointer, the ranks in rank order (collective)."""
        self._collective("Read_ordered", buf, False, "ordered", None, status)

    def Write_ordered(self, buf: Any, status: Status | None = None) -> None:
        """Write at the shared file pointer, the ranks in rank order (collective)."""
        self._collective("Write_ordered", buf, True, "ordered", None, status)

    def Read_ordered_begin(self, buf: Any) -> None:
        """Begin a split collective ``Read_ordered``."""
        self._begin("Read_ordered", buf, False, "ordered", None)

    def Read_ordered_end(self, buf: Any, status: Status | None = None) -> None:
        """End a split collective ``Read_ordered``."""
        self._end("Read_ordered", status)

    def Write_ordered_begin(self, buf: Any) -> None:
        """Begin a split collective ``Write_ordered``."""
        self._begin("Write_ordered", buf, True, "ordered", None)

    def Write_ordered_end(self, buf: Any, status: Status | None = None) -> None:
        """End a split collective ``Write_ordered``."""
        self._end("Write_ordered", status)


# ---- helpers ----


def _invoke(eh: Errhandler, file: Any, exc_or_code: _Raised | int) -> None:
    code = exc_or_code if isinstance(exc_or_code, int) else exc_or_code.Get_error_code()
    if eh._fn is not None:
        eh._fn(file, code)
    elif eh == ERRORS_ARE_FATAL or eh == ERRORS_ABORT:
        from ._comm import COMM_WORLD
        COMM_WORLD.Abort(code)


def _rank_or_none() -> int | None:
    try:
        return current().world.rank
    except RuntimeError:
        return None


def _current_state() -> Any:
    try:
        return current()
    except RuntimeError:
        return None


def _fill(status: Status | None, nbytes: int) -> None:
    if status is not None:
        status._store(nbytes, False)


def _packed(b: Any) -> NDArray[np.uint8]:
    data = b.take(b.displ, b.count)
    host = np.ascontiguousarray(data if isinstance(data, np.ndarray) else arrays.to_host(data))
    return host.reshape(-1).view(np.uint8)


def _write(fd: int, b: Any, runs: list[tuple[int, int]]) -> int:
    raw = _packed(b)
    at = 0
    for offset, length in runs:
        os.pwrite(fd, raw[at:at + length].tobytes(), offset)
        at += length
    return at


def _read(fd: int, b: Any, runs: list[tuple[int, int]]) -> int:
    pieces = []
    for offset, length in runs:
        got = os.pread(fd, length, offset)
        pieces.append(got)
        if len(got) < length:
            break
    raw = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    base = b.datatype._base._np
    unit = base.itemsize
    usable = raw.size - raw.size % unit
    if usable:
        b.put(b.displ, raw[:usable].copy().view(base), b.count)
    return int(raw.size)
