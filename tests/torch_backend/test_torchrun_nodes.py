"""simcluster torchrun --nnodes N: every node's agent in this one process, each rank a process of its node.

The two-node job is compared with two real torchrun agents on this machine
(``--rdzv-backend c10d``, gloo, real processes), rank by rank: the
environment each worker gets and an all_reduce. Host names differ by design
(the real agents share this machine's), so they are checked on the
simcluster side: ranks of one node share one, ranks of two nodes do not.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="simcluster torchrun needs torch: pip install 'simcluster[torch]'")

from simcluster import _identity, cli  # noqa: E402
from simcluster.torchrun import rank_environment  # noqa: E402

# what torchrun's agents set for a worker (torch 2.13: LocalElasticAgent._start_workers)
NAMES = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
         "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
         "TORCHELASTIC_MAX_RESTARTS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
         "TORCHELASTIC_ERROR_FILE")

WORKER = f"""
    import json
    import os
    import socket
    import sys

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (socket.gethostname(), os.getpid()))
    sys.stdout.write(json.dumps({{
        "env": {{name: os.environ.get(name) for name in {NAMES!r}}},
        "sum": total.item(), "host": socket.gethostname(), "pid": os.getpid(),
        "gathered": gathered,
    }}) + "\\n")
    dist.destroy_process_group()
"""


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def script(tmp_path: Path, source: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def torchrun(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = cli.main(["torchrun", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def by_rank(out: str) -> dict[int, dict[str, Any]]:
    dumps = [json.loads(line) for line in out.splitlines()]
    return {int(dump["env"]["RANK"]): dump for dump in dumps}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _launch_environment() -> dict[str, str]:
    """This process's environment, less what torchrun sets for a worker only when it is unset."""
    return {name: value for name, value in os.environ.items()
            if name not in ("OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING")}


def real_agents(tmp_path: Path, prog: Path, nnodes: int, nproc: int) -> dict[int, dict[str, Any]]:
    """Start ``nnodes`` real torchrun agents on this machine, one per node rank, joined by c10d."""
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
         "--nproc-per-node", str(nproc), "--node-rank", str(node), "--rdzv-backend", "c10d",
         "--rdzv-endpoint", endpoint, "--rdzv-id", "job7", str(prog)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=_launch_environment()) for node in range(nnodes)]
    out = ""
    try:
        for agent in agents:
            stdout, stderr = agent.communicate(timeout=150)
            assert agent.returncode == 0, stderr
            out += stdout
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    return by_rank(out)


# ---- against two real agents ----


