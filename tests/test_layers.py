"""Dependencies point downward only: checked by parsing every module's imports with ast.

* nothing under ``transports/`` (installed as ``simcluster.transports``) imports the rest of
  ``simcluster``;
* ``simcluster/collectives/*`` never imports ``simcluster.engine``, ``simcluster.matching``
  or ``transports`` (collectives use only Comm's public p2p and a private context);
* ``transports/wire.py`` is sans-I/O: no ``asyncio``, no ``socket``;
* the package's imports form no cycle, function-local imports included (those under
  ``if TYPE_CHECKING:`` never run, so they are left out).
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


# ---- the package's imports form no cycle ----

PACKAGE_FILES = sorted([*_files("simcluster"), *TRANSPORT_FILES])
"""Every module of the installed package (``simcluster/transports`` is a link to ``transports/``)."""


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _runtime_imports(tree: ast.AST) -> list[ast.stmt | ast.expr]:
    """Every import statement (and literal ``importlib.import_module`` call) that can run:
    module-level and function-local, but not those under ``if TYPE_CHECKING:``."""
    found: list[ast.stmt | ast.expr] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and len(node.args) == 1
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append(node)
        visit(node)

    visit(tree)
    return found


def import_graph(paths: list[Path]) -> dict[str, dict[str, str]]:
    """``{module: {module it imports: "file:line"}}`` over the modules of ``paths``.

    Importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first, so it
    depends on those packages too, except on the importer's own packages: they
    are being imported already, and taking a submodule from one of them
    (``from . import engine``) is always safe. Taking any other name from a
    package (``from simcluster import __version__``) depends on its ``__init__``
    having run, so that counts even for the importer's own packages.
    """
    modules = {_module_name(p): p for p in paths}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        package = _package_of(path)

        def add(target: str | None, where: str, name: str = name) -> None:
            if target is not None and target != name:
                edges.setdefault(target, where)

        def add_with_packages(target: str | None, where: str, name: str = name) -> None:
            if target is None:
                return
            add(target, where)
            parts = target.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in modules and not name.startswith(parent + "."):
                    add(parent, where)

        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _runtime_imports(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add_with_packages(known(alias.name), where)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:  # a submodule
                        add_with_packages(f"{source}.{alias.name}", where)
                    else:  # a name the module (or package) defines
                        add(known(source), where)
                        add_with_packages(known(source), where)
            elif isinstance(node, ast.Call):
                target = node.args[0]
                assert isinstance(target, ast.Constant)
                add_with_packages(known(str(target.value)), where)
    for edges in graph.values():  # keep the package's own modules only
        for target in [t for t in edges if not t.startswith("simcluster")]:
            del edges[target]
    return graph


def strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph.get(v, {}):
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return groups


def find_cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per strongly connected group."""
    cycles = []
    for group in strongly_connected(graph):  # the shortest way back to its first module
        members = set(group)
        start = group[0]
        came: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in came:
                        came[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(came[path[-1]])
        cycles.append(path[::-1])
    return cycles


def _describe(cycle: list[str], graph: dict[str, dict[str, str]]) -> str:
    return "\n  ".join(f"{a} -> {b} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def test_the_package_imports_form_no_cycle() -> None:
    graph = import_graph(PACKAGE_FILES)
    assert "simcluster.runner" in graph and "simcluster.transports.wire" in graph
    groups = strongly_connected(graph)
    shown = "\n".join(
        f"modules that import each other: {', '.join(group)}\n  for example:\n  "
        + _describe(cycle, graph) for group, cycle in zip(groups, find_cycles(graph)))
    assert groups == [], f"import cycles (function-local imports count too):\n{shown}"


def test_the_run_layers_import_each_other_one_way() -> None:
    """The configuration and result types are leaves the runner, the coordinator and the
    hosting processes share; none of those three imports the runner."""
    graph = import_graph(PACKAGE_FILES)
    for module in ("simcluster._config", "simcluster._result", "simcluster.hosting.control",
                   "simcluster.hosting.coordinator", "simcluster.hosting.host", "simcluster.hosting.hosted_engine"):
        assert "simcluster.runner" not in graph[module], module
    for module in ("simcluster._result", "simcluster.hosting.control"):
        # the engine's records (coll_check's signatures) are theirs to carry; not the engine itself
        assert _hits(set(graph[module]), ("simcluster.engine.assembly", "simcluster.engine.kernel",
                                          "simcluster.engine.protocol", "simcluster.hosting.coordinator",
                                          "simcluster.hosting.host", "simcluster._config")) == []


def test_cycle_finder_sees_function_local_imports_but_not_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "simcluster"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "a.py").write_text("from . import b\n", encoding="utf-8")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .c import C\n"
        "def f():\n"
        "    from .a import thing\n", encoding="utf-8")
    (pkg / "c.py").write_text("import simcluster.b\n", encoding="utf-8")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        graph = import_graph(sorted(pkg.glob("*.py")))
    finally:
        ROOT = saved
    assert set(graph["simcluster.a"]) == {"simcluster.b"}
    assert set(graph["simcluster.b"]) == {"simcluster.a"}  # the TYPE_CHECKING import is left out
    assert set(graph["simcluster.c"]) == {"simcluster.b"}
    assert find_cycles(graph) == [["simcluster.a", "simcluster.b", "simcluster.a"]]
    assert "simcluster/b.py:5" in _describe(find_cycles(graph)[0], graph)
