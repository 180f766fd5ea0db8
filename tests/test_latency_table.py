"""The "Typical values for real networks" table in docs/latency.md says what it means.

Each row gives a latency, a bandwidth, a Python expression and a ``--latency``
spec; the spec must parse to the model the expression builds, and that model
must have the row's latency and bandwidth. The ``Hierarchical`` example below
the table is checked the same way, Python against command line, and its
printed time against the comment beside it.
"""

from __future__ import annotations

import contextlib
import io
import math
import random
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

import simcluster as sc
from simcluster.latency import LatencyModel, parse

DOC = Path(__file__).resolve().parent.parent / "docs" / "latency.md"
TEXT = DOC.read_text(encoding="utf-8")

MIB = 2**20
_CODE = re.compile(r"`([^`]+)`")


def _between(begin: str, end: str) -> str:
    start = TEXT.index(begin) + len(begin)
    return TEXT[start:TEXT.index(end, start)]


@dataclass(frozen=True)
class Row:
    network: str
    alpha: float          # seconds, as the alpha cell states it
    bandwidth: float      # bytes per second, as the bandwidth cell states it
    beta: float           # seconds per byte, as the bandwidth cell states it (rounded)
    python: str
    cli: str


def _code(cell: str) -> str:
    found: list[str] = _CODE.findall(cell)
    assert len(found) == 1, f"expected one `code` span in {cell!r}"
    return found[0]


def _rows() -> list[Row]:
    lines = [line.strip() for line in
             _between("<!-- typical-values-table: begin -->",
                      "<!-- typical-values-table: end -->").strip().splitlines()]
    header, rule, *body = lines
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "network", "alpha", "bandwidth, beta", "Python", "`--latency`", "sources"]
    assert set(rule) <= set("|-")
    rows = []
    for line in body:
        network, alpha, bandwidth, python, cli, sources = (
            c.strip() for c in line.strip("|").split("|"))
        rate = re.match(r"([0-9.]+) GB/s: beta `([0-9.e+-]+)` s/byte$", bandwidth)
        assert rate, f"{network}: cannot read the bandwidth cell {bandwidth!r}"
        assert re.search(r"\[\d+\]", sources), f"{network}: no source"
        rows.append(Row(network, float(_code(alpha)), float(rate[1]) * 1e9, float(rate[2]),
                        _code(python), _code(cli)))
    return rows


ROWS = _rows()


def _cost(model: LatencyModel, nbytes: int) -> float:
    """When an ``nbytes`` message posted at time 0 arrives on an idle two-rank network."""
    return model.bind(2, random.Random(0)).transfer(0, 1, nbytes, 0.0)[1]


def test_the_table_covers_the_networks_it_promises() -> None:
    names = " ".join(row.network for row in ROWS)
    for network in ("shared memory", "NVLink", "InfiniBand HDR", "InfiniBand NDR",
                    "10 Gb Ethernet", "25 Gb Ethernet", "100 Gb Ethernet"):
        assert network in names


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.network)
def test_the_cli_form_builds_the_python_form(row: Row) -> None:
    from_cli = parse(row.cli)
    from_python = eval(row.python, {"sc": sc})  # noqa: S307 - the doc's own expression
    assert from_cli == from_python
    assert repr(from_cli) == repr(from_python)
    assert _cost(from_cli, MIB) == _cost(from_python, MIB)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.network)
def test_the_model_has_the_latency_and_bandwidth_the_row_states(row: Row) -> None:
    model = parse(row.cli)
    assert isinstance(model, sc.latency.AlphaBeta)
    assert model.alpha == row.alpha
    assert math.isclose(1 / model.beta, row.bandwidth, rel_tol=1e-12)
    assert math.isclose(model.beta, row.beta, rel_tol=5e-3)  # the cell rounds beta
    assert math.isclose(_cost(model, MIB), row.alpha + MIB / row.bandwidth, rel_tol=1e-12)


def test_the_hierarchical_example_matches_its_command_line() -> None:
    section = TEXT[TEXT.index("### Combining them"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    block = block[:block.index("```")]
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(block, namespace)  # noqa: S102 - the doc's own example
    cluster = namespace["cluster"]
    assert isinstance(cluster, sc.latency.Hierarchical)

    command = _between("<!-- typical-values-cli: begin -->", "<!-- typical-values-cli: end -->")
    argv = shlex.split(command.replace("```", ""))
    spec = argv[argv.index("--latency") + 1]
    assert parse(spec) == cluster
    assert repr(parse(spec)) == repr(cluster)
    assert argv[argv.index("-n") + 1] == "16"

    # the example builds its two halves from rows of the table
    specs = {row.cli for row in ROWS}
    assert {f"alphabeta:{part.split(':', 1)[1]}" for part in spec.split(";")[1:]} <= specs

    # and prints what its comment says
    printed = out.getvalue().strip()
    comment = re.search(r'print\(.*\)\s+#\s*([0-9.]+ us):', block)
    assert comment and printed == comment[1]
