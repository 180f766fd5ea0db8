"""Run torch's own distributed test battery on simcluster (or on gloo), case by case.

    python tests/torch_battery/battery.py [-n 2 3 4] [--backend simcluster|gloo]
                                          [--case test_x ...] [--json OUT] [--jobs J]

The battery is ``DistributedTest._DistTestBase`` of torch's wheel
(``torch/testing/_internal/distributed/distributed_test.py``): every test
method is a case. ``battery_case.py`` runs the cases one after another in a
process of its own per world size, its test bodies unmodified:
``--backend simcluster`` on the ranks of ``simcluster.torch.spawn`` (the
program asks for gloo), ``--backend gloo`` in torch's own harness with real
processes and gloo, as pytorch's CI runs it. A case that crashes its runner
(SIGSEGV) is recorded as ``crash`` and the runner starts again after it.

With ``--backend simcluster`` the table printed compares with gloo's passes
recorded in ``gloo_baseline.json``, and each miss is printed with its reason
from ``known_failures.txt``. The gloo baseline is written anew with

    nice python tests/torch_battery/battery.py --backend gloo -n 2 3 4 \\
        --json tests/torch_battery/gloo_baseline.json

(each case spawns its processes, each importing torch: about 10 s a case, an
hour per world size on two cores).

The other batteries pytorch runs on gloo are test files of its
``test/distributed/`` folder, which the wheel does not ship; given a copy,

    python tests/torch_battery/battery.py --file PATH/test/distributed/test_c10d_gloo.py \
        [--backend gloo --json tests/torch_battery/file_baseline.json]

runs every ``Class.test_method`` of the file, as ``run_tests()`` would, on
simcluster's ranks or on gloo with real processes (``file_case.py``; a class's
``world_size`` is the file's own, ``-n`` does not apply), and prints a table
per file against gloo's passes in ``file_baseline.json``, each miss with its
reason from ``file_known_failures.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUNNER = HERE / "battery_case.py"
BASELINE = HERE / "gloo_baseline.json"
KNOWN = HERE / "known_failures.txt"
FILE_RUNNER = HERE / "file_case.py"
FILE_BASELINE = HERE / "file_baseline.json"
FILE_KNOWN = HERE / "file_known_failures.txt"
SILENCE = 600.0
"""Wall seconds a runner may go without finishing a case before it is stopped (torch's own
harness gives a case 300 s; a simcluster case stops itself after battery_case.CASE_WALL)."""

Results = dict[int, dict[str, dict[str, str]]]  # N -> case -> {"outcome", "detail"}


def cases() -> list[str]:
    """The battery's cases: the test methods of ``_DistTestBase``, in name order."""
    code = ("import os, json; os.environ.update(BACKEND='gloo', WORLD_SIZE='2'); "
            "from torch.testing._internal.distributed.distributed_test import DistributedTest as D; "
            "print(json.dumps(sorted(n for n in dir(D._DistTestBase) if n.startswith('test'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          stdin=subprocess.DEVNULL)
    names: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return names


def _read(path: Path) -> tuple[dict[str, dict[str, str]], str | None]:
    """The outcomes in a runner's JSON lines, and the case it started and never finished."""
    done: dict[str, dict[str, str]] = {}
    started = None
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # a line cut short by a crash
                continue
            if "start" in record:
                started = record["start"]
            else:
                done[record["case"]] = {"outcome": record["outcome"], "detail": record["detail"]}
                if started == record["case"]:
                    started = None
    return done, started


def _run_runner(command: list[str], todo: list[str], out: Path, log: Path) -> int | None:
    """Run ``command OUT @CASES`` on ``todo`` until it exits (its status) or goes silent (None: stopped)."""
    # this checkout's simcluster, wherever the runner's folder is and whatever is installed
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONFAULTHANDLER="1", PYTHONPATH=path)
    listed = out.with_suffix(".cases")
    listed.write_text("\n".join(todo) + "\n", encoding="utf-8")
    with open(log, "ab") as sink:
        proc = subprocess.Popen([*command, str(out), f"@{listed}"],
                                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=out.parent, start_new_session=True)
        size, quiet_since = -1, time.monotonic()
        while proc.poll() is None:
            time.sleep(0.5)
            now_size = out.stat().st_size if out.exists() else 0
            if now_size != size:
                size, quiet_since = now_size, time.monotonic()
            elif time.monotonic() - quiet_since > SILENCE:
                os.killpg(proc.pid, signal.SIGKILL)  # the runner and the processes it spawned
                proc.wait()
                return None
        return proc.returncode


