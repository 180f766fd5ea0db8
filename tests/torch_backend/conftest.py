"""Fixtures for the torch.distributed backend tests (skipped where torch is not installed)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest

from simcluster import _sync


def _mpi_ready() -> bool:
    try:
        mpi = importlib.import_module("simcluster.MPI")
    except ImportError:
        return False
    return hasattr(mpi, "_world")


@pytest.fixture(autouse=True, scope="session")
def _world_without_mpi() -> Iterator[None]:
    """Give synchronous ranks their world Comm while simcluster.MPI is not built yet.

    spawn ignores what a rank function gets first, so any stand-in does.
    """
    with pytest.MonkeyPatch.context() as patch:
        if not _mpi_ready():
            patch.setattr(_sync, "world", lambda comm: comm)
        yield
