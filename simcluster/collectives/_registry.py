"""Every collective algorithm, declared once, as an :class:`Algorithm` record.

A record holds everything simcluster needs to run one algorithm at either
fidelity:

- ``run``: the message-level coroutine, ``run(c, *args)``, in the family
  module (``all_reduce.ring``, ...);
- ``stages``: its cost under ``run(fidelity="analytic")``, the critical path as
  ``_cost`` stages (``_cost.all_reduce_ring``, ...);
- ``results``: every member's result at once under analytic fidelity, with
  operands combined in the algorithm's own order (``analytic.all_reduce(RING)``, ...);
- ``wraps``: true when the algorithm sends a payload that is not an array as
  the one-item list ``[obj]`` (``_reduction.flatten``), so that analytic
  fidelity counts the bytes such a message would;
- ``shaped``: true when the algorithm follows the nodes of the run's
  platform (``_nodes.layout``); where the members share no node it is
  another algorithm, whose ``stages`` and ``results`` it declares, and where
  they do it runs at message fidelity only.

Each family module lists its records in ``ALGORITHMS`` (``name -> Algorithm``,
built by :func:`declare`; exscan's are ``scan.EXSCAN_ALGORITHMS``). Everything
else looks an algorithm up (:func:`lookup`) and calls what its record
declares: ``Comm``'s collective methods (``_methods``) run ``run`` or its
analytic twin, ``analytic.py`` calls ``results`` and ``_cost.py`` charges
``stages``; none of them tests an algorithm's name.

To add an algorithm to a family, say ``all_reduce``:

1. write its coroutine in ``all_reduce.py``, with its cost in the docstring,
   keeping the package's rules (``__init__``): return the value, never write
   into the caller's arrays, work on any size and root;
2. write its stage list in ``_cost.py`` as ``all_reduce_<name>(p, args,
   nbytes, gamma)``: the critical path its docstring states;
3. pick its ``results`` in ``analytic.py``: the family's function
   (``analytic.gather``, ...), or for a reduction the family's factory called
   with the order the algorithm combines operands in (``BALANCED``,
   ``BINOMIAL``, ``LEFT``, ``RING``); write a new ``Order`` when none gives
   the same value bit for bit;
4. add one ``Algorithm(...)`` to the family's ``declare(...)``, with
   ``wraps=True`` if it sends objects as ``[obj]``;
5. list it in docs/collectives.md (the algorithms table and their costs).

``algorithm="<name>"`` and ``run(algorithms=...)`` accept it from then on;
``tests/test_algorithm_registry.py`` and ``tests/test_analytic.py`` run it at
both fidelities and compare results and virtual times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from . import declared


Stage = tuple[int, int, float, float]
"""``(repeat, fan, nbytes, reduced)``: one stage of a critical path (see ``_cost``)."""


class Deliver(Protocol):
    """How analytic results reach a member (``analytic.Deliver``): what a message would hand over."""

    def sent(self, value: Any) -> Any: ...

    def result(self, value: Any, own: Any) -> Any: ...

Stages = Callable[[int, "list[tuple[Any, ...]]", "list[int]", bool], "list[Stage]"]
"""``stages(p, args, nbytes, gamma)``: the critical path (``_cost``) for every member's arguments and
message bytes, in rank order; ``gamma`` is true when reductions cost time under the run's model."""

Results = Callable[["list[tuple[Any, ...]]", Deliver], "list[Any]"]
"""``results(args, deliver)``: every member's result, in rank order, from every member's arguments."""


@dataclass(frozen=True, slots=True, eq=False)
class Algorithm:
    """One collective algorithm: how it runs, what it costs and what it returns (see the module docstring).

    Records compare (and hash) by identity: there is one per algorithm.
    """

    collective: str
    name: str
    run: Callable[..., Awaitable[Any]]
    stages: Stages
    results: Results
    wraps: bool = False
    shaped: bool = False  # runs by the nodes of the run's platform; analytic only where there are none


def declare(*algorithms: Algorithm) -> Mapping[str, Algorithm]:
    """Return a family's ``ALGORITHMS``: its records by name (read-only).

    Raises:
        ValueError: two records share a name, or belong to different collectives.
    """
    table: dict[str, Algorithm] = {}
    for algorithm in algorithms:
        if algorithm.name in table:
            raise ValueError(f"{algorithm.collective}: algorithm {algorithm.name!r} is declared twice")
        if algorithm.collective != algorithms[0].collective:
            raise ValueError(f"declare(): {algorithm.collective}.{algorithm.name} is declared among "
                             f"{algorithms[0].collective}'s algorithms")
        table[algorithm.name] = algorithm
    return MappingProxyType(table)


def lookup(collective: str, name: str) -> Algorithm:
    """Return the record of algorithm ``name`` of ``collective`` (KeyError when there is none)."""
    return declared(collective)[name]
