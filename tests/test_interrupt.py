"""Ctrl-C and a killed parent: a run stops at once, says where it stood, and leaves nothing behind.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group (the
run and its hosting processes); each test starts the run in a session of its
own and signals that group, as a terminal would. The run prints a line once
it is under way, so the signal never lands while Python is still starting.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="reads process groups from Linux's /proc")

LOOP = '''
import sys
async def main(comm):
    await comm.barrier()
    if comm.rank == 0:
        print("started", flush=True)
    for _ in range(10**7):
        await comm.barrier()
'''

LIBRARY = "import simcluster as sc\n" + LOOP + '''
if __name__ == "__main__":
    sc.run(main, 64, transport=sys.argv[1], latency=sc.latency.AlphaBeta(1e-6, 1e-9))
'''

MPI_LOOP = '''
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == 0:
    print("started", flush=True)
for _ in range(10**7):
    comm.Barrier()
'''

LINE = re.compile(r"simcluster: interrupted at virtual time [0-9.]+ (s|ms|us|ns), "
                  r"with 0 of (\d+) ranks finished")
STOP_WITHIN = 3.0  # seconds; the run stops in about 0.1 s, the rest is room for a loaded machine


def _start(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            # a shell's background job ignores SIGINT; a terminal's does not
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "started\n":
        proc.kill()
        pytest.fail(f"the run did not start: {line!r} {proc.communicate()}")
    return proc


def _alive(group: int) -> list[str]:
    """The processes of ``group`` that still run (zombies waiting for init are not), from /proc."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # after "pid (command)"
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":  # state, ppid, pgrp, ...
            alive.append(f"{stat.parent.name} {fields[0]}")
    return alive


def _interrupt(proc: subprocess.Popen[str], sig: int) -> tuple[float, str]:
    start = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        left = _alive(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the run did not stop: {proc.communicate()}; still running: {left}")
    took = time.monotonic() - start
    while _alive(proc.pid) and time.monotonic() - start < 10:
        time.sleep(0.05)
    left = _alive(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert left == [], "processes outlived the run"
    return took, err


def _segments() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.glob("simcluster_*")} if shm.is_dir() else set()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["memory", "shm", "tcp"])
def test_ctrl_c_stops_simcluster_run_at_once_with_one_line(transport: str, tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    before = _segments()
    proc = _start([sys.executable, "-m", "simcluster", "run", "loop.py", "-n", "256",
                   "--transport", transport, "--latency", "alphabeta:1us,1GB/s"], tmp_path)
    took, err = _interrupt(proc, signal.SIGINT)
    assert proc.returncode == 130
    assert took < STOP_WITHIN
    assert LINE.fullmatch(err.strip()), err  # one line: no traceback, no asyncio noise
    assert LINE.fullmatch(err.strip()).group(2) == "256"  # type: ignore[union-attr]
    assert _segments() <= before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["memory", "tcp"])
