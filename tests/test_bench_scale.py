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


def test_the_toy_floor_ping_pong_costs_something_but_less_than_simcluster() -> None:
    speed = scale._child_speed(2000, 20_000)
    assert 0 < speed["bare_resume"] < speed["floor"] < speed["per_message"]
    assert speed["floor_ratio"] == pytest.approx(speed["per_message"] / speed["floor"])
