"""The ranks' side of one-sided windows: epochs, operations, checks and costs (see ``_win``).

``_Shared`` is what every rank of one window sees (each rank's exposed memory,
its lock and waiters, the log of the accesses of the epochs still open);
``_WinState`` is one rank's window: the epochs it has open, the seconds of
operations it owes, and the operations themselves, applied to the target's
memory at the call after the range and conflict checks.

Rule 1: a change to shared state happens inside one call, which never yields
to another rank before it is done, so every operation is atomic.
Rule 2: every wait is a message on the window's private communicator (a post,
a completion, a lock grant), so waits advance virtual time and a wait that
never ends is the engine's deadlock report.
"""

from __future__ import annotations

import operator
import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..matching import ANY_SOURCE as SC_ANY_SOURCE
from ._blocking import block, poll
from ._buffers import BOTTOM, Buf, message
from ._constants import (
    ERR_ARG, ERR_RANK, ERR_RMA_CONFLICT, ERR_TYPE, ERR_RMA_RANGE, ERR_RMA_SYNC, LOCK_EXCLUSIVE, LOCK_SHARED,
    MODE_NOSUCCEED, PROC_NULL, WIN_FLAVOR_DYNAMIC,
)
from ._datatypes import BYTE, Datatype
from ._errors import error
from ._group import Group
from ._ops import NO_OP, REPLACE, Op
from ._packing import Get_address
from ._requests import Request, _Immediate
from ._state import CommState

_POST, _DONE, _GRANT = 1, 2, 3  # tags on the window's private communicator


# ---- what the ranks of one window share ----


@dataclass(slots=True)
class _Access:
    """One access of an open epoch to a target's bytes [lo, hi)."""

    origin: int
    call: str
    kind: str  # "put", "get" or "acc"
    lo: int
    hi: int
    key: tuple[Any, ...]  # ("fence", n) or ("sync", origin, gen)
    op: str = ""
    data: bytes = b""


@dataclass(slots=True)
class _Target:
    """A rank's exposed memory and its lock."""

    mem: np.ndarray[Any, Any]  # uint8 view of the window's bytes
    disp_unit: int
    attached: dict[int, np.ndarray[Any, Any]] = field(default_factory=dict)  # dynamic: address -> bytes
    exclusive: int | None = None
    shared: set[int] = field(default_factory=set)
    waiters: list[tuple[int, int]] = field(default_factory=list)  # (rank, lock type)
    log: list[_Access] = field(default_factory=list)


class _Shared:
    """The window as all its ranks see it."""

    __slots__ = ("targets", "open", "node_buffer", "sizes")

    def __init__(self, size: int) -> None:
        self.targets: list[_Target | None] = [None] * size
        self.open: set[tuple[Any, ...]] = set()  # sync keys of epochs not completed yet
        self.node_buffer: np.ndarray[Any, Any] | None = None  # Allocate_shared's one buffer
        self.sizes: list[int] = [0] * size


_windows: weakref.WeakKeyDictionary[Any, _Shared] = weakref.WeakKeyDictionary()


def _bytes(obj: Any) -> np.ndarray[Any, Any]:
    """The uint8 view of a window's memory (None and BOTTOM: no bytes)."""
    if obj is None or obj is BOTTOM:
        return np.empty(0, dtype=np.uint8)
    if isinstance(obj, np.ndarray):
        if not (obj.flags.c_contiguous and obj.flags.writeable):
            raise BufferError("Win.Create(): the array is not contiguous and writable; pass "
                              "contiguous writable memory")
        return obj.reshape(-1).view(np.uint8)
    view = memoryview(obj)
    if view.readonly:
        raise TypeError(f"Win.Create({type(obj).__name__}): the memory is read-only; pass a "
                        "writable buffer (a numpy array, bytearray or MPI.Alloc_mem)")
    return np.asarray(view).reshape(-1).view(np.uint8)


