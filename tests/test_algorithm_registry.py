"""Each collective algorithm is declared once, and both fidelities use what it declares.

Every algorithm a collective accepts (``algorithm=``, ``run(algorithms=...)``,
the table in docs/collectives.md) has exactly one ``Algorithm`` record, in its
family module; ``_cost.py`` and ``analytic.py`` call what the record declares
rather than testing algorithm names; and where the analytic cost formula is
exact (members entering together on ``2**k`` ranks), each algorithm takes the
same virtual time at both fidelities.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simcluster as sc
from simcluster.collectives import FAMILIES, algorithms, check_algorithm, check_algorithms, declared
from simcluster.collectives._registry import Algorithm, declare, lookup

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simcluster" / "collectives"

DECLARED = [(name, algorithm) for name in FAMILIES for algorithm in sorted(declared(name))]
NAMES = {algorithm for _, algorithm in DECLARED}

AB = sc.latency.AlphaBeta(2.0**-20, 2.0**-30)  # powers of two: sums of steps are exact in floating point


# ---- one declaration per algorithm ----


@pytest.mark.parametrize("name", FAMILIES)
def test_every_accepted_algorithm_has_its_record(name: str) -> None:
    table = declared(name)
    assert set(table) == set(algorithms(name))
    for algorithm, record in table.items():
        assert (record.collective, record.name) == (name, algorithm)
        assert record.run is algorithms(name)[algorithm]
        assert lookup(name, algorithm) is record
        check_algorithm(name, algorithm)
        assert check_algorithms({name: algorithm}) == {name: algorithm}
    with pytest.raises(ValueError, match=r"unknown algorithm; valid: "):
        check_algorithm(name, "no_such_algorithm")


def _records_in_source() -> Counter[tuple[str, str]]:
    """Count ``Algorithm("collective", "name", ...)`` calls in every module of the package."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Algorithm":
                collective, algorithm = (ast.literal_eval(arg) for arg in node.args[:2])
                found[collective, algorithm] += 1
    return found


def test_each_algorithm_is_written_down_once() -> None:
    found = _records_in_source()
    assert [key for key, count in found.items() if count != 1] == []
    assert set(found) == set(DECLARED)


def test_the_documented_algorithms_are_the_declared_ones() -> None:
    text = (ROOT / "docs" / "collectives.md").read_text(encoding="utf-8")
    section = text.split("\n## Algorithms\n", 1)[1]
    table = next(block for block in section.split("\n\n") if block.startswith("| collective | algorithms |"))
    documented: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        collectives, names = (cell.strip() for cell in row.strip("|").split("|")[:2])
        for collective in collectives.split(", "):
            documented[collective] = set(names.split(", "))
    assert documented == {name: set(declared(name)) for name in FAMILIES}


def test_declare_refuses_a_name_twice_and_a_stranger() -> None:
    record = lookup("barrier", "tree")
    with pytest.raises(ValueError, match=r"^barrier: algorithm 'tree' is declared twice$"):
        declare(record, record)
    with pytest.raises(ValueError, match=r"^declare\(\): scan\.linear is declared among barrier's"):
        declare(record, lookup("scan", "linear"))
    assert isinstance(record, Algorithm)


# ---- no algorithm names in the analytic machinery ----


@pytest.mark.parametrize("module", ["_cost.py", "analytic.py"])
def test_cost_and_analytic_never_compare_algorithm_names(module: str) -> None:
    source = (PACKAGE / module).read_text(encoding="utf-8")
    assert re.findall(r"\b(?:algorithm|tree)\s*(?:==|!=|\bin\b|\bnot in\b)", source) == []
    named: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):  # a table keyed by algorithm names
            operands = [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Set):
            operands = list(node.elts)
        else:
            continue
        for operand in operands:
            for leaf in ast.walk(operand):
                if isinstance(leaf, ast.Constant) and leaf.value in NAMES:
                    named.append(f"line {leaf.lineno}: {leaf.value!r}")
    assert named == []


# ---- virtual time: analytic equals message level where the formula is exact ----


def _payload(comm: sc.Comm) -> Any:
    return np.arange(16 * comm.size, dtype=np.float64) + comm.rank  # splits evenly into p pieces


CALLS: dict[str, Callable[[sc.Comm, int, str], Awaitable[Any]]] = {
    "barrier": lambda comm, root, algo: comm.barrier(algorithm=algo),
    "broadcast": lambda comm, root, algo: comm.broadcast(_payload(comm), src=root, algorithm=algo),
    "scatter": lambda comm, root, algo: comm.scatter(
        [_payload(comm)[:16] * i for i in range(comm.size)] if comm.rank == root else None, src=root,
        algorithm=algo),
    "gather": lambda comm, root, algo: comm.gather(_payload(comm), dst=root, algorithm=algo),
    "reduce": lambda comm, root, algo: comm.reduce(_payload(comm), dst=root, algorithm=algo),
    "all_reduce": lambda comm, root, algo: comm.all_reduce(_payload(comm), algorithm=algo),
    "all_gather": lambda comm, root, algo: comm.all_gather(_payload(comm), algorithm=algo),
    "reduce_scatter": lambda comm, root, algo: comm.reduce_scatter(
        [_payload(comm)[:16] + i for i in range(comm.size)], algorithm=algo),
    "all_to_all": lambda comm, root, algo: comm.all_to_all(
        [_payload(comm)[:16] + i for i in range(comm.size)], algorithm=algo),
    "scan": lambda comm, root, algo: comm.scan(_payload(comm), algorithm=algo),
    "exscan": lambda comm, root, algo: comm.exscan(_payload(comm), algorithm=algo),
}

ROOTED = {"broadcast", "scatter", "gather", "reduce"}

UPPER_BOUNDS = {("all_to_all", "linear")}
"""Charged the upper end of their range (see all_to_all.py): never less than message level."""


async def _one_call(comm: sc.Comm, name: str, algorithm: str, root: int) -> None:
    await CALLS[name](comm, root, algorithm)


def test_every_collective_has_a_call_here() -> None:
    assert set(CALLS) == set(FAMILIES)


@pytest.mark.parametrize("world_size", [2, 4, 8])
@pytest.mark.parametrize(("name", "algorithm"), DECLARED, ids=[f"{n}-{a}" for n, a in DECLARED])
def test_analytic_time_equals_message_time_on_powers_of_two(name: str, algorithm: str,
                                                            world_size: int) -> None:
    roots = sorted({0, world_size // 2, world_size - 1}) if name in ROOTED else [0]
    for root in roots:
        args = (name, algorithm, root)
        message = sc.run(_one_call, world_size, args=args, latency=AB)
        analytic = sc.run(_one_call, world_size, args=args, latency=AB, fidelity="analytic")
        assert message.elapsed > 0
        if (name, algorithm) in UPPER_BOUNDS:
            assert analytic.elapsed >= message.elapsed, f"root {root}"
        else:
            assert analytic.elapsed == message.elapsed, f"root {root}"


@pytest.mark.parametrize("world_size", [3, 5, 6])
@pytest.mark.parametrize(("name", "algorithm"), [("all_reduce", "ring"), ("barrier", "dissemination")])
def test_chains_of_dependent_steps_are_exact_on_any_size(name: str, algorithm: str, world_size: int) -> None:
    message = sc.run(_one_call, world_size, args=(name, algorithm, 0), latency=AB)
    analytic = sc.run(_one_call, world_size, args=(name, algorithm, 0), latency=AB, fidelity="analytic")
    assert analytic.elapsed == message.elapsed > 0
