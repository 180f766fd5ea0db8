"""simcluster torchrun: a script written for torchrun, unmodified, on virtual ranks.

Scripts are written to a temporary folder and run through the command line
(``simcluster.cli.main``, in this process; ``python -m simcluster`` once, in
a fresh interpreter). Output is asserted line by line: virtual time makes it
exact.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="simcluster torchrun needs torch: pip install 'simcluster[torch]'")

from torch.distributed import distributed_c10d as c10d  # noqa: E402

from simcluster import cli  # noqa: E402

NOTE = "simcluster torchrun: backend {} runs on simcluster (virtual ranks in this process, in virtual time)"
DEFAULT_NOTE = ("simcluster torchrun: torch's default backend (none named) runs on simcluster "
                "(virtual ranks in this process, in virtual time)")

ALL_REDUCE = """
    import sys
    import torch
    import torch.distributed as dist

    backend = sys.argv[1] if len(sys.argv) > 1 else None
    if backend is None:
        dist.init_process_group()
    else:
        dist.init_process_group(backend=backend)
    rank = dist.get_rank()
    tensor = torch.tensor([rank + 1.0])
    dist.all_reduce(tensor)
    print(f"rank {rank} of {dist.get_world_size()}: sum {tensor.item()}")
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


# ---- torchrun's environment ----


def test_each_rank_sees_its_own_torchrun_environment(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import time

        names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID"]
        print(" ".join(f"{name}={os.environ[name]}" for name in names))
        os.environ["MINE"] = os.environ["RANK"]  # a rank's own environment, as a process's
        time.sleep(1)  # a virtual sleep: every other rank runs meanwhile
        print("still mine", os.environ["MINE"], os.environ["RANK"])
    """)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 4, prog)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        f"RANK={r} LOCAL_RANK={r} WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 "
        f"MASTER_PORT=29500 GROUP_RANK=0 ROLE_RANK={r} ROLE_WORLD_SIZE=4 TORCHELASTIC_RUN_ID=none"
        for r in range(4)] + [f"still mine {r} {r}" for r in range(4)]


def test_master_address_port_and_run_id_options_reach_the_environment(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        print(os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], os.environ["TORCHELASTIC_RUN_ID"])
    """)
    rc, out, err = torchrun(capsys, "--nproc_per_node=2", "--standalone", "--nnodes=1",
                            "--master_addr", "node0", "--master-port", 1234, "--rdzv-id", "job7",
                            prog)
    assert (rc, err) == (0, "")
    assert out.splitlines() == ["node0 1234 job7"] * 2


def test_the_environment_and_process_state_are_as_before_after_the_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        assert name not in os.environ, f"{name} is set before the test"
    environ = dict(os.environ)
    saved = (sys.argv, sys.modules["__main__"], sys.stdout, sys.stderr)
    helper, timeout = c10d._new_process_group_helper, c10d._get_default_timeout
    prog = script(tmp_path, ALL_REDUCE)
    assert torchrun(capsys, "--nproc-per-node", 2, prog, "gloo")[0] == 0
    failing = script(tmp_path, "import os\nos.environ['EXTRA'] = '1'\nraise SystemExit(4)\n", "fail.py")
    assert torchrun(capsys, "--nproc-per-node", 2, failing)[0] == 4
    assert dict(os.environ) == environ
    assert (sys.argv, sys.modules["__main__"], sys.stdout, sys.stderr) == saved
    assert (c10d._new_process_group_helper, c10d._get_default_timeout) == (helper, timeout)
    assert not c10d.is_initialized()


# ---- backends ----


def test_gloo_all_reduce_sums_on_every_rank_and_the_note_comes_once(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, ALL_REDUCE)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 4, prog, "gloo")
    assert rc == 0
    assert out.splitlines() == [f"rank {r} of 4: sum 10.0" for r in range(4)]
    assert err.splitlines() == [NOTE.format("'gloo'")]


