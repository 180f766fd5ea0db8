"""wait_any: serve whichever neighbour answers first.

Rank 0 is a server; ranks 1, 2 and 3 each think for a while (1: 3 ms,
2: 1 ms, 3: 2 ms, modelled with ``comm.sleep``), then send rank 0 a question
and wait for its answer. Every message takes 10 us.

What you will see:

* with ``sc.wait_any``: rank 0 posts one ``irecv`` per neighbour and waits
  for *any* of them. It serves each neighbour as soon as its question
  arrives: rank 2 at 1.01 ms, rank 3 at 2.01 ms, rank 1 at 3.01 ms, so
  nobody waits longer than it must.
* in rank order (``recv(src=1)``, then ``recv(src=2)``, ...): rank 0 sits in
  ``recv(src=1)`` until 3 ms although rank 2's question has been waiting
  since 1 ms. Ranks 2 and 3 get their answers late.

``wait_any`` returns ``(index, value)`` of a completed request; remove that
request from the list before the next call, or you would get it again.

Run it with

    python examples/teaching/04_wait_any.py
"""

import simcluster as sc

LATENCY = sc.latency.Constant(10e-6)  # 10 us per message
THINK = {1: 3e-3, 2: 1e-3, 3: 2e-3}  # seconds each neighbour thinks before asking


def think(rank: int) -> float:
    """Return how long ``rank`` thinks; ranks past 3 (with -n 5 or more) think rank ms."""
    return THINK.get(rank, rank * 1e-3)
QUESTION, ANSWER = 1, 2  # tags


async def serve_first_come(comm: sc.Comm) -> None:
    sources = [src for src in range(1, comm.size)]
    reqs = [comm.irecv(src=src, tag=QUESTION) for src in sources]
    while reqs:
        index, question = await sc.wait_any(reqs)
        src = sources.pop(index)  # drop the completed request
        reqs.pop(index)
        print(f"   {comm.now * 1e3:.3f} ms: rank 0 got {question!r} from rank {src}, answers it")
        await comm.send(f"answer to rank {src}", src, tag=ANSWER)


async def serve_in_rank_order(comm: sc.Comm) -> None:
    for src in range(1, comm.size):
        question = await comm.recv(src=src, tag=QUESTION)
        print(f"   {comm.now * 1e3:.3f} ms: rank 0 got {question!r} from rank {src}, answers it")
        await comm.send(f"answer to rank {src}", src, tag=ANSWER)


async def main(comm: sc.Comm, first_come: bool = True) -> float | None:
    if comm.rank == 0:
        await (serve_first_come(comm) if first_come else serve_in_rank_order(comm))
        return None
    await comm.sleep(think(comm.rank))
    await comm.send(f"question from rank {comm.rank}", 0, tag=QUESTION)
    await comm.recv(src=0, tag=ANSWER)
    return comm.now  # when this neighbour got its answer


def report(result: sc.RunResult) -> None:
    for rank in range(1, len(result)):
        asked = think(rank) * 1e3
        print(f"   rank {rank} asked at {asked:.3f} ms, got its answer at {result[rank] * 1e3:.3f} ms")


if __name__ == "__main__":
    print("1) wait_any: serve whoever asks first")
    report(sc.run(main, world_size=4, latency=LATENCY))
    print()
    print("2) recv in rank order: serve rank 1, then 2, then 3")
    report(sc.run(main, world_size=4, kwargs={"first_come": False}, latency=LATENCY))
    print()
    print("with wait_any each answer comes 20 us after its question (two 10 us messages);")
    print("in rank order ranks 2 and 3 wait for rank 1, the slowest thinker")
