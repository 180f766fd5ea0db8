"""Arrays of other libraries as payloads: torch (CPU) tensors and array_api_strict arrays.

Each test builds its arrays with one library and asserts that what comes back
has the same type, dtype, shape and device, that collectives work in place as
torch.distributed does, and that reductions run in the array's own library.
numpy runs beside them as the reference. torch and array_api_strict are
optional (``pip install 'simcluster[arrays]'``): their cases skip without them.
The CuPy (GPU) paths are in ``test_gpu.py``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import msgpack
import numpy as np
import pytest

import simcluster as sc
from simcluster import arrays
from simcluster.collectives import all_reduce, broadcast, reduce, reduce_scatter
from simcluster.ops import ReduceOp
from simcluster.transports import wire

LIBS = ["numpy", "torch", "array_api_strict"]
FOREIGN = ["torch", "array_api_strict"]
SIZES = [1, 3, 4]


# ---- building and reading arrays of each library ----


def _module(lib: str) -> Any:
    if lib == "numpy":
        return np
    return pytest.importorskip(lib, reason=f"{lib} is not installed (pip install 'simcluster[arrays]')")


def make(lib: str, a: np.ndarray) -> Any:
    """Return ``a`` as an array of ``lib`` (torch keeps the memory order; strict lives on 'device1')."""
    a = np.array(a, copy=True, order="K")
    if lib == "numpy":
        return a
    if lib == "torch":
        return _module("torch").from_numpy(a)
    xp = _module("array_api_strict")
    return xp.asarray(a, device=xp.Device("device1"))  # not the default device: it must be kept


def host(x: Any) -> np.ndarray:
    """Return a numpy copy of ``x`` (bfloat16 tensors as float32) for comparisons."""
    if isinstance(x, np.ndarray):
        return x.copy()
    if arrays.library(x) == "torch":
        t = x.detach()
        return (t.float() if arrays.dtype_name(t) == "bfloat16" else t).numpy().copy()
    return np.array(np.from_dlpack(x), copy=True)


def assert_like(result: Any, like: Any, expected: np.ndarray | None = None) -> None:
    """Assert ``result`` has ``like``'s type, dtype and device (and ``expected``'s values)."""
    assert type(result) is type(like)
    assert arrays.dtype_name(result) == arrays.dtype_name(like)
    assert arrays.device(result) == arrays.device(like)
    if expected is not None:
        assert tuple(result.shape) == expected.shape
        np.testing.assert_array_equal(host(result), expected)


def data(rank: int, n: int = 35, dtype: Any = np.float64) -> np.ndarray:
    """Rank ``rank``'s payload: exact in floating point whatever the reduction order."""
    return ((np.arange(n) * (rank + 3)) % 11 - 4).astype(dtype).reshape(5, n // 5)


@pytest.fixture(params=LIBS)
def lib(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    _module(name)
    return name


@pytest.fixture(params=FOREIGN)
def foreign(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    _module(name)
    return name


# ---- point-to-point ----

P2P = [
    np.arange(6, dtype=np.float64).reshape(2, 3),
    np.arange(5, dtype=np.int32),
    np.array(2.5),
    np.zeros((0, 3), dtype=np.float32),
    np.array([True, False, True]),
    (np.arange(4) + 1j).astype(np.complex64),
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    np.arange(1 << 14, dtype=np.float64),  # 128 KiB: a rendezvous send
]


@pytest.mark.parametrize("smsg", P2P, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_p2p_round_trip_keeps_type_dtype_shape_and_device(transport: str, lib: str,
                                                         smsg: np.ndarray) -> None:
    async def main(comm: sc.Comm) -> object:
        x = make(lib, smsg)
        if comm.rank == 0:
            await comm.send(x, dst=1, tag=4)
            await comm.send([x, {"again": x}], dst=1, tag=5)
            return None
        rmsg = await comm.recv(src=0, tag=4)
        assert_like(rmsg, x, smsg)
        nested = await comm.recv(src=0, tag=5)
        assert_like(nested[0], x, smsg)
        assert_like(nested[1]["again"], x, smsg)
        assert comm.p2p.bytes_recv[1] == 3 * arrays.nbytes(x)  # arrays count their nbytes
        return True

    assert sc.run(main, world_size=2, transport=transport)[1] is True


def test_torch_keeps_fortran_order_and_drops_autograd(transport: str) -> None:
    torch = _module("torch")

    async def main(comm: sc.Comm) -> object:
        x = torch.arange(6.0).reshape(2, 3).T.requires_grad_()
        if comm.rank == 0:
            await comm.send(x, dst=1)
            return None
        rmsg = await comm.recv(src=0)
        assert rmsg.stride() == x.stride() == (1, 3) and not rmsg.requires_grad
        return rmsg.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]


def test_bfloat16_tensors_round_trip_and_reduce(transport: str) -> None:
    torch = _module("torch")

    async def main(comm: sc.Comm) -> object:
        x = torch.full((3, 2), 1.5 * (comm.rank + 1), dtype=torch.bfloat16)
        if comm.rank == 0:
            await comm.send(x, dst=1)
        elif comm.rank == 1:
            rmsg = await comm.recv(src=0)
            assert_like(rmsg, x, np.full((3, 2), 1.5, np.float32))
        out = await comm.all_reduce(x, op="avg")
        assert out is x and x.dtype == torch.bfloat16
        return x.float().tolist()

    assert sc.run(main, world_size=4, transport=transport)[3] == [[3.75] * 2] * 3


@pytest.mark.parametrize(("src_lib", "buf_lib"), [
    ("torch", "numpy"), ("numpy", "torch"), ("array_api_strict", "numpy"),
    ("numpy", "array_api_strict"), ("torch", "array_api_strict"), ("torch", "torch"),
])
def test_recv_fills_a_buffer_of_another_library(transport: str, src_lib: str, buf_lib: str) -> None:
    _module(src_lib), _module(buf_lib)
    smsg = np.arange(6, dtype=np.float32).reshape(2, 3)

    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(make(src_lib, smsg), dst=1)
            await comm.send(make(src_lib, smsg[0]), dst=1)  # shorter: fills the front
            return None
        buf = make(buf_lib, np.full((2, 3), -1, np.float32))
        assert await comm.recv(buf, src=0) is buf
        assert_like(buf, make(buf_lib, smsg), smsg)
        buf = make(buf_lib, np.full((2, 3), -1, np.float32))
        await comm.recv(buf, src=0)
        np.testing.assert_array_equal(host(buf), [[0, 1, 2], [-1, -1, -1]])
        return True

    assert sc.run(main, world_size=2, transport=transport)[1] is True


def test_recv_into_torch_buffer_checks_dtype_and_size(transport: str) -> None:
    torch = _module("torch")

    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.arange(3.0), dst=1)
            await comm.send(torch.arange(8, dtype=torch.int32), dst=1)
            return None
        errors = []
        for buf in (torch.zeros(3, dtype=torch.float32), torch.zeros(4, dtype=torch.int32)):
            with pytest.raises((TypeError, sc.TruncationError)) as info:
                await comm.recv(buf, src=0)
            errors.append(str(info.value))
        return errors

    assert sc.run(main, world_size=2, transport=transport)[1] == [
        "rank 1: recv(buf=torch.float32[3], src=0, tag=ANY_TAG): message from rank 0 has dtype "
        "float64 but buf has dtype float32; receive into a float64 buffer, or without buf",
        "rank 1: recv(buf=torch.int32[4], src=0, tag=ANY_TAG): message from rank 0 is 32 bytes but "
        "buf holds 16; pass a larger buf, or size it with probe() first",
    ]


def test_recv_into_a_leaf_tensor_that_requires_grad(transport: str) -> None:
    torch = _module("torch")

    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(torch.ones(2), dst=1)
            return None
        weights = torch.zeros(2, requires_grad=True)
        await comm.recv(weights, src=0)
        assert weights.requires_grad
        return weights.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == [1.0, 1.0]


@pytest.mark.parametrize("n", [4, 1 << 14], ids=["eager", "rendezvous"])
def test_changing_a_tensor_before_its_isend_completes_is_a_hazard(transport: str, foreign: str,
                                                                  n: int) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            smsg = make(foreign, np.ones(n))
            req = comm.isend(smsg, dst=1)
            smsg[0] = 99.0  # too early
            await req
        else:
            await comm.recv(src=0)

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    assert isinstance(info.value.__cause__, sc.BufferHazardError)
    assert "the send buffer changed before the request completed" in str(info.value.__cause__)


def test_an_untouched_tensor_isend_is_no_hazard(transport: str, foreign: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            smsg = make(foreign, np.arange(1 << 14, dtype=np.float64))
            await comm.isend(smsg, dst=1)
            smsg[0] = 5.0  # after the wait: fine
            return None
        return float(host(await comm.recv(src=0))[1])

    assert sc.run(main, world_size=2, transport=transport)[1] == 1.0


# ---- collectives: in place, like torch.distributed ----


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("algorithm", sorted(all_reduce.ALGORITHMS))
def test_all_reduce_updates_the_array_in_place(transport: str, lib: str, algorithm: str,
                                               world_size: int) -> None:
    async def main(comm: sc.Comm) -> object:
        x = make(lib, data(comm.rank))
        out = await comm.all_reduce(x, algorithm=algorithm)
        assert out is x
        assert_like(x, make(lib, data(0)))
        return host(x)

    result = sc.run(main, world_size=world_size, transport=transport)
    expected = sum(data(r) for r in range(world_size))
    for value in result:
        np.testing.assert_array_equal(value, expected)


OPS = [
    (ReduceOp.SUM, np.int32), (ReduceOp.PRODUCT, np.float64), (ReduceOp.MIN, np.float32),
    (ReduceOp.MAX, np.int64), (ReduceOp.BAND, np.int16), (ReduceOp.BOR, np.uint8),
    (ReduceOp.BXOR, np.int32), (ReduceOp.LAND, np.float64), (ReduceOp.LOR, np.int32),
    (ReduceOp.LXOR, np.int64), (ReduceOp.AVG, np.float64), (ReduceOp.SUM, np.bool_),
    (ReduceOp.MAX, np.bool_), (ReduceOp.PRODUCT, np.bool_), (ReduceOp.LXOR, np.bool_),
    (ReduceOp.SUM, np.complex128),
]


@pytest.mark.parametrize(("op", "dtype"), OPS, ids=lambda v: getattr(v, "name", None) or np.dtype(v).name)
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling"])
def test_all_reduce_ops_match_numpy(transport: str, lib: str, op: ReduceOp, dtype: Any,
                                    algorithm: str) -> None:
    def payload(rank: int) -> np.ndarray:
        return data(rank, 10, dtype) if dtype is not np.bool_ else data(rank, 10) > 0

    async def main(comm: sc.Comm) -> object:
        x = make(lib, payload(comm.rank))
        await comm.all_reduce(x, op=op, algorithm=algorithm)
        assert_like(x, make(lib, payload(0)))
        return host(x)

    size = 4
    expected = op.finalize(functools.reduce(op.apply, [payload(r) for r in range(size)]), size)
    for value in sc.run(main, world_size=size, transport=transport):
        assert value.dtype == expected.dtype
        np.testing.assert_allclose(value, expected, rtol=1e-6)


@pytest.mark.parametrize("world_size", SIZES)
@pytest.mark.parametrize("algorithm", sorted(broadcast.ALGORITHMS))
def test_broadcast_fills_every_rank_in_place(transport: str, lib: str, algorithm: str,
                                            world_size: int) -> None:
    big = np.arange(4096, dtype=np.float64).reshape(64, 64)  # enough to be split up

    async def main(comm: sc.Comm) -> object:
        for src in range(comm.size):
            x = make(lib, big * (comm.rank == src))
            assert await comm.broadcast(x, src=src, algorithm=algorithm) is x
            assert_like(x, make(lib, big), big)
        return True

    assert all(sc.run(main, world_size=world_size, transport=transport))


@pytest.mark.parametrize("world_size", SIZES)
@pytest.mark.parametrize("algorithm", sorted(reduce.ALGORITHMS))
def test_reduce_updates_the_root_in_place_and_leaves_the_others(transport: str, lib: str,
                                                               algorithm: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> object:
        for dst in range(comm.size):
            x = make(lib, data(comm.rank))
            out = await comm.reduce(x, dst=dst, op="max", algorithm=algorithm)
            if comm.rank == dst:
                assert out is x
                assert_like(x, make(lib, data(0)), np.maximum.reduce([data(r) for r in range(comm.size)]))
            else:
                assert out is None
                np.testing.assert_array_equal(host(x), data(comm.rank))
        return True

    assert all(sc.run(main, world_size=world_size, transport=transport))


@pytest.mark.parametrize("world_size", SIZES)
def test_gathers_scatter_and_all_to_all_keep_the_library(transport: str, lib: str,
                                                         world_size: int) -> None:
    def item(src: int, dst: int) -> np.ndarray:
        return np.arange(3, dtype=np.float32) + 10 * src + dst

    async def main(comm: sc.Comm) -> object:
        like = make(lib, item(0, 0))
        mine = make(lib, item(comm.rank, 0))
        for algorithm in ("ring", "recursive_doubling", "bruck"):
            got = await comm.all_gather(mine, algorithm=algorithm)
            for src, value in enumerate(got):
                assert_like(value, like, item(src, 0))
            assert got[comm.rank] is not mine
        for dst in range(comm.size):
            got = await comm.gather(mine, dst=dst)
            if comm.rank == dst:
                for src, value in enumerate(got):
                    assert_like(value, like, item(src, 0))
        for src in range(comm.size):
            objs = [make(lib, item(src, dst)) for dst in range(comm.size)] if comm.rank == src else None
            buf = make(lib, np.zeros(3, np.float32))
            assert await comm.scatter(objs, src=src, buf=buf) is buf
            assert_like(buf, like, item(src, comm.rank))
            assert_like(await comm.scatter(objs, src=src), like, item(src, comm.rank))
        for algorithm in ("pairwise", "linear"):
            got = await comm.all_to_all([make(lib, item(comm.rank, d)) for d in range(comm.size)],
                                        algorithm=algorithm)
            for src, value in enumerate(got):
                assert_like(value, like, item(src, comm.rank))
        return True

    assert all(sc.run(main, world_size=world_size, transport=transport))


@pytest.mark.parametrize("world_size", SIZES)
@pytest.mark.parametrize("algorithm", sorted(reduce_scatter.ALGORITHMS))
def test_reduce_scatter_scan_and_exscan_keep_the_library(transport: str, lib: str, algorithm: str,
                                                         world_size: int) -> None:
    def item(src: int, dst: int) -> np.ndarray:
        return np.arange(4, dtype=np.int64) * (src + 1) + dst

    async def main(comm: sc.Comm) -> object:
        like = make(lib, item(0, 0))
        got = await comm.reduce_scatter([make(lib, item(comm.rank, d)) for d in range(comm.size)],
                                        algorithm=algorithm)
        assert_like(got, like, sum(item(s, comm.rank) for s in range(comm.size)))
        for scan_algorithm in ("recursive_doubling", "linear"):
            got = await comm.scan(make(lib, item(comm.rank, 0)), algorithm=scan_algorithm)
            assert_like(got, like, sum(item(s, 0) for s in range(comm.rank + 1)))
            got = await comm.exscan(make(lib, item(comm.rank, 0)), op="max", algorithm=scan_algorithm)
            if comm.rank == 0:
                assert got is None
            else:
                assert_like(got, like, item(comm.rank - 1, 0))
        return True

    assert all(sc.run(main, world_size=world_size, transport=transport))


def test_nonblocking_all_reduce_on_a_tensor_that_requires_grad(transport: str) -> None:
    torch = _module("torch")

    async def main(comm: sc.Comm) -> object:
        grad = torch.full((4,), float(comm.rank), requires_grad=True)
        req = comm.iall_reduce(grad, op=sc.ReduceOp.AVG)
        assert await req is grad
        assert grad.requires_grad
        return grad.tolist()

    assert sc.run(main, world_size=4, transport=transport)[0] == [1.5] * 4


def test_the_dist_facade_takes_tensors(transport: str) -> None:
    torch = _module("torch")
    from simcluster import dist

    async def main(comm: sc.Comm) -> object:
        t = torch.ones(2) * (dist.get_rank() + 1)
        await dist.all_reduce(t)
        slots = [torch.zeros(2) for _ in range(dist.get_world_size())]
        await dist.all_gather(slots, t * dist.get_rank())
        return [t.tolist(), [s.tolist() for s in slots]]

    assert sc.run(main, world_size=2, transport=transport)[0] == [[3.0, 3.0], [[0.0, 0.0], [3.0, 3.0]]]


# ---- reductions run in the array's own library ----


def test_reduce_ops_on_tensors_never_go_through_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = _module("torch")
    monkeypatch.setattr(torch.Tensor, "__array__", None, raising=False)  # no silent conversion
    monkeypatch.setattr(torch.Tensor, "numpy", None)
    a, b = torch.tensor([1.0, 5.0]), torch.tensor([3.0, 2.0])
    for op, expected in [(ReduceOp.SUM, [4.0, 7.0]), (ReduceOp.MIN, [1.0, 2.0]),
                         (ReduceOp.LAND, [1.0, 1.0]), (ReduceOp.PRODUCT, [3.0, 10.0])]:
        value = op.apply(a, b)
        assert type(value) is torch.Tensor and value.dtype == torch.float32
        assert value.tolist() == expected
    assert ReduceOp.AVG.finalize(a, 2).tolist() == [0.5, 2.5]


def test_op_checks_name_the_dtype_of_a_tensor() -> None:
    torch = _module("torch")
    with pytest.raises(TypeError, match=r"^rank 0: all_reduce\(op=BAND\): BAND is not defined for "
                                         r"dtype bfloat16; use an integer or bool dtype, or another op$"):
        ReduceOp.BAND.check(torch.ones(2, dtype=torch.bfloat16), 0, "all_reduce(op=BAND)")
    with pytest.raises(TypeError, match=r"AVG is not defined for dtype int32 arrays"):
        ReduceOp.AVG.check(torch.ones(2, dtype=torch.int32), 0, "all_reduce(op=AVG)")
    ReduceOp.MAX.check(torch.ones(2, dtype=torch.bfloat16), 0, "all_reduce(op=MAX)")


# ---- the wire: staged through host bytes, rebuilt by name ----


def _frame_round_trip(obj: object, codec: Any = arrays.STAGED) -> object:
    packed = wire.pack(obj, copy=True, arrays=codec)
    envelope = sc_envelope(packed)
    decoder = wire.FrameDecoder()
    frames = b"".join(bytes(piece) for piece in wire.encode_frame(envelope))
    out = []
    for i in range(len(frames)):  # one byte at a time
        out += decoder.feed(frames[i:i + 1])
    (got,) = out
    return wire.unpack(got.header, got.buffers, arrays=codec)


def sc_envelope(packed: wire.Packed) -> Any:
    from simcluster.transports.base import EAGER, Envelope

    return Envelope(EAGER, 0, 0, 1, 0, 1, packed.nbytes, 0.0, packed.header, packed.buffers)


def test_byte_transports_rebuild_tensors_with_dtype_shape_and_order(foreign: str) -> None:
    smsg = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    x = make(foreign, smsg)
    got = _frame_round_trip({"x": x, "n": 3})
    assert isinstance(got, dict) and got["n"] == 3
    assert_like(got["x"], x, smsg)
    if foreign == "torch":
        assert got["x"].stride() == x.stride()


def test_byte_transports_carry_bfloat16_by_name() -> None:
    torch = _module("torch")
    x = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    packed = wire.pack(x, copy=False, arrays=arrays.STAGED)
    assert packed.single_array and packed.nbytes == 12
    ref = msgpack.unpackb(msgpack.unpackb(packed.header).data)
    assert ref == [0, "torch", "bfloat16", [2, 3], False, "cpu"]
    got = _frame_round_trip(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert torch.equal(got, x)


def test_in_process_arrays_travel_as_objects_and_cannot_be_framed() -> None:
    torch = _module("torch")
    x = torch.arange(4.0)
    packed = wire.pack(x, copy=True, arrays=arrays.IN_PROCESS)
    (buf,) = packed.buffers
    assert isinstance(buf, wire.ObjectBuffer) and buf.array is not x and torch.equal(buf.array, x)
    assert wire.unpack(packed.header, packed.buffers) is buf.array  # no codec needed in process
    with pytest.raises(sc.TransportError, match="has no bytes to frame"):
        wire.encode_frame(sc_envelope(packed))


def test_a_tensor_without_a_codec_is_not_sendable() -> None:
    torch = _module("torch")
    with pytest.raises(wire.Unsendable, match=r"^Tensor is not sendable"):
        wire.pack(torch.ones(2))


def test_an_unknown_array_library_is_refused_naming_its_type() -> None:
    class Foreign:
        shape = (2,)
        dtype = "float32"

        def __array_namespace__(self, api_version: str | None = None) -> Any:
            return np

    with pytest.raises(wire.Unsendable, match=r"^.*Foreign is an array of a library simcluster does not "
                                              r"carry; convert it to a numpy, CuPy, torch or "
                                              r"array_api_strict array first$"):
        wire.pack(Foreign(), arrays=arrays.STAGED)


def _foreign_header(library: str, dtype: str, shape: list[int]) -> bytes:
    ref = msgpack.packb([0, library, dtype, shape, False, "cpu"])
    return msgpack.packb(msgpack.ExtType(wire.EXT_ARRAY, ref))


def test_a_receiver_without_the_library_gets_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    header = _foreign_header("torch", "bfloat16", [2])
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed here
    with pytest.raises(wire.Unreadable, match=r"^the message holds a torch array \(bfloat16\[2\]\) "
                                              r"but torch cannot be imported here \(.*\); install "
                                              r"torch where this rank runs, or receive into a buffer "
                                              r"of a library you have \(recv\(buf=\.\.\.\)\)$"):
        wire.unpack(header, [b"\x00" * 4], arrays=arrays.STAGED)
    with pytest.raises(wire.Unreadable, match="torch cannot be imported here"):
        wire.unpack(header, [b"\x00" * 4], arrays=arrays.HOST)  # numpy has no bfloat16 either
    # a dtype numpy holds still fills a numpy buffer without torch
    got = wire.unpack(_foreign_header("torch", "float32", [2]), [np.float32([1, 2]).tobytes()],
                      arrays=arrays.HOST)
    assert type(got) is np.ndarray and got.tolist() == [1.0, 2.0]


def test_unknown_libraries_and_dtypes_off_the_wire_are_refused() -> None:
    with pytest.raises(wire.Unreadable, match=r"^the message holds a 'mxnet' array \('float32'\), a "
                                              "library simcluster does not carry"):
        wire.unpack(_foreign_header("mxnet", "float32", [1]), [b"\x00" * 4], arrays=arrays.STAGED)
    _module("torch")
    with pytest.raises(wire.Unreadable, match=r"^torch has no dtype 'float128' here"):
        wire.unpack(_foreign_header("torch", "float128", [1]), [b"\x00" * 16], arrays=arrays.STAGED)
    with pytest.raises(sc.TransportError, match="malformed payload header"):
        wire.unpack(_foreign_header("torch", "float32", [3]), [b"\x00" * 4], arrays=arrays.STAGED)
    with pytest.raises(wire.Unreadable,
                       match=r"no array codec was given; pass unpack\(\.\.\., arrays=\) an ArrayCodec"):
        wire.unpack(_foreign_header("torch", "float32", [1]), [b"\x00" * 4])


# ---- simcluster.arrays ----


def test_helpers_name_library_dtype_and_device(lib: str) -> None:
    x = make(lib, np.zeros((2, 3), np.float32))
    assert arrays.is_array(x) and arrays.library(x) == lib
    assert arrays.dtype_name(x) == "float32" and arrays.nbytes(x) == 24 and arrays.kind(x) == "f"
    prefix = "" if lib == "numpy" else f"{lib}."
    assert arrays.describe(x) == f"{prefix}float32[2, 3]"
    assert not arrays.is_array(3.0) and not arrays.is_array([1]) and not arrays.is_array(np.float64(1))
    copy = arrays.clone(x)
    assert_like(copy, x, np.zeros((2, 3), np.float32))
    copy[0, 0] = 1.0
    assert host(x)[0, 0] == 0.0
    assert_like(arrays.empty_like(x), x)


@pytest.mark.parametrize("src_lib", LIBS)
def test_copy_into_crosses_libraries_explicitly(lib: str, src_lib: str) -> None:
    _module(src_lib)
    dst = make(lib, np.zeros(4))
    assert arrays.copy_into(dst, make(src_lib, np.arange(4.0))) is dst
    assert_like(dst, make(lib, np.zeros(4)), np.arange(4.0))


def test_checksums_see_a_change_where_the_array_lives(lib: str) -> None:
    x = make(lib, np.arange(64, dtype=np.float32))
    before = arrays.checksum(x)
    assert arrays.checksum(x) == before
    x[3] = -1.0
    assert arrays.checksum(x) != before


@pytest.mark.parametrize("xp_lib", ["numpy", "torch"])
def test_the_device_hash_runs_in_any_namespace(xp_lib: str) -> None:
    """The hash CuPy and CUDA tensors use, run here with CPU namespaces (same code path)."""
    from simcluster.arrays import _device_hash

    raw = np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8)
    x = make(xp_lib, raw)
    xp = arrays.namespace(x)
    weights1, weights2 = np.arange(1000) % 65521 + 1, np.arange(1000) % 65519 + 1
    expected = (int((raw * weights1).sum()) << 64) | int((raw * weights2).sum())
    assert _device_hash(xp, x) == expected
    swapped = raw.copy()
    swapped[[1, 2]] = swapped[[2, 1]]
    assert raw[1] == raw[2] or _device_hash(xp, make(xp_lib, swapped)) != expected


# ---- shm and tcp: staged through host memory (slow: real processes) ----


async def _staged_main(comm: sc.Comm) -> object:
    import torch

    x = torch.arange(40_000, dtype=torch.bfloat16).reshape(200, 200).T * 0 + comm.rank + 1
    await comm.all_reduce(x, algorithm="ring")
    got = await comm.all_gather(torch.tensor([comm.rank]))
    assert all(type(g) is torch.Tensor for g in got)
    return [float(x[0, 0]), list(x.stride()), str(x.dtype), [int(g) for g in got]]


@pytest.mark.slow
@pytest.mark.parametrize("byte_transport", ["shm", "tcp"])
def test_byte_transports_stage_tensors_through_host_memory(byte_transport: str) -> None:
    _module("torch")
    result = sc.run(_staged_main, world_size=3, transport=byte_transport, procs=2, timeout=60)
    assert list(result) == [[6.0, [1, 200], "torch.bfloat16", [0, 1, 2]]] * 3


async def _return_tensor(comm: sc.Comm) -> Any:
    import torch

    t = torch.ones(3, dtype=torch.float64) * comm.rank
    await comm.all_reduce(t)
    return t


@pytest.mark.slow
@pytest.mark.parametrize("byte_transport", ["shm", "tcp"])
def test_ranks_in_other_processes_can_return_tensors(byte_transport: str) -> None:
    torch = _module("torch")
    result = sc.run(_return_tensor, world_size=3, transport=byte_transport, procs=2, timeout=60)
    for value in result:
        assert type(value) is torch.Tensor and value.dtype == torch.float64
        assert value.tolist() == [3.0, 3.0, 3.0]