@pytest.mark.parametrize("backend", ["nccl", "cpu:gloo,cuda:nccl", "NCCL", None])
def test_every_real_backend_runs_on_simcluster_with_cpu_tensors(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, backend: str | None) -> None:
    prog = script(tmp_path, ALL_REDUCE)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 4, prog, *([backend] if backend else []))
    assert rc == 0
    assert out.splitlines() == [f"rank {r} of 4: sum 10.0" for r in range(4)]
    # one line, whatever the rank count; no warning that NCCL is not compiled in
    assert err.splitlines() == [NOTE.format(repr(backend.lower())) if backend else DEFAULT_NOTE]


def test_new_group_with_a_backend_and_prepend_rank(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl")
        rank = dist.get_rank()
        pair = dist.new_group([0, 1], backend="gloo")
        inherited = dist.new_group([1, 2])
        tensor = torch.ones(1)
        if rank < 2:
            dist.all_reduce(tensor, group=pair)
        if rank in (1, 2):
            dist.all_reduce(tensor, group=inherited)
        print(rank, tensor.item())
    """)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 3, "--prepend-rank", prog)
    assert rc == 0
    assert out.splitlines() == ["[0] 0 2.0", "[1] 1 3.0", "[2] 2 3.0"]
    assert err.splitlines() == [NOTE.format("'nccl'"), NOTE.format("'gloo'")]  # no [rank] prefix


def test_the_mpi_backend_is_refused_with_what_to_do(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    prog = script(tmp_path, ALL_REDUCE)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 2, prog, "mpi")
    assert (rc, out) == (1, "")
    assert re.search(r"^ValueError: rank \d: init_process_group\(backend='mpi'\): the MPI backend "
                     r"cannot run under simcluster torchrun; name gloo or nccl \(both run on "
                     r"simcluster\), or run an mpi4py script with simcluster mpirun$", err, re.M), err


# ---- as mpirun: __main__, output, exit status, reports ----


def test_exit_status_comes_from_the_rank_that_calls_sys_exit(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os
        import sys
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        tensor = torch.tensor([1.0])
        dist.all_reduce(tensor)
        if os.environ["RANK"] == "2":
            sys.exit(3)
        print("rank", os.environ["RANK"], "done with", tensor.item())
    """)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 4, prog)
    assert rc == 3
    assert out.splitlines() == ["rank 0 done with 4.0", "rank 1 done with 4.0",
                                "rank 3 done with 4.0"]
    assert err.splitlines() == [NOTE.format("'gloo'")]


def test_an_exception_prints_the_ranks_traceback_with_the_scripts_lines(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os

        def check():
            if os.environ["LOCAL_RANK"] == "1":
                raise ValueError("rank 1 is unhappy")

        if __name__ == "__main__":
            check()
    """)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 2, prog)
    assert (rc, out) == (1, "")
    assert err.splitlines() == [
        "Traceback (most recent call last):",
        f'  File "{prog}", line 9, in <module>',
        "    check()",
        f'  File "{prog}", line 6, in check',
        '    raise ValueError("rank 1 is unhappy")',
        "ValueError: rank 1 is unhappy",
    ]


def test_when_one_rank_raises_the_others_lines_of_that_instant_are_kept(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import os

        rank = int(os.environ["RANK"])
        if rank == 1:
            raise ValueError("rank 1 is unhappy")
        print(f"rank {rank} says hello")
    """)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 3, prog)
    assert rc == 1
    assert out.splitlines() == ["rank 0 says hello", "rank 2 says hello"]
    assert err.splitlines()[-1] == "ValueError: rank 1 is unhappy"


