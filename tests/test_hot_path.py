"""The hot-path contract: fast constructors build what their types declare, inlined twins agree.

The engine builds envelopes, statuses and receives field by field on the
hot path (one per message), and a few readable functions have hand-inlined
twins where they run once per message. Each such pair is pinned here, so a
change to one side that forgets the other fails a test instead of skewing
a run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simcluster as sc
from simcluster import _build
from simcluster.collectives import _reduction
from simcluster.engine import protocol as _protocol
from simcluster.engine.kernel import READY, Task
from simcluster.engine.delivery import LocalDelivery
from simcluster.engine.assembly import Engine
from simcluster.engine.ports import NativePorts
from simcluster.latency import AlphaBeta, Constant, Hierarchical, Jitter, LatencyModel, LogGP, Ports
from simcluster.matching import ANY_SOURCE, ANY_TAG, MatchQueue
from simcluster.request import PENDING, Request, Status, make_status
from simcluster.transports.base import Envelope, make_envelope
from simcluster.transports.memory import MemoryTransport

ENVELOPE_FIELDS = ("kind", "ctx", "src", "dst", "tag", "msg_id", "nbytes", "time", "header", "buffers",
                   "sync", "meta")

# ---- fast constructors ----


def test_make_envelope_takes_the_twelve_fields_in_declared_order() -> None:
    assert Envelope._fields == ENVELOPE_FIELDS
    values = (1, 2, 3, 4, 5, 6, 7, 8.5, b"h", (np.zeros(1),), True, b"m")
    for fast in (make_envelope(values), _protocol._new_envelope(values), _protocol._new_envelope(list(values))):
        assert type(fast) is Envelope
        assert fast == Envelope(*values)
        assert fast._asdict() == dict(zip(ENVELOPE_FIELDS, values))


def test_a_booking_leaves_as_its_envelope_and_sorts_by_its_posting_serial() -> None:
    # _protocol keeps an instant's messages as Bookings: the Envelope fields, then Task.serial
    item = _protocol.Booking(kind=0, ctx=1, src=30, dst=40, tag=5, msg_id=60, nbytes=70, time=8.0,
                             header=b"h", buffers=(), sync=True, meta=b"m", serial=90)
    env = item.envelope()
    assert type(env) is Envelope
    assert env == Envelope(0, 1, 30, 40, 5, 60, 70, 8.0, b"h", (), True, b"m")
    assert _protocol.by_source(item) == (env.src, 90)
    assert _protocol.by_source_and_id(item) == (env.src, 90, env.msg_id)
    assert _protocol.by_arrival(item) == (env.time, env.src, 90, env.msg_id)


def test_make_status_takes_source_tag_nbytes() -> None:
    assert Status._fields == ("source", "tag", "nbytes")
    for fast in (make_status((3, 7, 24)), _protocol._new_status((3, 7, 24))):
        assert type(fast) is Status and fast == Status(source=3, tag=7, nbytes=24)


def _engine(world_size: int = 2) -> Engine:
    return Engine(world_size, MemoryTransport(), AlphaBeta(1e-6, 1e9).bind(world_size, random.Random(0)))


def test_a_receive_request_sets_every_slot_a_request_sets_and_the_same_defaults() -> None:
    engine = _engine()
    task = Task(1, None)  # type: ignore[arg-type]
    fast = _protocol._RecvRequest(engine.kernel, task, "irecv", None, 0, 5, None, True)  # type: ignore[arg-type]
    plain: Request[Any] = Request(engine.kernel, task, "irecv")
    plain.nonblocking = True
    common = [s for s in Request.__slots__ if s not in ("__weakref__", "_peer")]
    for slot in common:
        assert getattr(fast, slot) == getattr(plain, slot), slot
    assert not fast.done() and (fast.src, fast.tag, fast.buf) == (0, 5, None)
    engine.close()


def test_a_task_starts_ready_at_time_zero_with_nothing_pending() -> None:
    task = Task(4, None)  # type: ignore[arg-type]
    assert (task.rank, task.state, task.waiting, task.time, task.spins, task.serial) == (4, READY, None, 0.0, 0, 0)
    assert task.collective is None and task.done_request is None and task.comm is None


# ---- twins: a port's whole charge equals its two halves ----

MODELS: dict[str, Callable[[], LatencyModel]] = {
    "alphabeta": lambda: AlphaBeta(alpha=1e-6, beta=1e-9),
    "constant": lambda: Constant(2e-6),
    "loggp": lambda: LogGP(L=2e-6, o=5e-7, g=1e-6, G=1e-9),
    "hierarchical": lambda: Hierarchical(intra=AlphaBeta(1e-7, 1e-10), inter=AlphaBeta(2e-6, 1e-9), ranks_per_node=2),
    "jitter": lambda: Jitter(AlphaBeta(alpha=1e-6, beta=1e-9), rel=0.2),
}

messages = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 1 << 20),
                              st.integers(0, 50)), min_size=1, max_size=30)


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=60, deadline=None)
@given(msgs=messages)
def test_transfer_equals_send_side_then_recv_side(name: str, msgs: list[tuple[int, int, int, int]]) -> None:
    model = MODELS[name]()
    whole, split = model.bind(4, random.Random(3)), model.bind(4, random.Random(3))
    alone = model.bind(4, random.Random(3))
    for src, dst, nbytes, step in sorted(msgs, key=lambda m: m[3]):
        t = step * 1e-6
        depart, wire = split.send_side(src, dst, nbytes, t)
        arrive = split.recv_side(src, dst, nbytes, wire)
        assert whole.transfer(src, dst, nbytes, t) == (depart, arrive)
        if isinstance(alone, NativePorts):  # what the engine calls per message
            assert alone.arrival(src, dst, nbytes, t) == arrive


# ---- twins: _charge's one-message-per-port shortcut equals the two-halves path ----


def _instant(min_size: int) -> st.SearchStrategy[list[tuple[int, int, int, int]]]:
    """An instant's messages on 4 ranks: (src, dst, nbytes, the posting task's serial)."""
    return st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 1 << 20),
                              st.integers(0, 2)), min_size=min_size, max_size=12)


def _items(msgs: list[tuple[int, int, int, int]]) -> list[_protocol.Booking]:
    """Fresh bookings of ``msgs`` (the engine changes a booking's time as it charges it)."""
    return [_protocol.Booking(kind=0, ctx=0, src=src, dst=dst, tag=0, msg_id=i + 1, nbytes=nbytes,
                              time=1e-6, header=b"", buffers=(), sync=False, serial=serial)
            for i, (src, dst, nbytes, serial) in enumerate(msgs)]


def _two_halves(ports: Ports, items: list[_protocol.Booking]) -> list[float]:
    items = sorted(items, key=_protocol.by_source)
    wires = {id(b): ports.send_side(b.src, b.dst, b.nbytes, b.time)[1] for b in items}
    arrive = {}
    for b in sorted(items, key=lambda b: (wires[id(b)], b.src, b.serial, b.msg_id)):
        arrive[b.msg_id] = ports.recv_side(b.src, b.dst, b.nbytes, wires[id(b)])
    return [arrive[b.msg_id] for b in items]


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=60, deadline=None)
@given(msgs=_instant(min_size=1))
def test_charge_gives_the_times_of_the_two_halves_in_canonical_order(
        name: str, msgs: list[tuple[int, int, int, int]]) -> None:
    model = MODELS[name]()
    expected = _two_halves(model.bind(4, random.Random(1)), _items(msgs))
    charged = _items(msgs)
    engine = Engine(4, MemoryTransport(), model.bind(4, random.Random(1)))
    delivery = engine.p2p.delivery
    assert isinstance(delivery, LocalDelivery)
    delivery.charge(charged, _protocol.by_source)
    engine.close()
    assert [b.time for b in charged] == expected


