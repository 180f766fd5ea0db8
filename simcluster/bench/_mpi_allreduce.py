"""The mpi4py program behind ``simcluster bench mpi``: ``Allreduce`` of one-element arrays in a timed loop.

Run as a script under MPICH's ``mpiexec -n 4`` (the real mpi4py) or under
``simcluster mpirun -n 4``: ``python _mpi_allreduce.py CALLS ROUNDS``. Each
round starts after a ``Barrier`` and times ``CALLS`` calls of
``comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)`` on float64 arrays of one
element; rank 0 prints ``per-call-us <median over rounds>`` and
``cpu-per-call-us <median>`` (its process's CPU time: under simcluster, every
rank's work; under MPICH, one process's, polling included), after checking the
sum. Wall time is read with ``time.clock_gettime(CLOCK_MONOTONIC)``, which
simcluster leaves real (``time.perf_counter`` and ``MPI.Wtime`` read a rank's
virtual clock there).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from mpi4py import MPI


def _wall() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def main(calls: int, rounds: int) -> tuple[float, float]:
    """Return this rank's median wall and process CPU microseconds per call."""
    comm = MPI.COMM_WORLD
    sendbuf = np.full(1, float(comm.Get_rank() + 1))
    recvbuf = np.zeros(1)
    expect = comm.Get_size() * (comm.Get_size() + 1) / 2
    comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)  # warm-up
    per_call, cpu = [], []
    for _ in range(rounds):
        comm.Barrier()
        start, cpu_start = _wall(), time.process_time()
        for _ in range(calls):
            comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)
        per_call.append((_wall() - start) / calls * 1e6)
        cpu.append((time.process_time() - cpu_start) / calls * 1e6)
        if recvbuf[0] != expect:
            raise SystemExit(f"rank {comm.Get_rank()}: Allreduce gave {recvbuf[0]}, not {expect}")
    return statistics.median(per_call), statistics.median(cpu)


if __name__ == "__main__":
    us, cpu_us = main(int(sys.argv[1]), int(sys.argv[2]))
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"per-call-us {us:.3f}\ncpu-per-call-us {cpu_us:.3f}", flush=True)