def test_a_deadlock_exits_nonzero_with_the_report_naming_the_scripts_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        tensor = torch.zeros(1)
        print("waiting", rank)
        dist.recv(tensor, src=1 - rank)
    """, "head_to_head.py")
    rc, out, err = torchrun(capsys, "--nproc-per-node", 2, prog)
    assert rc == 1
    assert out.splitlines() == ["waiting 0", "waiting 1"]
    assert err.splitlines() == [
        NOTE.format("'gloo'"),
        "simcluster torchrun: deadlock: 2 ranks blocked and no message in flight at virtual time 0s",
        "  rank 0 waiting in irecv(buf=torch.float32[1], src=1, tag=0) at head_to_head.py:9",
        "  rank 1 waiting in irecv(buf=torch.float32[1], src=0, tag=0) at head_to_head.py:9",
        "wait-for cycle: 0 -> 1 -> 0",
    ]


def test_same_seed_same_output_and_the_seed_picks_the_any_source_order(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        if rank == 0:
            print("order", [dist.recv(torch.zeros(1)) for _ in range(size - 1)])
        else:
            dist.send(torch.tensor([float(rank)]), dst=0)
    """)
    runs = {seed: [torchrun(capsys, "--nproc-per-node", 4, "--seed", seed, prog)[1]
                   for _ in range(2)] for seed in range(4)}
    assert all(a == b for a, b in runs.values())
    for first, _ in runs.values():
        assert re.fullmatch(r"order \[\d, \d, \d\]\n", first)
        assert sorted(first[7:-2].split(", ")) == ["1", "2", "3"]
    assert len({outs[0] for outs in runs.values()}) > 1


