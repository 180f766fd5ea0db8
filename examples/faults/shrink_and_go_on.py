"""An mpi4py program that loses a rank and finishes its computation with the survivors (ULFM).

    simcluster mpirun -n 4 --faults crash:2@all_reduce#3 examples/faults/shrink_and_go_on.py

Every rank adds up its share of 1..N, one block per round, with an
``allreduce`` per round. When a rank fails, the survivors' ``allreduce``
raises ``ERR_PROC_FAILED``; they revoke the communicator, acknowledge the
failure, shrink to the live ranks and redo the rounds the lost rank owned.
The total is the same as without the failure.
"""

from mpi4py import MPI

N = 1000
ROUNDS = 4


def share(rank: int, size: int, round_: int) -> int:
    """The sum of this rank's numbers in one round: 1..N split in ROUNDS x size blocks."""
    per = N // (ROUNDS * size)
    lo = (round_ * size + rank) * per + 1
    hi = N if (round_ == ROUNDS - 1 and rank == size - 1) else lo + per - 1
    return sum(range(lo, hi + 1))


comm = MPI.COMM_WORLD
done = 0  # rounds whose total every survivor has
total = 0
while done < ROUNDS:
    try:
        total_round = comm.allreduce(share(comm.Get_rank(), comm.Get_size(), done))
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_PROC_FAILED
        comm.Revoke()
        comm.Ack_failed()
        failed = comm.Get_failed()
        lost = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), comm.Get_group())
        comm = comm.Shrink()
        if comm.Get_rank() == 0:
            print(f"lost rank {lost[0]} in round {done}; going on with {comm.Get_size()} ranks")
        total = done = 0  # the blocks are split anew among the survivors: start the sum again
        continue
    total += total_round
    done += 1

if comm.Get_rank() == 0:
    print(f"sum of 1..{N} = {total} (expected {N * (N + 1) // 2})")
