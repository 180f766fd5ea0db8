"""simcluster: a simulated cluster for Python.

Virtual ranks are coroutines that exchange messages with MPI semantics in
virtual time. Start with ``sc.run(main, world_size=4)``.
"""

from . import _command as _command  # before anything slow: Ctrl-C while the command starts is one line
from . import _build as _build  # first: picks the compiled or the interpreted hot path (SIMCLUSTER_PURE_PYTHON)
from . import dist as dist
from . import latency as latency
from . import testing as testing
from . import trace as trace
from .comm import Comm as Comm
from .errors import BufferHazardError as BufferHazardError
from .errors import CollectiveMismatchError as CollectiveMismatchError
from .errors import DeadlockError as DeadlockError
from .errors import ProcessFailedError as ProcessFailedError
from .errors import RankError as RankError
from .errors import RevokedError as RevokedError
from .errors import RunTimeoutError as RunTimeoutError
from .errors import SimclusterError as SimclusterError
from .errors import SimclusterWarning as SimclusterWarning
from .errors import TransportError as TransportError
from .errors import TruncationError as TruncationError
from .errors import UsageError as UsageError
from .errors import UsageTypeError as UsageTypeError
from .matching import ANY_SOURCE as ANY_SOURCE
from .matching import ANY_TAG as ANY_TAG
from .ops import ReduceOp as ReduceOp
from .request import Request as Request
from .request import Status as Status
from .request import test_all as test_all
from .request import test_any as test_any
from .request import wait_all as wait_all
from .request import wait_any as wait_any
from .request import wait_some as wait_some
from .runner import RunResult as RunResult
from .runner import Stats as Stats
from .runner import launch as launch
from .runner import run as run

from ._version import __version__ as __version__

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "BufferHazardError", "CollectiveMismatchError", "Comm",
    "DeadlockError", "ProcessFailedError", "RankError", "ReduceOp", "RevokedError", "dist", "faults", "Request",
    "RunResult", "RunTimeoutError", "SimclusterError",
    "SimclusterWarning", "Stats", "Status", "TransportError", "TruncationError", "UsageError",
    "UsageTypeError", "latency", "platform",
    "launch", "run", "test_all", "testing", "test_any", "trace", "wait_all", "wait_any", "wait_some",
]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir(); submodules stay importable


def __getattr__(name: str) -> object:
    # ``sc.faults`` and ``sc.platform`` load on first use: a run without a fault plan or a
    # platform never needs them
    if name in ("faults", "platform"):
        import importlib  # not `from . import faults`: that asks this function again, for ever

        return importlib.import_module(f"simcluster.{name}")
    raise AttributeError(f"module 'simcluster' has no attribute {name!r}")