def test_latency_and_trace_options_reach_the_run(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            dist.send(torch.zeros(250), dst=1)  # 1000 bytes
        else:
            dist.recv(torch.zeros(250), src=0)
    """)
    trace = tmp_path / "trace.json"
    rc, out, _err = torchrun(capsys, "--nproc-per-node", 2, "--latency", "alphabeta:1us,1GB/s",
                             "--trace", trace, prog)
    assert (rc, out) == (0, "")
    events = json.loads(trace.read_text())["traceEvents"]
    arrivals = [e["ts"] for e in events if e["name"] == "message" and e["ph"] == "f"]
    assert arrivals == [pytest.approx(2.0)]  # 1 us + 1000 B at 1 GB/s, in virtual microseconds


# ---- refused ----


@pytest.mark.parametrize(("argv", "message"), [
    (["--nnodes", "0"], "--nnodes 0: give the number of nodes as a positive integer (--nnodes 2) "
                        "or an elastic range MIN:MAX (--nnodes 1:4, which runs 4 nodes"),
    (["--node-rank", "1"], "--node-rank 1: there is one node, node 0; leave --node-rank out"),
    (["--nproc-per-node", "gpu"], "--nproc-per-node gpu: give the number of ranks as a positive "
                                  "integer, e.g. --nproc-per-node 4"),
    (["--transport", "shm"], "--transport shm: torch ranks run as threads of this process"),
    (["--latency", "fast"], "parse('fast'): unknown latency model"),
])
def test_options_that_cannot_run_are_refused_with_the_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str) -> None:
    prog = script(tmp_path, "print('never')\n")
    rc, out, err = torchrun(capsys, *argv, prog)
    assert (rc, out) == (2, "")
    assert err.startswith(f"simcluster torchrun: {message}")


def test_a_missing_script_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = torchrun(capsys, "--nproc-per-node", 2, tmp_path / "missing.py")
    assert (rc, out) == (2, "")
    assert err == (f"simcluster torchrun: {tmp_path / 'missing.py'}: no such file; pass the path "
                   "of a Python script (or -m MODULE)\n")


# ---- a fresh interpreter ----


def test_python_dash_m_simcluster_torchrun_runs_a_module(tmp_path: Path) -> None:
    package = tmp_path / "job"
    package.mkdir()
    (package / "__init__.py").write_text("")
    script(package, """
        import os
        import sys
        import torch
        import torch.distributed as dist
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            dist.init_process_group("gloo")
            tensor = torch.tensor([float(os.environ["RANK"])])
            dist.broadcast(tensor, src=1)
            print(f"rank {dist.get_rank()}: {tensor.item()} {sys.argv[1:]}")
            dist.destroy_process_group()

        if __name__ == "__main__":
            main()
    """, "train.py")
    proc = subprocess.run([sys.executable, "-m", "simcluster", "torchrun", "--nproc-per-node", "3",
                           "-m", "job.train", "--epochs", "2"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, NOTE.format("'gloo'") + "\n")
    assert proc.stdout.splitlines() == [f"rank {r}: 1.0 ['--epochs', '2']" for r in range(3)]


# ---- what real torchrun does, side by side ----


def real_torchrun(tmp_path: Path, *argv: object, env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
    """Run torch's own torchrun (``python -m torch.distributed.run`` is the ``torchrun`` command).

    Its workers share one stdout: a script run by both writes each rank's lines in one write.
    """
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", *map(str, argv)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


def simcluster_torchrun(tmp_path: Path, *argv: object, env: dict[str, str] | None = None
                        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simcluster", "torchrun", *map(str, argv)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---- get_backend and monitored_barrier ----

BACKEND_SCRIPT = """
    import datetime
    import sys
    import torch
    import torch.distributed as dist

    def monitored(group=None):
        try:
            dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=60),
                                   wait_all_ranks=True)
            return "passed"
        except ValueError as exc:
            return f"ValueError: {exc}"

    backend = sys.argv[1] if len(sys.argv) > 1 else None
    dist.init_process_group(backend)
    rank = dist.get_rank()
    pair = dist.new_group([0, 1], backend=backend)
    inherited = dist.new_group([1, 2])  # the default group's backend
    lines = [f"get_backend() = {dist.get_backend()}"]
    if rank < 2:
        lines.append(f"get_backend(pair) = {dist.get_backend(pair)}")
    if rank > 0:
        lines.append(f"get_backend(inherited) = {dist.get_backend(inherited)}")
    if dist.get_backend() == "gloo":
        lines.append("the script's gloo branch")
    lines.append(f"monitored_barrier: {monitored()}")
    if rank < 2:
        lines.append(f"monitored_barrier(pair): {monitored(pair)}")
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    lines.append(f"sum {total.item()}")
    sys.stdout.write("".join(f"rank {rank}: {line}\\n" for line in lines))
    dist.destroy_process_group()
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["gloo", None])
def test_get_backend_and_monitored_barrier_print_what_they_print_under_real_torchrun(
        tmp_path: Path, backend: str | None) -> None:
    prog = script(tmp_path, BACKEND_SCRIPT)
    argv = [prog, *([backend] if backend else [])]
    real = real_torchrun(tmp_path, "--standalone", "--nproc-per-node", 3, *argv)
    assert real.returncode == 0, real.stderr
    sim = simcluster_torchrun(tmp_path, "--nproc-per-node", 3, *argv)
    assert (sim.returncode, sim.stderr) == (0, (NOTE.format(repr(backend)) if backend
                                                 else DEFAULT_NOTE) + "\n")
    assert sorted(sim.stdout.splitlines()) == sorted(real.stdout.splitlines())
    if backend == "gloo":  # what the comparison covered
        assert "rank 0: get_backend() = gloo" in sim.stdout
        assert "rank 2: monitored_barrier: passed" in sim.stdout
    else:  # torch's default reports "undefined", and torch lets only gloo monitor barriers
        assert "rank 0: monitored_barrier: ValueError: monitored_barrier is only implemented " \
               "for GLOO backend." in sim.stdout


