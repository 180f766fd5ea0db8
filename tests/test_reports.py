"""What a newcomer sees when a run goes wrong: missing awaits, asyncio.gather, skipped
collectives, bad keywords and runaway ranks end with errors that name the rank, the
call, the line and the fix."""

from __future__ import annotations

import re

import numpy as np
import pytest

import simcluster as sc


async def _first_to_arrive(comm: sc.Comm) -> list[int] | None:
    """Rank 0 receives from everyone with ANY_SOURCE: the order is what the seed decides."""
    if comm.rank == 0:
        return [(await comm.recv(src=sc.ANY_SOURCE)) for _ in range(comm.size - 1)]
    await comm.send(comm.rank, dst=0)
    return None


# ---- keywords: seed and timeout ----


@pytest.mark.parametrize("seed", ["x", 1.5, True, [1]])
def test_seed_that_is_not_an_int_names_the_keyword_and_the_fix(seed: object) -> None:
    with pytest.raises(TypeError) as info:
        sc.run(_first_to_arrive, world_size=2, seed=seed)
    assert str(info.value) == (f"run(seed={seed!r}): seed must be an int; pass an integer such as "
                               "seed=1, or leave it out for the default (0)")


def test_seed_none_is_the_default_seed() -> None:
    default = sc.run(_first_to_arrive, world_size=6)
    assert [sc.run(_first_to_arrive, world_size=6, seed=None)[0] for _ in range(3)] == [default[0]] * 3


def test_seed_may_be_a_numpy_integer() -> None:
    expected = sc.run(_first_to_arrive, world_size=6, seed=3)[0]
    assert sc.run(_first_to_arrive, world_size=6, seed=np.int64(3))[0] == expected


@pytest.mark.parametrize("timeout", ["5", [5], True])
def test_timeout_that_is_not_a_number_names_the_keyword_and_the_fix(timeout: object) -> None:
    with pytest.raises(TypeError) as info:
        sc.run(_first_to_arrive, world_size=2, timeout=timeout)
    assert str(info.value) == (f"run(timeout={timeout!r}): timeout must be a positive number of "
                               "seconds; pass a number such as timeout=5, or None for no limit")


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_timeout_that_is_not_positive_is_a_value_error(timeout: float) -> None:
    with pytest.raises(ValueError, match=r"^run\(timeout=.*\): timeout must be a positive number of "
                                         r"seconds; pass a number such as timeout=5, or None for no "
                                         r"limit$"):
        sc.run(_first_to_arrive, world_size=2, timeout=timeout)


def test_timeout_may_be_an_int_or_a_numpy_float() -> None:
    assert sc.run(_first_to_arrive, world_size=2, timeout=5)[0] == [1]
    assert sc.run(_first_to_arrive, world_size=2, timeout=np.float64(5.0))[0] == [1]


def test_launch_checks_the_same_keywords() -> None:
    import asyncio

    with pytest.raises(TypeError, match=re.escape("run(seed='x'): seed must be an int")):
        asyncio.run(sc.launch(_first_to_arrive, world_size=2, seed="x"))
