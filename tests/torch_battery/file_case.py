"""Run the test cases of one of pytorch's test files, one after another, one JSON line per case.

    file_case.py --list FILE                        (print the file's cases, as JSON)
    file_case.py gloo|simcluster FILE OUT.jsonl CASE [CASE ...]
    file_case.py gloo|simcluster FILE OUT.jsonl @CASES.txt      (one case a line)

``FILE`` is a test file of pytorch's ``test/distributed/`` (``test_c10d_gloo.py``,
``test_c10d_functional_native.py``, a DTensor or FSDP2 file), which is not in
torch's wheel: a copy of pytorch's ``test/`` folder has them. A case is
``Class.test_method``, every case ``unittest`` finds in the file, as pytorch's
``run_tests()`` runs them. The file is imported as it is (its folder first on
``sys.path``, for the modules it imports beside it, such as
``test_c10d_common``); its test bodies, decorators, ``setUp`` and its base
classes' harness run unmodified. Only where the ranks run differs:

* ``gloo``: unittest runs the cases in this process, as ``run_tests()`` does;
  a ``MultiProcessTestCase`` (``DTensorTestBase``, ``FSDPTest`` and
  ``ProcessGroupGlooTest`` are ones) spawns ``world_size`` real processes per
  case, each running the base's ``_run`` classmethod, and reads their exit
  codes.
* ``simcluster``: the same, in a process forked for the case, but
  ``MultiProcessTestCase._start_processes`` runs the base's ``_run`` for each
  rank on the ranks of one ``simcluster.torch.spawn`` instead of starting
  processes; a rank's ``sys.exit`` (the skip decorators) or exception becomes
  its exit code, and each rank stands for a process that has exited with it, so
  the base's ``_join_processes`` and ``_check_return_codes`` read the outcome
  as they read processes'. ``init_process_group("gloo")`` runs on
  simcluster's backend, reporting ``"gloo"``, as in ``battery_case.py``. A
  test case that is not a ``MultiProcessTestCase`` (one process, often a
  ``world_size=1`` group) runs in one rank of a spawn; a
  ``MultiThreadedTestCase`` (torch's threaded process group, no backend by
  name) and a ``MultiProcContinuousTest`` (worker processes kept across cases)
  are not run there: their outcome is ``not run`` with the reason.

The structure follows ``MultiProcessTestCase`` of
``torch/testing/_internal/common_distributed.py`` (BSD-3-Clause, Copyright (c)
Facebook, Inc. and its affiliates); the code is this project's own.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
import unittest
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE))

import battery_case  # noqa: E402 - beside this file

MODES = ("gloo", "simcluster")
CASE_WALL = battery_case.CASE_WALL


def load(path: str) -> ModuleType:
    """The test file, imported as pytorch's CI imports it: by its name, its folder first on sys.path.

    A spawned process (``gloo``) unpickles the case's class by that module
    name, and finds it the same way: it inherits this ``sys.path``.
    """
    file = Path(path).resolve()
    sys.path.insert(0, str(file.parent))
    os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")  # its hint names a file not here
    return importlib.import_module(file.stem)


def tests_of(module: ModuleType) -> dict[str, unittest.TestCase]:
    """Every case of the file, ``Class.test_method`` -> the test, as ``run_tests()`` collects them."""
    found: dict[str, unittest.TestCase] = {}

    def walk(suite: unittest.TestSuite | unittest.TestCase) -> None:
        if isinstance(suite, unittest.TestSuite):
            for item in suite:
                walk(item)
        elif not isinstance(suite, unittest.loader._FailedTest):  # type: ignore[attr-defined]
            found[case_name(suite)] = suite

    walk(unittest.defaultTestLoader.loadTestsFromModule(module))
    return found


def case_name(test: unittest.TestCase) -> str:
    return ".".join(test.id().split(".")[-2:])


class _Result(unittest.TestResult):
    """unittest's result, each case's outcome written to the JSON lines as it is known."""

    def __init__(self, out: battery_case._Out | None) -> None:
        super().__init__()
        self.out = out
        self.started = 0.0
        self.last: tuple[str, str] = ("fail", "no outcome")

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        super().startTest(test)
        if self.out is not None:
            self.out.start(case_name(test))
        self.started = time.perf_counter()

    def _write(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        self.last = (outcome, detail)
        if self.out is not None:
            self.out.outcome(case_name(test), outcome, detail, time.perf_counter() - self.started)

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._write(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        self._write(test, "fail", "".join(traceback.format_exception(*err)))

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        self._write(test, "fail", "".join(traceback.format_exception(*err)))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        self._write(test, "skip", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        self._write(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._write(test, "fail", "unexpected success")


def run_gloo(tests: list[unittest.TestCase], out: battery_case._Out) -> None:
    """The cases as ``run_tests()`` runs them: real processes, gloo."""
    unittest.TestSuite(tests).run(_Result(out))


# ---- simcluster: the processes a case spawns are the ranks of one spawn ----


class _Exited:
    """What ``MultiProcessTestCase`` reads of a process that has exited: a rank that has returned."""

    def __init__(self, rank: int, exitcode: int) -> None:
        self.pid = -1 - rank  # a key of pid_to_pipe, never a real process's
        self.exitcode = exitcode
        self.name = f"rank {rank}"

    def terminate(self) -> None:
        """Nothing to end: the rank has returned."""

    def join(self, timeout: float | None = None) -> None:
        """Nothing to wait for."""

    def is_alive(self) -> bool:
        return False


class _Said:
    """The parent's end of a rank's pipe: what the rank sent there (its traceback), in order."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages

    def recv(self) -> Any:
        if not self.messages:
            raise EOFError("the rank sent nothing more")
        return self.messages.pop(0)

    def poll(self, timeout: float = 0.0) -> bool:
        return bool(self.messages)

    def send(self, obj: Any) -> None:
        """A request for a rank's traceback (a timeout): the rank has already returned."""

    def close(self) -> None:
        """Nothing to close."""


