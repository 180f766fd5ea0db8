"""``_rank_env.RankEnvironments``: each rank sees its own variables, in ``os.environ`` and in C's ``getenv``."""

from __future__ import annotations

import ctypes
import os

import pytest

from simcluster._rank_env import RankEnvironments, mpich_variables


def _c_getenv(name: str) -> str | None:
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    raw = libc.getenv(name.encode())
    return None if raw is None else raw.decode()


@pytest.mark.skipif(os.name != "posix", reason="reads the C library's getenv")
def test_switches_write_only_what_differs_and_keep_each_ranks_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARED_SETTING", "launcher")
    monkeypatch.delenv("MINE", raising=False)
    envs = RankEnvironments()
    envs.install()
    owns = [mpich_variables(rank, 3, rank, 3, "host") for rank in range(3)]
    try:
        for step in range(12):  # rank 1 sets MINE at step 4 and deletes SHARED_SETTING at step 7
            rank = step % 3
            envs.enter(owns[rank])
            assert os.environ["PMI_RANK"] == _c_getenv("PMI_RANK") == str(rank)
            assert os.environ["PMI_SIZE"] == _c_getenv("PMI_SIZE") == "3"
            mine = "1" if rank == 1 and step > 4 else None
            assert os.environ.get("MINE") == _c_getenv("MINE") == mine
            shared = None if rank == 1 and step > 7 else "launcher"
            assert os.environ.get("SHARED_SETTING") == _c_getenv("SHARED_SETTING") == shared
            if step == 4:
                os.environ["MINE"] = "1"
            if step == 7:
                del os.environ["SHARED_SETTING"]
            envs.leave(owns[rank])
    finally:
        envs.uninstall()
    assert "PMI_RANK" not in os.environ and _c_getenv("PMI_RANK") is None
    assert "MINE" not in os.environ and os.environ["SHARED_SETTING"] == "launcher"
