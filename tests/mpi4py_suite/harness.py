"""Run mpi4py's own test suite under ``simcluster mpirun`` (and the real ``mpiexec``), case by case.

    python tests/mpi4py_suite/harness.py SUITE_DIR [-n 1 2 3] [--launcher simcluster|mpich]
                                         [--module test_p2p_obj ...] [--json OUT] [--jobs J]

``SUITE_DIR`` is the ``test/`` folder of mpi4py's source release (4.1.2). Each
in-scope module (``scope.MODULES``) is run unmodified once per world size by
``case_runner.py`` on every rank; a case passes when it passes on every rank,
is skipped when any rank skipped it and none failed it, and fails otherwise (a
case a rank never reached, because the run stopped, fails as "not run").
Cases of out-of-scope features inside in-scope modules (``scope.OUT_OF_SCOPE``)
are dropped and counted nowhere.

The table printed compares simcluster with MPICH's passes recorded in
``mpich_baseline.json`` (``--launcher mpich --json`` writes that file anew).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scope  # noqa: E402 - beside this file

RUNNER = HERE / "case_runner.py"
BASELINE = HERE / "mpich_baseline.json"
KNOWN = HERE / "known_failures.txt"
TIMEOUT = 300.0  # wall seconds for one module at one world size

Results = dict[str, dict[int, dict[str, str]]]  # module -> N -> case -> outcome


def command(launcher: str, n: int, suite: str, module: str, out: str) -> list[str]:
    """The command line that runs ``module`` on ``n`` ranks under ``launcher``."""
    args = [str(RUNNER), suite, module, out]
    if launcher == "simcluster" or launcher.startswith("simcluster:"):
        # --exact: no measured compute, so the ranks' interleaving, and every outcome, repeat
        transport = []  # simcluster:TRANSPORT: each rank in a hosting process of its own
        if ":" in launcher:
            transport = ["--transport", launcher.partition(":")[2], "--procs", str(n)]
        return [sys.executable, "-m", "simcluster", "mpirun", "-n", str(n), "--exact", *transport,
                "--timeout", str(TIMEOUT - 30), *args]
    if launcher == "mpich":
        mpiexec = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
        return [mpiexec, "-n", str(n), sys.executable, *args]
    raise ValueError(f"launcher {launcher!r}: use 'simcluster', 'simcluster:TRANSPORT' or 'mpich'")


def run_module(launcher: str, n: int, suite: str, module: str) -> tuple[dict[str, str], str]:
    """Run one module on ``n`` ranks; return (case -> outcome, the launcher's output tail)."""
    with tempfile.TemporaryDirectory(prefix="mpi4py-suite-") as out:
        env = dict(os.environ, MPI4PY_TEST_SPAWN="0", PYTHONDONTWRITEBYTECODE="1")
        try:
            proc = subprocess.run(command(launcher, n, suite, module, out), capture_output=True,
                                  text=True, timeout=TIMEOUT, env=env, cwd=out,
                                  stdin=subprocess.DEVNULL)
            tail = (proc.stdout + proc.stderr)[-3000:]
        except subprocess.TimeoutExpired as exc:
            tail = f"timed out after {TIMEOUT:.0f} s: {str(exc.stdout or '')[-1000:]}"
        per_rank = []
        for rank in range(n):
            outcomes: dict[str, str] = {}
            path = Path(out, f"{module}.rank{rank}.jsonl")
            if path.exists():
                for line in path.read_text(encoding="utf-8").splitlines():
                    record = json.loads(line)
                    outcomes[record["case"]] = record["outcome"]
            per_rank.append(outcomes)
    return combine(per_rank), tail


def combine(per_rank: Sequence[dict[str, str]]) -> dict[str, str]:
    """A case's outcome over all ranks: pass on every rank, skip, or fail (not run on some)."""
    cases: dict[str, None] = {}
    for outcomes in per_rank:
        cases.update(dict.fromkeys(outcomes))
    combined = {}
    for case in cases:
        seen = [outcomes.get(case, "not run") for outcomes in per_rank]
        if all(o == "pass" for o in seen):
            combined[case] = "pass"
        elif all(o in ("pass", "skip") for o in seen):
            combined[case] = "skip"
        else:
            combined[case] = next(o for o in seen if o not in ("pass", "skip"))
    return {case: combined[case] for case in cases if not scope.out_of_scope(case)}


def run(launcher: str, sizes: Iterable[int], suite: str, modules: Iterable[str],
        jobs: int = 2, log: bool = True) -> Results:
    """Run every module at every size under ``launcher``; return the outcomes."""
    work = [(m, n) for m in modules for n in sizes]
    results: Results = {m: {} for m, _ in work}

    def one(item: tuple[str, int]) -> None:
        module, n = item
        outcomes, tail = run_module(launcher, n, suite, module)
        results[module][n] = outcomes
        if log:
            passed = sum(o == "pass" for o in outcomes.values())
            print(f"{launcher} -n {n} {module}: {passed}/{len(outcomes)} pass", file=sys.stderr)
            if not outcomes:
                print("  " + tail.strip().replace("\n", "\n  "), file=sys.stderr)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, work))
    return results