class _Recording(MemoryTransport):
    """A transport that keeps what it is sent, as a byte transport would carry it away."""

    in_process = False

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Envelope] = []

    def send(self, envelope: Envelope) -> None:
        self.sent.append(envelope)


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=60, deadline=None)
@given(msgs=_instant(min_size=2))
def test_book_sends_an_instant_in_posting_order_at_the_times_of_the_two_halves(
        name: str, msgs: list[tuple[int, int, int, int]]) -> None:
    # instants of one message per sender and per receiver take _book_round's one pass
    model = MODELS[name]()
    in_order = sorted(_items(msgs), key=_protocol.by_source)
    expected = _two_halves(model.bind(4, random.Random(1)), _items(msgs))
    transport = _Recording()
    engine = Engine(4, transport, model.bind(4, random.Random(1)))
    engine.p2p.bookings = _items(msgs)
    assert engine.p2p.delivery.book()
    engine.close()
    assert [env.msg_id for env in transport.sent] == [b.msg_id for b in in_order]
    assert [env.time for env in transport.sent] == expected
    assert all(type(env) is Envelope and len(env) == 12 for env in transport.sent)


# ---- twins: the match queue's lone-entry and table forms follow MPI's matching rules ----


class _Reference:
    """MPI matching written plainly: lists in post order and arrival order."""

    def __init__(self) -> None:
        self.posted: list[tuple[int, int, Any]] = []
        self.unexpected: list[tuple[int, int, Any]] = []

    @staticmethod
    def fits(want_src: int, want_tag: int, src: int, tag: int) -> bool:
        return want_src in (src, ANY_SOURCE) and want_tag in (tag, ANY_TAG)

    def arrive(self, src: int, tag: int, msg: Any) -> Any:
        for i, (psrc, ptag, recv) in enumerate(self.posted):
            if self.fits(psrc, ptag, src, tag):
                del self.posted[i]
                return recv
        self.unexpected.append((src, tag, msg))
        return None

    def receive(self, src: int, tag: int, recv: Any) -> Any:
        for i, (msrc, mtag, msg) in enumerate(self.unexpected):
            if self.fits(src, tag, msrc, mtag):
                del self.unexpected[i]
                return msg
        self.posted.append((src, tag, recv))
        return None

    def cancel(self, recv: Any) -> bool:
        for i, entry in enumerate(self.posted):
            if entry[2] is recv:
                del self.posted[i]
                return True
        return False


