"""Each rank's own ``os.environ`` under ``simcluster mpirun``, with the variables MPICH's mpiexec sets.

A rank starts with the launcher's environment plus what Hydra (MPICH's
``mpiexec``) gives each process: ``PMI_RANK``, ``PMI_SIZE``,
``MPI_LOCALRANKID`` and ``MPI_LOCALNRANKS`` (the rank and rank count on its
node) and ``PMI_HOSTNAME``; ``PMI_FD`` is left out, as no PMI server
listens. A rank that sets or deletes a variable changes only its own
environment, as a process would.

Rule: switching is cheap where ranks differ only in their own variables.
Each rank keeps the variables it has unlike the launcher's (``own``: a
value, or None for deleted); a switch writes only the variables whose
values differ between the two ranks (worked out once per pair of ranks, and
written already encoded, as ``os.environ`` would), and a rank's ``own`` is
worked out again only when the environment changed while it ran (a C-level
copy and compare of ``os.environ``'s dict tells; then the switch reads the
environment back instead). The launcher's environment is written back when
the run ends.
"""

from __future__ import annotations

import os
from typing import Any


def _snapshot() -> dict[Any, Any]:
    data = getattr(os.environ, "_data", None)  # CPython: copied and compared in C
    return data.copy() if type(data) is dict else dict(os.environ)


class RankEnvironments:
    """The environments of one run's ranks, swapped into ``os.environ`` as each runs."""

    def __init__(self) -> None:
        self.base: dict[str, str] = {}
        self.owner: dict[str, str | None] | None = None  # the ``own`` of the rank whose env is in
        self.seen: dict[Any, Any] = {}
        # (id(old own), id(new own)) -> (old, new, what a switch from one to the other writes);
        # forgotten whenever a rank changed its variables
        self.plans: dict[tuple[int, int], tuple[Any, Any, list[tuple[str, str | None, bytes, bytes]]]] = {}

    def install(self) -> None:
        self.base = dict(os.environ)

    def uninstall(self) -> None:
        """The run ended: the launcher's environment, whatever the last rank left."""
        if self.owner is not None:
            self.owner = None
            self._write(dict.fromkeys(os.environ.keys() | self.base.keys()), {})

    def enter(self, own: dict[str, str | None]) -> None:
        """A rank with variables ``own`` (unlike the launcher's) resumes."""
        if self.owner is not own:
            if self.owner is not None and _snapshot() == self.seen:
                self._switch(self.owner, own)  # the environment is the launcher's plus owner's own
            else:
                self._write(self.owner or {}, own)
            self.owner = own
        self.seen = _snapshot()

    def leave(self, own: dict[str, str | None]) -> None:
        """The rank stops: keep what it changed in ``own``."""
        now = _snapshot()
        if now == self.seen:
            return
        self.seen = now
        self.plans.clear()
        env, base = dict(os.environ), self.base
        own.clear()
        own.update({k: v for k, v in env.items() if base.get(k) != v})
        own.update({k: None for k in base if k not in env})

    def _write(self, old: dict[str, str | None], new: dict[str, str | None]) -> None:
        env, base = os.environ, self.base
        for key in old.keys() | new.keys():
            value = new[key] if key in new else base.get(key)
            if value is None:
                env.pop(key, None)
            elif env.get(key) != value:
                env[key] = value

    def _switch(self, old: dict[str, str | None], new: dict[str, str | None]) -> None:
        """``_write`` where the environment is known to be the launcher's plus ``old``: only the
        variables whose values differ are written, and nothing is read back (``os.environ``'s
        reads encode every key)."""
        plan = self.plans.get((id(old), id(new)))
        if plan is None or plan[0] is not old or plan[1] is not new:
            plan = self.plans[id(old), id(new)] = (old, new, self._plan(old, new))
        env, data = os.environ, getattr(os.environ, "_data", None)
        fast = type(data) is dict and os.name == "posix"
        for key, value, raw_key, raw_value in plan[2]:
            if value is None:
                env.pop(key, None)
            elif fast:  # os.environ[key] = value, its encoding done once
                os.putenv(raw_key, raw_value)
                data[raw_key] = raw_value  # type: ignore[index]
            else:
                env[key] = value

    def _plan(self, old: dict[str, str | None], new: dict[str, str | None]
              ) -> list[tuple[str, str | None, bytes, bytes]]:
        """The variables that differ from ``old`` to ``new``: (name, value, both as os.environ stores them)."""
        base, plan = self.base, []
        for key in sorted(old.keys() | new.keys()):
            value = new[key] if key in new else base.get(key)
            if value != (old[key] if key in old else base.get(key)):
                plan.append((key, value, os.fsencode(key), os.fsencode(value or "")))
        return plan



def mpich_variables(rank: int, size: int, local: int, on_node: int, host: str) -> dict[str, str | None]:
    """What MPICH's mpiexec (Hydra) sets for ``rank`` of ``size``, ``local``-th of ``on_node`` on host ``host``."""
    return {"PMI_RANK": str(rank), "PMI_SIZE": str(size), "MPI_LOCALRANKID": str(local),
            "MPI_LOCALNRANKS": str(on_node), "PMI_HOSTNAME": host}


def node_places(nodes: list[int]) -> tuple[list[int], list[int]]:
    """Each rank's place on its node and its node's rank count, from each rank's node."""
    seen: dict[int, int] = {}
    local = []
    for node in nodes:
        local.append(seen.get(node, 0))
        seen[node] = local[-1] + 1
    return local, [seen[node] for node in nodes]
