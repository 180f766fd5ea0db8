"""torch's own distributed test battery, unmodified, as the oracle of the torch backend.

Runs every case of ``DistributedTest._DistTestBase`` (torch's wheel,
``torch/testing/_internal/distributed/distributed_test.py``) on the ranks of
``simcluster.torch.spawn``, the program asking for gloo
(``tests/torch_battery/``), at WORLD_SIZE 2, 3 and 4, and compares case by case
with what gloo passes in torch's own harness with real processes
(``tests/torch_battery/gloo_baseline.json``, recorded by the same harness).
Three checks per world size:

* at least ``THRESHOLD`` of the cases gloo passes pass here;
* every case gloo passes and simcluster does not is listed, with its reason,
  in ``tests/torch_battery/known_failures.txt``;
* a listed case that passes now fails this test (take it off the list).

docs/torch.md has the table. The battery
needs torch and ``expecttest`` (which torch's test utilities import): without
either these tests skip, saying which.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "torch_battery"))

import battery_case  # noqa: E402 - tests/mpi4py_suite has a "case_runner" module
import battery as harness  # noqa: E402 - tests/mpi4py_suite has a "harness" module

THRESHOLD = 0.95
"""The share of gloo's passes that must pass here at every world size (issue 40's goal)."""
SIZES = (2, 3, 4)


@pytest.fixture(scope="module")
def battery() -> None:
    pytest.importorskip("torch", reason="the battery is torch's; install simcluster[torch]")
    pytest.importorskip("expecttest", reason="torch's test utilities import expecttest: "
                                             "pip install expecttest")


@pytest.mark.timeout(900)  # one runner per case list, a forked process per case: about a minute a size
@pytest.mark.parametrize("n", SIZES)
def test_simcluster_passes_what_gloo_passes(battery: None, n: int) -> None:
    gloo = harness.load_baseline()
    if n not in gloo:
        pytest.skip(f"gloo_baseline.json has no WORLD_SIZE {n}")
    results = harness.run("simcluster", [n], sorted(gloo[n]), jobs=2, log=False)
    ours = harness.outcomes(results)
    table, misses = harness.compare(ours, gloo)
    cases, of, ok = table[n]
    known = harness.load_known()
    unlisted = [f"{case}: {outcome}\n    " + results[n][case]["detail"].strip()[-600:]
                for _n, case, outcome in misses if harness.reason(known, n, case) is None]
    missed = {case for _n, case, _o in misses}
    stale = [case for (kn, case) in known if kn in (n, None) and case not in missed
             and gloo[n].get(case) == "pass"]
    print(harness.report(table))
    assert not unlisted, (f"WORLD_SIZE {n}: cases gloo passes that fail here and are not in "
                          "known_failures.txt:\n" + "\n".join(unlisted))
    assert not stale, (f"WORLD_SIZE {n}: listed as failing but passing now; take them off "
                       "known_failures.txt:\n" + "\n".join(stale))
    assert ok >= THRESHOLD * of, (f"WORLD_SIZE {n}: {ok} of the {of} cases gloo passes pass "
                                  f"here, under {THRESHOLD:.0%}")


def test_every_listed_case_is_one_gloo_passes() -> None:
    gloo = harness.load_baseline()
    for n, case in harness.load_known():
        sizes = [n] if n is not None else [s for s in SIZES if s in gloo]
        assert any(gloo[s].get(case) == "pass" for s in sizes), f"{case}: gloo does not pass it"


def test_the_baseline_has_every_world_size_and_names_its_command() -> None:
    raw = harness.json.loads(harness.BASELINE.read_text(encoding="utf-8"))
    assert sorted(int(n) for n in raw["outcomes"]) == list(SIZES)
    assert raw["backend"] == "gloo" and "--backend gloo" in raw["command"]


def test_a_case_is_read_as_torchs_harness_reads_exit_codes() -> None:
    verdict = battery_case._verdict
    assert verdict(2, {0: ("pass", ""), 1: ("pass", "")}, None) == ("pass", "")
    # rank 0's exit code decides between pass and skip; any rank that raised fails the case
    assert verdict(2, {0: ("skip", "why"), 1: ("pass", "")}, None) == ("skip", "why")
    assert verdict(2, {0: ("pass", ""), 1: ("skip", "why")}, None) == ("pass", "")
    assert verdict(2, {0: ("skip", "why"), 1: ("fail", "boom")}, None)[0] == "fail"
    # a rank that never finished (a deadlock, the wall-clock limit) fails it
    assert verdict(2, {0: ("pass", "")}, RuntimeError("deadlock"))[0] == "fail"


def test_a_crash_is_put_on_the_case_it_started(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"start": "test_a"}\n{"case": "test_a", "outcome": "pass", "detail": "", '
                   '"wall": 0.1}\n{"start": "test_b"}\n{"case": "test_b", "outc', encoding="utf-8")
    done, started = harness._read(out)
    assert done == {"test_a": {"outcome": "pass", "detail": ""}}
    assert started == "test_b"
