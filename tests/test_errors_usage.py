"""Bad arguments are typed errors (UsageError, UsageTypeError), and callers classify errors by type."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

import simcluster as sc
from simcluster.hosting import remote as _remote
from simcluster import cli, errors
from simcluster import testing as sctest


async def _noop(comm: sc.Comm) -> int:
    return comm.rank


# ---- the classes ----


def test_usage_errors_are_simcluster_errors_and_value_errors() -> None:
    assert issubclass(sc.UsageError, sc.SimclusterError)
    assert issubclass(sc.UsageError, ValueError)
    assert issubclass(sc.UsageTypeError, sc.UsageError)
    assert issubclass(sc.UsageTypeError, TypeError)
    assert issubclass(sc.UsageTypeError, ValueError)
    assert sc.UsageError is errors.UsageError and sc.UsageTypeError is errors.UsageTypeError
    assert {"UsageError", "UsageTypeError"} <= set(sc.__all__) & set(errors.__all__)


def test_usage_error_has_the_message_shape_and_attributes() -> None:
    err = sc.UsageError(None, "run(checks='loose')", "checks must be 'strict' or 'off'", "pass 'off'")
    assert str(err) == "run(checks='loose'): checks must be 'strict' or 'off'; pass 'off'"
    assert (err.rank, err.op, err.problem, err.fix) == (None, "run(checks='loose')",
                                                         "checks must be 'strict' or 'off'", "pass 'off'")


@pytest.mark.parametrize("cls", [sc.UsageError, sc.UsageTypeError])
def test_a_usage_error_crosses_processes_whole(cls: type[sc.UsageError]) -> None:
    err = cls(None, "run(seed='x')", "seed must be an int", "pass an integer")
    back = _remote.decode_exception(_remote.encode_exception(err), "process 1")
    assert type(back) is cls and str(back) == str(err)
    assert (back.op, back.rank) == ("run(seed='x')", None)  # type: ignore[attr-defined]


# ---- where run() raises them ----


@pytest.mark.parametrize(("keywords", "cls", "op"), [
    ({"world_size": 0}, sc.UsageError, "run(world_size=0)"),
    ({"world_size": "4"}, sc.UsageTypeError, "run(world_size='4')"),
    ({"checks": "loose"}, sc.UsageError, "run(checks='loose')"),
    ({"seed": "x"}, sc.UsageTypeError, "run(seed='x')"),
    ({"timeout": 0}, sc.UsageError, "run(timeout=0)"),
    ({"timeout": "5"}, sc.UsageTypeError, "run(timeout='5')"),
    ({"transport": "pigeon"}, sc.UsageError, "run(transport='pigeon')"),
    ({"procs": 2}, sc.UsageError, "run(procs=2)"),
    ({"latency": "alphabeta"}, sc.UsageTypeError, "run(latency='alphabeta')"),
    ({"fidelity": "fast"}, sc.UsageError, "run(fidelity='fast')"),
    ({"serializer": "json"}, sc.UsageError, "run(serializer='json')"),
    ({"nnodes": 2}, sc.UsageError, "run(nnodes=2)"),
    ({"trace": 3}, sc.UsageTypeError, "run(trace=3)"),
    ({"eagerlimit": 3}, sc.UsageTypeError, "run(eagerlimit=...)"),
    # checks of other modules (schedules, compute=, algorithms=) raise the typed error too
    ({"schedule": "random"}, sc.UsageError, "run(schedule='random')"),
    ({"compute": "fast"}, sc.UsageError, "run(compute='fast')"),
    ({"algorithms": {"allreduce": "ring"}}, sc.UsageError, "run(algorithms={'allreduce': ...})"),
    ({"algorithms": {"all_reduce": "rng"}}, sc.UsageError, "all_reduce(algorithm='rng')"),
    ({"transport": "tcp", "fidelity": "analytic"}, sc.UsageError,
     "run(transport='tcp', fidelity='analytic')"),
    ({"transport": "shm", "compute": "wall"}, sc.UsageError, "run(compute='wall', transport='shm')"),
    ({"transport": "shm", "nnodes": 2, "master_addr": "127.0.0.1", "master_port": 1},
     sc.UsageError, "run(transport='shm', nnodes=2)"),
    ({"transport": "tcp", "nnodes": 2}, sc.UsageError, "run(nnodes=2)"),
])
def test_run_refuses_a_bad_keyword_with_a_typed_error(keywords: dict[str, Any],
                                                      cls: type[sc.UsageError], op: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    world_size = keywords.pop("world_size", 2)
    with pytest.raises(sc.UsageError) as info:
        sc.run(_noop, world_size, **keywords)
    err = info.value
    assert type(err) is cls
    assert err.op == op and err.rank is None
    assert str(err).startswith(op + ": ")
    assert isinstance(err, ValueError)  # what `except ValueError` around sc.run caught before
    assert isinstance(err, TypeError) == (cls is sc.UsageTypeError)


def test_a_bad_rank_function_is_a_usage_type_error() -> None:
    with pytest.raises(sc.UsageTypeError, match=r"^run\(42\): expected a function taking comm"):
        sc.run(42, 2)  # type: ignore[arg-type]
    with pytest.raises(sc.UsageTypeError) as info:
        sc.run(_noop(None), 2)  # type: ignore[arg-type]
    assert info.value.op == "run(main(...))"


def test_launch_raises_the_same_typed_errors() -> None:
    import asyncio

    with pytest.raises(sc.UsageTypeError) as info:
        asyncio.run(sc.launch(_noop, 2, seed="x"))
    assert info.value.op == "run(seed='x')"
    with pytest.raises(sc.UsageTypeError) as info:
        asyncio.run(sc.launch(_noop, 2, sed=1))
    assert info.value.op == "launch(sed=...)"


def test_the_unexpected_keyword_error_lists_every_keyword_run_takes() -> None:
    import inspect

    from simcluster import _config, runner

    with pytest.raises(sc.UsageTypeError) as info:
        sc.run(_noop, 2, eagerlimit=3)
    assert info.value.fix == f"valid: {', '.join(_config.KEYWORDS)}"
    assert "eager_limit" in _config.KEYWORDS and "_progress" not in _config.KEYWORDS
    assert "_progress" in inspect.signature(runner._launch).parameters


# ---- callers classify errors by type, not by their text ----


class _Broken(sc.latency.Zero):
    """A latency model with a bug: its error reads like run()'s own, but it is no usage error."""

    def bind(self, world_size: int, rng: Any = None) -> Any:
        raise ValueError("run(latency=...): a bug in a latency model")


