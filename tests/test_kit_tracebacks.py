"""What pytest prints when a simcluster test fails: the report and the user's frames, not ours."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INTERNALS = [  # source lines of simcluster's own frames that a failure used to print
    "raise self.reports.deadlock()",
    "asyncio.run(_launch(",
    "Keywords as in DESIGN.md",
    "await engine.run()",
    "raise RankError(",
    "return future.result()",
    "simcluster/runner.py",
    "simcluster/engine.py",
    "asyncio/runners.py",
]


def failure_text(pytester: pytest.Pytester, source: str) -> str:
    pytester.makepyfile(test_user=source)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(failed=1)
    return result.stdout.str()


def assert_no_internals(text: str) -> None:
    shown = [line for line in INTERNALS if line in text]
    assert not shown, f"simcluster's own frames shown: {shown}\n{text}"


def test_a_deadlock_in_a_distributed_test_shows_the_report_and_no_simcluster_source(
        pytester: pytest.Pytester) -> None:
    text = failure_text(pytester, """
import simcluster as sc

@sc.testing.distributed(world_size=2)
async def test_stuck(comm):
    await comm.recv(src=1 - comm.rank)
""")
    assert_no_internals(text)
    assert "DeadlockError: deadlock: 2 ranks blocked" in text
    assert "rank 0 waiting in recv(src=1, tag=ANY_TAG) at test_user.py:5" in text
    assert "wait-for cycle: 0 -> 1 -> 0" in text


def test_a_rank_error_in_a_distributed_test_shows_the_ranks_frame_and_no_simcluster_source(
        pytester: pytest.Pytester) -> None:
    text = failure_text(pytester, """
import simcluster as sc

@sc.testing.distributed(world_size=2)
async def test_lookup(comm):
    table = {}
    if comm.rank == 1:
        table["missing"]
""")
    assert_no_internals(text)
    assert '>           table["missing"]' in text  # the rank's own line, marked
    assert "RankError: rank 1: " in text


def test_a_failure_from_sc_run_in_a_plain_test_shows_no_simcluster_source(
        pytester: pytest.Pytester) -> None:
    text = failure_text(pytester, """
import simcluster as sc

async def stuck(comm):
    await comm.recv(src=1 - comm.rank)

def test_run():
    sc.run(stuck, world_size=2)
""")
    assert_no_internals(text)
    assert ">       sc.run(stuck, world_size=2)" in text  # the user's call, marked
    assert "wait-for cycle: 0 -> 1 -> 0" in text


def test_an_explore_failure_shows_the_reproduction_and_no_simcluster_source(
        pytester: pytest.Pytester) -> None:
    text = failure_text(pytester, """
import simcluster as sc

async def race(comm):
    if comm.rank == 0:
        first = await comm.recv()
        assert first == 1, f"got {first} first"
        await comm.recv()
    else:
        await comm.send(comm.rank, 0)

def test_explore():
    sc.testing.explore(race, 3)
""")
    assert_no_internals(text)
    assert "assert first == 1" in text
    assert "reproduce with sc.run(race, world_size=3, seed=" in text