def load_baseline() -> Results:
    """MPICH's recorded outcomes: module -> N -> case -> outcome."""
    raw = json.loads(BASELINE.read_text(encoding="utf-8"))
    return {m: {int(n): cases for n, cases in by_n.items()} for m, by_n in raw.items()}


def load_known() -> dict[tuple[str, int | None, str], str]:
    """The checked-in list of cases MPICH passes and simcluster does not: (module, N, case) -> reason.

    A line is ``module  N|*  Class.method  reason``; ``*`` means at every world size.
    """
    known: dict[tuple[str, int | None, str], str] = {}
    for line in KNOWN.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        module, n, case, reason = line.split(None, 3)
        known[(module, None if n == "*" else int(n), case)] = reason
    return known


def compare(ours: Results, mpich: Results) -> tuple[dict[str, dict[int, tuple[int, int]]],
                                                     list[tuple[str, int, str, str]]]:
    """Per module and N, (cases simcluster passes of those MPICH passes, MPICH's passes); and the misses."""
    table: dict[str, dict[int, tuple[int, int]]] = {}
    misses = []
    for module, by_n in ours.items():
        for n, outcomes in by_n.items():
            theirs = mpich.get(module, {}).get(n, {})
            passing = [c for c, o in theirs.items() if o == "pass" and not scope.out_of_scope(c)]
            ok = [c for c in passing if outcomes.get(c) == "pass"]
            table.setdefault(module, {})[n] = (len(ok), len(passing))
            misses += [(module, n, c, outcomes.get(c, "not run")) for c in passing
                       if outcomes.get(c) != "pass"]
    return table, misses


def report(table: dict[str, dict[int, tuple[int, int]]]) -> str:
    """The per-module table with totals per N, as text."""
    sizes = sorted({n for by_n in table.values() for n in by_n})
    lines = [f"{'module':24}" + "".join(f"{'-n ' + str(n):>14}" for n in sizes)]
    totals = {n: [0, 0] for n in sizes}
    for module in sorted(table):
        cells = []
        for n in sizes:
            ok, of = table[module].get(n, (0, 0))
            totals[n][0] += ok
            totals[n][1] += of
            cells.append(f"{ok:>6}/{of:<7}")
        lines.append(f"{module:24}" + "".join(cells))
    lines.append(f"{'total':24}" + "".join(f"{ok:>6}/{of:<7}" for ok, of in totals.values()))
    lines.append(f"{'share':24}" + "".join(f"{100 * ok / max(of, 1):>13.1f}%" for ok, of in totals.values()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", help="mpi4py's test/ folder")
    parser.add_argument("-n", dest="sizes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--launcher", default="simcluster", choices=["simcluster", "mpich"])
    parser.add_argument("--module", dest="modules", nargs="+", default=scope.MODULES)
    parser.add_argument("--json", default=None, help="write the outcomes here")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    results = run(args.launcher, args.sizes, str(Path(args.suite).resolve()), args.modules, args.jobs)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if args.launcher == "simcluster" and BASELINE.exists():
        table, misses = compare(results, load_baseline())
        print(report(table))
        known = load_known() if KNOWN.exists() else {}
        for module, n, case, outcome in misses:
            reason = known.get((module, n, case)) or known.get((module, None, case)) or "NOT LISTED"
            print(f"  -n {n} {module} {case}: {outcome} ({reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
