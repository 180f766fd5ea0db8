"""Buffers beyond the buffer protocol, ``MPI.buffer``, ``Alltoallw`` and persistent collectives.

mpi4py 4 takes objects that export their memory through DLPack
(``__dlpack__``) or the CUDA array interface as message buffers; here both
kinds are small hand-made classes over host memory, with no buffer protocol of
their own, used to send, receive and reduce, with the values checked on every
rank.
"""

from __future__ import annotations

import array
import ctypes
import sys
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

# ---- two exporters without the buffer protocol ----


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DLPackOnly:
    """float64 values in a numpy array that only DLPack (version 0, unversioned capsule) exposes."""

    def __init__(self, values: Any) -> None:
        self._data = np.ascontiguousarray(values, dtype=np.float64)
        self._shape = (ctypes.c_int64 * 1)(self._data.size)
        self._managed = _DLManaged()
        t = self._managed.dl_tensor
        t.data, t.ndim, t.shape = self._data.ctypes.data, 1, self._shape
        t.device = _DLDevice(1, 0)  # kDLCPU
        t.dtype = _DLDataType(2, 64, 1)  # float, 64 bits, one lane

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, stream: Any = None) -> Any:
        return _new_capsule(ctypes.addressof(self._managed), b"dltensor", None)

    def tolist(self) -> list[float]:
        return self._data.tolist()


class CudaArrayOnly:
    """int32 values in an array.array that only ``__cuda_array_interface__`` exposes (host memory)."""

    def __init__(self, values: Any, readonly: bool = False) -> None:
        self._data = array.array("i", values)
        self.__cuda_array_interface__ = {
            "version": 3, "data": (self._data.buffer_info()[0], readonly),
            "typestr": ("<" if sys.byteorder == "little" else ">") + "i4",
            "shape": (len(self._data),), "strides": None,
        }

    def tolist(self) -> list[int]:
        return self._data.tolist()


# ---- send, receive, reduce ----


def _exchange(comm: MPI.Intracomm) -> dict[str, Any]:
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    out: dict[str, Any] = {}
    smsg, rmsg = DLPackOnly([rank, rank + 0.5]), DLPackOnly([0.0, 0.0])
    comm.Sendrecv(smsg, dest=right, recvbuf=rmsg, source=left)
    out["dlpack_sendrecv"] = rmsg.tolist()
    if rank == 0:
        comm.Send(CudaArrayOnly([7, 8, 9]), dest=size - 1, tag=3)
    if rank == size - 1:
        got = CudaArrayOnly([0, 0, 0])
        comm.Recv(got, source=0, tag=3)
        out["cai_recv"] = got.tolist()
    total = DLPackOnly([0.0, 0.0])
    comm.Allreduce(DLPackOnly([rank, 1.0]), total, op=MPI.SUM)
    out["dlpack_allreduce"] = total.tolist()
    imax = CudaArrayOnly([0, 0])
    comm.Allreduce(CudaArrayOnly([rank, -rank]), imax, op=MPI.MAX)
    out["cai_allreduce"] = imax.tolist()
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_dlpack_and_cuda_array_interface_objects_are_send_receive_and_reduce_buffers(world_size: int
                                                                                    ) -> None:
    result = sc.run(_exchange, world_size=world_size)
    n = world_size
    for rank, out in enumerate(result):
        left = (rank - 1) % n
        assert out["dlpack_sendrecv"] == [left, left + 0.5]
        assert out["dlpack_allreduce"] == [sum(range(n)), float(n)]
        assert out["cai_allreduce"] == [n - 1, 0]
        assert ("cai_recv" in out) == (rank == n - 1)
    assert result[n - 1]["cai_recv"] == [7, 8, 9]


def _read_only_receive(comm: MPI.Intracomm) -> str:
    try:
        comm.Recv(CudaArrayOnly([0, 0], readonly=True), source=0)
    except BufferError as exc:
        return str(exc)
    return "no error"


def test_a_read_only_exported_receive_buffer_is_a_buffer_error_naming_rank_and_call() -> None:
    text = sc.run(_read_only_receive, world_size=1)[0]
    assert text.startswith("rank 0: Recv(source=0, tag=-1): ")
    assert "CudaArrayOnly given as a buffer: __cuda_array_interface__: the buffer is read-only" in text
    assert text.endswith("pass a writeable buffer to receive into")


