"""``simcluster bench torch``: the torch.distributed backend ``"simcluster"`` against torch's own.

Three tables, the first two beside a baseline measured in the same run:

* latency: 4 ranks call ``dist.all_reduce`` on a one-float tensor ``calls``
  times in a loop (each call refills the tensor and checks the sum it gets
  back); rank 0 times the loop with ``time.perf_counter`` after a barrier,
  and the median of ``rounds`` rounds (after one warm-up round), over
  ``calls``, is the time per call. Under ``simcluster.torch.spawn`` (every
  rank a thread of this process, stepped one at a time by the engine;
  the default latency model, zero) against gloo (``torch.multiprocessing.spawn``,
  4 processes, rendezvous over TCP on 127.0.0.1); the ratio is simcluster / gloo.
  Beside it, the CPU seconds per call of both (this process's, against the
  four gloo processes' summed: on a machine shared with other work, what
  each needs of it), the floor: a bare hand-off between two Python threads through
  two ``threading.Lock``s (``handoff_floor``, measured just before and after
  the simcluster loops), the simcluster call's ratio to it, and the thread
  switches a call makes (``ThreadRank.switches``, counted over the timed rounds).
  The simcluster loop runs in each build (``BUILDS``: compiled, interpreted),
  each in a child process.
* scale: ``init_process_group`` plus one ``all_reduce`` of one float (and
  ``destroy_process_group``) on 1024 and 4096 ranks, under
  ``simcluster.torch.spawn`` against targets of 3 s and 20 s, and under
  torch's threaded process group (the ``"threaded"`` backend of
  ``torch.testing._internal.distributed.multi_threaded_pg``: one OS thread per
  rank, all running at once, as torch's own multi-threaded tests use it).
  Each job runs in a fresh Python process, so its peak RSS (``VmHWM``) is its
  own; one that takes longer than the budget is killed and reported as not
  finished. ``wall s`` is the job (spawn to return; thread start to join),
  ``process s`` the whole child process (interpreter, ``import torch``, the job).

* training step: one step of a small transformer under FSDP2 + tensor
  parallel on a (dp, tp) mesh of 64 (8 x 8) and 512 (64 x 8) ranks
  (``torch_step``): setup, the first step (FSDP2's lazy initialisation,
  DTensor's first sharding propagation) and a second step apart, each also
  in CPU seconds, the first step's ratio to the second (its in-run
  baseline; target at most 2x, judged on CPU seconds), peak memory, the step's virtual time on a
  stated network, and where the step's wall time goes; target: the step on
  512 ranks under 20 s and the job under 8 GiB.

torch is an extra: without it, ``main()`` exits with a message saying how to
install it (``pip install 'simcluster[torch]'``).
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
from time import perf_counter, process_time  # bound now: a rank's time.* reads virtual time
from collections.abc import Callable, Sequence
from typing import Any

from . import table

WORLD = 4
CALLS = 2000
ROUNDS = 5
HANDOFFS = 20000
"""Hand-offs per round of the bare two-thread floor (``handoff_floor``)."""
SIZES = (1024, 4096)
TARGETS = {1024: 3.0, 4096: 20.0}
"""Wall seconds the scale job should stay under, per number of ranks."""
BUDGET = 120.0
"""Wall seconds after which a scale job's process is killed (reported as not finished)."""
TRAIN = ((8, 8), (64, 8))
"""The (dp, tp) meshes of the training-step job: 64 and 512 ranks."""
TRAIN_TARGET = 20.0
"""Wall seconds the training step on 512 ranks should stay under (setup apart)."""
TRAIN_MEMORY_MIB = 8192
"""Peak resident memory (MiB) the 512-rank training job should stay under."""
TRAIN_BUDGET = 900.0
"""Wall seconds after which a training job's process is killed (reported as not finished)."""
HARD_LIMIT = 600.0
"""Wall seconds after which the gloo job is given up."""


def _need_torch() -> None:
    """Exit with the install hint where torch (or torch.distributed) cannot be imported."""
    try:
        import simcluster.torch  # noqa: F401 - registers the backend; raises with the hint
    except ImportError as exc:
        raise SystemExit(f"simcluster bench torch: {exc}") from None