def _cost(sc: Any, dst_world: int, nbytes: int) -> float:
    """What an ``nbytes`` message from this rank to ``dst_world`` costs on an idle network."""
    ports = sc.latency.bind(max(sc.world_rank, dst_world) + 1, random.Random(0))
    _, arrive = ports.transfer(sc.world_rank, dst_world, nbytes, 0.0)
    return float(arrive)


# ---- a rank's side of a window ----


class _WinState:
    """The calling rank's window: its epochs, its outstanding costs, its name and attributes."""

    __slots__ = ("sc", "shared", "flavor", "comm", "user", "rank", "size", "freed", "attrs", "hints",
                 "name", "errhandler", "fences", "fence_open", "locks", "lock_all_held", "access",
                 "exposure", "arrived", "gen", "owed", "__weakref__")

    def __init__(self, sc: Any, shared: _Shared, flavor: int, comm: CommState, user: Any) -> None:
        self.sc, self.shared, self.flavor, self.comm, self.user = sc, shared, flavor, comm, user
        self.rank: int = sc.rank
        self.size: int = sc.size
        self.freed = False
        self.attrs: dict[int, Any] = {}
        self.hints: dict[str, str] = {}
        self.name = ""
        self.errhandler: Any = None
        self.fences = 0  # fences called so far: the fence epoch's number
        self.fence_open = False  # a fence started an epoch (not MODE_NOSUCCEED)
        self.locks: dict[int, int] = {}  # target -> lock type held
        self.lock_all_held = False
        self.access: list[int] | None = None  # Start's targets
        self.exposure: list[int] | None = None  # Post's origins
        self.arrived: set[int] = set()  # origins whose Complete arrived in this exposure epoch
        self.gen: dict[int, int] = {}  # target -> completions so far (the sync key's generation)
        self.owed: dict[int, float] = {}  # target -> seconds of operations not yet charged

    @property
    def target(self) -> _Target:
        t: _Target | None = self.shared.targets[self.rank]
        assert t is not None
        return t

    def attrs_tuple(self) -> tuple[int, int, int]:
        if self.flavor == WIN_FLAVOR_DYNAMIC:
            return 0, 0, 1
        t = self.target
        mem = self.user if self.user is not None else t.mem
        return Get_address(mem), int(t.mem.size), t.disp_unit

    def epochs(self) -> str:
        open_ = [f"Lock({r})" for r in self.locks] if not self.lock_all_held else ["Lock_all"]
        if self.access is not None:
            open_.append("Start")
        if self.exposure is not None:
            open_.append("Post")
        return ", ".join(open_)

    def target_of(self, rank: int, call: str) -> _Target:
        if not isinstance(rank, int) or not 0 <= rank < self.size:
            raise error(ERR_RANK, self.rank, call, f"target rank {rank!r} is not in range({self.size})",
                        "pass a rank of the window's group, or MPI.PROC_NULL")
        t = self.shared.targets[rank]
        assert t is not None
        return t

    # ---- epochs and costs ----

    def _key(self, rank: int, call: str) -> tuple[Any, ...]:
        """The epoch an access to ``rank`` belongs to; ERR_RMA_SYNC outside any."""
        if rank in self.locks or (self.access is not None and rank in self.access):
            key = ("sync", self.rank, rank, self.gen.get(rank, 0))
            self.shared.open.add(key)
            return key
        if self.fence_open:
            return ("fence", self.fences)
        raise error(ERR_RMA_SYNC, self.rank, call, f"no access epoch to rank {rank} is open",
                    "call it between Fence() calls, between Start() and Complete(), or between "
                    "Lock() and Unlock()")

    def _charge(self, rank: int, nbytes: int) -> None:
        self.owed[rank] = self.owed.get(rank, 0.0) + _cost(self.sc, self.sc.world_ranks[rank], nbytes)

    def charge_now(self, rank: int, nbytes: int) -> None:
        """A request form: its operation's cost is charged at the call."""
        seconds = _cost(self.sc, self.sc.world_ranks[rank], nbytes)
        if seconds > 0:
            block(self.sc.sleep(seconds))

    def _settle(self, ranks: list[int] | None) -> None:
        """Charge the outstanding operations to ``ranks`` (all: None) and close their epochs' keys."""
        if ranks is None:
            ranks = sorted(set(self.owed) | set(self.gen) | set(self.locks))
        seconds = sum(self.owed.pop(r, 0.0) for r in ranks)
        for r in ranks:
            key = ("sync", self.rank, r, self.gen.get(r, 0))
            if key in self.shared.open:
                self.shared.open.discard(key)
                self.gen[r] = self.gen.get(r, 0) + 1
        if seconds > 0:
            block(self.sc.sleep(seconds))

    # ---- access checks ----

    def _region(self, t: _Target, rank: int, disp: int, nbytes: int, call: str
                ) -> tuple[np.ndarray[Any, Any], int]:
        """The target bytes an access touches (the window's, or an attached region) and their offset."""
        if self.flavor == WIN_FLAVOR_DYNAMIC:
            for base, arr in t.attached.items():
                if base <= disp and disp + nbytes <= base + arr.size:
                    return arr, disp - base
            raise error(ERR_RMA_RANGE, self.rank, call, f"bytes [{disp:#x}, {disp + nbytes:#x}) are not in "
                        f"memory rank {rank} attached to the dynamic window",
                        "target an address from MPI.Get_address() of memory the target passed to Attach")
        lo = disp * t.disp_unit
        if lo < 0 or lo + nbytes > t.mem.size:
            raise error(ERR_RMA_RANGE, self.rank, call, f"bytes [{lo}, {lo + nbytes}) are outside rank "
                        f"{rank}'s window of {t.mem.size} bytes",
                        "pass a target displacement and count within the target's window")
        return t.mem, lo

    def _check(self, t: _Target, rank: int, new: _Access) -> None:
        """Raise ERR_RMA_CONFLICT if ``new`` conflicts with an access of an open epoch."""
        live = []
        for old in t.log:
            if old.key[0] == "fence":
                if new.key[0] == "fence" and old.key[1] < new.key[1]:
                    continue
            elif old.key not in self.shared.open:
                continue
            live.append(old)
            if old.key[0] != new.key[0] or (old.key[0] == "fence" and old.key != new.key):
                continue
            if old.hi <= new.lo or new.hi <= old.lo or not _conflict(old, new):
                continue
            who = "this rank's" if old.origin == self.rank else f"rank {old.origin}'s"
            raise error(ERR_RMA_CONFLICT, self.rank, new.call,
                        f"bytes [{max(old.lo, new.lo)}, {min(old.hi, new.hi)}) of rank {rank}'s window "
                        f"are also accessed by {who} {old.call} in the same epoch (a conflicting access)",
                        "separate the two accesses by a synchronisation (Fence, Flush, Unlock, "
                        "Complete/Wait) or use Accumulate with one op for concurrent updates")
        live.append(new)
        t.log = live

    def _access(self, kind: str, rank: int, disp: int, tbuf_bytes: int, call: str, op: str = "",
                data: bytes = b"") -> tuple[_Target, np.ndarray[Any, Any], int]:
        t = self.target_of(rank, call)
        key = self._key(rank, call)
        mem, lo = self._region(t, rank, disp, tbuf_bytes, call)
        base = lo if self.flavor != WIN_FLAVOR_DYNAMIC else disp
        self._check(t, rank, _Access(self.rank, call, kind, base, base + tbuf_bytes, key, op, data))
        return t, mem, lo

    # ---- operations ----

    def _call(self, name: str, rank: int, target: Any) -> str:
        return f"Win.{name}(target_rank={rank}, target={target!r})"

    def put(self, origin: Any, rank: int, target: Any, name: str,
            charge: Callable[[int, int], None] | None) -> None:
        if rank == PROC_NULL:
            return
        call = self._call(name, rank, target)
        obuf = message(origin, self.rank, call, False)
        tview = self._target_buf(obuf, target, rank, call)
        self._match(obuf, tview, call, "origin")
        data = np.array(obuf.take(obuf.displ, obuf.count), copy=True)
        t, mem, lo = self._access("put", rank, tview.disp, tview.span, call,
                                  data=data.tobytes())
        tview.bind(mem, lo).put(0, data, tview.count)
        (charge or self._charge)(rank, obuf.nbytes)

    def get(self, origin: Any, rank: int, target: Any, name: str,
            charge: Callable[[int, int], None] | None) -> None:
        if rank == PROC_NULL:
            return
        call = self._call(name, rank, target)
        obuf = message(origin, self.rank, call, True)
        tview = self._target_buf(obuf, target, rank, call)
        self._match(obuf, tview, call, "origin")
        t, mem, lo = self._access("get", rank, tview.disp, tview.span, call)
        data = tview.bind(mem, lo).take(0, tview.count)
        obuf.put(obuf.displ, np.array(data, copy=True), obuf.count)
        (charge or self._charge)(rank, obuf.nbytes)

    def accumulate(self, origin: Any, result: Any, rank: int, target: Any, op: Op, name: str,
                   charge: Callable[[int, int], None] | None) -> None:
        if rank == PROC_NULL:
            return
        call = self._call(name, rank, target)
        if not isinstance(op, Op):
            raise TypeError(f"rank {self.rank}: {call}: op={op!r} is not an MPI.Op")
        if origin is None:  # as mpi4py: even MPI.NO_OP takes an origin spec ([None, MPI.INT] is empty)
            raise TypeError(f"rank {self.rank}: {call}: origin is None; pass a buffer or "
                            "[buf, datatype] (the target's count and datatype default to its)")
        obuf = message(origin, self.rank, call, False)
        rbuf = message(result, self.rank, call, True) if result is not None else None
        like = obuf
        tview = self._target_buf(like, target, rank, call)
        self._match(obuf, tview, call, "origin")
        if rbuf is not None:
            self._match(rbuf, tview, call, "result")
        t, mem, lo = self._access("acc", rank, tview.disp, tview.span, call, op._name)
        self._apply(tview.bind(mem, lo), tview.count, obuf, rbuf, op, call)
        (charge or self._charge)(rank, like.nbytes)

    def _apply(self, tbuf: Buf, count: int, obuf: Buf | None, rbuf: Buf | None, op: Op, call: str) -> None:
        if count == 0:
            return
        old = np.array(tbuf.take(0, count), copy=True)
        if rbuf is not None:
            rbuf.put(rbuf.displ, old, rbuf.count)
        if op is NO_OP or obuf is None:
            return
        new = np.asarray(obuf.take(obuf.displ, obuf.count)).reshape(-1)
        if op is REPLACE:
            tbuf.put(0, new, count)
            return
        reduce = op.for_buffer(tbuf.datatype, self.rank, call)
        tbuf.put(0, np.asarray(reduce.apply(old, new.astype(old.dtype, copy=False))), count)

    def fetch_and_op(self, origin: Any, result: Any, rank: int, disp: int, op: Op) -> None:
        call = f"Win.Fetch_and_op(target_rank={rank}, target_disp={disp})"
        obuf, rbuf = self._one(origin, call, False), self._one(result, call, True)
        if obuf.datatype._size != rbuf.datatype._size or obuf.flat.dtype != rbuf.flat.dtype:
            raise ValueError(f"rank {self.rank}: {call}: origin and result are of different datatypes; "
                             "pass one element of one datatype in each")
        if rank == PROC_NULL:
            return
        self.accumulate(origin, result, rank, (disp, 1, obuf.datatype), op, "Fetch_and_op", None)

    def compare_and_swap(self, origin: Any, compare: Any, result: Any, rank: int, disp: int) -> None:
        call = f"Win.Compare_and_swap(target_rank={rank}, target_disp={disp})"
        bufs = [self._one(origin, call, False), self._one(compare, call, False),
                self._one(result, call, True)]
        if len({(b.datatype._size, b.flat.dtype) for b in bufs}) != 1:
            raise ValueError(f"rank {self.rank}: {call}: origin, compare and result are of different "
                             "datatypes; pass one element of one datatype in each")
        if rank == PROC_NULL:
            return
        obuf, cbuf, rbuf = bufs
        tview = _TargetView(disp, 1, obuf.datatype)
        tview.span = obuf.datatype._size
        t, mem, lo = self._access("acc", rank, disp, tview.span, call, "CAS")
        tbuf = tview.bind(mem, lo)
        old = np.array(tbuf.take(0, 1), copy=True)
        rbuf.put(rbuf.displ, old, 1)
        if np.array_equal(old, np.asarray(cbuf.take(cbuf.displ, 1))):
            tbuf.put(0, np.array(obuf.take(obuf.displ, 1), copy=True), 1)
        self._charge(rank, obuf.nbytes)

    def _one(self, spec: Any, call: str, writable: bool) -> Buf:
        buf = message(spec, self.rank, call, writable)
        if buf.count != 1:
            raise ValueError(f"rank {self.rank}: {call}: a buffer holds {buf.count} elements; "
                             "pass exactly one element")
        return buf

    def _match(self, buf: Buf, tview: _TargetView, call: str, what: str) -> None:
        """An origin (or result) and the target must hold the same bytes (MPI's type signatures)."""
        want = tview.count * tview.datatype._size
        if buf.nbytes != want:
            raise error(ERR_TYPE, self.rank, call, f"the {what} buffer holds {buf.nbytes} bytes but the "
                        f"target spec holds {tview.count} items of {tview.datatype._size} bytes",
                        "pass matching counts and datatypes for both sides", mismatch=True)

    def _target_buf(self, like: Buf, target: Any, rank: int, call: str) -> _TargetView:
        """Parse mpi4py's target spec: None, a displacement, or (disp, count, datatype)."""
        disp, count, datatype = 0, like.count, like.datatype
        if target is None:
            pass
        elif isinstance(target, (list, tuple)):
            parts = list(target) + [None] * (3 - len(target))
            if len(target) > 3:
                raise ValueError(f"rank {self.rank}: {call}: target {target!r} has more than 3 items; "
                                 "pass (disp, count, datatype)")
            disp = 0 if parts[0] is None else int(parts[0])
            count = like.count if parts[1] is None else int(parts[1])
            if isinstance(parts[1], Datatype):
                count, datatype = like.count, parts[1]
            elif isinstance(parts[2], Datatype):
                datatype = parts[2]
        else:
            try:
                disp = operator.index(target)
            except TypeError:  # as mpi4py: a ValueError
                raise ValueError(f"rank {self.rank}: {call}: a {type(target).__name__} is not a target spec; "
                                 "pass None, a displacement or (disp, count, datatype)") from None
        return _TargetView(disp, count, datatype)

    def request(self, start: Callable[[_WinState], None], name: str) -> Request:
        start(self)
        return Request._of(_Immediate(), self.rank, lambda: f"Win.{name}()")

    # ---- synchronisation ----

    def _notify(self, rank: int, tag: int) -> None:
        """Send ``rank`` a 0-byte message on the window's communicator; nobody waits for the send."""
        self.comm.rank_state.adopt(self.sc.isend(np.empty(0, dtype=np.uint8), rank, tag))

    def fence(self, assertion: int) -> None:
        if self.locks or self.access is not None or self.exposure is not None:
            raise error(ERR_RMA_SYNC, self.rank, f"Win.Fence({assertion})",
                        f"another epoch is open ({self.epochs()})", "end it before the fence")
        self._settle(None)
        block(self.sc.barrier())
        self.fences += 1
        self.fence_open = not assertion & MODE_NOSUCCEED

    def _ranks(self, group: Group, call: str) -> list[int]:
        members = group._members(call)
        local = {w: i for i, w in enumerate(self.sc.world_ranks)}
        out = []
        for w in members:
            if w not in local:
                raise error(ERR_RANK, self.rank, call, f"world rank {w} of the group is not in the window",
                            "pass a group of the window's ranks (win.Get_group().Incl(...))")
            out.append(local[w])
        return out

    def start(self, group: Group) -> None:
        call = "Win.Start()"
        if self.access is not None:
            raise error(ERR_RMA_SYNC, self.rank, call, "an access epoch is already open",
                        "call Complete() first")
        targets = self._ranks(group, call)
        for r in targets:
            block(self.sc.recv(None, r, _POST))
        self.access = targets

    def complete(self) -> None:
        if self.access is None:
            raise error(ERR_RMA_SYNC, self.rank, "Win.Complete()", "no access epoch is open",
                        "call Start(group) first")
        targets, self.access = self.access, None
        self._settle(targets)
        for r in targets:
            self._notify(r, _DONE)

    def post(self, group: Group) -> None:
        call = "Win.Post()"
        if self.exposure is not None:
            raise error(ERR_RMA_SYNC, self.rank, call, "an exposure epoch is already open",
                        "call Wait() first")
        origins = self._ranks(group, call)
        for r in origins:
            self._notify(r, _POST)
        self.exposure, self.arrived = origins, set()

    def wait_exposure(self) -> None:
        if self.exposure is None:
            raise error(ERR_RMA_SYNC, self.rank, "Win.Wait()", "no exposure epoch is open",
                        "call Post(group) first")
        for r in self.exposure:
            if r not in self.arrived:
                block(self.sc.recv(None, r, _DONE))
        self.exposure = None

    def test_exposure(self) -> bool:
        if self.exposure is None:
            raise error(ERR_RMA_SYNC, self.rank, "Win.Test()", "no exposure epoch is open",
                        "call Post(group) first")
        exposure = self.exposure

        def check() -> bool:
            for r in exposure:
                if r not in self.arrived and self.sc.iprobe(r, _DONE) is not None:
                    block(self.sc.recv(None, r, _DONE))
                    self.arrived.add(r)
            return len(self.arrived) == len(exposure)

        def missing() -> int:
            return next(r for r in exposure if r not in self.arrived)

        done = poll(check, lambda: self.sc.probe(missing(), _DONE), lambda: "Win.Test()")
        if done:
            self.exposure = None
        return done

    def lock(self, rank: int, lock_type: int) -> None:
        call = f"Win.Lock({rank})"
        if rank == PROC_NULL:
            return
        if lock_type not in (LOCK_EXCLUSIVE, LOCK_SHARED):
            raise error(ERR_ARG, self.rank, call, f"lock_type {lock_type!r} is not a lock type",
                        "pass MPI.LOCK_EXCLUSIVE or MPI.LOCK_SHARED")
        t = self.target_of(rank, call)
        if rank in self.locks:
            raise error(ERR_RMA_SYNC, self.rank, call, f"rank {rank} is already locked by this rank",
                        f"call Unlock({rank}) first")
        if _grantable(t, lock_type):
            _take(t, self.rank, lock_type)
        else:
            t.waiters.append((self.rank, lock_type))
            block(self.sc.recv(None, SC_ANY_SOURCE, _GRANT))  # from the rank that releases it
        self.locks[rank] = lock_type

    def unlock(self, rank: int) -> None:
        call = f"Win.Unlock({rank})"
        if rank == PROC_NULL:
            return
        if rank not in self.locks or self.lock_all_held:
            raise error(ERR_RMA_SYNC, self.rank, call, f"rank {rank} is not locked by this rank",
                        f"call Lock({rank}) first")
        self._settle([rank])
        self._release(rank)

    def _release(self, rank: int) -> None:
        t = self.target_of(rank, "Win.Unlock()")
        self.locks.pop(rank)
        if t.exclusive == self.rank:
            t.exclusive = None
        t.shared.discard(self.rank)
        while t.waiters and _grantable(t, t.waiters[0][1]):
            waiter, kind = t.waiters.pop(0)
            _take(t, waiter, kind)
            self._notify(waiter, _GRANT)  # the grant, from the releaser

    def lock_all(self) -> None:
        if self.locks:
            raise error(ERR_RMA_SYNC, self.rank, "Win.Lock_all()", f"an epoch is open ({self.epochs()})",
                        "unlock first")
        for r in range(self.size):
            self.lock(r, LOCK_SHARED)
        self.lock_all_held = True

    def unlock_all(self) -> None:
        if not self.lock_all_held:
            raise error(ERR_RMA_SYNC, self.rank, "Win.Unlock_all()", "Lock_all() was not called",
                        "call Lock_all() first")
        self._settle(list(range(self.size)))
        self.lock_all_held = False
        for r in range(self.size):
            self._release(r)

    def flush(self, rank: int | None, name: str) -> None:
        call = f"Win.{name}({'' if rank is None else rank})"
        if rank == PROC_NULL:
            return
        if rank is None:
            if not self.locks:
                raise error(ERR_RMA_SYNC, self.rank, call, "no passive-target epoch is open",
                            "call Lock() or Lock_all() first")
            self._settle(list(self.locks))
            return
        if rank not in self.locks:
            raise error(ERR_RMA_SYNC, self.rank, call, f"rank {rank} is not locked by this rank",
                        f"call Lock({rank}) first")
        self._settle([rank])


