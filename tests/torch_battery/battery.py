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


def _run_runner(backend: str, n: int, todo: list[str], out: Path, log: Path) -> int | None:
    """Run the runner on ``todo`` until it exits (its status) or goes silent (None: stopped)."""
    # this checkout's simcluster, wherever the runner's folder is and whatever is installed
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONFAULTHANDLER="1", PYTHONPATH=path)
    listed = out.with_suffix(".cases")
    listed.write_text("\n".join(todo) + "\n", encoding="utf-8")
    with open(log, "ab") as sink:
        proc = subprocess.Popen([sys.executable, str(RUNNER), backend, str(n), str(out), f"@{listed}"],
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


def run_size(backend: str, n: int, names: Sequence[str], log: bool = True) -> dict[str, dict[str, str]]:
    """Every case of ``names`` at world size ``n``; a crash or a silence is put on its case."""
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix=f"torch-battery-{backend}-{n}-") as tmp:
        todo = list(names)
        attempt = 0
        while todo:
            attempt += 1
            out, log_path = Path(tmp, f"out{attempt}.jsonl"), Path(tmp, f"log{attempt}.txt")
            status = _run_runner(backend, n, todo, out, log_path)
            done, started = _read(out)
            results.update(done)
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:] if log_path.exists() else ""
            if started is not None:
                what = "timeout" if status is None else "crash"
                results[started] = {"outcome": what, "detail": f"runner exit status {status}\n{tail}"}
            elif status != 0 and len(done) < len(todo):  # it stopped between cases: say so, go on
                if log:
                    print(f"{backend} -n {n}: runner exited {status}\n{tail}", file=sys.stderr)
            finished = set(done) | ({started} if started else set())
            if not finished:  # nothing moved: do not start it again on the same cases
                for case in todo:
                    results[case] = {"outcome": "not run", "detail": tail}
                break
            last = max(todo.index(c) for c in finished)
            todo = [c for c in todo[last + 1:] if c not in results]
    if log:
        passed = sum(r["outcome"] == "pass" for r in results.values())
        print(f"{backend} -n {n}: {passed}/{len(results)} pass", file=sys.stderr)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", dest="sizes", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--backend", default="simcluster", choices=["simcluster", "gloo"])
    parser.add_argument("--case", dest="cases", nargs="+", default=None)
    parser.add_argument("--json", default=None, help="write the outcomes here (the baseline's form)")
    parser.add_argument("--jobs", type=int, default=1, help="runners at a time per world size")
    parser.add_argument("--details", action="store_true", help="print each miss's error")
    args = parser.parse_args(argv)
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
