"""The control protocol's typed messages: each encodes to plain lists and back, on and off the wire."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from simcluster.hosting import control as C
from simcluster.hosting import remote as _remote
from simcluster.engine.coll_check import SignatureRecord
from simcluster.engine.records import CrashRecord, FlowRecord, MeetRecord, Record, RevokeRecord
from simcluster.transports import wire
from simcluster.transports.base import EAGER, Envelope, TransportError

_EXC = _remote.encode_exception(ValueError("bad input"))
_TRACE = C.TraceParts([[0, "send", 0.0, 1e-6, {"dst": 1}]],
                      [[1, 0, 1, 5, 8, 0.0, 1e-6, "world"]], [[0, 1, 2e-6]], [["nic 0 up", 1e-6, 0.5]])
_RESULTS = C.Results([{"sum": 3}, [1, 2], None], [0.0, 1e-6, 2e-6],
                     [[1, 0, 2], [8, 0, 16], [0, 1, 1], [0, 8, 8]], ["rank 1: a leak"], _TRACE)

_FIRST = SignatureRecord(4, 1, "broadcast(src=0)", "binomial", "float64[3]", "", 0, 8, False, 0,
                         "world", [0, 2], 2e-6)
_TOLD: list[Record] = [CrashRecord(due=3e-6, rank=5, at=2e-6), RevokeRecord(due=3e-6, ctx=2, by=4, at=2e-6),
         MeetRecord(due=3e-6, ctx=2, what="agree", n=1, rank=0, value=1, at=2e-6),
         MeetRecord(due=3e-6, ctx=2, what="shrink", n=1, rank=1, value=None, at=2e-6),
         FlowRecord(due=4e-6, instant=2e-6, phase=1, seq=0, kind=3, src=5, dst=1, msg_id=7,
                    nbytes=1 << 20, time=2.5e-6)]

MESSAGES: list[C.Message] = [
    C.Start([("127.0.0.1", 4000), ("10.0.0.2", 4001)]),
    C.Go(),
    C.Describe(),
    C.Finish(),
    C.Stop(),
    C.Stop(_EXC),
    C.Timeout(),
    C.FinalResult(_RESULTS, 3),
    C.FinalResult(_RESULTS, 2, (40, 17)),
    C.Hello(4242, ("127.0.0.1", 5000), "main world_size=4 procs=2"),
    C.Ready(),
    C.Report(2e-6, [0, 2], 2.5e-6, 1, 3e-6, None, [_FIRST], True),
    C.Report(2e-6, [1, 0], None, 4, 2.5e-6, None, [], False, 3),
    C.Report(0.0, [0, 0], None, 0, None, C.Failure(3, _EXC)),
    C.Report(2e-6, [0, 1], None, 2, 3e-6, None, [], False, 0, _TOLD),
    C.Blocked(1.0, [(0, "rank 0 waiting in recv(src=1, tag=3) at x.py:5", [1], None)],
              [(1, "rank 1 waiting in irecv(src=0, tag=1)", [0], (2, "world", 1, "barrier()", 1, 2))]),
    C.Blocked(1.0, [(0, "rank 0 waiting in recv(src=1, tag=8) at x.py:5", [1], None)], [],
              ["rank 0's send of 400,000 bytes to rank 1 (tag 7): request to send sent, waiting "
               "for clear to send"], 20),
    C.Results([], [], [], [], None, C.Failure(2, _EXC)),
    _RESULTS,
    C.Error(_EXC, transport=True),
    C.Lines(3.0, ["  rank 0 awaiting a foreign future at x.py:9"]),
    C.Bye(),
    C.Done(2e-6, 12, 5, [0, 0]),
    C.Done(3e-6, 40, 0, [1, 2], deadlock=True),
    C.Done(1e-6, 7, 2, [0, 1], rank=3, proc=1, exc=_EXC),
    C.Tick(6, 4.5e-6),
]


def _ids(messages: list[C.Message]) -> list[str]:
    return [f"{m.name}-{i}" for i, m in enumerate(messages)]


@pytest.mark.parametrize("message", MESSAGES, ids=_ids(MESSAGES))
def test_encode_then_decode_gives_the_same_message(message: C.Message) -> None:
    items = message.encode()
    assert isinstance(items, list)
    assert type(message).decode(items) == message


@pytest.mark.parametrize("message", MESSAGES, ids=_ids(MESSAGES))
def test_a_message_crosses_the_wire_as_plain_lists(message: C.Message) -> None:
    env = C.envelope(message, 2)
    assert (env.kind, env.src, env.tag) == (EAGER, 2, message.op)
    assert env.time == getattr(message, "time", 0.0)
    assert isinstance(wire.unpack(env.header, env.buffers), list)  # no pickle, no dicts of ours
    assert C.read(env) == message


def test_every_opcode_has_one_message_class() -> None:
    assert sorted(C.MESSAGES) == sorted(C.OP_NAMES)
    for op, cls in C.MESSAGES.items():
        assert cls.op == op
        assert cls.__name__.upper().startswith(C.OP_NAMES[op][:4])


def test_collective_records_travel_whole() -> None:
    report = C.Report(0.0, [0], None, 1, None, None, [_FIRST, _FIRST._replace(procs=None)])
    got = C.read(C.envelope(report, 0))
    assert isinstance(got, C.Report)
    assert got.firsts == [_FIRST, _FIRST._replace(procs=None)]
    assert all(isinstance(record, SignatureRecord) for record in got.firsts)
    assert got.firsts[0].payload == "float64[3]" and got.firsts[0].procs == [0, 2]


def test_fault_and_flow_records_travel_as_compact_lists_and_come_back_typed() -> None:
    env = C.envelope(C.Report(2e-6, [0, 1], None, 2, 3e-6, None, [], False, 0, _TOLD), 0)
    items = wire.unpack(env.header, env.buffers)
    assert isinstance(items, list) and items[-1] == [
        ["crash", 3e-6, 5, 2e-6], ["revoke", 3e-6, 2, 4, 2e-6], ["meet", 3e-6, 2, "agree", 1, 0, 1, 2e-6],
        ["meet", 3e-6, 2, "shrink", 1, 1, None, 2e-6], ["flow", 4e-6, 2e-6, 1, 0, 3, 5, 1, 7, 1 << 20, 2.5e-6]]
    got = C.read(env)
    assert isinstance(got, C.Report) and got.faults == _TOLD
    flow = got.faults[4]
    assert isinstance(flow, FlowRecord) and flow.order() == (2e-6, 1, 5, 0)  # every process's order


class _Point:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Point) and other.x == self.x


def test_only_the_runs_values_use_the_runs_serializer() -> None:
    final = C.FinalResult(C.Results([_Point(1)], [0.0], [[0], [0], [0], [0]], []), 1)
    env = C.envelope(final, 0, pickle.dumps)
    got = C.read(env, pickle.loads)
    assert isinstance(got, C.FinalResult) and got.results.values == [_Point(1)]
    with pytest.raises(wire.Unsendable):  # a control message never pickles, whatever the run's serializer
        C.envelope(C.Report(0.0, [0], None, 1, None, None, [_FIRST._replace(payload=_Point(2))]),
                   0, pickle.dumps)


def _raw(op: int, payload: Any) -> Envelope:
    packed = wire.pack(payload)
    return Envelope(EAGER, 0, 1, -1, op, 0, 0, 0.0, packed.header, packed.buffers)


@pytest.mark.parametrize(("op", "payload"), [
    (C.REPORT, {"sent": [0], "firsts": []}),  # a dict payload
    (C.DONE, [0.0, 1]),
    (C.REPORT, [0.0, "x", None, 0, None, None, [], False]),
    (C.REPORT, [0.0, [0], None, 0, None, None, [], False, 0, [["crash", 1e-6, 3]]]),  # a field short
    (C.REPORT, [0.0, [0], None, 0, None, None, [], False, 0, [["quake", 1e-6, 3, 0.0]]]),
    (C.HELLO, [1, "127.0.0.1", "digest"]),
    (C.BLOCKED, [1.0, [], []]),  # an older version's: no handshakes
    (C.BLOCKED, [1.0, [], [], "rank 0's send", 1]),
    (C.RESULTS, [[1], [0.0], [[0]], "leaks", None, None]),
])
def test_a_malformed_message_is_a_transport_error(op: int, payload: Any) -> None:
    with pytest.raises(TransportError, match=rf"^control: malformed {C.OP_NAMES[op]} message from "
                                             r"process 1 \(.*\); every process must run the same "
                                             r"simcluster version$"):
        C.read(_raw(op, payload))


def test_an_unknown_opcode_is_a_transport_error() -> None:
    with pytest.raises(TransportError, match=r"unknown control message 99 from process 1"):
        C.read(_raw(99, []))


def test_a_failure_decodes_to_the_ranks_exception() -> None:
    report = C.read(C.envelope(C.Report(0.0, [0], None, 1, None, C.Failure(1, _EXC)), 0))
    assert isinstance(report, C.Report) and report.failure is not None
    exc = _remote.decode_exception(report.failure.exc, "process 0")
    assert type(exc) is ValueError and str(exc) == "bad input"
