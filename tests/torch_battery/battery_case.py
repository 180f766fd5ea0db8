"""Run cases of torch's own distributed test battery, one after another, one JSON line per case.

    battery_case.py gloo|simcluster N OUT.jsonl CASE [CASE ...]
    battery_case.py gloo|simcluster N OUT.jsonl @CASES.txt      (one case a line)

The battery is ``DistributedTest._DistTestBase`` of
``torch/testing/_internal/distributed/distributed_test.py``, which ships in
torch's wheel. Its test methods, their decorators and their assertions run as
they are; only the harness around them differs between the two modes:

* ``gloo``: torch's own harness, as pytorch's ``test_distributed_spawn.py``
  drives it: ``TestDistBackend`` spawns ``N`` real processes per case
  (``MultiProcessTestCase._spawn_processes``), each runs
  ``init_process_group("gloo")`` on a ``file://`` init method, torch's file
  barrier, the test method, the barrier again; the parent reads the exit codes.
* ``simcluster``: the same steps, but the ``N`` processes are ``N`` ranks of
  one ``simcluster.torch.spawn`` (in a process forked for the case), the file barrier (which keys each process
  by ``os.getpid()`` and polls with ``time.sleep``) is a barrier of the run,
  and ``init_process_group("gloo")`` runs on simcluster's backend while
  reporting ``"gloo"``, as under ``simcluster torchrun``. A rank's exit
  (``sys.exit`` of a skip decorator) ends that rank, as it ends a process,
  and the case's outcome is read as torch's harness reads exit codes.

The battery reads ``BACKEND``, ``WORLD_SIZE`` and ``INIT_METHOD`` when it is
imported (its skip decorators are evaluated then), so one world size per
process. Each outcome is appended to ``OUT.jsonl`` as soon as it is known,
after a line naming the case being started, so a crash of this process (torch's
profiler, two ranks at once) is put on its case by the caller (``battery.py``),
who starts this runner again on the cases after it.

The structure of the adapter follows pytorch's
``test/distributed/test_distributed_spawn.py`` and ``TestDistBackend._run``
(BSD-3-Clause, Copyright (c) Facebook, Inc. and its affiliates); the code is
this project's own.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import unittest
from typing import Any

MODES = ("gloo", "simcluster")
CASE_WALL = 240.0
"""Wall seconds one case may take under simcluster before the run is stopped with its report."""


def _environment(n: int) -> None:
    """What the battery reads at import: the backend it tests, the world size, a file:// init."""
    os.environ["BACKEND"] = "gloo"
    os.environ["WORLD_SIZE"] = str(n)
    # file://: test_barrier_timeout_global runs only there; torch's own CI runs both, this one
    init_dir = tempfile.mkdtemp(prefix="torch-battery-init-")
    atexit.register(shutil.rmtree, init_dir, True)  # this process's: forked cases leave by os._exit
    os.environ["INIT_METHOD"] = "file://" + os.path.join(init_dir, "shared_init_file")
    os.environ.setdefault("TEMP_DIR", init_dir)  # replaced per case by initialize_temp_directories
    os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")  # its hint names a file not here