@dataclass(slots=True)
class _TargetView:
    """A target spec: ``count`` items of ``datatype`` from displacement ``disp``."""

    disp: int
    count: int
    datatype: Datatype
    span: int = -1

    def __post_init__(self) -> None:
        if self.span < 0:
            dt = self.datatype
            if self.count == 0:
                self.span = 0
            elif dt._positions(1) is None:
                self.span = self.count * dt._size
            else:
                pos = dt._positions(self.count)
                self.span = (int(pos.max()) + 1) * dt._base._extent if pos is not None and pos.size else 0

    def bind(self, mem: np.ndarray[Any, Any], lo: int) -> Buf:
        dt = self.datatype
        raw = mem[lo:lo + self.span]
        if self.span == 0:
            return Buf(raw, np.empty(0, dtype=np.uint8), BYTE, 0)
        return message([raw, self.count, dt], -1, "Win", True)


def _conflict(old: _Access, new: _Access) -> bool:
    """Whether two overlapping accesses of one epoch give a result that depends on their order."""
    kinds = {old.kind, new.kind}
    if kinds == {"get"}:
        return False
    if kinds == {"acc"}:
        return old.op != new.op and "MPI_NO_OP" not in (old.op, new.op) and "CAS" not in (old.op, new.op)
    if kinds == {"put"}:
        lo, hi = max(old.lo, new.lo), min(old.hi, new.hi)
        a = old.data[lo - old.lo:hi - old.lo]
        b = new.data[lo - new.lo:hi - new.lo]
        return a != b  # the same bytes twice: the outcome is defined
    return True


def _grantable(t: _Target, lock_type: int) -> bool:
    if t.exclusive is not None:
        return False
    return lock_type == LOCK_SHARED or not t.shared


def _take(t: _Target, rank: int, lock_type: int) -> None:
    if lock_type == LOCK_EXCLUSIVE:
        t.exclusive = rank
    else:
        t.shared.add(rank)