operations = st.lists(st.tuples(st.sampled_from(["arrive", "receive", "cancel"]),
                                st.sampled_from([0, 1, ANY_SOURCE]), st.sampled_from([0, 1, ANY_TAG])),
                      max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops=operations)
def test_match_queue_matches_like_the_plain_reference(ops: list[tuple[str, int, int]]) -> None:
    mq, ref = MatchQueue(), _Reference()
    receives: list[tuple[int, int, object]] = []
    for n, (what, src, tag) in enumerate(ops):
        if what == "arrive":  # a message has a concrete source and tag
            src, tag = max(src, 0), max(tag, 0)
            msg = ("msg", n)
            expected = ref.arrive(src, tag, msg)
            got = mq.take_posted(src, tag)
            if got is None:
                mq.add_unexpected(src, tag, msg)
            assert got is expected
        elif what == "receive":
            recv = object()
            expected = ref.receive(src, tag, recv)
            got = mq.take_unexpected(src, tag)
            if got is None:
                mq.post(src, tag, recv)
                receives.append((src, tag, recv))
            assert got == expected
        elif receives:
            src, tag, recv = receives.pop(n % len(receives))
            assert mq.unpost(src, tag, recv) == ref.cancel(recv)
    posted, unexpected = mq.leftovers()
    assert sorted(map(id, posted)) == sorted(id(r) for _, _, r in ref.posted)
    assert sorted(unexpected) == sorted(m for _, _, m in ref.unexpected)


# ---- twins: an eager message matched on arrival (inline) or at the receive (_matched) ----


@pytest.mark.parametrize("late", ["sender", "receiver"])
def test_an_eager_message_gives_the_same_value_status_and_time_whoever_comes_first(late: str) -> None:
    async def main(comm: sc.Comm) -> Any:
        if comm.rank == 0:
            if late == "sender":
                await comm.sleep(5e-6)
            await comm.send(np.arange(4.0), dst=1, tag=3)
            return None
        if late == "receiver":
            await comm.sleep(5e-6)
        req = comm.irecv(src=0, tag=3)
        value = await req
        return value.tolist(), tuple(req.status), comm.now

    result = sc.run(main, 2, latency=AlphaBeta(alpha=1e-6, beta=1e-9))
    value, status, _ = result[1]
    assert value == [0.0, 1.0, 2.0, 3.0] and status[:2] == (0, 3) and status[2] >= 32  # 4 float64s
    arrival = (5e-6 if late == "sender" else 0.0) + 1e-6 + status[2] * 1e-9
    assert result[1][2] == pytest.approx(max(arrival, 5e-6 if late == "receiver" else 0.0))


def test_awaiting_a_done_request_returns_what_test_returns() -> None:
    async def main(comm: sc.Comm) -> Any:
        req = comm.isend(7, dst=comm.rank)
        got = await comm.recv(src=comm.rank)
        await req
        again = comm.irecv(src=comm.rank)
        comm.isend(8, dst=comm.rank).test()
        await comm.sleep(1e-6)
        assert again.test()
        return got, await again

    assert list(sc.run(main, 1)) == [(7, 8)]


