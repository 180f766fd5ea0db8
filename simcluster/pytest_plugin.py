"""pytest plugin (entry point ``simcluster``): the ``world_size`` and ``seed`` fixtures.

Loaded automatically once simcluster is installed. Override either fixture in
a ``conftest.py`` or with ``@pytest.mark.parametrize("world_size", [1, 3, 4])``.
Kept tiny on purpose: it imports nothing from simcluster, so loading it costs
nothing in test runs that do not use simcluster.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def world_size() -> int:
    """Number of ranks for a simcluster test (4 unless overridden)."""
    return 4


@pytest.fixture
def seed() -> int:
    """Seed for a simcluster run (0 unless overridden)."""
    return 0
