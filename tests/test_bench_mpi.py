"""``simcluster bench mpi``: mpi4py's ``Allreduce`` of a one-element array under simcluster mpirun and MPICH."""

from __future__ import annotations

import pytest

from simcluster.bench import mpi


def test_the_row_has_simcluster_mpich_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    figures = mpi.main(**mpi.QUICK)
    out = capsys.readouterr().out
    assert "4-rank Allreduce of a one-element array, per call" in out
    assert "MPICH mpiexec" in out and "ratio" in out and "at most 1.0x" in out
    assert len(figures["simcluster"]) == len(figures["simcluster_cpu"]) == mpi.QUICK["repeats"]
    assert all(us > 0 for us in figures["simcluster"] + figures["simcluster_cpu"])
    if mpi.mpiexec() is None:
        assert figures["mpich"] is None and figures["ratio"] is None and "MPICH not measured" in out
    else:
        assert len(figures["mpich"]) == mpi.QUICK["repeats"] and figures["ratio"] > 0
        assert f"{figures['ratio']:.2f}x" in out


def test_without_mpiexec_the_mpich_column_says_so(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi, "mpiexec", lambda: None)
    figures = mpi.main(calls=5, rounds=1, repeats=1)
    out = capsys.readouterr().out
    assert figures["mpich"] is None and figures["ratio"] is None
    assert "not run" in out and "MPICH not measured: needs the real mpi4py and MPICH's mpiexec" in out
