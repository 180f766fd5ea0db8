"""What the backend does beyond the gloo differential: one rank, subgroups, work handles, errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster as sc  # noqa: E402
import simcluster.torch as sctorch  # noqa: E402
import torch_cases  # noqa: E402


def _spawn(body: Callable[[int, int], Any], nprocs: int, **kw: Any) -> list[Any]:
    """Run ``body(rank, size)`` between init_process_group and destroy_process_group."""
    def fn(rank: int) -> Any:
        dist.init_process_group("simcluster", rank=rank, world_size=nprocs)
        try:
            return body(rank, nprocs)
        finally:
            dist.destroy_process_group()
    return list(sctorch.spawn(fn, nprocs=nprocs, **kw))


def _cause(body: Callable[[int, int], Any], nprocs: int) -> BaseException:
    with pytest.raises(sc.RankError) as info:
        _spawn(body, nprocs)
    cause = info.value.__cause__
    assert cause is not None
    return cause


def test_every_case_runs_on_a_single_rank() -> None:
    def body(rank: int, size: int) -> Any:
        return {name: case(rank, size) for name, case in torch_cases.CASES.items()
                if name not in ("object_collectives", "groups_and_group_ranks", "point_to_point_ring",
                                "async_work_handles")}
    (values,) = _spawn(body, 1)
    assert values["all_reduce_every_op_and_dtype"]["SUM/torch.float32"] == \
        ("torch.float32", [1.0, 2.0, 3.0, 4.0])
    assert values["all_to_all_even_and_uneven"] == [
        [("torch.float32", [0.0, 0.0])], ("torch.int64", [0]), ("torch.int64", [0])]


def test_cases_agree_on_four_ranks_with_what_torch_documents() -> None:
    values = _spawn(lambda r, n: torch_cases.all_to_all_even_and_uneven(r, n), 4)
    assert [v[1] for v in values] == [("torch.int64", [r, 10 + r, 20 + r, 30 + r]) for r in range(4)]


def test_new_subgroups_split_the_world_into_groups_of_two() -> None:
    def body(rank: int, size: int) -> Any:
        mine, _all = dist.new_subgroups(group_size=2)
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mine)
        return [dist.get_rank(mine), dist.get_world_size(mine), t.item()]

    assert _spawn(body, 4) == [[0, 2, 1.0], [1, 2, 1.0], [0, 2, 5.0], [1, 2, 5.0]]


def test_new_subgroups_by_enumeration_and_local_synchronization() -> None:
    def body(rank: int, size: int) -> Any:
        mine, _all = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mine)
        members = [1, 2] if rank in (1, 2) else [0, 3]
        local = dist.new_group(members, use_local_synchronization=True)  # members only call it
        u = torch.tensor([float(rank)])
        dist.all_reduce(u, op=dist.ReduceOp.MAX, group=local)
        return [t.item(), u.item()]

    assert _spawn(body, 4) == [[2.0, 3.0], [4.0, 2.0], [2.0, 2.0], [4.0, 3.0]]


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch 2.13 renamed them *_single
def test_the_deprecated_tensor_collectives_still_work() -> None:
    def body(rank: int, size: int) -> Any:
        flat = torch.zeros(2 * size)
        dist.all_gather_into_tensor(flat, torch.tensor([rank, -rank], dtype=torch.float32))
        stacked = torch.zeros(size, 2)
        dist.all_gather_into_tensor(stacked, torch.tensor([rank, -rank], dtype=torch.float32))
        mine = torch.zeros(1)
        dist.reduce_scatter_tensor(mine, torch.arange(float(size)))
        return [flat.tolist(), stacked.tolist(), mine.item()]

    assert _spawn(body, 2) == [[[0.0, 0.0, 1.0, -1.0], [[0.0, 0.0], [1.0, -1.0]], 0.0],
                               [[0.0, 0.0, 1.0, -1.0], [[0.0, 0.0], [1.0, -1.0]], 2.0]]


def test_all_gather_takes_tensors_of_different_sizes() -> None:
    def body(rank: int, size: int) -> Any:
        out = [torch.zeros(r + 1) for r in range(size)]
        dist.all_gather(out, torch.full((rank + 1,), float(rank)))
        return [t.tolist() for t in out]

    assert _spawn(body, 3) == [[[0.0], [1.0, 1.0], [2.0, 2.0, 2.0]]] * 3


def test_reduce_leaves_the_other_ranks_tensors_unchanged() -> None:
    def body(rank: int, size: int) -> Any:
        t = torch.tensor([1.0, 2.0]) * (rank + 1)
        dist.reduce(t, dst=1)
        return t.tolist()

    assert _spawn(body, 3) == [[1.0, 2.0], [6.0, 12.0], [3.0, 6.0]]


def test_dtypes_gloo_lacks_work_here() -> None:
    def body(rank: int, size: int) -> Any:
        t = torch.tensor([rank + 1, 300], dtype=torch.int16)
        dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
        return [t.dtype, t.tolist()]

    assert _spawn(body, 3) == [[torch.int16, [6, 300**3 % 2**16 - 2**16]]] * 3


def test_work_handles_wait_report_completion_and_hand_out_completed_futures() -> None:
    def body(rank: int, size: int) -> Any:
        t = torch.tensor([float(rank)])
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
        seen = [fut.done(), [x.tolist() for x in fut.value()], work.is_completed(),
                [x.tolist() for x in work.result()], work.wait(), repr(work)]
        return seen

    assert _spawn(body, 2) == [[True, [[1.0]], True, [[1.0]], True,
                                "<SimclusterWork all_reduce completed>"]] * 2


def test_a_receive_from_any_source_returns_the_sender() -> None:
    def body(rank: int, size: int) -> Any:
        if rank == 0:
            got = torch.zeros(1)
            return [dist.recv(got), got.item()]
        dist.send(torch.tensor([7.0]), dst=0)
        return None

    assert _spawn(body, 2)[0] == [1, 7.0]


def test_an_op_the_dtype_lacks_names_rank_call_op_and_dtype() -> None:
    def body(rank: int, size: int) -> None:
        if rank == 1:  # refused at the call, before any message
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)

    assert str(_cause(body, 2)) == ("rank 1: all_reduce(op=BAND): BAND is not defined for dtype "
                                    "float32; use an integer or bool dtype, or another op")


def test_avg_of_integers_is_refused_with_the_fix() -> None:
    def body(rank: int, size: int) -> None:
        if rank == 1:  # refused at the call, before any message
            dist.all_reduce(torch.ones(2, dtype=torch.int64), op=dist.ReduceOp.AVG)

    assert str(_cause(body, 2)) == ("rank 1: all_reduce(op=AVG): AVG is not defined for dtype int64 "
                                    "arrays, whose average is stored in place; use a float dtype, "
                                    "or SUM and divide")


def test_premul_sum_is_refused_with_the_fix() -> None:
    def body(rank: int, size: int) -> None:
        if rank == 1:  # refused at the call, before any message
            dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))

    assert str(_cause(body, 2)) == ("rank 1: all_reduce(op=PREMUL_SUM): the simcluster backend has "
                                    "no PREMUL_SUM; multiply the tensor first and use SUM")


def test_all_to_all_single_with_splits_that_do_not_add_up() -> None:
    def body(rank: int, size: int) -> None:
        if rank == 1:  # refused at the call, before any message
            dist.all_to_all_single(torch.zeros(4), torch.zeros(4), [1, 1], [1, 2])

    assert str(_cause(body, 2)) == ("rank 1: all_to_all_single: input_split_sizes=[1, 2] must have "
                                    "2 entries summing to the 4 rows of input")


def test_an_error_on_a_subgroup_names_the_world_rank_and_the_group_rank() -> None:
    def body(rank: int, size: int) -> None:
        group = dist.new_group([1, 2])
        if rank == 2:  # refused at the call, before any message
            dist.all_to_all_single(torch.zeros(4), torch.zeros(4), [1, 1], [1, 2], group=group)

    assert str(_cause(body, 3)) == ("rank 2 (rank 1 of this group): all_to_all_single: "
                                    "input_split_sizes=[1, 2] must have 2 entries summing to the 4 "
                                    "rows of input")
