"""Frames: encode_frame() and FrameDecoder, fed whole, byte by byte and split anywhere."""

from __future__ import annotations

import struct

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.transports.base import ACK, CTS, DATA, EAGER, RTS, Envelope, TransportError
from simcluster.transports.wire import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame, pack, unpack

# ---- envelopes to carry ----


def _envelope(kind: int, payload: object = None, *, control: bool = False, **fields: object
              ) -> Envelope:
    packed = pack(payload)
    header, buffers = (b"", ()) if control else (packed.header, packed.buffers)
    base: dict[str, object] = dict(
        kind=kind, ctx=3, src=1, dst=2, tag=7, msg_id=42, nbytes=packed.nbytes, time=0.1,
        header=header, buffers=buffers,
    )
    base.update(fields)
    return Envelope(**base)  # type: ignore[arg-type]


PAYLOAD = {"w": np.arange(6.0).reshape(2, 3), "f": np.asfortranarray(np.ones((2, 2))),
           "e": np.zeros((0, 5)), "name": "layer 1", "step": (3, 2**70)}

ENVELOPES = [
    pytest.param(_envelope(CTS, control=True, time=1e-300), id="cts-control"),
    pytest.param(_envelope(ACK, control=True, msg_id=2**63, tag=2**31 - 1), id="ack-big-ids"),
    pytest.param(_envelope(EAGER, [1, "two", 3.0]), id="eager-object"),
    pytest.param(_envelope(EAGER, None, sync=True, time=-0.0), id="eager-none-sync"),
    pytest.param(_envelope(RTS, control=True, nbytes=1 << 40, time=123456.789), id="rts"),
    pytest.param(_envelope(DATA, np.arange(1000, dtype=">i4")), id="data-array"),
    pytest.param(_envelope(DATA, PAYLOAD, ctx=-1, src=0, dst=0), id="data-mixed-arrays"),
    pytest.param(_envelope(EAGER, np.zeros(0)), id="empty-array-buffer"),
]


def frame_bytes(envelope: Envelope) -> bytes:
    return b"".join(encode_frame(envelope))


def assert_same_envelope(renv: Envelope, senv: Envelope) -> None:
    assert type(renv) is Envelope
    for name in ("kind", "ctx", "src", "dst", "tag", "msg_id", "nbytes", "sync"):
        rval, sval = getattr(renv, name), getattr(senv, name)
        assert (type(rval), rval) == (type(sval), sval), name
    assert type(renv.time) is float
    assert struct.pack("<d", renv.time) == struct.pack("<d", senv.time)  # bit-exact
    assert renv.header == senv.header
    assert type(renv.header) is bytes
    assert len(renv.buffers) == len(senv.buffers)
    for rbuf, sbuf in zip(renv.buffers, senv.buffers):
        assert isinstance(rbuf, (bytes, memoryview))
        assert bytes(rbuf) == np.asarray(sbuf).tobytes(order="A")


# ---- whole, one byte at a time, split anywhere ----


@pytest.mark.parametrize("senv", ENVELOPES)
def test_frame_fed_whole_gives_the_envelope_back(senv: Envelope) -> None:
    decoder = FrameDecoder()
    (renv,) = decoder.feed(frame_bytes(senv))
    assert_same_envelope(renv, senv)
    decoder.feed_eof()


@pytest.mark.parametrize("senv", ENVELOPES)
def test_frame_fed_one_byte_at_a_time_gives_the_envelope_back(senv: Envelope) -> None:
    decoder = FrameDecoder()
    blob = frame_bytes(senv)
    got = [env for i in range(len(blob)) for env in decoder.feed(blob[i:i + 1])]
    assert len(got) == 1
    assert_same_envelope(got[0], senv)
    decoder.feed_eof()


@pytest.mark.parametrize("senv", ENVELOPES)
def test_frame_fed_as_its_pieces_gives_the_envelope_back(senv: Envelope) -> None:
    decoder = FrameDecoder()
    got = [env for piece in encode_frame(senv) for env in decoder.feed(piece)]
    assert len(got) == 1
    assert_same_envelope(got[0], senv)