def _rss_kib(field: str = "VmRSS") -> int:
    """Return this process's resident set (``VmRSS``) or its peak (``VmHWM``) in KiB."""
    from .scale import _rss_kib as rss

    return rss(field)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---- the latency loop, the same under both backends ----


def _timed_loop(rank: int, world: int, calls: int, rounds: int,
                switches: Callable[[], int] | None = None, processes: int = 1) -> dict[str, Any]:
    """From an initialised rank: the all_reduce loop; rank 0's seconds per call of each round.

    Every call refills the tensor with ``rank + 1`` and checks the sum that
    comes back; the count of wrong sums (all ranks) is summed after the timing.
    ``switches`` (simcluster: ``ThreadRank.switches``) counts the thread switches
    of every rank, read where rank 0 starts and ends each timed round.
    ``cpu_per_call``: the CPU seconds per call of the median round, of this
    process, summed over the ranks when each is a process of its own
    (``processes`` = ``world``: gloo).
    """
    import torch
    import torch.distributed as dist

    expected = world * (world + 1) / 2
    tensor = torch.zeros(1)
    fill, all_reduce, item = tensor.fill_, dist.all_reduce, tensor.item
    mine = rank + 1.0
    wrong = 0
    last = 0.0
    per_call = []
    cpu = []
    switched = 0
    for round_ in range(rounds + 1):  # the first round warms up
        dist.barrier()
        before = switches() if switches is not None else 0
        cpu_start = process_time()
        start = perf_counter()
        for _ in range(calls):
            fill(mine)
            all_reduce(tensor)
            last = item()
            if last != expected:
                wrong += 1
        per_call.append((perf_counter() - start) / calls)
        cpu.append((process_time() - cpu_start) / calls)
        if switches is not None and round_:
            switched += switches() - before
    total = torch.tensor([float(wrong), statistics.median(cpu[1:]) if processes > 1 else 0.0])
    dist.all_reduce(total)
    out = {"per_call": per_call[1:], "wrong": int(total[0].item()), "last": last,
           "expected": expected, "calls": calls * (rounds + 1),
           "cpu_per_call": float(total[1].item()) if processes > 1 else statistics.median(cpu[1:])}
    if switches is not None:
        out["switches_per_call"] = switched / (calls * rounds)
    return out


def _sim_rank(rank: int, world: int, calls: int, rounds: int) -> dict[str, Any]:
    import torch.distributed as dist

    from simcluster.engine.sync import ThreadRank

    dist.init_process_group("simcluster")
    try:
        return _timed_loop(rank, world, calls, rounds, lambda: ThreadRank.switches)
    finally:
        dist.destroy_process_group()


