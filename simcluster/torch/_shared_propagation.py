"""DTensor's sharding propagation, computed once per spawn and shared by its ranks.

DTensor decides each op's output placements (and whether inputs must be
redistributed) by sharding propagation, the Python half of every DTensor op
the first time a process sees it. torch caches the result per thread, keyed
on the ``OpSchema`` (the op, its arguments' ``DTensorSpec`` and the other
arguments): the C++ dispatch fast path in a cache of its own, the Python
path in ``torch.distributed.tensor._sharding_prop.LocalLRUCache``, a
``threading.local``. A real cluster pays that once per process, in
parallel; here the ranks are threads of one process
(``engine.sync.ThreadRank``), so each of N ranks would pay it again, one
after another: most of a first FSDP2 + TP step (docs/benchmarks.md).

The key holds nothing per rank: a ``DeviceMesh`` compares by its rank map,
layout, device type and dimension names (and a thread id that only torch's
``"threaded"`` backend sets), so every rank's ``mesh["tp"]`` is equal, and
propagation reads only those, the placements and the global shapes. The
value does hold per-rank objects: the ``DTensorSpec`` it returns name the
mesh object of the rank that computed it, whose ``get_coordinate()``, groups
and rank are that rank's. ``SharedPropagation`` keeps torch's per-thread
caches and, on their miss, looks the schema up in one table of the spawn; a
hit is rebound to the caller's meshes (each spec copied with the caller's
equal mesh) before the caller sees it.

Rule 1: no rank ever holds another rank's mesh: a shared result whose meshes
cannot all be matched with meshes of the caller's own schema is not used;
the caller propagates for itself, as torch would.
Rule 2: the table lives as long as the spawn: ``install`` puts it under
torch's per-thread caches and ``restore`` takes it out, so nothing outlives
the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

_MISSING = object()


class SharedPropagation:
    """A drop-in for ``ShardingPropagator.propagate_op_sharding_non_cached`` that ranks share.

    torch calls it on a miss of its per-thread caches (the C++ one of the
    dispatch fast path, the Python ``LocalLRUCache``), so once per rank and
    schema. ``hits`` counts results taken from another rank, ``misses``
    results computed (the first rank to meet a schema, a result Rule 1
    refused, a schema that cannot be hashed while tracing).
    """

    def __init__(self, propagator: Any) -> None:
        self.propagator = propagator
        self.compute: Callable[[Any], Any] = propagator.propagate_op_sharding_non_cached
        self.torch_cache = propagator.propagate_op_sharding  # restored at the end, as is
        self.own_compute = vars(propagator).get("propagate_op_sharding_non_cached")  # and this
        self.shared: dict[Any, tuple[Any, Any]] = {}  # schema -> (the schema that made it, result)
        self.hits = 0
        self.misses = 0
        self._rebinder = _Rebinder()

    def __call__(self, op_schema: Any) -> Any:
        try:
            entry = self.shared.get(op_schema)
        except TypeError:  # symbolic shapes under tracing: torch does not cache these either
            self.misses += 1
            return self.compute(op_schema)
        if entry is not None:
            key, result = entry
            meshes: dict[int, Any] = {}
            self._rebinder.pair(key, op_schema, meshes)
            rebound = self._rebinder.rebind(result, meshes)
            if rebound is not _MISSING:
                self.hits += 1
                return rebound
        result = self.compute(op_schema)
        self.misses += 1
        if entry is None:
            self.shared[op_schema] = (op_schema, result)
        return result


def install(dispatcher: Any) -> SharedPropagation | None:
    """Share ``dispatcher``'s sharding propagation among the ranks; None where torch's differs."""
    propagator: Any = getattr(dispatcher, "sharding_propagator", None)
    torch_cache: Any = getattr(propagator, "propagate_op_sharding", None)
    if (not callable(getattr(propagator, "propagate_op_sharding_non_cached", None))
            or type(torch_cache).__name__ != "LocalLRUCache"):
        return None  # a torch whose propagation this module was not written against
    sharing = SharedPropagation(propagator)
    # the C++ fast path calls the attribute on a miss; the Python path its per-thread cache
    propagator.propagate_op_sharding_non_cached = sharing
    propagator.propagate_op_sharding = type(torch_cache)(sharing)
    return sharing


def restore(sharing: SharedPropagation) -> None:
    """Put torch's own propagation back (Rule 2)."""
    propagator = sharing.propagator
    if vars(propagator).get("propagate_op_sharding_non_cached") is sharing:
        if sharing.own_compute is None:
            del propagator.propagate_op_sharding_non_cached  # the method again
        else:
            propagator.propagate_op_sharding_non_cached = sharing.own_compute
    propagator.propagate_op_sharding = sharing.torch_cache
    sharing.shared.clear()


