"""mpi4py's out-of-band pickles and communicator lock tables, as the real mpi4py 4.1.2 gives them.

(mpi4py's own ``test_util_pkl5`` and ``test_p2p_obj`` check the same under ``simcluster mpirun``
in the suite stage; these run in the default suite.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

import simcluster as sc
from simcluster import MPI


def test_dumps_oob_sends_large_buffers_out_of_band() -> None:
    codec = MPI.Pickle()
    assert (codec.PROTOCOL, codec.THRESHOLD) == (5, 262144)
    codec.PROTOCOL, codec.THRESHOLD = None, None  # back to the defaults, as mpi4py
    assert (codec.PROTOCOL, codec.THRESHOLD) == (5, 262144)
    codec.THRESHOLD = 0
    data, buffers = codec.dumps_oob(np.arange(4))
    assert type(data) is bytes and [type(b) for b in buffers] == [MPI.buffer]
    assert len(buffers[0]) == 32 and not buffers[0].readonly
    assert codec.loads_oob(data, buffers).tolist() == [0, 1, 2, 3]
    codec.THRESHOLD = 1000
    assert codec.dumps_oob(np.arange(4))[1] == []  # 32 bytes: in band
    old = MPI.Pickle(protocol=2)  # out of band needs protocol 5: taken whatever PROTOCOL says
    old.THRESHOLD = -1
    assert [len(old.dumps_oob(x)[1]) for x in (np.empty(0), b"abc", bytearray(b"abc"))] == [1, 0, 0]
    assert len(MPI.pickle.dumps_oob(np.zeros(300_000))[1]) == 1  # 2.4 MB >= the default threshold


def test_pkl5_carries_an_array_out_of_band_between_ranks() -> None:
    def main(comm: Any) -> Any:
        from simcluster.MPI.util import pkl5

        world = pkl5.Intracomm(MPI.COMM_WORLD)
        pkl5.pickle.THRESHOLD = 0
        if world.Get_rank() == 0:
            world.send({"x": np.arange(1000.0)}, dest=1, tag=7)
            return None
        status = MPI.Status()
        got = world.recv(source=0, tag=7, status=status)
        return float(got["x"].sum()), status.Get_count(MPI.BYTE) > 8000

    assert list(sc.run(main, world_size=2)) == [None, (499500.0, True)]


def test_the_lowercase_collectives_make_their_locks_in_the_communicators_table() -> None:
    def main(comm: Any) -> Any:
        dup = MPI.COMM_WORLD.Dup()
        table = MPI._comm_lock_table(dup)
        seen = [sorted(table)]
        dup.bcast(1)
        seen.append(sorted(table))
        size = dup.Get_size()
        dup.gather(1), dup.scatter([1] * size), dup.allgather(1), dup.alltoall([1] * size)
        dup.allreduce(1)
        seen.append(sorted(table))
        lock = MPI._comm_lock(dup)
        seen.append((type(lock).__name__, lock is MPI._comm_lock(dup), MPI._comm_lock_table(MPI.Comm(dup)) is table))
        dup.Free()
        seen.append(MPI._comm_lock_table(MPI.COMM_WORLD))
        return seen

    for seen in sc.run(main, world_size=2):
        assert seen == [[], ["bcast"], ["@commctx_intra", "allgather", "alltoall", "bcast", "gather", "scatter"],
                        ("lock", True, True), {}]
