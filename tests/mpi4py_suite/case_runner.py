"""Run one module of mpi4py's own test suite on this rank and record each case's outcome.

Run once per rank, by ``simcluster mpirun -n N`` or by the real ``mpiexec -n N python``:

    case_runner.py SUITE_DIR MODULE OUT_DIR

The module's code is executed in a namespace of this rank's own (as a script's
``__main__`` would be), its ``unittest`` cases are run in order, and each outcome
is appended to ``OUT_DIR/MODULE.rank<R>.jsonl`` as soon as it is known, so a run
that stops part-way still leaves the outcomes of the cases it finished. A module
that does not import leaves one line for the pseudo-case ``(import)`` with its error.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types
import unittest


IMPORT = "(import)"  # the pseudo-case that records a module that does not import


class _Recorder(unittest.TestResult):
    """Writes one JSON line per finished case: {"case", "outcome", "detail", "error", "wall"}.

    ``error`` is the first line of a failure's exception (``Type: message``), empty otherwise.
    """

    def __init__(self, out: str) -> None:
        super().__init__()
        self._out = open(out, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._started = 0.0

    def close(self) -> None:
        self._out.close()

    def _write(self, test: unittest.TestCase, outcome: str, detail: str = "",
               err: object = None) -> None:
        test = getattr(test, "test_case", test)  # a subtest counts for its case
        name = test.id().split(".", 1)[-1]  # Class.method: the module's name is the file's
        line = {"case": name, "outcome": outcome, "detail": detail[-2000:], "error": _first_line(err),
                "wall": round(time.perf_counter() - self._started, 4)}
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()

    def record_import_error(self, err: object) -> None:
        detail = "".join(traceback.format_exception(*err))  # type: ignore[misc]
        line = {"case": IMPORT, "outcome": "error", "error": _first_line(err),
                "detail": detail[-2000:], "wall": 0.0}
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        super().startTest(test)
        self._started = time.perf_counter()

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._write(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: object) -> None:  # noqa: N802
        self._write(test, "fail", "".join(traceback.format_exception(*err)), err)  # type: ignore[misc]

    def addError(self, test: unittest.TestCase, err: object) -> None:  # noqa: N802
        self._write(test, "error", "".join(traceback.format_exception(*err)), err)  # type: ignore[misc]

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        if not hasattr(test, "test_case"):  # a skipped subtest leaves its case to pass or fail
            self._write(test, "skip", reason)

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase,  # noqa: N802
                   err: object) -> None:
        if err is not None:  # the case then ends without addSuccess: this line stands
            kind = "fail" if issubclass(err[0], test.failureException) else "error"  # type: ignore[index]
            self._write(test, kind, "".join(traceback.format_exception(*err)), err)  # type: ignore[misc]

    def addExpectedFailure(self, test: unittest.TestCase, err: object) -> None:  # noqa: N802
        self._write(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._write(test, "fail", "unexpected success")


def _first_line(err: object) -> str:
    """``Type: first line of the message`` of an exc_info triple, or "" for none."""
    if not err:
        return ""
    kind, value = err[0], err[1]  # type: ignore[index]
    text = str(value).strip().splitlines()
    return f"{kind.__name__}: {text[0] if text else ''}".strip().rstrip(":")[:200]


def main(suite_dir: str, module: str, out_dir: str) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    if suite_dir not in sys.path:
        sys.path.insert(0, suite_dir)
    path = os.path.join(suite_dir, module + ".py")
    namespace = types.ModuleType(module)  # this rank's own copy of the module's globals
    namespace.__file__ = path
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    recorder = _Recorder(os.path.join(out_dir, f"{module}.rank{rank}.jsonl"))
    try:
        try:
            exec(code, namespace.__dict__)
        except BaseException:  # the module does not import: say why, as case IMPORT
            recorder.record_import_error(sys.exc_info())
            raise
        unittest.defaultTestLoader.loadTestsFromModule(namespace).run(recorder)
    finally:
        recorder.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