# ---- rebinding a result to the caller's meshes ----


class _Rebinder:
    """Pairs meshes of equal schemas and copies results onto the caller's (DTensor's types, lazily)."""

    def __init__(self) -> None:  # DTensor is imported by now: these imports cost nothing
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor._dtensor_spec import DTensorSpec
        from torch.distributed.tensor._op_schema import OpSchema, OutputSharding

        self.mesh_type, self.spec_type = DeviceMesh, DTensorSpec
        self.schema_type, self.sharding_type = OpSchema, OutputSharding

    def pair(self, key: Any, mine: Any, meshes: dict[int, Any]) -> None:
        """Map each mesh of ``key`` (by id) to the mesh at the same place in ``mine`` (an equal schema)."""
        if isinstance(key, self.spec_type):
            if isinstance(mine, self.spec_type) and mine.mesh == key.mesh:
                meshes[id(key.mesh)] = mine.mesh
        elif isinstance(key, self.schema_type):
            if isinstance(mine, self.schema_type):
                self.pair(key.args_schema, mine.args_schema, meshes)
                self.pair(key.kwargs_schema, mine.kwargs_schema, meshes)
        elif type(key) in (tuple, list):
            if type(mine) is type(key) and len(mine) == len(key):
                for k, m in zip(key, mine):
                    self.pair(k, m, meshes)
        elif type(key) is dict and type(mine) is dict:
            for name, k in key.items():
                if name in mine:
                    self.pair(k, mine[name], meshes)

    def rebind(self, value: Any, meshes: dict[int, Any]) -> Any:
        """A copy of ``value`` naming the caller's meshes; _MISSING where one has no match (Rule 1)."""
        if isinstance(value, self.spec_type):
            return self._spec(value, meshes)
        if isinstance(value, self.sharding_type):
            return self._fields(value, ("output_spec", "redistribute_schema"), meshes)
        if isinstance(value, self.schema_type):
            schema = self._fields(value, ("args_schema", "kwargs_schema"), meshes)
            if schema is not _MISSING and schema is not value:
                schema._recompute_comparison_key()
            return schema
        if isinstance(value, self.mesh_type):
            return meshes.get(id(value), _MISSING)
        if type(value) in (tuple, list):
            items = [self.rebind(item, meshes) for item in value]
            if any(item is _MISSING for item in items):
                return _MISSING
            return type(value)(items)
        if type(value) is dict:
            return self._dict(value, meshes)
        return value  # placements, TensorMeta, shapes, scalars: the same on every rank

    def _spec(self, value: Any, meshes: dict[int, Any]) -> Any:
        mesh = meshes.get(id(value.mesh))
        if mesh is None:
            return _MISSING
        if mesh is value.mesh:
            return value
        spec = self.spec_type.__new__(self.spec_type)  # a copy: __post_init__ would re-derive
        spec.__dict__.update(value.__dict__)
        spec.mesh = mesh  # DTensorSpec.__setattr__ drops the hash
        return spec

    def _dict(self, value: dict[Any, Any], meshes: dict[int, Any]) -> Any:
        out = {}
        for name, item in value.items():
            got = self.rebind(item, meshes)
            if got is _MISSING:
                return _MISSING
            out[name] = got
        return out

    def _fields(self, value: Any, names: tuple[str, ...], meshes: dict[int, Any]) -> Any:
        """``value`` with the named dataclass fields rebound (a fresh object: no cached property kept)."""
        changes = {}
        for name in names:
            got = self.rebind(getattr(value, name), meshes)
            if got is _MISSING:
                return _MISSING
            changes[name] = got
        return dataclasses.replace(value, **changes)
