"""``simcluster bench scale``: how wall time and memory grow with the number of ranks.

Runs ``barrier()`` and ``all_reduce(1.0)`` on 2^10, 2^12, ..., 2^20 ranks of
the memory transport, with ``checks="off"`` (no buffer-hazard or leak
bookkeeping: the speed setting) and an AlphaBeta latency model (1 us, 10 GB/s)
(``main(latency=...)`` takes another, e.g. ``"zero"``, the run default) so
that the virtual time means something, for both fidelities:

* ``message``: every message of the algorithm is simulated (dissemination
  barrier, recursive-doubling all_reduce: ``p * ceil(log2 p)`` messages);
* ``analytic``: each collective resolves in one step (``fidelity="analytic"``);
* ``sync``: message level, from synchronous ranks (plain functions calling
  ``simcluster.MPI``'s ``Barrier()`` / ``allreduce(1.0)``, each rank on a
  greenlet): what running an unmodified mpi4py program costs.

Each size runs in a fresh Python process, so the peak RSS (``VmHWM``) is that
size's own; a series stops once a size takes longer than the wall budget, and
the sizes it skipped are listed. Columns: wall seconds of the run, engine
events per wall second (an event is one pop of the engine's heap: a rank
resumed, a message arriving, a request finishing), messages, peak RSS, bytes
per rank (peak RSS minus the RSS before the world was built, over the ranks)
and the virtual time the run ended at.

Four more figures, each beside a baseline measured in the same run:

* the message-level barrier on 2^16 ranks, and barrier and all_reduce on
  2^20 (``--quick``: the 2^16 barrier only), against a bare asyncio program
  passing the same messages (a task per rank, a ``Future`` per message in a
  dict, the cyclic collector paused as simcluster's run pauses it): fresh
  processes, alternated, medians of 3, and the ratio;
* the message-level all_reduce on 2^16 ranks of ``dgx_h100`` with its links
  shared (flows re-shared max-min at every change) against the same run
  unshared (``dgx_h100:8192,unshared``; ``--quick``: 2^12 ranks): fresh
  processes, alternated, medians of 3, the ratio and its target (1.2x);
* per-message engine cost (a 2-rank ping-pong: wall / messages; each message
  is posted, matched, completed and its receiver resumed) against the bare
  cost of resuming a coroutine (``coro.send(None)`` on a coroutine that
  awaits a trivial yielding awaitable), and against a toy engine that does
  only what any Python engine must (match in a dict, resume the receiver);
* memory per idle rank: RSS of N ranks all blocked in ``recv``, per rank,
  minus the RSS per suspended bare coroutine doing the same one await (the
  user's own coroutine frame).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from time import perf_counter, process_time  # bound now: a rank's time.* reads virtual time
from collections.abc import Generator, Sequence
from typing import Any, TextIO

from . import BUILDS, build_env, table

SIZES = tuple(1 << k for k in range(10, 21, 2))
BUDGET = 60.0
"""Wall seconds after which a series stops growing."""
HARD_LIMIT = 900.0
"""Wall seconds after which a single size's process is killed."""
FIDELITIES = ("message", "analytic", "sync")
COLLECTIVES = ("barrier", "all_reduce")
LATENCY = "alphabeta:1us,10GB/s"
"""The latency model of the collective runs (``latency.parse`` form); "zero" is the run default."""
IDLE_RANKS = 1 << 16
PINGPONG = 20_000
RESUMES = 1_000_000

# ---- what runs in a child process ----