def _exit_code(exc: SystemExit) -> int:
    """The exit status of a process that raised ``exc``, as Python sets it."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def _rank(rank: int, cls: Any, case: str, file_name: str, kwargs: dict[str, Any],
          said: dict[int, tuple[int, list[Any]]]) -> None:
    """One spawned process: the base's ``_run`` for this rank, its exit code, what it sent."""
    parent, child = multiprocessing.Pipe()  # real: run_test's listener thread waits on it
    try:
        cls._run(rank, case, file_name, child, **kwargs)
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_)
    except BaseException:  # noqa: BLE001 - a process would print it and exit with 1
        code = 1
        traceback.print_exc()
    child.close()  # as the process's end of it closes when it exits
    messages = []
    while True:
        try:
            if not parent.poll():
                break
            messages.append(parent.recv())
        except (EOFError, OSError):
            break
    parent.close()
    said[rank] = (code, messages)


def _start_on_ranks(self: Any, proc: Any) -> None:
    """``MultiProcessTestCase._start_processes``: each process a rank of one simcluster spawn.

    Runs the ranks to their end, then leaves in ``self.processes`` and
    ``self.pid_to_pipe`` what the parent reads of exited processes. A rank
    that did not finish (a deadlock, the wall-clock limit) has exited with the
    harness's error code, the run's report as what it sent.
    """
    import simcluster.torch
    from simcluster import torchrun

    n = int(self.world_size)
    said: dict[int, tuple[int, list[Any]]] = {}
    kwargs = {"fake_pg": getattr(self, "fake_pg", False)}
    problem = ""
    try:
        with torchrun._BackendMap(battery_case._Identity(), battery_case._Identity()):  # type: ignore[arg-type]
            simcluster.torch.spawn(_rank, args=(type(self), self._current_test_name(),
                                                self.file_name, kwargs, said),
                                   nprocs=n, timeout=CASE_WALL)
    except BaseException as exc:  # noqa: BLE001 - a deadlock, a timeout: the case's outcome
        problem = "".join(traceback.format_exception(exc))[-3000:]
    error = type(self).TEST_ERROR_EXIT_CODE
    self.processes = []
    self.pid_to_pipe = {}
    for rank in range(n):
        code, messages = said.get(rank, (error, [f"the rank did not finish:\n{problem}"]))
        process = _Exited(rank, code)
        self.processes.append(process)
        self.pid_to_pipe[process.pid] = _Said(messages)