def _bad_export(comm: MPI.Intracomm) -> list[str]:
    texts = []
    buf = DLPackOnly([1.0])
    buf.__dlpack__ = lambda *args, **kwargs: None  # type: ignore[method-assign]
    cai = CudaArrayOnly([1])
    cai.__cuda_array_interface__["mask"] = True
    for bad in (buf, cai):
        try:
            comm.Send(bad, dest=0)
        except BufferError as exc:
            texts.append(str(exc))
    return texts


def test_malformed_exports_are_buffer_errors_that_say_what_was_wrong() -> None:
    dlpack, cai = sc.run(_bad_export, world_size=1)[0]
    assert dlpack.startswith("rank 0: Send(") and "not an unused DLPack capsule" in dlpack
    assert "masked arrays are not supported" in cai


# ---- Alltoallw and persistent collectives ----


def _alltoallw(comm: MPI.Intracomm) -> list[float]:
    rank, size = comm.Get_rank(), comm.Get_size()
    sbuf = np.array([rank * 10 + j for j in range(size)], dtype=np.float64)
    rbuf = np.full(2 * size, -1.0)
    item = MPI.DOUBLE.Get_extent()[1]
    comm.Alltoallw([sbuf, ([1] * size, [j * item for j in range(size)]), [MPI.DOUBLE] * size],
                   [rbuf, [1] * size, [2 * j * item for j in range(size)], [MPI.DOUBLE] * size])
    return rbuf.tolist()


@pytest.mark.parametrize("world_size", [1, 3])
def test_alltoallw_places_each_block_at_its_byte_displacement(world_size: int) -> None:
    for rank, got in enumerate(sc.run(_alltoallw, world_size=world_size)):
        assert got[0::2] == [src * 10 + rank for src in range(world_size)]
        assert got[1::2] == [-1.0] * world_size


def _persistent(comm: MPI.Intracomm) -> dict[str, list[Any]]:
    rank, size = comm.Get_rank(), comm.Get_size()
    sbuf, total = np.zeros(2), np.zeros(2)
    block = np.zeros(1, dtype=np.int32)
    gathered = np.zeros(size, dtype=np.int32)
    reqs = [comm.Allreduce_init(sbuf, total, op=MPI.SUM), comm.Allgather_init(block, gathered),
            comm.Barrier_init()]
    out: dict[str, list[Any]] = {"sums": [], "gathers": []}
    for step in range(3):
        sbuf[:] = [rank + step, 1]
        block[0] = rank * step
        MPI.Prequest.Startall(reqs)
        MPI.Request.Waitall(reqs)
        out["sums"].append(total.tolist())
        out["gathers"].append(gathered.tolist())
    for req in reqs:
        req.Free()
    return out


def test_persistent_collectives_rerun_with_the_buffers_current_values() -> None:
    size = 3
    for out in sc.run(_persistent, world_size=size):
        assert out["sums"] == [[sum(range(size)) + size * step, size] for step in range(3)]
        assert out["gathers"] == [[r * step for r in range(size)] for step in range(3)]


# ---- MPI.buffer ----


def test_mpi_buffer_views_memory_as_bytes() -> None:
    data = bytearray(b"abcd")
    buf = MPI.buffer(data)
    assert (buf.nbytes, buf.readonly, buf.format, buf.obj is data) == (4, False, "B", True)
    buf[1:3] = b"XY"
    assert data == bytearray(b"aXYd") and buf[0] == ord("a")
    assert MPI.buffer.fromaddress(buf.address, 4).tobytes() == b"aXYd"
    assert MPI.buffer(b"xyz").readonly and MPI.buffer(data).toreadonly().readonly
    ints = MPI.buffer.allocate(8).cast("i")
    assert ints.tolist() == [0, 0]
    mem = MPI.Alloc_mem(4)
    assert type(mem) is MPI.buffer and MPI.memory is MPI.buffer
    MPI.Free_mem(mem)
    assert (mem.address, mem.nbytes, len(mem)) == (0, 0, 0)
    assert MPI.buffer(DLPackOnly([1.0])).nbytes == 8


def test_mpi_buffer_refuses_what_is_no_memory() -> None:
    with pytest.raises(TypeError, match="a list is not a buffer"):
        MPI.buffer([])
    with pytest.raises(ValueError, match="negative"):
        MPI.buffer.allocate(-1)
    with pytest.raises(TypeError, match="read-only"):
        MPI.buffer(b"abc")[0] = 1
    with pytest.raises(IndexError, match="step"):
        MPI.buffer(bytearray(4))[::2]  # noqa: B018 - the indexing is the test
    with pytest.raises(BufferError, match="not CPU-accessible"):
        MPI.buffer(CudaArrayOnly([1])).tobytes()
