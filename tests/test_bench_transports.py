"""``simcluster bench transports``: the parallel-speedup table and its same-result check."""

from __future__ import annotations

import pytest

from simcluster.bench import transports


def test_the_training_loop_gives_one_result_and_time_on_every_transport() -> None:
    memory = transports.measure_speedup("memory", reps=1, iterations=2)
    shm = transports.measure_speedup("shm", reps=1, iterations=2)
    # 64 ranks all_reduce a 1 MiB gradient of ones twice: every element ends at 64 * (64 + 1)
    assert memory["checksum"] == shm["checksum"] == float(64 * 65 * (1 << 17))
    assert memory["elapsed"] == shm["elapsed"] > 0


def test_the_speedup_table_names_each_transport_against_the_memory_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    figures = transports.speedup(iterations=1, transports=("shm",), repeats=1)
    out = capsys.readouterr().out
    assert "parallel speedup: 64 ranks, 1 iterations" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines()[3:] if line.strip()}
    assert lines["memory"][1:] == ["1", f"{figures['memory']['wall']:.2f}", "s", "1.00x"]
    assert lines["shm"][1] == "2"
    ratio = figures["memory"]["wall"] / figures["shm"]["wall"]
    assert lines["shm"][-1] == f"{ratio:.2f}x"
    # the mpi row, or the reason it is missing (no mpi4py or no mpiexec here)
    assert "mpi" in lines or "mpi: skipped:" in out


def test_the_socket_floor_is_a_positive_round_trip() -> None:
    assert transports.socket_floor(50) > 0


def test_work_reps_is_at_least_one_round() -> None:
    assert transports.work_reps(0.001) >= 1


@pytest.mark.slow
def test_the_socket_floor_is_under_50_ms_and_work_reps_grows_with_the_asked_time() -> None:
    """Speeds: on a loaded machine these can fail, so they are left out of the default run."""
    assert transports.socket_floor(50) < 0.05
    assert transports.work_reps(0.02) > transports.work_reps(0.001)


def test_the_scale_table_splits_one_world_between_two_mpi_processes(
        capsys: pytest.CaptureFixture[str]) -> None:
    figures = transports.scale_across(1 << 10)
    out = capsys.readouterr().out
    assert "scale across processes: a message-level barrier on 1,024 ranks" in out
    one, two = figures["memory"], figures["mpi"]
    assert isinstance(one, dict) and one["elapsed"] > 0 and one["messages"] == 1024 * 10
    assert one["rounds"] is None  # one process
    if isinstance(two, dict):  # the same virtual time and messages, hosted by 2 processes
        assert (two["elapsed"], two["messages"]) == (one["elapsed"], one["messages"])
        assert two["rounds"][0] > 0
        assert f"{one['wall'] / two['wall']:.2f}x" in out
    else:
        assert f"mpi: skipped: {two}" in out
