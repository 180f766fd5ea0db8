"""MPI-IO: ``MPI.File`` and ``MPI.FILE_NULL`` on the real file system.

``File.Open(comm, filename, amode)`` is collective: the ranks ``Dup`` the
communicator (a private context for the file's synchronisation), rank 0
opens the file with the operating system (``MODE_*`` checked as MPI says:
exactly one of ``MODE_RDONLY``/``MODE_WRONLY``/``MODE_RDWR``, no
``MODE_CREATE``/``MODE_EXCL`` with ``MODE_RDONLY``, no ``MODE_SEQUENTIAL``
with ``MODE_RDWR``; a missing file is ``ERR_NO_SUCH_FILE``, an existing one
under ``MODE_EXCL`` ``ERR_FILE_EXISTS``...) and publishes the open file,
which the others find through a ``bcast`` of its key. Every rank of a run on
the memory transport lives in one process, so they all write through the
same descriptor, and the shared file pointer is one number they all see. On
the shm, tcp and mpi transports ``Open`` refuses with ``NotImplementedError``.

Data (``_filedata``) go through the rank's view (``_fileview.View``): explicit offsets
(``Read_at``...), the rank's own file pointer (``Read``, ``Seek``...) and the
shared one (``Read_shared``, ``Read_ordered``, ``Seek_shared``...), each with
its collective (``_all``), nonblocking (``I...``) and split collective
(``_begin``/``_end``) forms. The bytes written are the buffer's packed bytes
(``Datatype.Pack``'s), at the file offsets the view gives, so the file holds
what MPICH's holds for the same program.

Time (``_fileview.FileSystem``): an independent request costs the rank the
file system's latency plus its bytes over the bandwidth; a collective one
first synchronises the ranks (a collective on the private communicator, at
the latency model's price), then costs each rank the latency plus all the
ranks' bytes over the bandwidth. ``Open``, ``Close``, ``Delete``,
``Set_size``, ``Preallocate`` and ``Sync`` cost one latency (the collective
ones after their synchronisation). Nonblocking forms do their I/O and pay
its time at the call; the request they return is complete.

Files default to ``ERRORS_RETURN`` (``FILE_NULL``'s handler, which new files
take), so an error raises ``MPI.Exception``; under ``ERRORS_ARE_FATAL`` the
run aborts with the error code.

Rule 1: every I/O happens inside one call of one rank, which never yields in
the middle of it, so a shared-pointer update and its data are atomic.
Rule 2: a collective call does its own rank's I/O before it synchronises, so
when any rank returns from it, every rank's part is in the file.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from ._blocking import block
from ._comm import Comm, Intracomm
from ._constants import (
    DISPLACEMENT_CURRENT, ERR_ARG, ERR_FILE, ERR_OTHER, ERR_READ_ONLY, ERR_TYPE,
    ERR_UNSUPPORTED_OPERATION, MODE_APPEND, MODE_CREATE,
    MODE_DELETE_ON_CLOSE, MODE_RDONLY, MODE_RDWR, MODE_SEQUENTIAL, MODE_WRONLY, SEEK_CUR, SEEK_END,
    SEEK_SET,
)
from ._datatypes import BYTE, Datatype
from ._errhandler import Errhandler
from ._errors import _Raised, error
from ._filedata import (
    DataAccess, _check_amode, _current_state, _get_null_handler, _Handle, _int, _invoke, _Open,
    _os_error, _os_open, _rank_or_none, _set_null_handler,
)
from ._fileview import View, check_datarep, file_system_of, type_extent
from ._group import Group
from ._info import INFO_NULL, Info

_keys = itertools.count()
_published: dict[int, list[Any]] = {}
"""key -> [the _Open, or (error class, reason), ranks still to attach]: held until all attach."""


# ---- File ----


class File(DataAccess):
    """An MPI file handle (mpi4py's ``MPI.File``); see the module docstring."""

    __slots__ = ("__weakref__",)

    def __new__(cls, file: File | None = None) -> File:
        if file is not None and not isinstance(file, File):
            raise TypeError(f"MPI.File({file!r}): expected an MPI.File")
        self = object.__new__(cls)
        self._h = None if file is None else file._h
        return self

    # ---- object model ----

    def __eq__(self, other: object) -> bool:
        return isinstance(other, File) and other._h is self._h

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __bool__(self) -> bool:
        return self._h is not None

    def __repr__(self) -> str:
        if self._h is None:
            return "<MPI.File FILE_NULL>"
        return f"<MPI.File {self._h.open.path!r}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._h is None:
            return "FILE_NULL" if self is FILE_NULL else (type(self), ())
        raise ValueError(f"cannot pickle {self!r}: a file handle belongs to the rank that opened it")

    def toint(self) -> int:
        """Return the handle as a C int (``FILE_NULL`` is 0)."""
        h = self._h
        if h is None:
            return 0
        found = _ints.get(id(h))
        if found is None:
            found = _ints[id(h)] = -0x7C000000 + len(_ints)
            _objects[found] = h
        return found

    py2f = toint

    @property
    def handle(self) -> int:
        """The MPI handle, as mpi4py shows it (an unsigned int)."""
        v = self.toint()
        return v if v >= 0 else v + 2**64

    @classmethod
    def fromint(cls, arg: int) -> File:
        """Return a file object for the C int handle ``arg``."""
        new = cls()
        v = int(arg)
        if v >= 2**63:
            v -= 2**64
        if v != 0:
            h = _objects.get(v)
            if h is None:
                raise error(ERR_FILE, None, f"File.fromint({arg!r})", "no file has this handle",
                            "pass a handle a live file of this rank gave (fh.toint())")
            new._h = h
        return new

    fromhandle = f2py = fromint

    def free(self) -> None:
        """Close the file when it is open (never raises for FILE_NULL)."""
        if self._h is not None:
            self.Close()

    # ---- errors ----
    def Get_errhandler(self) -> Errhandler:
        """Return (a new handle on) the file's error handler (``ERRORS_RETURN`` by default)."""
        return Errhandler(self._h.errhandler if self._h is not None else _get_null_handler())

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the file's error handler (on ``FILE_NULL``: the one files opened later take)."""
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"File.Set_errhandler({errhandler!r}): expected an MPI.Errhandler")
        errhandler._check_settable(f"File.Set_errhandler({errhandler!r})", _rank_or_none())
        if self._h is None:
            _set_null_handler(Errhandler(errhandler))
        else:
            self._h.errhandler = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Run the file's error handler for ``errorcode``."""
        eh = self._h.errhandler if self._h is not None else _get_null_handler()
        _invoke(eh, self, errorcode)

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """Return an error handler that calls ``errhandler_fn(file, errorcode)``."""
        return Errhandler._user("File", errhandler_fn)

    # ---- opening and closing ----

    @classmethod
    def Open(cls, comm: Intracomm, filename: Any, amode: int = MODE_RDONLY,
             info: Info = INFO_NULL) -> File:
        """Open ``filename`` on every rank of ``comm`` (collective); return the file.

        Costs the ``Dup`` of ``comm``, a broadcast, and one file-system latency.
        """
        if not isinstance(comm, Comm):
            raise TypeError(f"File.Open({comm!r}, ...): expected an MPI.Intracomm")
        base = Intracomm(comm)
        st = base._st
        rank = st.sc.rank
        call = f"File.Open(filename={filename!r}, amode={amode!r})"
        if st.sc.transport != "memory":
            raise NotImplementedError(
                f"rank {rank}: {call}: simcluster's MPI-IO shares one open file between the ranks, "
                f"which needs every rank in one process; this run uses the {st.sc.transport} "
                "transport: run it on the memory transport (the default)")
        path = os.fsdecode(os.fspath(filename))
        amode = _int(amode, rank, call, "amode")
        null = File()
        try:
            _check_amode(amode, rank, call)
        except _Raised as exc:
            raise null._fail(exc) from None
        private = Intracomm(base.Dup())
        key = None
        if private.Get_rank() == 0:
            key = next(_keys)
            try:
                found: Any = _Open(path, _os_open(path, amode), amode)
            except OSError as exc:
                found = (_os_error(exc), exc.strerror or str(exc))
            _published[key] = [found, private.Get_size()]
        key = private.bcast(key, 0)
        entry = _published[key]
        found, entry[1] = entry[0], entry[1] - 1
        if entry[1] == 0:
            del _published[key]
        if isinstance(found, tuple):
            creator = private.Get_rank() == 0
            private.Free()
            code = found[0]
            if amode & MODE_CREATE and not creator:
                code = ERR_OTHER  # as MPICH: one rank creates the file, the others hear it failed
            raise null._fail(error(code, rank, call, f"cannot open {path!r}: {found[1]}",
                                   "check the path and amode")) from None
        found.attached += 1
        h = _Handle(found, private, Errhandler(_get_null_handler()))
        if isinstance(info, Info) and info:
            h.info = dict(info.items())
        if amode & MODE_APPEND:
            h.ptr = found.shared = os.fstat(found.fd).st_size
        h.spend(h.fs.latency)
        new = object.__new__(cls)
        new._h = h
        return new

    def Close(self) -> None:
        """Close the file on every rank that opened it (collective); the handle becomes null.

        With ``MODE_DELETE_ON_CLOSE`` the last rank to close deletes the file.
        """
        h = self._h_or_raise("Close()")
        if h.split is not None:
            raise self._fail(error(ERR_OTHER, h.rank, "File.Close()", f"split collective "
                                   f"{h.split[0]} was begun and not ended", "call its _end first"))
        h.comm.Barrier()
        op = h.open
        op.closing += 1
        if op.closing == op.attached:
            os.close(op.fd)
            if op.amode & MODE_DELETE_ON_CLOSE:
                try:
                    os.remove(op.path)
                except FileNotFoundError:
                    pass
        h.comm.Free()
        h.spend(h.fs.latency)
        _objects.pop(_ints.pop(id(h), 0), None)
        self._h = None

    @classmethod
    def Delete(cls, filename: Any, info: Info = INFO_NULL) -> None:
        """Delete ``filename`` (``ERR_NO_SUCH_FILE`` when there is none); costs one latency."""
        path = os.fsdecode(os.fspath(filename))
        try:
            os.remove(path)
        except OSError as exc:
            raise FILE_NULL._fail(error(_os_error(exc), _rank_or_none(), f"File.Delete({path!r})",
                                        f"cannot delete it: {exc.strerror}",
                                        "check the path")) from None
        st = _current_state()
        if st is not None:
            fs = file_system_of(st.world.latency)
            if fs.latency > 0:
                block(st.world.sleep(fs.latency))

    # ---- facts ----

    def Get_amode(self) -> int:
        """Return the access mode the file was opened with."""
        return self._h_or_raise("Get_amode()").open.amode

    def Get_group(self) -> Group:
        """Return the group of the ranks that opened the file."""
        return self._h_or_raise("Get_group()").comm.Get_group()

    def Get_info(self) -> Info:
        """Return the hints in use (those set with ``Open``/``Set_info``/``Set_view``)."""
        return Info.Create(self._h_or_raise("Get_info()").info)

    def Set_info(self, info: Info) -> None:
        """Set hints (collective in MPI; kept, they change nothing here)."""
        h = self._h_or_raise("Set_info()")
        if isinstance(info, Info) and info:
            h.info.update(info.items())

    def Get_size(self) -> int:
        """Return the file's size in bytes."""
        h = self._h_or_raise("Get_size()")
        return os.fstat(h.open.fd).st_size

    def Set_size(self, size: int) -> None:
        """Truncate or extend the file to ``size`` bytes (collective; extending writes zeros)."""
        self._resize("Set_size", size, shrink=True)

    def Preallocate(self, size: int) -> None:
        """Make the file at least ``size`` bytes long (collective)."""
        self._resize("Preallocate", size, shrink=False)

    def _resize(self, name: str, size: int, shrink: bool) -> None:
        h = self._h_or_raise(f"{name}({size!r})")
        call = f"File.{name}({size!r})"
        size = _int(size, h.rank, call, "size")
        if not h.open.amode & (MODE_WRONLY | MODE_RDWR):
            raise self._fail(error(ERR_READ_ONLY, h.rank, call, "the file was opened MODE_RDONLY",
                                   "open it with MODE_WRONLY or MODE_RDWR"))
        h.comm.Barrier()  # every rank is done with the file as it was
        if h.comm.Get_rank() == 0:
            fd = h.open.fd
            if shrink or os.fstat(fd).st_size < size:
                try:
                    os.ftruncate(fd, size)
                except OSError as exc:
                    h.comm.Barrier()
                    raise self._fail(error(_os_error(exc), h.rank, call, str(exc.strerror),
                                           "check the file system")) from None
        h.comm.Barrier()
        h.spend(h.fs.latency)

    def Sync(self) -> None:
        """Flush the file to storage (collective); costs a synchronisation and one latency."""
        h = self._h_or_raise("Sync()")
        h.comm.Barrier()
        if h.comm.Get_rank() == 0 and h.open.amode & (MODE_WRONLY | MODE_RDWR):
            os.fsync(h.open.fd)
        h.spend(h.fs.latency)

    def Get_atomicity(self) -> bool:
        """Return whether atomic mode is set (default False)."""
        return self._h_or_raise("Get_atomicity()").atomic

    def Set_atomicity(self, flag: bool) -> None:
        """Set atomic mode (collective; I/O here is atomic either way)."""
        self._h_or_raise("Set_atomicity()").atomic = bool(flag)

    def Get_byte_offset(self, offset: int) -> int:
        """Return the absolute byte position of etype ``offset`` in the view."""
        h = self._h_or_raise(f"Get_byte_offset({offset!r})")
        offset = _int(offset, h.rank, f"File.Get_byte_offset({offset!r})", "offset")
        return h.view.byte_offset(offset)

    def Get_type_extent(self, datatype: Datatype) -> int:
        """Return the extent of ``datatype`` in the file (its extent in the view's representation)."""
        return type_extent(self._h_or_raise("Get_type_extent()").view.datarep, datatype)

    amode = property(Get_amode, doc="The access mode.")
    atomicity = property(Get_atomicity, Set_atomicity, doc="Atomic mode.")
    info = property(Get_info, Set_info, doc="The hints in use.")
    size = property(Get_size, doc="The file's size in bytes.")

    @property
    def group(self) -> Group:
        """The group of the file."""
        return self.Get_group()

    @property
    def group_size(self) -> int:
        """The number of ranks that opened the file."""
        return self._h_or_raise("group_size").comm.Get_size()

    @property
    def group_rank(self) -> int:
        """This rank's rank in the file's group."""
        return self._h_or_raise("group_rank").comm.Get_rank()

    # ---- views ----

    def Set_view(self, disp: int = 0, etype: Datatype = BYTE, filetype: Datatype | None = None,
                 datarep: str = "native", info: Info = INFO_NULL) -> None:
        """Set the rank's view (collective): both file pointers go back to 0."""
        h = self._h_or_raise("Set_view()")
        call = f"File.Set_view(disp={disp!r}, datarep={datarep!r})"
        disp = _int(disp, h.rank, call, "disp", nonneg=False)
        filetype = etype if filetype is None else filetype
        if disp == DISPLACEMENT_CURRENT:
            if not h.open.amode & MODE_SEQUENTIAL:
                raise self._fail(error(ERR_ARG, h.rank, call, "DISPLACEMENT_CURRENT needs a file "
                                       "opened MODE_SEQUENTIAL", "pass a byte displacement"))
            disp = h.view.byte_offset(h.open.shared)
        elif disp < 0:
            raise self._fail(error(ERR_ARG, h.rank, call, f"disp {disp} is negative",
                                   "pass a byte displacement >= 0"))
        for what, dt in (("etype", etype), ("filetype", filetype)):
            if not isinstance(dt, Datatype) or not dt or not dt._committed:
                raise self._fail(error(ERR_TYPE, h.rank, call, f"the {what} is not a committed "
                                       "datatype", "Commit() it first"))
        if etype.Get_size() == 0 or filetype.Get_size() % etype.Get_size():
            raise self._fail(error(ERR_TYPE, h.rank, call, "the filetype is not made of whole "
                                   "etypes", "build the filetype from the etype"))
        try:
            check_datarep(datarep, (etype, filetype), h.rank, call)
        except _Raised as exc:
            raise self._fail(exc) from None
        h.view = View(disp, Datatype(etype), Datatype(filetype), datarep)
        h.ptr = 0
        if isinstance(info, Info) and info:
            h.info.update(info.items())
        h.comm.Barrier()  # every rank is done with the shared pointer of the old view
        if h.comm.Get_rank() == 0:
            h.open.shared = 0
        h.comm.Barrier()

    def Get_view(self) -> tuple[int, Datatype, Datatype, str]:
        """Return ``(disp, etype, filetype, datarep)`` (derived types as new handles to free)."""
        v = self._h_or_raise("Get_view()").view
        return (v.disp, _dup(v.etype), _dup(v.filetype), v.datarep)

    # ---- pointers ----

    def Seek(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move this rank's file pointer (in etypes of the view)."""
        h = self._h_or_raise(f"Seek({offset!r}, {whence!r})")
        h.ptr = self._seek(h, offset, whence, h.ptr, "Seek")

    def Get_position(self) -> int:
        """Return this rank's file pointer, in etypes of the view."""
        return self._h_or_raise("Get_position()").ptr

    def Seek_shared(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the shared file pointer (collective: every rank passes the same values)."""
        h = self._h_or_raise(f"Seek_shared({offset!r}, {whence!r})")
        where = self._seek(h, offset, whence, h.open.shared, "Seek_shared")
        h.comm.Barrier()
        if h.comm.Get_rank() == 0:
            h.open.shared = where
        h.comm.Barrier()

    def Get_position_shared(self) -> int:
        """Return the shared file pointer, in etypes of the view."""
        return self._h_or_raise("Get_position_shared()").open.shared

    def _seek(self, h: _Handle, offset: int, whence: int, now: int, name: str) -> int:
        call = f"File.{name}({offset!r}, {whence!r})"
        offset = _int(offset, h.rank, call, "offset", nonneg=False)
        if h.open.amode & MODE_SEQUENTIAL:
            raise self._fail(error(ERR_UNSUPPORTED_OPERATION, h.rank, call, "the file was opened "
                                   "MODE_SEQUENTIAL", "read and write in order instead"))
        if whence == SEEK_SET:
            where = offset
        elif whence == SEEK_CUR:
            where = now + offset
        elif whence == SEEK_END:
            where = h.view.end_offset(os.fstat(h.open.fd).st_size) + offset
        else:
            raise self._fail(error(ERR_ARG, h.rank, call, f"whence {whence!r} is not known",
                                   "pass MPI.SEEK_SET, MPI.SEEK_CUR or MPI.SEEK_END"))
        if where < 0:
            raise self._fail(error(ERR_ARG, h.rank, call, f"the new position {where} is negative",
                                   "seek to a position >= 0"))
        return where

# ---- helpers ----

_ints: dict[int, int] = {}
_objects: dict[int, _Handle] = {}


def _dup(dt: Datatype) -> Datatype:
    return dt if dt._predefined else dt.Dup()


FILE_NULL = File()
