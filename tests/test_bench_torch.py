"""The torch benchmark measures what it says: correct sums inside the timed loop, sane figures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from time import perf_counter  # bound at import: inside a rank, time.perf_counter() is virtual

import pytest

torch = pytest.importorskip("torch", reason="simcluster bench torch needs torch "
                            "(pip install 'simcluster[torch]')")
dist = pytest.importorskip("torch.distributed", reason="this torch build has no torch.distributed")

from simcluster.bench import torch as bench  # noqa: E402


def test_the_simcluster_loop_checks_every_sum_and_times_each_round() -> None:
    out = bench.simcluster_latency(world=4, calls=5, rounds=3)
    assert out["wrong"] == 0
    assert out["last"] == out["expected"] == 4 * 5 / 2  # ranks fill rank + 1: 1 + 2 + 3 + 4
    assert out["calls"] == 5 * 4  # a warm-up round and 3 timed ones
    assert len(out["per_call"]) == 3 and all(t > 0 for t in out["per_call"])
    assert out["median"] == sorted(out["per_call"])[1]
    assert out["virtual"] == 0.0  # the default latency model is zero
    # a rank hands the baton over at most once a call (blocked in Work.wait): two switches each;
    # one whose part of gloo's ring needs nothing from the others (a one-float buffer leaves all
    # blocks but the first empty, and those move no message) goes on without handing it over
    assert 2 < out["switches_per_call"] <= 2 * 4


def test_the_breakdown_gives_each_part_of_a_call_and_puts_the_backend_back() -> None:
    from simcluster.engine.sync import ThreadRank
    from simcluster.torch._work import SimclusterWork

    send, wait = ThreadRank.__dict__["send"], SimclusterWork.__dict__["wait"]
    parts = bench.breakdown(world=4, calls=5)
    assert set(parts) == {"engine", "switches", "torch", "backend", "wait"}
    assert all(seconds > 0 for seconds in parts.values()), parts
    assert ThreadRank.__dict__["send"] is send and SimclusterWork.__dict__["wait"] is wait


def test_the_floor_is_a_bare_two_thread_hand_off_timed_per_round() -> None:
    floor = bench.handoff_floor(handoffs=200, rounds=3)
    assert len(floor["per_handoff"]) == 3 and all(t > 0 for t in floor["per_handoff"])
    assert floor["median"] == sorted(floor["per_handoff"])[1]


@pytest.mark.skipif(not dist.is_gloo_available(), reason="this torch build has no gloo")
def test_gloo_and_simcluster_side_by_side_give_the_same_sums_and_the_ratio_of_medians() -> None:
    lat = bench.latency(world=4, calls=5, rounds=2)
    sim, gloo = lat["simcluster"], lat["gloo"]
    for figures in (sim, gloo):
        assert figures["wrong"] == 0
        assert figures["cpu_per_call"] > 0  # simcluster's process; gloo's four, summed
        assert figures["last"] == figures["expected"] == 10.0
        assert figures["median"] > 0 and len(figures["per_call"]) == 2
    assert lat["ratio"] == pytest.approx(sim["median"] / gloo["median"])
    floor = lat["floor"]  # measured before and after the simcluster loop: both rounds of each
    assert len(floor["per_handoff"]) == 4 and floor["median"] > 0
    assert lat["floor_ratio"] == pytest.approx(sim["median"] / floor["median"])


def test_the_latency_table_prints_the_gloo_and_floor_rows(capsys: pytest.CaptureFixture[str]) -> None:
    sim = {"median": 500e-6, "switches_per_call": 8.0, "wrong": 0, "calls": 20}
    gloo = {"median": 1000e-6, "wrong": 0}
    lat = {"simcluster": sim, "gloo": gloo, "ratio": 0.5, "floor": {"median": 5e-6},
           "floor_ratio": 100.0}
    bench._latency_table(lat, 4, 5, 3)
    out = capsys.readouterr().out
    assert "0.50x" in out and "gloo, 4 processes, TCP on 127.0.0.1" in out
    assert "100x" in out and "one bare hand-off between two threads" in out
    assert "thread switches per call" in out and "40.0 us per call at the floor" in out


@pytest.mark.parametrize("backend", ["simcluster", "threaded"])
def test_a_scale_job_runs_in_its_own_process_and_reports_its_own_peak(backend: str) -> None:
    got = bench.scale_job(backend, 8, budget=60)
    assert isinstance(got, dict), got
    assert got["correct"] is True
    assert 0 < got["wall"] < got["process"]  # the job is part of the child's whole life
    assert got["peak_kib"] >= got["before_kib"] > 0


def test_a_job_over_its_budget_is_reported_as_not_finished() -> None:
    assert bench.scale_job("simcluster", 8, budget=0.01) == "did not finish in 0.01 s"


def test_the_ranks_share_one_identity_rank_map_of_the_world() -> None:
    import simcluster.torch as sctorch

    def rank_map(rank: int) -> int:
        dist.init_process_group("simcluster")
        dist.barrier()  # every rank's state is saved once while the others run
        ranks = dist.distributed_c10d._world.pg_group_ranks[dist.group.WORLD]
        assert ranks == {i: i for i in range(6)}
        return id(ranks)

    ids = list(sctorch.spawn(rank_map, nprocs=6))
    assert len(set(ids)) == 1


def test_without_torch_the_cli_prints_the_install_hint_and_fails() -> None:
    code = textwrap.dedent("""
        import sys

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError(f"No module named {name!r} (blocked)")
                return None

        sys.meta_path.insert(0, Blocker())
        from simcluster import cli
        sys.exit(cli.main(["bench", "torch"]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("simcluster bench torch: simcluster.torch needs torch")
    assert "pip install 'simcluster[torch]'" in out.stderr


@pytest.mark.timeout(300)
def test_the_training_step_job_reports_each_phase_and_where_the_time_goes() -> None:
    got = bench.train_job(2, 2, budget=240)
    assert isinstance(got, dict), got
    assert (got["ranks"], got["dp"], got["tp"]) == (4, 2, 2)
    assert got["same_loss_in_each_dp_group"] is True  # the tp ranks of a dp group agree
    assert 0 < got["loss"] < 10
    assert 0 < got["setup"] < got["total"] and 0 < got["step"] < got["total"]
    assert got["first_over_step"] == got["first_step"] / got["step"]  # printed beside its target
    assert got["first_step_cpu"] > 0 and got["step_cpu"] > 0
    assert got["first_over_step_cpu"] == got["first_step_cpu"] / got["step_cpu"]
    assert got["where_first"] and abs(sum(got["where_first"].values()) - 1) < 1e-9
    assert got["virtual_step"] > 0  # the step's collectives cost time on the stated network
    assert 0 < got["peak_mib"] < 8192
    assert got["where"] and abs(sum(got["where"].values()) - 1) < 1e-9  # shares of the samples


def test_the_training_table_prints_the_first_step_over_the_step_beside_its_target(
        capsys: pytest.CaptureFixture[str]) -> None:
    got = {"setup": 1.0, "first_step": 3.0, "step": 2.0, "first_over_step": 1.5, "first_step_cpu": 4.0,
           "step_cpu": 1.9, "first_over_step_cpu": 4.0 / 1.9, "total": 7.0, "peak_mib": 100.0, "virtual_step": 1e-3,
           "same_loss_in_each_dp_group": True, "where": {"simcluster engine": 1.0},
           "where_first": {"DTensor sharding propagation (Python, fake tensors)": 1.0}}
    bench._train_table({(2, 2): got, (64, 8): "not finished"})
    out = capsys.readouterr().out
    assert "first/step (cpu <= 2x)" in out and "1.50x (2.11x cpu) missed" in out
    assert "3.0 (4.0 cpu)" in out and "2.0 (1.9 cpu)" in out
    assert "where the first step's wall time goes at 4 ranks: DTensor sharding propagation" in out


def test_the_latency_table_prints_a_row_per_build_with_its_own_ratios(
        capsys: pytest.CaptureFixture[str]) -> None:
    compiled = {"median": 250e-6, "switches_per_call": 8.0, "wrong": 0, "calls": 20,
                "cpu_per_call": 300e-6}
    interpreted = {"median": 600e-6, "switches_per_call": 8.0, "wrong": 0, "calls": 20,
                   "cpu_per_call": 700e-6}
    lat = {"simcluster": compiled, "builds": {"compiled": compiled, "interpreted": interpreted},
           "gloo": {"median": 1000e-6, "wrong": 0, "cpu_per_call": 200e-6},
           "floor": {"median": 5e-6}}
    bench._latency_table(lat, 4, 5, 3)
    out = capsys.readouterr().out
    assert "all_reduce, per call (compiled)" in out and "0.25x" in out and "50x" in out
    assert "all_reduce, per call (interpreted)" in out and "0.60x" in out and "120x" in out
    assert "CPU per call (compiled)" in out and "1.50x" in out and "3.50x" in out
    assert "0 wrong of 240" in out  # 20 calls x 4 ranks in each build and in gloo


def test_only_all_reduce_prints_the_latency_table_alone(capsys: pytest.CaptureFixture[str]) -> None:
    from simcluster import cli

    assert cli.main(["bench", "torch", "--only", "all_reduce", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "all_reduce, per call" in out and "every sum checked inside the loop: 0 wrong" in out
    assert "init_process_group" not in out and "training step" not in out


def test_only_names_a_table_of_the_benchmark() -> None:
    with pytest.raises(SystemExit, match="choose one of all_reduce, scale, train"):
        bench.main(only="latency")


def test_the_step_sampler_counts_the_running_rank_not_the_ranks_waiting_for_the_baton() -> None:
    import simcluster as sc
    from simcluster.bench.torch_step import Sampler

    def fn(comm: sc.Comm) -> None:  # rank 0 works in this file's code; the others wait for it
        if comm.rank == 0:
            until = perf_counter() + 0.6
            while perf_counter() < until:
                pass
        sc.MPI.COMM_WORLD.Barrier()

    fn.__simcluster_stack__ = "thread"  # type: ignore[attr-defined]  # ranks on threads, as torch's
    sc.run(fn, 2)  # imports done: the first run of a facade imports its modules
    with Sampler() as sampler:
        sampler.phase = "step"
        sc.run(fn, 8)
        sampler.phase = None
    # counting the 7 waiting ranks would give about 1/8; a loaded machine's
    # start-up of 8 threads takes a share of its own, so the bar is half
    assert sampler.shares("step").get("model code", 0.0) > 0.5
