"""The tcp transport's streams: the secret proven at connect, the frame cap, lost peers."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

import pytest

import simcluster as sc
from simcluster.transports import wire
from simcluster.transports.base import EAGER, Envelope, TransportError
from simcluster.transports.tcp import TcpTransport, open_link

SECRET = b"s" * 32


async def ring(comm: sc.Comm) -> object:
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    return await comm.sendrecv(comm.rank, right, src=left)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _intruder(port: int, answer: bytes) -> bytes:
    """Connect, read the challenge, answer it with ``answer``; return what the server says."""
    for _ in range(200):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.01)
    challenge = await reader.readexactly(8 + 32)
    writer.write(challenge[:8] + answer + b"\0" * 32)
    rest = await reader.read()  # the server closes the connection: EOF
    writer.close()
    return rest


def test_connection_without_the_secret_is_refused_and_logged_and_the_run_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("SIMCLUSTER_SECRET", "let me in")
    port = _free_port()
    common = {"world_size": 4, "transport": "tcp", "nnodes": 2, "master_addr": "127.0.0.1",
              "master_port": port}

    async def both_nodes_and_an_intruder() -> tuple[object, object, bytes]:
        node0 = asyncio.ensure_future(sc.launch(ring, node_rank=0, **common))
        refused = await _intruder(port, b"\x01" * 32)  # the wrong HMAC
        node1 = asyncio.ensure_future(sc.launch(ring, node_rank=1, **common))
        return await node0, await node1, refused

    with caplog.at_level(logging.WARNING, logger="simcluster.transports"):
        first, second, refused = asyncio.run(both_nodes_and_an_intruder())
    assert refused == b""  # no proof back, nothing else: the door stays shut
    assert list(first) == list(second) == [3, 0, 1, 2]
    assert any("refused a connection from ('127.0.0.1'" in r.getMessage()
               and "did not prove the run's secret" in r.getMessage() for r in caplog.records)


async def _peer_sends(raw: bytes, hang_up: bool = False) -> list[BaseException]:
    """Be process 0 towards a transport hosting rank 1, then write ``raw`` on the link."""
    errors: list[BaseException] = []
    tp = TcpTransport(max_frame=4096, connect_timeout=2.0)
    tp.bind(1, 1, 2, SECRET, "test")
    tp.open(2, lambda env: None)
    host, port = await tp.listen()
    link = await open_link(host, port, SECRET, peer="process 1", max_frame=4096, timeout=2.0)
    link.send(Envelope(EAGER, 0, 0, 1, 0, 0, 0, 0.0))  # who I am: process 0
    await tp.connect([(host, port), (host, port)])  # process 1 waits for process 0: us
    link.writer.write(raw)
    await link.drain()
    if hang_up:
        link.close()
    try:
        await asyncio.wait_for(tp.exchange(Envelope(EAGER, 0, 1, -1, 0, 0, 0, 0.0)), 2.0)
    except TransportError as exc:
        errors.append(exc)
    link.close()
    tp.close()
    return errors


def test_oversized_frame_is_a_transport_error_naming_the_peer() -> None:
    errors = asyncio.run(_peer_sends(struct.pack(">II", 1 << 20, 16)))
    assert len(errors) == 1 and isinstance(errors[0], TransportError)
    assert str(errors[0]) == ("recv frame: from peer 'process 0': frame of 1048576 bytes exceeds "
                              "the cap of 4096; raise max_frame if messages this large are expected")
    assert errors[0].peer == "process 0"


def test_malformed_frame_is_a_transport_error_naming_the_peer() -> None:
    header = b"\x93\x01\x02\x03"  # a msgpack array of 3, not the 12 frame fields
    errors = asyncio.run(_peer_sends(struct.pack(">II", 4 + len(header), len(header)) + header))
    assert len(errors) == 1 and isinstance(errors[0], TransportError)
    assert str(errors[0]).startswith("recv frame: from peer 'process 0': frame header is not an "
                                     "array of 12 fields")


def test_truncated_frame_then_hang_up_is_a_transport_error_naming_the_peer() -> None:
    frame = b"".join(bytes(piece) for piece in wire.encode_frame(
        Envelope(EAGER, 0, 0, 1, 0, 1, 3, 0.0, wire.pack("abc").header)))
    errors = asyncio.run(_peer_sends(frame[:-2], hang_up=True))
    assert len(errors) == 1 and isinstance(errors[0], TransportError)
    assert "from peer 'process 0': the stream ended" in str(errors[0])


def test_wrong_secret_at_the_other_end_is_refused_by_the_connector() -> None:
    async def go() -> None:
        tp = TcpTransport(connect_timeout=2.0)
        tp.bind(1, 1, 2, b"another secret", "test")
        host, port = await tp.listen()
        try:
            with pytest.raises(TransportError, match="did not prove the run's secret|refused"):
                await open_link(host, port, SECRET, peer="process 1", max_frame=4096, timeout=2.0)
        finally:
            tp.close()

    asyncio.run(go())


def test_transport_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"^TcpTransport\(max_frame=10\): max_frame must be an "
                       r"int >= 1024 \(bytes\)$"):
        TcpTransport(max_frame=10)
    with pytest.raises(ValueError, match="connect_timeout must be a positive number"):
        TcpTransport(connect_timeout=0)
