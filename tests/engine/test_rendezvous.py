"""The handshake table (``engine.rendezvous``): legal moves go through, others are refused by name."""

from __future__ import annotations

import pytest

from simcluster.engine.rendezvous import Handshakes

KEY = (0, 5)  # rank 0's message 5


def _requested() -> Handshakes:
    table = Handshakes()
    table.request(KEY, "send", 1, 0, 7, 400_000, True, ("buffer",), b"header", 0.5)
    return table


def test_a_rendezvous_goes_from_request_to_done_and_leaves_the_table() -> None:
    table = _requested()
    assert table.lines({0: "world"}) == [
        "rank 0's send of 400,000 bytes to rank 1 (tag 7): request to send sent, waiting for clear to send"]
    table.clear(KEY, "recv", 1, 0, 7, 400_000)
    started = table.start(KEY)
    assert started is not None and (started.send, started.buffers, started.posted) == ("send", ("buffer",), 0.5)
    assert table.lines({0: "world"})[0].endswith(": data on their way")
    landed = table.land(KEY)
    assert landed is not None and (landed.send, landed.recv) == ("send", "recv")
    assert len(table) == 0 and table.land(KEY) is None  # gone: a later move finds nothing


@pytest.mark.parametrize("move", ["start twice", "land before the clear to send", "request again",
                                  "acknowledge a rendezvous not sending"])
def test_a_move_the_state_does_not_allow_is_refused_naming_message_state_and_move(move: str) -> None:
    table = _requested()
    if move == "start twice":
        table.start(KEY)
        expected = "is SENDING: it cannot start sending"
        attempt = lambda: table.start(KEY)  # noqa: E731
    elif move == "land before the clear to send":
        expected = "is REQUESTED: it cannot land"
        attempt = lambda: table.land(KEY)  # noqa: E731
    elif move == "request again":
        expected = "is REQUESTED: it cannot be requested again"
        attempt = lambda: table.request(KEY, "send", 1, 0, 7, 400_000, True, (), b"", 0.0)  # noqa: E731
    else:
        expected = "is REQUESTED: it cannot be acknowledged"
        attempt = lambda: table.acknowledge(KEY)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"^internal error: handshake of message 5 \(rank 0 to rank 1, "
                                           r"400000 bytes\) " + expected):
        attempt()
    assert len(table) == 1  # a refused move changes nothing


def test_a_failed_send_whose_data_are_on_their_way_still_lands() -> None:
    table = _requested()
    table.clear(KEY, "recv", 1, 0, 7, 400_000)
    table.start(KEY)
    table.drop_sends_of(0)  # rank 0 crashed after its data left
    assert table.drop_receives_from(0) == ["recv"]  # the crash is detected before they land
    landed = table.land(KEY)
    assert landed is not None and (landed.send, landed.recv) == ("send", None)


def test_a_send_that_failed_before_its_clear_to_send_never_starts() -> None:
    table = _requested()
    table.clear(KEY, "recv", 1, 0, 7, 400_000)
    table.drop_send(KEY)
    assert table.start(KEY) is None and table.waiting_sends() == []
    assert table.lines({})[0].endswith("the send failed; its receive waits for the failure to be detected")
    assert table.drop_receives_from(0) == ["recv"] and len(table) == 0
