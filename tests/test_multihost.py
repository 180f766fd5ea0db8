"""Several hosts, torchrun style: one ``simcluster run --nnodes N --node-rank K`` per host,
tried here with node processes on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

SCRIPT = textwrap.dedent('''
    """Each rank adds its number; a ring passes ranks around; arrays cross the nodes."""
    import numpy as np

    async def main(comm):
        total = await comm.all_reduce(comm.rank + 1)
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        got = await comm.sendrecv(comm.rank, right, src=left)
        x = np.full(50_000, float(comm.rank))  # 400 kB: a rendezvous between nodes
        await comm.all_reduce(x)
        return [total, got, float(x[0])]
''')

RAISES = textwrap.dedent('''
    async def main(comm):
        await comm.barrier()
        if comm.rank == 3:  # on node 1
            raise ValueError("bad input on rank 3")
        await comm.barrier()
''')

NODE_0_DIES = textwrap.dedent('''
    import os
    import signal

    async def main(comm):
        await comm.barrier()
        if comm.rank == 0:  # node 0: the coordinator's process goes away mid-run
            os.kill(os.getpid(), signal.SIGKILL)
        await comm.barrier()
''')


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node(script: Path, rank: int, port: int, *extra: str, env_addr: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "SIMCLUSTER_SECRET": "multihost test"}
    cmd = [sys.executable, "-m", "simcluster", "run", str(script), "-n", "4", "--nnodes", "2",
           "--node-rank", str(rank), *extra]
    if env_addr:  # as torchrun: the rendezvous address from the environment
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    else:
        cmd += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@dataclass
class Ended:
    """How one node process ended."""

    node: int
    code: int | None
    out: str
    err: str


def _wait(nodes: dict[int, subprocess.Popen[str]]) -> tuple[dict[int, Ended], str]:
    """Wait for every node (killing one that hangs); return how each ended, and a text showing
    every node's exit code, stdout and stderr for assertion messages."""
    ended = {}
    for rank, node in nodes.items():
        try:
            out, err = node.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            out, err = node.communicate()
            err += "\n[the test killed this node: it ran for more than 60 s]"
        ended[rank] = Ended(rank, node.returncode, out, err)
    shown = "".join(f"\n---- node {e.node}: exit code {e.code}\n-- stdout:\n{e.out}"
                    f"-- stderr:\n{e.err}" for e in sorted(ended.values(), key=lambda e: e.node))
    return ended, shown


def _start(tmp_path: Path, text: str, *extra1: str) -> dict[int, subprocess.Popen[str]]:
    script = tmp_path / "job.py"
    script.write_text(text)
    port = _free_port()
    return {1: _node(script, 1, port, *extra1, env_addr=True), 0: _node(script, 0, port)}


def test_two_nodes_on_loopback_run_one_world(tmp_path: Path) -> None:
    ended, shown = _wait(_start(tmp_path, SCRIPT))
    assert [ended[0].code, ended[1].code] == [0, 0], shown
    expected = [f"rank {r}: [10, {(r - 1) % 4}, 6.0]" for r in range(4)]
    for node in ended.values():  # every node prints the whole run's result
        lines = node.out.splitlines()
        assert lines[:4] == expected, shown
        assert lines[4].startswith("elapsed 0 s virtual, "), shown
        assert node.err == "", shown


def test_nodes_started_with_other_settings_are_refused(tmp_path: Path) -> None:
    ended, shown = _wait(_start(tmp_path, SCRIPT, "--seed", "3"))
    assert [ended[0].code, ended[1].code] == [1, 1], shown
    for node in ended.values():
        assert "node 1 was started with other settings than node 0" in node.err, shown
        assert "seed=3" in node.err, shown


def test_rank_error_on_one_node_is_reported_by_both(tmp_path: Path) -> None:
    ended, shown = _wait(_start(tmp_path, RAISES))
    assert [ended[0].code, ended[1].code] == [1, 1], shown
    for node in ended.values():  # each shows the traceback its message points at
        assert node.err.endswith("simcluster run: rank 3: run: raised ValueError: bad input on "
                                 "rank 3; the other ranks were cancelled; see the traceback "
                                 "above\n"), shown
        assert 'raise ValueError("bad input on rank 3")\nValueError: bad input on rank 3\n' \
            in node.err, shown


def test_node_1_reports_a_coordinator_that_dies_mid_run(tmp_path: Path) -> None:
    ended, shown = _wait(_start(tmp_path, NODE_0_DIES))
    assert ended[0].code == -9, shown  # SIGKILL
    assert ended[1].code == 1, shown
    assert ("lost node 0 (the coordinator at 127.0.0.1:" in ended[1].err
            and "before the run finished" in ended[1].err), shown
