"""Each rank has its own working directory, as each process of an ``mpiexec`` or torchrun job has.

A rank's ``os.chdir`` moves that rank only: relative paths (``open``,
``os.listdir``, ``os.getcwd``) resolve in the rank's own directory whichever
rank ran last, and the launcher's directory is back once the run ends. The
program below runs under MPICH's ``mpiexec`` with the real mpi4py too, and
every rank's lines are compared.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpi_scripts import needs_mpiexec, run_real, run_simulated, script

MOVES = """
    import os
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    os.makedirs(f"out{rank}/deeper", exist_ok=True)
    world.Barrier()
    os.chdir(f"out{rank}")  # relative to the launch directory, on every rank
    world.Barrier()  # every rank has moved before any writes
    with open("mine.txt", "w") as f:
        f.write(f"rank {rank}")
    world.Barrier()
    os.chdir("deeper")
    world.Barrier()
    print(os.path.basename(os.getcwd()), os.path.basename(os.path.dirname(os.getcwd())),
          open("../mine.txt").read(), sorted(os.listdir("..")))
    fd = os.open("..", os.O_RDONLY)
    os.fchdir(fd)
    os.close(fd)
    world.Barrier()
    print(os.path.basename(os.getcwd()))
"""



def test_each_rank_moves_in_its_own_directory(tmp_path: Path) -> None:
    got = run_simulated(tmp_path, script(tmp_path, MOVES), 3)
    assert got == [[f"deeper out{r} rank {r} ['deeper', 'mine.txt']", f"out{r}"] for r in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["out0", "out1", "out2"]
    assert [(tmp_path / f"out{r}" / "mine.txt").read_text() for r in range(3)] == [f"rank {r}" for r in range(3)]


@needs_mpiexec
def test_directories_per_rank_print_what_they_print_under_mpiexec(tmp_path: Path) -> None:
    prog = script(tmp_path, MOVES)
    for launcher in ("sim", "real"):  # each writes its folders in a launch directory of its own
        (tmp_path / launcher).mkdir()
    assert run_simulated(tmp_path / "sim", prog, 3) == run_real(tmp_path / "real", prog, 3)


def test_the_launchers_directory_is_back_after_a_torch_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="needs torch: pip install 'simcluster[torch]'")
    from simcluster.torch import spawn
    monkeypatch.chdir(tmp_path)

    def fn(rank: int) -> str:
        os.makedirs(f"r{rank}", exist_ok=True)
        os.chdir(f"r{rank}")
        import torch.distributed as dist

        dist.init_process_group("simcluster")
        dist.barrier()  # the other rank runs, and moves, meanwhile
        Path("here.txt").write_text(str(rank))
        dist.destroy_process_group()
        return os.path.basename(os.getcwd())

    assert list(spawn(fn, nprocs=2)) == ["r0", "r1"]
    assert os.getcwd() == str(tmp_path)
    assert [(tmp_path / f"r{r}" / "here.txt").read_text() for r in range(2)] == ["0", "1"]
