"""The scale benchmark measures what it says: message counts, virtual times, baselines."""

from __future__ import annotations

import pytest

from simcluster.bench import scale


@pytest.mark.parametrize("collective", ["barrier", "all_reduce"])
def test_both_fidelities_end_at_the_formula_time_and_only_messages_count_messages(collective: str) -> None:
    message = scale._child_collective("message", collective, 64, scale.LATENCY)
    analytic = scale._child_collective("analytic", collective, 64, scale.LATENCY)
    assert message["messages"] == 64 * 6  # dissemination / recursive doubling: p * log2(p)
    assert analytic["messages"] == 0
    nbytes = 0 if collective == "barrier" else 9  # None counts 0 bytes; 1.0 encodes to 9
    assert message["elapsed"] == analytic["elapsed"] == pytest.approx(6 * (1e-6 + nbytes * 1e-10))


def test_the_speed_figures_are_measured_and_the_ratios_are_theirs() -> None:
    speed = scale._child_speed(2000, 20_000)
    assert speed["bare_resume"] > 0 and speed["floor"] > 0 and speed["per_message"] > 0
    assert speed["ratio"] == pytest.approx(speed["per_message"] / speed["bare_resume"])
    assert speed["floor_ratio"] == pytest.approx(speed["per_message"] / speed["floor"])


@pytest.mark.slow
def test_the_toy_floor_ping_pong_costs_more_than_a_resume_but_less_than_simcluster() -> None:
    """A comparison of speeds: on a loaded machine it can fail, so it is left out of the default run."""
    speed = scale._child_speed(2000, 20_000)
    assert 0 < speed["bare_resume"] < speed["floor"] < speed["per_message"]


def test_the_table_has_a_row_per_build_and_the_per_message_cost_of_each(capsys: pytest.CaptureFixture[str]
                                                                          ) -> None:
    from simcluster.bench import BUILDS

    figures = scale.main(sizes=(64,), budget=60.0, idle_ranks=64, round_trips=200, resumes=2000,
                         asyncio_cases=(("barrier", 64),), repeats=1, sharing_ranks=64)
    rows = figures["rows"]
    assert {(r[0], r[1], r[2]) for r in rows} == {
        (b, f, c) for b in BUILDS for f in scale.FIDELITIES for c in scale.COLLECTIVES}
    assert all(r[3] == "2^6" and float(r[4]) >= 0 and r[6] == ("0" if r[1] == "analytic" else "384") for r in rows)
    # every build ends every collective at the same virtual time
    for fidelity in scale.FIDELITIES:
        for collective in scale.COLLECTIVES:
            assert len({r[-1] for r in rows if (r[1], r[2]) == (fidelity, collective)}) == 1
    assert sorted(figures["speed"]) == sorted(BUILDS)
    out = capsys.readouterr().out
    assert out.count("per message (post, match, complete, resume)") == len(BUILDS)
    assert out.count("message events per second") == len(BUILDS)
    assert "against bare asyncio passing the same messages" in out and "CPU ratio" in out
    [case] = figures["asyncio"]
    assert (case["collective"], case["ranks"], case["failed"]) == ("barrier", 64, {})
    assert sorted(case["median"]) == sorted(["asyncio", *BUILDS])
    # links shared against unshared: both runs in each build, the same virtual time, the ratio and its target
    assert "links shared against unshared: message-level all_reduce(1.0) on 2^6 ranks of dgx_h100:8" in out
    assert sorted(figures["sharing"]) == sorted(BUILDS)
    for got in figures["sharing"].values():
        assert got["failed"] == {} and got["wall_shared"] > 0 and got["wall_unshared"] > 0
        # (tiny flows: the same end, within the 1 ns in which flows end together)
        assert got["elapsed"]["shared"] == pytest.approx(got["elapsed"]["unshared"], abs=1e-9)
    assert out.count(f"at most {scale.SHARING_TARGET:g}x") == len(BUILDS)


@pytest.mark.parametrize("ranks", [1, 2, 8, 64])
def test_the_asyncio_baseline_passes_the_messages_of_the_collective(ranks: int) -> None:
    barrier = scale._child_asyncio("barrier", ranks)
    all_reduce = scale._child_asyncio("all_reduce", ranks)
    log2 = (ranks - 1).bit_length()
    assert barrier["messages"] == all_reduce["messages"] == ranks * log2
    assert scale._child_collective("message", "barrier", ranks, scale.LATENCY)["messages"] == ranks * log2
    assert barrier["value"] is None and barrier["cpu"] >= 0 and barrier["wall"] >= 0
    assert all_reduce["value"] == float(ranks)  # every rank's 1.0, summed


def test_the_asyncio_barrier_takes_any_size_and_its_all_reduce_a_power_of_two() -> None:
    assert scale._child_asyncio("barrier", 7)["messages"] == 7 * 3
    with pytest.raises(ValueError, match="power of two"):
        scale._child_asyncio("all_reduce", 7)
