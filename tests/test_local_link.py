"""The in-process control link between node 0's coordinator and its host behaves as a socket link."""

from __future__ import annotations

import asyncio

import pytest

import simcluster as sc
from simcluster.hosting.local_link import LocalLink
from simcluster.transports.base import Envelope


def _env(tag: int) -> Envelope:
    return Envelope(0, 0, 0, 0, tag, 0, 0, 0.0)


def test_envelopes_arrive_in_order_and_a_close_ends_both_pumps() -> None:
    async def main() -> tuple[list[int], str]:
        host, coordinator = LocalLink.pair("coordinator", "process 0")
        host.send(_env(1))  # the introduction
        assert (await coordinator.first()).tag == 1
        got: list[int] = []
        pump = asyncio.ensure_future(coordinator.pump(lambda env: got.append(env.tag)))
        for tag in (2, 3, 4):
            host.send(_env(tag))
        await host.drain()
        await asyncio.sleep(0)
        host_pump = asyncio.ensure_future(host.pump(lambda env: None))
        coordinator.close()  # this end's pump ends quietly, the other's sees the peer gone
        await pump
        with pytest.raises(sc.TransportError, match="peer 'coordinator' closed its connection"):
            await host_pump
        coordinator.send(_env(5))  # nothing is delivered after a close
        return got, repr(coordinator)

    got, shown = asyncio.run(main())
    assert got == [2, 3, 4]
    assert shown == "<LocalLink peer='process 0' closing>"


def test_first_says_when_the_other_end_closed_before_introducing_itself() -> None:
    async def main() -> None:
        host, coordinator = LocalLink.pair("coordinator", "process 0")
        host.close()
        await coordinator.first()

    with pytest.raises(sc.TransportError, match="closed before introducing itself"):
        asyncio.run(main())