def test_two_frames_split_at_every_point_come_out_in_order() -> None:
    first, second = ENVELOPES[2].values[0], ENVELOPES[6].values[0]
    blob = frame_bytes(first) + frame_bytes(second)
    for cut in range(len(blob) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(blob[:cut]) + decoder.feed(blob[cut:])
        assert len(got) == 2, cut
        assert_same_envelope(got[0], first)
        assert_same_envelope(got[1], second)
        decoder.feed_eof()


def test_many_frames_in_one_chunk_come_out_in_order() -> None:
    senvs = [env.values[0] for env in ENVELOPES] * 3
    got = FrameDecoder().feed(memoryview(b"".join(frame_bytes(env) for env in senvs)))
    assert len(got) == len(senvs)
    for renv, senv in zip(got, senvs):
        assert_same_envelope(renv, senv)


def test_trailing_bytes_wait_for_the_rest_of_their_frame() -> None:
    senv = ENVELOPES[2].values[0]
    blob = frame_bytes(senv)
    decoder = FrameDecoder()
    (renv,) = decoder.feed(blob + blob[:5])
    assert_same_envelope(renv, senv)
    (renv,) = decoder.feed(blob[5:])
    assert_same_envelope(renv, senv)


def test_payload_survives_the_stream_with_arrays_writeable_in_place() -> None:
    decoder = FrameDecoder()
    blob = frame_bytes(ENVELOPES[6].values[0])
    byte_by_byte = [env for i in range(len(blob)) for env in decoder.feed(blob[i:i + 1])]
    for envs in (decoder.feed(blob), byte_by_byte):
        (renv,) = envs
        rmsg = unpack(renv.header, renv.buffers)
        assert rmsg["name"] == "layer 1"
        assert rmsg["step"] == (3, 2**70)
        assert rmsg["w"].tolist() == PAYLOAD["w"].tolist()
        assert rmsg["f"].flags.f_contiguous
        assert rmsg["e"].shape == (0, 5)
        for key in ("w", "f"):
            assert rmsg[key].flags.writeable
            assert rmsg[key].flags.aligned
            rmsg[key][0, 0] = -1.0  # a view over the decoder's buffer, not a copy


@pytest.mark.parametrize("chunk", [4096, 100_003, 1 << 30], ids=["4k", "odd", "whole"])
def test_large_array_frame_arrives_intact_in_chunks(chunk: int) -> None:
    smsg = np.random.default_rng(0).standard_normal((300, 70))  # 168 kB, past numpy's threshold
    senv = _envelope(DATA, smsg)
    blob = memoryview(frame_bytes(senv))
    decoder = FrameDecoder()
    got = [env for i in range(0, len(blob), chunk) for env in decoder.feed(blob[i:i + chunk])]
    (renv,) = got
    assert_same_envelope(renv, senv)
    rmsg = unpack(renv.header, renv.buffers)
    assert np.array_equal(rmsg, smsg)
    assert rmsg.flags.writeable


def test_decoder_does_not_reuse_buffers_it_handed_out() -> None:
    decoder = FrameDecoder()
    blob = frame_bytes(_envelope(DATA, np.arange(4, dtype=np.uint8)))
    (first,) = decoder.feed(blob)
    kept = bytes(first.buffers[0])
    decoder.feed(frame_bytes(_envelope(DATA, np.full(4, 9, dtype=np.uint8))))
    assert bytes(first.buffers[0]) == kept == b"\x00\x01\x02\x03"


# ---- what the encoder writes ----


def test_array_buffers_are_written_as_views_never_copied() -> None:
    arr = np.arange(8.0)
    pieces = encode_frame(_envelope(DATA, None, buffers=(arr,)))
    assert len(pieces) == 2
    assert isinstance(pieces[1], memoryview)
    assert np.shares_memory(np.frombuffer(pieces[1], dtype=np.float64), arr)


def test_frame_bytes_are_exactly() -> None:
    senv = Envelope(CTS, 7, 1, 2, 5, 42, 0, 0.5)
    assert frame_bytes(senv) == (
        b"\x00\x00\x00\x1b"  # length of the rest: 4 + 23
        b"\x00\x00\x00\x17"  # length of the frame header: 23
        b"\x9c\x02\x07\x01\x02\x05\x2a\x00\xcb\x3f\xe0\x00\x00\x00\x00\x00\x00\xc2\xc4\x00\xc4\x00\x90"
    )


def test_frame_with_a_buffer_is_exactly() -> None:
    packed = pack([np.arange(2, dtype="<i2")])
    senv = Envelope(EAGER, 0, 0, 1, 3, 1, packed.nbytes, 1.0, packed.header, packed.buffers, True,
                    b"m")
    assert frame_bytes(senv) == (
        b"\x00\x00\x00\x2e\x00\x00\x00\x26"
        b"\x9c\x00\x00\x00\x01\x03\x01\x04\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\xc3"
        b"\xc4\x0d\x91\xc7\x09\x01\x94\x00\xa3<i2\x91\x02\xc2"  # payload header
        b"\xc4\x01m"  # meta
        b"\x91\x04"  # buffer lengths
        b"\x00\x00\x01\x00"  # the raw buffer
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        pytest.param({"sync": np.bool_(True)}, "numpy.bool", id="numpy-bool-sync"),
        pytest.param({"tag": np.int64(3)}, "numpy.int64", id="numpy-int-tag"),
        pytest.param({"msg_id": 2**64}, "out of range", id="id-beyond-64-bits"),
        pytest.param({"buffers": (object(),)}, "object", id="buffer-not-bytes-like"),
    ],
)
def test_encoding_a_bad_field_raises_naming_the_envelope(
    fields: dict[str, object], problem: str,
) -> None:
    senv = _envelope(EAGER, None, **fields)
    expected = rf"^send frame: cannot encode envelope 1->2 \(.*{problem}"
    with pytest.raises(TransportError, match=expected):
        encode_frame(senv)


