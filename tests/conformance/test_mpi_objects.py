"""simcluster.MPI's object model: communicators, attributes, error handlers, errors, Info, ops.

Each behaviour was checked against the real mpi4py 4.1.2 on MPICH under
``mpiexec``; the values asserted are the ones every rank sees.
"""

from __future__ import annotations

import copy
import pickle
import weakref
from typing import Any

import pytest

import simcluster as sc
from simcluster import MPI

# ---- communicators ----


def split_with_bool_color(comm: MPI.Intracomm) -> tuple[int, int, int]:
    by_bool = comm.Split(color=comm.rank % 2 == 1, key=-comm.rank)
    by_int = comm.Split(color=True)
    return by_bool.size, by_bool.rank, by_int.size


def test_split_takes_a_bool_color_as_0_or_1_like_mpi4py() -> None:
    got = sc.run(split_with_bool_color, world_size=4)
    assert list(got) == [(2, 1, 4), (2, 1, 4), (2, 0, 4), (2, 0, 4)]


def split_errors(comm: MPI.Intracomm) -> list[str]:
    out = []
    for color in (-5, "red"):
        try:
            comm.Split(color)
        except (MPI.Exception, TypeError) as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def test_split_refuses_negative_and_non_integer_colors_naming_the_rank() -> None:
    got = sc.run(split_errors, world_size=2)
    for rank, (negative, text) in enumerate(got):
        assert negative.startswith(f"MPIValueError: rank {rank}: Split(color=-5, key=0): color must "
                                   "be an int >= 0 or MPI.UNDEFINED")
        assert text.startswith(f"TypeError: rank {rank}: Split(color='red', key=0): color and key "
                               "must be integers")


def create_from_group(comm: MPI.Intracomm) -> tuple[int, int, int, bool]:
    group = comm.Get_group().Excl([0]) if comm.size > 1 else comm.Get_group()
    if group.rank == MPI.UNDEFINED:
        return -1, -1, -1, False
    new = MPI.Intracomm.Create_from_group(group, "org.example")
    got = (new.size, new.rank, MPI.Comm.Compare(comm, new),
           new.Get_errhandler() == MPI.ERRORS_RETURN)
    total = new.allreduce(new.rank)
    new.Free()
    return got[0], got[1], total, got[3]


def test_create_from_group_is_collective_over_the_members_only() -> None:
    got = sc.run(create_from_group, world_size=3)
    assert list(got) == [(-1, -1, -1, False), (2, 0, 1, True), (2, 1, 1, True)]


def handles(comm: MPI.Intracomm) -> dict[str, Any]:
    group = comm.Get_group()
    group.Free()
    clone = MPI.Intracomm(MPI.COMM_WORLD)
    clone.free()
    dup = comm.Dup()
    return {
        "null name": MPI.COMM_NULL.Get_name(),
        "freed group is null": group == MPI.GROUP_NULL,
        "world pickles to itself": pickle.loads(pickle.dumps(MPI.COMM_WORLD)) is MPI.COMM_WORLD,
        "copy pickles equal": pickle.loads(pickle.dumps(MPI.Intracomm(MPI.COMM_WORLD)))
        == MPI.COMM_WORLD,
        "copy.copy(COMM_SELF)": copy.copy(MPI.COMM_SELF) is MPI.COMM_SELF,
        "freed clone": (bool(clone), bool(MPI.COMM_WORLD)),
        "weakref": weakref.ref(dup)() is dup,
        "dup pickle": _raises(lambda: pickle.dumps(dup)),
        "hash": _raises(lambda: hash(dup)),
        "bad constructor": _raises(lambda: MPI.Comm((1, 2))),
    }


def _raises(fn: Any) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test reports which
        return type(exc).__name__
    return "no error"


def test_handles_compare_pickle_and_free_as_in_mpi4py() -> None:
    for got in sc.run(handles, world_size=2):
        assert got == {
            "null name": "MPI_COMM_NULL", "freed group is null": True,
            "world pickles to itself": True, "copy pickles equal": True,
            "copy.copy(COMM_SELF)": True, "freed clone": (False, True), "weakref": True,
            "dup pickle": "ValueError", "hash": "TypeError", "bad constructor": "TypeError",
        }


def info_hints(comm: MPI.Intracomm) -> tuple[str | None, str | None, str | None, str | None]:
    hinted = comm.Dup_with_info(MPI.Info.Create({"mpi_assert_no_any_tag": "true", "x": "y"}))
    plain = hinted.Dup()
    _, req = comm.Idup_with_info(MPI.INFO_NULL)
    req.Wait()
    info = hinted.Get_info()
    return (info.Get("mpi_assert_no_any_tag"), info.Get("x"),
            plain.Get_info().Get("mpi_assert_no_any_tag"), comm.Get_info().Get("mpi_assert_no_any_tag"))


