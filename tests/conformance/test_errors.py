"""Misuse gives clear errors (rank, call, what happened, what to do), on every transport."""

from __future__ import annotations

import asyncio
import inspect
import re
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest

import simcluster as sc


def _line() -> int:
    """Return the line number of the caller (for errors that name a source line)."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _marked(marker: str) -> int:
    """Return the number of the line of this file that ends with ``# <- marker``.

    Ranks may run in other processes (shm, tcp), so they cannot hand a line
    number back through a list the test holds; the test finds it itself.
    """
    for number, line in enumerate(Path(__file__).read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# <- {marker}"):
            return number
    raise AssertionError(f"no line marked {marker!r}")


def _rank_error(main: object, world_size: int, transport: str, **kw: object) -> sc.RankError:
    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=world_size, transport=transport, **kw)  # type: ignore[arg-type]
    return info.value


# ---- invalid ranks and tags, at the call ----


def test_send_to_dst_out_of_range_names_rank_call_and_fix(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 3:
            await comm.send("x", dst=4)

    err = _rank_error(main, 4, transport)
    assert err.rank == 3
    assert isinstance(err.__cause__, ValueError)
    expected = ("rank 3: send(dst=4, tag=0): dst must be in range(4) for this comm; "
                "for a ring use (comm.rank + 1) % comm.size")
    assert str(err.__cause__) == expected
    with pytest.raises(ValueError, match=r"^" + re.escape(expected) + r"$"):
        raise err.__cause__


def test_isend_checks_dst_before_returning(transport: str) -> None:
    async def main(comm: sc.Comm) -> str:
        with pytest.raises(ValueError, match=(
                rf"^rank {comm.rank}: isend\(dst=-1, tag=0\): dst must be in range\(2\) for this comm; "
                r"for a ring use \(comm\.rank \+ 1\) % comm\.size$")):
            comm.isend("x", dst=-1)
        return "ok"

    assert list(sc.run(main, world_size=2, transport=transport)) == ["ok", "ok"]


@pytest.mark.parametrize("tag", [-1, 2**31])
def test_send_with_tag_outside_range_is_a_value_error(transport: str, tag: int) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send("x", dst=1, tag=tag)

    err = _rank_error(main, 2, transport)
    assert err.rank == 0
    assert isinstance(err.__cause__, ValueError)
    assert re.match(
        rf"^rank 0: send\(dst=1, tag={tag}\): tag must be in range\(0, 2\*\*31\); "
        r"use a non-negative int below 2\*\*31$", str(err.__cause__)), str(err.__cause__)


def test_send_with_bool_dst_is_refused(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send("x", dst=True)

    err = _rank_error(main, 2, transport)
    assert isinstance(err.__cause__, ValueError)
    assert re.match(
        r"^rank 0: send\(dst=True, tag=0\): dst must be in range\(2\) for this comm; "
        r"for a ring use \(comm\.rank \+ 1\) % comm\.size$", str(err.__cause__)), str(err.__cause__)


def test_send_with_float_dst_is_refused(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send("x", dst=1.0)  # type: ignore[arg-type]

    err = _rank_error(main, 2, transport)
    assert isinstance(err.__cause__, ValueError)
    assert str(err.__cause__).startswith("rank 0: send(dst=1.0, tag=0): dst must be in range(2)")


def test_numpy_integer_dst_is_accepted(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send("x", dst=np.int64(1), tag=np.int32(2))
            return None
        return await comm.recv(src=np.int64(0), tag=2)

    assert sc.run(main, world_size=2, transport=transport)[1] == "x"


@pytest.mark.parametrize("src", [2, -2])
def test_recv_with_src_out_of_range_is_a_value_error(transport: str, src: int) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 1:
            await comm.recv(src=src)

    err = _rank_error(main, 2, transport)
    assert err.rank == 1
    assert isinstance(err.__cause__, ValueError)
    assert re.match(
        rf"^rank 1: recv\(src={src}, tag=ANY_TAG\): src must be in range\(2\) or ANY_SOURCE for "
        r"this comm; pass a rank of this comm, or ANY_SOURCE$", str(err.__cause__)), str(err.__cause__)


def test_recv_with_negative_tag_is_a_value_error(transport: str) -> None:
    async def main(comm: sc.Comm) -> str:
        with pytest.raises(ValueError, match=(
                r"^rank 0: irecv\(src=ANY_SOURCE, tag=-5\): tag must be in range\(0, 2\*\*31\) "
                r"or ANY_TAG; use a non-negative int below 2\*\*31$")):
            comm.irecv(tag=-5)
        return "ok"

    assert list(sc.run(main, world_size=1, transport=transport)) == ["ok"]


# ---- receive buffers ----


def test_recv_into_too_small_buf_is_truncation_error(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.arange(8, dtype=np.float64), dst=1, tag=7)
            return None
        buf = np.zeros(4)
        with pytest.raises(sc.TruncationError, match=(
                r"^rank 1: recv\(buf=float64\[4\], src=0, tag=7\): message from rank 0 is 64 bytes "
                r"but buf holds 32; pass a larger buf, or size it with probe\(\) first$")) as info:
            await comm.recv(buf, src=0, tag=7)
        assert info.value.rank == 1
        return buf.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == [0.0] * 4


def test_truncation_surfaces_as_rank_error_when_not_caught(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send(np.arange(8, dtype=np.float64), dst=1, tag=7)
        else:
            await comm.recv(np.zeros(4), src=0, tag=7)

    err = _rank_error(main, 2, transport)
    assert err.rank == 1
    assert isinstance(err.__cause__, sc.TruncationError)


def test_shorter_message_fills_the_front_of_buf(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send(np.array([1.0, 2.0]), dst=1)
            return None
        buf = np.full(4, -1.0)
        await comm.recv(buf, src=0)
        return buf.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == [1.0, 2.0, -1.0, -1.0]


def test_recv_into_buf_of_other_dtype_is_type_error_naming_both_ranks(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 2:
            await comm.send(np.arange(4, dtype=np.float64), dst=1, tag=3)
            return None
        if comm.rank == 1:
            with pytest.raises(TypeError) as info:
                await comm.recv(np.zeros(4, dtype=np.float32), src=2, tag=3)
            return str(info.value)
        return None

    message = sc.run(main, world_size=3, transport=transport)[1]
    assert message.startswith("rank 1: recv(buf=float32[4], src=2, tag=3): ")
    assert "from rank 2" in message
    assert "float64" in message and "float32" in message


def test_recv_of_object_into_buf_is_type_error(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await comm.send("not an array", dst=1)
            return None
        with pytest.raises(TypeError) as info:
            await comm.recv(np.zeros(4), src=0)
        return str(info.value)

    message = sc.run(main, world_size=2, transport=transport)[1]
    assert message.startswith("rank 1: recv(buf=float64[4], src=0, tag=ANY_TAG): ")
    assert "from rank 0" in message and "str" in message
    assert "without buf" in message


def test_recv_buf_that_is_not_an_array_is_type_error(transport: str) -> None:
    async def main(comm: sc.Comm) -> str:
        with pytest.raises(TypeError, match=r"^rank 0: irecv\(buf=list, src=0, tag=ANY_TAG\): buf must be"):
            comm.irecv([0, 0], src=0)  # type: ignore[call-overload]
        return "ok"

    assert list(sc.run(main, world_size=1, transport=transport)) == ["ok"]


# ---- unsendable payloads ----


class Foo:
    pass


@pytest.mark.parametrize(("payload", "name"), [(Foo(), "Foo"), ({1, 2}, "set"),
                                               ([1, {"k": Foo()}], "Foo")])
def test_unsendable_payload_is_type_error_naming_type_and_fix(
        transport: str, payload: object, name: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            with pytest.raises(TypeError) as info:
                await comm.send(payload, dst=1)
            return str(info.value)
        return None

    result = sc.run(main, world_size=2, transport=transport)
    message = result[0]
    assert message.startswith("rank 0: send(")
    assert f"{name} is not sendable" in message
    assert 'send a dict/list/array instead, or run(..., serializer="pickle")' in message
    assert result.stats.total_messages == 0  # nothing was sent


def test_unsendable_payload_message_exact_text(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            await comm.send(Foo(), dst=1)

    err = _rank_error(main, 2, transport)
    assert isinstance(err.__cause__, TypeError)
    assert str(err.__cause__) == ('rank 0: send(obj=Foo): Foo is not sendable; send a dict/list/array '
                                  'instead, or run(..., serializer="pickle")')


# ---- a rank that raises ----


def test_rank_raising_stops_run_with_rank_error_and_cancels_the_others(transport: str,
                                                                      tmp_path: Path) -> None:
    cleaned = tmp_path / "cleaned.txt"  # ranks may live in other processes: they write a file

    async def main(comm: sc.Comm) -> None:
        if comm.rank == 1:
            await comm.sleep(1.0)
            raise KeyError("boom")  # the original error
        try:
            await comm.recv(src=1)  # never satisfied
        finally:
            with open(cleaned, "a") as log:
                log.write(f"rank {comm.rank} cleaned up\n")

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=3, transport=transport)
    err = info.value
    assert err.rank == 1
    assert isinstance(err, sc.SimclusterError)
    assert type(err.__cause__) is KeyError
    assert err.__cause__.args == ("boom",)
    assert "KeyError" in str(err) and "boom" in str(err)
    assert str(err).startswith("rank 1: ")
    frames = traceback.extract_tb(err.__cause__.__traceback__)
    assert frames[-1].name == "main"
    assert frames[-1].line == 'raise KeyError("boom")  # the original error'
    if transport == "mpi":  # another MPI process cancels its ranks once told, at its own pace
        deadline = time.monotonic() + 10
        while (not cleaned.exists() or len(cleaned.read_text().splitlines()) < 2) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    assert sorted(cleaned.read_text().splitlines()) == ["rank 0 cleaned up", "rank 2 cleaned up"]


def test_first_failing_rank_is_reported(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        await comm.sleep(float(comm.size - comm.rank))  # rank 3 fails first
        raise RuntimeError(f"rank {comm.rank} failed")

    err = _rank_error(main, 4, transport)
    assert err.rank == 3
    assert str(err.__cause__) == "rank 3 failed"


# ---- run() arguments ----


def test_run_with_a_coroutine_object_coaches_the_fix(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        pass

    with pytest.raises(TypeError, match=(r"^run\(main\(\.\.\.\)\): expected an async function, got a "
                                         r"coroutine object; pass main, not main\(\.\.\.\)$")):
        sc.run(main(None), world_size=2, transport=transport)  # type: ignore[arg-type]


def test_run_with_something_not_callable_is_type_error(transport: str) -> None:
    with pytest.raises(TypeError, match=(r"^run\(42\): expected a function taking comm first "
                                         r"\(async def, or a plain def for a synchronous rank\); got int$")):
        sc.run(42, world_size=2, transport=transport)  # type: ignore[arg-type]


@pytest.mark.parametrize("world_size", [0, -1])
def test_run_with_world_size_below_one_is_value_error(transport: str, world_size: int) -> None:
    async def main(comm: sc.Comm) -> None:
        pass

    with pytest.raises(ValueError, match=(rf"^run\(world_size={world_size}\): world_size must be an "
                                          r"int >= 1; pass the number of virtual ranks$")):
        sc.run(main, world_size=world_size, transport=transport)


def test_run_with_unknown_transport_is_value_error_listing_the_valid_ones() -> None:
    async def main(comm: sc.Comm) -> None:
        pass

    with pytest.raises(ValueError, match=r"^run\(transport='pigeon'\): unknown transport; valid: .*memory"):
        sc.run(main, world_size=2, transport="pigeon")  # type: ignore[arg-type]


async def test_run_inside_a_running_loop_is_runtime_error(transport: str) -> None:
    async def main(comm: sc.Comm) -> int:
        return comm.rank

    with pytest.raises(RuntimeError, match=r"^run\(\): called from a running event loop; "
                                           r"use `await sc\.launch\(\.\.\.\)` there$"):
        sc.run(main, world_size=2, transport=transport)


async def test_launch_works_inside_a_running_loop(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        return await comm.sendrecv(comm.rank, right, src=left)

    result = await sc.launch(main, world_size=3, transport=transport)
    assert isinstance(result, sc.RunResult)
    assert list(result) == [2, 0, 1]
    await asyncio.sleep(0)  # the loop is still usable


# ---- buffer hazards ----


@pytest.mark.parametrize("n", [4, 1 << 14], ids=["eager", "rendezvous"])
def test_changing_isend_buffer_before_wait_is_buffer_hazard(transport: str, n: int) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            smsg = np.ones(n)
            req = comm.isend(smsg, dst=1, tag=2)  # <- isend-hazard
            smsg[0] = 99.0  # too early: the request has not been waited
            await req
        else:
            await comm.recv(src=0, tag=2)

    err = _rank_error(main, 2, transport)
    assert err.rank == 0
    hazard = err.__cause__
    assert isinstance(hazard, sc.BufferHazardError)
    assert hazard.rank == 0
    op = "isend(dst=1, tag=2)"
    if n > 4:
        op += f" [rendezvous: {8 * n} bytes > eager_limit 65536]"
    assert str(hazard) == (
        f"rank 0: {op}: the send buffer changed before the request completed "
        f"(posted at test_errors.py:{_marked('isend-hazard')}); wait for the request before writing to the "
        "buffer, or send a copy")


def test_changing_isend_buffer_after_wait_is_fine(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            smsg = np.ones(4)
            await comm.isend(smsg, dst=1)
            smsg[:] = 7.0
            return None
        rmsg = await comm.recv(src=0)
        return rmsg.tolist()

    assert sc.run(main, world_size=2, transport=transport)[1] == [1.0] * 4


def test_buffer_hazard_is_not_checked_with_checks_off(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            smsg = np.ones(4)
            req = comm.isend(smsg, dst=1)
            smsg[:] = 7.0
            await req
            return None
        return (await comm.recv(src=0)).tolist()

    assert sc.run(main, world_size=2, transport=transport, checks="off")[1] == [1.0] * 4


# ---- leaks ----


def test_unwaited_isend_and_unreceived_message_give_one_warning(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            comm.isend("lost", dst=1, tag=4)  # never waited, never received

    with pytest.warns(sc.SimclusterWarning) as record:
        result = sc.run(main, world_size=2, transport=transport)
    assert len(record) == 1
    message = str(record[0].message)
    assert "rank 0: isend(dst=1, tag=4)" in message
    assert "rank 1: a message from rank 0 (tag=4, 5 bytes) on comm 'world' was never received" in message
    assert len(result.leaks) == 2
    assert any(line.startswith("rank 0: isend(dst=1, tag=4)") for line in result.leaks)


def test_leak_warning_points_at_the_callers_run_line(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            comm.isend("lost", dst=1, tag=4)

    with pytest.warns(sc.SimclusterWarning) as record:
        sc.run(main, world_size=2, transport=transport); line = _line()  # noqa: E702
    assert (record[0].filename, record[0].lineno) == (__file__, line)


def test_unmatched_irecv_is_a_leak(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        comm.irecv(src=0, tag=8)

    with pytest.warns(sc.SimclusterWarning) as record:
        result = sc.run(main, world_size=1, transport=transport)
    assert len(record) == 1
    assert len(result.leaks) == 1, result.leaks  # one unmatched receive is one leak, not two
    assert result.leaks[0].startswith("rank 0: irecv(src=0, tag=8) ")


def test_leaks_are_not_checked_with_checks_off(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            comm.isend("lost", dst=1, tag=4)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = sc.run(main, world_size=2, transport=transport, checks="off")
    assert result.leaks == []


def test_clean_run_has_no_leaks(transport: str) -> None:
    async def main(comm: sc.Comm) -> object:
        if comm.rank == 0:
            await sc.wait_all([comm.isend(np.ones(3), dst=1), comm.isend("x", dst=1)])
            return None
        return [await comm.recv(src=0), await comm.recv(src=0)]

    result = sc.run(main, world_size=2, transport=transport)
    assert result.leaks == []


def test_a_finally_that_awaits_does_not_hide_the_real_error(transport: str) -> None:
    async def main(comm: sc.Comm) -> None:
        if comm.rank == 0:
            raise ValueError("the real error")
        try:
            await comm.recv(src=0)
        finally:
            await comm.barrier()

    with pytest.raises(sc.RankError) as info:
        sc.run(main, world_size=2, transport=transport)
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "the real error"
