"""The reductions' fast path for plain numpy arrays (``MPI/_coll.py``'s ``_plain_operands``).

Two plain arrays (C-contiguous, native, a predefined type) with a predefined op
seen before skip the spec parsing; the same calls with ``[buf, datatype]``
specs take the general path. Both must give the same values on every rank, the
same virtual times and message counts, and the same errors once the fast path
is warm.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

CASES: list[tuple[str, Any, str]] = [
    ("Allreduce", np.float64, "SUM"), ("Allreduce", np.int32, "MAX"), ("Allreduce", np.complex128, "PROD"),
    ("Allreduce", np.bool_, "LOR"), ("Scan", np.float64, "SUM"), ("Exscan", np.int64, "SUM"),
]
SHAPES = [(1,), (3,), (2, 2)]


def reductions(comm: MPI.Intracomm, specs: bool, calls: int) -> list[Any]:
    rank = comm.Get_rank()
    out = []
    for name, dtype, op in CASES:
        for shape in SHAPES:
            send = (np.arange(np.prod(shape)).reshape(shape) + rank + 1).astype(dtype)
            recv = np.full(shape, 7, dtype=dtype)
            mpi_type = MPI.Datatype.fromcode(np.dtype(dtype).char)
            for i in range(calls):
                send[...] = ~send if dtype is np.bool_ else send + 1
                sendbuf, recvbuf = ([send, mpi_type], [recv, mpi_type]) if specs else (send, recv)
                getattr(comm, name)(sendbuf, recvbuf, op=getattr(MPI, op))
                out.append((name, str(recv.dtype), recv.shape, recv.tolist(), MPI.Wtime()))
    return out


def test_plain_arrays_give_what_buffer_specs_give() -> None:
    lat = sc.latency.AlphaBeta(1e-6, 1e-9)
    plain = sc.run(reductions, 4, args=(False, 3), latency=lat)
    spec = sc.run(reductions, 4, args=(True, 3), latency=lat)
    assert list(plain) == list(spec)
    assert plain.times == spec.times
    assert plain.stats == spec.stats


def warm_then_wrong(comm: MPI.Intracomm) -> list[tuple[str, str]]:
    send, recv = np.ones(2), np.zeros(2)
    for _ in range(3):
        comm.Allreduce(send, recv, op=MPI.SUM)  # the fast path is warm from the second call
    got = []
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    attempts = {
        "count": lambda: comm.Allreduce(send, np.zeros(3), op=MPI.SUM),
        "type": lambda: comm.Allreduce(send, np.zeros(2, np.float32), op=MPI.SUM),
        "read-only": lambda: comm.Allreduce(send, frozen, op=MPI.SUM),
        "maxloc": lambda: comm.Allreduce(send, recv, op=MPI.MAXLOC),
        "band": lambda: comm.Allreduce(send, recv, op=MPI.BAND),
        "band again": lambda: comm.Allreduce(send, recv, op=MPI.BAND),
    }
    for what, attempt in attempts.items():
        try:
            attempt()
        except (MPI.Exception, BufferError, ValueError, TypeError) as exc:
            got.append((what, f"{type(exc).__name__}: {exc}"))
        else:
            got.append((what, "no error"))
    got.append(("sum", str(recv.tolist())))
    return got


def test_errors_are_the_same_once_the_fast_path_is_warm() -> None:
    got = sc.run(warm_then_wrong, 1)[0]
    messages = dict(got)
    assert "no error" not in messages.values(), got
    assert "2 items" in messages["count"] and "MPI_FLOAT" in messages["type"]
    assert "read-only" in messages["read-only"]
    assert "MAXLOC" in messages["maxloc"] and messages["band"] == messages["band again"]
    assert messages["sum"] == "[1.0, 1.0]"


@pytest.mark.parametrize("calls", [1, 4])
def test_a_reused_array_that_changes_dtype_or_shape_is_read_anew(calls: int) -> None:
    def rank(comm: MPI.Intracomm) -> list[Any]:
        send = np.ones(4)
        recv = np.zeros(4)
        for _ in range(calls):
            comm.Allreduce(send, recv, op=MPI.SUM)
        send.shape = recv.shape = (2, 2)
        comm.Allreduce(send, recv, op=MPI.SUM)
        send.dtype = recv.dtype = np.int64  # the same bytes, read as integers
        send[...] = 2
        comm.Allreduce(send, recv, op=MPI.SUM)
        return recv.tolist()
    assert list(sc.run(rank, 3)) == [[[6, 6], [6, 6]]] * 3
