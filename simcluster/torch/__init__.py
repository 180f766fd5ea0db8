"""torch.distributed on virtual ranks: the backend ``"simcluster"`` and ``spawn()``.

``import simcluster.torch`` registers the torch.distributed backend
``"simcluster"``; ``simcluster.torch.spawn(fn, args=(), nprocs=N)`` runs
``fn(rank, *args)`` on N virtual ranks as ``torch.multiprocessing.spawn``
would, and inside them ``dist.init_process_group("simcluster")`` and the
whole torch.distributed API run on simcluster's engine: virtual time,
deterministic schedules, deadlock and mismatch reports.
"""

from __future__ import annotations

try:
    import torch as _torch
    import torch.distributed as _dist
except ImportError as exc:  # pragma: no cover - tested in a subprocess without torch
    raise ImportError(f"simcluster.torch needs torch ({exc}); install it with "
                      "pip install 'simcluster[torch]'") from exc

if not _dist.is_available():  # pragma: no cover - builds without distributed support
    raise ImportError(f"simcluster.torch needs torch.distributed, which this torch build "
                      f"({_torch.__version__}) lacks; pip install 'simcluster[torch]'")

import os as _os

from simcluster.engine import frames as _frames
from simcluster.torch._process_group import ProcessGroupSimcluster as ProcessGroupSimcluster
from simcluster.torch._session import register as _register
from simcluster.torch._spawn import spawn as spawn
from simcluster.torch._work import SimclusterWork as SimclusterWork

BACKEND = "simcluster"
"""The backend name to pass to ``torch.distributed.init_process_group``."""

_register()
_frames.skip(_os.path.dirname(_torch.__file__))  # reports name the user's line, not torch's

__all__ = ["BACKEND", "ProcessGroupSimcluster", "SimclusterWork", "spawn"]
