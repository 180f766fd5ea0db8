"""The run's configuration: ``run()``'s keywords, checked once, and the world they describe.

``configure`` checks every keyword of ``run``/``launch`` and returns a
``RunConfig``; a bad one raises ``UsageError`` (``UsageTypeError`` for a
value of the wrong type) naming the keyword and the fix, before anything
runs. The same ``RunConfig`` drives the in-process runner (``runner``) and,
pickled once, every hosting process of a shm or tcp run (``hosting.host``), so
both sides read one set of settings.

``build_world`` makes what a configuration describes: the engine, the world
communicator and one task per rank, every rank started. The runner builds
the whole world on an ``Engine``; a hosting process builds its block of
ranks on a ``HostedEngine``.

Rule: this module imports nothing that imports ``runner``, ``hosting.coordinator``
or ``hosting.host``; they import it (``tests/test_layers.py`` checks that the
package's imports form no cycle).
"""

from __future__ import annotations

import importlib
import inspect
import numbers
import os
import pickle
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from simcluster.transports.base import Transport
from simcluster.transports.memory import MemoryTransport

from .engine import schedule as _schedule, sync as _sync
from . import latency as _latency
from .collectives import check_algorithms
from .comm import Group
from .engine.settings import EngineSettings
from .engine.assembly import Engine, Task
from .errors import UsageError, UsageTypeError
from .trace import Trace

if TYPE_CHECKING:
    from .faults import Fault, FaultPlan

__all__ = ["KEYWORDS", "RunConfig", "World", "build_world", "check_names", "configure", "split"]

T = TypeVar("T")
TransportName = Literal["memory", "shm", "tcp", "mpi"]
Checks = Literal["strict", "off"]
Fidelity = Literal["message", "analytic"]
Serializer = Literal["msgpack", "pickle"]

SECRET_ENV: Final = "SIMCLUSTER_SECRET"
"""The shared secret of a multi-node run (``hosting.coordinator``); pickle across hosts requires it."""

_TRANSPORTS: dict[str, str] = {  # name -> "module:class", imported when a run asks for it
    "memory": "simcluster.transports.memory:MemoryTransport",
    "shm": "simcluster.transports.shm:ShmTransport",
    "tcp": "simcluster.transports.tcp:TcpTransport",
}


def is_multiprocess(transport: Transport) -> bool:
    """Whether ``transport`` connects hosting processes (shm, tcp and mpi all derive from tcp's)."""
    # Only a loaded tcp module can have made such a transport: looking it up instead of
    # importing it keeps `import simcluster` free of the socket transports.
    tcp = sys.modules.get("simcluster.transports.tcp")
    return tcp is not None and isinstance(transport, tcp.TcpTransport)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """The checked keywords of one run, and how its ranks are spread over processes.

    Picklable: a local hosting process receives it with the rank function.
    ``nprocs`` and ``per`` say how many processes host the ranks and how many
    ranks each hosts (contiguous blocks); a memory run has one process.
    """

    world_size: int
    transport: Transport
    latency: _latency.LatencyModel
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    schedule: Any = "batch"  # "batch", "shuffle", choices to replay, or explore's chooser
    eager_limit: int = 65536
    trace: bool | str | os.PathLike[str] | None = None
    checks: Checks = "strict"
    algorithms: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    compute: _sync.Compute | None = None  # run(compute="wall" or "replay:FILE"); None: off
    fidelity: Fidelity = "message"
    serializer: Serializer = "msgpack"
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None  # multi-node: resolved from $MASTER_ADDR when not given
    master_port: int | None = None
    name: str = "main"  # the rank function's name
    nprocs: int = 1  # processes hosting the ranks
    per: int = 0  # ranks per process (0: every rank)
    secret: str | None = None  # multi-node: the per-run secret an MPI job handed out ($SIMCLUSTER_SECRET else)
    shares: str = ""  # transport="mpi" with processes hosting no rank: this one's part (_mpi_job.shared)
    poll_cost: float = 1e-6  # virtual seconds a synchronous rank's fruitless Test/Iprobe costs
    faults: FaultPlan | None = None  # run(faults=...): crashes, slow ranks, cut links (simcluster.faults)

    @property
    def strict(self) -> bool:
        """``checks == "strict"``: verify buffers, report leaks."""
        return self.checks == "strict"

    @property
    def tracing(self) -> bool:
        """Whether the run records a trace."""
        return bool(self.trace)

    @property
    def multiprocess(self) -> bool:
        """Whether hosting processes run the ranks (shm and tcp: ``hosting.coordinator``)."""
        return is_multiprocess(self.transport)

    def block(self, proc: int) -> tuple[int, int]:
        """The world ranks ``[lo, hi)`` that process ``proc`` hosts."""
        per = self.per or self.world_size
        lo = proc * per
        return lo, min(self.world_size, lo + per)

    def digest(self) -> str:
        """A text all nodes of a multi-node run must agree on."""
        return (f"{self.name} world_size={self.world_size} procs={self.nprocs} "
                f"transport={self.transport.name} latency={self.latency.describe()} "
                f"seed={self.seed} eager_limit={self.eager_limit} strict={self.strict} "
                f"trace={self.tracing} algorithms={sorted(self.algorithms.items())} "
                f"serializer={self.serializer} schedule={self.schedule}"
                f" faults={'' if self.faults is None else self.faults.describe()}")


def split(world_size: int, procs: int) -> tuple[int, int]:
    """Return ``(processes used, ranks per process)``: contiguous blocks of ``ceil(W/procs)``.

    Fewer processes are used when the last ones would be empty (7 ranks on 4
    processes: 2, 2, 2, 1; 5 ranks on 4: 2, 2, 1 on 3 processes).
    """
    per = -(-world_size // procs)
    return -(-world_size // per), per


# ---- checking run()'s keywords ----


def configure(
    fn: object,
    world_size: int,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    transport: TransportName | Transport = "memory",
    procs: int | None = None,
    latency: _latency.LatencyModel | None = None,
    seed: int | None = 0,
    schedule: str | Sequence[int] = "batch",
    eager_limit: int = 65536,
    trace: bool | str | os.PathLike[str] | None = None,
    checks: Checks = "strict",
    algorithms: Mapping[str, str] | None = None,
    timeout: float | None = None,
    compute: str | None = None,
    fidelity: Fidelity = "message",
    serializer: Serializer = "msgpack",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    poll_cost: float = 1e-6,
    faults: FaultPlan | str | Sequence[Fault] | Fault | None = None,
) -> RunConfig:
    """Check ``fn`` and every keyword of ``run``; return the run's configuration.

    Its parameters after ``world_size`` are the keywords ``run`` takes
    (``KEYWORDS``); docs/run.md describes each.

    Raises:
        UsageError: a keyword has a value run() cannot take (UsageTypeError:
            one of the wrong type), before anything runs.
    """
    check_fn(fn)
    seed = check_keywords(world_size, eager_limit, checks, timeout, procs, transport, seed)
    check_trace(trace)
    check_fidelity(fidelity)
    check_poll_cost(poll_cost)
    forced = _checked(check_algorithms, algorithms or {})
    model = check_latency(latency)
    measured = check_compute(compute, world_size)
    hosts = place(transport, world_size, procs, nnodes, node_rank, master_addr, master_port)
    tp = make_transport(hosts.transport)
    multiprocess = is_multiprocess(tp)
    plan = check_faults(faults, world_size)
    check_nodes(serializer, hosts.nnodes, hosts.node_rank, procs, multiprocess)
    _checked(_schedule.check, schedule, tp.name if multiprocess else None)
    check_platform(model, world_size, tp.name, multiprocess, plan, fidelity)
    check_combinations(compute, measured, plan, hosts.transport, multiprocess, fidelity)
    nprocs, per, master_addr, master_port = check_layout(hosts, tp, world_size, procs, serializer)
    return RunConfig(
        world_size=world_size, transport=tp, latency=model, args=tuple(args),
        kwargs=dict(kwargs or {}), seed=seed, schedule=schedule, eager_limit=eager_limit,
        trace=trace, checks=checks, algorithms=forced, timeout=timeout, compute=measured,
        fidelity=fidelity, serializer=serializer, nnodes=hosts.nnodes, node_rank=hosts.node_rank,
        master_addr=master_addr, master_port=master_port,
        name=getattr(fn, "__qualname__", "main"), nprocs=nprocs, per=per, secret=hosts.secret,
        shares=hosts.shares, poll_cost=float(poll_cost), faults=plan)


def check_trace(trace: object) -> None:
    """Refuse a ``trace=`` that is not a bool, a path or None."""
    if trace is not None and not isinstance(trace, (bool, str, os.PathLike)):
        raise UsageTypeError(None, f"run(trace={trace!r})", "trace must be True, False, or a path "
                             "to write Chrome-trace JSON to")


def check_poll_cost(poll_cost: object) -> None:
    """Refuse a ``poll_cost=`` that is not a positive, finite number of virtual seconds."""
    if isinstance(poll_cost, bool) or not isinstance(poll_cost, (int, float)) or not 0 < poll_cost < float("inf"):
        raise UsageError(None, f"run(poll_cost={poll_cost!r})", "poll_cost must be a positive number "
                         "of virtual seconds (what a fruitless Test or Iprobe of a synchronous rank costs)",
                         "leave it out for 1e-6, or pass e.g. 1e-7")


def check_latency(latency: object) -> _latency.LatencyModel:
    """Return the run's latency model (``Zero`` for None), refusing what is not one."""
    model = _latency.Zero() if latency is None else latency
    if not isinstance(model, _latency.LatencyModel):
        raise UsageTypeError(None, f"run(latency={latency!r})", "expected a simcluster.latency "
                             "model such as sc.latency.AlphaBeta(1e-6, 1e-9)")
    return model


def check_compute(compute: str | None, world_size: int) -> _sync.Compute | None:
    """Return the run's measured compute (``engine.sync.parse_compute``), checked against its world."""
    measured = _checked(_sync.parse_compute, compute)
    if measured is not None:
        _checked(measured.check, world_size)
    return measured


@dataclass(frozen=True)
class Hosts:
    """Where a run's ranks are hosted: the keywords ``place`` settles."""

    transport: Any  # TransportName | Transport
    nnodes: int
    node_rank: int
    master_addr: str | None
    master_port: int | None
    secret: str | None = None
    shares: str = ""


def place(transport: Any, world_size: int, procs: int | None, nnodes: int, node_rank: int,
          master_addr: str | None, master_port: int | None) -> Hosts:
    """Settle where the ranks run: as given, except that ``transport="mpi"`` is placed by the
    processes of the mpiexec job hosting this one (``hosting.mpi_job``): here, on the memory
    transport, where one process hosts the ranks, else across the job on the MPI transport."""
    hosts = Hosts(transport, nnodes, node_rank, master_addr, master_port)
    if transport != "mpi":
        return hosts
    from .hosting import mpi_job as _mpi_job
    from simcluster.transports.mpi import MpiTransport

    placement = _mpi_job.place(world_size, procs, nnodes, node_rank, master_addr, master_port)
    shares = "" if placement is None else placement.shares
    if placement is None or placement.nnodes == 1 or placement.shares == "receive":
        return Hosts("memory", nnodes, node_rank, master_addr, master_port, shares=shares)
    return Hosts(MpiTransport(), placement.nnodes, placement.node_rank, placement.master_addr,
                 placement.master_port, placement.secret, shares)


def check_layout(hosts: Hosts, tp: Transport, world_size: int, procs: int | None,
                 serializer: str) -> tuple[int, int, str | None, int | None]:
    """``(processes used, ranks per process, node 0's address, its port)``: one process hosts
    every rank on an in-process transport, if this machine has the memory for them; a multi-node
    run without an mpiexec job needs its rendezvous address."""
    nprocs, per = 1, world_size
    if is_multiprocess(tp):
        nprocs, per = _layout(world_size, tp, procs, hosts.nnodes)
    else:
        check_memory(world_size)
    if hosts.nnodes > 1 and hosts.secret is None:
        return (nprocs, per, *_rendezvous(hosts.master_addr, hosts.master_port, hosts.nnodes, serializer))
    return nprocs, per, hosts.master_addr, hosts.master_port


def check_platform(model: _latency.LatencyModel, world_size: int, transport: str, multiprocess: bool,
                   plan: FaultPlan | None, fidelity: str) -> None:
    """Refuse a world the latency model's platform has no room for, and what a platform whose
    links flows share cannot run (``check_sharing``)."""
    try:
        model.check_world(world_size)
    except ValueError as exc:
        raise UsageError(None, f"run(world_size={world_size}, latency={model.describe()})",
                         str(exc), "give the platform more nodes") from None
    if model.sharing:
        check_sharing(model, transport, multiprocess, plan, fidelity)


def check_combinations(compute: str | None, measured: _sync.Compute | None, plan: FaultPlan | None,
                       transport: object, multiprocess: bool, fidelity: str) -> None:
    """Refuse keywords each valid alone that cannot go together."""
    if multiprocess and fidelity == "analytic":
        raise UsageError(None, f"run(transport={transport!r}, fidelity='analytic')", "analytic "
                         "collectives meet inside one process", "use transport='memory', or "
                         "fidelity='message'")
    if plan is not None and measured is not None and measured.replay is None:
        raise UsageError(None, f"run(compute={compute!r}, faults=...)", "a fault plan replays exactly "
                         "only when no measured compute time is charged", "leave compute= out (simcluster "
                         "mpirun: --faults already charges none), or replay a record: "
                         "compute='replay:FILE'")
    if multiprocess and measured is not None:
        raise UsageError(None, f"run(compute={compute!r}, transport={transport!r})", "compute= is "
                         "measured on the memory transport only", "leave it out, or use "
                         "transport='memory'")


def _checked(check: Callable[..., T], *args: Any) -> T:
    """``check(*args)``, its ValueError raised as a UsageError (``_usage``)."""
    try:
        return check(*args)
    except ValueError as exc:
        raise _usage(exc) from None


KEYWORDS: Final = tuple(name for name in inspect.signature(configure).parameters
                        if name not in ("fn", "world_size"))
"""The keywords ``run`` and ``launch`` take, in the order docs/run.md lists them."""


BYTES_PER_RANK: Final = 1300
"""The least memory a rank takes in one process (a rank blocked in ``recv``; docs/benchmarks.md)."""


def available_memory() -> int | None:
    """This machine's available memory in bytes (Linux's ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(world_size: int) -> None:
    """Refuse, before any rank starts, a world that cannot fit in this machine's memory.

    Only the engine's own least cost per rank (``BYTES_PER_RANK``) is
    counted, so a world refused here could not have run whatever it does;
    one that passes may still need more for what its ranks hold.

    Raises:
        UsageError: ``world_size * BYTES_PER_RANK`` is more than the memory available now.
    """
    available = available_memory()
    need = world_size * BYTES_PER_RANK
    if available is not None and need > available:
        raise UsageError(None, f"run(world_size={world_size})",
                         f"{world_size:,} ranks need at least {need / 2**30:.1f} GiB in one process "
                         f"({BYTES_PER_RANK:,} bytes each, the engine's own), and this machine has "
                         f"{available / 2**30:.1f} GiB available",
                         "run fewer ranks, or spread them over processes and hosts "
                         "(transport='tcp' with procs= and nnodes=)")


def check_names(call: str, keywords: Mapping[str, Any]) -> None:
    """Refuse a keyword ``call`` (``"run"`` or ``"launch"``) does not take, listing the valid ones."""
    for name in keywords:
        if name not in KEYWORDS and name != "_progress":
            raise UsageTypeError(None, f"{call}({name}=...)", f"unexpected keyword argument "
                                 f"{name!r}", f"valid: {', '.join(KEYWORDS)}")


def make_transport(transport: object) -> Transport:
    """The transport ``run(transport=...)`` names (or the Transport object it was given)."""
    if isinstance(transport, Transport):
        return transport
    where = _TRANSPORTS.get(transport) if isinstance(transport, str) else None
    if where is None:
        valid = ", ".join(sorted([*_TRANSPORTS, "mpi"]))
        cls = UsageError if isinstance(transport, str) else UsageTypeError
        raise cls(None, f"run(transport={transport!r})", "unknown transport", f"valid: {valid}, "
                  "or a simcluster.transports.base.Transport object")
    module, _, name = where.partition(":")
    factory: Callable[[], Transport] = getattr(importlib.import_module(module), name)
    return factory()


def check_fn(fn: object) -> None:
    """Refuse a rank function that is not a function (a coroutine object, a number, ...)."""
    if inspect.iscoroutine(fn):
        fn.close()
        raise UsageTypeError(None, "run(main(...))", "expected an async function, got a "
                             "coroutine object", "pass main, not main(...)")
    if not callable(fn):
        raise UsageTypeError(None, f"run({fn!r})", "expected a function taking comm first (async "
                             "def, or a plain def for a synchronous rank); got "
                             f"{type(fn).__name__}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_keywords(world_size: object, eager_limit: object, checks: object, timeout: object,
                   procs: object, transport: object, seed: object = 0) -> int:
    """Check the keywords every run takes; return the seed as an int (None means 0).

    A run must be reproducible, so ``seed=None`` is the default seed, not a fresh
    random one; ``sc.testing.explore`` is the way to try many schedules.
    """
    if not _is_int(world_size) or world_size < 1:  # type: ignore[operator]
        cls = UsageError if _is_int(world_size) else UsageTypeError
        raise cls(None, f"run(world_size={world_size!r})", "world_size must be an int >= 1",
                  "pass the number of virtual ranks")
    if not _is_int(eager_limit) or eager_limit < 0:  # type: ignore[operator]
        cls = UsageError if _is_int(eager_limit) else UsageTypeError
        raise cls(None, f"run(eager_limit={eager_limit!r})", "eager_limit must be an int >= 0 "
                  "(bytes)")
    if checks not in ("strict", "off"):
        raise UsageError(None, f"run(checks={checks!r})", "checks must be 'strict' or 'off'")
    if timeout is not None:
        op = f"run(timeout={timeout!r})"
        problem = "timeout must be a positive number of seconds"
        fix = "pass a number such as timeout=5, or None for no limit"
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
            raise UsageTypeError(None, op, problem, fix)
        if not float(timeout) > 0:  # (NaN too)
            raise UsageError(None, op, problem, fix)
    if procs not in (None, 1) and (transport == "memory" or isinstance(transport, MemoryTransport)):
        raise UsageError(None, f"run(procs={procs!r})", "the memory transport hosts every rank in "
                         "this process", "use procs=1, or transport='shm'/'tcp' for several "
                         "processes")
    if procs is not None and (not _is_int(procs) or procs < 1):  # type: ignore[operator]
        cls = UsageError if _is_int(procs) else UsageTypeError
        raise cls(None, f"run(procs={procs!r})", "procs must be an int >= 1 (OS processes)")
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise UsageTypeError(None, f"run(seed={seed!r})", "seed must be an int", "pass an integer "
                             "such as seed=1, or leave it out for the default (0)")
    return int(seed)


def check_nodes(serializer: object, nnodes: object, node_rank: object, procs: object,
                multiprocess: bool) -> None:
    """Check the keywords of a run on several processes or hosts."""
    if serializer not in ("msgpack", "pickle"):
        raise UsageError(None, f"run(serializer={serializer!r})", "serializer must be 'msgpack' "
                         "or 'pickle'")
    if not _is_int(nnodes) or nnodes < 1:  # type: ignore[operator]
        cls = UsageError if _is_int(nnodes) else UsageTypeError
        raise cls(None, f"run(nnodes={nnodes!r})", "nnodes must be an int >= 1")
    if nnodes > 1 and not multiprocess:  # type: ignore[operator]
        raise UsageError(None, f"run(nnodes={nnodes})", "several nodes need transport='tcp'")
    if nnodes > 1 and procs is not None:  # type: ignore[operator]
        raise UsageError(None, f"run(procs={procs!r}, nnodes={nnodes})", "with several nodes each "
                         "node process hosts its own block of ranks", "leave procs out")
    if not _is_int(node_rank) or not 0 <= node_rank < nnodes:  # type: ignore[operator]
        cls = UsageError if _is_int(node_rank) else UsageTypeError
        raise cls(None, f"run(node_rank={node_rank!r})", f"node_rank must be in range({nnodes})")


def check_sharing(model: Any, transport: str, multiprocess: bool, plan: Any, fidelity: str) -> None:
    """Refuse what a platform whose links flows share cannot run (docs/platforms.md): on several
    hosting processes, a link of latency 0 (each process hears of the others' flows a lookahead
    before they join their links)."""
    if multiprocess and not model.lookahead() > 0:
        raise UsageError(None, f"run(latency={model.describe()}, transport={transport!r}, a link of "
                         "latency 0)", "on several hosting processes, a platform whose links flows "
                         "share needs every link's latency > 0 (each process hears of the others' flows "
                         "before they join their links)",
                         "use transport='memory', or make the platform with sharing=False")


def check_faults(faults: object, world_size: int) -> FaultPlan | None:
    """Return the run's fault plan (``simcluster.faults``), checked against its world size."""
    if faults is None:
        return None
    from .faults import FaultPlan  # only runs with faults load it

    try:
        plan = FaultPlan.of(faults)  # type: ignore[arg-type]
        if plan is not None:
            plan.check(world_size)
    except TypeError as exc:
        raise UsageTypeError(None, "run(faults=...)", str(exc), "see docs/faults.md") from None
    except ValueError as exc:
        raise UsageError(None, "run(faults=...)", str(exc), "see docs/faults.md") from None
    if plan is not None and not plan.faults and not plan.count_calls:
        return None  # an empty plan is no plan: it changes nothing, and refuses nothing
    return plan


def check_fidelity(fidelity: object) -> None:
    """Refuse a fidelity other than ``"message"`` and ``"analytic"``."""
    if fidelity not in ("message", "analytic"):
        raise UsageError(None, f"run(fidelity={fidelity!r})", "unknown fidelity; valid: "
                         "'analytic' (each collective resolves in one step from its algorithm's "
                         "cost formula), 'message' (every message simulated)")


def _layout(world_size: int, transport: Transport, procs: int | None,
            nnodes: int) -> tuple[int, int]:
    """``(processes used, ranks per process)`` of a shm or tcp run."""
    if nnodes > 1 and transport.name == "shm":
        raise UsageError(None, f"run(transport='shm', nnodes={nnodes})", "shared memory does not "
                         "reach other hosts", "use transport='tcp'")
    if nnodes > 1:
        count = nnodes
    else:
        count = procs if procs is not None else min(world_size, os.cpu_count() or 1)
    used, per = split(world_size, count)
    if nnodes > 1 and used != nnodes:
        raise UsageError(None, f"run(nnodes={nnodes})", f"{world_size} ranks in blocks of {per} "
                         f"leave some nodes without ranks", f"use a world size of at least {nnodes}")
    return used, per


def _rendezvous(master_addr: str | None, master_port: object, nnodes: int,
                serializer: str) -> tuple[str, int]:
    """Node 0's address of a multi-node run: the keywords, else ``MASTER_ADDR``/``MASTER_PORT``."""
    addr = master_addr or os.environ.get("MASTER_ADDR")
    port_text = master_port if master_port is not None else os.environ.get("MASTER_PORT")
    if not addr or port_text is None:
        raise UsageError(None, f"run(nnodes={nnodes})", "several nodes need the rendezvous "
                         "address", "pass master_addr= and master_port= (or --master-addr/"
                         "--master-port, or set MASTER_ADDR and MASTER_PORT)")
    try:
        port = int(port_text)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise UsageError(None, f"run(master_port={port_text!r})", "the master port must be an "
                         "int") from None
    if serializer == "pickle" and not os.environ.get(SECRET_ENV):
        raise UsageError(None, f"run(serializer='pickle', nnodes={nnodes})", "pickle across hosts "
                         "needs a real shared secret, or anyone reaching the master port could "
                         "run code here", f"set the same {SECRET_ENV} on every node")
    return str(addr), port


def _usage(exc: ValueError | TypeError) -> UsageError:
    """The same error as a UsageError, for checks of other modules that raise plain ValueError.

    Their messages have the shape ``op(args): problem; fix``; the text stays as it was.
    """
    text = str(exc)
    cut = _outside_brackets(text, ": ")
    op, rest = (text[:cut], text[cut + 2:]) if cut >= 0 else ("run", text)
    cut = _outside_brackets(rest, "; ")
    problem, fix = (rest[:cut], rest[cut + 2:]) if cut >= 0 else (rest, "")
    cls = UsageTypeError if isinstance(exc, TypeError) else UsageError
    error = cls(None, op, problem, fix)
    if str(error) != text:  # not of that shape after all: keep the text whole
        error = cls(None, op, rest)
    return error


def _outside_brackets(text: str, separator: str) -> int:
    """The index of the first ``separator`` outside brackets and quotes in ``text``, or -1."""
    depth = 0
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(separator, i):
            return i
    return -1


# ---- building the world ----


@dataclass
class World:
    """What ``build_world`` made: the engine, the world communicator, the ranks hosted here."""

    engine: Engine
    group: Group
    tasks: list[Task]  # the tasks of the ranks hosted here, in rank order


def model_rng(seed: int) -> random.Random:
    """The random generator a latency model binds with (jitter), from the run's seed."""
    return random.Random(f"latency:{seed}")


def _mpi_world(comm: Any) -> Any:
    """simcluster.MPI's COMM_WORLD over the world ``comm`` (the facade loads on first use)."""
    from .MPI._comm import world_of
    return world_of(comm)


def build_world(config: RunConfig, fn: Callable[..., Any], *, transport: Transport | None = None,
                block: tuple[int, int] | None = None) -> World:
    """Make the engine, the world communicator and the rank tasks of ``config``; start every rank.

    ``block=None``: every rank, on an ``Engine`` over ``config.transport`` (the
    memory transport's run). ``block=(lo, hi)``: world ranks ``[lo, hi)`` of a
    hosting process, on a ``HostedEngine`` over ``transport`` (that process's
    own, bound to its peers). Each rank runs ``fn(comm, *config.args,
    **config.kwargs)``. If a rank cannot start, the engine is closed and the
    error raised.
    """
    w = config.world_size
    ports = config.latency.bind(w, model_rng(config.seed))
    if config.faults is not None and config.faults.shapes_messages:
        from .faults import ShapedPorts

        ports = ShapedPorts(ports, config.faults)
    pickled = config.serializer == "pickle"
    settings = EngineSettings(
        seed=config.seed, eager_limit=config.eager_limit, strict=config.strict,
        timeout=config.timeout, model=config.latency, schedule=config.schedule,
        algorithms=dict(config.algorithms), compute=config.compute, poll_cost=config.poll_cost,
        fidelity=config.fidelity, dumps=pickle.dumps if pickled else None,
        loads=pickle.loads if pickled else None, faults=config.faults)
    engine: Engine
    if block is None:
        lo, hi = 0, w
        trace: Trace | None = Trace(w) if config.tracing else None
        engine = Engine(w, transport or config.transport, ports, settings, trace)
    else:
        lo, hi = block
        from .hosting.hosted_engine import HostedEngine  # only hosting processes need these
        from .hosting.views import HostTrace as _HostTrace
        from simcluster.transports.tcp import TcpTransport
        if not isinstance(transport, TcpTransport):
            raise TypeError(f"build_world(block={block!r}): a hosting process needs its own "
                            f"shm or tcp transport, got {transport!r}")
        engine = HostedEngine(w, transport, ports, lo, hi, config.per or w, settings,
                              _HostTrace(w) if config.tracing else None)
    tasks: list[Any] = [None] * w  # the world's tasks by rank; other processes' stay None
    world = Group(engine, 0, list(range(w)), "world", tasks)
    local: list[Task] = []
    for rank in range(lo, hi):
        task = tasks[rank] = Task(rank, None)  # type: ignore[arg-type]
        local.append(task)
    plain = not _sync.is_async(fn)  # a plain function gets simcluster.MPI's COMM_WORLD
    try:
        for task in local:
            comm = world.member(task.rank)
            engine.start_rank(task, comm, fn, config.args, config.kwargs,
                              handle=_mpi_world(comm) if plain else None)
    except BaseException:
        engine.close()
        raise
    return World(engine, world, local)
