"""The core's structure, counted: reaches into other objects' private attributes, type-level
import knots, and the size of the engine's parts. Each count has a ceiling it may not exceed, so
the engine's parts only ever get more separate; lower a ceiling when a change lowers its count.
A ceiling never goes up: every committed version of this file since that rule holds ceilings no
lower than today's (read from git, where the checkout has its history).
And the engine is composed, not inherited, and its declared seams hold: the kernel calls the
layer above it only through ``Layer`` and its reports only through ``Reports``, requests call
the kernel only through ``Waker`` and the run's checks only through ``Checks``, the protocol
calls its delivery only through ``Delivery`` and the deliveries use the protocol only through
``Posting`` (never assigning its attributes), the protocol and ``Comm`` ask the failure model only
through ``Faults``, the deliveries use nothing private of the protocol or the kernel, and the
diagnostics read the engine only through ``Inspected``. Each seam is checked from both sides:
its users use nothing it does not declare, and the part behind it offers all it declares.

``python tests/test_structure.py`` prints the counts.

The core is the package without its facades and tools (``MPI``, ``torch``, ``bench``).
"""

from __future__ import annotations

import ast
import collections
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simcluster"
OUTSIDE_THE_CORE = ("MPI", "torch", "bench")

CEILINGS = {"private reaches": 0, "modules in import knots": 0, "largest import knot": 0,
            "methods of the largest engine part": 30}  # the kernel


def core_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if not set(p.relative_to(PACKAGE).parts) & set(OUTSIDE_THE_CORE)]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


OTHER_LIBRARIES = {
    "_getframe": "sys._getframe: CPython's documented way to read the caller's frame (the user's line)",
    "_current_frames": "sys._current_frames: the frame a thread rank is in, for the timeout report",
    "_replace": "a NamedTuple's documented copy-with-changes",
    "_asyncio_future_blocking": "asyncio's protocol for a future yielded to its loop (a foreign await)",
    "_Environ": "os._Environ: the type of os.environ, to tell a mapping the caller built from it",
    "_exit": "os._exit: a forked child leaves at once, without its parent's atexit handlers",
    "_forkserver": "multiprocessing.forkserver._forkserver: whether the fork server runs already",
    "_inst": "random._inst: the module-level generator that each synchronous rank gets its own of",
    "_psplatform": "psutil._psplatform: the Process class that reads a pid's /proc entries, where a "
                   "rank's pid is its hosting process's",
    "_get_default_timeout": "torch.distributed has no public way to make a group for a registered backend",
    "_new_process_group_helper": "(as _get_default_timeout)",
    "_rand": "numpy.random.mtrand._rand: the generator behind np.random's functions, saved and restored per rank",
    "_world": "torch.distributed.distributed_c10d._world: the map get_backend reads a group's backend name from",
    "_scaled_dot_product_flash_attention": "aten's fused flash attention op (torch.ops.aten), timed as attention",
    "_scaled_dot_product_efficient_attention": "(as _scaled_dot_product_flash_attention: aten's memory-efficient one)",
    "_scaled_dot_product_flash_attention_for_cpu": "(as above: the CPU flash op, which CPU fake tensors run)",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "(as above: its backward)",
    "_c10d_functional": "torch.ops._c10d_functional: the functional collectives' op namespace (torchtitan's AC save list)",
    "_C": "torch._C: torch's compiled core, where its guards against the dispatch modes live",
    "_DisableTorchDispatch": "torch._C._DisableTorchDispatch: a shape-only message's new tensor made past the rank's modes",
}
"""Other libraries' private names the core uses, each with its reason; a new one fails the count."""