# ---- twins: barrier and all_reduce inline _run_collective ----


def _generic(comm: sc.Comm, name: str, *args: Any) -> Any:
    """The collective through the readable path: ``_run_collective`` around the same algorithm."""
    algo = comm._choose(name, None, 8 if args else 0)
    fn = comm._algorithm(name, algo)
    if name == "barrier":
        return comm._run_collective("barrier()", fn, algo)
    obj, rop = args[0], sc.ReduceOp.SUM
    return comm._run_collective(f"all_reduce(op={rop.name})", lambda c: fn(c, obj, rop), algo, "", "")


@pytest.mark.parametrize("world_size", [1, 3, 8])
@pytest.mark.parametrize("fidelity", ["message", "analytic"])
def test_inlined_barrier_and_all_reduce_equal_the_generic_path(world_size: int, fidelity: str) -> None:
    def program(inline: bool) -> Callable[[sc.Comm], Any]:
        async def main(comm: sc.Comm) -> Any:
            await comm.sleep(comm.rank * 1e-6)
            if inline:
                await comm.barrier()
                total = await comm.all_reduce(float(comm.rank + 1))
            else:
                await _generic(comm, "barrier")
                total = await _generic(comm, "all_reduce", float(comm.rank + 1))
            return total, comm.now
        return main

    runs = [sc.run(program(inline), world_size, latency=AlphaBeta(1e-6, 1e-9), fidelity=fidelity,
                   trace=True, seed=2) for inline in (True, False)]
    assert list(runs[0]) == list(runs[1])
    assert list(runs[0])[0][0] == world_size * (world_size + 1) / 2
    spans = [[(s.rank, s.name, s.start, s.end) for s in r.trace.spans] for r in runs]
    assert spans[0] == spans[1] and spans[0]
    assert runs[0].stats == runs[1].stats


# ---- twins: the ring reduce-scatter's array loop and its general loop ----


@pytest.mark.skipif(_build.active.compiled, reason="the compiled build binds _reduction._NDARRAY at build time")
@pytest.mark.parametrize("world_size", [2, 5, 8])
@pytest.mark.parametrize("gamma", [0.0, 3e-10])
def test_the_ring_reduce_scatter_array_loop_equals_the_general_loop(world_size: int, gamma: float,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    async def main(comm: sc.Comm) -> Any:
        x = np.arange(13, dtype=np.float64) * (comm.rank + 1) + 0.1
        total = await comm.all_reduce(x, algorithm="ring")
        return total.tobytes(), comm.now

    def run() -> sc.RunResult:
        return sc.run(main, world_size, latency=AlphaBeta(1e-6, 1e-9, gamma=gamma), trace=True)
    fast = run()
    monkeypatch.setattr(_reduction, "_NDARRAY", type("NotAnArray", (), {}))  # every array takes the general loop
    general = run()
    assert list(fast) == list(general) and fast.times == general.times
    messages = [[(m.src, m.dst, m.nbytes, m.sent, m.recv) for m in r.trace.messages] for r in (fast, general)]
    assert messages[0] == messages[1] and messages[0]


# ---- an instant's bookings in posting order ----


def _booking(src: int, serial: int, msg_id: int) -> _protocol.Booking:
    return _protocol.Booking(kind=0, ctx=0, src=src, dst=0, tag=0, msg_id=msg_id, nbytes=0, time=0.0,
                             header=b"", buffers=(), sync=False, serial=serial)


@settings(max_examples=300, deadline=None)
@given(st.permutations(range(24)), st.integers(1, 24), st.integers(24, 200))
def test_sort_by_source_puts_a_round_in_source_order(order: list[int], n: int, world_size: int) -> None:
    items = [_booking(src, 0, i) for i, src in enumerate(order[:n])]
    expected = sorted(items, key=_protocol.by_source)
    _protocol.sort_by_source(items, world_size)
    assert items == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=30))
def test_sort_by_source_is_the_stable_sort_by_source_and_serial(keys: list[tuple[int, int]]) -> None:
    items = [_booking(src, serial, i) for i, (src, serial) in enumerate(keys)]
    expected = sorted(items, key=_protocol.by_source)
    _protocol.sort_by_source(items, 5)
    assert items == expected
