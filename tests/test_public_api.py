"""The public surface of DESIGN.md exists, errors form one family, and __init__ only re-exports."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest

import simcluster as sc

PUBLIC_NAMES = [
    "run", "launch", "RunResult", "Comm", "Request", "Status", "ANY_SOURCE", "ANY_TAG",
    "wait_all", "wait_any", "wait_some", "test_all", "test_any", "ReduceOp", "latency",
    "DeadlockError", "RankError", "TruncationError", "BufferHazardError",
    "CollectiveMismatchError", "TransportError", "SimclusterError",
]

LATENCY_MODELS = ["Zero", "Constant", "AlphaBeta", "LogGP", "Hierarchical", "Jitter"]

ERRORS = ["DeadlockError", "RankError", "TruncationError", "BufferHazardError",
          "CollectiveMismatchError", "TransportError", "RunTimeoutError", "ProcessFailedError",
          "RevokedError"]

INIT = Path(sc.__file__)

PUBLIC_MODULES = [
    "simcluster", "simcluster.arrays", "simcluster.cli", "simcluster.dist", "simcluster.errors",
    "simcluster.latency", "simcluster.matching", "simcluster.ops", "simcluster.payload",
    "simcluster.testing", "simcluster.trace", "simcluster.MPI", "simcluster.faults",
    "simcluster.platform",
]
"""The modules a user imports or meets in the docs: dir() shows their public names only."""

STRAY = {"Any", "np", "overload", "annotations", "TYPE_CHECKING", "Final", "Callable", "dataclass",
         "field", "Path", "os", "json", "re", "sys"}


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_exists(name: str) -> None:
    assert hasattr(sc, name), f"simcluster.{name} is missing"


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_is_in_all(name: str) -> None:
    assert name in sc.__all__


def test_all_lists_only_names_that_exist() -> None:
    missing = [name for name in sc.__all__ if not hasattr(sc, name)]
    assert missing == []
    assert len(set(sc.__all__)) == len(sc.__all__)


@pytest.mark.parametrize("name", LATENCY_MODELS)
def test_latency_model_exists_and_is_a_model(name: str) -> None:
    model = getattr(sc.latency, name)
    assert issubclass(model, sc.latency.LatencyModel)


@pytest.mark.parametrize("name", ERRORS)
def test_every_error_derives_from_simcluster_error(name: str) -> None:
    cls = getattr(sc, name)
    assert issubclass(cls, sc.SimclusterError)
    assert issubclass(cls, Exception)


def test_transport_error_is_the_one_from_transports_base() -> None:
    from simcluster.transports import base

    assert sc.TransportError is base.TransportError
    assert sc.SimclusterError is base.SimclusterError


def test_simcluster_error_message_shape_and_attributes() -> None:
    err = sc.TruncationError(1, "recv(src=0, tag=7)", "too big", "pass a larger buf")
    assert str(err) == "rank 1: recv(src=0, tag=7): too big; pass a larger buf"
    assert (err.rank, err.op) == (1, "recv(src=0, tag=7)")
    anonymous = sc.SimclusterError(None, "run", "stopped", "try again")
    assert str(anonymous) == "run: stopped; try again"
    assert anonymous.rank is None


def test_wildcards_have_readable_reprs() -> None:
    assert repr(sc.ANY_SOURCE) == "ANY_SOURCE"
    assert repr(sc.ANY_TAG) == "ANY_TAG"


def test_reduce_op_has_the_documented_members() -> None:
    ops = sc.ReduceOp
    for name in ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR", "AVG"]:
        assert hasattr(ops, name), name
    assert callable(ops.custom)


def test_status_is_a_frozen_record() -> None:
    status = sc.Status(source=1, tag=2, nbytes=3)
    assert (status.source, status.tag, status.nbytes) == (1, 2, 3)
    with pytest.raises(AttributeError):
        status.tag = 5  # type: ignore[misc]


# ---- dir(): what tab completion and help() show ----


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_dir_of_a_public_module_lists_exactly_its_all(name: str) -> None:
    module = importlib.import_module(name)
    shown = [n for n in dir(module) if not (n.startswith("__") and n.endswith("__"))]
    assert shown == sorted(module.__all__)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what the module lacks"


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_dir_of_a_public_module_shows_no_stray_imports(name: str) -> None:
    module = importlib.import_module(name)
    stray = []
    for attr in dir(module):
        if attr.startswith("__") and attr.endswith("__"):
            continue
        value = getattr(module, attr)
        if attr.startswith("_") or attr in STRAY:
            stray.append(attr)
        elif isinstance(value, ModuleType):
            if value.__name__ != f"{name}.{attr}":  # only its own public submodules
                stray.append(attr)
        elif isinstance(value, TypeVar):
            stray.append(attr)
        elif inspect.isclass(value) or inspect.isroutine(value):
            if not getattr(value, "__module__", "").startswith("simcluster"):
                stray.append(attr)  # an import from the standard library or numpy
    assert stray == [], f"dir({name}) shows names that are not its own"


def test_dir_of_the_package_shows_what_users_reach_for() -> None:
    assert {"run", "Comm", "ReduceOp", "latency", "testing", "trace", "dist"} <= set(dir(sc))
    assert {"engine", "matching", "comm", "runner", "annotations"}.isdisjoint(dir(sc))
    assert set(dir(sc.trace)) >= {"Trace", "show", "plot"}
    assert "json" not in dir(sc.trace)


def test_init_only_re_exports() -> None:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    body = tree.body
    assert ast.get_docstring(tree), "simcluster/__init__.py needs a module docstring"
    offenders = []
    for i, node in enumerate(body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            continue
        if isinstance(node, ast.FunctionDef) and node.name in ("__dir__", "__getattr__"):
            continue  # dir() lists __all__ only; sc.faults loads on first use (PEP 562)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if names and set(names) <= {"__all__", "__version__"} and len(names) == len(targets):
                continue
        offenders.append(f"line {node.lineno}: {ast.dump(node)[:80]}")
    assert offenders == [], "simcluster/__init__.py must hold only imports, __all__ and __version__"


def test_init_imports_are_relative_re_exports() -> None:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            assert node.level == 1, f"line {node.lineno}: import from the package's own modules"
            for alias in node.names:
                assert alias.asname == alias.name, (
                    f"line {node.lineno}: re-export as `{alias.name} as {alias.name}`")


# ---- the test suite's own configuration ----


def test_pytest_asyncio_loop_scope_is_set(pytestconfig: pytest.Config) -> None:
    pytest.importorskip("pytest_asyncio")
    # unset, pytest-asyncio (0.24 and later) warns about it on every run
    assert pytestconfig.getini("asyncio_default_fixture_loop_scope") == "function"


def test_a_pytest_run_prints_no_warnings() -> None:
    root = Path(__file__).parent.parent
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTEST_ADDOPTS")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_public_api.py",
         "-k", "test_init_only_re_exports"],
        capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr

