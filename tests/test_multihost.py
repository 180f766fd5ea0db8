"""Several hosts, torchrun style: one ``simcluster run --nnodes N --node-rank K`` per host,
tried here with node processes on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
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


def test_two_nodes_on_loopback_run_one_world(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    port = _free_port()
    nodes = [_node(script, 1, port, env_addr=True), _node(script, 0, port)]
    outputs = [node.communicate(timeout=60) for node in nodes]
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
    expected = [f"rank {r}: [10, {(r - 1) % 4}, 6.0]" for r in range(4)]
    for out, _ in outputs:  # every node prints the whole run's result
        lines = out.splitlines()
        assert lines[:4] == expected
        assert lines[4].startswith("elapsed 0 s virtual, ")


def test_nodes_started_with_other_settings_are_refused(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    port = _free_port()
    nodes = [_node(script, 0, port), _node(script, 1, port, "--seed", "3")]
    outputs = [node.communicate(timeout=60) for node in nodes]
    assert [node.returncode for node in nodes] == [1, 1]
    for _, err in outputs:
        assert "node 1 was started with other settings than node 0" in err
        assert "seed=3" in err
