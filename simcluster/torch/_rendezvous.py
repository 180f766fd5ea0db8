"""Rendezvous without sockets: an in-process store and the handlers that hand it out.

``dist.init_process_group`` normally rendezvous through ``env://`` (or
``tcp://``, ``file://``), which builds a TCPStore on ``MASTER_ADDR:MASTER_PORT``.
While ``simcluster.torch.spawn`` runs, the handlers for those schemes are
replaced by ones that give every rank of the run the same ``RunStore`` and
check the rank and world size the rank asked for. Calls from outside the
run's ranks go to torch's own handlers.

Rule 1: the store never blocks. Only one rank runs at a time, and a store
wait happens inside C++, where the rank cannot hand the baton back; so a read
of a key nobody has set is an error that says so (the ``"simcluster"``
backend never needs one; gloo and nccl do, and cannot run inside spawn).
Rule 2: torch's handler table is patched only between ``install`` and
``restore``, and restored exactly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

import torch.distributed as dist

from simcluster.engine.assembly import current_task
from simcluster.errors import SimclusterError

_torch_rendezvous = importlib.import_module("torch.distributed.rendezvous")  # the module, not
# the function torch.distributed re-exports under the same name

SCHEMES = ("env", "tcp", "file")
_FIX = ("inside simcluster.torch.spawn use dist.init_process_group('simcluster'): gloo and nccl "
        "connect through the store and cannot run on virtual ranks")


class RunStore(dist.Store):  # type: ignore[misc]  # torch is optional: mypy does not follow it
    """A key-value store shared by the ranks of one run, in memory, that never blocks."""

    def __init__(self) -> None:
        super().__init__()
        self._data: dict[str, bytes] = {}

    @staticmethod
    def _bytes(value: Any) -> bytes:
        if isinstance(value, str):
            return value.encode()
        return bytes(value)

    def _missing(self, op: str, keys: list[str]) -> SimclusterError:
        shown = ", ".join(repr(k) for k in keys)
        task = current_task()
        return SimclusterError(None if task is None else task.rank, op,
                               f"key {shown} is not set, and simcluster's in-process store cannot "
                               "wait for another rank to set it (the wait would block inside C++)",
                               _FIX)

    def set(self, key: str, value: Any) -> None:
        self._data[key] = self._bytes(value)

    def get(self, key: str) -> bytes:
        try:
            return self._data[key]
        except KeyError:
            raise self._missing("store.get()", [key]) from None

    def add(self, key: str, amount: int) -> int:
        value = int(self._data.get(key, b"0")) + amount
        self._data[key] = str(value).encode()
        return value

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        current = self._data.get(key)
        want, new = self._bytes(expected), self._bytes(desired)
        if (current is None and not want) or current == want:
            self._data[key] = new
            return new
        return want if current is None else current

    def append(self, key: str, value: Any) -> None:
        self._data[key] = self._data.get(key, b"") + self._bytes(value)

    def check(self, keys: list[str]) -> bool:
        return all(k in self._data for k in keys)

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        missing = [k for k in keys if k not in self._data]
        if missing:
            raise self._missing("store.wait()", missing)

    def delete_key(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def num_keys(self) -> int:
        return len(self._data)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [self.get(k) for k in keys]

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        for k, v in zip(keys, values):
            self.set(k, v)

    def __repr__(self) -> str:
        return f"<RunStore {len(self._data)} keys>"


Handler = Callable[..., Iterator[tuple[Any, int, int]]]
Lookup = Callable[[], "tuple[int, int, RunStore] | None"]


def _handler(original: Handler, lookup: Lookup) -> Handler:
    """Wrap torch's handler: inside a spawned rank, rendezvous in memory; else call ``original``."""
    def handler(url: str, **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
        found = lookup()
        if found is None:
            return original(url, **kwargs)
        rank, world_size, store = found
        return _in_memory(url, rank, world_size, store)
    return handler


def _in_memory(url: str, rank: int, world_size: int, store: RunStore
               ) -> Iterator[tuple[Any, int, int]]:
    query = dict(pair.split("=", 1) for pair in urlparse(url).query.split("&") if "=" in pair)
    asked_rank = int(query.get("rank", rank))
    asked_size = int(query.get("world_size", world_size))
    if asked_rank not in (rank, -1):
        raise ValueError(f"rank {rank}: init_process_group(rank={asked_rank}): this function runs "
                         f"as rank {rank} of simcluster.torch.spawn(nprocs={world_size}); pass "
                         "the rank spawn gave fn (its first argument), or leave rank out")
    if asked_size not in (world_size, -1):
        raise ValueError(f"rank {rank}: init_process_group(world_size={asked_size}): "
                         f"simcluster.torch.spawn started {world_size} ranks; pass "
                         f"world_size={world_size} (spawn's nprocs), or leave it out")
    yield (store, rank, world_size)
    raise RuntimeError("Unable to perform re-rendezvous using simcluster's in-memory rendezvous")


class Handlers:
    """torch's rendezvous handlers for ``SCHEMES``, replaced while a spawn runs."""

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self._saved: dict[str, Handler] = {}

    def install(self) -> None:
        table = _torch_rendezvous._rendezvous_handlers
        for scheme in SCHEMES:
            original = table[scheme]
            self._saved[scheme] = original
            table[scheme] = _handler(original, self._lookup)

    def restore(self) -> None:
        table = _torch_rendezvous._rendezvous_handlers
        for scheme, original in self._saved.items():
            table[scheme] = original
        self._saved.clear()