def test_comm_info_keeps_mpi4_assertions_and_drops_unknown_keys_like_mpich() -> None:
    assert list(sc.run(info_hints, world_size=2)) == [("true", None, "true", "false")] * 2


def split_types(comm: MPI.Intracomm) -> tuple[int, int, bool, bool, int, str | None, bool]:
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    guided = comm.Split_type(MPI.COMM_TYPE_HW_GUIDED,
                             info=MPI.Info.Create({"mpi_hw_resource_type": "mpi_shared_memory"}))
    other = comm.Split_type(MPI.COMM_TYPE_RESOURCE_GUIDED,
                            info=MPI.Info.Create({"mpi_hw_resource_type": "socket"}))
    no_info = comm.Split_type(MPI.COMM_TYPE_HW_GUIDED)
    info = MPI.Info.Create()
    unguided = comm.Split_type(MPI.COMM_TYPE_HW_UNGUIDED, info=info)
    below = unguided.Split_type(MPI.COMM_TYPE_HW_UNGUIDED)  # a node splits no further
    return (shared.size, guided.size, other == MPI.COMM_NULL, no_info == MPI.COMM_NULL,
            unguided.size, info.Get("mpi_hw_resource_type"), below == MPI.COMM_NULL)


def test_split_type_groups_the_ranks_of_a_simulated_node() -> None:
    got = sc.run(split_types, world_size=4, latency=sc.latency.Hierarchical(
        ranks_per_node=2, intra=sc.latency.Constant(1e-6), inter=sc.latency.Constant(1e-5)))
    assert list(got) == [(2, 2, True, True, 2, "mpi_shared_memory", True)] * 4


# ---- attributes ----


def attributes(comm: MPI.Intracomm) -> dict[str, Any]:
    calls: list[Any] = []

    def copy_fn(obj: MPI.Comm, keyval: int, value: Any) -> Any:
        calls.append(("copy", value))
        return value * 10

    def delete_fn(obj: MPI.Comm, keyval: int, value: Any) -> None:
        calls.append(("delete", value))

    kv = MPI.Comm.Create_keyval(copy_fn, delete_fn)
    shared = MPI.Comm.Create_keyval(True)
    dropped = MPI.Comm.Create_keyval(lambda o, k, v: NotImplemented)
    base = comm.Dup()
    base.Set_attr(kv, comm.rank + 1)
    base.Set_attr(kv, comm.rank + 2)  # replaces: the old value is deleted
    marker = ["shared"]
    base.Set_attr(shared, marker)
    base.Set_attr(dropped, "x")
    dup = base.Dup()
    got = {"copied": dup.Get_attr(kv), "shared": dup.Get_attr(shared) is marker,
           "dropped": dup.Get_attr(dropped), "unset": comm.Get_attr(kv)}
    dup.Free()
    base.Delete_attr(kv)
    got["calls"] = calls
    got["freed keyval"] = MPI.Comm.Free_keyval(kv) == MPI.KEYVAL_INVALID
    got["tag_ub"] = comm.Get_attr(MPI.TAG_UB)
    got["lastused"] = comm.Get_attr(MPI.LASTUSEDCODE) == MPI.ERR_LASTCODE
    return got


def test_attribute_callbacks_run_on_dup_free_delete_and_replace() -> None:
    for rank, got in enumerate(sc.run(attributes, world_size=2)):
        value = rank + 2
        assert got == {
            "copied": value * 10, "shared": True, "dropped": None, "unset": None,
            "calls": [("delete", rank + 1), ("copy", value), ("delete", value * 10),
                      ("delete", value)],
            "freed keyval": True, "tag_ub": 2**31 - 1, "lastused": True,
        }


def attribute_errors(comm: MPI.Intracomm) -> list[str]:
    out = []

    def bad_delete(obj: Any, keyval: int, value: Any) -> None:
        raise ValueError("nope")

    kv = MPI.Comm.Create_keyval(None, bad_delete)
    comm.Set_attr(kv, 1)
    for fn in (lambda: comm.Delete_attr(kv), lambda: comm.Get_attr(MPI.KEYVAL_INVALID),
               lambda: comm.Set_attr(MPI.TAG_UB, 5),
               lambda: MPI.INT.Get_attr(MPI.Comm.Create_keyval())):
        try:
            fn()
        except MPI.Exception as exc:
            out.append(f"{exc.Get_error_class()}: {exc}")
    out.append(str(comm.Get_attr(kv)))
    return out