def test_ctrl_c_in_a_script_raises_keyboard_interrupt_saying_where_time_stood(
        transport: str, tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(LIBRARY)
    proc = _start([sys.executable, "script.py", transport], tmp_path)
    took, err = _interrupt(proc, signal.SIGINT)
    assert took < STOP_WITHIN
    last = err.strip().splitlines()[-1]
    assert last.startswith("KeyboardInterrupt: ") and LINE.fullmatch(last.split(": ", 1)[1]), err
    # the script's own line, then the exception: none of asyncio's frames or its CancelledError
    assert "sc.run(main" in err and "asyncio" not in err and "CancelledError" not in err, err


@pytest.mark.timeout(120)
def test_ctrl_c_stops_simcluster_mpirun_without_unawaited_call_warnings(tmp_path: Path) -> None:
    pytest.importorskip("greenlet")
    (tmp_path / "loop.py").write_text(MPI_LOOP)
    proc = _start([sys.executable, "-m", "simcluster", "mpirun", "-n", "64", "loop.py"], tmp_path)
    took, err = _interrupt(proc, signal.SIGINT)
    assert proc.returncode == 130 and took < STOP_WITHIN
    assert LINE.fullmatch(err.strip()), err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_killed_parent_takes_its_hosting_processes_with_it(transport: str, tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    proc = _start([sys.executable, "-m", "simcluster", "run", "loop.py", "-n", "256",
                   "--transport", transport, "--procs", "2"], tmp_path)
    took, _ = _interrupt(proc, signal.SIGKILL)  # asserts every process of the group is gone
    assert took < STOP_WITHIN  # the hosts' ends of the pipes closed too: they exited


# ---- Ctrl-C before the run is under way ----
#
# A real Ctrl-C lands at any moment; these tests make it land at a chosen one: a
# sitecustomize (on PYTHONPATH, so every process of the run loads it) sends SIGINT to
# the whole process group, as a terminal does, when a chosen process first imports a
# chosen module.

INTERRUPT_AT_IMPORT = '''
import os, signal, sys

class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.killpg(0, signal.SIGINT)
        return None

if {process!r} in " ".join(getattr(sys, "orig_argv", sys.argv)):
    sys.meta_path.insert(0, _CtrlC())
'''


def _interrupted_at_import(argv: list[str], cwd: Path, module: str, process: str,
                           **env: str) -> tuple[int, str, str]:
    """Run ``argv`` with a Ctrl-C when ``process`` (a word of its command line) imports ``module``."""
    site = cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(INTERRUPT_AT_IMPORT.format(module=module, process=process))
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    environ["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [environ.get("PYTHONPATH")])])
    environ.update(env)
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environ, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the run did not stop: {proc.communicate()}")
    start = time.monotonic()
    while _alive(proc.pid) and time.monotonic() - start < 10:
        time.sleep(0.05)
    left = _alive(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert left == [], "processes outlived the run"
    return proc.returncode, out, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("form", ["console script", "python -m"])
def test_ctrl_c_while_the_command_imports_simcluster_prints_one_line(form: str, tmp_path: Path) -> None:
    if form == "console script":  # what pip writes for the entry point simcluster.cli:main
        (tmp_path / "simcluster").write_text(
            "import re\nimport sys\nfrom simcluster.cli import main\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
            "    sys.exit(main())\n")
        argv = [sys.executable, str(tmp_path / "simcluster"), "--version"]
    else:
        argv = [sys.executable, "-m", "simcluster", "--version"]
    rc, out, err = _interrupted_at_import(argv, tmp_path, "simcluster.dist", "simcluster")
    assert (rc, out, err) == (130, "", "simcluster: interrupted\n")


@pytest.mark.timeout(120)
def test_ctrl_c_while_a_library_user_imports_simcluster_is_their_keyboard_interrupt(
        tmp_path: Path) -> None:
    (tmp_path / "uses_it.py").write_text("import simcluster\n")
    rc, _, err = _interrupted_at_import([sys.executable, "uses_it.py"], tmp_path, "simcluster.dist",
                                        "uses_it")
    assert rc == -signal.SIGINT  # python's own ending: a traceback, then death by SIGINT
    assert err.strip().endswith("KeyboardInterrupt") and "uses_it.py" in err


@pytest.mark.timeout(120)
def test_ctrl_c_before_mpirun_starts_its_ranks_says_where_time_stood(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(MPI_LOOP)
    rc, out, err = _interrupted_at_import(
        [sys.executable, "-m", "simcluster", "mpirun", "-n", "4", "loop.py"], tmp_path,
        "simcluster.MPI", "mpirun")
    assert (rc, out) == (130, "")
    assert err == "simcluster: interrupted at virtual time 0 s, with 0 of 4 ranks finished\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ctrl_c_while_hosting_processes_start_prints_one_line(
        transport: str, start_method: str, tmp_path: Path) -> None:
    # the Ctrl-C lands while the forkserver (or a spawned host) imports simcluster
    (tmp_path / "loop.py").write_text(LOOP)
    before = _segments()
    process = "forkserver import main" if start_method == "forkserver" else "spawn_main"
    rc, out, err = _interrupted_at_import(
        [sys.executable, "-m", "simcluster", "run", "loop.py", "-n", "8", "--transport", transport,
         "--procs", "2"], tmp_path, "simcluster.hosting.host", process,
        SIMCLUSTER_START_METHOD=start_method)
    assert (rc, out) == (130, "")
    assert LINE.fullmatch(err.strip()), err  # no Fatal Python error, EOFError or traceback
    assert _segments() <= before


SPIN = {  # the first rank past the barrier computes for good: no other rank runs again
    "mpirun": '''
import sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
sys.__stdout__.write("started\\n")  # now, not in virtual-time order: that rank never prints again
sys.__stdout__.flush()
while True:  # computes and never calls MPI again
    pass
''',
    "run": '''
async def main(comm):
    await comm.barrier()
    print("started", flush=True)
    while True:  # never awaits again
        pass
''',
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["mpirun", "run"])
def test_ctrl_c_stops_a_rank_that_computes_without_calling_simcluster(command: str,
                                                                       tmp_path: Path) -> None:
    pytest.importorskip("greenlet")
    (tmp_path / "spin.py").write_text(SPIN[command])
    proc = _start([sys.executable, "-m", "simcluster", command, "-n", "4", "spin.py"], tmp_path)
    took, err = _interrupt(proc, signal.SIGINT)
    assert proc.returncode == 130 and took < STOP_WITHIN
    assert LINE.fullmatch(err.strip()), err