def _rss_kib(field: str = "VmRSS") -> int:
    """Return this process's resident set (``VmRSS``) or its peak (``VmHWM``) in KiB."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak // 1024 if sys.platform == "darwin" else peak


_KERNELS: list[Any] = []


async def _barrier(comm: Any) -> None:
    if comm.rank == 0:
        _KERNELS.append(comm.kernel)
    await comm.barrier()


async def _all_reduce(comm: Any) -> None:
    if comm.rank == 0:
        _KERNELS.append(comm.kernel)
    await comm.all_reduce(1.0)


def _sync_barrier(comm: Any) -> None:
    if comm.rank == 0:
        _KERNELS.append(current_kernel())
    comm.Barrier()


def _sync_all_reduce(comm: Any) -> None:
    if comm.rank == 0:
        _KERNELS.append(current_kernel())
    comm.allreduce(1.0)


def current_kernel() -> Any:
    from ..comm import current_comm

    comm = current_comm()
    assert comm is not None
    return comm.kernel


def _child_collective(fidelity: str, collective: str, ranks: int, model: str,
                      transport: str = "memory") -> dict[str, Any]:
    from .. import platform, runner

    if fidelity == "sync":
        fn: Any = _sync_barrier if collective == "barrier" else _sync_all_reduce
    else:
        fn = _barrier if collective == "barrier" else _all_reduce
    before = _rss_kib()
    start, cpu = perf_counter(), process_time()
    result = runner.run(fn, ranks, checks="off", latency=platform.parse(model), transport=transport,
                        fidelity="analytic" if fidelity == "analytic" else "message")
    wall, cpu = perf_counter() - start, process_time() - cpu
    peak = _rss_kib("VmHWM")
    events = _KERNELS[0].events if _KERNELS else None  # (rank 0 is in this process)
    return {"wall": wall, "cpu": cpu, "events": events, "messages": result.stats.total_messages,
            "peak_kib": peak, "bytes_per_rank": (peak - before) * 1024 / ranks,
            "elapsed": result.elapsed, "rounds": result.rounds}


class _Yield:
    """A trivial awaitable: yields once to whoever steps the coroutine."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


async def _bare_loop(n: int) -> None:
    step = _Yield()
    for _ in range(n):
        await step


async def _bare_user(box: list[Any]) -> None:
    await _Yield()


def _bare_resume_seconds(n: int) -> float:
    """Return the wall seconds of one ``coro.send(None)`` resuming a suspended coroutine."""
    coro = _bare_loop(n)
    send = coro.send
    send(None)
    start = perf_counter()
    try:
        for _ in range(n):
            send(None)
    except StopIteration:
        pass
    return (perf_counter() - start) / n


class _Slot:
    """The toy floor's receive: a value and whether it has arrived."""

    __slots__ = ("value", "done")

    def __init__(self) -> None:
        self.value: Any = None
        self.done = False

    def __await__(self) -> Generator[Any, None, Any]:
        if not self.done:
            yield self
        return self.value


def _floor_seconds(n: int) -> float:
    """Return the wall seconds per message of the least a Python engine must do.

    Two coroutines ping-pong ``n`` times through a toy engine: a receive is an
    object the rank awaits, posted in a dict; a send finds it, stores the
    value and puts the receiver on a ready list; the loop resumes ranks. No
    tags, codec, envelopes, clock, checks or statistics: what is left is the
    floor under any engine written in Python.
    """
    posted: dict[int, tuple[Any, _Slot]] = {}
    mail: dict[int, Any] = {}
    ready: list[Any] = []
    coros: dict[int, Any] = {}

    def send(dst: int, value: Any) -> None:
        waiting = posted.pop(dst, None)
        if waiting is None:
            mail[dst] = value
            return
        coro, slot = waiting
        slot.value, slot.done = value, True
        ready.append(coro)

    def recv(me: int) -> _Slot:
        slot = _Slot()
        if me in mail:
            slot.value, slot.done = mail.pop(me), True
        else:
            posted[me] = (coros[me], slot)
        return slot

    async def rank(me: int, other: int) -> None:
        for i in range(n):
            if me == 0:
                send(other, i)
                await recv(me)
            else:
                send(other, await recv(me))

    coros[0], coros[1] = rank(0, 1), rank(1, 0)
    ready.extend([coros[1], coros[0]])
    start = perf_counter()
    while ready:
        coro = ready.pop()
        try:
            coro.send(None)
        except StopIteration:
            pass
    return (perf_counter() - start) / (2 * n)


def _child_speed(round_trips: int, resumes: int) -> dict[str, Any]:
    from .. import runner
    from .p2p import _pingpong  # the same ping-pong as bench p2p

    bare = min(_bare_resume_seconds(resumes) for _ in range(3))
    floor = min(_floor_seconds(round_trips) for _ in range(3))
    walls = []
    for _ in range(3):
        result = runner.run(_pingpong, 2, args=(round_trips,), checks="off")
        walls.append(result.wall)
    per_message = min(walls) / (2 * round_trips)
    return {"bare_resume": bare, "floor": floor, "per_message": per_message,
            "ratio": per_message / bare, "floor_ratio": per_message / floor}