def _defined_private(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, globals, its objects' attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                   for t in node.targets)
              and isinstance(node.value, (ast.Tuple, ast.List))):
            names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_reaches() -> collections.Counter[str]:
    """``x._name`` in a core module, where ``x`` is not ``self`` or ``cls``, by module: reaches
    into a private name another module of the package defines (one that several modules define
    counts too: it may be any of theirs), or another library's that ``OTHER_LIBRARIES`` does not
    list. A module's use of the private names only it defines is its own business."""
    owners: dict[str, set[str]] = collections.defaultdict(set)
    for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "transports").rglob("*.py")]:
        for name in _defined_private(ast.parse(path.read_text(encoding="utf-8"))):
            owners[name].add(module_name(path) if path.is_relative_to(PACKAGE) else path.stem)
    found: collections.Counter[str] = collections.Counter()
    for path in core_files():
        module = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                defined = owners.get(node.attr, set())
                if defined == {module} or (not defined and node.attr in OTHER_LIBRARIES):
                    continue
                found[module] += 1
    return found


def import_knots() -> list[list[str]]:
    """Groups of core modules that import each other, directly or not; type-level imports count."""
    files = core_files()
    names = {module_name(p) for p in files}
    edges: dict[str, set[str]] = {n: set() for n in names}
    for path in files:
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            # ``from . import x`` names the package too, but the package is always there
            # first: only the modules themselves are edges
            edges[name].update(t for t in targets
                               if t in names and t != name and not name.startswith(t + "."))
    return [sorted(c) for c in _strong_components(edges) if len(c) > 1]


