"""Derived datatypes through ``simcluster.MPI``: layouts, envelopes, packing, and moving data.

Bounds and contents are checked against what MPICH reports for the same
constructors; sends and collectives of structs and strided vectors are
checked on every rank: the typemap decides which bytes move.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import simcluster as sc
from simcluster import MPI

PARTICLE = np.dtype([("pos", "f8", 3), ("vel", "f4", 2), ("id", "i4")], align=True)


def particle_type() -> MPI.Datatype:
    offsets = [PARTICLE.fields[name][1] for name in PARTICLE.names]
    struct = MPI.Datatype.Create_struct([3, 2, 1], offsets, [MPI.DOUBLE, MPI.FLOAT, MPI.INT])
    resized = struct.Create_resized(0, PARTICLE.itemsize).Commit()
    struct.Free()
    return resized


@pytest.mark.parametrize(("make", "lb_extent", "true", "size"), [
    (lambda: MPI.DOUBLE.Create_vector(3, 2, 4), (0, 80), (0, 80), 48),
    (lambda: MPI.DOUBLE.Create_hvector(2, 1, 3), (0, 11), (0, 11), 16),
    (lambda: MPI.DOUBLE.Create_indexed([1, 2], [5, 0]), (0, 48), (0, 48), 24),
    (lambda: MPI.DOUBLE.Create_hindexed_block(2, [5, 0]), (0, 21), (0, 21), 32),
    (lambda: MPI.DOUBLE.Create_subarray([4, 5], [2, 3], [1, 1]), (0, 160), (48, 64), 48),
    (lambda: MPI.DOUBLE.Create_subarray([4, 5], [2, 3], [1, 1], MPI.ORDER_F), (0, 160), (40, 80), 48),
    (lambda: MPI.DOUBLE.Create_resized(-3, 5), (-3, 5), (0, 8), 8),
    # a struct is padded to its widest member's alignment, unless a member was resized
    (lambda: MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT]), (0, 16), (0, 12), 12),
    (lambda: MPI.Datatype.Create_struct([1, 1], [0, 16], [MPI.LONG_DOUBLE, MPI.CHAR]), (0, 32), (0, 17),
     17),
    (lambda: MPI.Datatype.Create_struct([1], [0], [MPI.DOUBLE.Create_resized(0, 12)]), (0, 12), (0, 8), 8),
    (lambda: MPI.Datatype.Create_struct([2], [3], [MPI.INT]), (3, 8), (3, 8), 8),
    (lambda: MPI.DOUBLE.Create_darray(4, 1, [8, 8], [MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_CYCLIC],
                                      [MPI.DISTRIBUTE_DFLT_DARG, 2], [2, 2]), (0, 512), (16, 240), 128),
])
def test_bounds_and_sizes_are_mpichs(make, lb_extent, true, size) -> None:
    dt = make()
    assert (dt.Get_extent(), dt.Get_true_extent(), dt.Get_size()) == (lb_extent, true, size)
    assert (dt.lb, dt.ub, dt.extent, dt.size) == (lb_extent[0], sum(lb_extent), lb_extent[1], size)
    assert not dt.is_named and not dt.is_predefined


def test_envelope_contents_and_decode_rebuild_the_type() -> None:
    vec = MPI.DOUBLE.Create_vector(3, 2, 4)
    assert vec.Get_envelope() == (0, 0, 3, 1, MPI.COMBINER_VECTOR)  # MPICH: counts are large counts
    ints, addrs, counts, types = vec.Get_contents()
    assert (ints, addrs, counts, types) == ([], [], [3, 2, 4], [MPI.DOUBLE])
    sub = MPI.INT.Create_subarray([4, 5], [2, 3], [1, 1])
    assert sub.Get_contents()[:3] == ([2, MPI.ORDER_C], [], [4, 5, 2, 3, 1, 1])
    struct = MPI.Datatype.Create_struct([1, 2], [0, 8], [MPI.INT, vec])
    old, name, kwargs = struct.decode()
    assert (old, name) == (MPI.DATATYPE_NULL, "STRUCT")
    again = MPI.Datatype.Create_struct(**kwargs)
    assert (again.Get_extent(), again.size) == (struct.Get_extent(), struct.size)
    kwargs["datatypes"][1].Free()  # a new handle: freeing it leaves vec alone
    assert vec.Get_size() == 48 and vec.Dup().decode()[1:] == ("DUP", {})
    assert MPI.DOUBLE.decode() == (MPI.DOUBLE, "NAMED", {})
    copy = pickle.loads(pickle.dumps(struct))
    assert copy != struct and copy.Get_envelope() == struct.Get_envelope()


def test_type_codes_f90_types_and_match_size() -> None:
    assert (MPI.DOUBLE.Dup().typechar, MPI.DOUBLE.Dup().typestr) == ("d", "f8")
    assert (MPI.DOUBLE.Create_contiguous(3).typechar, MPI.DOUBLE.Create_contiguous(3).typestr) == \
        ("V", "V24")
    with pytest.raises(ValueError, match="cannot map to character code"):
        MPI.TWOINT.tocode()
    real = MPI.Datatype.Create_f90_real(15, 300)
    assert (real.size, real.typechar, real.is_named, real.is_predefined) == (8, "d", False, True)
    assert real is MPI.Datatype.Create_f90_real(15, 300)
    assert MPI.Datatype.Match_size(MPI.TYPECLASS_INTEGER, 4) is MPI.INTEGER4
    assert MPI.Datatype.Get_value_index(MPI.DOUBLE, MPI.INT) is MPI.DOUBLE_INT
    assert MPI.Datatype.Get_value_index(MPI.INT, MPI.SHORT) == MPI.DATATYPE_NULL


def _struct_and_vector(comm: MPI.Intracomm) -> list[object]:
    ptype = particle_type()
    mine = np.zeros(2, PARTICLE)
    mine["pos"] = comm.rank + np.arange(6.0).reshape(2, 3)
    mine["vel"] = -comm.rank
    mine["id"] = [10 * comm.rank, 10 * comm.rank + 1]
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    got = np.zeros(2, PARTICLE)
    status = MPI.Status()
    comm.Sendrecv([mine, ptype], right, 3, [got, ptype], left, 3, status)
    everyone = np.zeros(2 * comm.size, PARTICLE)
    comm.Allgather([mine, ptype], [everyone, ptype])
    # every other double of 8: items of a strided vector, reduced in place of the gaps
    every_other = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
    x = np.arange(8.0) + comm.rank
    y = np.full(8, -1.0)
    comm.Allreduce([x, 1, every_other], [y, 1, every_other], op=MPI.SUM)
    return [got["id"].tolist(), got["pos"][1].tolist(), status.Get_count(ptype),
            everyone["id"].tolist(), y.tolist()]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_structs_and_vectors_move_only_their_elements(n: int) -> None:
    results = sc.run(_struct_and_vector, world_size=n)
    s = n * (n - 1) // 2
    for rank, (ids, pos, count, everyone, y) in enumerate(results):
        left = (rank - 1) % n
        assert ids == [10 * left, 10 * left + 1]
        assert pos == [left + 3.0, left + 4.0, left + 5.0]
        assert count == 2
        assert everyone == [i for r in range(n) for i in (10 * r, 10 * r + 1)]
        assert y == [n * v + s if k % 2 == 0 else -1.0 for k, v in enumerate(np.arange(8.0))]


def _pack_round_trip(comm: MPI.Intracomm) -> list[object]:
    ptype = particle_type()
    parts = np.zeros(3, PARTICLE)
    parts["id"] = [comm.rank, 5, 7]
    parts["pos"][:, 0] = 1.5
    ints = np.arange(4, dtype="i4") + comm.rank
    buf = bytearray(ptype.Pack_size(3, comm) + MPI.INT.Pack_size(4, comm))
    pos = ptype.Pack(parts, buf, 0, comm)
    pos = MPI.INT.Pack(ints, buf, pos, comm)
    back, ints2 = np.zeros(3, PARTICLE), np.zeros(4, "i4")
    at = MPI.INT.Unpack(buf, ptype.Unpack(buf, 0, back, comm), ints2, comm)
    ext = bytearray(MPI.INT.Pack_external_size("external32", 2))
    MPI.INT.Pack_external("external32", np.array([1, 258], "i4"), ext, 0)
    return [pos, at, back["id"].tolist(), back["pos"][:, 0].tolist(), ints2.tolist(), bytes(ext).hex()]


def test_pack_and_unpack_round_trip_on_every_rank() -> None:
    for rank, (pos, at, ids, xs, ints, ext) in enumerate(sc.run(_pack_round_trip, world_size=2)):
        assert pos == at == 3 * (3 * 8 + 2 * 4 + 4) + 16
        assert (ids, xs, ints) == ([rank, 5, 7], [1.5] * 3, [rank, rank + 1, rank + 2, rank + 3])
        assert ext == "0000000100000102"  # external32 is big-endian


def test_addresses() -> None:
    x = np.zeros(4)
    assert MPI.Get_address(x) == x.ctypes.data
    assert MPI.Get_address(None) == MPI.Get_address(MPI.BOTTOM) == 0
    assert MPI.Aint_diff(MPI.Aint_add(MPI.Get_address(x), 16), MPI.Get_address(x)) == 16
    assert MPI.Aint_add(2**63 - 1, 1) == -2**63  # MPI_Aint wraps


def _uncommitted(comm: MPI.Intracomm) -> str:
    vec = MPI.DOUBLE.Create_vector(2, 1, 2)
    try:
        comm.Send([np.zeros(4), 1, vec], (comm.rank + 1) % comm.size)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_TYPE
        return str(exc)
    return "no error"


def test_an_uncommitted_type_is_err_type_naming_rank_and_fix() -> None:
    for rank, text in enumerate(sc.run(_uncommitted, world_size=2)):
        assert text.startswith(f"rank {rank}: Send(")
        assert "the datatype is not committed; call Commit() on it first" in text


def _unpack_short(comm: MPI.Intracomm) -> tuple[int, str]:
    try:
        MPI.DOUBLE.Unpack(bytearray(12), 0, np.zeros(2), comm)
    except MPI.Exception as exc:
        return exc.Get_error_class(), str(exc)
    return 0, "no error"


def test_unpacking_past_the_input_is_err_truncate() -> None:
    for rank, (cls, text) in enumerate(sc.run(_unpack_short, world_size=2)):
        assert cls == MPI.ERR_TRUNCATE
        assert text == (f"rank {rank}: MPI_DOUBLE.Unpack(): 2 items need 16 packed bytes from position 0 "
                        "but the input buffer has 12; unpack as many items as were packed (size the "
                        "output buffer to them)")


def test_constructor_errors() -> None:
    with pytest.raises(MPI.Exception, match="negative count -1") as caught:
        MPI.DOUBLE.Create_vector(-1, 1, 1)
    assert caught.value.Get_error_class() == MPI.ERR_COUNT
    with pytest.raises(ValueError, match="expecting 1 items, got 2"):
        MPI.Datatype.Create_struct([1], [0], [MPI.INT, MPI.FLOAT])
    with pytest.raises(MPI.Exception, match="a predefined datatype cannot be freed"):
        MPI.INT.Free()
    vec = MPI.INT.Create_contiguous(2)
    vec.Free()
    with pytest.raises(MPI.Exception, match="freed already"):
        vec.Free()
