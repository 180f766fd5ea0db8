"""Run mpi4py's own test suite under ``simcluster mpirun`` (and the real ``mpiexec``), case by case.

    python tests/mpi4py_suite/harness.py SUITE_DIR [-n 1 2 3] [--launcher simcluster|mpich]
                                         [--module test_p2p_obj ...] [--jobs J]
                                         [--json OUT] [--write-known] [--markdown]

``SUITE_DIR`` is the ``test/`` folder of mpi4py's source release (4.1.2). Every
``test_*.py`` module there (``scope.modules``) is run unmodified once per world
size by ``case_runner.py`` on every rank, within its wall-clock limit
(``scope.timeout``); a case passes when it passes on every rank, is skipped
when any rank skipped it and none failed it, and fails otherwise (a case a rank
never reached, because the run stopped, fails as "not run"). Modules in
``scope.UNRUNNABLE`` are not started: every case MPICH passes there fails.

With ``--launcher mpich``, ``--json mpich_baseline.json`` records MPICH's
outcomes (merged into the file: the modules and sizes run replace theirs). With
simcluster, the table printed compares with MPICH's passes and lists every case
MPICH passes that fails here with its reason from ``known_failures.txt``;
``--write-known`` then rewrites that file for the modules and sizes run (the
other lines stay): a case already listed keeps its reason, a new one gets the
missing feature a rule of ``scope.RULES`` names, or "unexplained: <first line
of its error>" for a person to look at.
``--markdown`` prints the table as docs/mpi.md shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scope  # noqa: E402 - beside this file

RUNNER = HERE / "case_runner.py"
BASELINE = HERE / "mpich_baseline.json"
KNOWN = HERE / "known_failures.txt"
IMPORT = "(import)"  # case_runner's pseudo-case for a module that does not import
ALL_SIZES = (1, 2, 3, 4)  # the world sizes a "*" line of known_failures.txt stands for

Results = dict[str, dict[int, dict[str, str]]]  # module -> N -> case -> outcome
Errors = dict[tuple[str, int, str], str]  # (module, N, case) -> first line of its error
Table = dict[str, dict[int, tuple[int, int]]]  # module -> N -> (passed here, MPICH's passes)
Known = dict[tuple[str, int | None, str], str]  # (module, N or None for all, case) -> reason


def command(launcher: str, n: int, suite: str, module: str, out: str) -> list[str]:
    """The command line that runs ``module`` on ``n`` ranks under ``launcher``."""
    args = [str(RUNNER), suite, module, out]
    if launcher == "simcluster" or launcher.startswith("simcluster:"):
        # --exact: no measured compute, so the ranks' interleaving, and every outcome, repeat
        transport = []  # simcluster:TRANSPORT: each rank in a hosting process of its own
        if ":" in launcher:
            transport = ["--transport", launcher.partition(":")[2], "--procs", str(n)]
        limit = scope.timeout(module)
        return [sys.executable, "-m", "simcluster", "mpirun", "-n", str(n), "--exact", *transport,
                "--timeout", str(limit - min(30.0, limit / 4)), *args]
    if launcher == "mpich":
        mpiexec = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
        return [mpiexec, "-n", str(n), sys.executable, *args]
    raise ValueError(f"launcher {launcher!r}: use 'simcluster', 'simcluster:TRANSPORT' or 'mpich'")


def run_module(launcher: str, n: int, suite: str, module: str,
               errors: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    """Run one module on ``n`` ranks; return (case -> outcome, the launcher's output tail).

    ``errors``, when given, receives case -> the first line of the error of each case that
    did not pass (for a case not run: the module's import error, or how the run ended).
    """
    limit = scope.timeout(module)
    with tempfile.TemporaryDirectory(prefix="mpi4py-suite-") as out:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        try:
            proc = subprocess.run(command(launcher, n, suite, module, out), capture_output=True,
                                  text=True, timeout=limit, env=env, cwd=out,
                                  stdin=subprocess.DEVNULL)
            tail = (proc.stdout + proc.stderr)[-3000:]
            ended = f"exit status {proc.returncode}: {_last_line(tail)}"
        except subprocess.TimeoutExpired as exc:
            tail = f"timed out after {limit:.0f} s: {str(exc.stdout or '')[-1000:]}"
            ended = f"timed out after {limit:.0f} s"
        per_rank: list[dict[str, str]] = []
        first_errors: dict[str, str] = {}
        for rank in range(n):
            outcomes: dict[str, str] = {}
            path = Path(out, f"{module}.rank{rank}.jsonl")
            if path.exists():
                for line in path.read_text(encoding="utf-8").splitlines():
                    record = json.loads(line)
                    outcomes[record["case"]] = record["outcome"]
                    if record.get("error"):
                        first_errors.setdefault(record["case"], record["error"])
            per_rank.append(outcomes)
    combined = combine(per_rank)
    combined.pop(IMPORT, None)
    if errors is not None:
        stopped = first_errors.get(IMPORT) or f"not run: {ended}"
        for case, outcome in combined.items():
            if outcome not in ("pass", "skip"):
                errors[case] = first_errors.get(case) or stopped
        errors[IMPORT] = stopped  # for the cases MPICH passes that never appeared here
    return combined, tail


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


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
    return combined


def run(launcher: str, sizes: Iterable[int], suite: str, modules: Iterable[str],
        jobs: int = 2, log: bool = True, errors: Errors | None = None) -> Results:
    """Run every module at every size under ``launcher``; return the outcomes.

    The longest modules start first, so that ``jobs`` workers finish close together.
    """
    order = {m: i for i, m in enumerate(scope.SLOWEST)}
    work = sorted(((m, n) for m in modules for n in sizes),
                  key=lambda item: (order.get(item[0], len(order)), -item[1]))
    results: Results = {m: {} for m, _ in sorted(work)}

    def one(item: tuple[str, int]) -> None:
        module, n = item
        started = time.monotonic()
        module_errors: dict[str, str] = {}
        outcomes: dict[str, str] = {}
        tail = ""
        if module in scope.UNRUNNABLE:
            module_errors[IMPORT] = f"not run: {scope.UNRUNNABLE[module]}"
        else:
            outcomes, tail = run_module(launcher, n, suite, module, module_errors)
        results[module][n] = outcomes
        if errors is not None:
            errors.update({(module, n, case): e for case, e in module_errors.items()})
        if log:
            passed = sum(o == "pass" for o in outcomes.values())
            print(f"{launcher} -n {n} {module}: {passed}/{len(outcomes)} pass "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            if not outcomes and tail:
                print("  " + tail.strip()[-600:].replace("\n", "\n  "), file=sys.stderr)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, work))
    return results


# ---- baseline, known failures and comparison ----

def load_baseline() -> Results:
    """MPICH's recorded outcomes: module -> N -> case -> outcome."""
    raw = json.loads(BASELINE.read_text(encoding="utf-8"))
    return {m: {int(n): cases for n, cases in by_n.items()} for m, by_n in raw.items()}


def merge_json(path: str | Path, results: Results) -> None:
    """Write ``results`` into the JSON file at ``path``, keeping its other modules and sizes."""
    old = json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).exists() else {}
    for module, by_n in results.items():
        old.setdefault(module, {}).update({str(n): cases for n, cases in by_n.items()})
    Path(path).write_text(json.dumps(old, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def load_known(path: Path = KNOWN) -> Known:
    """The checked-in list of cases MPICH passes and simcluster does not: (module, N, case) -> reason.

    A line is ``module  N|*  Class.method  reason``; ``*`` means at every world size.
    """
    known: Known = {}
    if not path.exists():
        return known
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        module, n, case, reason = line.split(None, 3)
        known[(module, None if n == "*" else int(n), case)] = reason
    return known


def listed(known: Known, module: str, n: int, case: str) -> str | None:
    """The reason ``known`` gives for ``case`` of ``module`` failing at size ``n``, or None."""
    return known.get((module, n, case)) or known.get((module, None, case))


def compare(ours: Results, mpich: Results) -> tuple[Table, list[tuple[str, int, str, str]]]:
    """Per module and N, (cases simcluster passes of those MPICH passes, MPICH's passes); and the misses."""
    table: Table = {}
    misses = []
    for module, by_n in ours.items():
        for n, outcomes in by_n.items():
            theirs = mpich.get(module, {}).get(n, {})
            passing = [c for c, o in theirs.items() if o == "pass"]
            ok = [c for c in passing if outcomes.get(c) == "pass"]
            table.setdefault(module, {})[n] = (len(ok), len(passing))
            misses += [(module, n, c, outcomes.get(c, "not run")) for c in passing
                       if outcomes.get(c) != "pass"]
    return table, misses


def write_known(misses: Sequence[tuple[str, int, str, str]], errors: Errors,
                ran: Iterable[tuple[str, int]], known: Known, path: Path = KNOWN) -> tuple[int, int]:
    """Rewrite ``path`` for the (module, N) pairs ``ran``: list exactly their ``misses``.

    Return (reasons kept, reasons new). A case keeps the reason ``known`` gives it; a new
    one gets ``scope.reason``'s, else "unexplained: <first line of its error>". Lines of
    modules and sizes not run stay. A case with one reason at N = 1, 2 and 3 is one ``*``
    line (at every size).
    """
    ran = set(ran)
    entries: dict[tuple[str, str], dict[int, str]] = {}
    for (module, n, case), why in known.items():  # what was not run now stays as it was
        for size in ([n] if n is not None else ALL_SIZES):
            if (module, size) not in ran:
                entries.setdefault((module, case), {})[size] = why
    kept = new = 0
    for module, n, case, _outcome in misses:
        old = listed(known, module, n, case)
        kept, new = (kept + 1, new) if old else (kept, new + 1)
        entries.setdefault((module, case), {})[n] = old or scope.reason(module, case) or (
            "unexplained: " + (errors.get((module, n, case)) or errors.get((module, n, IMPORT))
                               or "not run"))
    lines = []
    for (module, case), by_n in sorted(entries.items()):
        if set(by_n) >= {1, 2, 3} and len(set(by_n.values())) == 1:
            lines.append(f"{module}  *  {case}  {by_n[1]}")
        else:
            lines += [f"{module}  {n}  {case}  {why}" for n, why in sorted(by_n.items())]
    header = [line for line in path.read_text(encoding="utf-8").splitlines()
              if line.startswith("#")] if path.exists() else []
    path.write_text("\n".join(header + lines) + "\n", encoding="utf-8")
    return kept, new


# ---- the table ----

def share(table: Table, module: str) -> float | None:
    """The share of MPICH's passes that pass here, over every size run; None where MPICH passes none."""
    ok = sum(cell[0] for cell in table[module].values())
    of = sum(cell[1] for cell in table[module].values())
    return ok / of if of else None


def totals(table: Table) -> dict[int, tuple[int, int]]:
    sizes = sorted({n for by_n in table.values() for n in by_n})
    return {n: (sum(t.get(n, (0, 0))[0] for t in table.values()),
                sum(t.get(n, (0, 0))[1] for t in table.values())) for n in sizes}


def report(table: Table, module_bar: float = 0.95, suite_bar: float = 0.97) -> str:
    """The per-module table with totals per N, as text, and where it stands against the bars."""
    sizes = sorted({n for by_n in table.values() for n in by_n})
    lines = [f"{'module':24}" + "".join(f"{'-n ' + str(n):>14}" for n in sizes) + "   share"]
    for module in sorted(table):
        cells = "".join(f"{table[module].get(n, (0, 0))[0]:>6}/{table[module].get(n, (0, 0))[1]:<7}"
                        for n in sizes)
        s = share(table, module)
        held = f" (floor {scope.BELOW_BAR[module][0]:.0%})" if module in scope.BELOW_BAR else ""
        lines.append(f"{module:24}{cells}" + (f"{100 * s:>7.1f}%" if s is not None else "       -")
                     + held)
    sums = totals(table)
    lines.append(f"{'total':24}" + "".join(f"{ok:>6}/{of:<7}" for ok, of in sums.values()))
    lines.append(f"{'share':24}" + "".join(f"{100 * ok / max(of, 1):>13.1f}%" for ok, of in sums.values()))
    below = [m for m in sorted(table) if (share(table, m) or 1.0) < module_bar]
    lines.append(f"bar: every module >= {module_bar:.0%} of MPICH's passes (those below it "
                 f"held to their floor), the whole suite >= {suite_bar:.0%}; below the module bar "
                 f"now: {len(below)} ({', '.join(below) or 'none'})")
    return "\n".join(lines)


def markdown(table: Table) -> str:
    """The table as docs/mpi.md shows it: passes here / MPICH's passes, per N, and the share."""
    sizes = sorted({n for by_n in table.values() for n in by_n})
    lines = ["| module | " + " | ".join(f"N={n}" for n in sizes) + " | share |",
             "|---|" + "---|" * len(sizes) + "---|"]
    for module in sorted(table):
        cells = " | ".join("{}/{}".format(*table[module].get(n, (0, 0))) for n in sizes)
        s = share(table, module)
        lines.append(f"| `{module}` | {cells} | " + (f"{100 * s:.1f}%" if s is not None else "-") + " |")
    sums = totals(table)
    ok, of = sum(c[0] for c in sums.values()), sum(c[1] for c in sums.values())
    lines.append("| **all modules** | " + " | ".join(f"**{a}/{b}**" for a, b in sums.values())
                 + f" | **{100 * ok / max(of, 1):.1f}%** |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", help="mpi4py's test/ folder")
    parser.add_argument("-n", dest="sizes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--launcher", default="simcluster", choices=["simcluster", "mpich"])
    parser.add_argument("--module", dest="modules", nargs="+", default=None,
                        help="these modules only (default: every test_*.py of SUITE)")
    parser.add_argument("--json", default=None, help="merge the outcomes into this JSON file")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--write-known", action="store_true",
                        help="rewrite known_failures.txt from this run (simcluster, every module)")
    parser.add_argument("--markdown", action="store_true", help="print the table for docs/mpi.md")
    args = parser.parse_args(argv)
    suite = str(Path(args.suite).resolve())
    modules = args.modules or scope.modules(suite)
    if args.write_known and args.launcher != "simcluster":
        parser.error("--write-known needs a simcluster run")
    errors: Errors = {}
    started = time.monotonic()
    results = run(args.launcher, args.sizes, suite, modules, args.jobs, errors=errors)
    print(f"{args.launcher}: {len(modules)} modules at N = {' '.join(map(str, args.sizes))} "
          f"in {time.monotonic() - started:.0f} s with {args.jobs} jobs", file=sys.stderr)
    if args.json:
        merge_json(args.json, results)
    if args.launcher == "simcluster" and BASELINE.exists():
        table, misses = compare(results, load_baseline())
        print(markdown(table) if args.markdown else report(table))
        known = load_known()
        if args.write_known:
            ran = [(m, n) for m in modules for n in args.sizes]
            kept, new = write_known(misses, errors, ran, known)
            print(f"{KNOWN.name}: {kept} reasons kept, {new} new", file=sys.stderr)
            known = load_known()
        for module, n, case, outcome in misses:
            print(f"  -n {n} {module} {case}: {outcome} ({listed(known, module, n, case) or 'NOT LISTED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