_IDLE_RSS: list[int] = []


async def _idle(comm: Any) -> None:
    if comm.rank:
        await comm.recv(src=0)
        return
    await comm.sleep(1.0)  # time moves only once every other rank is parked in recv
    _IDLE_RSS.append(_rss_kib())
    for dst in range(1, comm.size):
        await comm.send(None, dst)


def _child_idle(ranks: int) -> dict[str, Any]:
    from .. import runner

    before = _rss_kib()
    runner.run(_idle, ranks, checks="off")
    per_rank = (_IDLE_RSS[0] - before) * 1024 / ranks
    return {"per_rank": per_rank}


def _child_bare_frames(ranks: int) -> dict[str, Any]:
    before = _rss_kib()
    coros = [_bare_user([]) for _ in range(ranks)]
    for coro in coros:
        coro.send(None)
    per_rank = (_rss_kib() - before) * 1024 / ranks
    for coro in coros:
        coro.close()
    return {"per_rank": per_rank}


# ---- the asyncio baseline: the same messages between plain asyncio tasks ----


async def _asyncio_collective(collective: str, ranks: int) -> list[Any]:
    """Pass the messages of a message-level barrier or all_reduce between ``ranks`` asyncio tasks.

    The program someone would write with asyncio alone: a task per rank, and a
    message is an ``asyncio.Future`` in a dict keyed by (round, receiver),
    made by whichever of sender and receiver comes first. ``barrier``:
    dissemination (in round ``k`` rank ``i`` sends ``None`` to ``i + 2**k``
    and waits for ``i - 2**k``, mod ``ranks``); ``all_reduce``: recursive
    doubling of ``1.0`` (rank ``i`` swaps partial sums with ``i ^ 2**k``;
    ``ranks`` a power of two). ``ranks * ceil(log2 ranks)`` messages either way.
    """
    loop = asyncio.get_running_loop()
    boxes: dict[tuple[int, int], asyncio.Future[Any]] = {}

    def box(key: tuple[int, int]) -> asyncio.Future[Any]:
        fut = boxes.get(key)
        if fut is None:
            fut = boxes[key] = loop.create_future()
        return fut

    async def barrier(me: int) -> None:
        dist, step = 1, 0
        while dist < ranks:
            box((step, (me + dist) % ranks)).set_result(None)
            await box((step, me))
            del boxes[step, me]
            dist, step = dist << 1, step + 1

    async def all_reduce(me: int) -> float:
        value, dist, step = 1.0, 1, 0
        while dist < ranks:
            box((step, me ^ dist)).set_result(value)
            value += await box((step, me))
            del boxes[step, me]
            dist, step = dist << 1, step + 1
        return value

    if collective == "all_reduce" and ranks & (ranks - 1):
        raise ValueError(f"the asyncio all_reduce needs a power of two, got {ranks} ranks")
    rank = barrier if collective == "barrier" else all_reduce
    return await asyncio.gather(*(rank(me) for me in range(ranks)))


def _child_asyncio(collective: str, ranks: int) -> dict[str, Any]:
    from ..engine import gc as _gc

    before = _rss_kib()
    start, cpu = perf_counter(), process_time()
    with _gc.paused():  # as simcluster's run does: with the collector, 2^16 ranks took 1.7x as long
        results = asyncio.run(_asyncio_collective(collective, ranks))
    wall, cpu = perf_counter() - start, process_time() - cpu
    peak = _rss_kib("VmHWM")
    messages = ranks * (ranks - 1).bit_length()
    return {"wall": wall, "cpu": cpu, "messages": messages, "peak_kib": peak,
            "bytes_per_rank": (peak - before) * 1024 / ranks, "value": results[0]}


def _child(argv: Sequence[str]) -> None:
    kind, *rest = argv
    if kind == "collective":
        out = _child_collective(rest[0], rest[1], int(rest[2]), rest[3])
    elif kind == "asyncio":
        out = _child_asyncio(rest[0], int(rest[1]))
    elif kind == "speed":
        out = _child_speed(int(rest[0]), int(rest[1]))
    elif kind == "idle":
        out = _child_idle(int(rest[0]))
    else:
        out = _child_bare_frames(int(rest[0]))
    print(json.dumps(out))