def run_size(backend: str, n: int, names: Sequence[str], log: bool = True,
             file: str | None = None) -> dict[str, dict[str, str]]:
    """Every case of ``names`` at world size ``n`` (of ``file``'s, if given); a crash or a silence
    is put on its case."""
    command = ([sys.executable, str(RUNNER), backend, str(n)] if file is None
               else [sys.executable, str(FILE_RUNNER), backend, str(Path(file).resolve())])
    label = f"-n {n}" if file is None else file_key(file)
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix=f"torch-battery-{backend}-{n}-") as tmp:
        todo = list(names)
        attempt = 0
        while todo:
            attempt += 1
            out, log_path = Path(tmp, f"out{attempt}.jsonl"), Path(tmp, f"log{attempt}.txt")
            status = _run_runner(command, todo, out, log_path)
            done, started = _read(out)
            results.update(done)
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:] if log_path.exists() else ""
            if started is not None:
                what = "timeout" if status is None else "crash"
                results[started] = {"outcome": what, "detail": f"runner exit status {status}\n{tail}"}
            elif status != 0 and len(done) < len(todo):  # it stopped between cases: say so, go on
                if log:
                    print(f"{backend} {label}: runner exited {status}\n{tail}", file=sys.stderr)
            finished = set(done) | ({started} if started else set())
            if not finished:  # nothing moved: do not start it again on the same cases
                for case in todo:
                    results[case] = {"outcome": "not run", "detail": tail}
                break
            last = max(todo.index(c) for c in finished)
            todo = [c for c in todo[last + 1:] if c not in results]
    if log:
        passed = sum(r["outcome"] == "pass" for r in results.values())
        print(f"{backend} {label}: {passed}/{len(results)} pass", file=sys.stderr)
    return {case: results.get(case, {"outcome": "not run", "detail": ""}) for case in names}


def run(backend: str, sizes: Iterable[int], names: Sequence[str] | None = None, jobs: int = 1,
        log: bool = True) -> Results:
    """Run the battery at each world size of ``sizes`` in turn, ``jobs`` runners at a time."""
    names = list(names) if names is not None else cases()
    results: Results = {}
    for n in sizes:
        parts = [names[j::jobs] for j in range(jobs) if names[j::jobs]]
        with ThreadPoolExecutor(len(parts)) as pool:
            done = list(pool.map(lambda part: run_size(backend, n, part, log), parts))
        merged = {case: r for part in done for case, r in part.items()}
        results[n] = {case: merged[case] for case in names}
    return results


def outcomes(results: Results) -> dict[int, dict[str, str]]:
    """N -> case -> outcome, as the baseline file keeps them."""
    return {n: {c: r["outcome"] for c, r in by_case.items()} for n, by_case in results.items()}


def load_baseline() -> dict[int, dict[str, str]]:
    """gloo's recorded outcomes: N -> case -> outcome."""
    raw = json.loads(BASELINE.read_text(encoding="utf-8"))
    return {int(n): cases for n, cases in raw["outcomes"].items()}


def load_known() -> dict[tuple[int | None, str], str]:
    """The list of cases gloo passes and simcluster does not: (N or None for every N, case) -> reason.

    A line is ``N|*  case  reason``.
    """
    known: dict[tuple[int | None, str], str] = {}
    for line in KNOWN.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        n, case, reason = line.split(None, 2)
        known[(None if n == "*" else int(n), case)] = reason
    return known


def reason(known: dict[tuple[int | None, str], str], n: int, case: str) -> str | None:
    return known.get((n, case)) or known.get((None, case))


def compare(ours: dict[int, dict[str, str]], gloo: dict[int, dict[str, str]]
            ) -> tuple[dict[int, tuple[int, int, int]], list[tuple[int, str, str]]]:
    """Per N: (cases, gloo's passes, ours among them); and the misses (N, case, our outcome)."""
    table: dict[int, tuple[int, int, int]] = {}
    misses = []
    for n, by_case in sorted(ours.items()):
        theirs = gloo.get(n, {})
        passing = [c for c, o in theirs.items() if o == "pass" and c in by_case]
        ok = [c for c in passing if by_case[c] == "pass"]
        table[n] = (len(by_case), len(passing), len(ok))
        misses += [(n, c, by_case[c]) for c in passing if by_case[c] != "pass"]
    return table, misses


