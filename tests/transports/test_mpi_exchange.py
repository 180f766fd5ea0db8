"""The mpi transport's round exchange, over a stand-in for two MPI processes in one event loop.

The real thing runs under ``mpiexec`` in ``tests/test_transport_mpi.py`` (the
extras stage); these tests check the exchange's own logic on every landing:
what each process gets back, the order of the envelopes, and the clear error
for a round MPI's counts cannot carry.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from simcluster.transports import mpi as mpi_transport
from simcluster.transports.base import EAGER, Envelope, TransportError
from simcluster.transports.mpi import MpiTransport


class _Request:
    def __init__(self, done: Any) -> None:
        self.done = done

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        return bool(self.done())


class _Comm:
    """Ialltoall and Ialltoallv between the ranks of one shared table, completed once all posted."""

    def __init__(self, table: dict[int, dict[int, Any]], size: int, rank: int) -> None:
        self.table, self.size, self.rank, self.calls = table, size, rank, 0

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def _post(self, item: Any, fill: Any) -> _Request:
        slot = self.table.setdefault(self.calls, {})
        self.calls += 1
        slot[self.rank] = item

        def done() -> bool:
            if len(slot) < self.size:
                return False
            fill(slot)
            return True
        return _Request(done)

    def Ialltoall(self, send: Any, recv: Any) -> _Request:  # noqa: N802
        def fill(slot: dict[int, Any]) -> None:
            for q in range(self.size):
                recv[q] = slot[q][self.rank]
        return self._post(np.array(send), fill)

    def Ialltoallv(self, send: Any, recv: Any) -> _Request:  # noqa: N802
        data, (sizes, offsets), _ = send
        out, (got, at), _ = recv

        def fill(slot: dict[int, Any]) -> None:
            for q in range(self.size):
                raw, sz, off = slot[q]
                piece = raw[off[self.rank]:off[self.rank] + sz[self.rank]]
                out[at[q]:at[q] + got[q]] = np.frombuffer(piece, np.uint8)
        return self._post((bytes(data), list(sizes), list(offsets)), fill)


class _MPI:
    BYTE = "byte"


def _pair() -> tuple[list[MpiTransport], list[list[Envelope]]]:
    table: dict[int, dict[int, Any]] = {}
    transports, delivered = [], []
    for proc in range(2):
        tp = MpiTransport()
        tp.bind(proc, 1, 2, b"secret", "test")
        got: list[Envelope] = []
        tp.open(2, got.append)
        tp.use(_MPI, _Comm(table, 2, proc))
        transports.append(tp)
        delivered.append(got)
    return transports, delivered


def _mark(proc: int, tag: int) -> Envelope:
    return Envelope(EAGER, 0, proc, -1, tag, 0, 0, 0.0)


@pytest.mark.parametrize("length", [0, 5, 5000])
def test_each_process_gets_every_mark_and_the_envelopes_sent_before_them(length: int) -> None:
    (t0, t1), (got0, got1) = _pair()

    async def go() -> tuple[list[Envelope], list[Envelope]]:
        for tp in (t0, t1):
            await tp.connect([("mpi", 0), ("mpi", 0)])
        array = np.arange(float(length))
        t0.send(Envelope(EAGER, 3, 0, 1, 7, 1, array.nbytes, 1e-6, b"h", (array,)))
        t0.send(Envelope(EAGER, 3, 0, 1, 8, 2, 0, 2e-6))
        array[:] = -1  # the send copied it: the buffer is the caller's again
        return await asyncio.gather(t0.exchange(_mark(0, 12)), t1.exchange(_mark(1, 0)))

    marks0, marks1 = asyncio.run(go())
    assert [(m.src, m.tag) for m in marks0] == [(0, 12), (1, 0)]
    assert [(m.src, m.tag) for m in marks1] == [(0, 12), (1, 0)]
    assert t0.take_counts() == ([0, 2], 1e-6)
    asyncio.run(t1.receive([2, 0]))
    assert [(e.tag, e.time) for e in got1] == [(7, 1e-6), (8, 2e-6)]
    assert np.array_equal(np.frombuffer(got1[0].buffers[0], np.float64), np.arange(float(length)))
    assert got0 == []


def test_a_round_larger_than_mpis_counts_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi_transport, "_MAX_COUNT", 100)
    (t0, _), _ = _pair()

    async def go() -> None:
        await t0.connect([("mpi", 0), ("mpi", 0)])
        t0.send(Envelope(EAGER, 3, 0, 1, 7, 1, 800, 0.0, b"", (np.zeros(100),)))
        await t0.exchange(_mark(0, 0))

    with pytest.raises(TransportError, match=r"^send: process 0: this round's envelopes to "
                                             r"process 1 come to \d+ bytes, more than MPI's count "
                                             r"limit of 100; send large arrays in pieces under "
                                             r"2 GiB$"):
        asyncio.run(go())