class _Out:
    """The JSON lines file: one ``{"start": case}`` before a case, one outcome line after it."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed at exit

    def start(self, case: str) -> None:
        self._write({"start": case})

    def outcome(self, case: str, outcome: str, detail: str, wall: float) -> None:
        self._write({"case": case, "outcome": outcome, "detail": detail[-3000:],
                     "wall": round(wall, 3)})

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


# ---- gloo: torch's own harness, real processes ----


class _GlooResult(unittest.TestResult):
    """unittest's result, written out case by case."""

    def __init__(self, out: _Out) -> None:
        super().__init__()
        self.out = out
        self.started = 0.0

    def _case(self, test: unittest.TestCase) -> str:
        return test.id().rsplit(".", 1)[-1]

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        super().startTest(test)
        self.out.start(self._case(test))
        self.started = time.perf_counter()

    def _write(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        self.out.outcome(self._case(test), outcome, detail, time.perf_counter() - self.started)

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._write(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        self._write(test, "fail", "".join(traceback.format_exception(*err)))

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        self._write(test, "fail", "".join(traceback.format_exception(*err)))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        self._write(test, "skip", reason)


def _gloo_class() -> type:
    """pytorch's ``TestDistBackendWithSpawn``: torch's harness on gloo with spawned processes."""
    import torch
    from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self) -> None:
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    # pickled by reference for the spawned processes: this file's module-level name
    TestDistBackendWithSpawn.__qualname__ = "TestDistBackendWithSpawn"
    return TestDistBackendWithSpawn


if os.environ.get("TORCH_BATTERY_MODE") == "gloo":
    # set by main() and inherited by the processes torch spawns, which import this file again
    # (as __mp_main__) and find the class here by its name, to run TestDistBackend._run
    TestDistBackendWithSpawn = _gloo_class()


def run_gloo(cases: list[str], out: _Out) -> None:
    """Each case in torch's harness: ``N`` spawned processes with gloo, as pytorch's CI runs them."""
    cls = globals()["TestDistBackendWithSpawn"]
    suite = unittest.TestSuite(cls(case) for case in cases)
    suite.run(_GlooResult(out))


# ---- simcluster: the same steps on the ranks of one spawn ----


class _Identity:
    """What ``torchrun._BackendMap`` asks of its torchrun session and torch session, for a spawn."""

    def note(self, line: str) -> None:
        """The one line torchrun prints when it first maps a backend: not wanted here."""

    def current(self) -> Any:
        from simcluster.torch import _session

        session = _session.active()
        return None if session is None else session.current()


def _run_barrier() -> None:
    """A barrier of every rank of the run (torch's file barrier, without files or pids).

    On a communicator of its own: the world's is the default group's, which a
    case may leave with a barrier of its own pending (a timeout test).
    """
    from simcluster.engine import sync
    from simcluster.torch import _session

    session = _session.active()
    state = session.current() if session is not None else None
    assert state is not None, "called from a rank of the battery's spawn"
    comm = state.comm
    side = comm.named("torch battery: the harness's barrier", comm.world_ranks, comm.rank)
    sync.block(side.ibarrier())


def _verdict(n: int, per_rank: dict[int, tuple[str, str]], run_error: BaseException | None
             ) -> tuple[str, str]:
    """The case's outcome from each rank's, as torch's ``_check_return_codes`` reads exit codes.

    A rank that raised fails the case; otherwise a rank that never finished
    (the run ended in a deadlock or timed out) fails it; otherwise rank 0's
    outcome (pass, or skip with its reason) is the case's.
    """
    failed = [(r, d) for r, (o, d) in sorted(per_rank.items()) if o == "fail"]
    if failed:
        return "fail", "\n".join(f"rank {r}: {d}" for r, d in failed)
    missing = [r for r in range(n) if r not in per_rank]
    if missing or run_error is not None:
        why = f"{type(run_error).__name__}: {run_error}" if run_error is not None else ""
        return "fail", f"ranks {missing} did not finish; {why}"
    return per_rank[0]


def run_simcluster(n: int, cases: list[str], out: _Out) -> None:
    """Each case on ``n`` ranks of one ``simcluster.torch.spawn``, its test body unmodified."""
    from datetime import timedelta

    import torch.distributed as dist
    from torch.testing._internal import common_distributed, common_utils
    from torch.testing._internal.distributed import distributed_test
    from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend

    import simcluster.torch
    from simcluster import torchrun

    skip_codes = {skip.exit_code: skip.message for skip in common_distributed.TEST_SKIPS.values()}

    class TestDistBackendOnSimcluster(TestDistBackend, DistributedTest._DistTestBase):
        def _barrier(self, *args: Any, **kwargs: Any) -> None:
            _run_barrier()

    def rank_main(rank: int, case: str, file_name: str, per_rank: dict[int, tuple[str, str]]) -> None:
        # TestDistBackend._run, with a return where a process would exit
        self = TestDistBackendOnSimcluster(case)
        self.rank = rank
        self.file_name = file_name
        timeout = timedelta(seconds=distributed_test.CUSTOM_PG_TIMEOUT.get(
            case, distributed_test.default_pg_timeout))
        try:
            dist.init_process_group(init_method=self.init_method, backend=distributed_test.BACKEND,
                                    world_size=n, rank=rank, timeout=timeout)
            self._barrier()
            # MultiProcessTestCase.run_test, without its listener thread and pipes
            os.environ["TORCH_SHOW_CPP_STACKTRACES"] = "1"
            common_utils.set_rng_seed()
            getattr(self, case)()
        except unittest.SkipTest as skip:
            per_rank[rank] = ("skip", str(skip))
            return
        except SystemExit as exit_:  # a skip decorator exits the process with its code
            code = exit_.code if isinstance(exit_.code, int) else 1
            if code in skip_codes:
                per_rank[rank] = ("skip", skip_codes[code])
            elif code == 0:
                per_rank[rank] = ("pass", "")
            else:
                per_rank[rank] = ("fail", f"exited with code {exit_.code}")
            return
        except BaseException:  # noqa: BLE001 - every failure is the case's outcome
            per_rank[rank] = ("fail", traceback.format_exc())
            return
        per_rank[rank] = ("pass", "")
        self._barrier()
        dist.destroy_process_group()

    def run_case(case: str) -> tuple[str, str]:
        method = getattr(TestDistBackendOnSimcluster, case)
        if getattr(method, "__unittest_skip__", False):  # unittest skips it before any spawn
            return "skip", getattr(method, "__unittest_skip_why__", "")
        common_distributed.initialize_temp_directories()  # TEMP_DIR, as TestDistBackend.setUp
        with tempfile.NamedTemporaryFile(delete=False) as f:  # MultiProcessTestCase.setUp
            file_name = f.name
        per_rank: dict[int, tuple[str, str]] = {}
        error: BaseException | None = None
        try:
            with torchrun._BackendMap(_Identity(), _Identity()):  # type: ignore[arg-type]
                simcluster.torch.spawn(rank_main, args=(case, file_name, per_rank), nprocs=n,
                                       timeout=CASE_WALL)
        except BaseException as exc:  # noqa: BLE001 - a deadlock, a timeout: the case's outcome
            error = exc
        finally:
            common_distributed.cleanup_temp_dir()
            os.unlink(file_name)
        return _verdict(n, per_rank, error)

    for case in cases:
        out.start(case)
        started = time.perf_counter()
        # each case in a process of its own, forked from this one (torch imported once): a case
        # cannot leave state behind for the next, and a crash (SIGSEGV) ends only its own
        pid = os.fork()
        if pid == 0:
            try:
                try:
                    outcome, detail = run_case(case)
                except BaseException:  # noqa: BLE001 - the harness itself failed: the case fails
                    outcome, detail = "fail", traceback.format_exc()
                out.outcome(case, outcome, detail, time.perf_counter() - started)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        if not os.WIFEXITED(status):
            signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else status
            out.outcome(case, "crash", f"the case's process ended by signal {signal}",
                        time.perf_counter() - started)


def main(argv: list[str]) -> None:
    mode, n, path, cases = argv[0], int(argv[1]), argv[2], argv[3:]
    if len(cases) == 1 and cases[0].startswith("@"):  # a short command line (simcluster.MPI's
        with open(cases[0][1:], encoding="utf-8") as f:  # INFO_ENV holds it, 1024 characters)
            cases = f.read().split()
    if mode not in MODES:
        raise SystemExit(f"battery_case.py: mode {mode!r}: use one of {', '.join(MODES)}")
    _environment(n)
    out = _Out(path)
    if mode == "gloo":
        os.environ["TORCH_BATTERY_MODE"] = "gloo"
        globals()["TestDistBackendWithSpawn"] = _gloo_class()
        run_gloo(cases, out)
    else:
        run_simcluster(n, cases, out)


if __name__ == "__main__":
    main(sys.argv[1:])