def report(table: dict[int, tuple[int, int, int]]) -> str:
    """The table, as docs/torch.md shows it."""
    lines = ["| WORLD_SIZE | cases | gloo passes | simcluster passes | share |",
             "|---|---|---|---|---|"]
    for n, (cases_, of, ok) in sorted(table.items()):
        lines.append(f"| {n} | {cases_} | {of} | {ok} | {100 * ok / max(of, 1):.1f}% |")
    return "\n".join(lines)


# ---- the other batteries: a test file of pytorch's test/distributed/ ----


def file_key(path: str) -> str:
    """The file's name in pytorch's ``test/`` folder (``distributed/tensor/test_init.py``), however
    its copy is laid out: from its last folder named ``test``, else from ``distributed``."""
    parts = Path(path).resolve().parts
    if "test" in parts[:-1]:
        start = len(parts) - 1 - parts[::-1].index("test") + 1
    elif "distributed" in parts[:-1]:
        start = parts.index("distributed")
    else:
        start = len(parts) - 1
    return "/".join(parts[start:])


def file_cases(path: str) -> list[str]:
    """The file's cases, ``Class.test_method``, as unittest finds them (the file is imported)."""
    proc = subprocess.run([sys.executable, str(FILE_RUNNER), "--list", str(Path(path).resolve())],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"{path}: cannot be imported:\n{proc.stderr[-3000:]}")
    names: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return names


def run_file(backend: str, path: str, names: Sequence[str] | None = None, jobs: int = 1,
             log: bool = True) -> dict[str, dict[str, str]]:
    """Every case of the file (or of ``names``), ``jobs`` runners at a time: case -> outcome."""
    names = list(names) if names is not None else file_cases(path)
    parts = [names[j::jobs] for j in range(jobs) if names[j::jobs]]
    with ThreadPoolExecutor(max(len(parts), 1)) as pool:
        done = list(pool.map(lambda part: run_size(backend, 0, part, log, file=path), parts))
    merged = {case: r for part in done for case, r in part.items()}
    return {case: merged[case] for case in names}


def load_file_baseline() -> dict[str, dict[str, str]]:
    """gloo's recorded outcomes for the files: file key -> case -> outcome."""
    if not FILE_BASELINE.exists():
        return {}
    raw = json.loads(FILE_BASELINE.read_text(encoding="utf-8"))
    return {key: entry["outcomes"] for key, entry in raw["files"].items()}


def load_file_known() -> dict[tuple[str, str], str]:
    """Cases of the files that gloo passes and simcluster does not: (file key, case) -> reason.

    A line is ``FILE  Class.case  reason``; ``Class.*`` stands for each case of the class,
    ``*`` for each case of the file.
    """
    known: dict[tuple[str, str], str] = {}
    if FILE_KNOWN.exists():
        for line in FILE_KNOWN.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                key, case, why = line.split(None, 2)
                known[(key, case)] = why
    return known


def file_reason(known: dict[tuple[str, str], str], key: str, case: str) -> str | None:
    """The reason listed for the case, or for its class (``Class.*``), or for the file (``*``)."""
    return (known.get((key, case)) or known.get((key, case.split(".")[0] + ".*"))
            or known.get((key, "*")))


def compare_file(ours: dict[str, str], gloo: dict[str, str]
                 ) -> tuple[dict[str, tuple[int, int, int]], list[tuple[str, str]]]:
    """Per test class: (cases, gloo's passes, ours among them); and the misses (case, our outcome).

    Cases gloo was not measured on (not in ``gloo``) are left out.
    """
    table: dict[str, tuple[int, int, int]] = {}
    misses = []
    for case, outcome in ours.items():
        if case not in gloo:
            continue
        cls = case.split(".")[0]
        cases_, of, ok = table.get(cls, (0, 0, 0))
        passing = gloo.get(case) == "pass"
        table[cls] = (cases_ + 1, of + passing, ok + (passing and outcome == "pass"))
        if passing and outcome != "pass":
            misses.append((case, outcome))
    return dict(sorted(table.items())), misses


