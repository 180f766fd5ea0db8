"""Traces: spans and message flows in virtual time, Chrome JSON, the text and picture views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import trace as sctrace

ALPHA, BETA = 1e-6, 1e-9  # 1 us + 1 byte/ns
AB = sc.latency.AlphaBeta(ALPHA, BETA)


def spans_of(result: sc.RunResult, rank: int) -> list[tuple[str, float, float, dict[str, Any]]]:
    return [(s.name, s.start, s.end, s.args) for s in result.trace.spans if s.rank == rank]


def approx_span(name: str, start: float, end: float, **args: Any) -> tuple[Any, ...]:
    return (name, pytest.approx(start, abs=1e-15), pytest.approx(end, abs=1e-15), args)


# ---- recording ----


async def p2p_program(comm: sc.Comm) -> None:
    if comm.rank == 0:
        await comm.send(np.zeros(1000), 1, tag=3)  # 8000 bytes, eager
        req = comm.isend(np.ones(500), 1, tag=4)  # 4000 bytes, queued behind the first on the port
        await comm.sleep(2e-6)
        await req
    else:
        await comm.recv(src=0, tag=3)
        req = comm.irecv(src=0, tag=4)
        await req


def test_trace_records_p2p_spans_with_alpha_beta_times() -> None:
    result = sc.run(p2p_program, world_size=2, latency=AB, trace=True)
    first = ALPHA + 8000 * BETA  # 9 us
    # the second message starts when the send port frees (8 us) and takes 1 + 4 us
    second = 8000 * BETA + ALPHA + 4000 * BETA  # 13 us
    assert spans_of(result, 0) == [
        approx_span("send", 0.0, 0.0, dst=1, tag=3, nbytes=8000),
        approx_span("isend", 0.0, 0.0, dst=1, tag=4, nbytes=4000),
        approx_span("sleep", 0.0, 2e-6, seconds=2e-6),  # the isend had completed: no wait span
    ]
    assert spans_of(result, 1) == [
        approx_span("recv", 0.0, first, src=0, tag=3, nbytes=8000),
        approx_span("irecv", first, first, src=0, tag=4),
        approx_span("wait", first, second, op="irecv(src=0, tag=4)"),
    ]
    assert result.elapsed == pytest.approx(second)


def test_trace_records_each_message_as_a_flow_from_send_to_receive() -> None:
    result = sc.run(p2p_program, world_size=2, latency=AB, trace=True)
    got = [(m.src, m.dst, m.tag, m.nbytes, m.sent, m.recv, m.comm) for m in result.trace.messages]
    assert got == [
        (0, 1, 3, 8000, 0.0, pytest.approx(9e-6), "world"),
        (0, 1, 4, 4000, 0.0, pytest.approx(13e-6), "world"),
    ]


def test_trace_is_none_when_not_tracing() -> None:
    assert sc.run(p2p_program, world_size=2).trace is None


async def more_ops(comm: sc.Comm) -> None:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    await comm.sendrecv(comm.rank, right, src=left)
    if comm.rank == 0:
        await comm.ssend("x", 1, tag=9)
    elif comm.rank == 1:
        await comm.probe(src=0, tag=9)
        await comm.recv(src=0, tag=9)
    req = comm.ibarrier()
    await req


def test_trace_names_every_kind_of_operation() -> None:
    result = sc.run(more_ops, world_size=3, latency=AB, trace=True)
    names = {(s.rank, s.name) for s in result.trace.spans}
    assert {(0, "sendrecv"), (1, "sendrecv"), (2, "sendrecv"), (0, "ssend"), (1, "probe"),
            (1, "recv"), (0, "ibarrier"), (2, "ibarrier")} <= names


async def collectives_program(comm: sc.Comm) -> int:
    await comm.barrier()
    return int(await comm.broadcast(comm.rank + 10, src=1))


def test_trace_records_collectives_with_their_algorithm_and_textbook_time() -> None:
    result = sc.run(collectives_program, world_size=3, latency=AB, trace=True,
                    algorithms={"barrier": "dissemination", "broadcast": "binomial"})
    assert list(result) == [11, 11, 11]
    for rank in range(3):
        barrier, broadcast = spans_of(result, rank)
        # dissemination barrier on 3 ranks: ceil(log2 3) rounds of alpha
        assert barrier == approx_span("barrier", 0.0, 2 * ALPHA, call="barrier()",
                                      algorithm="dissemination", seq=1)
        assert broadcast[0] == "broadcast"
        assert broadcast[3]["call"] == "broadcast(src=1)"
        assert broadcast[3]["algorithm"] == "binomial"
    sync = [m for m in result.trace.messages if m.nbytes == 0]
    assert len(sync) == 6  # 2 rounds x 3 ranks, synchronisation counts 0 bytes
    data = [m for m in result.trace.messages if m.nbytes > 0]
    assert sorted((m.src, m.dst) for m in data) == [(1, 0), (1, 2)]
    assert all(m.recv is not None and m.recv >= m.sent + ALPHA for m in result.trace.messages)


def test_trace_names_each_collective_message_after_its_call_number_and_algorithm() -> None:
    result = sc.run(collectives_program, world_size=3, latency=AB, trace=True,
                    algorithms={"barrier": "dissemination", "broadcast": "binomial"})
    names = [m.comm for m in result.trace.messages]
    assert set(names) == {"world:barrier#1(dissemination)", "world:broadcast#2(binomial)"}
    assert names.count("world:barrier#1(dissemination)") == 6


def test_trace_names_nonblocking_and_sub_communicator_collectives() -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.ibarrier()
        half = await comm.split(comm.rank % 2)
        await half.all_reduce(np.ones(2), algorithm="ring")
        if comm.rank == 0:
            await comm.send(1, 1, tag=5)  # user messages keep the comm's name
        elif comm.rank == 1:
            await comm.recv(src=0, tag=5)

    result = sc.run(main, world_size=4, trace=True)
    names = {m.comm for m in result.trace.messages}
    barrier = {n for n in names if "barrier" in n}
    assert len(barrier) == 1 and barrier.pop().startswith("world:barrier#1(")
    sub = {n for n in names if "all_reduce" in n}
    assert len(sub) == 2 and all(n.endswith(":all_reduce#1(ring)") and not n.startswith("world:")
                                 for n in sub)
    assert "world" in names


# ---- the Chrome trace file ----


def test_trace_path_writes_chrome_json_one_track_per_rank(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    result = sc.run(collectives_program, world_size=3, latency=AB, trace=str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    procs = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert [p["pid"] for p in procs] == [0]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == len(result.trace.spans) == 6
    assert {e["tid"] for e in spans} == {0, 1, 2}
    barrier = [e for e in spans if e["name"] == "barrier"]
    assert [e["dur"] for e in barrier] == [pytest.approx(2.0)] * 3  # microseconds
    assert doc["otherData"]["world_size"] == 3


def test_trace_file_flows_pair_each_send_with_its_receive(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    result = sc.run(p2p_program, world_size=2, latency=AB, trace=path)
    events = json.loads(path.read_text())["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    assert len(starts) == len(result.trace.messages) == 2
    for flow_id, s in starts.items():
        f = ends[flow_id]
        assert (s["tid"], f["tid"]) == (s["args"]["src"], s["args"]["dst"]) == (0, 1)
        assert f["ts"] >= s["ts"]
        assert f["bp"] == "e"
    assert sorted(e["ts"] for e in ends.values()) == [pytest.approx(9.0), pytest.approx(13.0)]


async def racy(comm: sc.Comm) -> list[int] | None:
    if comm.rank == 0:
        return [await comm.recv() for _ in range(comm.size - 1)]
    await comm.sleep(1e-6)
    await comm.send(comm.rank, 0)
    return None


def test_same_seed_gives_a_byte_identical_trace_file(tmp_path: Path) -> None:
    model = sc.latency.Jitter(AB, rel=0.2)
    files = []
    for i, seed in enumerate([5, 5, 6]):
        path = tmp_path / f"run{i}.json"
        sc.run(racy, world_size=4, latency=model, seed=seed, trace=path)
        files.append(path.read_bytes())
    assert files[0] == files[1]
    assert files[0] != files[2]  # another seed, other jitter: another trace


def test_trace_file_accepts_numpy_scalar_arguments(tmp_path: Path) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send(1, np.int64(1), tag=np.int32(2))  # type: ignore[arg-type]
        else:
            await comm.recv(src=np.int64(0))  # type: ignore[call-overload]

    path = tmp_path / "np.json"
    sc.run(main, world_size=2, trace=path)
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {(e["name"], e["args"].get("dst", e["args"].get("src"))) for e in spans} == {
        ("send", 1), ("recv", 0)}


def test_load_rejects_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a Chrome trace|cannot read"):
        sctrace.show(path)


# ---- show: the text sequence diagram ----


async def ring(comm: sc.Comm) -> int:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    req = comm.isend(np.arange(1.0), right, tag=7)  # 8 bytes
    got = await comm.recv(src=left, tag=7)
    await req
    return int(got[0])


def test_show_draws_one_line_per_message_with_arrows_the_right_way(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    sc.run(ring, world_size=3, latency=AB, trace=path)
    lines = sctrace.show(path).splitlines()
    header, *rows, footer = lines
    assert header.split() == ["rank", "0", "rank", "1", "rank", "2"]
    assert footer.startswith("3 messages;")
    assert len(rows) == 3
    col0, col1, col2 = (header.index(f"rank {r}") for r in range(3))
    seen = set()
    for row in rows:
        times, diagram = row[:24], row[24:]
        assert times.split() == ["0.000", "->", "1.008"]  # 1 us + 8 bytes at 1 byte/ns
        assert "t7 8B" in row
        if "<" in diagram:  # 2 -> 0: arrow head at rank 0, tail at rank 2
            assert row[col0] == "|" and row[col0 + 1] == "<" and row[col2] == "|"
            assert set(row[col0 + 2:col2]) <= set("- t78B")
            seen.add((2, 0))
        else:  # i -> i+1: the head ">" just left of the receiver's column
            dst = col1 if row[col1 - 1] == ">" else col2
            assert row[dst - 1] == ">" and row[dst] == "|"
            assert row[dst - 12] == "|" and row[dst - 11] == "-"  # the sender's column, one left
            assert set(row[dst - 11:dst - 1]) <= set("- t78B")
            seen.add((0, 1) if dst == col1 else (1, 2))
    assert seen == {(0, 1), (1, 2), (2, 0)}


def test_show_orders_messages_by_virtual_time(tmp_path: Path) -> None:
    async def chain(comm: sc.Comm) -> None:  # 0 -> 1 -> 2 -> 0, each after the previous
        if comm.rank != 0:
            await comm.recv(src=comm.rank - 1)
        await comm.send(comm.rank, (comm.rank + 1) % comm.size)
        if comm.rank == 0:
            await comm.recv(src=comm.size - 1)

    path = tmp_path / "chain.json"
    sc.run(chain, world_size=3, latency=sc.latency.Constant(1e-6), trace=path)
    rows = sctrace.show(path).splitlines()[1:-1]
    assert [row.split()[:3] for row in rows] == [
        ["0.000", "->", "1.000"], ["1.000", "->", "2.000"], ["2.000", "->", "3.000"]]


async def chain(comm: sc.Comm) -> None:  # 0 -> 1 -> 2 -> 0, each after the previous
    if comm.rank != 0:
        await comm.recv(src=comm.rank - 1)
    await comm.send(comm.rank, (comm.rank + 1) % comm.size)
    if comm.rank == 0:
        await comm.recv(src=comm.size - 1)


@pytest.mark.parametrize(("latency", "times", "unit"), [
    (1.5e-3, ["1.500", "3.000", "4.500"], "milliseconds"),
    (2.0, ["2.000", "4.000", "6.000"], "seconds"),
    (2.5e-7, ["250.000", "500.000", "750.000"], "nanoseconds"),
])
def test_show_picks_the_time_unit_for_the_traces_length(tmp_path: Path, latency: float,
                                                         times: list[str], unit: str) -> None:
    path = tmp_path / "chain.json"
    sc.run(chain, world_size=3, latency=sc.latency.Constant(latency), trace=path)
    *rows, footer = sctrace.show(path).splitlines()[1:]
    assert [row.split()[2] for row in rows] == times
    assert footer == f"3 messages; times in virtual {unit} (send -> receive)"


def test_show_labels_collective_messages_with_their_call(tmp_path: Path) -> None:
    path = tmp_path / "coll.json"
    sc.run(collectives_program, world_size=3, latency=AB, trace=path,
           algorithms={"barrier": "dissemination", "broadcast": "binomial"})
    rows = sctrace.show(path).splitlines()[1:-1]
    assert sum(row.endswith("world:barrier#1(dissemination) 0B") for row in rows) == 6
    assert sum("world:broadcast#2(binomial) " in row for row in rows) == 2


# ---- plot: the timeline picture ----


def test_plot_writes_a_png_that_is_not_blank(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image

    path = tmp_path / "run.json"
    sc.run(collectives_program, world_size=3, latency=AB, trace=path)
    png = tmp_path / "timeline.png"
    sctrace.plot(path, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    colours = np.unique(image.reshape(-1, image.shape[-1]), axis=0)
    assert len(colours) > 10  # bars, arrows, labels: far from a blank canvas


def test_plot_draws_zero_width_spans_as_markers_above_the_bars(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PathCollection

    path = tmp_path / "p2p.json"
    sc.run(p2p_program, world_size=2, latency=AB, trace=path)
    fig = sctrace._figure(sctrace.load(path))
    ax = fig.axes[0]
    markers = [c for c in ax.collections if isinstance(c, PathCollection)]
    drawn = sorted((c.get_label(), round(float(x), 9), float(y))
                   for c in markers for x, y in c.get_offsets())
    # send and isend complete at once on rank 0 (eager), stacked in its row; rank 1's irecv
    # posts at 9 us
    assert drawn == [("irecv", 9.0, 1.0), ("isend", 0.0, 0.125), ("send", 0.0, -0.125)]
    bars = [c for c in ax.collections if not isinstance(c, PathCollection)]
    assert len(bars) == 3  # sleep, recv, wait: the spans with a width
    assert all(m.get_sizes()[0] >= 20 and m.zorder > b.zorder for m in markers for b in bars)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["irecv", "isend", "recv", "send", "sleep", "wait"]
    assert ax.get_xlabel() == "virtual time (us)"


def test_plot_picks_the_time_unit_for_the_traces_length(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "chain.json"
    sc.run(chain, world_size=3, latency=sc.latency.Constant(1.5e-3), trace=path)
    ax = sctrace._figure(sctrace.load(path)).axes[0]
    assert ax.get_xlabel() == "virtual time (ms)"
    assert ax.get_xlim()[1] == pytest.approx(4.5, rel=0.1)