def test_explore_raises_a_usage_error_at_once_and_other_errors_as_failures() -> None:
    with pytest.raises(sc.UsageError) as info:
        sctest.explore(_noop, 0)
    assert info.value.op == "run(world_size=0)" and isinstance(info.value, ValueError)
    with pytest.raises(sctest.ExploreFailure) as failure:  # not raised at once as a usage error
        sctest.explore(_noop, 2, seeds=[0], latency=_Broken())
    assert isinstance(failure.value.__cause__, ValueError)
    assert not isinstance(failure.value.__cause__, sc.UsageError)


def test_explore_and_distributed_refuse_their_own_bad_keywords_with_typed_errors() -> None:
    with pytest.raises(sc.UsageTypeError) as info:
        sctest.explore(_noop, 2, seed=1)
    assert info.value.op == "explore(seed=...)"
    with pytest.raises(sc.UsageError) as info:
        sctest.explore(_noop, 2, schedule="random")
    assert info.value.op == "explore(schedule='random')"
    with pytest.raises(sc.UsageTypeError) as info:
        sctest.distributed(args=(1,))
    assert info.value.op == "distributed(args=...)"


def test_the_command_line_reports_a_usage_error_without_a_traceback(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "job.py"
    script.write_text("async def main(comm):\n    return comm.rank\n")
    rc = cli.main(["run", str(script), "-n", "0"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err == ("simcluster run: run(world_size=0): world_size must be an int >= 1; pass the "
                   "number of virtual ranks\n")
    rc = cli.main(["run", str(script), "--compute", "fast"])
    _, err = capsys.readouterr()
    assert rc == 1 and err.startswith("simcluster run: run(compute='fast'): compute must be None")


def test_the_command_line_keeps_the_traceback_of_an_error_that_only_reads_like_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from simcluster import runner

    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "job.py"
    script.write_text("async def main(comm):\n    return comm.rank\n")

    def broken_run(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("run(x): a bug, not a message for the user")

    monkeypatch.setattr(runner, "run", broken_run)
    with pytest.raises(ValueError, match=re.escape("run(x): a bug")):
        cli.main(["run", str(script)])


def test_mpirun_exits_2_for_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    rc = cli.main(["mpirun", "-n", "2", "--procs", "2", str(script)])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert err.startswith("simcluster mpirun: run(procs=2): the memory transport hosts every rank")



@pytest.mark.parametrize("n", ["0", "-1"])
def test_mpirun_refuses_a_world_size_below_one_with_one_line(
        n: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "ok.py"
    script.write_text("print('never')\n")
    rc = cli.main(["mpirun", "-n", n, str(script)])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    # -1 as -0: the message of run(), no traceback
    assert err == (f"simcluster mpirun: run(world_size={n}): world_size must be an int >= 1; pass "
                   "the number of virtual ranks\n")


@pytest.mark.parametrize("n", ["0", "-1"])
def test_torchrun_refuses_nproc_per_node_below_one_with_one_line(
        n: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "ok.py"
    script.write_text("print('never')\n")
    rc = cli.main(["torchrun", "--nproc-per-node", n, str(script)])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert err.startswith(f"simcluster torchrun: --nproc-per-node {n}: give the number of ranks as "
                          "a positive integer") and err.count("\n") == 1

def test_a_world_that_cannot_fit_in_memory_is_refused_before_any_rank_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from simcluster import _config

    started: list[int] = []

    async def main(comm: sc.Comm) -> None:
        started.append(comm.rank)

    monkeypatch.setattr(_config, "available_memory", lambda: 2**30)  # 1 GiB left
    with pytest.raises(sc.UsageError) as info:
        sc.run(main, world_size=2**20)
    assert str(info.value) == (
        "run(world_size=1048576): 1,048,576 ranks need at least 1.3 GiB in one process (1,300 bytes "
        "each, the engine's own), and this machine has 1.0 GiB available; run fewer ranks, or "
        "spread them over processes and hosts (transport='tcp' with procs= and nnodes=)")
    assert started == []
    assert list(sc.run(main, world_size=4)) == [None] * 4  # 5 KB fit
    monkeypatch.setattr(_config, "available_memory", lambda: None)  # unknown: never refused
    assert len(sc.run(main, world_size=1000)) == 1000