def test_a_group_made_as_nccl_reports_simcluster_and_refuses_monitored_barrier(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # nothing nccl-specific can run on CPU: a script's nccl branches must not be taken
    prog = script(tmp_path, BACKEND_SCRIPT)
    rc, out, _err = torchrun(capsys, "--nproc-per-node", 3, prog, "nccl")
    assert rc == 0
    lines = out.splitlines()
    assert "rank 0: get_backend() = simcluster" in lines
    assert "rank 1: get_backend(pair) = simcluster" in lines
    assert "rank 2: get_backend(inherited) = simcluster" in lines
    assert ("rank 0: monitored_barrier: ValueError: monitored_barrier is only implemented for "
            "GLOO backend.") in lines
    assert "rank 2: sum 6.0" in lines


def _monitored_barrier_under_spawn(rank: int) -> tuple[str, str]:
    import torch.distributed as dist

    dist.init_process_group("simcluster")
    try:
        dist.monitored_barrier()
        return dist.get_backend(), "passed"
    except ValueError as exc:
        return dist.get_backend(), str(exc)
    finally:
        dist.destroy_process_group()


def test_under_spawn_the_backend_is_simcluster_and_monitored_barrier_is_torchs_error() -> None:
    import simcluster.torch as sctorch

    result = sctorch.spawn(_monitored_barrier_under_spawn, nprocs=2)
    assert list(result) == [("simcluster", "monitored_barrier is only implemented for GLOO "
                                           "backend.")] * 2


def test_a_rank_that_skips_monitored_barrier_is_named_not_waited_for(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import datetime
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() != 1:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=2), wait_all_ranks=True)
        print("rank", dist.get_rank(), "done")
        dist.destroy_process_group()
    """, "skip.py")
    rc, out, err = torchrun(capsys, "--nproc-per-node", 3, prog)
    assert (rc, out) == (1, "rank 1 done\n")
    lines = err.splitlines()
    # gloo's errors, when the 2 s run out in virtual time: rank 0 names the rank, rank 2 learns;
    # each through the sys.excepthook torch's init_process_group set on its rank ("[rankN]: ")
    assert "[rank0]: RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in 2000 ms" in lines
    assert ("[rank2]: RuntimeError: Rank 2 successfully reached monitoredBarrier, but received errors "
            "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty "
            "rank.") in lines


# ---- torchelastic's environment ----

ENV_SCRIPT = """
    import json
    import os
    import sys

    parent = set(json.loads(os.environ["PARENT_NAMES"]))
    env = {name: value for name, value in os.environ.items() if name not in parent}
    folder = os.path.dirname(env.get("TORCHELASTIC_ERROR_FILE", ""))
    sys.stdout.write(json.dumps({"env": env, "error_folder_exists": os.path.isdir(folder)}) + "\\n")
"""


def _worker_environments(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """Each rank's printed environment (what torchrun added to its own), by RANK."""
    assert proc.returncode == 0, proc.stderr
    dumps = [json.loads(line) for line in proc.stdout.splitlines()]
    return {dump["env"]["RANK"]: dump for dump in dumps}


