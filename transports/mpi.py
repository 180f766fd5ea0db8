"""The mpi transport: ranks hosted by the processes of an ``mpiexec`` job.

Each MPI process hosts a contiguous block of the virtual ranks, as a node of
a multi-node tcp run does: MPI starts the processes and places them on the
machines, and ``simcluster.hosting.mpi_job`` hands this transport the communicator
of the processes that host ranks (``use``). The envelopes and every round's
numbers then travel as MPI messages: at the end of a round each process
sends every other one its frames (arrays as raw bytes, never pickled) and
its report in one ``Alltoallv`` of bytes, sized by an ``Alltoall`` before it.
The control messages around the rounds (start, results, errors) still go
over the coordinator's TCP streams.

This module never imports ``simcluster`` or ``mpi4py``: the caller passes
the ``mpi4py.MPI`` module in.
"""

from __future__ import annotations

import asyncio
from time import perf_counter  # bound now: a rank's time.* reads virtual time
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from . import wire
from .base import Envelope, TransportError
from .tcp import MARK_CTX, TcpTransport

__all__ = ["MpiTransport"]

_SPIN: Final = 1e-3  # seconds a wait tests its request in a tight loop before it naps
_NAP: Final = 2e-4  # seconds between tests after that
_MAX_COUNT: Final = 2**31 - 1  # MPI counts are C ints


class MpiTransport(TcpTransport):
    """The envelopes of a run hosted by an MPI job, as MPI messages between its processes."""

    __slots__ = ("_mpi", "_comm")

    name = "mpi"

    def __init__(self, host: str = "127.0.0.1", **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._mpi: Any = None
        self._comm: Any = None

    def use(self, mpi: Any, comm: Any) -> None:
        """Carry this run's rounds on ``comm`` (an ``mpi4py.MPI.Comm`` of the hosting processes,
        process ``p`` being its rank ``p``); ``mpi`` is the ``mpi4py.MPI`` module."""
        self._mpi = mpi
        self._comm = comm

    async def listen(self) -> tuple[str, int]:
        return "mpi", 0  # peers are reached by MPI rank, not by address

    async def connect(self, table: list[tuple[str, int]]) -> None:
        if self._comm is None or self._comm.Get_size() != len(table):
            raise RuntimeError("MpiTransport: use(MPI, comm) with a communicator of every "
                               "hosting process comes before connect")
        self._out = [[] for _ in range(len(table))]

    async def exchange(self, mark: Envelope, idle: Callable[[], None] | None = None
                       ) -> list[Envelope]:
        """End a round over MPI (see ``TcpTransport.exchange``): one ``Alltoall`` of sizes, one
        ``Alltoallv`` of every process's frames, its mark last."""
        mpi, comm, me = self._mpi, self._comm, self._proc
        frame = b"".join(wire.encode_frame(mark._replace(ctx=MARK_CTX)))
        n = len(self._out)
        parts: list[bytes] = []
        for proc in range(n):
            chunks = self._out[proc]
            self._out[proc] = []
            if proc != me:
                chunks.append(frame)
                parts.append(b"".join(chunks))
            else:
                parts.append(b"")
        sizes = np.array([len(part) for part in parts], np.int64)
        if int(sizes.max()) > _MAX_COUNT:
            proc = int(sizes.argmax())
            raise TransportError(None, "send", f"process {me}: this round's envelopes to process "
                                 f"{proc} come to {int(sizes[proc])} bytes, more than MPI's count "
                                 f"limit of {_MAX_COUNT}", "send large arrays in pieces under 2 GiB",
                                 peer=f"process {proc}")
        got = np.empty(n, np.int64)
        await _wait(comm.Ialltoall(sizes, got), idle)
        send = np.frombuffer(b"".join(parts), np.uint8)
        recv = np.empty(int(got.sum()), np.uint8)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        at = np.concatenate(([0], np.cumsum(got)[:-1]))
        await _wait(comm.Ialltoallv([send, (sizes, offsets), mpi.BYTE],
                                    [recv, (got, at), mpi.BYTE]), idle)
        view = recv.data
        for proc in range(n):
            if proc != me:
                decoder = wire.FrameDecoder(max_frame=self.max_frame, peer=f"process {proc}")
                for envelope in decoder.feed(view[at[proc]:at[proc] + got[proc]]):
                    self._arrived(proc, envelope)
                decoder.feed_eof()
        marks = self._marks
        return [mark if proc == me else marks[proc].popleft() for proc in range(n)]


async def _wait(request: Any, idle: Callable[[], None] | None) -> None:
    """Wait for an MPI request, letting the event loop run; test in a tight loop for a moment
    first, as MPI's own blocking calls do, then nap between tests."""
    start = perf_counter()
    tests = 0
    while not request.Test():
        tests += 1
        if tests % 64:
            continue
        if perf_counter() - start < _SPIN:
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(_NAP)
            if idle is not None:
                idle()
