"""``simcluster bench collectives``: the OSU-style table, the 16 MiB floor and the compiled-build targets."""

from __future__ import annotations

import pytest

from simcluster.bench import BUILDS, collectives


def test_the_tables_have_every_collective_and_each_builds_targets(capsys: pytest.CaptureFixture[str]) -> None:
    figures = collectives.main(sizes=(8,), worlds=(4,), iters=2, repeats=1, floor_mib=1, small_calls=20,
                               ring_ranks=8)
    out = capsys.readouterr().out
    assert [row[0] for row in figures["rows"]] == ["all_reduce", "broadcast", "all_gather"]
    assert set(figures["algorithms"]) == {"gloo_ring", "linear", "rabenseifner", "recursive_doubling", "reduce_broadcast",
                                          "ring"}
    assert list(figures["targets"]) == list(BUILDS)
    for build, got in figures["targets"].items():
        for checks in ("off", "strict"):
            assert got[checks]["float"] > 0 and got[checks]["array"] > 0
        assert got["ring"] > 0
        assert f"{build}  4-rank all_reduce of a one-element array, per call" in out
    assert "ring all_reduce of 1 MiB on 8 ranks" in out
    assert "ring all_reduce of 1 MiB of float64 on 8 ranks against SimGrid's Python bindings" in out
    simgrid = figures["simgrid"]
    if simgrid is None:
        assert "skipped: no Python with SimGrid's bindings" in out
    else:  # the same ring on the same platform: the same virtual end, and the sums checked
        for got in figures["targets"].values():
            assert got["ring_virtual"] == pytest.approx(simgrid["virtual"], rel=1e-9)
        assert simgrid["value"] == 8 and simgrid["wall"] > 0
        assert "SimGrid/simcluster" in out


def test_the_simgrid_row_says_why_it_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    collectives._print_simgrid(None, {}, 8)  # what main prints where simgrid_python() finds none
    assert "skipped: no Python with SimGrid's bindings" in capsys.readouterr().out
