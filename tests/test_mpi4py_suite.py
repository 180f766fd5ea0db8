"""mpi4py's own test suite, unmodified, as the conformance oracle of ``simcluster.MPI``.

Runs every module of mpi4py 4.1.2's suite (each ``test_*.py`` of its folder)
under ``simcluster mpirun -n N`` and compares case by case with what real MPICH
passes (``tests/mpi4py_suite/mpich_baseline.json``, recorded by the same harness
under ``mpiexec``). Per world size:

* every case MPICH passes and simcluster does not is listed, with its reason, in
  ``tests/mpi4py_suite/known_failures.txt``: a case that passed and starts failing
  fails this test, and so does a listed case that now passes (regenerate the list
  with ``harness.py SUITE --write-known``, which keeps the reasons already given);
* every module passes at least 95% of the cases MPICH passes in it, but those
  of ``scope.BELOW_BAR`` (what they miss needs mpi4py's compiled C library or C
  API), each held to its own floor; the whole suite passes at least 97%.

The suite is not part of this project: pass its ``test/`` folder with
``--mpi4py-suite PATH`` (CI does); without it these tests are skipped.
N = 1, 2 and 3 run by default, N = 4 with the slow ones (``-m slow``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "mpi4py_suite"))

import harness  # noqa: E402
import scope  # noqa: E402

MODULE_BAR = 0.95  # every module but scope.BELOW_BAR's
SUITE_BAR = 0.97  # the whole suite

@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest) -> str:
    path = request.config.getoption("--mpi4py-suite")
    if not path:
        pytest.skip("pass mpi4py 4.1.2's test/ folder with --mpi4py-suite PATH")
    if not (Path(path) / "mpiunittest.py").is_file():
        pytest.fail(f"--mpi4py-suite {path}: not mpi4py's test/ folder (no mpiunittest.py there)")
    return str(Path(path).resolve())


def held_short(table: harness.Table, n: int) -> list[str]:
    """The modules under their bar at size ``n``, as 'module: passed/of'."""
    short = []
    for module, by_n in sorted(table.items()):
        ok, of = by_n.get(n, (0, 0))
        floor = scope.BELOW_BAR[module][0] if module in scope.BELOW_BAR else MODULE_BAR
        if ok < floor * of:
            short.append(f"{module}: {ok}/{of}")
    return short


@pytest.mark.timeout(1800)  # about 65 modules in processes of their own: minutes, not seconds
@pytest.mark.parametrize("n", [1, 2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_simcluster_passes_what_mpich_passes(suite: str, n: int) -> None:
    ours = harness.run("simcluster", [n], suite, scope.modules(suite), jobs=2, log=False)
    table, misses = harness.compare(ours, harness.load_baseline())
    known = harness.load_known()
    unlisted = [f"{module} {case}: {outcome}" for module, _n, case, outcome in misses
                if not harness.listed(known, module, n, case)]
    missed = {(module, case) for module, _n, case, _o in misses}
    stale = [f"{module} {case}" for (module, kn, case) in known
             if kn in (n, None) and (module, case) not in missed
             and ours.get(module, {}).get(n, {}).get(case) == "pass"]
    print(harness.report(table, MODULE_BAR, SUITE_BAR))
    assert not unlisted, (f"-n {n}: cases MPICH passes that fail here and are not in "
                          f"known_failures.txt:\n" + "\n".join(unlisted))
    assert not stale, (f"-n {n}: listed as failing but passing now; take them off "
                       f"known_failures.txt (harness.py --write-known):\n" + "\n".join(stale))
    short = held_short(table, n)
    assert not short, f"-n {n}: modules under {MODULE_BAR:.0%} of MPICH (or their floor): {short}"
    ok, of = harness.totals(table)[n]
    assert ok >= SUITE_BAR * of, f"-n {n}: the suite passes {ok}/{of} of MPICH's passes"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ulfm_passes_across_hosting_processes(suite: str, transport: str) -> None:
    """test_ulfm's self and world classes, each rank in a hosting process of its own."""
    outcomes, tail = harness.run_module(f"simcluster:{transport}", 3, suite, "test_ulfm")
    memory, _ = harness.run_module("simcluster", 3, suite, "test_ulfm")
    assert outcomes == memory, tail
    assert sum(o == "pass" for o in outcomes.values()) >= 14, tail


def test_the_scope_names_modules_the_suite_has(suite: str) -> None:
    named = [*scope.BELOW_BAR, *scope.UNRUNNABLE, *scope.TIMEOUTS, *scope.SLOWEST]
    assert not [m for m in named if m not in scope.modules(suite)]


def test_a_case_that_fails_on_any_rank_fails() -> None:
    assert harness.combine([{"A.t": "pass"}, {"A.t": "fail"}]) == {"A.t": "fail"}
    assert harness.combine([{"A.t": "pass"}, {}]) == {"A.t": "not run"}
    assert harness.combine([{"A.t": "pass"}, {"A.t": "skip"}]) == {"A.t": "skip"}
    assert harness.combine([{"A.t": "pass", "AWin.t": "fail"}]) == {"A.t": "pass", "AWin.t": "fail"}


def test_the_known_list_keeps_reasons_and_explains_new_misses(tmp_path: Path) -> None:
    path = tmp_path / "known.txt"
    path.write_text("# header\ntest_a  *  T.old  a reason a person wrote\n", encoding="utf-8")
    misses = [("test_a", n, "T.old", "fail") for n in (1, 2)]
    misses += [("test_cffi", 1, "TestCFFI.testHandleValue", "fail"),
               ("test_b", 2, "T.new", "error"), ("test_c", 1, "T.gone", "not run")]
    misses += [("test_a", 3, "T.old", "fail")]
    errors = {("test_b", 2, "T.new"): "KeyError: 'x'", ("test_c", 1, "(import)"): "not run: timed out"}
    ran = [(m, n) for m in ("test_a", "test_b", "test_c", "test_cffi") for n in (1, 2, 3)]
    assert harness.write_known(misses, errors, ran, harness.load_known(path), path) == (3, 3)
    assert path.read_text(encoding="utf-8").splitlines() == [
        "# header",
        "test_a  *  T.old  a reason a person wrote",
        "test_b  2  T.new  unexplained: KeyError: 'x'",
        "test_c  1  T.gone  unexplained: not run: timed out",
        f"test_cffi  1  TestCFFI.testHandleValue  {scope.reason('test_cffi', 'TestCFFI.testHandleValue')}",
    ]
    # a run of test_b alone at N = 2 where T.new passes now: test_b's line goes, the rest stay
    assert harness.write_known([], {}, [("test_b", 2)], harness.load_known(path), path) == (0, 0)
    assert "T.new" not in path.read_text(encoding="utf-8")
    assert "T.gone" in path.read_text(encoding="utf-8")
