"""The two builds: the hot path compiled with mypyc, and the same ``.py`` files interpreted.

Both must behave identically; ``SIMCLUSTER_PURE_PYTHON=1`` must really load
the ``.py`` files; a compiled module whose source changed since the build
must never shadow the source; and ``simcluster --version`` says which build
runs.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import simcluster
from simcluster import _build, _build_manifest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(simcluster.__file__).resolve().parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
INSTALLED = _build.decide(PACKAGE, {})
"""The build a process gets without SIMCLUSTER_PURE_PYTHON (this one may have it set)."""
needs_compiled = pytest.mark.skipif(
    not INSTALLED.compiled,
    reason=f"the compiled build is not installed here ({INSTALLED.reason}); install with a C compiler")


def _python(code: str, *, pure: bool, cwd: Path | None = None, path: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SIMCLUSTER_PURE_PYTHON", "PYTHONPATH")}
    if pure:
        env["SIMCLUSTER_PURE_PYTHON"] = "1"
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=cwd or ROOT, timeout=120)


# ---- deciding the build from the package's files ----


def _fake_package(tmp_path: Path) -> Path:
    """A package directory that looks like a complete compiled build."""
    package = tmp_path / "pkg"
    package.mkdir()
    for name in _build_manifest.COMPILED:
        source = package / _build_manifest.source(name)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(f"# {name}\n".encode())
        source.with_suffix(SUFFIX).write_bytes(b"")
    (package / "transports" / "base.py").write_text("class Envelope: ...\n")  # not compiled
    record = {"compiler": "mypyc 9.9", "abi": SUFFIX,
              "sources": _build_manifest.source_hashes(str(package))}
    (package / _build_manifest.RECORD).write_text(json.dumps(record))
    return package


def test_a_complete_build_whose_sources_are_unchanged_is_compiled(tmp_path: Path) -> None:
    build = _build.decide(_fake_package(tmp_path), {})
    assert build == _build.Build(True, "mypyc 9.9", "")


def test_the_switch_chooses_the_interpreted_build_whatever_is_installed(tmp_path: Path) -> None:
    build = _build.decide(_fake_package(tmp_path), {"SIMCLUSTER_PURE_PYTHON": "1"})
    assert build == _build.Build(False, "", "SIMCLUSTER_PURE_PYTHON=1")


def test_an_edited_source_is_run_interpreted_and_named(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    with open(package / "engine" / "kernel.py", "a") as f:
        f.write("x = 1\n")
    build = _build.decide(package, {})
    assert not build.compiled and build.reason == "engine/kernel.py changed since it was compiled"


def test_an_edit_to_a_module_the_compiled_ones_import_makes_the_build_stale(tmp_path: Path) -> None:
    # mypyc bakes in what compiled modules import (a NamedTuple's field positions, Final
    # constants), so every source of the package is part of the build's key
    package = _fake_package(tmp_path)
    (package / "transports" / "base.py").write_text("class Envelope: x: int\n")
    build = _build.decide(package, {})
    assert not build.compiled and build.reason == "transports/base.py changed since it was compiled"


def test_a_source_the_install_left_out_or_added_changes_nothing(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    (package / "transports" / "base.py").unlink()
    (package / "new_tool.py").write_text("x = 1\n")
    assert _build.decide(package, {}).compiled


def test_modules_compiled_for_another_python_run_interpreted(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    record = json.loads((package / _build_manifest.RECORD).read_text())
    (package / _build_manifest.RECORD).write_text(json.dumps({**record, "abi": ".cpython-99-x.so"}))
    build = _build.decide(package, {})
    assert not build.compiled and build.reason == "the compiled modules are for another Python (.cpython-99-x.so)"


def test_the_build_key_changes_with_every_input() -> None:
    sources = {"engine/kernel.py": "a", "transports/base.py": "b"}
    key = _build_manifest.build_key("mypyc 1", SUFFIX, sources, "s")
    assert key == _build_manifest.build_key("mypyc 1", SUFFIX, dict(reversed(sources.items())), "s")
    assert len({key, _build_manifest.build_key("mypyc 2", SUFFIX, sources, "s"),
                _build_manifest.build_key("mypyc 1", ".other.so", sources, "s"),
                _build_manifest.build_key("mypyc 1", SUFFIX, {**sources, "x.py": "c"}, "s"),
                _build_manifest.build_key("mypyc 1", SUFFIX, {**sources, "engine/kernel.py": "z"}, "s"),
                _build_manifest.build_key("mypyc 1", SUFFIX, sources, "t")}) == 6


@needs_compiled
def test_the_installed_record_covers_every_source_of_the_package() -> None:
    record = json.loads((PACKAGE / _build_manifest.RECORD).read_text())
    assert set(record["sources"]) >= {"engine/kernel.py", "transports/base.py", "comm.py", "MPI/_comm.py"}


def test_an_install_that_compiled_nothing_runs_interpreted(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    (package / _build_manifest.RECORD).unlink()
    build = _build.decide(package, {})
    assert not build.compiled and "compiled nothing" in build.reason


def test_a_missing_extension_runs_interpreted_and_is_named(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    (package / f"matching{SUFFIX}").unlink()
    build = _build.decide(package, {})
    assert not build.compiled and build.reason == "the compiled matching is missing for this Python"


# ---- what each build loads ----

_FILES = ("import simcluster, importlib, json\n"
          "print(json.dumps({name: importlib.import_module('simcluster.' + name).__file__\n"
          "                  for name in simcluster._build_manifest.COMPILED}))")


def test_the_interpreted_switch_loads_every_py_file() -> None:
    run = _python(_FILES, pure=True)
    assert run.returncode == 0, run.stderr
    files = json.loads(run.stdout)
    assert sorted(files) == sorted(_build_manifest.COMPILED)
    assert all(path.endswith(_build_manifest.source(name)) for name, path in files.items()), files
    assert run.stderr == ""  # chosen on purpose: no warning


@needs_compiled
def test_the_compiled_build_loads_every_extension() -> None:
    run = _python(_FILES, pure=False)
    assert run.returncode == 0, run.stderr
    files = json.loads(run.stdout)
    assert all(path.endswith(SUFFIX) for path in files.values()), files


def _copy_package(tmp_path: Path) -> Path:
    """A copy of the installed package (extensions and record included) on a path of its own."""
    target = tmp_path / "site" / "simcluster"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@needs_compiled
def test_an_edited_source_is_never_shadowed_by_its_stale_extension(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    with open(package / "matching.py", "a") as f:
        f.write("\nEDITED = True\n")
    run = _python("import simcluster.matching as m; print(m.__file__, m.EDITED)", pure=False,
                  path=package.parent, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(package / "matching.py"), "True"]
    assert "simcluster runs interpreted" in run.stderr
    assert "matching.py changed since it was compiled" in run.stderr
    assert "SIMCLUSTER_PURE_PYTHON=1" in run.stderr  # how to silence it


def test_an_install_without_the_compiled_build_says_so_once_and_how_to_get_it(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    for path in package.rglob("*"):
        if path.name.endswith(SUFFIX) or path.name == _build_manifest.RECORD:
            path.unlink()
    code = ("import simcluster, simcluster.dist, simcluster.MPI\n"
            "async def main(comm):\n"
            "    return await comm.all_reduce(comm.rank)\n"
            "print(simcluster.engine.kernel.__file__, list(simcluster.run(main, 3)))")
    run = _python(code, pure=False, path=package.parent, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split(" ", 1) == [str(package / "engine" / "kernel.py"), "[3, 3, 3]\n"]
    assert run.stderr.count("simcluster runs interpreted") == 1, run.stderr
    assert "compiled nothing" in run.stderr and "C compiler" in run.stderr


def test_without_the_compiled_build_warnings_as_errors_and_pytest_still_run(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    for path in [*package.iterdir(), *(package / "transports").iterdir()]:
        if path.name.endswith(SUFFIX) or path.name == _build_manifest.RECORD:
            path.unlink()
    env = {k: v for k, v in os.environ.items() if k not in ("SIMCLUSTER_PURE_PYTHON", "PYTHONPATH")}
    env["PYTHONPATH"] = str(package.parent)
    strict = subprocess.run([sys.executable, "-W", "error", "-c", "import simcluster"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert strict.returncode == 0, strict.stderr
    assert strict.stderr.count("simcluster runs interpreted") == 1
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n"
                                      "filterwarnings =\n    error\n")
    (tests / "test_it.py").write_text("import simcluster\n\n"
                                      "def test_it():\n"
                                      "    assert not simcluster._build.active.compiled\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-W", "error", str(tests)], capture_output=True, text=True, env=env,
                         cwd=tests, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


# ---- both builds behave the same ----


@needs_compiled
def test_both_builds_give_the_same_results_times_stats_traces_and_reports() -> None:
    """A batch of programs (every transport-independent program, four models, two sizes, two
    seeds, ANY_SOURCE races under both schedules, deadlock, failing rank, truncation, an
    unawaited call, an exhaustive explore) prints the same JSON in both builds."""
    probe = [sys.executable, str(ROOT / "tests" / "build_probe.py")]
    env = {k: v for k, v in os.environ.items() if k != "SIMCLUSTER_PURE_PYTHON"}
    compiled = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=300)
    interpreted = subprocess.run(probe, capture_output=True, text=True, timeout=300,
                                 env={**env, "SIMCLUSTER_PURE_PYTHON": "1"})
    assert compiled.returncode == 0 and interpreted.returncode == 0, compiled.stderr + interpreted.stderr
    a, b = json.loads(compiled.stdout), json.loads(interpreted.stdout)
    assert (a.pop("compiled"), b.pop("compiled")) == (True, False)
    assert len(a) > 70 and a["head_to_head"]["error"] == "DeadlockError"
    assert "build_probe.py:" in a["head_to_head"]["message"]  # the user's line, in both builds
    for key in a:
        assert a[key] == b[key], key


# ---- saying which build runs ----


def test_version_says_which_build_runs() -> None:
    code = "import sys; from simcluster.cli import main; sys.argv = ['simcluster', '--version']; main()"
    pure = _python(code, pure=True)
    assert pure.stdout.strip() == f"simcluster {simcluster.__version__}, interpreted (SIMCLUSTER_PURE_PYTHON=1)"
    default = _python(code, pure=False)
    if INSTALLED.compiled:
        assert default.stdout.strip().startswith(f"simcluster {simcluster.__version__}, compiled (mypyc ")
        assert default.stdout.strip().endswith(f"{len(_build_manifest.COMPILED)} modules)")
    else:
        assert "interpreted (" in default.stdout


# ---- profilers see the user's functions ----

_PROFILED = """
import cProfile, pstats, simcluster
async def users_rank(comm):
    return int(await comm.all_reduce(comm.rank))
profile = cProfile.Profile()
result = profile.runcall(simcluster.run, users_rank, 4)
names = {name for (_, _, name) in pstats.Stats(profile).stats}
print(list(result), "users_rank" in names)
"""


@pytest.mark.parametrize("pure", [False, True], ids=["default", "interpreted"])
def test_cprofile_sees_the_users_rank_function(pure: bool) -> None:
    run = _python(_PROFILED, pure=pure)  # a process of its own: no other profiler or thread around
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[6, 6, 6, 6] True"


def test_a_rebuild_finds_the_extensions_of_modules_it_no_longer_compiles(tmp_path: Path) -> None:
    suffix = ".cpython-311-x86_64-linux-gnu.so"
    for module in ("engine/kernel", "transports/wire", "collectives/barrier", "collectives/_methods", "comm"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{module}{suffix}").write_bytes(b"")
    (tmp_path / f"_native__mypyc{suffix}").write_bytes(b"")
    (tmp_path / "comm.py").write_text("")
    stale = _build_manifest.stale_extensions(str(tmp_path), suffix)
    assert stale == [str(tmp_path / f"collectives/_methods{suffix}"), str(tmp_path / f"comm{suffix}")]
