"""``simcluster torchrun``: run a script written for torchrun once per virtual rank, unmodified.

``simcluster mpirun`` runs the script (``mpirun.Session``: each rank runs it
as ``__main__`` with its own globals and ``sys.argv``, output in virtual-time
order, the exit status from ``sys.exit`` and errors, deadlock reports naming
the script's lines); this module adds what torchrun gives its workers:

- Each rank runs on a thread of its own (``engine.sync.ThreadRank``: torch keeps
  per-process state in C++ thread-locals) inside one
  ``simcluster.torch._session.Session``, which swaps that rank's c10d globals
  and environment in whenever it resumes. The launcher's own per-rank state
  (``__main__``, ``sys.argv``) is swapped in after it.
- The environment torchrun sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
  ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``GROUP_RANK``,
  ``ROLE_RANK``, ...) is written into each rank's own environment only.
- ``--nnodes N`` runs every node's agent here at once: ``N * --nproc-per-node``
  ranks, rank ``r`` on node ``r // nproc_per_node`` with the variables that
  node's agent gives it, the node's host name from ``socket.gethostname()``
  and a pid of its own (``simcluster._identity``). A platform given as the
  latency model must place ranks on the same nodes (``shape_refused``).
- ``init_process_group`` and ``new_group`` with a real backend (``"gloo"``,
  ``"nccl"``, ``"cpu:gloo,cuda:nccl"``, none) make a ``"simcluster"``
  group instead: ``_BackendMap`` wraps c10d's ``_new_process_group_helper``,
  which every group creation goes through (and ``_get_default_timeout``,
  which would warn that NCCL is not compiled in), for the run only. The
  first time each backend name is mapped, one line on stderr says so. A
  group asked for as gloo (or with torch's default) still reports that name
  from ``dist.get_backend`` (``REPORTED``), so torch's gloo-only
  ``monitored_barrier`` runs on it.

Rule 1: everything swapped in for a run is swapped back when it ends, also
when it fails (the session, the group helper, the environment), and the
folder of the ranks' ``TORCHELASTIC_ERROR_FILE`` is removed.
Rule 2: only the memory transport: thread ranks and the in-memory rendezvous
live in this process, so ``--transport shm|tcp`` is refused, not approximated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Final, TextIO

from . import _identity, mpirun

PROG: Final = "simcluster torchrun"
MAPPED: Final = ("gloo", "nccl", "ucc", "xccl", "undefined", "simcluster")
"""Backend names that run on simcluster's backend under ``simcluster torchrun``."""
REPORTED: Final = ("gloo", "undefined")
"""Backend names a group made under ``simcluster torchrun`` still reports from
``dist.get_backend`` (torch's default reports ``"undefined"``); groups made with
the others (nccl, ...) report ``"simcluster"``: nothing nccl-specific runs on CPU."""
MASTER_ADDR: Final = "127.0.0.1"
MASTER_PORT: Final = 29500
SIGNALS: Final = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
"""torchrun's default ``--signals-to-handle`` (``TORCHELASTIC_SIGNALS_TO_HANDLE``)."""