# ---- the parent: one process per measurement, a progress line, the tables ----


class _Status:
    """One line on stderr, redrawn in place when stderr is a terminal; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.width = 0

    def show(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.stream.flush()
            self.width = len(text)

    def clear(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _measure(args: Sequence[str], label: str, status: _Status, limit: float,
             build: str = BUILDS[0]) -> dict[str, Any] | str:
    """Run one child measurement on ``build``; return its figures, or a word saying why there are none."""
    cmd = [sys.executable, "-m", "simcluster.bench.scale", "--child", *args]
    start = perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=build_env(build))
    while proc.poll() is None:
        waited = perf_counter() - start
        status.show(f"simcluster bench scale: {label} ... {waited:.0f} s")
        if waited > limit:
            proc.kill()
            proc.wait()
            return "killed"
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode:
        last = err.strip().splitlines()[-1:] or ["no output"]
        return f"failed ({last[0]})"
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return figures


def _log2(n: int) -> str:
    return f"2^{n.bit_length() - 1}"


def _series(build: str, fidelity: str, collective: str, sizes: Sequence[int], budget: float, model: str,
            status: _Status, rows: list[list[str]], skipped: list[str]) -> None:
    for i, ranks in enumerate(sizes):
        label = f"{build} {fidelity} {collective} on {_log2(ranks)} ranks"
        got = _measure(["collective", fidelity, collective, str(ranks), model], label, status,
                       HARD_LIMIT, build)
        if isinstance(got, str):
            rows.append([build, fidelity, collective, _log2(ranks), got, "", "", "", "", ""])
            skipped.extend(f"{build} {fidelity} {collective} {_log2(n)}" for n in sizes[i + 1:])
            return
        rows.append([build, fidelity, collective, _log2(ranks), f"{got['wall']:.2f}",
                     f"{got['events'] / got['wall']:,.0f}", f"{got['messages']:,}",
                     f"{got['peak_kib'] / 1024:,.0f}", f"{got['bytes_per_rank']:,.0f}",
                     f"{got['elapsed'] * 1e6:.3g} us"])
        if got["wall"] > budget:
            skipped.extend(f"{build} {fidelity} {collective} {_log2(n)}" for n in sizes[i + 1:])
            return


def _against_asyncio(cases: Sequence[tuple[str, int]], repeats: int, model: str,
                     status: _Status) -> list[dict[str, Any]]:
    """Time each (collective, ranks) at message level in each build and as the bare asyncio program.

    Fresh processes, alternated (asyncio, then each build, ``repeats`` times),
    medians of each; a failed or killed run leaves its word in place of the figures.
    """
    found = []
    for collective, ranks in cases:
        walls: dict[str, list[float]] = {"asyncio": [], **{build: [] for build in BUILDS}}
        cpus: dict[str, list[float]] = {name: [] for name in walls}
        peaks: dict[str, list[float]] = {name: [] for name in walls}
        failed: dict[str, str] = {}
        for i in range(repeats):
            for name in walls:
                if name in failed:
                    continue
                label = f"{name} {collective} on {_log2(ranks)} ranks, run {i + 1} of {repeats}"
                args = (["asyncio", collective, str(ranks)] if name == "asyncio"
                        else ["collective", "message", collective, str(ranks), model])
                got = _measure(args, label, status, HARD_LIMIT, BUILDS[0] if name == "asyncio" else name)
                if isinstance(got, str):
                    failed[name] = got
                    continue
                walls[name].append(got["wall"])
                cpus[name].append(got["cpu"])
                peaks[name].append(got["peak_kib"])
        medians = {name: statistics.median(w) for name, w in walls.items() if w and name not in failed}
        cpu = {name: statistics.median(c) for name, c in cpus.items() if c and name not in failed}
        found.append({"collective": collective, "ranks": ranks, "walls": walls, "cpus": cpus,
                      "failed": failed, "median": medians, "median_cpu": cpu,
                      "peak_kib": {name: max(p) for name, p in peaks.items() if p}})
    return found


def _ratio(mine: float | None, base: float | None) -> str:
    return f"{mine / base:.2f}x" if mine is not None and base else ""


def _asyncio_rows(found: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for case in found:
        median, cpu, failed = case["median"], case["median_cpu"], case["failed"]
        base = median.get("asyncio")
        for build in BUILDS:
            wall = median.get(build)
            rows.append([build, case["collective"], _log2(case["ranks"]),
                         failed.get(build, f"{wall:.2f}" if wall is not None else ""),
                         failed.get("asyncio", f"{base:.2f}" if base is not None else ""),
                         _ratio(wall, base), _ratio(cpu.get(build), cpu.get("asyncio")),
                         f"{case['peak_kib'].get(build, 0) / 1024:,.0f}",
                         f"{case['peak_kib'].get('asyncio', 0) / 1024:,.0f}"])
    return rows


ASYNCIO_CASES = (("barrier", 1 << 16), ("barrier", 1 << 20), ("all_reduce", 1 << 20))
"""(collective, ranks) timed against the bare asyncio program passing the same messages."""

SHARING_RANKS = 1 << 16
"""Ranks of the message-level all_reduce on ``dgx_h100`` timed with links shared and without."""
SHARING_TARGET = 1.2
"""The most the shared run may cost, against the unshared one (issue 42)."""


def _against_unshared(ranks: int, repeats: int, status: _Status) -> dict[str, dict[str, Any]]:
    """Time the message-level ``all_reduce(1.0)`` on ``dgx_h100`` with its links shared and
    unshared (``,unshared``), in each build: fresh processes, alternated, ``repeats`` times each."""
    found = {}
    for build in BUILDS:
        runs: dict[str, list[dict[str, Any]]] = {"shared": [], "unshared": []}
        failed: dict[str, str] = {}
        for i in range(repeats):
            for name, suffix in (("shared", ""), ("unshared", ",unshared")):
                if name in failed:
                    continue
                got = _measure(["collective", "message", "all_reduce", str(ranks), f"dgx_h100:{ranks // 8}{suffix}"],
                               f"{build} all_reduce on {_log2(ranks)} ranks, links {name}, run {i + 1} of {repeats}",
                               status, HARD_LIMIT, build)
                if isinstance(got, str):
                    failed[name] = got
                else:
                    runs[name].append(got)
        found[build] = {"failed": failed, "runs": runs, **{
            f"{key}_{name}": statistics.median(run[key] for run in runs[name])
            for name in runs if runs[name] and name not in failed for key in ("wall", "cpu")},
            "elapsed": {name: [run["elapsed"] for run in runs[name]] for name in runs}}
    return found


def _sharing_rows(found: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for build, got in found.items():
        shared, unshared = got.get("wall_shared"), got.get("wall_unshared")
        virtual = {t for times in got["elapsed"].values() for t in times}
        rows.append([build, got["failed"].get("shared", f"{shared:.2f}" if shared is not None else ""),
                     got["failed"].get("unshared", f"{unshared:.2f}" if unshared is not None else ""),
                     _ratio(shared, unshared), _ratio(got.get("cpu_shared"), got.get("cpu_unshared")),
                     f"at most {SHARING_TARGET:g}x", " / ".join(f"{t * 1e6:.4g} us" for t in sorted(virtual))])
    return rows


def main(sizes: Sequence[int] = SIZES, budget: float = BUDGET, idle_ranks: int = IDLE_RANKS,
         round_trips: int = PINGPONG, resumes: int = RESUMES, latency: str = LATENCY,
         asyncio_cases: Sequence[tuple[str, int]] = ASYNCIO_CASES, repeats: int = 3,
         sharing_ranks: int = SHARING_RANKS) -> dict[str, Any]:
    """Measure and print the scale table, the per-message cost and the memory per idle rank.

    The collectives and the per-message cost are measured on each build
    (``BUILDS``: the compiled one, when active, and the interpreted one).
    ``asyncio_cases`` are timed against a bare asyncio program passing the
    same messages (``_asyncio_collective``), ``repeats`` alternated runs each.
    The all_reduce on ``sharing_ranks`` ranks of ``dgx_h100`` is timed with
    links shared against the same run unshared, ``repeats`` alternated runs each.
    """
    status = _Status(sys.stderr)
    rows: list[list[str]] = []
    skipped: list[str] = []
    try:
        against = _against_asyncio(asyncio_cases, repeats, latency, status)
        sharing = _against_unshared(sharing_ranks, repeats, status)
        for fidelity in FIDELITIES:
            for collective in COLLECTIVES:
                for build in BUILDS:
                    _series(build, fidelity, collective, sizes, budget, latency, status, rows, skipped)
        speeds = {build: _measure(["speed", str(round_trips), str(resumes)], f"{build} per-message cost",
                                  status, HARD_LIMIT, build) for build in BUILDS}
        idle = _measure(["idle", str(idle_ranks)], f"{_log2(idle_ranks)} idle ranks", status, HARD_LIMIT)
        bare = _measure(["bare", str(idle_ranks)], f"{_log2(idle_ranks)} bare coroutines", status,
                        HARD_LIMIT)
    finally:
        status.clear()
    print(f"simcluster bench scale (memory transport, checks='off', latency {latency}, "
          f"one process per size, wall budget {budget:g} s per size)")
    print(table(rows, ["build", "fidelity", "collective", "ranks", "wall s", "events/s", "messages",
                       "peak RSS MiB", "bytes/rank", "virtual time"]))
    if skipped:
        print(f"skipped (a smaller size of the series took more than {budget:g} s): "
              + ", ".join(skipped))
    figures: dict[str, Any] = {"rows": rows, "skipped": skipped, "asyncio": against}
    if against:
        print()
        print(f"against bare asyncio passing the same messages (a task per rank, a Future per message "
              f"in a dict, cyclic GC paused as in a run; fresh processes, alternated, median of {repeats})")
        print(table(_asyncio_rows(against), ["build", "collective", "ranks", "simcluster s", "asyncio s",
                                             "ratio", "CPU ratio", "simcluster MiB", "asyncio MiB"]))
    print()
    print(f"links shared against unshared: message-level all_reduce(1.0) on {_log2(sharing_ranks)} ranks of "
          f"dgx_h100:{sharing_ranks // 8} (fresh processes, alternated, median of {repeats})")
    print(table(_sharing_rows(sharing), ["build", "shared s", "unshared s", "ratio", "CPU ratio", "target",
                                         "virtual time"]))
    figures["sharing"] = sharing
    print()
    speed_rows = []
    for build, speed in speeds.items():
        if isinstance(speed, str):
            speed_rows.append([build, "per message", speed, "", "", ""])
            continue
        speed_rows += [
            [build, "per message (post, match, complete, resume)", f"{speed['per_message'] * 1e6:.2f} us",
             f"{speed['bare_resume'] * 1e6:.3f} us", f"{speed['ratio']:.1f}x",
             "coro.send(None) on a suspended coroutine"],
            [build, "", "", f"{speed['floor'] * 1e6:.3f} us", f"{speed['floor_ratio']:.1f}x",
             "toy engine: dict match + ready list (the Python floor)"],
            [build, "message events per second", f"{1 / speed['per_message']:,.0f}", "", "", ""]]
    print(table(speed_rows, ["build", "what", "simcluster", "baseline", "ratio", "baseline is"]))
    figures["speed"] = speeds
    if isinstance(idle, dict) and isinstance(bare, dict):
        extra = idle["per_rank"] - bare["per_rank"]
        print(f"memory per idle rank (blocked in recv, {idle_ranks:,} ranks): "
              f"{idle['per_rank']:,.0f} bytes; a bare suspended coroutine: {bare['per_rank']:,.0f} bytes; "
              f"simcluster's own: {extra:,.0f} bytes per rank (target: under 1024)")
        figures["idle"] = {"per_rank": idle["per_rank"], "bare": bare["per_rank"], "extra": extra}
    else:
        print(f"memory per idle rank: {idle if isinstance(idle, str) else bare}")
    return figures


QUICK = {"sizes": (1 << 10, 1 << 12, 1 << 14), "budget": 10.0, "idle_ranks": 1 << 14,
         "round_trips": 2000, "resumes": 200_000, "asyncio_cases": (("barrier", 1 << 16),),
         "sharing_ranks": 1 << 12}

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
    else:
        main()
