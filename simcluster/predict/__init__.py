"""Predict GPU time: a device description and an op time model (issue 44, item 2).

``simcluster.predict`` holds the ``Device`` dataclass and the presets and does not import torch;
``simcluster.predict.compute`` times aten ops and holds the ``GpuClock`` dispatch mode (needs torch);
``simcluster.predict.memory`` counts live tensor bytes per rank, ``MemoryTracker`` (item 5, needs torch).
See docs/predict.md.
"""

from __future__ import annotations

from .device import DTYPES as DTYPES
from .device import Curve as Curve
from .device import Device as Device
from .device import Sourced as Sourced
from .presets import A100_SXM_80GB as A100_SXM_80GB
from .presets import DEVICES as DEVICES
from .presets import H100_HBM2E_500W as H100_HBM2E_500W
from .presets import H100_SXM as H100_SXM

__all__ = ["A100_SXM_80GB", "DEVICES", "DTYPES", "Curve", "Device", "H100_HBM2E_500W", "H100_SXM", "Sourced"]
