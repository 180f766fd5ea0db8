"""The command line: simcluster run SCRIPT with each option, trace show / plot, progress."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import simcluster as sc
from simcluster import cli

RING = """
import asyncio

async def main(comm):
    if comm.rank == 0:
        await asyncio.sleep(WAIT)  # real time, so that a progress display would tick
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    return await comm.sendrecv(comm.rank, right, src=left)

WAIT = {wait}
"""

RACE = """
import simcluster as sc

async def main(comm):
    if comm.rank == 0:
        return [await comm.recv(src=sc.ANY_SOURCE) for _ in range(comm.size - 1)]
    await comm.send(comm.rank, 0)
"""


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    path = tmp_path / "ring.py"
    path.write_text(RING.format(wait=0.0))
    return path


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # `simcluster run` puts the script's folder on sys.path, as `python SCRIPT` does
    monkeypatch.setattr(sys, "path", list(sys.path))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---- simcluster run ----


def test_run_end_to_end_in_a_subprocess_is_quiet_when_not_a_terminal(tmp_path: Path) -> None:
    script = tmp_path / "slow_ring.py"
    script.write_text(RING.format(wait=0.3))  # long enough for three progress ticks
    out_json = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "run", str(script), "-n", "3", "--transport", "memory",
         "--latency", "alphabeta:1us,10GB/s", "--seed", "0", "--trace", str(out_json)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["rank 0: 2", "rank 1: 0", "rank 2: 1"]
    # one 1-byte message per rank, in parallel: 1 us + 1 byte at 10 GB/s
    assert lines[3].startswith("elapsed 1.0001 us virtual, ")
    assert lines[3].endswith(" s wall, 3 messages, 3 bytes")
    assert lines[4] == f"wrote {out_json}"
    assert proc.stderr == ""  # no progress line: stderr is a pipe
    doc = json.loads(out_json.read_text())
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) == 3


def test_run_world_size_option(capsys: pytest.CaptureFixture[str], ring: Path) -> None:
    rc, out, _ = run_cli(capsys, "run", str(ring), "-n", "5")
    assert rc == 0
    assert out.splitlines()[:5] == ["rank 0: 4", "rank 1: 0", "rank 2: 1", "rank 3: 2", "rank 4: 3"]
    assert "5 messages" in out
    rc, out, _ = run_cli(capsys, "run", str(ring))  # 4 ranks by default
    assert out.splitlines()[0] == "rank 0: 3"


@pytest.mark.parametrize(("spec", "elapsed"), [
    ("zero", "0 s"),
    ("constant:5us", "5 us"),
    ("constant:250ms", "250 ms"),
    ("constant:2s", "2 s"),
    ("constant:40ns", "40 ns"),
    ("alphabeta:1us,10GB/s", "1.0001 us"),
    ("alphabeta:1e-6,1e-9", "1.001 us"),
])
def test_run_latency_option(capsys: pytest.CaptureFixture[str], ring: Path, spec: str,
                            elapsed: str) -> None:
    rc, out, _ = run_cli(capsys, "run", str(ring), "-n", "3", "--latency", spec)
    assert rc == 0
    assert f"elapsed {elapsed} virtual, " in out


def test_run_seed_option_picks_the_schedule(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "race.py"
    script.write_text(RACE)
    namespace: dict[str, object] = {}
    exec(RACE, namespace)
    for seed in (0, 4):
        expected = sc.run(namespace["main"], world_size=3, seed=seed)[0]  # type: ignore[arg-type]
        rc, out, _ = run_cli(capsys, "run", str(script), "-n", "3", "--seed", str(seed))
        assert rc == 0
        assert out.splitlines()[0] == f"rank 0: {expected!r}"
    outs = {run_cli(capsys, "run", str(script), "-n", "3", "--seed", str(s))[1].splitlines()[0]
            for s in range(6)}
    assert outs == {"rank 0: [1, 2]", "rank 0: [2, 1]"}  # both schedules occur


def test_run_trace_option_writes_chrome_json(capsys: pytest.CaptureFixture[str], ring: Path,
                                             tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    rc, out, _ = run_cli(capsys, "run", str(ring), "-n", "3", "--trace", str(path))
    assert rc == 0
    assert out.splitlines()[-1] == f"wrote {path}"
    events = json.loads(path.read_text())["traceEvents"]
    assert sorted(e["args"]["name"] for e in events if e.get("name") == "thread_name") == [
        "rank 0", "rank 1", "rank 2"]


def test_run_reports_bad_options_and_scripts(capsys: pytest.CaptureFixture[str], ring: Path,
                                             tmp_path: Path) -> None:
    bad_latency = r"^simcluster run --latency: parse\('fast'\): unknown latency model"
    with pytest.raises(SystemExit, match=bad_latency):
        cli.main(["run", str(ring), "--latency", "fast"])
    rc, _, err = run_cli(capsys, "run", str(ring), "--transport", "carrier-pigeon")
    assert rc == 1
    assert err.startswith("simcluster run: run(transport='carrier-pigeon'): unknown transport; valid: memory")
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(["run", str(tmp_path / "missing.py")])
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(SystemExit, match=r"defines no main\(comm\)"):
        cli.main(["run", str(empty)])


@pytest.mark.parametrize(("source", "launcher", "kind"), [
    ("from mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank())\n", "mpirun -n N", "an mpi4py"),
    ("import mpi4py.MPI as MPI\n", "mpirun -n N", "an mpi4py"),
    ("import torch.distributed as dist\ndist.init_process_group('gloo')\n",
     "torchrun --nproc-per-node N", "a torch.distributed"),
    ("from torch import distributed as dist\n", "torchrun --nproc-per-node N", "a torch.distributed"),
])
def test_run_points_an_mpi4py_or_torch_script_at_its_launcher(tmp_path: Path, source: str,
                                                              launcher: str, kind: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    with pytest.raises(SystemExit) as info:
        cli.main(["run", str(script)])
    assert str(info.value) == (
        f"simcluster run: {script} is {kind} script with no main(comm): run it unmodified with "
        f"simcluster {launcher} {script}; simcluster run takes a script that defines async def "
        "main(comm)")


def test_run_takes_a_main_script_that_also_imports_torch_distributed(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "ok.py"
    script.write_text("if False:  # named for the check, never imported (torch is optional)\n"
                      "    import torch.distributed\n"
                      "async def main(comm):\n    print(await comm.all_reduce(1))\n")
    rc, out, _ = run_cli(capsys, "run", str(script), "-n", "2")
    assert rc == 0 and out.splitlines()[:2] == ["2", "2"]


def test_run_reports_a_deadlock_and_a_failing_rank(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    stuck = tmp_path / "stuck.py"
    stuck.write_text("async def main(comm):\n    await comm.recv(src=(comm.rank + 1) % comm.size)\n")
    rc, out, err = run_cli(capsys, "run", str(stuck), "-n", "2")
    assert (rc, out) == (1, "")
    assert err.startswith("simcluster run: deadlock: 2 ranks blocked")
    assert "rank 0 waiting in recv(src=1, tag=ANY_TAG) at stuck.py:2" in err
    assert "wait-for cycle: 0 -> 1 -> 0" in err

    failing = tmp_path / "failing.py"
    failing.write_text("async def main(comm):\n"
                       "    if comm.rank == 1:\n"
                       "        raise ValueError('bad input')\n")
    rc, out, err = run_cli(capsys, "run", str(failing), "-n", "2")
    assert rc == 1
    assert 'failing.py", line 3, in main' in err  # the rank's own traceback
    assert "simcluster run: rank 1: run: raised ValueError: bad input" in err


# ---- progress ----


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_and_is_erased(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    script = tmp_path / "slow_ring.py"
    script.write_text(RING.format(wait=0.35))
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(cli, "PROGRESS_AFTER", 0.0)  # at once, not after a few seconds
    assert cli.main(["run", str(script), "-n", "3"]) == 0
    shown = terminal.getvalue()
    # rank 2 is done at once; rank 0 sleeps in real time, rank 1 waits for it
    assert "\rsimcluster: 1/3 ranks finished, virtual time 0 s" in shown
    assert 2 <= shown.count("\rsimcluster:") <= 4  # about ten a second, for 0.35 s
    assert shown.endswith("\r")  # the line is erased before the results print
    assert capsys.readouterr().out.startswith("rank 0: 2\n")



def test_progress_waits_a_few_seconds_before_it_shows(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    script = tmp_path / "slow_ring.py"
    script.write_text(RING.format(wait=0.35))
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.PROGRESS_AFTER >= 2.0
    assert cli.main(["run", str(script), "-n", "3"]) == 0
    assert terminal.getvalue() == ""  # a short run: no line, not even one erased
    assert capsys.readouterr().out.startswith("rank 0: 2\n")


def test_progress_shows_events_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(cli, "monotonic", lambda: clock[0])
    stream = FakeTerminal()
    progress = cli._Progress(stream, after=2.0)
    progress(0, 8, 0.5, 1000)
    assert stream.getvalue() == ""  # not yet: under 2 s
    clock[0] += 2.5
    progress(3, 8, 0.75, 1000 + 5_000_000)  # 5M events in 2.5 s
    assert stream.getvalue() == "\rsimcluster: 3/8 ranks finished, virtual time 750 ms, 2M events/s"
    progress.close()
    assert stream.getvalue().endswith("\r" + " " * 64 + "\r")


MPI_RING = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
for step in range({steps}):
    comm.Barrier()
    if step % 2000 == 0:
        print("step", step, "rank", comm.rank)
"""


