"""MPI.Exception, the error classes and strings, and the errors this facade raises.

mpi4py raises ``MPI.Exception`` (a ``RuntimeError``) carrying an MPI error
code. Here every MPI-level error is one class that is *both* an
``MPI.Exception`` (``Get_error_class()`` says which MPI error) and the error
simcluster raises for the same mistake elsewhere: a truncated receive is a
``TruncationError``, a bad rank or tag a ``ValueError``, a datatype or op that
does not fit a ``TypeError``. So ``except MPI.Exception``, ``except
sc.TruncationError`` and ``except ValueError`` all work, and the message has
simcluster's shape: ``rank R: Call(args): what happened; what to do``.

Rule 1: the facade raises MPI errors only through :func:`error`, so the class
always matches the code.
Rule 2: simcluster's own checks (deadlock, buffer hazard, collective mismatch)
keep their own errors; they are not MPI errors.
"""

from __future__ import annotations

import weakref
from typing import Any, Final

from ..engine.assembly import current_task
from ..errors import ProcessFailedError, RevokedError, SimclusterError, TruncationError
from ._constants import (
    ERR_ARG, ERR_BUFFER, ERR_COMM, ERR_COUNT, ERR_DIMS, ERR_GROUP, ERR_IN_STATUS, ERR_INFO, ERR_KEYVAL,
    ERR_LASTCODE, ERR_OP, ERR_PROC_FAILED, ERR_PROC_FAILED_PENDING, ERR_RANK, ERR_REQUEST, ERR_REVOKED,
    ERR_ROOT, ERR_TAG, ERR_TOPOLOGY, ERR_TRUNCATE,
    ERR_TYPE, ERR_UNKNOWN, SUCCESS,
)

ERROR_STRINGS: Final[dict[int, str]] = {
    0: 'No MPI error',
    1: 'Invalid buffer pointer',
    2: 'Invalid count',
    3: 'Invalid datatype',
    4: 'Invalid tag',
    5: 'Invalid communicator',
    6: 'Invalid rank',
    7: 'Invalid root',
    8: 'Invalid group',
    9: 'Invalid MPI_Op',
    10: 'Invalid topology',
    11: 'Invalid dimension argument',
    12: 'Invalid argument',
    13: 'Unknown error.  Please file a bug report.',
    14: 'Message truncated',
    15: 'Other MPI error',
    16: 'Internal MPI error!',
    17: 'See the MPI_ERROR field in MPI_Status for the error code',
    18: 'Pending request (no error)',
    19: 'Invalid MPI_Request',
    20: 'Access denied to file',
    21: 'Invalid amode value in MPI_File_open',
    22: 'Invalid file name',
    23: 'An error occurred in a user-defined data conversion function',
    24: 'The requested datarep name has already been specified to MPI_REGISTER_DATAREP',
    25: 'File exists',
    26: 'File in use by some process',
    27: 'Invalid MPI_File',
    28: 'Invalid MPI_Info',
    29: 'Invalid key for MPI_Info',
    30: 'Invalid MPI_Info value',
    31: 'MPI_Info key is not defined',
    32: 'Other I/O error',
    33: 'Invalid service name (see MPI_Publish_name)',
    34: 'Unable to allocate memory for MPI_Alloc_mem',
    35: 'Inconsistent arguments to collective routine',
    36: 'Not enough space for file',
    37: 'File does not exist',
    38: 'Invalid port',
    39: 'Quota exceeded for files',
    40: 'Read-only file or filesystem name',
    41: 'Attempt to lookup an unknown service name',
    42: 'Error in spawn call',
    43: 'Unsupported datarep passed to MPI_File_set_view',
    44: 'Unsupported file operation',
    45: 'Invalid MPI_Win',
    46: 'Invalid base address',
    47: 'Invalid locktype argument',
    48: 'Invalid keyval',
    49: 'Conflicting accesses to window',
    50: 'Wrong synchronization of RMA calls',
    51: 'Invalid size argument in RMA call',
    52: 'Invalid displacement argument in RMA call',
    53: 'Invalid assert argument',
    55: 'Target memory is not contained within the window',
    56: 'Memory cannot be attached',
    57: 'Memory cannot be shared',
    58: 'Incorrect window flavor',
    75: 'Invalid MPI_Session handle',
    76: 'Process was aborted',
    77: 'Value is too large to store',
    80: 'Invalid errhandler',
    101: 'Process failure',
    102: 'A failure has caused this request to be pending',
    103: 'The communication object has been revoked',
}
"""MPICH's error strings (``MPI.Get_error_string``)."""


