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
    "BufferHazardError", "CollectiveMismatchError", "DeadlockError", "ProcessFailedError", "RankError",
    "RevokedError", "RunTimeoutError", "SimclusterError", "SimclusterWarning", "TransportError",
    "TruncationError", "UsageError", "UsageTypeError",
]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


class RankError(SimclusterError):
    """A rank raised; the run was stopped and the other ranks cancelled.

    ``.rank`` is the failing rank and ``__cause__`` the original exception,
    traceback intact. ``.crashed`` maps the ranks the run's fault plan had
    crashed by then to the virtual time of each crash.
    """

    def __init__(self, rank: int, exc: BaseException, op: str = "run") -> None:
        self.crashed: dict[int, float] = {}
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


class ProcessFailedError(SimclusterError):
    """A call needs a rank that failed (a crash of the run's fault plan): ULFM's ``MPI_ERR_PROC_FAILED``.

    ``.failed`` lists the failed world ranks the call needed, ``.time`` the
    virtual time the first of them failed. ``.pending`` is true for a receive
    from any source on a communicator with a failure not yet acknowledged
    (``comm.ack_failed()``): ULFM's ``MPI_ERR_PROC_FAILED_PENDING``.
    The survivors' way on is in docs/faults.md: ``revoke``, ``shrink``, ``agree``.
    """

    def __init__(self, rank: int | None, op: str, failed: list[int], time: float,
                 pending: bool = False) -> None:
        self.failed = list(failed)
        self.time = time
        self.pending = pending
        who = ", ".join(str(r) for r in self.failed[:8]) + (", ..." if len(self.failed) > 8 else "")
        plural = "s" if len(self.failed) > 1 else ""
        what = (f"world rank{plural} {who} failed (at virtual time {time:.9g} s)"
                + (" and no message can match this receive until the failure is acknowledged"
                   if pending else ""))
        fix = ("acknowledge it with comm.ack_failed() (MPI: Ack_failed) and post the receive again"
               if pending else "recover: comm.revoke(), then comm.shrink() to go on with the survivors")
        super().__init__(rank, op, what, fix)


class RevokedError(SimclusterError):
    """A call on a revoked communicator: ULFM's ``MPI_ERR_REVOKED``.

    ``.time`` is the virtual time of the revocation and ``.by`` the world rank
    that revoked it. Only ``shrink``, ``agree``, ``ack_failed`` and
    ``get_failed`` still work on it.
    """

    def __init__(self, rank: int | None, op: str, by: int, time: float) -> None:
        self.by = by
        self.time = time
        super().__init__(rank, op, f"the communicator was revoked by world rank {by} at virtual "
                         f"time {time:.9g} s", "go on with comm.shrink(), which still works on it")


class RankCrashed(BaseException):
    """Raised in a rank at the call where the run's fault plan crashes it (``simcluster.faults``).

    A ``BaseException``, like ``SystemExit``: ``except Exception`` in the
    rank's code does not catch it, and the run ends the rank quietly.
    """

    def __init__(self, rank: int, call: str) -> None:
        self.rank, self.call = rank, call
        super().__init__(f"rank {rank} crashed at {call} (the run's fault plan)")

    def __reduce__(self) -> tuple[type[RankCrashed], tuple[int, str]]:
        return (RankCrashed, (self.rank, self.call))


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