def test_attribute_errors_name_the_rank_the_call_and_the_mpich_class(
        capfd: pytest.CaptureFixture[str]) -> None:
    for rank, got in enumerate(sc.run(attribute_errors, world_size=2)):
        delete, invalid, predefined, wrong_kind, after = got
        assert delete.startswith(f"{MPI.ERR_OTHER}: rank {rank}: Delete_attr(")
        assert "the attribute callback bad_delete raised ValueError('nope')" in delete
        assert invalid.startswith(f"{MPI.ERR_KEYVAL}: rank {rank}: Get_attr({MPI.KEYVAL_INVALID}): "
                                  "keyval 603979776 is KEYVAL_INVALID; use a keyval from "
                                  "Comm.Create_keyval()")
        assert "is a predefined attribute, which cannot be set or deleted" in predefined
        assert "is a keyval of Comm; use a keyval from Datatype.Create_keyval()" in wrong_kind
        assert after == "None"  # the attribute is gone even though its delete_fn raised
    assert "ValueError: nope" in capfd.readouterr().err


def datatype_attributes(comm: MPI.Intracomm) -> tuple[Any, Any]:
    kv = MPI.Datatype.Create_keyval(copy_fn=True)
    t = MPI.INT.Dup()
    t.Set_attr(kv, "a")
    return t.Dup().Get_attr(kv), MPI.FLOAT.Get_attr(kv)


def test_datatypes_cache_attributes_too() -> None:
    assert list(sc.run(datatype_attributes, world_size=1)) == [("a", None)]


# ---- error handlers ----


def errhandlers(comm: MPI.Intracomm) -> dict[str, Any]:
    seen: list[tuple[bool, int]] = []
    eh = MPI.Comm.Create_errhandler(lambda c, code: seen.append((c == dup, code)))
    dup = comm.Dup()
    before = dup.Get_errhandler()
    dup.Set_errhandler(eh)
    dup.Call_errhandler(MPI.ERR_OTHER)
    child = dup.Dup()
    got = {"default": before == MPI.ERRORS_RETURN, "seen": seen,
           "inherited": child.Get_errhandler() == eh}
    dup.Set_errhandler(MPI.ERRORS_RETURN)
    dup.Call_errhandler(MPI.ERR_OTHER)  # returns
    handle = dup.Get_errhandler()
    handle.Free()
    got["freed handle"] = (handle == MPI.ERRHANDLER_NULL, dup.Get_errhandler() == MPI.ERRORS_RETURN)
    got["null"] = _raises(lambda: dup.Set_errhandler(MPI.ERRHANDLER_NULL))
    got["pickle"] = pickle.loads(pickle.dumps(MPI.ERRORS_RETURN)) is MPI.ERRORS_RETURN
    eh.Free()
    return got


def test_error_handlers_get_set_inherit_and_call() -> None:
    for got in sc.run(errhandlers, world_size=2):
        assert got == {"default": True, "seen": [(True, MPI.ERR_OTHER)], "inherited": True,
                       "freed handle": (True, True), "null": "MPIError", "pickle": True}


def fatal(comm: MPI.Intracomm) -> None:
    comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
    if comm.rank == 1:
        comm.Call_errhandler(MPI.ERR_OTHER)
    comm.Barrier()


def test_errors_are_fatal_ends_the_run_with_the_code() -> None:
    with pytest.raises(sc.errors.Aborted) as info:
        sc.run(fatal, world_size=2)
    assert info.value.code == MPI.ERR_OTHER


def too_many_handlers(comm: MPI.Intracomm) -> str:
    made = [MPI.Comm.Create_errhandler(lambda c, e: None) for _ in range(32)]
    try:
        MPI.Comm.Create_errhandler(lambda c, e: None)
    except RuntimeError as exc:
        text = str(exc)
    for eh in made:
        eh.Free()
    MPI.Comm.Create_errhandler(lambda c, e: None).Free()  # a slot is free again
    return text


def test_each_rank_holds_at_most_32_user_error_handlers() -> None:
    for rank, text in enumerate(sc.run(too_many_handlers, world_size=2)):
        assert text == (f"rank {rank}: Comm.Create_errhandler(): cannot create more than 32 "
                        "user-defined error handlers for communicators at once (mpi4py's limit); "
                        "Free() error handlers you no longer use")


# ---- error classes and codes ----