# ---- command line ----


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``torchrun`` subcommand to the ``simcluster`` command's subparsers."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "torchrun", help="run a torchrun SCRIPT once per virtual rank, unmodified",
        description="Run a script written for torchrun on virtual ranks of one process: each "
                    "rank gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, ...), "
                    "init_process_group with any backend (gloo, nccl, ...) runs on simcluster, "
                    "output comes in virtual-time order, the exit status is the ranks'.")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node",
                        default="1", metavar="N",
                        help="number of ranks on each node (default 1, as torchrun)")
    parser.add_argument("--nnodes", default="1", metavar="N|MIN:MAX",
                        help="number of nodes, all run in this process (default 1); MIN:MAX runs "
                             "MAX, as an elastic rendezvous that every node joins at once")
    parser.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0,
                        help="0 or left out: every node runs here, so there is no other to start")
    parser.add_argument("--standalone", action="store_true",
                        help="accepted, as torchrun's: the rendezvous is in memory anyway")
    parser.add_argument("--master-addr", "--master_addr", dest="master_addr", default=None,
                        help=f"the MASTER_ADDR ranks see (default {MASTER_ADDR}, localhost with "
                             "--standalone; nothing listens)")
    parser.add_argument("--master-port", "--master_port", dest="master_port", type=int,
                        default=MASTER_PORT,
                        help=f"the MASTER_PORT ranks see (default {MASTER_PORT}; nothing listens)")
    parser.add_argument("--rdzv-id", "--rdzv_id", dest="rdzv_id", default=None,
                        help="the TORCHELASTIC_RUN_ID ranks see (default none; with --standalone "
                             "a UUID made from --seed)")
    parser.add_argument("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", default=None,
                        help="accepted, as torchrun's: the rendezvous is in memory")
    parser.add_argument("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", default=None,
                        help="accepted, as torchrun's: the rendezvous is in memory")
    parser.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0,
                        metavar="N", help="restart the whole world up to N times after a failed "
                                          "attempt, as torchelastic does (default 0)")
    parser.add_argument("--signals-to-handle", "--signals_to_handle", dest="signals_to_handle",
                        default=SIGNALS, metavar="SIGNALS",
                        help=f"the TORCHELASTIC_SIGNALS_TO_HANDLE ranks see (default {SIGNALS})")
    parser.add_argument("--fake", action="store_true",
                        help="shape-only run: every floating-point tensor is a FakeTensor (shape, "
                             "dtype, device, no data); collectives are timed from their sizes; "
                             "a value read from one (loss.item()) is an error (docs/predict.md)")
    parser.add_argument("--report", action="store_true",
                        help="after the run, print the step report on stderr: step time, tokens/s "
                             "per GPU, MFU, peak memory per rank, compute / exposed communication "
                             "/ idle (a step ends at each optimizer.step(); docs/predict.md)")
    parser.add_argument("--tokens-per-step", "--tokens_per_step", dest="tokens_per_step",
                        type=int, default=None, metavar="N",
                        help="with --report: tokens each rank processes per step (else what the "
                             "script gives simcluster.predict.report.tokens)")
    parser.add_argument("--flops-per-token", "--flops_per_token", dest="flops_per_token",
                        type=float, default=None, metavar="F",
                        help="with --report: model FLOPs per token for MFU (else the script's "
                             "simcluster.predict.report.model_flops, else 6 x parameters)")
    mpirun.add_script_options(
        parser, transport="memory (the only one: torch ranks are threads of this process)",
        prepend=("--prepend-rank", "--prepend_rank"), module=("-m", "--module"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simcluster torchrun ARGV``; return the exit status."""
    parser = argparse.ArgumentParser(prog="simcluster")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["torchrun", *(sys.argv[1:] if argv is None else argv)])
    return run_args(args)


def parse_nnodes(text: str) -> int | str:
    """The number of nodes ``--nnodes`` asks for (``N``, or ``MIN:MAX``: MAX), or what is wrong with it.

    Every node runs in this process and joins the rendezvous at once, so an
    elastic ``MIN:MAX`` rendezvous closes with MAX nodes, as torchrun's does
    when MAX agents join.
    """
    parts = text.split(":")
    counts = [int(part) for part in parts if part.strip().isdigit()]
    if len(parts) > 2 or len(counts) != len(parts) or min(counts, default=0) < 1:
        return (f"--nnodes {text}: give the number of nodes as a positive integer (--nnodes 2) or "
                "an elastic range MIN:MAX (--nnodes 1:4, which runs 4 nodes: every node runs in "
                "this process and joins at once)")
    if counts[0] > counts[-1]:
        return f"--nnodes {text}: MIN is above MAX; write it as MIN:MAX, e.g. --nnodes 1:4"
    return counts[-1]


def _options_refused(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, as a message for the user; None when they can run."""
    nproc = str(args.nproc_per_node)
    try:
        ranks = int(nproc)
    except ValueError:
        ranks = 0
    if ranks < 1:
        return (f"--nproc-per-node {nproc}: give the number of ranks as a positive integer, "
                "e.g. --nproc-per-node 4 (ranks are virtual: their number does not depend on "
                "this machine's CPUs or GPUs)")
    nodes = parse_nnodes(str(args.nnodes))
    if isinstance(nodes, str):
        return nodes
    if args.node_rank != 0:
        if nodes == 1:
            return f"--node-rank {args.node_rank}: there is one node, node 0; leave --node-rank out"
        return (f"--node-rank {args.node_rank}: simcluster torchrun runs all {nodes} nodes in this "
                f"one process (node ranks 0 to {nodes - 1}), so there is no single node to start; "
                "leave --node-rank out")
    if args.standalone and nodes > 1:
        return (f"--standalone --nnodes {args.nnodes}: --standalone is torchrun's single-node "
                "mode (its rendezvous is on localhost); leave out --standalone to run several "
                "nodes")
    if args.max_restarts < 0:
        return f"--max-restarts {args.max_restarts}: give how many restarts to allow, 0 or more"
    if not args.report and (args.tokens_per_step is not None or args.flops_per_token is not None):
        return "--tokens-per-step and --flops-per-token are options of the step report: add --report"
    if args.tokens_per_step is not None and args.tokens_per_step < 1:
        return f"--tokens-per-step {args.tokens_per_step}: give the tokens each rank processes per step, >= 1"
    if args.flops_per_token is not None and not args.flops_per_token > 0:
        return f"--flops-per-token {args.flops_per_token}: give the model FLOPs per token, > 0"
    if args.transport != "memory":
        return (f"--transport {args.transport}: torch ranks run as threads of this process "
                "(torch keeps per-rank state in C++ thread-locals) and rendezvous in its memory, "
                "so only the memory transport can host them; leave --transport out (for mpi4py "
                "scripts over shm or tcp, use simcluster mpirun)")
    return None


def run_args(args: argparse.Namespace) -> int:
    """Run what ``simcluster torchrun`` was told (``add_parser``'s namespace); return the exit status."""
    refused = _options_refused(args)
    if refused is not None:
        print(f"{PROG}: {refused}", file=sys.stderr)
        return 2
    keywords = mpirun.script_keywords(args, PROG, ("trace", "compute"))
    if keywords is None:
        return 2
    nnodes = parse_nnodes(str(args.nnodes))
    assert isinstance(nnodes, int)  # checked by _options_refused
    return torchrun(args.script, int(args.nproc_per_node), args.args, module=args.as_module,
                    nnodes=nnodes, rdzv_backend=args.rdzv_backend,
                    prepend_rank=args.prepend_rank, master_addr=args.master_addr,
                    master_port=args.master_port, run_id=args.rdzv_id,
                    standalone=args.standalone, signals_to_handle=args.signals_to_handle,
                    summary=args.summary, max_restarts=args.max_restarts, shared=args.shared,
                    private=args.private, fake=args.fake, report=args.report,
                    tokens_per_step=args.tokens_per_step, flops_per_token=args.flops_per_token,
                    **keywords)


# ---- the launcher ----


def rank_environment(rank: int, nproc_per_node: int, *, nnodes: int = 1,
                     master_addr: str = MASTER_ADDR,
                     master_port: int = MASTER_PORT, run_id: str = "none",
                     signals_to_handle: str = SIGNALS, error_file: str | None = None,
                     restart_count: int = 0, max_restarts: int = 0) -> dict[str, str]:
    """The environment variables torchrun gives worker ``rank`` of ``nnodes`` nodes of ``nproc_per_node``.

    As torchrun's agents (torch 2.13, ``LocalElasticAgent._start_workers``
    and ``_assign_worker_ranks``) set them for one role: node ``GROUP_RANK``
    is ``rank // nproc_per_node`` and holds ranks ``GROUP_RANK * nproc_per_node``
    on, ``LOCAL_RANK`` is ``rank % nproc_per_node``, ``ROLE_RANK`` is
    ``RANK``. ``OMP_NUM_THREADS`` is ``1`` when a node has several ranks and
    this process has none set (else this process's),
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` this process's or ``1``, and
    ``TORCHELASTIC_ERROR_FILE`` is ``error_file`` when given.
    """
    local = str(nproc_per_node)
    world = str(nnodes * nproc_per_node)
    env = {
        "RANK": str(rank), "LOCAL_RANK": str(rank % nproc_per_node),
        "GROUP_RANK": str(rank // nproc_per_node), "ROLE_RANK": str(rank),
        "ROLE_NAME": "default", "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": local,
        "ROLE_WORLD_SIZE": world, "GROUP_WORLD_SIZE": str(nnodes), "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port), "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": str(restart_count), "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": signals_to_handle,
    }
    threads = os.environ.get("OMP_NUM_THREADS", "1" if nproc_per_node > 1 else None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    if error_file is not None:
        env["TORCHELASTIC_ERROR_FILE"] = error_file
    return env


def restart_trace_path(path: str | os.PathLike[str], attempt: int) -> str:
    """Where restart ``attempt``'s trace goes: ``out.json`` -> ``out.restart1.json`` (the first keeps ``out.json``)."""
    root, ext = os.path.splitext(os.fspath(path))
    return f"{root}.restart{attempt}{ext}"


def standalone_run_id(seed: int) -> str:
    """The ``TORCHELASTIC_RUN_ID`` of ``--standalone``: a UUID as torchrun's, made from ``seed``.

    torchrun makes a random one; the same seed gives the same output here.
    """
    return str(uuid.UUID(int=random.Random(f"torchrun {seed}").getrandbits(128), version=4))


def torchrun(script: str, nproc_per_node: int, argv: Sequence[str] = (), *, module: bool = False,
             nnodes: int = 1, rdzv_backend: str | None = None,
             prepend_rank: bool = False, master_addr: str | None = None,
             master_port: int = MASTER_PORT, run_id: str | None = None, standalone: bool = False,
             signals_to_handle: str = SIGNALS, summary: bool = False, max_restarts: int = 0,
             shared: Sequence[str] = (), private: Sequence[str] = (), fake: bool = False,
             report: bool = False, tokens_per_step: int | None = None,
             flops_per_token: float | None = None, **keywords: Any) -> int:
    """Run ``script`` (a path, or a module name with ``module=True``) on ``nnodes`` x ``nproc_per_node`` ranks.

    Every rank runs the script as ``__main__`` with torchrun's environment
    variables for that rank (``rank_environment``), its node's host name
    (``node0``, ``node1``, ...: rank ``r`` is on node ``r // nproc_per_node``)
    and a pid of its own (``simcluster._identity``), and
    ``torch.distributed.init_process_group`` with any of gloo, nccl, ucc,
    xccl, a ``"device:backend,..."`` string of those, or no backend runs on
    simcluster's backend. Lines go to this process's ``sys.stdout`` /
    ``sys.stderr`` in virtual-time order (ties by rank); ``keywords``
    (``latency``, ``seed``, ``trace``, ``timeout``, ``compute``, ...) go to
    ``simcluster.run``. ``master_addr`` and ``run_id`` default to torchrun's:
    ``127.0.0.1`` and ``none``, or with ``standalone`` ``localhost`` and a
    UUID (``standalone_run_id``); with an ``rdzv_backend`` other than
    ``"static"`` (``"c10d"``, ...) ``master_addr`` defaults to node 0's host
    name, as the c10d rendezvous publishes its first agent's. A latency
    model that places ranks on nodes (a platform, ``Hierarchical``) must
    place them as the nodes here do (``shape_refused``). Each rank's ``TORCHELASTIC_ERROR_FILE``
    (where ``@record`` writes the error that ends it) lies in a temporary
    folder removed when the run ends. ``summary`` adds one line on stderr
    after a run that finished: its virtual time, wall time, messages and bytes.
    ``shared`` / ``private``: as ``mpirun``'s (each rank imports its own copy
    of pure-Python packages, accelerate and ignite among them).
    ``fake``: a shape-only run (``--fake``; ``simcluster.torch._fake``).
    ``report``: print the step report on stderr after a run that finished
    (``--report``; ``simcluster.predict.report``), with ``tokens_per_step`` and
    ``flops_per_token`` as given.

    ``max_restarts``: after an attempt that fails (a rank raised, a crash of
    the fault plan, a nonzero exit), start the whole world again, as
    torchelastic's agent does: the same ranks, ``TORCHELASTIC_RESTART_COUNT``
    one more, virtual time from 0 again; the fault plan (``faults``) applies
    to the first attempt only, as a crash happens once.

    Returns:
        The exit status, as ``simcluster mpirun``'s: 0 when every rank
        finished; else the first nonzero ``sys.exit`` code by virtual time
        (ties by rank), 1 for an exception (its traceback printed as the
        rank's stderr), a deadlock or a timeout (the report printed), 2 when
        the script, torch or the options are refused.
    """
    refused = shape_refused(nnodes, nproc_per_node, keywords.get("latency"))
    if refused is not None:
        print(f"{PROG}: {refused}", file=sys.stderr)
        return 2
    try:
        import simcluster.torch  # noqa: F401 - registers the "simcluster" backend
    except ImportError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if keywords.get("transport", "memory") != "memory":
        print(f"{PROG}: transport={keywords['transport']!r}: torch ranks run as threads of this "
              "process, so only the memory transport can host them; leave transport out",
              file=sys.stderr)
        return 2
    spec = mpirun.script_spec(script, list(argv), module, PROG, shared=shared, private=private)
    if isinstance(spec, int):
        return spec
    spec["records"] = None
    if master_addr is None:
        dynamic = rdzv_backend is not None and rdzv_backend.lower() != "static"
        master_addr = ("localhost" if standalone else _identity.host_name(0) if dynamic
                       else MASTER_ADDR)
    if run_id is None:
        run_id = standalone_run_id(keywords.get("seed") or 0) if standalone else "none"
    errors = tempfile.mkdtemp(prefix="torchelastic_")  # torchrun's log folder, as it names it
    try:
        attempt = 0
        while True:
            env = {}
            for rank in range(nnodes * nproc_per_node):
                node, local = divmod(rank, nproc_per_node)
                # each agent (node) has a log folder of its own; its workers' by local rank
                agent = errors if nnodes == 1 else os.path.join(errors, _identity.host_name(node))
                folder = os.path.join(agent, f"attempt_{attempt}", str(local))
                os.makedirs(folder)
                env[rank] = rank_environment(
                    rank, nproc_per_node, nnodes=nnodes, master_addr=master_addr,
                    master_port=master_port,
                    run_id=run_id, signals_to_handle=signals_to_handle,
                    error_file=os.path.join(folder, "error.json"), restart_count=attempt,
                    max_restarts=max_restarts)
            session = _TorchrunSession(spec, nnodes * nproc_per_node, prepend_rank, sys.stdout,
                                       sys.stderr, env)
            session.ranks_per_node = nproc_per_node  # each rank's host name: its node's
            session.summary = summary
            session.attempt = attempt
            session.fake = fake
            session.report = (tokens_per_step, flops_per_token) if report else None
            status = session.launch(keywords)
            if session.step_report is not None:
                print(session.step_report.table(), file=sys.stderr)
            if status in (0, 2) or attempt == max_restarts:  # 2: the script or options refused
                return status
            attempt += 1
            print(f"{PROG}: attempt {attempt - 1} failed with exit status {status}; restarting "
                  f"every rank (restart {attempt} of {max_restarts})", file=sys.stderr)
            keywords = {k: v for k, v in keywords.items() if k != "faults"}  # a crash happens once
            if isinstance(keywords.get("trace"), (str, os.PathLike)):  # each attempt's trace is kept
                keywords["trace"] = restart_trace_path(keywords["trace"], attempt)
    finally:
        shutil.rmtree(errors, ignore_errors=True)


def shape_refused(nnodes: int, nproc_per_node: int, latency: Any) -> str | None:
    """What is wrong when ``latency`` places ranks on nodes other than torchrun's; None when it agrees.

    torchrun puts rank ``r`` on node ``r // nproc_per_node``; a platform (or
    ``Hierarchical``) on ``r // ranks_per_node``. They agree when
    ``nproc_per_node`` is the platform's ranks per node and the nodes fit,
    or when one node's ranks fit on the platform's first node.
    """
    from . import platform as _platform

    model = latency
    if isinstance(model, str):
        try:
            model = _platform.parse(model)
        except ValueError:
            return None  # run() reports it
    shape = _identity.model_shape(model)
    if shape is None:
        return None
    per, nodes = shape
    fits = (nnodes == 1 and nproc_per_node <= per) or (
        nproc_per_node == per and (nodes is None or nnodes <= nodes))
    if fits:
        return None
    describe = getattr(model, "describe", None)
    name = describe() if callable(describe) else repr(model)
    has = f"{nodes} nodes of {per} ranks" if nodes is not None else f"nodes of {per} ranks"
    fix = (f"--nnodes {nodes} --nproc-per-node {per}" if nodes is not None
           else f"--nproc-per-node {per}")
    return (f"--nnodes {nnodes} --nproc-per-node {nproc_per_node}: the latency model {name} has "
            f"{has} (rank r on node r // {per}), so these ranks would not be on the nodes "
            f"torchrun gives them (LOCAL_RANK, GROUP_RANK, host name); give {fix}, or fewer "
            "nodes of that size")


def _torch_script_rank(comm: Any, spec: dict[str, Any]) -> int:
    """The rank function: ``mpirun``'s, on a thread rank (torch needs a real thread per rank),
    named as its process's main thread is (``_identity``)."""
    threading.current_thread().name = "MainThread"
    return mpirun.script_rank(comm, spec)


_torch_script_rank.__simcluster_stack__ = "thread"  # type: ignore[attr-defined]


class _TorchrunSession(mpirun.Session):
    """``mpirun``'s session, with a torch session around the run and torchrun's environment."""

    prog = PROG

    def __init__(self, spec: dict[str, Any], world_size: int, prepend: bool, out: TextIO,
                 err: TextIO, env: dict[int, dict[str, str]]) -> None:
        super().__init__(spec, world_size, prepend, out, err)
        self.env = env
        self.attempt = 0  # the restarts before this attempt (--max-restarts)
        self.torch_session: Any = None  # simcluster.torch._session.Session while the ranks run
        self.envs = None  # the torch session swaps each rank's environment in
        self.fake = False  # --fake: a shape-only run
        self.shapes: Any = None  # simcluster.torch._fake.Shapes while a shape-only run goes on
        self.report: tuple[int | None, float | None] | None = None  # --report: its options
        self.recording: Any = None  # simcluster.torch._report.Recording while a reported run goes on
        self.step_report: Any = None  # the StepReport of the run, once it finished

    def run_ranks(self, keywords: dict[str, Any]) -> None:
        from simcluster.torch._session import Session

        from . import runner

        from simcluster.torch._fake import Shapes

        from simcluster.torch._report import Recording

        shapes = Shapes() if self.fake else contextlib.nullcontext()
        recording = Recording() if self.report is not None else None
        with Session(self.world_size) as torch_session, _BackendMap(self, torch_session), shapes, \
                recording or contextlib.nullcontext():
            self.torch_session = torch_session
            self.shapes = shapes if self.fake else None
            self.recording = recording
            try:
                self.result = runner.run(_torch_script_rank, self.world_size, args=(self.spec,),
                                         **keywords)
            finally:
                self.torch_session = self.shapes = self.recording = None
        if recording is not None and self.report is not None:
            tokens_per_step, flops_per_token = self.report
            self.step_report = recording.report(tokens_per_step=tokens_per_step,
                                                flops_per_token=flops_per_token,
                                                trace=keywords.get("trace"))
        trace = self.result.trace
        if self.attempt and trace is not None:  # a restarted world: mark it where it starts
            for rank in range(self.world_size):
                trace.span(rank, "restart", 0.0, 0.0, fault="restart", attempt=self.attempt)
            if isinstance(keywords.get("trace"), (str, os.PathLike)):
                trace.save(keywords["trace"])

    def start_rank(self, task: Any) -> mpirun.RankState:
        from .engine import sync as _sync

        state = self.rank_state(task)
        self.torch_session.start_rank()  # swaps the rank's c10d globals and environment in
        if self.shapes is not None:
            self.shapes.enter(task.rank)
        from .torch import _gpu

        gpu = _gpu.attach(task)  # --compute gpu:DEVICE: the rank's ops timed on the modelled GPU,
        if gpu is not None:  # for the rest of the rank's thread (above its ShapeOnlyMode)
            gpu.__enter__()
        if self.recording is not None:  # --report: its steps and memory, above the clock
            self.recording.rank(task.rank, gpu).__enter__()
        torch_enter = task.enter

        def enter() -> None:
            torch_enter()
            state.enter()

        _sync.on_switch(enter, state.leave)
        os.environ.update(self.env[task.rank])  # the rank's own environment: it is swapped in
        return state


class _BackendMap:
    """While a torchrun run goes on, groups its ranks create with a real backend are simcluster's.

    Wraps ``distributed_c10d._new_process_group_helper`` (``init_process_group``,
    ``new_group`` and the subgroup helpers all create groups through it), and
    ``_get_default_timeout`` (which warns that NCCL is not compiled in when
    asked for nccl's), and restores both exactly on exit. Calls from outside
    the run's ranks pass through.
    """

    def __init__(self, session: _TorchrunSession, torch_session: Any) -> None:
        self.session = session
        self.torch_session = torch_session
        self.noted: set[str] = set()
        self.original: Any = None
        self.original_timeout: Any = None

    def __enter__(self) -> _BackendMap:
        from torch.distributed import distributed_c10d as c10d

        self.original = c10d._new_process_group_helper
        self.original_timeout = c10d._get_default_timeout
        c10d._new_process_group_helper = self.helper
        c10d._get_default_timeout = self.default_timeout
        return self

    def __exit__(self, *exc: object) -> None:
        from torch.distributed import distributed_c10d as c10d

        c10d._new_process_group_helper = self.original
        c10d._get_default_timeout = self.original_timeout

    def default_timeout(self, backend: str) -> Any:
        """c10d's ``_get_default_timeout``: inside the run's ranks, that of the backend used."""
        from simcluster.torch import BACKEND

        if self.torch_session.current() is not None and self.mapped(str(backend)):
            backend = BACKEND
        return self.original_timeout(backend)

    def helper(self, group_size: int, group_rank: int, global_ranks_in_group: list[int],
               backend: str, *args: Any, **kwargs: Any) -> Any:
        """c10d's ``_new_process_group_helper``, with the backend mapped inside the run's ranks."""
        from torch.distributed import distributed_c10d as c10d

        state = self.torch_session.current()
        if state is None:
            return self.original(group_size, group_rank, global_ranks_in_group, backend,
                                 *args, **kwargs)
        asked = str(backend)
        pg, store = self.original(group_size, group_rank, global_ranks_in_group,
                                  self.map(asked, state.rank), *args, **kwargs)
        if asked.lower() in REPORTED and pg in c10d._world.pg_map:  # not for a non-member
            # get_backend reads the name from c10d's world map: what the script asked for, so
            # its own gloo branches and torch's gloo checks (monitored_barrier) go as under gloo
            c10d._world.pg_map[pg] = (c10d.Backend(asked), store)
            if state.created is not None:  # its profiler spans are named as gloo's
                state.created.named = asked.lower()
        state.created = None
        return pg, store

    @staticmethod
    def mapped(backend: str) -> bool:
        """Whether ``backend`` (a name or a ``"device:backend,..."`` string) runs on simcluster's."""
        name = backend.lower()
        parts = [pair.rsplit(":", 1)[-1] for pair in name.split(",")] if ":" in name else [name]
        return all(part in MAPPED for part in parts)

    def map(self, backend: str, rank: int) -> str:
        """Return the backend to create for ``backend``; note the first mapping of each name.

        Raises:
            ValueError: the MPI backend, which torch runs without a rendezvous.
        """
        from simcluster.torch import BACKEND

        name = backend.lower()
        parts = [pair.rsplit(":", 1)[-1] for pair in name.split(",")] if ":" in name else [name]
        if "mpi" in parts:
            raise ValueError(
                f"rank {rank}: init_process_group(backend={backend!r}): the MPI backend cannot "
                f"run under {PROG}; name gloo or nccl (both run on simcluster), or run an mpi4py "
                "script with simcluster mpirun")
        if name == BACKEND or not self.mapped(name):
            return backend  # simcluster itself, or another plugin the script registered
        if name not in self.noted:
            self.noted.add(name)
            shown = ("torch's default backend (none named)" if name == "undefined"
                     else f"backend {backend!r}")
            self.session.note(f"{PROG}: {shown} runs on simcluster (virtual ranks in this "
                              "process, in virtual time)")
        return BACKEND