def test_mpirun_progress_is_erased_before_each_line_the_ranks_print(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "barriers.py"
    script.write_text(MPI_RING.format(steps=20000))
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(cli, "PROGRESS_AFTER", 0.0)
    assert cli.main(["mpirun", "-n", "2", "--exact", str(script)]) == 0
    shown = terminal.getvalue()
    assert "\rsimcluster: 0/2 ranks finished, virtual time " in shown
    assert shown.endswith("\r")  # erased at the end
    out = capsys.readouterr().out
    # the ranks' lines are whole: the display erased itself (on stderr) before each was written
    assert out.splitlines() == [f"step {s} rank {r}" for s in range(0, 20000, 2000) for r in (0, 1)]


LONG_MPI_RUN = """
import time
from mpi4py import MPI
comm = MPI.COMM_WORLD
wall = lambda: time.clock_gettime(time.CLOCK_MONOTONIC)  # time.monotonic() is virtual in a rank
deadline = wall() + 2.8  # longer than PROGRESS_AFTER, on rank 0's clock
while comm.bcast(wall() < deadline if comm.rank == 0 else None):
    comm.Barrier()
print("done", comm.rank)
"""


@pytest.mark.timeout(120)
@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("stderr", ["terminal", "pipe"])
def test_a_long_mpirun_shows_progress_on_a_terminal_only(stderr: str, tmp_path: Path) -> None:
    import pty

    (tmp_path / "long.py").write_text(LONG_MPI_RUN)
    argv = [sys.executable, "-m", "simcluster", "mpirun", "-n", "2", "--exact", "long.py"]
    if stderr == "pipe":
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=100)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "done 0\ndone 1\n", "")
        return
    main, child = pty.openpty()
    with subprocess.Popen(argv, cwd=tmp_path, stdin=child, stdout=child, stderr=child) as proc:
        os.close(child)
        shown = b""
        while True:
            try:
                got = os.read(main, 65536)
            except OSError:  # EIO: the child side closed
                break
            if not got:
                break
            shown += got
        assert proc.wait(timeout=100) == 0
    os.close(main)
    text = shown.decode()
    # (events a second once the engine has counted some: each few thousand events)
    assert re.search(r"\rsimcluster: 0/2 ranks finished, virtual time [0-9.]+ (s|ms|us|ns)"
                     r"(, [0-9.]+[kMG]? events/s)?\r", text), text
    # erased in place before the ranks' lines: what is left on the screen is the output
    assert "\r" + " " * 20 in text
    screen = re.sub(r"\r +\r", "", re.sub(r"\rsimcluster: [^\r\n]*", "", text))
    assert screen == "done 0\r\ndone 1\r\n", text[-300:]


