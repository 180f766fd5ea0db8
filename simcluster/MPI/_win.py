"""One-sided communication: ``MPI.Win`` on simcluster's virtual ranks (memory transport).

A window is created collectively on a communicator. Its ranks share a
``_Shared`` record (found by the window's private communicator, a ``Dup`` of
the user's): each rank's exposed memory, its lock, and the log of the accesses
of the epochs still open. That needs every rank in one process, so windows
exist on the memory transport only; elsewhere ``Win.Create`` and friends raise
``NotImplementedError`` saying so, before anything is created.

An operation (``Put``, ``Get``, ``Accumulate``, ...) is applied to the target's
memory when it is called (MPI lets an implementation do so at any point up to
the end of the epoch; the ranks run one at a time, so it is atomic), after two
checks: the target bytes lie in the target's window (``ERR_RMA_RANGE``) and no
access of an open epoch conflicts with it (``ERR_RMA_CONFLICT``, naming both
ranks, as MUST's one-sided checks do). A call outside an access epoch is
``ERR_RMA_SYNC``, as MPICH raises it.

Time: an operation costs the origin what a message of its bytes to the target
costs under the run's latency model on an idle network; the synchronisation that
completes it (``Fence``, ``Complete``, ``Unlock``, ``Flush``...) charges the sum
of its outstanding operations' costs; the request forms (``Rput``...) charge at
the call. ``Fence`` is then a barrier on the window's communicator; post-start
-complete-wait and lock grants are 0-byte messages on it. So every time is a
function of the program and the model, as the rest of the engine's.

Rule 1: synchronisation uses only the private communicator's p2p surface and
barrier; nothing here touches the engine or a transport.
Rule 2: window memory is the user's (``Create``) or numpy arrays of this module
(``Allocate``, one buffer per node for ``Allocate_shared``); it is never copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._attributes import AttributeCache
from ._blocking import block
from ._constants import (
    ERR_ARG, ERR_RMA_ATTACH, ERR_RMA_FLAVOR, ERR_RMA_SHARED, ERR_RMA_SYNC, ERR_WIN, LOCK_EXCLUSIVE,
    PROC_NULL, WIN_BASE, WIN_CREATE_FLAVOR, WIN_DISP_UNIT, WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_CREATE,
    WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED, WIN_MODEL, WIN_SIZE, WIN_UNIFIED,
)
from ._errhandler import ERRORS_RETURN, Errhandler
from ._errors import error
from ._group import Group
from ._info import INFO_NULL, Info
from ._memory import buffer
from ._ops import SUM, Op
from ._packing import Get_address
from ._requests import Request
from ._rma import _Shared, _Target, _WinState, _bytes, _windows
from ._state import CommState, node_of

WINDOWS_NEED_MEMORY = ("one-sided windows need every rank in one process (the memory transport); "
                       "this run's transport is {!r}; run with the memory transport (simcluster "
                       "mpirun's default) or use point-to-point messages")


# ---- the window ----


class Win(AttributeCache):
    """A window of memory that other ranks read and write (mpi4py's ``MPI.Win``)."""

    __slots__ = ("_s", "__weakref__")

    _attr_kind = "Win"
    _s: _WinState | None

    def __new__(cls, win: Win | None = None) -> Win:
        if win is not None and not isinstance(win, Win):
            raise TypeError(f"MPI.Win({win!r}): expected an MPI.Win")
        self = object.__new__(cls)
        self._s = None if win is None else win._s
        return self

    @classmethod
    def _from_state(cls, stored: Win | _WinState | str) -> Win:
        """A handle of class ``cls`` on what the handle table keeps (a Win, a state, "WIN_NULL")."""
        self = object.__new__(cls)
        self._s = stored._s if isinstance(stored, Win) else \
            stored if isinstance(stored, _WinState) else None
        return self

    # ---- object model ----

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Win):
            return NotImplemented
        return self._live() is other._live()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Win):
            return NotImplemented
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return self._live() is not None

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._live() is None:
            return "WIN_NULL" if self is WIN_NULL else (type(self), ())
        raise ValueError(f"cannot serialize {self!r}: a window belongs to the rank that created it")

    def __repr__(self) -> str:
        s = self._live()
        return "<MPI.Win WIN_NULL>" if s is None else f"<MPI.Win rank={s.rank} size={s.size}>"

    def _live(self) -> _WinState | None:
        s = self._s
        return None if s is None or s.freed else s

    @property
    def _w(self) -> _WinState:
        s = self._live()
        if s is None:
            raise error(ERR_WIN, None, "Win", "the window is WIN_NULL or was freed",
                        "use a window from Win.Create/Allocate/Allocate_shared/Create_dynamic")
        return s

    def _attr_table(self, call: str) -> dict[int, Any]:
        return self._w.attrs

    def _attr_rank(self) -> int | None:
        s = self._live()
        return None if s is None else s.rank

    def _attr_builtin(self, keyval: int) -> tuple[bool, Any]:
        if keyval not in (WIN_BASE, WIN_SIZE, WIN_DISP_UNIT, WIN_CREATE_FLAVOR, WIN_MODEL):
            return False, None
        s = self._w
        base, size, unit = s.attrs_tuple()
        return True, {WIN_BASE: base, WIN_SIZE: size, WIN_DISP_UNIT: unit,
                      WIN_CREATE_FLAVOR: s.flavor, WIN_MODEL: WIN_UNIFIED}[keyval]

    # ---- creation ----

    @classmethod
    def Create(cls, memory: Any, disp_unit: int = 1, info: Info = INFO_NULL, comm: Any = None) -> Win:
        """Expose ``memory`` (collective over ``comm``); ``disp_unit`` scales target displacements."""
        st = _comm_state(comm, "Win.Create")
        mem = _bytes(memory)
        return _create(st, "Win.Create", WIN_FLAVOR_CREATE, int(disp_unit), info,
                       lambda shared, rank: mem, memory)

    @classmethod
    def Allocate(cls, size: int, disp_unit: int = 1, info: Info = INFO_NULL, comm: Any = None) -> Win:
        """Allocate ``size`` zeroed bytes and expose them (collective over ``comm``)."""
        st = _comm_state(comm, "Win.Allocate")
        n = _size_arg(size, st, "Win.Allocate")
        mem = buffer.allocate(n).view(np.ndarray)
        return _create(st, "Win.Allocate", WIN_FLAVOR_ALLOCATE, int(disp_unit), info,
                       lambda shared, rank: mem, None)

    @classmethod
    def Allocate_shared(cls, size: int, disp_unit: int = 1, info: Info = INFO_NULL,
                        comm: Any = None) -> Win:
        """Allocate ``size`` bytes in one buffer the ranks of ``comm`` share (one simulated node)."""
        st = _comm_state(comm, "Win.Allocate_shared")
        n = _size_arg(size, st, "Win.Allocate_shared")
        sc = st.sc
        nodes = {node_of(sc, w) for w in sc.world_ranks}
        if len(nodes) > 1:
            raise error(ERR_RMA_SHARED, sc.rank, f"Win.Allocate_shared({size})",
                        f"the communicator spans simulated nodes {sorted(nodes)}",
                        "create it on comm.Split_type(MPI.COMM_TYPE_SHARED)")
        return _create(st, "Win.Allocate_shared", WIN_FLAVOR_SHARED, int(disp_unit), info,
                       _node_segment, None, n)

    @classmethod
    def Create_dynamic(cls, info: Info = INFO_NULL, comm: Any = None) -> Win:
        """Create a window without memory; ranks ``Attach`` memory and target it by address."""
        st = _comm_state(comm, "Win.Create_dynamic")
        return _create(st, "Win.Create_dynamic", WIN_FLAVOR_DYNAMIC, 1, info,
                       lambda shared, rank: np.empty(0, dtype=np.uint8), None)

    def Attach(self, memory: Any) -> None:
        """Expose ``memory`` in a dynamic window; targets address it by ``MPI.Get_address``."""
        s = self._w
        if s.flavor != WIN_FLAVOR_DYNAMIC:
            raise error(ERR_RMA_FLAVOR, s.rank, "Win.Attach()", "the window is not dynamic",
                        "attach memory to a window from Win.Create_dynamic")
        arr = _bytes(memory)
        s.target.attached[Get_address(memory)] = arr

    def Detach(self, memory: Any) -> None:
        """Stop exposing memory attached with ``Attach``."""
        s = self._w
        address = Get_address(memory)
        if s.target.attached.pop(address, None) is None:
            raise error(ERR_RMA_ATTACH, s.rank, "Win.Detach()", "the memory is not attached",
                        "detach only memory given to Attach")

    def Free(self) -> None:
        """Free the window (collective): a barrier, after which its memory is the user's again."""
        s = self._w
        if s.epochs():
            raise error(ERR_RMA_SYNC, s.rank, "Win.Free()", f"an epoch is still open ({s.epochs()})",
                        "end every epoch (Unlock, Complete, Wait, Fence(MPI.MODE_NOSUCCEED)) first")
        block(s.sc.barrier())
        s.freed = True
        self._s = None

    def free(self) -> None:
        """Free the window if it is live (mpi4py's ``free``)."""
        if self._live() is not None:
            self.Free()

    # ---- memory ----

    def tomemory(self) -> buffer:
        """Return the calling rank's window memory as an ``MPI.buffer`` (no copy)."""
        s = self._w
        if s.flavor == WIN_FLAVOR_DYNAMIC:
            return buffer()  # no memory of its own: address 0, as MPICH
        return buffer.frombuffer(s.user if s.user is not None else s.target.mem)

    def Shared_query(self, rank: int) -> tuple[buffer, int]:
        """Return ``(memory, disp_unit)`` of ``rank``'s segment of a shared window."""
        s = self._w
        if s.flavor == WIN_FLAVOR_DYNAMIC:  # MPI 4.1: other flavors answer where memory is shared
            raise error(ERR_RMA_FLAVOR, s.rank, f"Win.Shared_query({rank})", "the window is dynamic",
                        "query windows from Win.Allocate_shared, Allocate or Create")
        if rank == PROC_NULL:
            rank = next((r for r, n in enumerate(s.shared.sizes) if n), 0)
        target = s.target_of(rank, f"Win.Shared_query({rank})")
        return buffer.frombuffer(target.mem), target.disp_unit

    @property
    def attrs(self) -> tuple[int, int, int]:
        """The calling rank's window as ``(base address, size in bytes, disp_unit)``."""
        return self._w.attrs_tuple()

    @property
    def flavor(self) -> int:
        """How the window was created (``MPI.WIN_FLAVOR_*``)."""
        return self._w.flavor

    @property
    def model(self) -> int:
        """The memory model: ``MPI.WIN_UNIFIED`` (public and private copies are one)."""
        self._w
        return WIN_UNIFIED

    # ---- group, info, name, errhandler ----

    def Get_group(self) -> Group:
        """Return the group of the window's ranks."""
        sc = self._w.sc
        return Group._of(sc.world_ranks, sc.world_rank)

    group = property(Get_group, doc="The group of the window's ranks.")

    @property
    def group_size(self) -> int:
        """The number of the window's ranks."""
        return self._w.size

    @property
    def group_rank(self) -> int:
        """The calling rank's rank in the window's group."""
        return self._w.rank

    def Get_info(self) -> Info:
        """Return a new info with the window's hints."""
        return Info.Create(self._w.hints)

    def Set_info(self, info: Info) -> None:
        """Keep the hints of ``info``."""
        s = self._w
        if info is not None and info != INFO_NULL:
            s.hints.update(dict(info.items()))

    info = property(Get_info, Set_info, doc="The window's hints.")

    def Get_name(self) -> str:
        """Return the window's name (``""`` until ``Set_name``, as MPICH)."""
        s = self._live()
        return "MPI_WIN_NULL" if s is None else s.name

    def Set_name(self, name: str) -> None:
        """Name the window."""
        self._w.name = str(name)

    name = property(Get_name, Set_name, doc="The window's name.")

    def Get_errhandler(self) -> Errhandler:
        """Return (a new handle on) the window's error handler; ``ERRORS_RETURN`` by default."""
        current = self._w.errhandler
        return Errhandler(ERRORS_RETURN if current is None else current)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the error handler that ``Call_errhandler`` runs."""
        s = self._w
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"rank {s.rank}: Win.Set_errhandler({errhandler!r}): expected an MPI.Errhandler")
        errhandler._check_settable(f"Win.Set_errhandler({errhandler!r})", s.rank)
        s.errhandler = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Run the window's error handler for ``errorcode``."""
        current = self._w.errhandler
        (ERRORS_RETURN if current is None else current)._invoke(self, int(errorcode))

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """Return an error handler that calls ``errhandler_fn(win, errorcode)``."""
        return Errhandler._user("Win", errhandler_fn)

    # ---- operations ----

    def Put(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Write ``origin`` into ``target_rank``'s window; complete at the epoch's end."""
        self._w.put(origin, target_rank, target, "Put", None)

    def Get(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Read ``target_rank``'s window into ``origin``; valid at the epoch's end."""
        self._w.get(origin, target_rank, target, "Get", None)

    def Accumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM) -> None:
        """Combine ``origin`` into ``target_rank``'s window with ``op`` (atomic per element)."""
        self._w.accumulate(origin, None, target_rank, target, op, "Accumulate", None)

    def Get_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                       op: Op = SUM) -> None:
        """Fetch the target's values into ``result``, then combine ``origin`` into them with ``op``."""
        self._w.accumulate(origin, result, target_rank, target, op, "Get_accumulate", None)

    def Fetch_and_op(self, origin: Any, result: Any, target_rank: int, target_disp: int = 0,
                     op: Op = SUM) -> None:
        """Fetch one element and combine ``origin`` into it: ``Get_accumulate`` of one element."""
        self._w.fetch_and_op(origin, result, target_rank, target_disp, op)

    def Compare_and_swap(self, origin: Any, compare: Any, result: Any, target_rank: int,
                         target_disp: int = 0) -> None:
        """Fetch one target element into ``result``; replace it with ``origin`` if it equals ``compare``."""
        self._w.compare_and_swap(origin, compare, result, target_rank, target_disp)

    def Rput(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """Put nonblocking: ``Put`` with a request that completes when the origin buffer may be reused."""
        return self._w.request(lambda s: s.put(origin, target_rank, target, "Rput", s.charge_now), "Rput")

    def Rget(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """Get nonblocking: ``Get`` with a request that completes when the data is in ``origin``."""
        return self._w.request(lambda s: s.get(origin, target_rank, target, "Rget", s.charge_now), "Rget")

    def Raccumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM) -> Request:
        """Accumulate nonblocking: ``Accumulate`` with a request."""
        return self._w.request(lambda s: s.accumulate(origin, None, target_rank, target, op,
                                                      "Raccumulate", s.charge_now), "Raccumulate")

    def Rget_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                        op: Op = SUM) -> Request:
        """Fetch and accumulate nonblocking: ``Get_accumulate`` with a request."""
        return self._w.request(lambda s: s.accumulate(origin, result, target_rank, target, op,
                                                      "Rget_accumulate", s.charge_now), "Rget_accumulate")

    # ---- synchronisation ----

    def Fence(self, assertion: int = 0) -> None:
        """End the fence epoch (every operation of it is complete everywhere) and start the next.

        Collective; costs the outstanding operations' messages, then a barrier.
        """
        self._w.fence(int(assertion))

    def Start(self, group: Group, assertion: int = 0) -> None:
        """Start an access epoch to ``group``'s ranks; waits for each to ``Post``."""
        self._w.start(group)

    def Complete(self) -> None:
        """End the access epoch of ``Start``: charge its operations and tell each target."""
        self._w.complete()

    def Post(self, group: Group, assertion: int = 0) -> None:
        """Start an exposure epoch to ``group``'s ranks (a 0-byte message to each)."""
        self._w.post(group)

    def Wait(self) -> None:
        """End the exposure epoch of ``Post``: wait for each origin's ``Complete``."""
        self._w.wait_exposure()

    def Test(self) -> bool:
        """Test for the end of the exposure epoch: ``Wait`` without blocking, True (and the epoch ended) once every origin completed."""
        return self._w.test_exposure()

    def Lock(self, rank: int, lock_type: int = LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """Start a passive-target epoch on ``rank`` (waits while another rank's lock excludes it)."""
        self._w.lock(rank, int(lock_type))

    def Unlock(self, rank: int) -> None:
        """End the epoch of ``Lock(rank)``: its operations are complete at the target."""
        self._w.unlock(rank)

    def Lock_all(self, assertion: int = 0) -> None:
        """A shared lock on every rank of the window."""
        self._w.lock_all()

    def Unlock_all(self) -> None:
        """End the epoch of ``Lock_all``."""
        self._w.unlock_all()

    def Flush(self, rank: int) -> None:
        """Complete the operations to ``rank`` at the target, keeping the lock."""
        self._w.flush(rank, "Flush")

    def Flush_all(self) -> None:
        """Complete every outstanding operation at its target."""
        self._w.flush(None, "Flush_all")

    def Flush_local(self, rank: int) -> None:
        """Complete the operations to ``rank`` at the origin (here: as ``Flush``)."""
        self._w.flush(rank, "Flush_local")

    def Flush_local_all(self) -> None:
        """Complete every outstanding operation at the origin (here: as ``Flush_all``)."""
        self._w.flush(None, "Flush_local_all")

    def Sync(self) -> None:
        """Synchronise the public and private copies: nothing to do in the unified model."""
        self._w


def _comm_state(comm: Any, call: str) -> CommState:
    from ._comm import COMM_WORLD, Comm  # the facade's communicators (no cycle at import time)
    if comm is None:
        comm = COMM_WORLD
    if not isinstance(comm, Comm):
        raise TypeError(f"{call}(comm={comm!r}): expected an MPI.Comm")
    st: CommState = comm._st
    transport = st.sc.transport
    if transport != "memory":
        raise NotImplementedError(f"rank {st.sc.rank}: {call}: " + WINDOWS_NEED_MEMORY.format(transport))
    return st


def _size_arg(size: Any, st: CommState, call: str) -> int:
    n = int(size)
    if n < 0:
        raise error(ERR_ARG, st.sc.rank, f"{call}({size})", "the size is negative", "pass a size >= 0")
    return n


def _node_segment(shared: _Shared, rank: int) -> np.ndarray[Any, Any]:
    """Rank ``rank``'s part of the one buffer of a shared window (segments in rank order)."""
    if shared.node_buffer is None:
        shared.node_buffer = buffer.allocate(sum(shared.sizes)).view(np.ndarray)
    start = sum(shared.sizes[:rank])
    return shared.node_buffer[start:start + shared.sizes[rank]]


def _create(st: CommState, call: str, flavor: int, disp_unit: int, info: Info,
            memory: Callable[[_Shared, int], np.ndarray[Any, Any]], user: Any, size: int = 0) -> Win:
    """Make the window: a private communicator, the shared record, this rank's target; a barrier."""
    if disp_unit <= 0:
        raise error(ERR_ARG, st.sc.rank, f"{call}(disp_unit={disp_unit})", "disp_unit must be positive",
                    "pass 1 for byte displacements, or the item size")
    sc = block(st.sc.dup())
    anchor = sc.group.member(0)  # one object every rank of the window finds
    shared = _windows.get(anchor)
    if shared is None:
        shared = _windows[anchor] = _Shared(sc.size)
    shared.sizes[sc.rank] = size
    if flavor == WIN_FLAVOR_SHARED:
        block(sc.barrier())  # every size is known before the node's buffer is made
    shared.targets[sc.rank] = _Target(memory(shared, sc.rank), disp_unit)
    block(sc.barrier())  # every rank's memory is exposed before anyone accesses it
    win = object.__new__(Win)
    win._s = _WinState(sc, shared, flavor, st, user)
    if info is not None and info != INFO_NULL:
        win._s.hints.update(dict(info.items()))
    return win


WIN_NULL = Win()
