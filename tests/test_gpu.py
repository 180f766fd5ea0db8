"""CuPy arrays on a GPU: they stay on their device on the memory transport.

Messages carry the CuPy arrays themselves (device-to-device copies),
collectives update them in place and reduce them with CuPy, a CuPy message
fills a numpy buffer and the reverse, byte transports land them in a CuPy
array, and buffer hazards are checked on the device. The whole module skips,
saying why, where CuPy or a CUDA device is missing (``pip install
'simcluster[cuda]'`` on a machine with a GPU).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster import arrays
from simcluster.collectives import all_reduce, broadcast
from simcluster.ops import ReduceOp
from simcluster.transports import wire
from simcluster.transports.base import EAGER, Envelope

pytestmark = pytest.mark.gpu


def _cupy_or_skip() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CuPy warns at import when it finds no CUDA toolkit
        try:
            import cupy
        except ImportError:
            pytest.skip("needs CuPy and a CUDA device: CuPy is not installed "
                        "(pip install 'simcluster[cuda]')", allow_module_level=True)
        except Exception as exc:
            pytest.skip(f"needs CuPy and a CUDA device: CuPy cannot load CUDA ({type(exc).__name__})",
                        allow_module_level=True)
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception:  # no driver
            count = 0
    if not count:
        pytest.skip("needs CuPy and a CUDA device: CuPy sees no CUDA device", allow_module_level=True)
    return cupy


cupy = _cupy_or_skip()


def on_gpu(a: np.ndarray) -> Any:
    """Copy ``a`` to the current GPU, keeping Fortran order."""
    x = cupy.asarray(a)
    return cupy.asfortranarray(x) if a.flags.f_contiguous and not a.flags.c_contiguous else x


def assert_on_gpu(result: Any, like: Any, expected: np.ndarray | None = None) -> None:
    assert type(result) is cupy.ndarray
    assert result.dtype == like.dtype and result.device.id == like.device.id
    if expected is not None:
        assert result.shape == expected.shape
        np.testing.assert_array_equal(cupy.asnumpy(result), expected)


ARRAYS = [
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    np.array(2.5),
    np.zeros((0, 3), dtype=np.float64),
    np.array([True, False]),
    np.arange(1 << 14, dtype=np.float64),  # rendezvous
]


@pytest.mark.parametrize("smsg", ARRAYS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_cupy_messages_stay_on_the_device(smsg: np.ndarray) -> None:
    async def main(comm: sc.Comm) -> object:
        x = on_gpu(smsg)
        if comm.rank == 0:
            await comm.send(x, dst=1)
            return None
        rmsg = await comm.recv(src=0)
        assert_on_gpu(rmsg, x, smsg)
        assert rmsg.flags.f_contiguous == x.flags.f_contiguous
        return True

    assert sc.run(main, world_size=2)[1] is True


def test_in_process_packing_never_stages_to_the_host() -> None:
    x = cupy.arange(8, dtype=cupy.float32)
    packed = wire.pack(x, copy=True, arrays=arrays.IN_PROCESS)
    (buf,) = packed.buffers
    assert isinstance(buf, wire.ObjectBuffer) and type(buf.array) is cupy.ndarray
    assert buf.array.data.ptr != x.data.ptr  # a device-to-device copy
    assert wire.unpack(packed.header, packed.buffers) is buf.array


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("algorithm", sorted(all_reduce.ALGORITHMS))
def test_all_reduce_on_cupy_in_place(algorithm: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> object:
        x = cupy.arange(35, dtype=cupy.float64).reshape(5, 7) * (comm.rank + 1)
        assert await comm.all_reduce(x, algorithm=algorithm) is x
        assert_on_gpu(x, x)
        return cupy.asnumpy(x)

    total = world_size * (world_size + 1) // 2
    for value in sc.run(main, world_size=world_size):
        np.testing.assert_array_equal(value, np.arange(35.0).reshape(5, 7) * total)


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.BXOR, ReduceOp.LAND, ReduceOp.AVG],
                         ids=lambda op: op.name)
def test_reductions_are_computed_by_cupy(op: ReduceOp) -> None:
    dtype = np.float64 if op is ReduceOp.AVG else np.int32
    a, b = np.array([1, 0, 5], dtype), np.array([3, 2, 5], dtype)
    value = op.finalize(op.apply(on_gpu(a), on_gpu(b)), 2)
    assert type(value) is cupy.ndarray and value.dtype == dtype
    np.testing.assert_array_equal(cupy.asnumpy(value), op.finalize(op.apply(a, b), 2))


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_other_collectives_keep_cupy_arrays(world_size: int) -> None:
    async def main(comm: sc.Comm) -> object:
        like = cupy.zeros(3, cupy.float32)
        mine = cupy.full(3, comm.rank, cupy.float32)
        for algorithm in sorted(broadcast.ALGORITHMS):
            x = cupy.arange(4096, dtype=cupy.float32) * (comm.rank == 0)
            assert await comm.broadcast(x, src=0, algorithm=algorithm) is x
            assert_on_gpu(x, x, np.arange(4096, dtype=np.float32))
        got = await comm.all_gather(mine)
        for src, value in enumerate(got):
            assert_on_gpu(value, like, np.full(3, src, np.float32))
        buf = cupy.zeros(3, cupy.float32)
        objs = [cupy.full(3, d, cupy.float32) for d in range(comm.size)] if comm.rank == 0 else None
        assert await comm.scatter(objs, src=0, buf=buf) is buf
        assert_on_gpu(buf, like, np.full(3, comm.rank, np.float32))
        got = await comm.reduce_scatter([mine + d for d in range(comm.size)])
        assert_on_gpu(got, like, np.full(3, sum(range(comm.size)) + comm.size * comm.rank, np.float32))
        got = await comm.scan(mine)
        assert_on_gpu(got, like, np.full(3, sum(range(comm.rank + 1)), np.float32))
        return True

    assert all(sc.run(main, world_size=world_size))


@pytest.mark.parametrize("direction", ["cupy->numpy", "numpy->cupy"])
def test_a_cupy_message_fills_a_numpy_buffer_and_the_reverse(direction: str) -> None:
    smsg = np.arange(6, dtype=np.float32)

    async def main(comm: sc.Comm) -> object:
        to_numpy = direction == "cupy->numpy"
        if comm.rank == 0:
            await comm.send(on_gpu(smsg) if to_numpy else smsg, dst=1)
            return None
        buf = np.zeros(6, np.float32) if to_numpy else cupy.zeros(6, cupy.float32)
        assert await comm.recv(buf, src=0) is buf
        return cupy.asnumpy(buf).tolist()

    assert sc.run(main, world_size=2)[1] == smsg.tolist()


def test_byte_transports_land_in_a_cupy_array() -> None:
    x = cupy.asfortranarray(cupy.arange(12, dtype=cupy.int16).reshape(3, 4))
    packed = wire.pack(x, copy=False, arrays=arrays.STAGED)
    assert all(type(b) is np.ndarray for b in packed.buffers)  # staged through host memory
    envelope = Envelope(EAGER, 0, 0, 1, 0, 1, packed.nbytes, 0.0, packed.header, packed.buffers)
    decoder = wire.FrameDecoder()
    (got,) = decoder.feed(b"".join(bytes(p) for p in wire.encode_frame(envelope)))
    rmsg = wire.unpack(got.header, got.buffers, arrays=arrays.STAGED)
    assert_on_gpu(rmsg, x, cupy.asnumpy(x))
    assert rmsg.flags.f_contiguous


@pytest.mark.parametrize("n", [4, 1 << 14], ids=["eager", "rendezvous"])
def test_changing_a_cupy_array_before_its_isend_completes_is_a_hazard(n: int) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            smsg = cupy.ones(n)
            req = comm.isend(smsg, dst=1)
            smsg[0] = 99.0  # too early
            await req
        else:
            await comm.recv(src=0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2)
    assert isinstance(info.value.__cause__, sc.BufferHazardError)


def test_device_checksum_sees_one_changed_byte() -> None:
    x = (cupy.arange(1 << 20) % 251).astype(cupy.uint8)
    before = arrays.checksum(x)
    assert arrays.checksum(x) == before
    x[12345] += 1
    assert arrays.checksum(x) != before


@pytest.mark.slow
def test_tcp_stages_cupy_arrays_and_lands_them_on_the_gpu() -> None:
    result = sc.run(_tcp_main, world_size=2, transport="tcp", procs=2, timeout=120)
    assert list(result) == [[3.0] * 4] * 2


async def _tcp_main(comm: sc.Comm) -> object:
    import cupy

    x = cupy.full(4, comm.rank + 1.0)
    await comm.all_reduce(x)
    assert type(x) is cupy.ndarray
    got = await comm.all_gather(x)
    assert all(type(g) is cupy.ndarray for g in got)
    return cupy.asnumpy(x).tolist()
