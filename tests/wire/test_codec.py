"""The payload codec: pack() / unpack() round trips, copies, sizes, errors, format."""

from __future__ import annotations

import ast
import collections
import enum
import math
import pickle
import struct
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.transports.base import TransportError
from simcluster.transports.wire import (
    EXT_NDARRAY,
    INLINE,
    MAX_DEPTH,
    Unsendable,
    inline_nbytes,
    nbytes_of,
    pack,
    unpack,
)

# ---- the corpus ----

_base = np.arange(12, dtype=np.float64).reshape(3, 4)

MESSAGES = [
    pytest.param(None, id="none"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param(0, id="zero"),
    pytest.param(-1, id="minus-one"),
    pytest.param(2**64 - 1, id="uint64-max"),
    pytest.param(-(2**63), id="int64-min"),
    pytest.param(2**100, id="big-int"),
    pytest.param(-(2**64), id="big-negative-int"),
    pytest.param(1.5, id="float"),
    pytest.param(-0.0, id="negative-zero"),
    pytest.param(math.inf, id="inf"),
    pytest.param(math.nan, id="nan"),
    pytest.param(complex(1.5, -2.0), id="complex"),
    pytest.param("", id="empty-str"),
    pytest.param("héllo wörld ✓ 🚀", id="unicode-str"),
    pytest.param(b"\x00\xffbytes", id="bytes"),
    pytest.param([], id="empty-list"),
    pytest.param((), id="empty-tuple"),
    pytest.param({}, id="empty-dict"),
    pytest.param([1, "two", 3.0, None, [4, [5]]], id="nested-list"),
    pytest.param((1, (2, (3, "x")), [4, (5,)]), id="nested-tuple"),
    pytest.param({"a": 1, "b": [1, 2, (3, 4)], "c": {"d": None}}, id="nested-dict"),
    pytest.param({1: "one", 2: "two"}, id="int-keys"),
    pytest.param({(1, 2): "pair", "s": 1, None: 0, 2.5: [1]}, id="mixed-keys"),
    pytest.param({"outer": {3: {"inner": (1, 2)}}}, id="int-keys-nested"),
    pytest.param({2**70: "big key"}, id="big-int-key"),
    pytest.param(np.float32(1.5), id="np-float32"),
    pytest.param(np.float64(2.25), id="np-float64"),
    pytest.param(np.int8(-3), id="np-int8"),
    pytest.param(np.uint64(2**64 - 1), id="np-uint64"),
    pytest.param(np.bool_(True), id="np-bool"),
    pytest.param(np.complex64(1 - 1j), id="np-complex64"),
    pytest.param(np.str_("numpy str"), id="np-str"),
    pytest.param(np.bytes_(b"np"), id="np-bytes"),
    pytest.param(np.datetime64("2024-01-02T03:04:05", "s"), id="np-datetime64"),
    pytest.param(np.dtype(">i4").type(7), id="np-int32"),
    pytest.param(np.array(3.5), id="array-0d"),
    pytest.param(np.zeros((0, 3)), id="array-empty"),
    pytest.param(np.zeros(0, dtype=np.int16), id="array-empty-1d"),
    pytest.param(np.arange(10, dtype=np.int32), id="array-int32"),
    pytest.param(np.array([True, False, True]), id="array-bool"),
    pytest.param(np.array([1 + 2j, -3j], dtype=np.complex128), id="array-complex"),
    pytest.param(np.arange(6, dtype=">f8").reshape(2, 3), id="array-big-endian"),
    pytest.param(np.array(["ab", "cde"]), id="array-unicode"),
    pytest.param(np.array([b"ab", b"c"]), id="array-bytes"),
    pytest.param(np.array(["2024-01-01", "NaT"], dtype="M8[D]"), id="array-datetime"),
    pytest.param(
        np.array([(1, 2.5, b"x"), (3, -1.0, b"yz")],
                 dtype=[("id", "<i4"), ("value", ">f8"), ("tag", "S2")]),
        id="array-structured",
    ),
    pytest.param(
        np.zeros(2, dtype=np.dtype([("a", "u1"), ("b", "<i8", (2, 2))], align=True)),
        id="array-structured-aligned-subarray",
    ),
    pytest.param(_base[::2], id="array-strided-rows"),
    pytest.param(_base[:, ::2], id="array-strided-cols"),
    pytest.param(_base.T, id="array-transposed"),
    pytest.param(np.asfortranarray(_base), id="array-fortran"),
    pytest.param(np.arange(24).reshape(2, 3, 4).transpose(1, 0, 2), id="array-permuted"),
    pytest.param(np.arange(5)[::-1], id="array-reversed"),
    pytest.param([np.arange(3), {"w": np.ones((2, 2), order="F")}, (np.float16(1),)],
                 id="arrays-nested"),
    pytest.param({"x": np.arange(3), 7: np.zeros(2)}, id="arrays-under-int-keys"),
]


def assert_same(rmsg: object, smsg: object) -> None:
    """Check that ``rmsg`` is what ``smsg`` should come back as: value, type and layout."""
    assert type(rmsg) is type(smsg), (type(rmsg), type(smsg))
    if isinstance(smsg, np.ndarray):
        assert isinstance(rmsg, np.ndarray)
        assert rmsg.dtype == smsg.dtype
        assert rmsg.dtype.str == smsg.dtype.str
        assert rmsg.shape == smsg.shape
        assert rmsg.tobytes() == smsg.tobytes()  # bit-exact, NaN and NaT included
        if smsg.flags.f_contiguous and not smsg.flags.c_contiguous:
            assert rmsg.flags.f_contiguous
        else:
            assert rmsg.flags.c_contiguous
    elif isinstance(smsg, np.generic):
        assert isinstance(rmsg, np.generic)
        assert rmsg.dtype == smsg.dtype
        assert rmsg.tobytes() == smsg.tobytes()
    elif isinstance(smsg, float):
        assert struct.pack("<d", rmsg) == struct.pack("<d", smsg)
    elif isinstance(smsg, complex):
        assert isinstance(rmsg, complex)
        assert (rmsg.real, rmsg.imag) == (smsg.real, smsg.imag)
    elif isinstance(smsg, (list, tuple)):
        assert isinstance(rmsg, (list, tuple))
        assert len(rmsg) == len(smsg)
        for r, s in zip(rmsg, smsg):
            assert_same(r, s)
    elif isinstance(smsg, dict):
        assert isinstance(rmsg, dict)
        assert list(rmsg) == list(smsg)
        for (rk, rv), (sk, sv) in zip(rmsg.items(), smsg.items()):
            assert_same(rk, sk)
            assert_same(rv, sv)
    else:
        assert rmsg == smsg


# ---- round trips ----


@pytest.mark.parametrize("copy", [False, True], ids=["view", "copy"])
@pytest.mark.parametrize("smsg", MESSAGES)
def test_round_trip_keeps_value_type_dtype_shape_and_order(smsg: object, copy: bool) -> None:
    packed = pack(smsg)
    rmsg = unpack(packed.header, packed.buffers, copy=copy)
    assert_same(rmsg, smsg)


@pytest.mark.parametrize("smsg", MESSAGES)
def test_round_trip_from_raw_bytes_as_off_a_socket(smsg: object) -> None:
    packed = pack(smsg)
    raw = [bytes(buf.tobytes(order="A")) for buf in packed.buffers]
    assert_same(unpack(packed.header, raw), smsg)
    assert_same(unpack(bytes(packed.header), [bytearray(b) for b in raw], copy=True), smsg)


@pytest.mark.parametrize("smsg", MESSAGES)
def test_pack_without_copy_round_trips_too(smsg: object) -> None:
    packed = pack(smsg, copy=False)
    assert_same(unpack(packed.header, packed.buffers), smsg)


def test_tuples_come_back_as_tuples_at_every_depth() -> None:
    rmsg = unpack(pack([(1, (2, [3, (4,)]))]).header)
    assert rmsg == [(1, (2, [3, (4,)]))]
    assert type(rmsg[0][1][1][1]) is tuple


def test_bytearray_and_memoryview_are_sent_as_bytes() -> None:
    smsg = [bytearray(b"ab"), memoryview(b"cd"), memoryview(np.arange(3, dtype=np.uint8))[::2]]
    assert unpack(pack(smsg).header) == [b"ab", b"cd", b"\x00\x02"]


def test_subclasses_of_builtins_are_sent_as_the_base_type() -> None:
    class Color(enum.IntEnum):
        RED = 1

    class Point(NamedTuple):
        x: int
        y: int

    smsg = [Color.RED, Point(1, 2), collections.OrderedDict(a=1), collections.defaultdict(int)]
    rmsg = unpack(pack(smsg).header)
    assert rmsg == [1, (1, 2), {"a": 1}, {}]
    assert [type(x) for x in rmsg] == [int, tuple, dict, dict]


def test_user_ext_type_cannot_forge_an_array_ref() -> None:
    packed = pack(msgpack.ExtType(EXT_NDARRAY, b"forged"))
    assert unpack(packed.header) == (EXT_NDARRAY, b"forged")  # a namedtuple: sent as a tuple


def test_ndarray_subclass_is_sent_as_plain_ndarray() -> None:
    smsg = np.arange(4).reshape(2, 2).view(np.matrix)
    packed = pack(smsg)
    assert packed.single_array
    rmsg = unpack(packed.header, packed.buffers)
    assert type(rmsg) is np.ndarray
    assert rmsg.tolist() == [[0, 1], [2, 3]]


def test_dict_keeps_key_order_when_a_late_key_is_not_a_str() -> None:
    smsg = {"a": np.arange(2), "b": np.ones(1), 3: np.zeros(3), "d": np.arange(1)}
    packed = pack(smsg)
    assert len(packed.buffers) == 4
    assert_same(unpack(packed.header, packed.buffers), smsg)


# ---- copies and ownership ----


def test_pack_copies_so_sender_may_change_its_array() -> None:
    smsg = np.arange(5.0)
    packed = pack(smsg)
    smsg[:] = -1
    rmsg = unpack(packed.header, packed.buffers)
    assert rmsg.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_pack_copy_keeps_fortran_order_for_fortran_input() -> None:
    packed = pack(np.asfortranarray(_base))
    assert packed.buffers[0].flags.f_contiguous
    assert not packed.buffers[0].flags.c_contiguous


def test_pack_without_copy_references_contiguous_arrays() -> None:
    smsg = np.arange(4)
    packed = pack(smsg, copy=False)
    assert packed.buffers[0] is smsg
    fortran = np.asfortranarray(_base)
    assert pack(fortran, copy=False).buffers[0] is fortran


def test_pack_without_copy_still_copies_a_strided_view_once() -> None:
    view = _base[:, ::2]
    buf = pack(view, copy=False).buffers[0]
    assert buf.flags.c_contiguous
    assert not np.shares_memory(buf, _base)


def test_unpack_view_hands_back_the_packed_buffer() -> None:
    packed = pack(np.arange(3))
    assert unpack(packed.header, packed.buffers) is packed.buffers[0]


def test_unpack_copy_owns_writeable_data() -> None:
    packed = pack({"a": np.arange(3), "f": np.asfortranarray(_base)})
    for buffers in (packed.buffers, [b.tobytes(order="A") for b in packed.buffers]):
        rmsg = unpack(packed.header, buffers, copy=True)
        for arr, buf in zip(rmsg.values(), packed.buffers):
            assert arr.flags.writeable
            assert arr.flags.owndata
            assert not np.shares_memory(arr, buf)
        assert rmsg["f"].flags.f_contiguous


def test_unpack_view_over_bytes_is_read_only_and_over_bytearray_writeable() -> None:
    packed = pack(np.arange(4, dtype=np.int16))
    raw = packed.buffers[0].tobytes()
    assert not unpack(packed.header, [raw]).flags.writeable
    writable = bytearray(raw)
    arr = unpack(packed.header, [writable])
    arr[0] = 9
    assert writable[:2] == b"\x09\x00"


# ---- counted size ----


@pytest.mark.parametrize(
    ("smsg", "nbytes"),
    [
        pytest.param(None, 0, id="none-is-free"),
        pytest.param(np.zeros(10), 80, id="array"),
        pytest.param(np.zeros((0, 4)), 0, id="empty-array"),
        pytest.param(np.zeros(3, dtype=np.int16)[::2], 4, id="strided-view"),
        pytest.param({"w": np.zeros(3), "name": "weights of layer 1"}, 24, id="headers-free"),
        pytest.param([np.zeros(2, np.float32), np.zeros(1, np.int8)], 9, id="arrays-summed"),
        pytest.param(1.5, 9, id="float-header"),
        pytest.param([1, 2, 3], 4, id="list-header"),
        pytest.param("abc", 4, id="str-header"),
        pytest.param(np.float64(1.0), 18, id="numpy-scalar-header"),
    ],
)
def test_nbytes_counts_arrays_or_else_the_header(smsg: object, nbytes: int) -> None:
    assert pack(smsg).nbytes == nbytes
    assert nbytes_of(smsg) == nbytes


_EDGES = [0, 1, 31, 32, 33, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63, 2**64 - 1]
INLINE_SCALARS = (
    [pytest.param(n, id=f"int{n}") for n in _EDGES]
    + [pytest.param(-n, id=f"int-{n}") for n in (1, 32, 33, 128, 129, 32768, 32769, 2**31, 2**31 + 1, 2**63)]
    + [pytest.param(x, id=f"float{x}") for x in (0.0, -1.5, 1e300, math.inf)]
    + [pytest.param(True, id="true"), pytest.param(False, id="false")]
)


@pytest.mark.parametrize("smsg", INLINE_SCALARS)
def test_inline_scalar_travels_as_itself_and_counts_its_encoding(smsg: object) -> None:
    assert inline_nbytes(smsg) == len(pack(smsg).header)  # what a byte transport counts
    back = unpack(INLINE, smsg)  # in process the envelope's buffers is the value itself
    assert back is smsg


@pytest.mark.parametrize("smsg", [2**64, -(2**63) - 1, "abc", [1.0], np.float64(1.0), None, np.zeros(1),
                                  1 + 2j, b"x"])
def test_other_payloads_are_not_inline(smsg: object) -> None:
    assert inline_nbytes(smsg) == -1


def test_no_encoded_payload_starts_with_the_inline_byte() -> None:
    for smsg in (None, True, 0, -1, 1.5, "", b"", [], {}, np.zeros(2), 2**70):
        assert pack(smsg).header[:1] != INLINE


def test_single_array_only_for_exactly_one_top_level_array() -> None:
    assert pack(np.zeros(3)).single_array
    assert pack(np.array(1.0)).single_array
    assert not pack([np.zeros(3)]).single_array
    assert not pack(np.float64(1.0)).single_array
    assert not pack(1.0).single_array


def test_packed_repr_shows_sizes_not_contents() -> None:
    assert repr(pack(np.zeros(4))) == "<Packed nbytes=32 header=12B buffers=1 single_array>"
    assert repr(pack(None)) == "<Packed nbytes=0 header=1B buffers=0>"


# ---- what cannot be sent ----

_HINT = r'send a dict/list/array instead, or run\(\.\.\., serializer="pickle"\)$'


class Foo:
    pass


@pytest.mark.parametrize(
    ("smsg", "type_name"),
    [
        pytest.param(Foo(), "Foo", id="class-instance"),
        pytest.param({1, 2}, "set", id="set"),
        pytest.param(frozenset(), "frozenset", id="frozenset"),
        pytest.param(len, "builtin_function_or_method", id="function"),
        pytest.param([1, {"deep": Foo()}], "Foo", id="nested"),
        pytest.param({Foo(): 1}, "Foo", id="dict-key"),
    ],
)
def test_unsendable_names_the_type_and_the_fix(smsg: object, type_name: str) -> None:
    with pytest.raises(Unsendable, match=rf"^{type_name} is not sendable; {_HINT}") as info:
        pack(smsg)
    assert info.value.type_name == type_name
    assert isinstance(info.value, TypeError)


def test_object_array_is_unsendable_with_its_own_fix() -> None:
    with pytest.raises(
        Unsendable,
        match=r"^numpy\.ndarray\[object\] is not sendable; convert it with \.tolist\(\) or "
        r'\.astype\(a fixed-size dtype\), or run\(\.\.\., serializer="pickle"\)$',
    ) as info:
        pack({"x": [np.array([1, "a"], dtype=object)]})
    assert info.value.type_name == "numpy.ndarray[object]"


def test_structured_array_with_an_object_field_is_unsendable() -> None:
    with pytest.raises(Unsendable, match=r"^numpy\.ndarray\[.*'O'.*\] is not sendable"):
        pack(np.zeros(2, dtype=[("a", "i4"), ("b", "O")]))


def test_masked_array_is_unsendable() -> None:
    with pytest.raises(Unsendable, match=r"^numpy\.ma\.MaskedArray is not sendable; send \.data"):
        pack(np.ma.masked_array([1, 2], mask=[0, 1]))


def test_self_containing_list_is_unsendable() -> None:
    smsg: list[object] = [1]
    smsg.append(smsg)
    with pytest.raises(Unsendable, match=rf"^list nests deeper than {MAX_DEPTH} levels"):
        pack(smsg)


def test_nesting_up_to_max_depth_is_fine() -> None:
    smsg: list[Any] = []
    for _ in range(MAX_DEPTH - 1):
        smsg = [smsg]
    assert unpack(pack(smsg).header) == smsg
    with pytest.raises(Unsendable, match="nests deeper"):
        pack([[smsg]])


def test_unsendable_survives_pickling_between_processes() -> None:
    exc = Unsendable("Foo")
    clone = pickle.loads(pickle.dumps(exc))
    assert (str(clone), clone.type_name) == (str(exc), "Foo")


# ---- the header format cannot drift silently ----


@pytest.mark.parametrize(
    ("smsg", "header"),
    [
        pytest.param(None, b"\xc0", id="none"),
        pytest.param(True, b"\xc3", id="true"),
        pytest.param(1.5, b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", id="float64"),
        pytest.param("é", b"\xa2\xc3\xa9", id="str-utf8"),
        pytest.param(b"ab", b"\xc4\x02ab", id="bytes-bin8"),
        pytest.param([1, -1], b"\x92\x01\xff", id="list"),
        pytest.param({"a": 1}, b"\x81\xa1a\x01", id="str-key-map"),
        pytest.param((1, "a"), b"\xd6\x03\x92\x01\xa1a", id="tuple-ext3"),
        pytest.param({1: 2}, b"\xc7\x03\x06\x92\x01\x02", id="int-key-dict-ext6"),
        pytest.param(
            1 + 2j, b"\xd8\x02" + struct.pack("<dd", 1.0, 2.0), id="complex-ext2",
        ),
        pytest.param(2**64, b"\xc7\x09\x05\x01" + bytes(8), id="bigint-ext5"),
        pytest.param(np.float32(1.5), b"\xc7\x0b\x04\x92\xa3<f4\xc4\x04\x00\x00\xc0\x3f",
                     id="npscalar-ext4"),
        pytest.param(np.arange(3, dtype="<i4"), b"\xc7\x09\x01\x94\x00\xa3<i4\x91\x03\xc2",
                     id="array-ref-ext1"),
        pytest.param(np.zeros((2, 2), order="F"), b"\xc7\x0a\x01\x94\x00\xa3<f8\x92\x02\x02\xc3",
                     id="fortran-array-ref"),
    ],
)
def test_header_bytes_are_exactly(smsg: object, header: bytes) -> None:
    assert pack(smsg).header == header


def test_structured_dtype_travels_as_names_formats_offsets_itemsize() -> None:
    dt = np.dtype({"names": ["b", "a"], "formats": ["<f8", "<i4"], "offsets": [8, 0],
                   "itemsize": 16})
    header = pack(np.zeros(1, dt)).header
    code, data = msgpack.unpackb(header, ext_hook=lambda c, d: (c, d))
    assert code == EXT_NDARRAY
    assert msgpack.unpackb(data) == [
        0,
        {"names": ["b", "a"], "formats": ["<f8", "<i4"], "offsets": [8, 0], "itemsize": 16},
        [1],
        False,
    ]


# ---- garbage in, TransportError out ----


def _ext(code: int, data: object) -> bytes:
    raw = data if isinstance(data, bytes) else msgpack.packb(data)
    return msgpack.packb(msgpack.ExtType(code, raw))


@pytest.mark.parametrize(
    ("header", "buffers", "problem"),
    [
        pytest.param(_ext(99, b""), [], r"^unpack: unknown ext code 99; ", id="unknown-ext"),
        pytest.param(b"\x92\x01", [], "malformed payload header", id="truncated"),
        pytest.param(b"\xc1", [], "malformed payload header", id="reserved-byte"),
        pytest.param(b"\x81\x01\x02", [], "malformed payload header", id="int-map-key"),
        pytest.param(b"\x01\x02", [], "malformed payload header", id="extra-data"),
        pytest.param(b"", [], "malformed payload header", id="empty"),
        pytest.param(_ext(1, [0, "|O", [1], False]), [bytes(8)], "holds Python objects",
                     id="object-dtype"),
        pytest.param(_ext(1, [0, "<f8", [2], False]), [bytes(8)],
                     "array of 16 bytes .* got a buffer of 8", id="short-buffer"),
        pytest.param(_ext(1, [1, "<f8", [1], False]), [bytes(8)], "ref to buffer 1 of 1",
                     id="missing-buffer"),
        pytest.param(_ext(1, [0, "<f8", [-1], False]), [bytes(8)], "non-negative",
                     id="negative-dim"),
        pytest.param(_ext(1, [0, "nonsense", [1], False]), [bytes(8)], "malformed",
                     id="bad-dtype"),
        pytest.param(_ext(1, [0, "<f8", [1]]), [bytes(8)], "not \\[index", id="short-ref"),
        pytest.param(_ext(4, ["<f8", b"\x00"]), [], "has 1 bytes", id="short-scalar"),
        pytest.param(_ext(6, [1, 2, 3]), [], "expected key/value pairs", id="odd-dict"),
        pytest.param(_ext(6, [[1], 2]), [], "unhashable", id="list-key"),
        pytest.param(_ext(3, 5), [], "tuple is int, expected an array", id="tuple-not-array"),
        pytest.param(_ext(2, b"\x00" * 3), [], "malformed", id="short-complex"),
        pytest.param(b"\xc0", [b"spare"], "refers to 0 arrays but 1 buffers came",
                     id="unused-buffer"),
    ],
)
def test_garbage_header_raises_transport_error(header: bytes, buffers: list[bytes],
                                               problem: str) -> None:
    with pytest.raises(TransportError, match=problem) as info:
        unpack(header, buffers)
    assert info.value.op == "unpack"
    assert info.value.rank is None


@settings(max_examples=200, deadline=None, database=None)
@given(header=st.binary(max_size=64), buffers=st.lists(st.binary(max_size=32), max_size=3))
def test_random_bytes_to_unpack_raise_only_transport_error(header: bytes,
                                                           buffers: list[bytes]) -> None:
    try:
        unpack(header, buffers)
    except TransportError:
        pass


@settings(max_examples=200, deadline=None, database=None)
@given(data=st.data())
def test_mutated_headers_raise_only_transport_error(data: st.DataObject) -> None:
    smsg = data.draw(st.sampled_from([m.values[0] for m in MESSAGES]))
    packed = pack(smsg)
    header = bytearray(packed.header)
    for _ in range(data.draw(st.integers(1, 3))):
        if header:
            index = data.draw(st.integers(0, len(header) - 1))
            header[index] = data.draw(st.integers(0, 255))
    try:
        unpack(bytes(header), [b.tobytes(order="A") for b in packed.buffers])
    except TransportError:
        pass


# ---- layering ----


def test_wire_imports_no_io_no_pickle_and_not_simcluster() -> None:
    source = Path(__file__).parents[2] / "transports" / "wire.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    assert not names & {"asyncio", "socket", "pickle", "simcluster", "selectors", "ssl"}
