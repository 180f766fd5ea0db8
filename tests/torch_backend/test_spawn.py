"""simcluster.torch.spawn: torch.multiprocessing.spawn's face on virtual ranks, each a process of its own."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
from simcluster.torch._rendezvous import SCHEMES  # noqa: E402

rendezvous_module = sys.modules["torch.distributed.rendezvous"]


def test_spawn_calls_fn_with_rank_and_args_and_returns_a_run_result() -> None:
    def fn(rank: int, word: str, n: int) -> tuple[int, str, int]:
        return rank, word, n

    result = sctorch.spawn(fn, args=("hi", 7), nprocs=3)
    assert isinstance(result, sc.RunResult)
    assert list(result) == [(0, "hi", 7), (1, "hi", 7), (2, "hi", 7)]
    assert result.elapsed == 0.0


def test_spawn_defaults_to_one_rank_like_torch() -> None:
    assert list(sctorch.spawn(lambda rank: rank * 10)) == [0]


def test_spawn_join_false_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"^spawn\(join=False\): simcluster runs every rank inside "
                       r"this call and returns their results when all have finished, so there is no "
                       r"process context to join later; use join=True \(the default\)$"):
        sctorch.spawn(print, nprocs=2, join=False)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_every_start_method_starts_ranks_alike(method: str) -> None:
    assert list(sctorch.spawn(lambda rank: rank, nprocs=2, start_method=method, daemon=True)) == [0, 1]


def test_unknown_start_method_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"^spawn\(start_method='thread'\): unknown start method; "
                       r"valid: spawn, fork, forkserver \(all the same here: each rank starts as a "
                       r"fresh process would\)$"):
        sctorch.spawn(print, nprocs=2, start_method="thread")


def test_unknown_keyword_lists_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"^spawn\(\) got an unexpected keyword argument 'procs'; "
                       r"valid: fn, args, nprocs, join, daemon, start_method, tensors, report, tokens_per_step, "
                       r"flops_per_token, latency, seed, "
                       r"trace, checks, timeout, algorithms, eager_limit, compute, faults$"):
        sctorch.spawn(print, nprocs=2, procs=2)


@pytest.mark.parametrize("nprocs", [0, -1, 2.0, True])
def test_nprocs_must_be_a_positive_int(nprocs: Any) -> None:
    with pytest.raises(ValueError, match=r"^spawn\(nprocs=.*\): nprocs must be an int >= 1 \(virtual ranks\)$"):
        sctorch.spawn(print, nprocs=nprocs)


def test_a_failing_rank_is_a_rank_error_with_its_exception() -> None:
    def fn(rank: int) -> None:
        if rank == 1:
            raise KeyError("boom")

    with pytest.raises(sc.RankError, match=r"^rank 1: run: raised KeyError") as info:
        sctorch.spawn(fn, nprocs=2)
    assert isinstance(info.value.__cause__, KeyError)


def test_a_failing_rank_lets_the_others_finish_its_instant_and_leaves_a_stuck_one_behind(
        capfd: pytest.CaptureFixture[str]) -> None:
    import threading
    import time

    from simcluster.engine import sync as _sync

    never = threading.Event()

    def fn(rank: int) -> None:
        import torch
        import torch.distributed as dist

        dist.init_process_group("simcluster")
        if rank == 1:
            dist.send(torch.ones(1), dst=2)  # rank 2 resumes after this rank has failed
            raise ValueError("rank 1 fails")
        if rank == 2:
            dist.recv(torch.zeros(1), src=1)
        print(f"rank {rank} at the failure's instant", flush=True)
        if rank == 2:
            never.wait(60)  # blocks without handing back, as a wait inside C++ would

    start = time.perf_counter()
    with pytest.raises(sc.RankError, match="rank 1: run: raised ValueError: rank 1 fails"):
        sctorch.spawn(fn, nprocs=4)
    took = time.perf_counter() - start
    never.set()
    assert sorted(capfd.readouterr().out.splitlines()) == [
        f"rank {r} at the failure's instant" for r in (0, 2, 3)]
    assert _sync.FAILING_GRACE <= took < _sync.FAILING_GRACE + 30


def test_each_rank_has_its_own_environment_and_the_process_keeps_its_own() -> None:
    os.environ.pop("SIMCLUSTER_TEST_VAR", None)

    def fn(rank: int) -> list[str | None]:
        dist.init_process_group("simcluster")
        seen = [os.environ.get("SIMCLUSTER_TEST_VAR")]
        os.environ["SIMCLUSTER_TEST_VAR"] = f"rank {rank}"
        dist.barrier()  # every rank has set its value: each still sees its own
        seen.append(os.environ.get("SIMCLUSTER_TEST_VAR"))
        dist.destroy_process_group()
        return seen

    assert list(sctorch.spawn(fn, nprocs=3)) == [[None, "rank 0"], [None, "rank 1"], [None, "rank 2"]]
    assert "SIMCLUSTER_TEST_VAR" not in os.environ


def test_each_rank_has_its_own_grad_mode_and_inference_mode() -> None:
    def fn(rank: int) -> list[bool]:
        dist.init_process_group("simcluster")
        if rank == 0:
            torch.set_grad_enabled(False)
        dist.barrier()
        if rank == 1:
            with torch.inference_mode():
                dist.barrier()
                seen = [torch.is_grad_enabled(), torch.is_inference_mode_enabled()]
        else:
            dist.barrier()
            seen = [torch.is_grad_enabled(), torch.is_inference_mode_enabled()]
        dist.destroy_process_group()
        return seen

    assert list(sctorch.spawn(fn, nprocs=3)) == [[False, False], [False, True], [True, False]]
    assert torch.is_grad_enabled()


def test_each_rank_draws_from_its_own_default_generator() -> None:
    def fn(rank: int) -> list[float]:
        dist.init_process_group("simcluster")
        torch.manual_seed(100 + rank)
        first = torch.rand(2).tolist()
        dist.barrier()  # the other ranks draw meanwhile
        second = torch.rand(2).tolist()
        dist.destroy_process_group()
        return first + second

    expected = []
    for rank in range(3):
        torch.manual_seed(100 + rank)
        expected.append(torch.rand(4).tolist())
    state = torch.get_rng_state()
    assert list(sctorch.spawn(fn, nprocs=3)) == expected
    assert torch.equal(torch.get_rng_state(), state)


def test_spawn_restores_the_process_state_it_changed() -> None:
    handlers = dict(rendezvous_module._rendezvous_handlers)
    hook = sys.excepthook

    def fn(rank: int) -> bool:
        dist.init_process_group("simcluster")  # also wraps sys.excepthook, as torch does
        return dist.is_initialized()

    assert list(sctorch.spawn(fn, nprocs=2)) == [True, True]
    assert not dist.is_initialized()
    assert sys.excepthook is hook
    assert {s: rendezvous_module._rendezvous_handlers[s] for s in SCHEMES} == \
        {s: handlers[s] for s in SCHEMES}


def test_a_second_spawn_in_the_same_process_starts_afresh() -> None:
    def fn(rank: int) -> list[Any]:
        fresh = dist.is_initialized()
        dist.init_process_group("simcluster")
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)
        group = dist.new_group([0, 1])
        dist.all_reduce(t, group=group)
        return [fresh, t.item()]

    first = sctorch.spawn(fn, nprocs=2)  # ends without destroy_process_group, as a process may
    second = sctorch.spawn(fn, nprocs=2)
    assert list(first) == list(second) == [[False, 6.0], [False, 6.0]]


def test_gloo_works_in_the_same_process_after_a_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    sctorch.spawn(lambda rank: dist.init_process_group("simcluster"), nprocs=2)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        t = torch.tensor([3.0])
        dist.all_reduce(t)
        group = dist.new_group([0])
        dist.all_reduce(t, group=group)
        assert t.item() == 3.0
        assert dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()


def test_a_spawn_inside_a_rank_is_refused() -> None:
    def fn(rank: int) -> None:
        sctorch.spawn(print, nprocs=2)

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=1)
    assert str(info.value.__cause__) == ("simcluster.torch.spawn(): another spawn is running in "
                                         "this process; start spawns one after another, not from a rank")
