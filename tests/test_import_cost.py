"""``import simcluster`` loads the core only: no MPI facade, no socket transports, no hosting.

A user who writes async ranks on the memory transport pays for none of the
rest; each part loads when a run first asks for it. Counted in a fresh
interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# modules of simcluster that `import simcluster` may load: the engine's parts, a module each, and
# the compiled build's native library
CORE_LIMIT = 57

LATER = ("simcluster.MPI", "simcluster.transports.tcp", "simcluster.transports.shm",
         "simcluster.transports.mpi", "simcluster.hosting.hosted_engine", "simcluster.hosting.host",
         "simcluster.hosting.coordinator", "simcluster.hosting.mpi_job", "simcluster.torch", "simcluster.mpirun",
         "simcluster.torchrun", "simcluster.cli", "simcluster.bench")


def _loaded(code: str) -> list[str]:
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m == 'simcluster' or m.startswith('simcluster.') or m in ('mpi4py', 'torch'))))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_import_simcluster_loads_only_the_core() -> None:
    loaded = _loaded("import simcluster")
    late = [m for m in loaded if any(m == p or m.startswith(p + ".") for p in LATER)]
    assert late == []
    assert "mpi4py" not in loaded and "torch" not in loaded
    assert len(loaded) <= CORE_LIMIT, f"{len(loaded)} modules: {loaded}"


def test_an_async_run_on_the_memory_transport_still_loads_no_facade() -> None:
    loaded = _loaded("""
import simcluster as sc
async def main(comm):
    return await comm.all_reduce(comm.rank)
assert list(sc.run(main, 4)) == [6] * 4
""")
    assert [m for m in loaded if m.startswith(("simcluster.MPI", "simcluster.transports.tcp"))] == []


@pytest.mark.parametrize("transport", ["memory", "tcp"])
def test_the_parts_load_when_a_run_asks_for_them(transport: str) -> None:
    loaded = _loaded(f"""
import simcluster as sc
def main(comm):  # a plain function gets simcluster.MPI's COMM_WORLD
    comm.Barrier()
    return comm.Get_rank()
assert list(sc.run(main, 2, transport={transport!r})) == [0, 1]
""")
    # on tcp the ranks (and so the facade) live in the hosting processes
    assert ("simcluster.MPI" in loaded) == (transport == "memory")
    assert ("simcluster.transports.tcp" in loaded) == (transport == "tcp")
