"""One run's settings, handed to the engine whole when it is made.

``_config.build_world`` makes one ``EngineSettings`` from the checked
``RunConfig`` and passes it to ``Engine`` (or ``HostedEngine``); each layer
reads its own fields at construction and nothing is assigned to the engine
afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..faults import FaultPlan
    from ..latency import LatencyModel
    from .sync import Compute

__all__ = ["EngineSettings"]


@dataclass(frozen=True)
class EngineSettings:
    """What ``run``'s keywords set in the engine (docs/run.md names each keyword)."""

    seed: int = 0
    eager_limit: int = 65536  # bytes: larger messages go by rendezvous
    strict: bool = True  # checks="strict": verify buffers, report leaks
    timeout: float | None = None  # wall seconds
    model: LatencyModel | None = None  # what the ports were bound from
    schedule: Any = "batch"  # "batch", "shuffle", choices to replay, or explore's chooser
    algorithms: dict[str, str] = field(default_factory=dict)  # collective -> algorithm
    compute: Compute | None = None  # compute="wall" / "replay:FILE", charged by synchronous ranks
    poll_cost: float = 1e-6  # virtual seconds a synchronous rank's fruitless poll costs
    fidelity: str = "message"  # or "analytic": collectives resolve in one step
    faults: FaultPlan | None = None  # run(faults=...): crashes (engine.failures), slow ranks
    # serializer="pickle": what msgpack cannot carry is pickled (wire.EXT_PICKLE)
    dumps: Callable[[object], bytes] | None = None
    loads: Callable[[bytes], object] | None = None