def _strong_components(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = itertools.count()

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            found.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


ENGINE_PARTS = (("engine/kernel.py", "Kernel"), ("engine/protocol.py", "P2P"), ("engine/delivery.py", "LocalDelivery"),
                ("hosting/hosted_engine.py", "HostedDelivery"), ("engine/diagnostics.py", "Diagnostics"),
                ("engine/assembly.py", "Engine"), ("hosting/hosted_engine.py", "HostedEngine"),
                ("engine/meetings.py", "Meetings"), ("engine/checks.py", "RunChecks"))
"""The engine's parts: each class, by source file."""


def _class(file: str, name: str) -> ast.ClassDef:
    for node in ast.parse((PACKAGE / file).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"no class {name} in {file}")


def _methods(cls: ast.ClassDef) -> set[str]:
    return {item.name for item in cls.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}


def part_methods() -> dict[str, int]:
    """Methods each engine part defines, counted in its source (the same in both builds: a
    compiled class shows the interpreter other attributes than its source has)."""
    return {name: len(_methods(_class(file, name))) for file, name in ENGINE_PARTS}


def counts() -> dict[str, int]:
    knots = import_knots()
    return {"private reaches": sum(private_reaches().values()),
            "modules in import knots": sum(len(k) for k in knots),
            "largest import knot": max((len(k) for k in knots), default=0),
            "methods of the largest engine part": max(part_methods().values())}


def test_the_core_counts_stay_under_their_ceilings() -> None:
    got = counts()
    over = {what: (n, CEILINGS[what]) for what, n in got.items() if n > CEILINGS[what]}
    assert over == {}, f"(count, ceiling): {over}; see tests/test_structure.py"


def _ceilings_in(text: str) -> dict[str, int]:
    """The ``CEILINGS`` literal of a version of this file."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CEILINGS":
            return dict(ast.literal_eval(node.value))
    return {}


def _committed_ceilings() -> list[tuple[str, dict[str, int]]]:
    """``(commit, CEILINGS)`` of every committed version of this file since the rule, newest first."""
    here = Path(__file__).resolve()
    root = here.parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        return []
    run = subprocess.run(["git", "log", "--format=%H", "--", f"tests/{here.name}"], cwd=root,
                         capture_output=True, text=True, check=False)
    found = []
    for commit in run.stdout.split():
        shown = subprocess.run(["git", "show", f"{commit}:tests/{here.name}"], cwd=root,
                               capture_output=True, text=True, check=False)
        if shown.returncode or "def test_no_ceiling_ever_goes_up" not in shown.stdout:
            break  # older than the rule
        found.append((commit[:10], _ceilings_in(shown.stdout)))
    return found


def test_no_ceiling_ever_goes_up() -> None:
    history = _committed_ceilings()
    if not history:
        pytest.skip("no git history of this file with the rule (a checkout without .git)")
    raised = [(commit, what, ceiling, CEILINGS[what]) for commit, ceilings in history
              for what, ceiling in ceilings.items() if what in CEILINGS and CEILINGS[what] > ceiling]
    assert raised == [], f"(commit, count, its ceiling there, the ceiling now): {raised}"


def _declared(tree: ast.Module, protocol: str) -> set[str]:
    """The names a Protocol class declares: its annotated attributes and its methods."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == protocol:
            return {item.target.id if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    else item.name for item in node.body
                    if isinstance(item, (ast.AnnAssign, ast.FunctionDef))}  # type: ignore[misc]
    raise AssertionError(f"no class {protocol}")


def _engine_reads(tree: ast.Module, cls: str) -> set[str]:
    """What class ``cls`` reads from the engine it holds (``self.engine.x``, or ``engine.x``)."""
    reads: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for sub in ast.walk(node):
                if not isinstance(sub, ast.Attribute):
                    continue
                base = sub.value
                if (isinstance(base, ast.Attribute) and base.attr == "engine"
                        and isinstance(base.value, ast.Name) and base.value.id == "self") or \
                        (isinstance(base, ast.Name) and base.id == "engine"):
                    reads.add(sub.attr)
    return reads


def test_diagnostics_read_the_engine_only_through_their_declared_seam() -> None:
    tree = ast.parse((PACKAGE / "engine/diagnostics.py").read_text(encoding="utf-8"))
    declared = _declared(tree, "Inspected")
    reads = _engine_reads(tree, "Diagnostics")
    assert reads and reads <= declared, f"read but not declared in Inspected: {reads - declared}"


def test_the_engine_asks_its_reports_only_what_the_kernel_declares() -> None:
    declared = _declared(ast.parse((PACKAGE / "engine/kernel.py").read_text(encoding="utf-8")), "Reports")
    asked = {node.attr for file in ("engine/kernel.py", "engine/running.py", "engine/checks.py")
             for node in ast.walk(ast.parse((PACKAGE / file).read_text(encoding="utf-8")))
             if isinstance(node, ast.Attribute)
             and isinstance(node.value, ast.Attribute) and node.value.attr == "reports"}
    assert asked and asked <= declared, f"asked but not declared in Reports: {asked - declared}"


def test_requests_call_the_kernel_and_its_checks_only_through_what_they_declare() -> None:
    tree = ast.parse((PACKAGE / "request.py").read_text(encoding="utf-8"))
    request = _class("request.py", "Request")
    kernel = _calls_on(request, "kernel") | _calls_on(request, "engine")  # ``engine = self.kernel``
    assert kernel and kernel <= _declared(tree, "Waker"), kernel - _declared(tree, "Waker")
    checks = {node.attr for node in ast.walk(request) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Attribute) and node.value.attr == "checks"}
    assert checks and checks <= _declared(tree, "Checks"), checks - _declared(tree, "Checks")
    # the checks the engine installs implement every one of them
    assert _declared(tree, "Checks") <= _methods(_class("engine/checks.py", "RunChecks"))


def _bases(file: str, name: str) -> list[str]:
    return [ast.unparse(base) for base in _class(file, name).bases]


def test_the_engine_is_composed_of_its_parts_not_a_chain_of_subclasses() -> None:
    assert _bases("engine/kernel.py", "Kernel") == ["Waker"]  # the requests' seam, not another part
    assert _bases("engine/protocol.py", "P2P") == ["Layer"]  # the kernel's seam, not the kernel
    assert _bases("engine/assembly.py", "Engine") == []
    assert _bases("engine/delivery.py", "LocalDelivery") == ["Delivery"]
    assert _bases("hosting/hosted_engine.py", "HostedDelivery") == ["Delivery"]
    # the hosted engine is the engine made with the hosted delivery: it overrides no step
    hosted = _methods(_class("hosting/hosted_engine.py", "HostedEngine"))
    assert hosted <= {"__init__", "call_check", "new_failures", "phase", "blocked_split", "timeout_lines"}, hosted


