"""Run a module of torch cases under gloo (real processes) and under simcluster; compare every rank.

A *cases module* defines ``CASES``: a dict of name -> ``case(rank, size)``,
each called on every rank after ``init_process_group`` (gloo or
``"simcluster"``), written as a torch user writes it. A case returns plain
values (``show`` turns tensors into ``(dtype, lists)``); a case that raises
gives ``("raised", type name, message)`` instead, so a run never stops at one
failing case and errors compare too.

``gloo_values(module, size)`` runs the cases on ``size`` gloo processes
(``torch.multiprocessing.spawn``, rendezvous on 127.0.0.1) and
``simcluster_values(module, size)`` on ``size`` simcluster ranks; both return
one dict per rank. ``assert_same(sim, gloo)`` compares them: integers,
strings and shapes exactly, floats to a relative 1e-5 (a reduction may add
in another order than gloo's ring; that is the only freedom allowed).
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import socket
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RTOL = 1e-5
ATOL = 1e-6


def show(value: Any) -> Any:
    """Return ``value`` with tensors (and DTensors) as ``(dtype name, shape, nested lists)``."""
    if isinstance(value, torch.Tensor):
        if hasattr(value, "full_tensor"):  # a DTensor: compare what it stands for
            value = value.full_tensor()
        value = value.detach()
        return (str(value.dtype), list(value.shape), value.float().tolist()
                if value.dtype in (torch.bfloat16, torch.float16) else value.tolist())
    if isinstance(value, (list, tuple)):
        return [show(v) for v in value]
    if isinstance(value, dict):
        return {str(k): show(v) for k, v in value.items()}
    return value


def run_cases(module: Any, rank: int, size: int) -> dict[str, Any]:
    """Run every case of ``module`` on this rank; a case that raises gives ``("raised", ...)``."""
    out: dict[str, Any] = {}
    for name, case in module.CASES.items():
        try:
            out[name] = show(case(rank, size))
        except Exception as exc:  # noqa: BLE001 - the error is the case's value
            out[name] = ("raised", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def gloo_rank(rank: int, module_name: str, size: int, port: int, out_dir: str) -> None:
    """One gloo process: rendezvous, run the cases, pickle this rank's values."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    module = importlib.import_module(module_name)
    dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timedelta(seconds=120))
    try:
        values = run_cases(module, rank, size)
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.pickle").write_bytes(pickle.dumps(values))


def gloo_values(module_name: str, size: int) -> list[dict[str, Any]]:
    """Every case's values on each of ``size`` gloo processes."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(gloo_rank, args=(module_name, size, _free_port(), out), nprocs=size)
        return [pickle.loads(Path(out, f"rank{r}.pickle").read_bytes()) for r in range(size)]


def _simcluster_rank(rank: int, module_name: str, size: int) -> dict[str, Any]:
    module = importlib.import_module(module_name)
    dist.init_process_group("simcluster", rank=rank, world_size=size)
    try:
        return run_cases(module, rank, size)
    finally:
        dist.destroy_process_group()


class _AsGloo:
    """What ``torchrun._BackendMap`` asks of its sessions: no note, and the spawn's rank state."""

    def note(self, line: str) -> None:
        pass

    def current(self) -> Any:
        from simcluster.torch import _session

        session = _session.active()
        return None if session is None else session.current()


def spawn_as_gloo(fn: Any, args: tuple[Any, ...], nprocs: int, **keywords: Any) -> Any:
    """``simcluster.torch.spawn`` where the program's ``init_process_group("gloo")`` is simcluster's.

    As under ``simcluster torchrun``: the group reports ``"gloo"`` and its
    profiler spans are named as gloo's.
    """
    import simcluster.torch as sctorch
    from simcluster import torchrun

    with torchrun._BackendMap(_AsGloo(), _AsGloo()):  # type: ignore[arg-type]
        return sctorch.spawn(fn, args=args, nprocs=nprocs, **keywords)


def _as_gloo_rank(rank: int, module_name: str, size: int) -> dict[str, Any]:
    module = importlib.import_module(module_name)
    dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timedelta(seconds=120))
    try:
        return run_cases(module, rank, size)
    finally:
        dist.destroy_process_group()


def gloo_named_values(module_name: str, size: int, **run_keywords: Any) -> list[dict[str, Any]]:
    """Every case's values on ``size`` simcluster ranks whose program asks for gloo (``spawn_as_gloo``)."""
    return list(spawn_as_gloo(_as_gloo_rank, (module_name, size), size, **run_keywords))


def simcluster_values(module_name: str, size: int, **run_keywords: Any) -> list[dict[str, Any]]:
    """Every case's values on each of ``size`` simcluster ranks (``simcluster.torch.spawn``)."""
    import simcluster.torch as sctorch

    return list(sctorch.spawn(_simcluster_rank, args=(module_name, size), nprocs=size,
                              **run_keywords))


def close(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal, floats to a relative ``RTOL``."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return bool(a == b)


def assert_same(got: Any, want: Any, what: str = "") -> None:
    """Assert ``got`` equals ``want`` (floats to ``RTOL``), showing both when not."""
    assert close(got, want), f"{what}: simcluster gave\n{got!r}\nwhere gloo gave\n{want!r}"