def test_progress_is_quiet_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    script = tmp_path / "slow_ring.py"
    script.write_text(RING.format(wait=0.25))
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert cli.main(["run", str(script), "-n", "3"]) == 0
    assert pipe.getvalue() == ""


def test_progress_formats_virtual_time_with_a_unit() -> None:
    stream = FakeTerminal()
    progress = cli._Progress(stream)
    progress(1, 4, 0.0123)
    progress(4, 4, 2.5e-6)
    progress.close()
    assert stream.getvalue().split("\r")[1:3] == [
        "simcluster: 1/4 ranks finished, virtual time 12.3 ms",
        "simcluster: 4/4 ranks finished, virtual time 2.5 us ",  # padded over the longer line
    ]


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.0, "0 s"), (2.5, "2.5 s"), (0.0123, "12.3 ms"), (4.0055e-06, "4.0055 us"),
    (1.0001e-06, "1.0001 us"), (7.5e-07, "750 ns"), (5e-10, "0.5 ns"), (1234.5, "1234.5 s"),
])
def test_virtual_times_are_shown_with_a_unit_for_their_magnitude(seconds: float, shown: str) -> None:
    stream = FakeTerminal()
    cli._Progress(stream)(0, 1, seconds)
    assert stream.getvalue() == f"\rsimcluster: 0/1 ranks finished, virtual time {shown}"


# ---- simcluster trace show / plot ----


