"""Event recording, Chrome-trace export, and the text and picture views of a trace.

A ``Trace`` collects two kinds of records while a run goes, both in virtual
time:

* spans: one per operation a rank performed (``send``, ``recv``, ``wait``,
  ``sleep``, ``all_reduce``, ...), with its start, end and arguments;
* messages: one per point-to-point message (collective traffic included),
  from the moment it was sent to the moment its receive completed.

Rule 1: nothing here reads the wall clock, and records are kept in the order
the (seeded, deterministic) engine produced them, so the same seed gives a
byte-identical file.
Rule 2: recording costs one ``if trace is not None`` per call when off.

The file is Chrome Trace Event JSON (Perfetto and chrome://tracing open it):
one process per hosting OS process, one thread (track) per rank, spans as
complete events (``ph: "X"``) and messages as flow events (``ph: "s"``/``"f"``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Counter", "Message", "Span", "Trace", "load", "messages_of", "plot", "show", "world_size_of"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


_US = 1e6  # Chrome traces count microseconds
_UNITS = (("s", 1.0, "seconds"), ("ms", 1e-3, "milliseconds"), ("us", 1e-6, "microseconds"),
          ("ns", 1e-9, "nanoseconds"))


def _unit(seconds: float) -> tuple[str, float, str]:
    """Return the unit that shows ``seconds`` as 1 to 999: (symbol, its seconds, its name)."""
    if seconds == 0:
        return _UNITS[0]
    for unit in _UNITS:
        if abs(seconds) >= unit[1]:
            return unit
    return _UNITS[-1]


def format_seconds(seconds: float) -> str:
    """Format a virtual time with a unit for its magnitude: ``0 s``, ``4.0055 us``, ``12.3 ms``."""
    symbol, scale, _ = _unit(seconds)
    return f"{seconds / scale:.6g} {symbol}"


@dataclass(slots=True)
class Span:
    """One operation of one rank, in virtual seconds."""

    rank: int
    name: str
    start: float
    end: float
    args: dict[str, Any]


@dataclass(slots=True)
class Message:
    """One message, from its send to its completed receive (``recv`` is None if never received)."""

    id: int
    src: int
    dst: int
    tag: int
    nbytes: int
    sent: float
    recv: float | None = None
    comm: str = "world"


@dataclass(slots=True)
class Counter:
    """A value of a counter track from ``time`` on: a platform link's utilisation (0 to 1)."""

    name: str
    time: float
    value: float