def _calls_on(tree: ast.AST, holder: str) -> set[str]:
    """The attributes used on ``self.<holder>`` (or a local named ``holder``) in ``tree``."""
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            if (isinstance(base, ast.Attribute) and base.attr == holder
                    and isinstance(base.value, ast.Name) and base.value.id == "self") or \
                    (isinstance(base, ast.Name) and base.id == holder):
                used.add(node.attr)
    return used


def test_the_kernel_calls_the_layer_above_only_through_layer() -> None:
    declared = _methods(_class("engine/kernel.py", "Layer"))
    called = _calls_on(_class("engine/kernel.py", "Kernel"), "layer")
    assert called and called <= declared, f"called but not declared in Layer: {called - declared}"


def test_the_protocol_calls_its_delivery_only_through_delivery() -> None:
    declared = _methods(_class("engine/protocol.py", "Delivery"))
    called = _calls_on(_class("engine/protocol.py", "P2P"), "delivery")
    assert called and called <= declared, f"called but not declared in Delivery: {called - declared}"


def test_the_deliveries_use_nothing_private_of_the_protocol_or_the_kernel() -> None:
    for file, name in (("engine/protocol.py", "Channels"), ("engine/delivery.py", "LocalDelivery"),
                       ("hosting/hosted_engine.py", "HostedDelivery"), ("hosting/hosted_engine.py", "HostedEngine")):
        cls = _class(file, name)
        used = _calls_on(cls, "p2p") | _calls_on(cls, "kernel")
        assert used, name
        private = {attr for attr in used if attr.startswith("_")}
        assert not private, f"{name} uses {private}"


@pytest.mark.parametrize(("seam", "users"), [
    (("engine/protocol.py", "Posting"), (("engine/protocol.py", "Channels"), ("engine/protocol.py", "Delivery"),
                                         ("engine/delivery.py", "LocalDelivery"),
                                         ("hosting/hosted_engine.py", "HostedDelivery"))),
    (("engine/failures.py", "Failing"), (("engine/failures.py", "Failures"),))])
def test_the_protocol_s_users_use_it_only_through_their_seam_and_assign_none_of_it(
        seam: tuple[str, str], users: tuple[tuple[str, str], ...]) -> None:
    """The deliveries and the channels through ``Posting``, the failure model through ``Failing``."""
    declared = _declared(ast.parse((PACKAGE / seam[0]).read_text(encoding="utf-8")), seam[1])
    for file, name in users:
        cls = _class(file, name)
        used = _calls_on(cls, "p2p")
        assert used and used <= declared, f"{name} uses, undeclared in {seam[1]}: {used - declared}"
        assigned = {node.attr for node in ast.walk(cls) if isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, (ast.Store, ast.Del)) and _is_holder(node.value, "p2p")}
        assert not assigned, f"{name} assigns the protocol's {assigned}: add a method to P2P instead"


def test_the_protocol_and_comm_ask_the_failure_model_only_through_faults() -> None:
    declared = _declared(ast.parse((PACKAGE / "engine/protocol.py").read_text(encoding="utf-8")), "Faults")
    for file, name in (("engine/protocol.py", "P2P"), ("comm.py", "Comm"),
                       ("hosting/hosted_engine.py", "HostedEngine")):
        asked = _calls_on(_class(file, name), "failures")
        assert asked and asked <= declared, f"{name} asks, undeclared in Faults: {asked - declared}"