def error_classes(comm: MPI.Intracomm) -> dict[str, Any]:
    cls = MPI.Add_error_class()
    code = MPI.Add_error_code(cls)
    MPI.Add_error_string(code, f"code of rank {comm.rank}")
    got = {"class": cls - MPI.ERR_LASTCODE, "code": code - MPI.ERR_LASTCODE,
           "lastused": comm.Get_attr(MPI.LASTUSEDCODE) == code,
           "of": MPI.Get_error_class(code) == cls, "string": MPI.Get_error_string(code),
           "class string": MPI.Get_error_string(cls),
           "remove class first": _raises(lambda: MPI.Remove_error_class(cls))}
    MPI.Remove_error_string(code)
    MPI.Remove_error_code(code)
    MPI.Remove_error_class(cls)
    got["unknown"] = MPI.Exception(-7) == MPI.ERR_UNKNOWN
    return got


def test_user_error_classes_are_per_rank_as_per_process() -> None:
    for rank, got in enumerate(sc.run(error_classes, world_size=2)):
        assert got == {"class": 1, "code": 2, "lastused": True, "of": True,
                       "string": f"code of rank {rank}", "class string": "",
                       "remove class first": "MPIValueError", "unknown": True}


# ---- Info ----


def test_info_null_refuses_mpi_calls_and_acts_as_an_empty_mapping() -> None:
    null = MPI.INFO_NULL
    with pytest.raises(MPI.Exception) as info:
        null.Get("k")
    assert info.value.Get_error_class() == MPI.ERR_ARG
    assert str(info.value) == ("Info.Get('k'): the info is INFO_NULL or was freed; "
                               "use MPI.Info.Create()")
    assert (len(null), null.keys(), null.get("k", "d"), null.pop("k", None)) == (0, [], "d", None)
    with pytest.raises(KeyError):
        null["k"] = "v"
    assert pickle.loads(pickle.dumps(null)) is null
    assert pickle.loads(pickle.dumps(MPI.Info())) == null


def test_info_errors_carry_mpich_classes() -> None:
    info = MPI.Info.Create({"a": "1"})
    codes = []
    for fn in (lambda: info.Delete("b"), lambda: info.Get_nthkey(3), lambda: info.Set("k" * 300, "v")):
        with pytest.raises(MPI.Exception) as caught:
            fn()
        codes.append(caught.value.Get_error_class())
    assert codes == [MPI.ERR_INFO_NOKEY, MPI.ERR_ARG, MPI.ERR_INFO_KEY]
    copied = pickle.loads(pickle.dumps(info))
    assert copied.items() == [("a", "1")] and copied != info
    info.Free()
    assert info == MPI.INFO_NULL
    assert MPI.Get_hw_resource_info().Get("mpi_hw_resource_type") == "mpi_shared_memory"


# ---- ops ----


def test_op_null_cannot_reduce_and_predefined_ops_pickle_to_themselves() -> None:
    with pytest.raises(ValueError, match=r"^MPI_OP_NULL\(x, y\): a null or freed op cannot reduce"):
        MPI.OP_NULL(1, 2)
    assert pickle.loads(pickle.dumps(MPI.SUM)) is MPI.SUM
    copied = pickle.loads(pickle.dumps(MPI.Op(MPI.MAX)))
    assert copied == MPI.MAX and copied is not MPI.MAX
    with pytest.raises(TypeError):
        hash(MPI.SUM)


def too_many_ops(comm: MPI.Intracomm) -> str:
    ops = [MPI.Op.Create(lambda a, b, t: None) for _ in range(32)]
    try:
        MPI.Op.Create(lambda a, b, t: None)
    except RuntimeError as exc:
        return str(exc)
    finally:
        for op in ops:
            op.Free()
    return "no error"


def test_each_rank_holds_at_most_32_user_ops() -> None:
    for rank, text in enumerate(sc.run(too_many_ops, world_size=2)):
        assert text.startswith(f"rank {rank}: Op.Create(): cannot create more than 32 "
                               "user-defined ops at once")


def codec_per_rank(comm: MPI.Intracomm) -> Any:
    if comm.Get_rank() == 0:
        MPI.pickle.PROTOCOL = 2  # swaps this rank's codec only, as in its own MPI process
    comm.Barrier()
    return MPI.pickle.PROTOCOL, comm.bcast({"from": 0}, root=0)


def test_each_rank_has_its_own_pickle_codec() -> None:
    assert list(sc.run(codec_per_rank, 2)) == [(2, {"from": 0}), (pickle.HIGHEST_PROTOCOL, {"from": 0})]
