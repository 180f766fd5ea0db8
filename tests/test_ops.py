"""ReduceOp: members, apply/finalize semantics, payload checks, names, user ops."""

from __future__ import annotations

import copy
import math
import operator
import pickle
import re
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.ops import ReduceOp, as_op

NAMES = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR", "AVG"]


# ---- members ----


@pytest.mark.parametrize("name", NAMES)
def test_members_have_name_repr_and_are_commutative(name: str) -> None:
    op = getattr(ReduceOp, name)
    assert isinstance(op, ReduceOp)
    assert op.name == name and repr(op) == f"ReduceOp.{name}"
    assert op.commutative and op.elementwise and not op.is_custom
    assert pickle.loads(pickle.dumps(op)) is op
    assert copy.deepcopy(op) is op


def test_ops_are_immutable() -> None:
    with pytest.raises(AttributeError, match="ReduceOp is immutable"):
        ReduceOp.SUM.commutative = False  # type: ignore[misc]


# ---- apply on Python numbers ----


@pytest.mark.parametrize("op, a, b, expected", [
    (ReduceOp.SUM, 2, 3, 5), (ReduceOp.SUM, 10**30, 1, 10**30 + 1), (ReduceOp.SUM, 1.5, 2, 3.5),
    (ReduceOp.SUM, True, True, 2), (ReduceOp.PRODUCT, 4, 5, 20), (ReduceOp.PRODUCT, 1j, 1j, -1 + 0j),
    (ReduceOp.MIN, 3, -1, -1), (ReduceOp.MAX, 2.5, 7.5, 7.5), (ReduceOp.BAND, 6, 3, 2),
    (ReduceOp.BOR, 6, 3, 7), (ReduceOp.BXOR, 6, 3, 5), (ReduceOp.BXOR, True, True, False),
    (ReduceOp.LAND, 2, 0.0, False), (ReduceOp.LOR, 0, 3, True), (ReduceOp.LXOR, 2, 3, False),
    (ReduceOp.AVG, 2, 3, 5),
])
def test_apply_on_python_numbers_keeps_their_natural_type(op: ReduceOp, a: Any, b: Any, expected: Any) -> None:
    value = op.apply(a, b)
    assert value == expected and type(value) is type(expected)


def test_min_and_max_propagate_nan_like_numpy() -> None:
    for a, b in [(math.nan, 1.0), (1.0, math.nan)]:
        assert math.isnan(ReduceOp.MIN.apply(a, b)) and math.isnan(ReduceOp.MAX.apply(a, b))


# ---- apply on numpy ----


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.float32, np.float64, np.bool_])
@pytest.mark.parametrize("name", ["SUM", "PRODUCT", "MIN", "MAX", "LAND", "LOR", "LXOR"])
def test_apply_on_arrays_keeps_dtype_and_shape_and_leaves_inputs_alone(name: str, dtype: Any) -> None:
    a = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    b = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    a0, b0 = a.copy(), b.copy()
    value = getattr(ReduceOp, name).apply(a, b)
    assert value.dtype == a.dtype and value.shape == a.shape
    assert value is not a and value is not b
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_sum_of_bool_arrays_follows_numpy() -> None:
    value = ReduceOp.SUM.apply(np.array([True, False, False]), np.array([True, True, False]))
    assert value.dtype == np.bool_ and value.tolist() == [True, True, False]


def test_logical_ops_give_zeros_and_ones_of_the_input_dtype() -> None:
    value = ReduceOp.LAND.apply(np.array([2, 0, 5], dtype=np.int32), np.array([3, 1, 0], dtype=np.int32))
    assert value.dtype == np.int32 and value.tolist() == [1, 0, 0]
    scalar = ReduceOp.LOR.apply(np.float32(0.0), np.float32(2.5))
    assert type(scalar) is np.float32 and scalar == 1.0


def test_zero_d_arrays_stay_arrays() -> None:
    value = ReduceOp.MAX.apply(np.array(1.0), np.array(2.0))
    assert isinstance(value, np.ndarray) and value.shape == () and value == 2.0
    custom = ReduceOp.custom(lambda a, b: a - b).apply(np.array(1.0), np.array(2.0))
    assert isinstance(custom, np.ndarray) and custom.shape == ()


def test_empty_arrays_reduce_to_empty_arrays() -> None:
    value = ReduceOp.BXOR.apply(np.zeros((0, 2), dtype=np.uint8), np.zeros((0, 2), dtype=np.uint8))
    assert value.shape == (0, 2) and value.dtype == np.uint8


# ---- finalize ----


def test_avg_finalize_divides_by_the_count_and_keeps_float_dtypes() -> None:
    assert ReduceOp.AVG.finalize(6, 4) == 1.5
    out = ReduceOp.AVG.finalize(np.array([3.0, 6.0], dtype=np.float32), 3)
    assert out.dtype == np.float32 and out.tolist() == [1.0, 2.0]
    zero_d = ReduceOp.AVG.finalize(np.array(4.0), 2)
    assert isinstance(zero_d, np.ndarray) and zero_d.shape == () and zero_d == 2.0


@pytest.mark.parametrize("name", [n for n in NAMES if n != "AVG"])
def test_finalize_is_the_identity_for_other_ops(name: str) -> None:
    x = np.arange(3)
    assert getattr(ReduceOp, name).finalize(x, 3) is x


# ---- check ----


def _check_message(op: ReduceOp, obj: object) -> str:
    with pytest.raises(TypeError) as info:
        op.check(obj, 2, f"all_reduce(op={op.name})")
    return str(info.value)


