"""Shared fixtures: the transports every conformance test runs on, and world sizes.

The "mpi" column runs only inside an MPI job of several processes, where
every process runs the same tests (``mpiexec -n 2 python -m pytest
tests/conformance``, which ``tests/test_transport_mpi.py`` starts): there
only that column is collected; everywhere else it is left out.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from simcluster import _build

TRANSPORTS = [  # a third-party transport adds one line here
    pytest.param("memory", id="memory"),
    pytest.param("shm", id="shm", marks=pytest.mark.slow),
    pytest.param("tcp", id="tcp", marks=pytest.mark.slow),
    pytest.param("mpi", id="mpi"),
]

MPI_JOB_SIZE = int(os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 1)
"""The processes of the MPI job running these tests (MPICH sets PMI_SIZE, Open MPI its own); 1 outside one."""

if not _build.active.compiled:  # the interpreted build said so once; the tests' children run it too
    os.environ["SIMCLUSTER_PURE_PYTHON"] = "1"  # and say nothing (their stderr is compared)

WORLD_SIZES = [1, 2, 3, 4, 7, 8]
"""Always include 1 and a non-power of two."""


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """The transport name a conformance test runs on."""
    return str(request.param)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mpi4py-suite", default=None, metavar="PATH",
                     help="mpi4py 4.1.2's test/ folder: run it under simcluster mpirun "
                          "(tests/test_mpi4py_suite.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the "mpi" column inside an MPI job of several processes only, and only it there."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_mpi = params.get("transport") == "mpi"
        keep = on_mpi if MPI_JOB_SIZE > 1 else not on_mpi
        (kept if keep else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


if MPI_JOB_SIZE > 1:
    @pytest.fixture
    def tmp_path(request: pytest.FixtureRequest) -> Path:
        """One directory per test that every process of the MPI job shares (ranks write files there).

        Under ``$SIMCLUSTER_MPI_TMP``, which the test starting the job sets;
        pytest's own ``tmp_path`` differs per process.
        """
        base = Path(os.environ["SIMCLUSTER_MPI_TMP"])
        path = base / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-120:]
        path.mkdir(parents=True, exist_ok=True)
        return path