SEAMS = (("engine/kernel.py", "Layer", (("engine/protocol.py", "P2P"),)),
         ("engine/kernel.py", "Reports", (("engine/diagnostics.py", "Diagnostics"),)),
         ("request.py", "Waker", (("engine/kernel.py", "Kernel"),)),
         ("request.py", "Checks", (("engine/checks.py", "RunChecks"),)),
         ("engine/protocol.py", "Delivery", (("engine/delivery.py", "LocalDelivery"),
                                             ("hosting/hosted_engine.py", "HostedDelivery"))),
         ("engine/protocol.py", "Posting", (("engine/protocol.py", "P2P"),)),
         ("engine/protocol.py", "Faults", (("engine/failures.py", "Failures"),)),
         ("engine/failures.py", "Failing", (("engine/protocol.py", "P2P"),)),
         ("engine/protocol.py", "Roster", (("comm.py", "Group"),)),
         ("engine/protocol.py", "Member", (("comm.py", "Comm"),)),
         ("engine/diagnostics.py", "Inspected", (("engine/assembly.py", "Engine"),)),
         ("engine/awaits.py", "Noting", (("engine/kernel.py", "Kernel"),)),
         ("engine/waits.py", "Waitable", (("request.py", "Request"),)),
         ("engine/task.py", "RankComm", (("comm.py", "Comm"),)),
         ("engine/task.py", "CollectiveCall", (("_coll_context.py", "CollContext"),)),
         ("engine/task.py", "Completion", (("request.py", "Request"),)),
         ("engine/schedule.py", "Chooser", (("engine/schedule.py", "Replay"), ("engine/schedule.py", "Explorer"))))
"""Each declared seam, by the file that declares it, and the parts that stand behind it."""


def _is_holder(node: ast.expr, holder: str) -> bool:
    """Whether ``node`` is ``self.<holder>`` or a local named ``holder``."""
    return (isinstance(node, ast.Attribute) and node.attr == holder and isinstance(node.value, ast.Name)
            and node.value.id == "self") or (isinstance(node, ast.Name) and node.id == holder)


def _offered(file: str, name: str) -> set[str]:
    """What a class offers: its methods and properties, its class attributes, what its methods
    assign on ``self``, and what its bases in the package offer."""
    cls = _class(file, name)
    offered = _methods(cls) | {item.target.id for item in cls.body
                               if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    offered |= {target.id for item in cls.body if isinstance(item, ast.Assign)
                for target in item.targets if isinstance(target, ast.Name)}
    offered |= {node.attr for node in ast.walk(cls) if isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
                and node.value.id == "self"}
    for base in cls.bases:
        where = _class_file(ast.unparse(base))
        if where is not None:
            offered |= _offered(where, ast.unparse(base))
    return offered


def _class_file(name: str) -> str | None:
    """The core file that defines class ``name`` at its top level (None: not the package's)."""
    for path in core_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.ClassDef) and node.name == name for node in tree.body):
            return str(path.relative_to(PACKAGE))
    return None


@pytest.mark.parametrize(("file", "seam", "parts"), SEAMS, ids=[seam for _, seam, _ in SEAMS])
def test_the_parts_behind_each_seam_offer_all_it_declares(file: str, seam: str,
                                                         parts: tuple[tuple[str, str], ...]) -> None:
    declared = _declared(ast.parse((PACKAGE / file).read_text(encoding="utf-8")), seam)
    assert declared, seam
    for part_file, part in parts:
        missing = declared - _offered(part_file, part)
        assert not missing, f"{part} does not offer what {seam} declares: {missing}"


def test_the_counter_sees_a_private_reach_and_a_knot(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    package = tmp_path / "simcluster"
    package.mkdir()
    (package / "a.py").write_text("from . import b\n\ndef f(x):\n    return x._hidden + b.y\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from . import a\ny = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert private_reaches() == {"simcluster.a": 1}
    assert import_knots() == [["simcluster.a", "simcluster.b"]]


if __name__ == "__main__":
    for what, n in counts().items():
        print(f"{what}: {n} (ceiling {CEILINGS[what]})")
    for part, n in part_methods().items():
        print(f"  {part}: {n} methods")
    for knot in import_knots():
        print(f"knot of {len(knot)}: {' '.join(knot)}")
