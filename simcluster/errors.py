"""Every error and warning simcluster raises.

Messages have one shape, ``rank R: op(args): what happened; what to do``, and
each class keeps ``.rank`` and ``.op`` for programs. ``SimclusterError`` and
``TransportError`` live in ``transports.base`` so the transport layer can
raise them without importing this package; they are re-exported here.
"""

from __future__ import annotations

from simcluster.transports.base import SimclusterError as SimclusterError
from simcluster.transports.base import TransportError as TransportError

__all__ = [
    "BufferHazardError", "CollectiveMismatchError", "DeadlockError", "RankError", "RunTimeoutError",
    "SimclusterError", "SimclusterWarning", "TransportError", "TruncationError", "UsageError",
    "UsageTypeError",
]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


class RankError(SimclusterError):
    """A rank raised; the run was stopped and the other ranks cancelled.

    ``.rank`` is the failing rank and ``__cause__`` the original exception,
    traceback intact.
    """

    def __init__(self, rank: int, exc: BaseException, op: str = "run") -> None:
        problem = f"raised {type(exc).__name__}: {exc}"
        super().__init__(rank, op, problem, "the other ranks were cancelled; see the traceback above")


class DeadlockError(SimclusterError):
    """Every live rank is blocked and nothing is in flight.

    ``.blocked`` maps each blocked rank to a description of its pending call,
    ``.cycle`` is the wait-for cycle (a list of ranks) when there is one.
    """

    def __init__(self, report: str, blocked: dict[int, str], cycle: list[int] | None) -> None:
        self.blocked = blocked
        self.cycle = cycle
        self.rank = None
        self.op = "run"
        Exception.__init__(self, report)


class TruncationError(SimclusterError):
    """A message is larger than the receive buffer."""


class BufferHazardError(SimclusterError):
    """A send buffer was changed before its nonblocking send completed."""


class CollectiveMismatchError(SimclusterError):
    """Ranks called collectives in a different order, or with other roots, ops, arrays or algorithms.

    Raised at the call, on the member whose call differs from that of the
    first member that entered the same collective (``comm.Comm._collective``);
    across processes, at the end of the synchronisation round in which both
    entered it.
    """


class RunTimeoutError(SimclusterError):
    """The run did not finish within ``timeout`` wall-clock seconds."""


class UsageError(SimclusterError, ValueError):
    """A call got an argument it cannot take: ``run(world_size=0)``, ``run(checks='loose')``.

    Raised at the call, before anything runs. ``.op`` is the call with the
    argument at fault (``"run(world_size=0)"``), ``.rank`` is None (a rank's
    own bad argument comes wrapped in ``RankError`` like any error it raises).
    Also a ``ValueError``, so ``except ValueError`` keeps catching it.
    """


class UsageTypeError(UsageError, TypeError):
    """A call got an argument of the wrong type: ``run(seed='x')``, ``run(main(...))``.

    A ``UsageError`` (so also a ``ValueError``) and a ``TypeError``.
    """


class SimclusterWarning(UserWarning):
    """Something a strict run noticed but that did not stop it (leaks, unwaited requests)."""


class Aborted(BaseException):
    """A rank called ``MPI.Comm.Abort(code)``: the whole run ends, as ``mpiexec`` ends the job.

    A ``BaseException`` like ``SystemExit``, so ``except Exception`` in rank code
    cannot swallow it; ``run()`` raises it as it is (not wrapped in ``RankError``).
    ``.code`` is the error code (``simcluster mpirun`` exits with it), ``.rank``
    the world rank that aborted, ``.op`` the call.
    """

    def __init__(self, rank: int, code: int, op: str = "Abort") -> None:
        self.rank, self.code, self.op = rank, code, op
        super().__init__(f"rank {rank}: {op}({code}): the run was aborted with error code {code}; "
                         "the other ranks were cancelled")

    def __reduce__(self) -> tuple[type[Aborted], tuple[int, int, str]]:
        return (Aborted, (self.rank, self.code, self.op))