# ---- errors name the peer ----


def _prefix(rest: int, header_len: int) -> bytes:
    return struct.pack(">II", rest, header_len)


def _frame(fields: list[object], body: bytes = b"") -> bytes:
    header = msgpack.packb(fields)
    return _prefix(4 + len(header) + len(body), len(header)) + header + body


_GOOD = [EAGER, 0, 0, 1, 3, 1, 0, 0.0, False, b"\xc0", b"", []]


def _with(index: int, value: object) -> list[object]:
    fields = list(_GOOD)
    fields[index] = value
    return fields


def test_oversize_frame_is_refused_from_its_prefix_naming_the_peer() -> None:
    decoder = FrameDecoder(max_frame=1 << 20, peer="rank 3")
    with pytest.raises(
        TransportError,
        match=r"^recv frame: from peer 'rank 3': frame of 2000000 bytes exceeds the cap of "
        r"1048576; raise max_frame if messages this large are expected$",
    ) as info:
        decoder.feed(_prefix(2_000_000, 10))
    assert info.value.peer == "rank 3"
    assert info.value.rank is None


def test_oversize_frame_is_refused_when_its_prefix_arrives_byte_by_byte() -> None:
    decoder = FrameDecoder(max_frame=100, peer=("10.0.0.2", 29500))
    blob = _prefix(101, 10)
    for i in range(7):
        assert decoder.feed(blob[i:i + 1]) == []
    with pytest.raises(TransportError, match=r"from peer \('10\.0\.0\.2', 29500\): frame of 101"):
        decoder.feed(blob[7:])


def test_default_cap_is_one_gibibyte() -> None:
    assert DEFAULT_MAX_FRAME == 1 << 30
    with pytest.raises(TransportError, match="exceeds the cap of 1073741824"):
        FrameDecoder().feed(_prefix((1 << 30) + 1, 10))


@pytest.mark.parametrize(
    ("blob", "problem"),
    [
        pytest.param(_prefix(10, 0) + bytes(6), "frame header of 0 bytes does not fit",
                     id="empty-header"),
        pytest.param(_prefix(10, 7) + bytes(6),
                     "frame header of 7 bytes does not fit a frame of 10",
                     id="header-past-frame"),
        pytest.param(_prefix(2, 1), "does not fit", id="rest-too-short"),
        pytest.param(_frame(["not", "a", "frame"]), "not an array of 12 fields", id="short-array"),
        pytest.param(_frame({"kind": 0}),  # type: ignore[arg-type]
                     "not an array of 12 fields", id="map"),
        pytest.param(_prefix(6, 2) + b"\x92\xc1", r"malformed frame header \(", id="garbage"),
        pytest.param(_frame(_with(0, 9)), "frame kind 9 is not one of 0..4", id="bad-kind"),
        pytest.param(_frame(_with(2, "1")), "frame field src is str, expected int", id="str-src"),
        pytest.param(_frame(_with(5, True)), "frame field msg_id is bool, expected int",
                     id="bool-id"),
        pytest.param(_frame(_with(7, 0)), "frame field time is int, expected float",
                     id="int-time"),
        pytest.param(_frame(_with(8, 1)), "frame field sync is int, expected bool", id="int-sync"),
        pytest.param(_frame(_with(9, "x")), "frame field header is str, expected bytes",
                     id="str-header"),
        pytest.param(_frame(_with(10, "m")), "frame field meta is str, expected bytes",
                     id="str-meta"),
        pytest.param(_frame(_with(11, [-1])), "not a list of non-negative ints", id="neg-length"),
        pytest.param(_frame(_with(11, [4]), b"abc"),
                     "buffer lengths add up to 4 bytes but 3 follow the frame header",
                     id="lengths-too-long"),
        pytest.param(_frame(_with(11, [1]), b"abc"), "add up to 1 bytes but 3 follow",
                     id="lengths-too-short"),
        pytest.param(_prefix(7, 3) + msgpack.packb(msgpack.ExtType(1, b"")),
                     "has no place in a frame header", id="ext-in-header"),
    ],
)
def test_malformed_frame_raises_naming_the_peer(blob: bytes, problem: str) -> None:
    for chunks in ([blob], [blob[i:i + 1] for i in range(len(blob))]):
        decoder = FrameDecoder(peer="rank 5")
        with pytest.raises(TransportError, match=problem) as info:
            for chunk in chunks:
                decoder.feed(chunk)
        assert str(info.value).startswith("recv frame: from peer 'rank 5': ")
        assert info.value.peer == "rank 5"