def _launch_environment() -> dict[str, str]:
    """This process's environment, less what torchrun sets for a worker only when it is unset,
    and the names in it (``PARENT_NAMES``): a worker prints the others, what torchrun added."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING")}
    env["PARENT_NAMES"] = json.dumps([*env, "PARENT_NAMES"])
    return env


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@pytest.mark.timeout(180)
def test_standalone_workers_get_real_torchruns_variables(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_SCRIPT)
    argv, env = ["--standalone", "--nproc-per-node", 2, prog], _launch_environment()
    real = _worker_environments(real_torchrun(tmp_path, *argv, env=env))
    sim = _worker_environments(simcluster_torchrun(tmp_path, *argv, env=env))
    assert sorted(sim) == sorted(real) == ["0", "1"]
    for rank in ("0", "1"):
        got, want = sim[rank]["env"], real[rank]["env"]
        assert sorted(got) == sorted(want)
        # a free port, a random run id and a temporary folder under real torchrun; here nothing
        # listens on the port, the id is made from --seed, and the folder is removed at the end
        differ = ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")
        assert {k: v for k, v in got.items() if k not in differ} == \
            {k: v for k, v in want.items() if k not in differ}
        assert got["MASTER_ADDR"] == "localhost"
        assert UUID.fullmatch(got["TORCHELASTIC_RUN_ID"]) and UUID.fullmatch(
            want["TORCHELASTIC_RUN_ID"])
        for variables in (got, want):
            assert variables["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{rank}/error.json")
        assert sim[rank]["error_folder_exists"] and real[rank]["error_folder_exists"]
        assert not Path(got["TORCHELASTIC_ERROR_FILE"]).parent.exists()  # removed at the end
    assert sim["0"]["env"]["TORCHELASTIC_RUN_ID"] == sim["1"]["env"]["TORCHELASTIC_RUN_ID"]


@pytest.mark.timeout(180)
def test_static_rendezvous_workers_get_real_torchruns_values(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_SCRIPT)
    argv = ["--nproc-per-node", 3, "--master-port", free_port(), "--rdzv-id", "job7", prog]
    env = _launch_environment()
    real = _worker_environments(real_torchrun(tmp_path, *argv, env=env))
    sim = _worker_environments(simcluster_torchrun(tmp_path, *argv, env=env))
    for rank in ("0", "1", "2"):
        got, want = dict(sim[rank]["env"]), dict(real[rank]["env"])
        assert got.pop("TORCHELASTIC_ERROR_FILE") != want.pop("TORCHELASTIC_ERROR_FILE")
        assert got == want
        assert (got["OMP_NUM_THREADS"], got["TORCHELASTIC_RUN_ID"]) == ("1", "job7")


def test_the_seed_makes_the_standalone_run_id(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    prog = script(tmp_path, "import os\nprint(os.environ['TORCHELASTIC_RUN_ID'])\n")
    ids = {seed: torchrun(capsys, "--standalone", "--seed", seed, prog)[1] for seed in (0, 0, 1)}
    assert len(ids) == 2 and all(UUID.fullmatch(run_id.strip()) for run_id in ids.values())


def test_parents_variables_reach_the_workers_as_under_torchrun(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
    prog = script(tmp_path, """
        import os
        names = ["OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                 "TORCHELASTIC_SIGNALS_TO_HANDLE"]
        print(" ".join(os.environ[name] for name in names))
    """)
    rc, out, _err = torchrun(capsys, "--nproc-per-node", 2, "--signals-to-handle", "SIGTERM",
                             prog)
    assert (rc, out) == (0, "3 0 SIGTERM\n" * 2)
    monkeypatch.delenv("OMP_NUM_THREADS")
    rc, out, _err = torchrun(capsys, "--nproc-per-node", 1, prog)
    assert (rc, out) == (1, "")  # one worker: torchrun leaves OMP_NUM_THREADS unset


@pytest.mark.timeout(180)
def test_record_writes_the_error_file_as_under_real_torchrun(tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import json
        import os
        import sys
        import time
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            if os.environ["RANK"] == "1":
                time.sleep(1)  # rank 0 is done first: a failure stops the other ranks
                raise ValueError("rank 1 is unhappy")
            sys.stdout.write(f"rank {os.environ['RANK']} is fine\\n")

        if __name__ == "__main__":
            try:
                main()
            except ValueError:
                with open(os.environ["TORCHELASTIC_ERROR_FILE"]) as f:
                    error = json.load(f)["message"]
                last = error["extraInfo"]["py_callstack"].splitlines()[-1]
                sys.stdout.write(f"error file: {error['message']} in {last}\\n")
                raise
    """)
    real = real_torchrun(tmp_path, "--standalone", "--nproc-per-node", 2, prog)
    sim = simcluster_torchrun(tmp_path, "--nproc-per-node", 2, prog)
    assert real.returncode == sim.returncode == 1
    assert sorted(sim.stdout.splitlines()) == sorted(real.stdout.splitlines()) == [
        "error file: ValueError: rank 1 is unhappy in ValueError: rank 1 is unhappy",
        "rank 0 is fine"]
    assert sim.stderr.splitlines()[-1] == "ValueError: rank 1 is unhappy"


def test_summary_prints_virtual_time_messages_and_bytes_after_the_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prog = script(tmp_path, """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.send(torch.zeros(250), dst=1) if dist.get_rank() == 0 else dist.recv(torch.zeros(250), src=0)
    """)
    rc, out, err = torchrun(capsys, "--nproc-per-node", 2, "--latency", "alphabeta:1us,1GB/s",
                            "--summary", prog)
    assert (rc, out) == (0, "")
    assert err.splitlines() == [NOTE.format("'gloo'"), err.splitlines()[1]]
    assert re.fullmatch(r"simcluster torchrun: elapsed 2 us virtual, \d+\.\d{3} s wall, "
                        r"1 messages, 1000 bytes", err.splitlines()[1]), err