def _in_one_rank(test: unittest.TestCase) -> tuple[str, str]:
    """A case of one process, run whole (setUp, the test, tearDown) on rank 0 of a spawn of one."""
    import simcluster.torch
    from simcluster import torchrun

    result = _Result(None)

    def rank_main(rank: int) -> None:
        test.run(result)

    try:
        with torchrun._BackendMap(battery_case._Identity(), battery_case._Identity()):  # type: ignore[arg-type]
            simcluster.torch.spawn(rank_main, nprocs=1, timeout=CASE_WALL)
    except BaseException as exc:  # noqa: BLE001 - a deadlock, a timeout
        return "fail", "".join(traceback.format_exception(exc))
    return result.last


def not_run(test: unittest.TestCase) -> str | None:
    """Why the case is not run on simcluster's ranks, or None."""
    from torch.testing._internal.common_distributed import MultiProcContinuousTest, MultiThreadedTestCase

    if isinstance(test, MultiThreadedTestCase):
        return "a MultiThreadedTestCase: torch's threaded process group, no backend by name"
    if isinstance(test, MultiProcContinuousTest):
        return "a MultiProcContinuousTest: worker processes kept across cases"
    return None


def run_case(test: unittest.TestCase) -> tuple[str, str]:
    """One case on simcluster's ranks: (outcome, detail)."""
    from torch.testing._internal.common_distributed import MultiProcessTestCase

    if getattr(getattr(test, test._testMethodName), "__unittest_skip__", False) or getattr(
            type(test), "__unittest_skip__", False):  # unittest skips it before setUp
        result = _Result(None)
        test.run(result)
        return result.last
    why = not_run(test)
    if why is not None:
        return "not run", why
    if not isinstance(test, MultiProcessTestCase):
        return _in_one_rank(test)
    MultiProcessTestCase._start_processes = _start_on_ranks
    result = _Result(None)
    unittest.TestSuite([test]).run(result)  # setUpClass, setUp, the join, tearDown
    return result.last


def run_simcluster(tests: list[unittest.TestCase], out: battery_case._Out) -> None:
    """Each case in a process forked for it, its ranks simcluster's."""
    for test in tests:
        case = case_name(test)
        out.start(case)
        started = time.perf_counter()
        pid = os.fork()  # a case leaves no state for the next, and a crash ends only its own
        if pid == 0:
            try:
                try:
                    outcome, detail = run_case(test)
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
    if argv[:1] == ["--list"]:
        print(json.dumps(sorted(tests_of(load(argv[1])))))
        return
    mode, path, out_path, cases = argv[0], argv[1], argv[2], argv[3:]
    if mode not in MODES:
        raise SystemExit(f"file_case.py: mode {mode!r}: use one of {', '.join(MODES)}")
    if len(cases) == 1 and cases[0].startswith("@"):
        with open(cases[0][1:], encoding="utf-8") as f:
            cases = f.read().split()
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch-battery-file-"))
    found = tests_of(load(path))
    out = battery_case._Out(out_path)
    missing = [case for case in cases if case not in found]
    for case in missing:
        out.outcome(case, "not run", f"{path} has no case {case}", 0.0)
    tests = [found[case] for case in cases if case in found]
    (run_gloo if mode == "gloo" else run_simcluster)(tests, out)


if __name__ == "__main__":
    main(sys.argv[1:])