def Get_error_string(errorcode: int) -> str:
    """Return the text of an error code (MPICH's wording; ``""`` for a user code without one)."""
    code = int(errorcode)
    user = _user_codes().get(code)
    if user is not None:
        string: str = user[1]  # [class, string]
        return string
    return ERROR_STRINGS.get(code, f"Unknown error code {code}")


def Get_error_class(errorcode: int) -> int:
    """Return the error class of an error code (a predefined code is its own class)."""
    code = int(errorcode)
    user = _user_codes().get(code)
    return code if user is None else user[0]


# ---- user-defined error classes, codes and strings (per rank, as per process in MPI) ----


class _UserErrors:
    __slots__ = ("codes", "last", "__weakref__")

    def __init__(self) -> None:
        self.codes: dict[int, list[Any]] = {}  # code -> [class, string]
        self.last = ERR_LASTCODE


_user_tables: weakref.WeakKeyDictionary[Any, _UserErrors] = weakref.WeakKeyDictionary()
_outside_table = _UserErrors()


def _table() -> _UserErrors:
    task = current_task()
    world = None if task is None else task.comm
    if world is None:
        return _outside_table
    found = _user_tables.get(world)
    if found is None:
        found = _user_tables[world] = _UserErrors()
    return found


def _user_codes() -> dict[int, list[Any]]:
    return _table().codes


def last_used_code() -> int:
    """The largest error code or class in use (``comm.Get_attr(MPI.LASTUSEDCODE)``)."""
    return _table().last


def Add_error_class() -> int:
    """Return a new error class (above ``ERR_LASTCODE``), with the string ``""``."""
    table = _table()
    table.last += 1
    table.codes[table.last] = [table.last, ""]
    return table.last


def Add_error_code(errorclass: int) -> int:
    """Return a new error code of ``errorclass`` (a predefined class or a user one)."""
    table = _table()
    found = table.codes.get(errorclass)
    predefined = errorclass in ERROR_STRINGS and errorclass != SUCCESS
    if not predefined and (found is None or found[0] != errorclass):
        raise error(ERR_ARG, None, f"Add_error_code({errorclass!r})", "not an error class",
                    "pass a predefined class (MPI.ERR_OTHER, ...) or one from MPI.Add_error_class()")
    table.last += 1
    table.codes[table.last] = [errorclass, ""]
    return table.last


def Add_error_string(errorcode: int, string: str) -> None:
    """Set the text of a user error class or code."""
    _user(errorcode, f"Add_error_string({errorcode!r})")[1] = str(string)


def Remove_error_string(errorcode: int) -> None:
    """Clear the text of a user error class or code."""
    _user(errorcode, f"Remove_error_string({errorcode!r})")[1] = ""


def Remove_error_code(errorcode: int) -> None:
    """Remove a user error code (its string must be removed first)."""
    call = f"Remove_error_code({errorcode!r})"
    entry = _user(errorcode, call)
    if entry[0] == errorcode:
        raise error(ERR_ARG, None, call, "that is an error class", "use Remove_error_class()")
    _removable(errorcode, entry, call)


def Remove_error_class(errorclass: int) -> None:
    """Remove a user error class (its codes and string must be removed first)."""
    call = f"Remove_error_class({errorclass!r})"
    entry = _user(errorclass, call)
    if entry[0] != errorclass:
        raise error(ERR_ARG, None, call, "that is an error code", "use Remove_error_code()")
    codes = [c for c, (k, _) in _user_codes().items() if k == errorclass and c != errorclass]
    if codes:
        raise error(ERR_ARG, None, call, f"the class still has codes {codes}",
                    "remove them with Remove_error_code() first")
    _removable(errorclass, entry, call)


def _user(errorcode: int, call: str) -> list[Any]:
    found = _user_codes().get(errorcode)
    if found is None:
        raise error(ERR_ARG, None, call, "not a user-defined error class or code (or removed)",
                    "pass one from Add_error_class() or Add_error_code()")
    return found


def _removable(errorcode: int, entry: list[Any], call: str) -> None:
    if entry[1]:
        raise error(ERR_ARG, None, call, "it still has a string", "Remove_error_string() first")
    del _user_codes()[errorcode]