@pytest.fixture
def trace_file(ring: Path, tmp_path: Path) -> Path:
    async def main(comm: sc.Comm) -> None:
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        await comm.sendrecv(comm.rank, right, src=left)

    path = tmp_path / "ring.json"
    sc.run(main, world_size=3, latency=sc.latency.Constant(2e-6), trace=path)
    return path


def test_trace_show_prints_the_message_sequence(capsys: pytest.CaptureFixture[str],
                                               trace_file: Path) -> None:
    rc, out, _ = run_cli(capsys, "trace", "show", str(trace_file))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["rank", "0", "rank", "1", "rank", "2"]
    assert [line.split()[:3] for line in lines[1:4]] == [["0.000", "->", "2.000"]] * 3
    assert lines[4] == "3 messages; times in virtual microseconds (send -> receive)"


def test_trace_plot_writes_a_png(capsys: pytest.CaptureFixture[str], trace_file: Path,
                                 tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    rc, out, _ = run_cli(capsys, "trace", "plot", str(trace_file), "-o", str(png))
    assert (rc, out) == (0, f"wrote {png}\n")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_trace_commands_reject_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(SystemExit, match=r"^simcluster trace show: trace: cannot read"):
        cli.main(["trace", "show", str(path)])


def test_run_takes_a_plain_main_and_the_compute_option(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(textwrap.dedent("""
        import time

        def main(comm):
            start = time.clock_gettime(time.CLOCK_MONOTONIC)  # wall time: time.perf_counter() is virtual in a rank
            while time.clock_gettime(time.CLOCK_MONOTONIC) - start < 0.02:
                pass
            comm.Barrier()
            return comm.allreduce(comm.rank)
    """))
    rc, out, _ = run_cli(capsys, "run", str(script), "-n", "3")
    assert rc == 0
    assert out.splitlines()[:3] == ["rank 0: 3", "rank 1: 3", "rank 2: 3"]
    assert "elapsed 0 s virtual" in out  # no messages cost time, and compute is off by default
    rc, out, _ = run_cli(capsys, "run", str(script), "-n", "3", "--compute", "wall:10")
    assert rc == 0
    elapsed = out.splitlines()[-1]
    value, unit = elapsed.split()[1:3]
    assert unit == "ms" and float(value) >= 200  # 20 ms of wall time, times 10


# ---- the front door: what a user sees when things go wrong ----

PRINTS_FOREVER = {
    "run": """
async def main(comm):
    for i in range(10**6):
        print(comm.rank, i)
        await comm.barrier()
""",
    "mpirun": """
from mpi4py import MPI
comm = MPI.COMM_WORLD
for i in range(10**6):
    print(comm.rank, i)
    comm.Barrier()
""",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "mpirun"])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_status_141(
        command: str, tmp_path: Path) -> None:
    # `simcluster ... | head`: the pipe's reader exits; the command stops as `cat` does under
    # SIGPIPE (128 + 13) and prints nothing, not a BrokenPipeError traceback
    (tmp_path / "chatty.py").write_text(PRINTS_FOREVER[command])
    with subprocess.Popen([sys.executable, "-m", "simcluster", command, "chatty.py", "-n", "2"],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            assert proc.stdout.readline() in ("0 0\n", "1 0\n")
            proc.stdout.close()
            err = proc.stderr.read()
            status = proc.wait(timeout=60)
        finally:
            proc.kill()
    assert (status, err) == (141, "")


def test_a_syntax_error_in_the_script_prints_as_python_prints_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("async def main(comm):\n    x = (1,\n    return x\n")
    rc, out, err = run_cli(capsys, "run", "broken.py")
    python = subprocess.run([sys.executable, "broken.py"], capture_output=True, text=True)
    assert (rc, out) == (1, "")
    assert err == python.stderr  # file, line, caret, SyntaxError: no traceback through simcluster
    assert err.splitlines()[0] == f'  File "{tmp_path / "broken.py"}", line 2'
    assert err.splitlines()[-1] == "SyntaxError: '(' was never closed"


def test_an_error_while_loading_the_script_prints_as_python_prints_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fails.py").write_text("import json\njson.loads('{')\nasync def main(comm):\n    pass\n")
    rc, out, err = run_cli(capsys, "run", "fails.py")
    python = subprocess.run([sys.executable, "fails.py"], capture_output=True, text=True)
    assert (rc, out) == (1, "")
    assert err == python.stderr  # from the script's line inward: no cli.py, no runpy
    assert err.splitlines()[1] == f'  File "{tmp_path / "fails.py"}", line 2, in <module>'
