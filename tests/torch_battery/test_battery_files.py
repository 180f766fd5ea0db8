"""pytorch's other distributed batteries, test files of its ``test/distributed/``, against gloo.

The files (``test_c10d_gloo.py``, ``test_c10d_functional_native.py``, DTensor
and FSDP2 files) are not in torch's wheel nor in this project: give a copy of
pytorch's ``test/`` folder with the environment variable

    SIMCLUSTER_TORCH_TESTS=PATH/TO/pytorch/test python -m pytest tests/torch_battery

and each file ``file_baseline.json`` has gloo's outcomes for runs here, case by
case, on simcluster's ranks (``battery.py --file``): a case gloo passes and
simcluster does not must be listed, with its reason, in
``file_known_failures.txt``, and a listed case that passes fails the test
(take it off the list). Without the variable these tests skip; the
adapter's own logic is tested either way.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import battery as harness  # noqa: E402

ENV = "SIMCLUSTER_TORCH_TESTS"
FILES = sorted(harness.load_file_baseline())


@pytest.mark.timeout(1800)  # a forked process per case; test_c10d_gloo.py: about 2 minutes
@pytest.mark.parametrize("key", FILES)
def test_simcluster_passes_what_gloo_passes(key: str) -> None:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to a copy of pytorch's test/ folder to run its distributed files")
    path = Path(root, key)
    if not path.is_file():
        pytest.skip(f"{path}: not there")
    pytest.importorskip("expecttest", reason="torch's test utilities import expecttest")
    gloo = harness.load_file_baseline()[key]
    results = harness.run_file("simcluster", str(path), sorted(gloo), log=False)
    ours = {case: r["outcome"] for case, r in results.items()}
    table, misses = harness.compare_file(ours, gloo)
    known = harness.load_file_known()
    print(harness.file_report(key, table))
    unlisted = [f"{case}: {outcome}\n    " + results[case]["detail"].strip()[-600:]
                for case, outcome in misses if harness.file_reason(known, key, case) is None]
    missed = {case for case, _o in misses}
    stale = [case for (k, case) in known if k == key and "*" not in case
             and case not in missed and gloo.get(case) == "pass"]
    assert not unlisted, (f"{key}: cases gloo passes that fail here and are not in "
                          "file_known_failures.txt:\n" + "\n".join(unlisted))
    assert not stale, (f"{key}: listed as failing but passing now; take them off "
                       "file_known_failures.txt:\n" + "\n".join(stale))


def test_every_listed_case_is_one_gloo_passes() -> None:
    gloo = harness.load_file_baseline()
    for key, case in harness.load_file_known():
        assert key in gloo, f"{key}: no gloo baseline for this file"
        if "*" in case:
            prefix = case.rstrip("*")
            assert any(c.startswith(prefix) and o == "pass" for c, o in gloo[key].items()), case
        else:
            assert gloo[key].get(case) == "pass", f"{key} {case}: gloo does not pass it"


def test_the_baseline_names_its_command_and_torch() -> None:
    raw = json.loads(harness.FILE_BASELINE.read_text(encoding="utf-8"))
    assert raw["backend"] == "gloo" and raw["torch"]
    for key, entry in raw["files"].items():
        assert "--backend gloo" in entry["command"] and "--file" in entry["command"], key


def test_a_file_is_named_as_in_pytorchs_test_folder() -> None:
    assert harness.file_key("/src/pytorch/test/distributed/tensor/test_init.py") == (
        "distributed/tensor/test_init.py")
    assert harness.file_key("/tmp/copy/distributed/test_c10d_gloo.py") == (
        "distributed/test_c10d_gloo.py")
    assert harness.file_key("/elsewhere/test_x.py") == "test_x.py"


def test_a_file_is_compared_class_by_class_on_what_gloo_ran() -> None:
    ours = {"A.test_1": "pass", "A.test_2": "fail", "B.test_1": "skip", "C.test_1": "pass"}
    gloo = {"A.test_1": "pass", "A.test_2": "pass", "B.test_1": "skip"}  # C not measured
    table, misses = harness.compare_file(ours, gloo)
    assert table == {"A": (2, 2, 1), "B": (1, 0, 0)}
    assert misses == [("A.test_2", "fail")]
    report = harness.file_report("distributed/x.py", table)
    assert "| `A` | 2 | 2 | 1 | 50.0% |" in report and "| `B` | 1 | 0 | 0 | - |" in report
    known = {("f", "A.*"): "why", ("g", "*"): "all"}
    assert harness.file_reason(known, "f", "A.test_9") == "why"
    assert harness.file_reason(known, "g", "Z.test_1") == "all"
    assert harness.file_reason(known, "f", "B.test_1") is None