def test_decoder_refuses_more_input_after_an_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(TransportError) as info:
        decoder.feed(_frame(_with(0, 9)))
    with pytest.raises(TransportError) as again:
        decoder.feed(frame_bytes(ENVELOPES[0].values[0]))
    assert again.value is info.value
    with pytest.raises(TransportError):
        decoder.feed_eof()
    assert "failed" in repr(decoder)


# ---- end of stream ----


def test_eof_at_a_frame_boundary_is_clean() -> None:
    decoder = FrameDecoder()
    decoder.feed_eof()
    decoder.feed(frame_bytes(ENVELOPES[0].values[0]))
    decoder.feed_eof()


def test_eof_mid_frame_raises_naming_the_peer() -> None:
    decoder = FrameDecoder(peer="rank 3")
    blob = frame_bytes(Envelope(CTS, 7, 1, 2, 5, 42, 0, 0.5))
    decoder.feed(blob[:-3])
    assert repr(decoder) == (
        "<FrameDecoder peer='rank 3' max_frame=1073741824 28 bytes into a frame>"
    )
    with pytest.raises(
        TransportError,
        match=r"^recv frame: from peer 'rank 3': the stream ended 28 bytes into a frame of 31 "
        r"bytes; the peer closed its connection mid-send; look for its own error$",
    ):
        decoder.feed_eof()


@pytest.mark.parametrize("cut", [1, 7, 8, 12, 40, -1])
def test_eof_anywhere_inside_a_frame_raises(cut: int) -> None:
    blob = frame_bytes(ENVELOPES[5].values[0])
    decoder = FrameDecoder(peer=0)
    decoder.feed(blob[:cut])
    with pytest.raises(TransportError,
                       match=r"^recv frame: from peer 0: the stream ended \d+ bytes"):
        decoder.feed_eof()


def test_eof_inside_the_prefix_says_so() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00")
    with pytest.raises(TransportError,
                       match=r"^recv frame: the stream ended 2 bytes into a frame prefix"):
        decoder.feed_eof()


# ---- garbage in, only TransportError out ----


@settings(max_examples=200, deadline=None, database=None)
@given(chunks=st.lists(st.binary(max_size=40), max_size=6))
def test_random_bytes_raise_only_transport_error(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame=1 << 16, peer="fuzz")
    try:
        for chunk in chunks:
            for env in decoder.feed(chunk):
                assert type(env) is Envelope
        decoder.feed_eof()
    except TransportError as exc:
        assert exc.peer == "fuzz"


@settings(max_examples=200, deadline=None, database=None)
@given(data=st.data())
def test_mutated_frames_raise_only_transport_error(data: st.DataObject) -> None:
    senvs = data.draw(st.lists(st.sampled_from([env.values[0] for env in ENVELOPES]),
                               min_size=1, max_size=3))
    blob = bytearray(b"".join(frame_bytes(env) for env in senvs))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        index = data.draw(st.integers(0, len(blob) - 1)) if blob else 0
        if action == "set" and blob:
            blob[index] = data.draw(st.integers(0, 255))
        elif action == "insert":
            blob[index:index] = data.draw(st.binary(min_size=1, max_size=4))
        elif action == "delete":
            del blob[index:index + data.draw(st.integers(1, 4))]
        else:
            del blob[index:]
    cut = data.draw(st.integers(0, len(blob)))
    decoder = FrameDecoder(max_frame=1 << 16)
    try:
        for env in decoder.feed(blob[:cut]) + decoder.feed(blob[cut:]):
            assert type(env) is Envelope
            try:
                unpack(env.header, env.buffers)
            except TransportError:
                pass
        decoder.feed_eof()
    except TransportError:
        pass