def file_report(key: str, table: dict[str, tuple[int, int, int]]) -> str:
    """One file's table, a row per test class and the file's total, as docs/torch.md shows it."""
    lines = [f"| `{key}` | cases | gloo passes | simcluster passes | share |", "|---|---|---|---|---|"]
    for cls, (cases_, of, ok) in table.items():
        lines.append(f"| `{cls}` | {cases_} | {of} | {ok} | {_share(ok, of)} |")
    cases_, of, ok = (sum(row[i] for row in table.values()) for i in range(3))
    lines.append(f"| **all classes** | **{cases_}** | **{of}** | **{ok}** | **{_share(ok, of)}** |")
    return "\n".join(lines)


def _share(ok: int, of: int) -> str:
    return f"{100 * ok / of:.1f}%" if of else "-"  # gloo passes none of the class's cases


def _main_files(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """``--file``: each file's cases under the backend; with simcluster, the table against gloo."""
    gloo = load_file_baseline()
    known = load_file_known()
    recorded: dict[str, dict[str, str]] = {}
    for path in args.files:
        key = file_key(path)
        try:
            results = run_file(args.backend, path, args.cases, args.jobs)
        except RuntimeError as exc:
            print(f"{key}: not run: {exc}")
            continue
        ours = {case: r["outcome"] for case, r in results.items()}
        recorded[key] = ours
        if args.backend != "simcluster":
            continue
        if key not in gloo:
            print(f"{key}: {sum(o == 'pass' for o in ours.values())}/{len(ours)} pass "
                  "(no gloo baseline for it in file_baseline.json)")
            continue
        table, misses = compare_file(ours, gloo[key])
        print(file_report(key, table))
        beyond = [c for c, o in ours.items() if o == "pass" and gloo[key].get(c, "pass") != "pass"]
        if beyond:
            print(f"  passing here, not under gloo: {', '.join(beyond)}")
        for case, outcome in misses:
            print(f"  {case}: {outcome} ({file_reason(known, key, case) or 'NOT LISTED'})")
            if args.details:
                detail = results[case]["detail"].strip().splitlines()
                print("      " + "\n      ".join(detail[-8:]))
    if args.json:
        import torch

        path = Path(args.json)
        record = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"files": {}}
        record.update(torch=torch.__version__, backend=args.backend)
        for key, ours in recorded.items():
            record["files"][key] = {"command": "python tests/torch_battery/battery.py " + " ".join(
                sys.argv[1:] if argv is None else argv), "outcomes": ours}
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", dest="sizes", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--backend", default="simcluster", choices=["simcluster", "gloo"])
    parser.add_argument("--case", dest="cases", nargs="+", default=None)
    parser.add_argument("--json", default=None, help="write the outcomes here (the baseline's form)")
    parser.add_argument("--jobs", type=int, default=1, help="runners at a time per world size")
    parser.add_argument("--details", action="store_true", help="print each miss's error")
    parser.add_argument("--file", dest="files", action="append", default=None, metavar="PATH",
                        help="a test file of pytorch's test/distributed/ instead of the wheel's "
                             "battery (cases: Class.test_method); may be given again")
    args = parser.parse_args(argv)
    if args.files:
        return _main_files(args, argv)
    results = run(args.backend, args.sizes, args.cases, args.jobs)
    if args.json:
        import torch

        record = {"torch": torch.__version__, "backend": args.backend,
                  "command": "python tests/torch_battery/battery.py " + " ".join(
                      sys.argv[1:] if argv is None else argv),
                  "outcomes": {str(n): by_case for n, by_case in outcomes(results).items()}}
        Path(args.json).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n",
                                   encoding="utf-8")
    if args.backend == "simcluster" and BASELINE.exists():
        table, misses = compare(outcomes(results), load_baseline())
        print(report(table))
        known = load_known() if KNOWN.exists() else {}
        for n, case, outcome in misses:
            print(f"  -n {n} {case}: {outcome} ({reason(known, n, case) or 'NOT LISTED'})")
            if args.details:
                detail = results[n][case]["detail"].strip().splitlines()
                print("      " + "\n      ".join(detail[-6:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
