"""Dependencies point downward only: checked by parsing every module's imports with ast.

* nothing under ``transports/`` (installed as ``simcluster.transports``) imports the rest of
  ``simcluster``;
* ``simcluster/collectives/*`` never imports ``simcluster.engine``, ``simcluster.matching``
  or ``transports`` (collectives use only Comm's public p2p and a private context);
* ``transports/wire.py`` is sans-I/O: no ``asyncio``, no ``socket``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "transports":  # the top-level folder installs as simcluster.transports
        parts.insert(0, "simcluster")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported_modules(path: Path, package: str | None = None) -> set[str]:
    """Return every module ``path`` imports, relative imports resolved, anywhere in the file.

    ``from pkg import name`` yields both ``pkg`` and ``pkg.name`` (name may be a module).
    Imports under ``if TYPE_CHECKING:`` count too: a layer must not even name what it
    may not use.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = (package if package is not None else _package_of(path)).split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            if node.args and isinstance(node.args[0], ast.Constant):
                found.add(str(node.args[0].value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            target = node.args[0].value
            if target.startswith(".") and len(node.args) > 1:
                continue  # relative to a runtime package argument: cannot resolve statically
            found.add(target)
    return found


def _hits(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules
                  if any(m == f or m.startswith(f + ".") for f in forbidden))


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


TRANSPORT_FILES = _files("transports")
COLLECTIVE_FILES = _files("simcluster/collectives")


def test_the_layers_exist() -> None:
    assert TRANSPORT_FILES, "transports/ has no modules"
    assert COLLECTIVE_FILES, "simcluster/collectives/ has no modules"
    assert (ROOT / "transports" / "wire.py").exists()


@pytest.mark.parametrize("path", TRANSPORT_FILES, ids=_ids(TRANSPORT_FILES))
def test_transports_never_import_simcluster(path: Path) -> None:
    outside = {m for m in imported_modules(path)
               if m != "simcluster.transports" and not m.startswith("simcluster.transports.")}
    assert _hits(outside, ("simcluster",)) == []


@pytest.mark.parametrize("path", COLLECTIVE_FILES, ids=_ids(COLLECTIVE_FILES))
def test_collectives_never_import_engine_matching_or_transports(path: Path) -> None:
    forbidden = ("simcluster.engine", "simcluster.matching", "simcluster.transports")
    assert _hits(imported_modules(path), forbidden) == []


def test_wire_is_sans_io() -> None:
    modules = imported_modules(ROOT / "transports" / "wire.py")
    assert _hits(modules, ("asyncio", "socket", "selectors")) == []
    assert [m for m in modules if m.startswith("simcluster") and "transports" not in m] == []


def test_checker_resolves_relative_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "fake.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import engine\n"
        "from ..matching import MatchQueue\n"
        "from . import ring\n"
        "if TYPE_CHECKING:\n"
        "    import simcluster.transports.wire\n",
        encoding="utf-8")
    modules = imported_modules(source, package="simcluster.collectives")
    assert _hits(modules, ("simcluster.engine", "simcluster.matching", "simcluster.transports")) == [
        "simcluster.engine", "simcluster.matching", "simcluster.matching.MatchQueue",
        "simcluster.transports.wire"]
    assert "simcluster.collectives.ring" in modules


def test_no_top_level_transports_package_is_installed() -> None:
    """The folder installs under the project's name: nothing called ``transports`` lands in site-packages."""
    import importlib.metadata
    import sys

    import simcluster.transports.base as base

    assert Path(base.__file__).resolve().parent == ROOT / "transports"
    files = importlib.metadata.distribution("simcluster").files or []
    assert not [f for f in files if f.parts[0] == "transports"]
    finders = [f for f in sys.meta_path if "simcluster" in getattr(f, "__module__", "")]
    for finder in finders:  # an editable install's finder maps only the simcluster package
        assert finder.find_spec("transports", None) is None
