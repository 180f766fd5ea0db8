"""The MPI facade follows the platform's nodes, and each rank under mpirun is a process of its node.

Under ``simcluster mpirun --latency dgx_h100:2`` (2 nodes of 8 ranks),
``Split_type(COMM_TYPE_SHARED)`` groups the ranks of one node and
``Get_processor_name()`` names it, as the engine places them (the trace's
routes); every rank also sees its node's name from ``socket.gethostname()``
and a pid of its own from ``os.getpid()``, as the processes of an
``mpiexec`` job do. When the run ends, this process's own functions are back.
"""

from __future__ import annotations

import atexit
import os
import platform
import signal
import socket
import sys
import threading
from pathlib import Path

import pytest

import simcluster as sc
from mpi_scripts import script
from simcluster import _identity, cli
from simcluster.platform import dgx_h100

if not hasattr(pytest.importorskip("simcluster.MPI"), "COMM_WORLD"):
    pytest.skip("simcluster.MPI (mpi4py's API) has not landed yet", allow_module_level=True)

IDENTITY = """
    import os
    import platform
    import socket
    import sys
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    members = node.allgather(world.Get_rank())
    print(world.Get_rank(), MPI.Get_processor_name(), socket.gethostname(), platform.node(),
          os.uname().nodename, socket.gethostbyname(socket.gethostname()), os.getpid(),
          node.Get_size(), node.Get_rank(), ",".join(map(str, members)),
          os.environ.get("PMI_HOSTNAME"))
"""


def _functions() -> list[object]:
    return [os.getpid, os.kill, os.uname, os.chdir, os.fchdir, os._exit, atexit.register, atexit.unregister,
            socket.gethostname, socket.getfqdn,
            socket.gethostbyname, socket.getaddrinfo, platform.node, platform.uname,
            signal.signal, signal.getsignal, signal.raise_signal, threading.main_thread,
            *(vars(socket.socket).get(name) for name in ("bind", "connect", "accept", "recv"))]


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def mpirun(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = cli.main(["mpirun", "--exact", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_split_type_and_processor_name_follow_the_platforms_nodes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = _functions()
    rc, out, err = mpirun(capsys, "-n", 16, "--latency", "dgx_h100:2", script(tmp_path, IDENTITY))
    assert (rc, err) == (0, "")
    rows = {int(row[0]): row[1:] for row in (line.split() for line in out.splitlines())}
    assert sorted(rows) == list(range(16))
    for rank, (name, host, pnode, uname, address, pid, size, local, members, pmi) in rows.items():
        node = rank // 8
        assert name == host == pnode == uname == pmi == f"node{node}"
        assert address == f"127.0.0.{node + 1}"
        assert int(pid) == _identity.PID_BASE + rank
        assert (int(size), int(local)) == (8, rank % 8)
        assert members == ",".join(str(r) for r in range(8 * node, 8 * node + 8))
    assert _functions() == before
    assert os.getpid() == _identity.real_getpid()


def test_without_nodes_every_rank_is_on_node0_with_a_pid_of_its_own(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _err = mpirun(capsys, "-n", 3, script(tmp_path, IDENTITY))
    assert rc == 0
    rows = sorted(line.split() for line in out.splitlines())
    assert [row[1:3] for row in rows] == [["node0", "node0"]] * 3
    assert [int(row[6]) for row in rows] == [_identity.PID_BASE + r for r in range(3)]
    assert [row[7] for row in rows] == ["3"] * 3


def test_a_hierarchical_model_places_the_nodes_too(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    rc, out, _err = mpirun(capsys, "-n", 4, "--latency",
                           "hierarchical:2;alphabeta:200ns,100GB/s;alphabeta:2us,25GB/s",
                           script(tmp_path, IDENTITY))
    assert rc == 0
    rows = sorted(line.split() for line in out.splitlines())
    assert [row[1] for row in rows] == ["node0", "node0", "node1", "node1"]


def test_the_nodes_of_a_platform_under_jitter_and_in_a_plain_run() -> None:
    def fn(comm: sc.Comm) -> tuple[str, int, str, int]:
        from simcluster import MPI

        node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        # no launcher: this process's own pid and host name
        return MPI.Get_processor_name(), node.Get_size(), socket.gethostname(), os.getpid()

    result = sc.run(fn, 4, latency=sc.latency.Jitter(dgx_h100(2), 0.1))
    host, pid = socket.gethostname(), os.getpid()
    assert list(result) == [("node0", 4, host, pid)] * 4
    result = sc.run(fn, 10, latency=dgx_h100(2))
    assert list(result) == [(f"node{r // 8}", 8 if r < 8 else 2, host, pid) for r in range(10)]


def test_a_failing_run_gives_this_process_its_own_functions_back(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = _functions()
    prog = script(tmp_path, """
        import os
        from mpi4py import MPI
        os.kill(os.getpid(), 0)  # a rank's pid signals this process, which hosts the ranks
        if MPI.COMM_WORLD.Get_rank() == 1:
            raise ValueError("rank 1 fails")
        MPI.COMM_WORLD.Barrier()
    """)
    rc, _out, err = mpirun(capsys, "-n", 2, prog)
    assert rc == 1 and "ValueError: rank 1 fails" in err
    assert _functions() == before
    assert not _identity.installed()


@pytest.mark.timeout(120)
def test_ranks_hosted_by_other_processes_have_their_own_pids_too(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = mpirun(capsys, "-n", 4, "--transport", "shm", "--procs", 2, "--latency",
                          "dgx_h100:2", script(tmp_path, IDENTITY))
    assert rc == 0, err
    rows = sorted((line.split() for line in out.splitlines()), key=lambda row: int(row[0]))
    assert [int(row[6]) for row in rows] == [_identity.PID_BASE + r for r in range(4)]
    assert {row[2] for row in rows} == {"node0"}


def test_a_process_a_rank_forks_has_its_real_pid_and_host_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import socket
        import warnings

        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12: a fork with threads about
            child = os.fork()
        if child == 0:
            os.write(write, f"{os.getpid()} {socket.gethostname()}".encode())
            os._exit(0)
        os.waitpid(child, 0)
        pid, host = os.read(read, 100).decode().split()
        print(int(pid) == child, host == os.environ["REAL_HOST"], os.getpid() != child)
    """)
    os.environ["REAL_HOST"] = socket.gethostname()
    try:
        rc, out, err = mpirun(capsys, "-n", 1, prog)
    finally:
        del os.environ["REAL_HOST"]
    assert (rc, out) == (0, "True True True\n"), err


def test_a_function_kept_from_a_run_answers_for_this_process_afterwards(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import socket
        from socket import gethostname
        from os import getpid

        socket.kept = (gethostname, getpid)  # the run's functions, kept past its end
    """)
    try:
        assert mpirun(capsys, "-n", 1, prog)[0] == 0
        gethostname, getpid = socket.kept  # type: ignore[attr-defined]
        assert gethostname is not socket.gethostname
        assert (gethostname(), getpid()) == (socket.gethostname(), os.getpid())
    finally:
        del socket.kept  # type: ignore[attr-defined]


SOCKETS = """
    import socket
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if rank == 0:  # a server on its own node's name: it accepts before the client has connected
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind((socket.gethostname(), 0))
        server.listen(1)
        world.send(server.getsockname()[1], dest=1)
        conn, _ = server.accept()
        got = conn.recv(64)
        conn.sendall(got.upper())
        print(rank, "served", got.decode(), "at", f"{MPI.Wtime() * 1e3:.3f}", "ms")
        conn.close()
        server.close()
    else:
        port = world.recv(source=0)
        import time
        time.sleep(0.002)  # the server waits for this client 2 ms in virtual time
        client = socket.create_connection(("node0", port))
        client.sendall(b"hello")
        print(rank, "got", client.recv(64).decode(), socket.getaddrinfo("node1", None)[0][4][0])
        client.close()
"""


def test_ranks_talk_over_real_sockets_by_node_name_and_a_blocked_accept_stops_no_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = _functions()
    prog = script(tmp_path, SOCKETS)
    outs = set()
    for seed in (0, 3):
        rc, out, err = mpirun(capsys, "-n", 2, "--seed", seed, "--latency", "dgx_h100:2", prog)
        assert (rc, err) == (0, "")
        outs.add(out)
    assert len(outs) == 1
    lines = sorted(outs.pop().splitlines())
    assert lines[0].startswith("0 served hello at 2.") and lines[1] == "1 got HELLO 127.0.0.2"
    assert _functions() == before


TIMEOUT = """
    import socket
    from mpi4py import MPI

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((socket.gethostname(), 0))
    server.listen(1)
    server.settimeout(0.5)  # no one connects: the accept times out at 0.5 s of virtual time
    try:
        server.accept()
    except TimeoutError as exc:
        print("timed out", exc, f"{MPI.Wtime():.3f}")
    server.close()
"""


def test_a_socket_timeout_passes_in_virtual_time(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    rc, out, err = mpirun(capsys, "-n", 1, script(tmp_path, TIMEOUT))
    assert (rc, out, err) == (0, "timed out timed out 0.500\n", "")