@dataclass(slots=True)
class Trace:
    """What a traced run recorded; ``RunResult.trace`` holds one."""

    world_size: int
    spans: list[Span] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    procs: int = 1
    _open: dict[tuple[int, int], Message] = field(default_factory=dict, repr=False)
    counters: list[Counter] = field(default_factory=list)

    # ---- recording (called by the engine and Comm) ----

    def span(self, rank: int, name: str, start: float, end: float, **args: Any) -> None:
        """Record one operation of ``rank``."""
        self.spans.append(Span(rank, name, start, end, args))

    def sent(self, msg_id: int, src: int, dst: int, tag: int, nbytes: int, now: float,
             comm: str) -> None:
        """Record that world rank ``src`` sent message ``msg_id`` at ``now``."""
        message = Message(msg_id, src, dst, tag, nbytes, now, None, comm)
        self.messages.append(message)
        self._open[(src, msg_id)] = message

    def counter(self, name: str, time: float, value: float) -> None:
        """Record that counter ``name`` (a platform link) holds ``value`` from ``time`` on."""
        self.counters.append(Counter(name, time, value))

    def received(self, src: int, msg_id: int, now: float) -> None:
        """Record that the receive of ``src``'s message ``msg_id`` completed at ``now``."""
        message = self._open.pop((src, msg_id), None)
        if message is not None:
            message.recv = now

    # ---- export ----

    def to_chrome(self) -> dict[str, Any]:
        """Return the trace as a Chrome Trace Event document (a JSON-ready dict)."""
        per_proc = -(-self.world_size // self.procs)
        events: list[dict[str, Any]] = []
        for proc in range(self.procs):
            events.append({"ph": "M", "name": "process_name", "pid": proc, "tid": 0,
                           "args": {"name": f"process {proc}"}})
        for rank in range(self.world_size):
            events.append({"ph": "M", "name": "thread_name", "pid": rank // per_proc, "tid": rank,
                           "args": {"name": f"rank {rank}"}})
        streams = sorted({s.rank for s in self.spans if s.args.get("stream") == "compute"})
        for rank in streams:  # compute="gpu:...": each rank's compute stream, a track beside the rank's
            events.append({"ph": "M", "name": "thread_name", "pid": rank // per_proc,
                           "tid": self.world_size + rank, "args": {"name": f"rank {rank} compute"}})
        for s in self.spans:
            tid = self.world_size + s.rank if s.args.get("stream") == "compute" else s.rank
            events.append({"ph": "X", "name": s.name, "cat": "op", "pid": s.rank // per_proc,
                           "tid": tid, "ts": s.start * _US, "dur": (s.end - s.start) * _US,
                           "args": s.args})
        for m in self.messages:
            if m.recv is None:
                continue
            args = {"src": m.src, "dst": m.dst, "tag": m.tag, "nbytes": m.nbytes, "comm": m.comm}
            events.append({"ph": "s", "name": "message", "cat": "message", "id": m.id,
                           "pid": m.src // per_proc, "tid": m.src, "ts": m.sent * _US, "args": args})
            events.append({"ph": "f", "bp": "e", "name": "message", "cat": "message", "id": m.id,
                           "pid": m.dst // per_proc, "tid": m.dst, "ts": m.recv * _US, "args": args})
        if self.counters:  # a platform's links: a track each, in a process of their own
            events.append({"ph": "M", "name": "process_name", "pid": self.procs, "tid": 0,
                           "args": {"name": "network links (utilisation)"}})
            for c in self.counters:
                events.append({"ph": "C", "name": c.name, "cat": "link", "pid": self.procs,
                               "ts": c.time * _US, "args": {"utilisation": c.value}})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"generator": "simcluster", "world_size": self.world_size,
                              "procs": self.procs, "time_unit": "virtual microseconds"}}

    def dumps(self) -> str:
        """Return the Chrome trace as JSON text (byte-identical for the same run and seed)."""
        return json.dumps(self.to_chrome(), sort_keys=True, separators=(",", ":"),
                          default=_jsonable)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the Chrome trace JSON to ``path``."""
        Path(path).write_text(self.dumps() + "\n", encoding="utf-8")


def _jsonable(value: Any) -> Any:
    """Turn a span argument JSON cannot hold (numpy scalars, arrays, objects) into one it can."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        return item()
    if isinstance(value, (set, frozenset)):
        return sorted(map(repr, value))
    return repr(value)


# ---- reading a trace file back ----


def load(path: str | Path) -> dict[str, Any]:
    """Read a Chrome trace JSON file written by simcluster."""
    try:
        doc: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"trace: cannot read {str(path)!r}: {exc}; pass a file written by "
                         "run(trace=PATH) or simcluster run --trace") from None
    if "traceEvents" not in doc:
        raise ValueError(f"trace: {str(path)!r} has no traceEvents; it is not a Chrome trace")
    return doc


def messages_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the messages of a trace document, in virtual-time order of their receive."""
    starts = {e["id"]: e for e in doc["traceEvents"] if e.get("ph") == "s"}
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "f" and e["id"] in starts:
            s = starts[e["id"]]
            out.append({**e["args"], "sent": s["ts"], "recv": e["ts"], "id": e["id"]})
    out.sort(key=lambda m: (m["recv"], m["sent"], m["id"]))
    return out


def world_size_of(doc: dict[str, Any]) -> int:
    """Return the world size recorded in a trace document."""
    other = doc.get("otherData", {})
    if "world_size" in other:
        return int(other["world_size"])
    return 1 + max((e.get("tid", 0) for e in doc["traceEvents"]), default=0)


def show(path: str | Path, *, width: int = 12) -> str:
    """Return a text sequence diagram of a trace's messages: one column per rank.

    Each line is one message, in virtual-time order of its arrival: the
    arrow runs from the sender's column to the receiver's, labelled with the
    size and the tag (world), the communicator, or the collective call
    (``world:all_reduce#3(ring)``: the comm's third collective, and its
    algorithm). The line starts with the send and receive times, in the unit
    that suits the trace's last receive. A fault plan's crashes and the
    revocations of communicators get a line of their own, an ``X`` in the
    rank's column (``simcluster.faults``).
    """
    doc = load(path)
    size = world_size_of(doc)
    msgs = messages_of(doc)
    faults = [(e["ts"], e["tid"], {**e["args"], "dur": e.get("dur", 0.0)})
              for e in doc["traceEvents"] if e.get("ph") == "X" and "fault" in e.get("args", {})]
    faults.sort(key=lambda f: (f[0], f[1]))
    last = max([0.0, *(m["recv"] for m in msgs), *(f[0] for f in faults)])
    _, scale, unit = _unit(last / _US)
    per_us = 1 / (scale * _US)
    col = max(width, 6)
    head = " " * 25 + "".join(f"rank {r}".ljust(col) for r in range(size))
    lines = [head.rstrip()]
    for m in _with_faults(msgs, faults):
        if "fault" in m:
            row = ["|".ljust(col) for _ in range(size)]
            row[m["rank"]] = "X".ljust(col)
            what = _fault_text(m, per_us)
            lines.append(f"{m['ts'] * per_us:10.3f}" + " " * 15 + "".join(row) + f"rank {m['rank']} {what}")
            continue
        cells = ["|".ljust(col) for _ in range(size)]
        src, dst = m["src"], m["dst"]
        label = f"t{m['tag']} {m['nbytes']}B" if m["comm"] == "world" else f"{m['comm']} {m['nbytes']}B"
        lo, hi = min(src, dst), max(src, dst)
        row = list("".join(cells))
        start, end = lo * col, hi * col
        if src == dst:
            row[start + 1:start + 4] = list("<->")
        else:
            for i in range(start + 1, end):
                row[i] = "-"
            text = f" {label} "
            mid = start + max(1, (end - start - len(text)) // 2)
            inline = end - start > len(text) + 2
            if inline:
                row[mid:mid + len(text)] = list(text)
            if src < dst:
                row[end - 1] = ">"
            else:
                row[start + 1] = "<"
            if not inline:  # too short an arrow for its label: write it after the columns
                row = list("".join(row).rstrip().ljust(size * col) + label)
        times = f"{m['sent'] * per_us:10.3f} -> {m['recv'] * per_us:10.3f} "
        lines.append(times + "".join(row).rstrip())
    lines.append(f"{len(msgs)} messages; times in virtual {unit} (send -> receive)")
    lines += _busiest_links(doc, per_us, unit)
    return "\n".join(lines)


def _busiest_links(doc: dict[str, Any], per_us: float, unit: str, top: int = 5) -> list[str]:
    """A platform's busiest links (counter events): how long each was busy, and how full."""
    tracks: dict[str, list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "C" and e.get("cat") == "link":
            tracks.setdefault(e["name"], []).append((e["ts"], float(e["args"]["utilisation"])))
    if not tracks:
        return []
    rows = []
    for name, points in tracks.items():
        busy = carried = 0.0
        for (t, value), (t_next, _) in zip(points, points[1:]):
            if value > 0:
                busy += t_next - t
                carried += (t_next - t) * value
        if busy > 0:
            rows.append((carried, busy, name))
    rows.sort(key=lambda r: (-r[0], r[2]))
    lines = [f"busiest links of {len(tracks)} used (busy time in virtual {unit}, mean utilisation "
             "while busy):"]
    for carried, busy, name in rows[:top]:
        lines.append(f"  {name}: busy {busy * per_us:.3f}, {100 * carried / busy:.1f}%")
    return lines


def _fault_text(mark: dict[str, Any], per_us: float) -> str:
    """What a fault marker says in ``show``: crashed, revoked, slow or cut (``simcluster.faults``)."""
    kind = mark["fault"]
    if kind == "crash-stop":
        return "crashed"
    if kind == "revoke":
        return f"revoked {mark.get('comm', '')}".rstrip()
    if kind == "restart":
        return f"restarted (restart {mark['attempt']})"
    until = f"until {(mark['ts'] + mark.get('dur', 0.0)) * per_us:.3f}"
    if kind == "slow":
        return f"slow x{mark['factor']:g} {until}"
    return f"cut between {mark['a']} and {mark['b']} {until}"


def _with_faults(msgs: list[dict[str, Any]], faults: list[tuple[float, int, dict[str, Any]]]
                 ) -> list[dict[str, Any]]:
    """The messages, with the fault markers put in by time (a marker before a message that arrives then)."""
    marks = [{**args, "ts": ts, "rank": rank} for ts, rank, args in faults]
    out: list[dict[str, Any]] = []
    i = 0
    for m in msgs:
        while i < len(marks) and marks[i]["ts"] <= m["recv"]:
            out.append(marks[i])
            i += 1
        out.append(m)
    return out + marks[i:]


def plot(path: str | Path, output: str | Path = "timeline.png") -> None:
    """Draw a timeline PNG: ranks as rows, operations as bars, messages as arrows.

    Operations that take no virtual time (an eager ``send``, ``isend``,
    ``irecv``) are drawn as diamonds over the bars. Needs matplotlib
    (``pip install 'simcluster[plot]'``).
    """
    fig = _figure(load(path))
    import matplotlib.pyplot as plt

    fig.savefig(output, dpi=100)
    plt.close(fig)


def _instants(spans: list[dict[str, Any]]) -> dict[tuple[float, int], list[str]]:
    """Group the spans of no width by (time, rank): the names of each, in recorded order."""
    out: dict[tuple[float, int], list[str]] = {}
    for e in spans:
        if e["dur"] == 0:
            out.setdefault((e["ts"], e["tid"]), []).append(e["name"])
    return out


def _figure(doc: dict[str, Any]) -> Any:
    """Draw a trace document's timeline; return the matplotlib Figure."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError("trace plot needs matplotlib; install it with "
                          "python -m pip install 'simcluster[plot]'") from None
    size = world_size_of(doc)
    fig, ax = plt.subplots(figsize=(12, 1 + 0.6 * size))
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    msgs = messages_of(doc)
    names = sorted({e["name"] for e in spans})
    colors = {n: plt.get_cmap("tab20")(i % 20) for i, n in enumerate(names)}
    end_us = max([e["ts"] + e["dur"] for e in spans] + [m["recv"] for m in msgs] + [0.0])
    symbol, scale, _ = _unit(end_us / _US)
    per_us = 1 / (scale * _US)  # the axis's unit per trace microsecond
    end = max(end_us * per_us, 1e-9)
    instants: dict[str, list[tuple[float, float]]] = {}
    for (ts, rank), same in _instants(spans).items():  # a bar of no width would not show
        for k, name in enumerate(same):  # markers at one time and rank stacked, all visible
            instants.setdefault(name, []).append((ts * per_us, rank + 0.25 * (k - (len(same) - 1) / 2)))
    for e in spans:
        if e["dur"] == 0:
            continue
        dur = max(e["dur"] * per_us, end * 0.002)  # keep very short spans visible
        ax.broken_barh([(e["ts"] * per_us, dur)], (e["tid"] - 0.35, 0.7), color=colors[e["name"]],
                       edgecolor="black", linewidth=0.3, zorder=2)
    for name, points in instants.items():
        xs, ys = zip(*points)
        ax.scatter(xs, ys, s=40, marker="D", color=colors[name], edgecolors="black",
                   linewidths=0.5, zorder=3, label=name)
    for m in msgs:
        ax.annotate("", xy=(m["recv"] * per_us, m["dst"]), xytext=(m["sent"] * per_us, m["src"]),
                    arrowprops={"arrowstyle": "->", "color": "0.25", "lw": 0.8}, zorder=4)
    ax.set_yticks(range(size), [f"rank {r}" for r in range(size)])
    ax.set_ylim(size - 0.5, -0.5)  # rank 0 on top
    ax.set_xlim(-0.01 * end, end * 1.01)
    ax.set_xlabel(f"virtual time ({symbol})")
    ax.set_title("simcluster timeline")
    barred = {e["name"] for e in spans if e["dur"] != 0}
    handles = [Rectangle((0, 0), 1, 1, color=colors[n]) if n in barred else
               Line2D([], [], linestyle="", marker="D", color=colors[n], markeredgecolor="black")
               for n in names[:20]]
    if handles:
        ax.legend(handles, names[:20], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
