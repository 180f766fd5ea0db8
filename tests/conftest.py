"""Shared fixtures: the transports every conformance test runs on, and world sizes."""

from __future__ import annotations

import pytest

TRANSPORTS = [  # a third-party transport adds one line here
    pytest.param("memory", id="memory"),
    pytest.param("shm", id="shm", marks=pytest.mark.slow),
    pytest.param("tcp", id="tcp", marks=pytest.mark.slow),
]

WORLD_SIZES = [1, 2, 3, 4, 7, 8]
"""Always include 1 and a non-power of two."""


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """The transport name a conformance test runs on."""
    return str(request.param)