@pytest.mark.parametrize("op, obj, problem", [
    (ReduceOp.BAND, np.ones(2), "BAND is not defined for dtype float64; use an integer or bool dtype, or "
                                "another op"),
    (ReduceOp.BXOR, 1.5, "BXOR is not defined for float; use an integer or bool dtype, or another op"),
    (ReduceOp.MIN, np.ones(2, dtype=np.complex64), "MIN is not defined for dtype complex64; use a real "
                                                   "dtype, or another op"),
    (ReduceOp.MAX, 1j, "MAX is not defined for complex; use a real dtype, or another op"),
    (ReduceOp.SUM, "text", "SUM is not defined for str; pass numbers or numeric arrays, or use "
                           "ReduceOp.custom(fn)"),
    (ReduceOp.SUM, [1, 2], "SUM is not defined for list; pass numbers or numeric arrays, or use "
                           "ReduceOp.custom(fn)"),
    (ReduceOp.LOR, np.array(["a"]), "LOR is not defined for dtype <U1; pass numbers or numeric arrays, or "
                                    "use ReduceOp.custom(fn)"),
    (ReduceOp.AVG, np.ones(2, dtype=np.int64), "AVG is not defined for dtype int64 arrays, whose average "
                                               "is stored in place; use a float dtype, or SUM and divide"),
    (ReduceOp.AVG, np.ones(2, dtype=bool), "AVG is not defined for dtype bool arrays, whose average is "
                                           "stored in place; use a float dtype, or SUM and divide"),
])
def test_check_names_rank_call_op_and_dtype(op: ReduceOp, obj: object, problem: str) -> None:
    assert _check_message(op, obj) == f"rank 2: all_reduce(op={op.name}): {problem}"


@pytest.mark.parametrize("op, obj", [
    (ReduceOp.BAND, np.ones(2, dtype=np.uint8)), (ReduceOp.BOR, True), (ReduceOp.LXOR, np.ones(2)),
    (ReduceOp.AVG, 3), (ReduceOp.AVG, np.int64(3)), (ReduceOp.AVG, np.ones(2, dtype=np.complex64)),
    (ReduceOp.PRODUCT, 1j), (ReduceOp.MAX, np.ones(2, dtype=bool)),
])
def test_check_accepts_what_the_op_is_defined_for(op: ReduceOp, obj: object) -> None:
    op.check(obj, 0, "reduce(dst=0, op=SUM)")


def test_custom_ops_accept_any_payload() -> None:
    concat = ReduceOp.custom(operator.add, commutative=False, name="concat")
    for obj in ("text", [1], {"a": 1}, None, np.array(["x"])):
        concat.check(obj, 0, "all_reduce(op=concat)")


# ---- user ops ----


def _first(a: Any, b: Any) -> Any:
    return a


def test_custom_op_takes_its_name_from_the_function() -> None:
    op = ReduceOp.custom(_first, commutative=False)
    assert op.name == "_first" and not op.commutative and op.is_custom and not op.elementwise
    assert repr(op) == "ReduceOp.custom(_first, commutative=False)"
    assert op.apply(1, 2) == 1 and op.finalize(5, 3) == 5
    assert ReduceOp.custom(lambda a, b: a, name="left").name == "left"
    assert ReduceOp.custom(_first, elementwise=True).elementwise
    again = pickle.loads(pickle.dumps(op))
    assert again.name == "_first" and again.apply(1, 2) == 1 and not again.commutative


def test_custom_needs_a_callable() -> None:
    with pytest.raises(TypeError, match=r"^ReduceOp.custom\(fn=3\): fn must be callable; pass a function "
                                        r"fn\(a, b\) -> value$"):
        ReduceOp.custom(3)  # type: ignore[arg-type]


# ---- as_op ----


@pytest.mark.parametrize("name", NAMES)
def test_as_op_takes_names_in_any_case(name: str) -> None:
    op = getattr(ReduceOp, name)
    assert as_op(name) is op and as_op(name.lower()) is op and as_op(name.title()) is op and as_op(op) is op


def test_as_op_defaults_to_sum_and_knows_the_aliases() -> None:
    assert as_op(None) is ReduceOp.SUM
    assert as_op("prod") is ReduceOp.PRODUCT
    assert as_op("AND") is ReduceOp.BAND and as_op("or") is ReduceOp.BOR
    assert as_op("mean") is ReduceOp.AVG


def test_as_op_rejects_unknown_names_listing_the_valid_ones() -> None:
    expected = ("op='plus' is not a reduction op; valid: AVG, BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MIN, "
                "PRODUCT, SUM (any case), or ReduceOp.custom(fn)")
    with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
        as_op("plus")


@pytest.mark.parametrize("op, hint", [(3, "pass e.g. ReduceOp.SUM or 'sum'"),
                                      (max, "wrap it as ReduceOp.custom(fn, commutative=...)")])
def test_as_op_rejects_other_types_with_a_hint(op: object, hint: str) -> None:
    with pytest.raises(TypeError, match=f"^op={re.escape(repr(op))} is a {type(op).__name__}, not a "
                                        f"ReduceOp; {re.escape(hint)}$"):
        as_op(op)


def test_a_custom_op_runs_in_a_collective() -> None:
    async def main(comm: sc.Comm) -> Any:
        return await comm.all_reduce(comm.rank, op=ReduceOp.custom(max, name="biggest"))

    assert list(sc.run(main, world_size=3)) == [2, 2, 2]
