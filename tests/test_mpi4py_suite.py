"""mpi4py's own test suite, unmodified, as the conformance oracle of ``simcluster.MPI``.

Runs every in-scope module of mpi4py 4.1.2's suite (``tests/mpi4py_suite/scope.py``)
under ``simcluster mpirun -n N`` and compares case by case with what real MPICH
passes (``tests/mpi4py_suite/mpich_baseline.json``, recorded by the same harness
under ``mpiexec``). Two checks per world size:

* at least 95% of the in-scope cases MPICH passes pass here;
* every case MPICH passes and simcluster does not is listed, with its reason, in
  ``tests/mpi4py_suite/known_failures.txt``; a case that passed and starts failing
  fails this test, and so does a listed case that now passes (take it off the list).

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

TARGET = 0.95


@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest) -> str:
    path = request.config.getoption("--mpi4py-suite")
    if not path:
        pytest.skip("pass mpi4py 4.1.2's test/ folder with --mpi4py-suite PATH")
    if not (Path(path) / "mpiunittest.py").is_file():
        pytest.fail(f"--mpi4py-suite {path}: not mpi4py's test/ folder (no mpiunittest.py there)")
    return str(Path(path).resolve())


@pytest.mark.timeout(1200)  # about 40 modules in processes of their own: minutes, not seconds
@pytest.mark.parametrize("n", [1, 2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_simcluster_passes_what_mpich_passes(suite: str, n: int) -> None:
    ours = harness.run("simcluster", [n], suite, scope.MODULES, jobs=2, log=False)
    table, misses = harness.compare(ours, harness.load_baseline())
    ok = sum(table[m][n][0] for m in table)
    of = sum(table[m][n][1] for m in table)
    known = harness.load_known()
    unlisted = [f"{module} {case}: {outcome}" for module, _n, case, outcome in misses
                if (module, n, case) not in known and (module, None, case) not in known]
    missed = {(module, case) for module, _n, case, _o in misses}
    stale = [f"{module} {case}" for (module, kn, case) in known
             if kn in (n, None) and (module, case) not in missed
             and ours.get(module, {}).get(n, {}).get(case) == "pass"]
    print(harness.report(table))
    assert not unlisted, (f"-n {n}: cases MPICH passes that fail here and are not in "
                          f"known_failures.txt:\n" + "\n".join(unlisted))
    assert not stale, (f"-n {n}: listed as failing but passing now; take them off "
                       f"known_failures.txt:\n" + "\n".join(stale))
    assert ok >= TARGET * of, f"-n {n}: {ok} of the {of} cases MPICH passes pass here, under {TARGET:.0%}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ulfm_passes_across_hosting_processes(suite: str, transport: str) -> None:
    """test_ulfm's self and world classes, each rank in a hosting process of its own."""
    outcomes, tail = harness.run_module(f"simcluster:{transport}", 3, suite, "test_ulfm")
    memory, _ = harness.run_module("simcluster", 3, suite, "test_ulfm")
    assert outcomes == memory, tail
    assert sum(o == "pass" for o in outcomes.values()) >= 14, tail


def test_the_scope_names_modules_the_suite_has(suite: str) -> None:
    missing = [m for m in scope.MODULES if not (Path(suite) / f"{m}.py").is_file()]
    assert not missing


def test_a_case_that_fails_on_any_rank_fails() -> None:
    assert harness.combine([{"A.t": "pass"}, {"A.t": "fail"}]) == {"A.t": "fail"}
    assert harness.combine([{"A.t": "pass"}, {}]) == {"A.t": "not run"}
    assert harness.combine([{"A.t": "pass"}, {"A.t": "skip"}]) == {"A.t": "skip"}
    assert harness.combine([{"A.t": "pass", "AWin.t": "fail"}]) == {"A.t": "pass"}  # out of scope
