"""init_process_group("simcluster") in every form the tutorials use, without sockets; its errors."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402


def _seed_style(rank: int, size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group("simcluster", rank=rank, world_size=size)


FORMS: dict[str, Callable[[int, int], None]] = {
    "seed tutorial (MASTER_ADDR, rank, world_size)": _seed_style,
    "rank and world_size, no MASTER_ADDR": lambda r, n: dist.init_process_group(
        "simcluster", rank=r, world_size=n),
    "backend only": lambda r, n: dist.init_process_group("simcluster"),
    "backend keyword": lambda r, n: dist.init_process_group(backend="simcluster"),
    "env://": lambda r, n: dist.init_process_group("simcluster", init_method="env://"),
    "env:// with rank": lambda r, n: dist.init_process_group(
        "simcluster", init_method="env://", rank=r, world_size=n),
    "tcp://": lambda r, n: dist.init_process_group(
        "simcluster", init_method="tcp://127.0.0.1:23456", rank=r, world_size=n),
    "file://": lambda r, n: dist.init_process_group(
        "simcluster", init_method="file:///nonexistent/simcluster-rendezvous", rank=r, world_size=n),
    "a store of the user's": lambda r, n: dist.init_process_group(
        "simcluster", store=dist.HashStore(), rank=r, world_size=n),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_init_process_group_works_without_sockets(form: str) -> None:
    init = FORMS[form]

    def fn(rank: int, size: int) -> list[Any]:
        init(rank, size)
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        seen = [dist.get_rank(), dist.get_world_size(), dist.get_backend(), t.item()]
        dist.destroy_process_group()
        return seen

    assert list(sctorch.spawn(fn, args=(3,), nprocs=3)) == [
        [0, 3, "simcluster", 3.0], [1, 3, "simcluster", 3.0], [2, 3, "simcluster", 3.0]]


def test_destroy_and_init_again_in_the_same_rank() -> None:
    def fn(rank: int) -> list[Any]:
        seen = []
        for round_ in range(2):
            dist.init_process_group("simcluster")
            t = torch.tensor([float(rank + round_)])
            dist.all_reduce(t)
            seen += [dist.is_initialized(), t.item()]
            dist.destroy_process_group()
        return seen + [dist.is_initialized()]

    assert list(sctorch.spawn(fn, nprocs=2)) == [[True, 1.0, True, 3.0, False]] * 2


def test_a_wrong_rank_says_which_rank_spawn_started() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster", rank=0, world_size=2)  # rank 1 passes 0

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=2)
    assert str(info.value.__cause__) == (
        "rank 1: init_process_group(rank=0): this function runs as rank 1 of "
        "simcluster.torch.spawn(nprocs=2); pass the rank spawn gave fn (its first argument), "
        "or leave rank out")


def test_a_wrong_world_size_says_spawns_nprocs() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster", rank=rank, world_size=2 + 2 * rank)

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=2)
    assert str(info.value.__cause__) == (
        "rank 1: init_process_group(world_size=4): simcluster.torch.spawn started 2 ranks; "
        "pass world_size=2 (spawn's nprocs), or leave it out")


def test_a_wrong_rank_with_a_store_is_caught_by_the_backend() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("simcluster", store=dist.HashStore(), rank=rank,
                                world_size=2 + rank)

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=2)
    assert str(info.value.__cause__) == (
        "rank 1: init_process_group(rank=1, world_size=3): this function runs as rank 1 of "
        "simcluster.torch.spawn(nprocs=2); pass the rank spawn gave fn and world_size=nprocs, "
        "or leave both out")


def test_the_backend_outside_spawn_says_to_use_spawn() -> None:
    with pytest.raises(sc.SimclusterError, match=(
            r"^init_process_group\(backend='simcluster'\): no simcluster.torch.spawn is running "
            r"this code; launch the function with simcluster.torch.spawn\(fn, args=..., nprocs=N\), "
            r"which runs fn\(rank, \*args\) on N virtual ranks$")):
        dist.init_process_group("simcluster", store=dist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()


def test_gloo_inside_spawn_fails_clearly_instead_of_hanging() -> None:
    def fn(rank: int) -> None:
        dist.init_process_group("gloo")

    with pytest.raises(sc.RankError) as info:
        sctorch.spawn(fn, nprocs=2, timeout=60)
    message = str(info.value.__cause__)
    assert message.startswith("rank ") and "ProcessGroupGloo(store, rank=" in message
    assert message.endswith(
        "a gloo group is torch's real gloo, which connects all its ranks at once inside this "
        "constructor, and the ranks of a spawn run one at a time, so it could only time out; "
        "inside simcluster.torch.spawn use dist.init_process_group('simcluster') (simcluster "
        "torchrun runs a program's 'gloo' groups there itself)")