class Exception(RuntimeError):  # noqa: A001 - mpi4py's name
    """An MPI error: ``Get_error_code()``/``Get_error_class()``, ``int(exc)``, comparisons with ints."""

    ierr: int

    def __init__(self, ierr: int = SUCCESS, *args: Any) -> None:
        self.ierr = ERR_UNKNOWN if int(ierr) < SUCCESS else int(ierr)
        super().__init__(*(args or (Get_error_string(self.ierr),)))

    def __int__(self) -> int:
        return self.ierr

    def __bool__(self) -> bool:
        return self.ierr != SUCCESS

    def __hash__(self) -> int:
        return hash(self.ierr)

    def __eq__(self, other: object) -> bool:
        return self.ierr == other if isinstance(other, int) else (
            isinstance(other, Exception) and self.ierr == other.ierr)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: int) -> bool:
        return self.ierr < int(other)

    def __le__(self, other: int) -> bool:
        return self.ierr <= int(other)

    def __gt__(self, other: int) -> bool:
        return self.ierr > int(other)

    def __ge__(self, other: int) -> bool:
        return self.ierr >= int(other)

    def Get_error_code(self) -> int:
        """Return the error code."""
        return self.ierr

    def Get_error_class(self) -> int:
        """Return the error class (``MPI.ERR_RANK``, ``MPI.ERR_TRUNCATE``, ...)."""
        return Get_error_class(self.ierr)

    def Get_error_string(self) -> str:
        """Return MPI's text for the error code."""
        return Get_error_string(self.ierr)

    @property
    def error_code(self) -> int:
        """The error code."""
        return self.ierr

    @property
    def error_class(self) -> int:
        """The error class."""
        return self.Get_error_class()

    @property
    def error_string(self) -> str:
        """MPI's text for the error code."""
        return self.Get_error_string()

    def __repr__(self) -> str:
        return f"MPI.Exception({self.ierr})"


Exception.__module__ = "simcluster.MPI"
Exception.__qualname__ = "Exception"


class _Raised(Exception):
    """What the facade raises: an MPI.Exception with simcluster's message, ``.rank`` and ``.op``."""

    rank: int | None
    op: str

    def __init__(self, ierr: int = SUCCESS, message: str | None = None, rank: int | None = None,
                 op: str = "") -> None:
        self.rank, self.op = rank, op
        Exception.__init__(self, ierr, *(() if message is None else (message,)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ierr}, {str(self)!r})"


class MPIValueError(_Raised, ValueError):
    """An MPI error that simcluster reports as a ValueError (a bad rank, tag, root, count, ...)."""


class MPITypeError(_Raised, TypeError):
    """An MPI error that simcluster reports as a TypeError (a datatype or op that does not fit)."""


class MPITypeValueError(_Raised, TypeError, ValueError):
    """``ERR_TYPE`` for a send and a receive buffer of different datatypes: a TypeError, and the
    ValueError mpi4py raises for that mismatch."""


class MPITruncationError(_Raised, TruncationError):
    """``ERR_TRUNCATE``: a message larger than the receive buffer (also a ``sc.TruncationError``)."""


class MPIError(_Raised, SimclusterError):
    """Any other MPI error class (``ERR_OTHER``, ``ERR_INTERN``, ...), also a ``SimclusterError``."""


_VALUE_CLASSES: Final = frozenset({ERR_RANK, ERR_TAG, ERR_ROOT, ERR_COUNT, ERR_ARG, ERR_GROUP, ERR_COMM,
                                   ERR_DIMS, ERR_REQUEST, ERR_TOPOLOGY, ERR_KEYVAL, ERR_INFO,
                                   ERR_IN_STATUS})
_TYPE_CLASSES: Final = frozenset({ERR_TYPE, ERR_OP, ERR_BUFFER})


def ulfm_error(exc: ProcessFailedError | RevokedError) -> _Raised:
    """The MPI error for a call a crash or a revocation cut short (``simcluster.faults``):
    ``ERR_PROC_FAILED``, ``ERR_PROC_FAILED_PENDING`` or ``ERR_REVOKED``, with simcluster's message."""
    if isinstance(exc, RevokedError):
        code = ERR_REVOKED
    else:
        code = ERR_PROC_FAILED_PENDING if exc.pending else ERR_PROC_FAILED
    return error(code, exc.rank, exc.op, exc.problem, exc.fix)


def error(code: int, rank: int | None, op: str, problem: str, fix: str, *, mismatch: bool = False
          ) -> _Raised:
    """Return the exception for MPI error ``code``: ``rank R: op: problem; fix``.

    ``mismatch``: a send and a receive buffer that do not fit each other, which mpi4py reports
    as a ValueError: ``ERR_TYPE`` is then a ValueError too (``ERR_COUNT`` always is).
    """
    prefix = "" if rank is None else f"rank {rank}: "
    message = f"{prefix}{op}: {problem}; {fix}"
    cls: type[_Raised]
    if code == ERR_TRUNCATE:
        cls = MPITruncationError
    elif code in _VALUE_CLASSES:
        cls = MPIValueError
    elif code in _TYPE_CLASSES:
        cls = MPITypeValueError if mismatch else MPITypeError
    else:
        cls = MPIError
    return cls(code, message, rank, op)


assert ERR_LASTCODE > max(ERROR_STRINGS)