def _gloo_rank(rank: int, world: int, port: int, calls: int, rounds: int, queue: Any) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        out = _timed_loop(rank, world, calls, rounds, processes=world)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def simcluster_latency(world: int = WORLD, calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Return rank 0's figures of the all_reduce loop on ``world`` simcluster ranks."""
    import simcluster.torch as sctorch

    result = sctorch.spawn(_sim_rank, args=(world, calls, rounds), nprocs=world)
    out: dict[str, Any] = result[0]
    out["median"] = statistics.median(out["per_call"])
    out["virtual"] = result.elapsed
    return out


def handoff_floor(handoffs: int = HANDOFFS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Return the seconds of one bare thread hand-off: the floor of a thread rank's switch.

    Two Python threads pass a baton back and forth ``handoffs`` times through
    two ``threading.Lock``s, the cheapest wake-up CPython has (each side
    releases the other's lock, then blocks acquiring its own), as the engine's
    thread and a rank's thread do at every switch. One hand-off is one thread
    waking the other and that one taking the GIL; median of ``rounds`` rounds.
    """
    import threading

    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()
    count = handoffs // 2

    def other() -> None:
        for _ in range(count * rounds):
            ping.acquire()
            pong.release()

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    per_handoff = []
    for _ in range(rounds):
        start = perf_counter()
        for _ in range(count):
            ping.release()
            pong.acquire()
        per_handoff.append((perf_counter() - start) / (2 * count))
    thread.join()
    return {"per_handoff": per_handoff, "median": statistics.median(per_handoff)}


def gloo_latency(world: int = WORLD, calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Return rank 0's figures of the all_reduce loop on ``world`` gloo processes."""
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_gloo_rank, args=(world, _free_port(), calls, rounds, queue), nprocs=world)
    out: dict[str, Any] = queue.get()
    out["median"] = statistics.median(out["per_call"])
    return out


def latency(world: int = WORLD, calls: int = CALLS, rounds: int = ROUNDS,
            handoffs: int = HANDOFFS, builds: Sequence[str] = ()) -> dict[str, Any]:
    """Return both loops' figures and the ratio of their medians (simcluster / gloo).

    With them, the bare thread hand-off (``handoff_floor``), measured just
    before and just after the simcluster loop (the median of both sets of
    rounds), and the simcluster call's ratio to it (``floor_ratio``).
    ``builds`` (``BUILDS``: compiled, interpreted): the simcluster loop runs
    in a child process of each build, one after the other, and ``builds``,
    ``ratios`` and ``floor_ratios`` hold each build's figures; the first
    build's are also ``simcluster``, ``ratio`` and ``floor_ratio``. Without
    ``builds`` it runs in this process, whatever its build.
    """
    import torch.distributed as dist

    from . import in_build

    first = handoff_floor(handoffs, rounds)
    if builds:
        sims = {build: in_build(build, __name__, "simcluster_latency", world, calls, rounds)
                for build in builds}
    else:
        sims = {"": simcluster_latency(world, calls, rounds)}
    second = handoff_floor(handoffs, rounds)
    samples = first["per_handoff"] + second["per_handoff"]
    floor = {"per_handoff": samples, "median": statistics.median(samples)}
    sim = next(iter(sims.values()))
    out: dict[str, Any] = {"simcluster": sim, "builds": sims, "floor": floor,
                           "floor_ratio": sim["median"] / floor["median"],
                           "floor_ratios": {b: s["median"] / floor["median"] for b, s in sims.items()}}
    if not dist.is_gloo_available():  # pragma: no cover - builds without gloo
        return {**out, "gloo": "unavailable (this torch build has no gloo)"}
    try:
        gloo = gloo_latency(world, calls, rounds)
    except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, not raised
        last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        return {**out, "gloo": f"failed ({last[0]})"}
    return {**out, "gloo": gloo, "ratio": sim["median"] / gloo["median"],
            "ratios": {b: s["median"] / gloo["median"] for b, s in sims.items()}}


def breakdown(world: int = WORLD, calls: int = CALLS) -> dict[str, float]:
    """Return where a simcluster call's CPU time goes: seconds per call by part, thread CPU clocks.

    The loop of ``calls`` calls (a round and its warm-up), with each part's own
    thread CPU time (``time.thread_time``, which a blocked thread does not
    accrue) summed around it: on the engine's thread, the switches
    (``ThreadRank.send``: torch's generator swap, the session's state swap,
    the baton) and the rest, the engine (the collective's helpers, their
    messages, the events); on the rank threads, the backend's ``allreduce``
    (``Comm.iall_reduce``, the Work), ``Work.wait`` (``block`` and the baton)
    and the rest, torch's ``all_reduce`` wrapper and the loop itself. The
    wrappers cost a little themselves; a per-call figure, not a benchmark.
    """
    from time import thread_time

    from simcluster.engine import sync
    from simcluster.torch import _process_group, _work

    spent = {"switches": 0.0, "backend": 0.0, "wait": 0.0, "ranks": 0.0}
    patched = [(sync.ThreadRank, "send", "switches"), (sync.ThreadRank, "_body", "ranks"),
               (_process_group.ProcessGroupSimcluster, "allreduce", "backend"),
               (_work.SimclusterWork, "wait", "wait")]
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in patched]

    def timed(fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += thread_time() - start
        return call

    simcluster_latency(world, 20, 1)  # warm: imports, torch's first calls
    for owner, name, part in patched:
        setattr(owner, name, timed(owner.__dict__[name], part))
    try:
        start = thread_time()
        simcluster_latency(world, calls, 1)
        engine_thread = thread_time() - start
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    n = 2 * calls + 1  # the warm-up round, the timed one, and the all_reduce of the wrong sums
    return {"engine": (engine_thread - spent["switches"]) / n, "switches": spent["switches"] / n,
            "torch": (spent["ranks"] - spent["backend"] - spent["wait"]) / n,
            "backend": spent["backend"] / n, "wait": spent["wait"] / n}


# ---- the scale jobs: what runs in a child process ----


def _scale_rank(rank: int) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("simcluster")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    return float(tensor.item())


def _scale_simcluster(ranks: int) -> dict[str, Any]:
    import simcluster.torch as sctorch

    before = _rss_kib()
    start = perf_counter()
    result = sctorch.spawn(_scale_rank, nprocs=ranks)
    wall = perf_counter() - start
    return {"wall": wall, "peak_kib": _rss_kib("VmHWM"), "before_kib": before,
            "correct": all(v == ranks for v in result), "virtual": result.elapsed}


def _scale_threaded(ranks: int) -> dict[str, Any]:
    import threading

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed import multi_threaded_pg

    values: list[float | None] = [None] * ranks
    errors: list[str] = []

    def worker(rank: int, store: Any) -> None:
        try:
            dist.init_process_group("threaded", rank=rank, world_size=ranks, store=store)
            tensor = torch.ones(1)
            dist.all_reduce(tensor)
            dist.destroy_process_group()
            values[rank] = float(tensor.item())
        except BaseException as exc:  # noqa: BLE001 - reported, not raised, from a thread
            errors.append(f"rank {rank}: {exc!r}")
            multi_threaded_pg.ProcessLocalGroup.exception_handle(exc)

    before = _rss_kib()
    start = perf_counter()
    # as torch's MultiThreadedTestCase does: a per-thread C++ group registry and c10d world
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    multi_threaded_pg._install_threaded_pg()
    try:
        store = dist.HashStore()
        threads = [threading.Thread(target=worker, args=(r, store)) for r in range(ranks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        multi_threaded_pg._uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
    wall = perf_counter() - start
    return {"wall": wall, "peak_kib": _rss_kib("VmHWM"), "before_kib": before,
            "correct": not errors and all(v == ranks for v in values), "errors": errors[:3]}


def _child(argv: Sequence[str]) -> None:
    backend, ranks = argv[0], int(argv[1])
    out = _scale_simcluster(ranks) if backend == "simcluster" else _scale_threaded(ranks)
    print(json.dumps(out))


def scale_job(backend: str, ranks: int, budget: float = BUDGET) -> dict[str, Any] | str:
    """Run one scale job in a fresh process; return its figures, or why there are none.

    ``backend`` is ``"simcluster"`` or ``"threaded"``. The figures: ``wall``
    (the job), ``process`` (the whole child), ``peak_kib`` and ``before_kib``
    (RSS before the job), ``correct`` (every rank got the sum ``ranks``).
    """
    return _child_job(["simcluster.bench.torch", "--child", backend, str(ranks)], budget)


def train_job(dp: int, tp: int, budget: float = TRAIN_BUDGET) -> dict[str, Any] | str:
    """Run one FSDP2 + TP training job on dp x tp ranks in a fresh process (``torch_step``)."""
    return _child_job(["simcluster.bench.torch_step", str(dp), str(tp)], budget)


def _child_job(module_argv: list[str], budget: float) -> dict[str, Any] | str:
    """Run ``python -m MODULE ARGS`` for at most ``budget`` s; its last stdout line's JSON, or why not."""
    cmd = [sys.executable, "-m", *module_argv]
    start = perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return f"did not finish in {budget:g} s"
    process = perf_counter() - start
    if proc.returncode:
        last = err.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return f"failed ({last[0]})"
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    figures["process"] = process
    return figures


# ---- the parent: the two tables ----


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def _latency_table(lat: dict[str, Any], world: int, calls: int, rounds: int) -> None:
    gloo = lat["gloo"]
    sims: dict[str, dict[str, Any]] = lat.get("builds") or {"": lat["simcluster"]}
    print(f"all_reduce of one float, {world} ranks: {calls} calls per round, median of {rounds} "
          "rounds after a warm-up (rank 0 times its loop after a barrier)")
    floor = lat["floor"]["median"]
    rows = []
    for build, sim in sims.items():
        named = f" ({build})" if build else ""
        ratio = sim["median"] / gloo["median"] if isinstance(gloo, dict) else None
        rows += [[f"all_reduce, per call{named}", _us(sim["median"]),
                  _us(gloo["median"]) if isinstance(gloo, dict) else gloo,
                  f"{ratio:.2f}x" if ratio is not None else "",
                  f"gloo, {world} processes, TCP on 127.0.0.1"],
                 [f"calls per second{named}", f"{1 / sim['median']:,.0f}",
                  f"{1 / gloo['median']:,.0f}" if isinstance(gloo, dict) else "", "", ""]]
        if "cpu_per_call" in sim:
            cpu_ratio = (sim["cpu_per_call"] / gloo["cpu_per_call"]
                         if isinstance(gloo, dict) and gloo.get("cpu_per_call") else None)
            rows.append([f"CPU per call{named}", _us(sim["cpu_per_call"]),
                         _us(gloo["cpu_per_call"]) if cpu_ratio is not None else "",
                         f"{cpu_ratio:.2f}x" if cpu_ratio is not None else "",
                         f"the same gloo run: its {world} processes' CPU, summed"])
    for build, sim in sims.items():
        named = f" ({build})" if build else ""
        rows.append([f"all_reduce, per call{named}", _us(sim["median"]), _us(floor),
                     f"{sim['median'] / floor:,.0f}x",
                     "the floor: one bare hand-off between two threads (two Locks)"])
    switches = next(iter(sims.values()))["switches_per_call"]
    rows.append(["thread switches per call", f"{switches:.2f}", "", "",
                 f"{_us(switches * floor)} per call at the floor"])
    print(table(rows, ["what", "simcluster", "baseline", "ratio", "baseline is"]))
    checked = sum(sim["calls"] for sim in sims.values()) * world
    wrong = sum(sim["wrong"] for sim in sims.values())
    if isinstance(gloo, dict):
        wrong += gloo["wrong"]
        checked += next(iter(sims.values()))["calls"] * world
    print(f"every sum checked inside the loop: {wrong} wrong of {checked:,}")


def _scale_cells(got: dict[str, Any] | str, ranks: int) -> list[str]:
    if isinstance(got, str):
        return [got, "", "", ""]
    per_rank = (got["peak_kib"] - got["before_kib"]) / ranks
    return [f"{got['wall']:.2f}" + ("" if got["correct"] else " (WRONG SUM)"),
            f"{got['process']:.2f}", f"{got['peak_kib'] / 1024:,.0f}", f"{per_rank:,.0f}"]


def _verdict(got: dict[str, Any] | str, target: float | None) -> str:
    if target is None:
        return ""
    if isinstance(got, str) or not got["correct"]:
        return "missed"
    return "met" if got["wall"] <= target else "missed"


def _train_table(train: dict[tuple[int, int], dict[str, Any] | str]) -> None:
    from .torch_step import BATCH, DIM, FIRST_STEP_RATIO, HEADS, LAYERS, NETWORK, SEQ

    alpha, beta = NETWORK
    print(f"one training step of a transformer ({LAYERS} blocks, width {DIM}, {HEADS} heads, "
          f"{BATCH} x {SEQ} tokens per dp rank) under FSDP2 over dp + tensor parallel over tp, "
          f"AdamW; virtual time on a {alpha * 1e6:g} us + {1 / beta / 1e9:g} GB/s network, "
          "compute charged as zero; one fresh process per job")
    rows = []
    for (dp, tp), got in train.items():
        if isinstance(got, str):
            rows.append([f"{dp * tp}", f"{dp} x {tp}", got, "", "", "", "", "", "", ""])
            continue
        big = dp * tp == TRAIN[-1][0] * TRAIN[-1][1]
        met = (got["step"] <= TRAIN_TARGET and got["peak_mib"] <= TRAIN_MEMORY_MIB) if big else None
        ratio = got["first_over_step_cpu"]
        rows.append([f"{dp * tp}", f"{dp} x {tp}", f"{got['setup']:.1f}",
                     f"{got['first_step']:.1f} ({got['first_step_cpu']:.1f} cpu)",
                     f"{got['step']:.1f} ({got['step_cpu']:.1f} cpu)" +
                     ("" if got["same_loss_in_each_dp_group"] else " (LOSSES DIFFER)"),
                     f"{got['first_over_step']:.2f}x ({ratio:.2f}x cpu) "
                     + ("met" if ratio <= FIRST_STEP_RATIO else "missed"),
                     f"{got['total']:.1f}", f"{got['peak_mib']:,.0f}",
                     f"{got['virtual_step'] * 1e3:.3f} ms",
                     "" if met is None else ("met" if met else "missed")])
    print(table(rows, ["ranks", "dp x tp", "setup s", "first step s", "step s",
                       f"first/step (cpu <= {FIRST_STEP_RATIO:g}x)", "total s", "peak RSS MiB",
                       "virtual step", f"step < {TRAIN_TARGET:g} s, < 8 GiB"]))
    for (dp, tp), got in train.items():
        if isinstance(got, dict):
            for key, what in (("where_first", "first step's"), ("where", "step's")):
                shares = ", ".join(f"{part} {share:.0%}" for part, share in got[key].items())
                print(f"where the {what} wall time goes at {dp * tp} ranks: {shares}")


PARTS = ("all_reduce", "scale", "train")
"""The tables ``main`` can run alone (``simcluster bench torch --only PART``)."""


def main(world: int = WORLD, calls: int = CALLS, rounds: int = ROUNDS,
         sizes: Sequence[int] = SIZES, budget: float = BUDGET,
         train: Sequence[tuple[int, int]] = TRAIN, only: str | None = None) -> dict[str, Any]:
    """Measure and print the three tables, or the one of ``PARTS`` named ``only``; return the figures.

    The latency table measures simcluster in each of ``BUILDS`` (the active
    build, and the interpreted one beside a compiled one).
    """
    if only is not None and only not in PARTS:
        raise SystemExit(f"simcluster bench torch --only {only}: choose one of {', '.join(PARTS)}")
    _need_torch()
    import torch

    from . import BUILDS

    lat = latency(world, calls, rounds, builds=BUILDS) if only in (None, "all_reduce") else None
    jobs: dict[int, dict[str, dict[str, Any] | str]] = {}
    for ranks in sizes if only in (None, "scale") else ():
        jobs[ranks] = {"simcluster": scale_job("simcluster", ranks, budget),
                       "threaded": scale_job("threaded", ranks, budget)}
    steps = {(dp, tp): train_job(dp, tp) for dp, tp in train} if only in (None, "train") else {}

    print(f"simcluster bench torch (torch {torch.__version__}; simcluster with its defaults: "
          "latency model zero, checks='strict')")
    print()
    if lat is not None:
        _latency_table(lat, world, calls, rounds)
        print()
    if jobs:
        print(f"init_process_group + one all_reduce of one float (+ destroy_process_group), "
              f"one fresh process per job, killed after {budget:g} s")
        rows = []
        for ranks, got in jobs.items():
            sim, thr = got["simcluster"], got["threaded"]
            target = TARGETS.get(ranks)
            ratio = (f"{sim['wall'] / thr['wall']:.2f}x"
                     if isinstance(sim, dict) and isinstance(thr, dict) else "")
            rows.append([f"{ranks}", "simcluster", *_scale_cells(sim, ranks),
                         f"{target:g} s" if target else "", _verdict(sim, target), ""])
            rows.append(["", "threaded", *_scale_cells(thr, ranks), "", "", ratio])
        print(table(rows, ["ranks", "backend", "wall s", "process s", "peak RSS MiB", "KiB/rank",
                           "target", "met", "simcluster/threaded"]))
        print("threaded: torch's multi_threaded_pg (one OS thread per rank, all at once); "
              "KiB/rank: (peak RSS - RSS before the job) / ranks")
        print()
    if steps:
        _train_table(steps)
    return {"latency": lat, "scale": jobs, "train": steps}


QUICK = {"calls": 200, "rounds": 3, "sizes": (1024,), "budget": 30.0, "train": ((2, 4),)}

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
    else:  # through the package, so that spawned gloo processes find the rank functions
        from simcluster.bench import torch as _bench

        _bench.main()
