"""Pausing Python's cyclic garbage collector while a world runs.

A large world is millions of live objects (frames, requests, queues); each
collection while it runs walks all of them, which made big runs grow worse
than linearly. So the collector is paused while a world is built and run.

Re-enabling it is not free either: every object made during the pause
still counts as young, so the first allocation after the pause walked the
whole world (1.7 s after a 2^20-rank barrier). ``paused`` hands the
survivors to the oldest generation instead, without a walk
(``gc.freeze`` then ``gc.unfreeze``); the next full collection looks at
them as it would at any long-lived object.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic collector for the block, unless it is already paused."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():  # never unfreeze what the user froze
            gc.freeze()
            gc.unfreeze()
        gc.enable()
