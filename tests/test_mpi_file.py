"""MPI-IO (``MPI.File``): the same programs under MPICH's ``mpiexec`` and ``simcluster mpirun``.

Each program runs with the real mpi4py under MPICH and on simcluster, at 1 to 4
ranks; every rank must print the same lines, and the file each leaves must hold
the same bytes. Then a few checks that need no MPI: the time model, errors,
the refusal off the memory transport.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import simcluster as sc
from simcluster import MPI
from simcluster.MPI._fileview import FileSystem

HEADER = """
    import sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    path = sys.argv[1]
"""

PROGRAMS = {
    # one distributed 2-D array, rows by rank, written collectively through a subarray view,
    # then read back whole by every rank
    "subarray": """
        rows, cols = 3, 5
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
        ftype = MPI.DOUBLE.Create_subarray([rows * size, cols], [rows, cols], [rows * rank, 0]).Commit()
        fh.Set_view(16, MPI.DOUBLE, ftype)
        local = np.arange(rows * cols, dtype="d") + 100 * rank
        fh.Write_all(local)
        print("position", fh.Get_position(), "byte", fh.Get_byte_offset(fh.Get_position()))
        fh.Sync()
        comm.Barrier()
        fh.Set_view(16, MPI.DOUBLE, MPI.DOUBLE)
        whole = np.zeros(rows * cols * size)
        st = MPI.Status()
        fh.Read_at_all(0, whole, st)
        print("whole", whole.tolist(), st.Get_count(MPI.DOUBLE))
        print("size", fh.Get_size())
        ftype.Free()
        fh.Close()
    """,
    # independent explicit offsets, a strided (vector) view, reads past the end
    "independent": """
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
        fh.Write_at(4 * rank, np.array([rank + 1] * 4, dtype="b"))
        comm.Barrier()
        got = np.full(4 * size + 3, -1, dtype="b")
        st = MPI.Status()
        fh.Read_at(0, got, st)
        print("read", got.tolist(), st.Get_count(MPI.BYTE))
        strided = MPI.INT.Create_vector(2, 1, size)
        vec = strided.Create_resized(0, 8 * size).Commit()  # rank r's ints of 2 * size
        strided.Free()
        fh.Set_view(64 + 4 * rank, MPI.INT, vec)
        fh.Write(np.array([10 * rank, 10 * rank + 1, 10 * rank + 2], dtype="i"))
        print("pointer", fh.Get_position(), fh.Get_byte_offset(3))
        fh.Seek(0, MPI.SEEK_SET)
        back = np.zeros(3, dtype="i")
        fh.Read(back)
        print("back", back.tolist())
        comm.Barrier()
        fh.Seek(-1, MPI.SEEK_END)
        print("end", fh.Get_position())
        vec.Free()
        fh.Close()
    """,
    # the shared file pointer: ordered writes, then reads
    "ordered": """
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
        fh.Set_view(0, MPI.INT, MPI.INT)
        fh.Write_ordered(np.full(rank + 1, rank, dtype="i"))
        comm.Barrier()  # the shared pointer moves when a rank starts the next ordered call
        print("shared", fh.Get_position_shared())
        comm.Barrier()
        fh.Write_ordered_begin(np.full(2, 50 + rank, dtype="i"))
        fh.Write_ordered_end(np.full(2, 50 + rank, dtype="i"))
        comm.Barrier()
        print("shared", fh.Get_position_shared(), "amode", fh.Get_amode())
        fh.Close()
        fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
        fh.Set_view(0, MPI.INT, MPI.INT)
        mine = np.zeros(rank + 1, dtype="i")
        fh.Read_ordered(mine)
        print("mine", mine.tolist())
        fh.Seek_shared(0, MPI.SEEK_SET)
        if rank == 0:
            first = np.zeros(1, dtype="i")
            fh.Read_shared(first)
            print("first", first.tolist())
        try:
            fh.Write_at(0, np.zeros(1, dtype="i"))
        except MPI.Exception as exc:
            print("read-only", exc.Get_error_class() == MPI.ERR_READ_ONLY)
        fh.Close()
    """,
    # sizes, preallocation, modes and their errors, delete
    "sizes": """
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
        fh.Set_size(100)
        print("size", fh.Get_size())
        fh.Preallocate(40)
        print("size", fh.Get_size())
        fh.Preallocate(130)
        print("size", fh.Get_size())
        fh.Set_size(33)
        print("size", fh.Get_size(), fh.size, "group", fh.group_size, fh.group_rank)
        comm.Barrier()
        if rank == size - 1:
            fh.Write_at(40, bytearray(b"end"))
        comm.Barrier()
        print("size", fh.Get_size(), "eh", fh.Get_errhandler() == MPI.ERRORS_RETURN)
        fh.Close()
        print("null", fh == MPI.FILE_NULL)
        for amode in (MPI.MODE_RDONLY | MPI.MODE_WRONLY, MPI.MODE_RDONLY | MPI.MODE_CREATE,
                      MPI.MODE_RDWR | MPI.MODE_SEQUENTIAL):
            try:
                MPI.File.Open(comm, path, amode)
            except MPI.Exception as exc:
                print("amode error", exc.Get_error_class() == MPI.ERR_AMODE)
        try:
            MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_EXCL | MPI.MODE_RDWR)
        except MPI.Exception as exc:
            # MPICH: the rank that creates the file says why; the others, ERR_OTHER
            print("exists", exc.Get_error_class() == (MPI.ERR_FILE_EXISTS if rank == 0 else MPI.ERR_OTHER))
        try:
            MPI.File.Open(comm, path + ".missing", MPI.MODE_RDONLY)
        except MPI.Exception as exc:
            print("missing", exc.Get_error_class() == MPI.ERR_NO_SUCH_FILE)
        fh = MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_APPEND)
        print("append", fh.Get_position(), fh.Get_position_shared())
        fh.Close()
        tmp = MPI.File.Open(comm, path + ".tmp", MPI.MODE_CREATE | MPI.MODE_RDWR | MPI.MODE_DELETE_ON_CLOSE)
        tmp.Write_at(rank, bytearray(b"x"))
        tmp.Close()
        import os
        print("deleted on close", not os.path.exists(path + ".tmp"))
    """,
}


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
differential = [
    pytest.mark.skipif(not HAVE_MPI4PY, reason="the real mpi4py is not installed "
                                               "(pip install -e '.[mpi]')"),
    pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH or beside python "
                                               "(pip install -e '.[mpi]' brings MPICH's)"),
]


def _script(tmp_path: Path, name: str) -> Path:
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(HEADER) + textwrap.dedent(PROGRAMS[name]))
    return script


def _real(script: Path, n: int, data: Path) -> list[list[str]]:
    out = data.parent / "real-out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_"))}
    assert MPIEXEC is not None
    proc = subprocess.run(
        [MPIEXEC, "-n", str(n), "-outfile-pattern", str(out / "out.%r"), "-errfile-pattern",
         str(out / "err.%r"), sys.executable, str(script), str(data)],
        capture_output=True, text=True, timeout=300, env=env, cwd=data.parent)
    errors = "".join((out / f"err.{r}").read_text() for r in range(n) if (out / f"err.{r}").exists())
    assert proc.returncode == 0, proc.stderr + errors
    return [(out / f"out.{r}").read_text().splitlines() for r in range(n)]


def _simulated(script: Path, n: int, data: Path) -> list[list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "mpirun", "--prepend-rank", "-n", str(n), str(script),
         str(data)], capture_output=True, text=True, timeout=300, cwd=data.parent)
    assert (proc.returncode, proc.stderr) == (0, "")
    ranks: list[list[str]] = [[] for _ in range(n)]
    for line in proc.stdout.splitlines():
        match = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert match, f"a line without its rank prefix: {line!r}"
        ranks[int(match[1])].append(match[2])
    return ranks


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@differential[0]
@differential[1]
def test_every_rank_prints_and_the_file_holds_what_they_do_under_mpiexec(
        tmp_path: Path, name: str, n: int) -> None:
    script = _script(tmp_path, name)
    (tmp_path / "real").mkdir()
    (tmp_path / "sim").mkdir()
    real_data, sim_data = tmp_path / "real" / "data.bin", tmp_path / "sim" / "data.bin"
    want = _real(script, n, real_data)
    got = _simulated(script, n, sim_data)
    assert any(want)
    for rank in range(n):
        assert got[rank] == want[rank], f"rank {rank} differs"
    assert sim_data.read_bytes() == real_data.read_bytes()


# ---- no MPI needed ----


def test_io_costs_the_file_system_latency_and_bandwidth(tmp_path: Path) -> None:
    path = str(tmp_path / "timed.bin")

    def main(comm: MPI.Intracomm) -> list[float]:
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
        t0 = MPI.Wtime()
        fh.Write_at(comm.rank * 1000, bytearray(1000))
        t1 = MPI.Wtime()
        fh.Write_at_all(comm.rank * 1000, bytearray(1000))
        t2 = MPI.Wtime()
        fh.Close()
        return [t1 - t0, t2 - t1]

    fs = FileSystem()
    for independent, collective in sc.run(main, world_size=2, latency=sc.latency.AlphaBeta(1e-6, 1e-9)):
        assert independent == pytest.approx(fs.latency + 1000 / fs.bandwidth)
        assert collective >= fs.latency + 2000 / fs.bandwidth  # all bytes, after the sync
    assert sc.run(main, world_size=2) == sc.run(main, world_size=2)  # deterministic


def test_views_refuse_external32_with_the_reason(tmp_path: Path) -> None:
    path = str(tmp_path / "v.bin")

    def main(comm: MPI.Intracomm) -> str:
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR | MPI.MODE_DELETE_ON_CLOSE)
        try:
            fh.Set_view(0, MPI.INT, MPI.INT, "external32")
        except MPI.Exception as exc:
            return f"{exc.Get_error_class() == MPI.ERR_UNSUPPORTED_DATAREP}: {exc}"
        finally:
            fh.Close()
        return "no error"

    (text,) = sc.run(main, world_size=1)
    assert text.startswith("True: rank 0: File.Set_view(disp=0, datarep='external32'): data "
                           "representation 'external32' is not simulated")


def test_open_is_refused_up_front_off_the_memory_transport(tmp_path: Path) -> None:
    path = str(tmp_path / "t.bin")

    def main(comm: MPI.Intracomm) -> str:
        try:
            MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
        except NotImplementedError as exc:
            return str(exc)
        return "opened"

    for text in sc.run(main, world_size=2, transport="shm"):
        assert "needs every rank in one process; this run uses the shm transport" in text
    assert not os.path.exists(path)


def test_a_registered_datarep_without_conversions_reads_and_writes_as_native(tmp_path: Path) -> None:
    path = str(tmp_path / "r.bin")

    def main(comm: MPI.Intracomm) -> list[object]:
        MPI.Register_datarep("plain", None, None, lambda dt: dt.extent)
        try:
            MPI.Register_datarep("plain", None, None, lambda dt: dt.extent)
        except MPI.Exception as exc:
            dup = exc.Get_error_class() == MPI.ERR_DUP_DATAREP
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR | MPI.MODE_DELETE_ON_CLOSE)
        fh.Set_view(0, MPI.INT, MPI.INT, "plain")
        fh.Write_at(comm.rank, bytearray(comm.rank.to_bytes(4, "little")))
        comm.Barrier()
        back = bytearray(4 * comm.size)
        fh.Read_at(0, back)
        view = fh.Get_view()[3], fh.Get_type_extent(MPI.DOUBLE)
        fh.Close()
        return [dup, view, bytes(back)]

    want = b"".join(r.to_bytes(4, "little") for r in range(2))
    assert sc.run(main, world_size=2) == [[True, ("plain", 8), want]] * 2
