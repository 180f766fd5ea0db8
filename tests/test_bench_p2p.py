"""``simcluster bench p2p`` prints both builds side by side, each against its own baselines."""

from __future__ import annotations

import pytest

from simcluster.bench import BUILDS, p2p


def test_the_table_has_the_figures_of_each_build(capsys: pytest.CaptureFixture[str]) -> None:
    figures = p2p.main(round_trips=200, repeats=1)
    assert figures["rtt_sim"] > 0 and figures["rtt_ratio"] == pytest.approx(
        figures["rtt_sim"] / figures["rtt_bare"])
    out = capsys.readouterr().out
    for build in BUILDS:
        assert f"{build}      round trip, small message" in out
    if len(BUILDS) == 2:
        assert "compiled against interpreted" in out
