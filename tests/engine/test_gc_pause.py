"""The cyclic garbage collector is paused while a world runs, and left as it was found."""

from __future__ import annotations

import gc

import pytest

import simcluster as sc
from simcluster.engine import gc as _gc


async def _sum(comm: sc.Comm) -> float:
    return float(await comm.all_reduce(float(comm.rank)))


@pytest.fixture
def collector():
    """Restore the collector's state and thresholds whatever the test did."""
    enabled, thresholds = gc.isenabled(), gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    (gc.enable if enabled else gc.disable)()


def test_paused_block_runs_without_collections_and_leaves_nothing_young(collector) -> None:
    gc.enable()
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        with _gc.paused():
            assert not gc.isenabled()
            kept = [[i] for i in range(20_000)]  # far past gen0's threshold
        assert seen == []
        assert gc.isenabled()
        # what the pause made joined the oldest generation: the next allocation walks nothing
        assert gc.get_count()[0] < 50
        assert len(kept) == 20_000
    finally:
        gc.callbacks.remove(note)


def test_paused_keeps_what_the_user_froze(collector) -> None:
    gc.enable()
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    with _gc.paused():
        pass
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_paused_inside_a_pause_changes_nothing(collector) -> None:
    gc.disable()
    with _gc.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


@pytest.mark.parametrize("enabled", [True, False])
def test_run_leaves_the_collector_as_it_found_it(collector, enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    result = sc.run(_sum, 64, checks="off")
    assert list(result) == [sum(range(64))] * 64
    assert gc.isenabled() is enabled


def test_run_that_fails_still_restores_the_collector(collector) -> None:
    gc.enable()

    async def boom(comm: sc.Comm) -> None:
        if comm.rank == 3:
            raise ValueError("rank 3 gave up")
        await comm.barrier()

    with pytest.raises(sc.RankError) as info:
        sc.run(boom, 8)
    assert info.value.rank == 3
    assert gc.isenabled()