@pytest.mark.timeout(240)
def test_two_nodes_give_each_rank_what_two_real_torchrun_agents_give(tmp_path: Path) -> None:
    prog = script(tmp_path, WORKER)
    real = real_agents(tmp_path, prog, nnodes=2, nproc=2)
    sim_run = subprocess.run(
        [sys.executable, "-m", "simcluster", "torchrun", "--nnodes", "2", "--nproc-per-node", "2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-id", "job7",
         str(prog)], capture_output=True, text=True, timeout=150, cwd=tmp_path,
        env=_launch_environment())
    assert sim_run.returncode == 0, sim_run.stderr
    sim = by_rank(sim_run.stdout)
    assert sorted(sim) == sorted(real) == [0, 1, 2, 3]
    # a free port and a temporary folder per agent under real torchrun; the first agent's host
    differ = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE")
    for rank in range(4):
        got, want = sim[rank]["env"], real[rank]["env"]
        assert {k: v for k, v in got.items() if k not in differ} == \
            {k: v for k, v in want.items() if k not in differ}, rank
        assert (got["LOCAL_RANK"], got["GROUP_RANK"]) == (str(rank % 2), str(rank // 2))
        local = got["LOCAL_RANK"]
        for variables in (got, want):
            assert variables["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{local}/error.json")
        assert sim[rank]["sum"] == real[rank]["sum"] == 10.0
        # c10d's first agent publishes its host's name: here node 0's, there this machine's
        assert want["MASTER_ADDR"] == socket.getfqdn()
        assert got["MASTER_ADDR"] == sim[0]["host"] == "node0"
    # the simulated side alone: a host name per node, a pid per rank, as every rank sees them
    hosts = {rank: sim[rank]["host"] for rank in range(4)}
    assert hosts == {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    assert len({sim[rank]["pid"] for rank in range(4)}) == 4
    for rank in range(4):
        assert [tuple(pair) for pair in sim[rank]["gathered"]] == \
            [(hosts[r], sim[r]["pid"]) for r in range(4)]
    # real processes: distinct pids too (and one machine, so one host name)
    assert len({real[rank]["pid"] for rank in range(4)}) == 4
    assert len({real[rank]["host"] for rank in range(4)}) == 1


# ---- the environment of N nodes ----


def test_rank_environment_of_several_nodes_follows_torchruns_agents() -> None:
    env = rank_environment(4, 3, nnodes=2)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK",
                                "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE",
                                "ROLE_WORLD_SIZE")} == {
        "RANK": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1", "ROLE_RANK": "4",
        "LOCAL_WORLD_SIZE": "3", "WORLD_SIZE": "6", "GROUP_WORLD_SIZE": "2",
        "ROLE_WORLD_SIZE": "6"}


IDENTITY = """
    import os
    import platform
    import socket

    print(os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["GROUP_RANK"],
          os.environ["GROUP_WORLD_SIZE"], socket.gethostname(), platform.node(),
          os.uname().nodename, os.getpid())
"""


def test_an_elastic_range_runs_its_largest_number_of_nodes(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    rc, out, err = torchrun(capsys, "--nnodes", "1:3", "--nproc-per-node", 2,
                            script(tmp_path, IDENTITY))
    assert (rc, err) == (0, "")
    rows = sorted(line.split() for line in out.splitlines())
    assert [row[:4] for row in rows] == [[str(r), str(r % 2), str(r // 2), "3"] for r in range(6)]
    assert [row[4:7] for row in rows] == [[f"node{r // 2}"] * 3 for r in range(6)]
    assert [int(row[7]) for row in rows] == [_identity.PID_BASE + r for r in range(6)]


def test_a_platform_places_the_nodes_and_the_host_names_follow(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = torchrun(capsys, "--nnodes", 2, "--nproc-per-node", 8, "--latency",
                            "dgx_h100:2", script(tmp_path, IDENTITY))
    assert (rc, err) == (0, "")
    rows = {int(row[0]): row for row in (line.split() for line in out.splitlines())}
    assert sorted(rows) == list(range(16))
    for rank, row in rows.items():
        assert row[1:3] == [str(rank % 8), str(rank // 8)]
        assert row[4] == f"node{rank // 8}"


def test_one_node_keeps_to_the_platforms_first_node(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    rc, out, _err = torchrun(capsys, "--nproc-per-node", 4, "--latency", "dgx_h100:2",
                             script(tmp_path, IDENTITY))
    assert rc == 0
    assert {line.split()[4] for line in out.splitlines()} == {"node0"}


@pytest.mark.parametrize(("argv", "message"), [
    (["--nnodes", 2, "--node-rank", 1],
     "--node-rank 1: simcluster torchrun runs all 2 nodes in this one process (node ranks 0 to 1), "
     "so there is no single node to start; leave --node-rank out"),
    (["--nnodes", "0"], "--nnodes 0: give the number of nodes as a positive integer (--nnodes 2) "
                        "or an elastic range MIN:MAX"),
    (["--nnodes", "4:2"], "--nnodes 4:2: MIN is above MAX; write it as MIN:MAX, e.g. --nnodes 1:4"),
    (["--nnodes", "1:2:3"], "--nnodes 1:2:3: give the number of nodes as a positive integer"),
    (["--standalone", "--nnodes", 2], "--standalone --nnodes 2: --standalone is torchrun's "
                                      "single-node mode"),
    (["--nnodes", 2, "--nproc-per-node", 4, "--latency", "dgx_h100:2"],
     "--nnodes 2 --nproc-per-node 4: the latency model dgx_h100(2) has 2 nodes of 8 ranks (rank r "
     "on node r // 8), so these ranks would not be on the nodes torchrun gives them (LOCAL_RANK, "
     "GROUP_RANK, host name); give --nnodes 2 --nproc-per-node 8"),
    (["--nproc-per-node", 16, "--latency", "dgx_h100:2"],
     "--nnodes 1 --nproc-per-node 16: the latency model dgx_h100(2) has 2 nodes of 8 ranks"),
    (["--nnodes", 3, "--nproc-per-node", 8, "--latency", "dgx_h100:2"],
     "--nnodes 3 --nproc-per-node 8: the latency model dgx_h100(2) has 2 nodes of 8 ranks"),
])
def test_nodes_that_cannot_run_here_are_refused_with_the_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[object], message: str) -> None:
    rc, out, err = torchrun(capsys, *argv, script(tmp_path, "print('never')\n"))
    assert (rc, out) == (2, "")
    assert err.startswith(f"simcluster torchrun: {message}")


# ---- the process identity is the run's only ----


def test_pid_and_host_name_are_this_processs_again_after_a_run_also_one_that_fails(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = [os.getpid, os.kill, os.uname, socket.gethostname, socket.getfqdn,
              socket.gethostbyname, platform.node, platform.uname]
    pid, host = os.getpid(), socket.gethostname()
    prog = script(tmp_path, """
        import os, socket
        assert os.getpid() != int(os.environ["PARENT_PID"])
        os.kill(os.getpid(), 0)  # a rank's own pid signals this process, as before
        assert socket.gethostbyname(socket.gethostname()) == "127.0.0.%d" % (
            int(os.environ["GROUP_RANK"]) + 1)
        if os.environ["RANK"] == "3":
            raise ValueError("rank 3 fails")
    """)
    os.environ["PARENT_PID"] = str(pid)
    try:
        for _ in range(2):
            rc, _out, err = torchrun(capsys, "--nnodes", 2, "--nproc-per-node", 2, prog)
            assert rc == 1 and "ValueError: rank 3 fails" in err
            assert [os.getpid, os.kill, os.uname, socket.gethostname, socket.getfqdn,
                    socket.gethostbyname, platform.node, platform.uname] == before
            assert (os.getpid(), socket.gethostname()) == (pid, host)
            assert not _identity.installed()
    finally:
        del os.environ["PARENT_PID"]


def _who(rank: int) -> tuple[int, str]:
    return os.getpid(), socket.gethostname()


def test_spawn_gives_every_rank_a_pid_of_its_own() -> None:
    from simcluster.torch import spawn

    result = spawn(_who, nprocs=3)
    assert list(result) == [(_identity.PID_BASE + r, "node0") for r in range(3)]
    assert os.getpid() == _identity.real_getpid()
