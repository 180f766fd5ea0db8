"""Requests: ``Wait``/``Test``/``Cancel``/``Free`` and the ``Waitall``-style class methods.

An MPI ``Request`` wraps a simcluster ``Request`` (or nothing: ``REQUEST_NULL``,
or an operation that completed at once, like a send to ``PROC_NULL``) and a
``finish`` step that turns what simcluster delivered into what mpi4py returns
(unpickles a lowercase receive, unpacks a derived datatype, copies a
collective's result into the receive buffer). Waiting blocks the rank through
``engine.sync.block``; the multi-request forms wait on all the pending simcluster
requests at once (``sc.wait_all``/``wait_any``/``wait_some``), so virtual
time and deadlock reports are the engine's.

As in MPI, a completed request becomes ``REQUEST_NULL`` (``bool(req)`` is
false, ``req == MPI.REQUEST_NULL``); waiting on it again returns at once with
an empty status. A persistent request (``Prequest``) becomes inactive
instead, and ``Start`` makes it active again.

Rule 1: ``finish`` runs exactly once per completion, on the owning rank.
Rule 2: a request's error is raised by the call that completes it, as the
MPI error of the call that started it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..engine import sync as _sync
from .. import request as _sc
from ._blocking import block, poll, receive_error
from ._constants import ERR_ARG, ERR_REQUEST, PROC_NULL, UNDEFINED
from ._errors import error
from ._status import Status

ScRequest = _sc.Request
Finish = Callable[[Any, Any], Any]
"""finish(raw value, simcluster Status or None) -> the value the user gets."""


class _Immediate:
    """An operation that completed when it was started (``PROC_NULL``, ``Ibarrier`` on one rank...)."""

    __slots__ = ("value", "null_source")

    def __init__(self, value: Any = None, null_source: bool = False) -> None:
        self.value = value
        self.null_source = null_source  # a receive from PROC_NULL: source=PROC_NULL in its status


class _Deferred:
    """A started partitioned send whose partitions are not all ``Pready`` yet: nothing sent so far."""

    __slots__ = ("ready",)

    def __init__(self) -> None:
        self.ready: set[int] = set()

    def done(self) -> bool:
        return False


def _no_call() -> str:
    return "request"


def _noop(value: Any, status: Any) -> Any:
    return value


class Request:
    """A nonblocking operation's handle (mpi4py's ``MPI.Request``)."""

    __slots__ = ("_req", "_finish", "_rank", "_call", "_alive", "_owner", "_also", "__weakref__")

    _family = "Request"  # what a copy constructor converts: see _convertible
    _req: ScRequest[Any] | _Immediate | _Deferred | Any | None
    _finish: Finish
    _rank: int
    _call: Callable[[], str]
    _alive: bool
    _owner: Any
    _also: tuple[ScRequest[Any], ...]  # more operations that complete with this one (Isendrecv)

    def __new__(cls, request: Request | None = None) -> Request:
        if request is not None:
            _convertible(request, cls)
        self = object.__new__(cls)
        self._req = None
        self._finish = _noop
        self._rank = -1
        self._call = _no_call
        self._alive = False
        self._owner = None  # the rank's state, for Free() of a pending request
        self._also = ()
        if request is not None:
            self._req, self._finish, self._rank = request._req, request._finish, request._rank
            self._call, self._alive, self._owner = request._call, request._alive, request._owner
            self._also = request._also
        return self

    @classmethod
    def _of(cls, req: ScRequest[Any] | _Immediate, rank: int, call: Callable[[], str],
            finish: Finish = _noop, owner: Any = None, also: tuple[ScRequest[Any], ...] = ()
            ) -> Request:
        self = cls.__new__(cls)
        self._req, self._rank, self._call, self._finish, self._alive = req, rank, call, finish, True
        self._owner, self._also = owner, also
        return self

    # ---- state ----

    def __bool__(self) -> bool:
        return self._alive

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        if not self._alive and not other._alive:
            return True
        return self._alive == other._alive and self._req is other._req

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self is REQUEST_NULL:
            return "REQUEST_NULL"
        if not self._alive:
            return (type(self), ())
        raise ValueError(f"cannot serialize {self!r}: a pending request belongs to the rank "
                         "that started it; wait for it and send its result instead")

    def __repr__(self) -> str:
        if not self._alive:
            return "<MPI.Request REQUEST_NULL>"
        state = "inactive" if self._req is None else "complete" if self._done() else "pending"
        return f"<MPI.{type(self).__name__} {self._call()} {state}>"

    def _done(self) -> bool:
        req = self._req
        return req is None or (not isinstance(req, _Deferred) and self._pending() is None)

    def _ops(self) -> tuple[ScRequest[Any], ...]:
        """This request's simcluster operations: its own and those that complete with it."""
        req = self._req
        if isinstance(req, ScRequest):
            return (req, *self._also)
        return self._also if req is not None else ()

    def _pending(self) -> ScRequest[Any] | None:
        """The first of this request's simcluster operations still pending, if any."""
        for r in self._ops():
            if not r.done():
                return r
        return None

    def _never(self, call: str) -> Exception:
        """The error of waiting for a request that nothing else can complete."""
        return error(ERR_REQUEST, self._rank, f"{call} of {self._call()}", "the partitioned send "
                     f"has partitions {sorted(set(range(self._parts())) - self._req.ready)} not "  # type: ignore[union-attr]
                     "marked ready, so it would wait forever", "call Pready (or Pready_range, "
                     "Pready_list) for every partition before waiting")

    def _parts(self) -> int:
        return 0

    def _active(self) -> bool:
        return self._alive and self._req is not None

    # ---- completion ----

    def _complete(self, status: Status | None) -> Any:
        """Finish a request that is done (or waits for it): fill ``status``, return the value."""
        req = self._req
        if req is None:  # null or inactive: returns at once, empty status
            if status is not None:
                status._clear()
            return None
        if isinstance(req, _Immediate):
            for companion in self._also:
                self._wait_op(companion)
            value = req.value
            if status is not None:
                status._null() if req.null_source else status._clear()
        elif isinstance(req, _Deferred):
            raise self._never("Wait()")
        else:
            raw = self._wait_op(req)
            for companion in self._also:
                self._wait_op(companion)
            if req.cancelled:
                value = None
                if status is not None:
                    status._clear()
                    status.cancelled = True
            else:
                value = self._finish(raw, req.status)
                if status is not None:
                    sc_status = req.status
                    if sc_status is None:
                        status._clear()
                    else:
                        status._set(sc_status.source, sc_status.tag, sc_status.nbytes)
        self._retire()
        return value

    def _wait_op(self, req: ScRequest[Any]) -> Any:
        """Wait for one simcluster operation; its failure is the MPI error of this request's call."""
        try:
            return block(req)
        except (Exception) as exc:
            call = self._call
            self._retire()
            converted = receive_error(exc, self._rank, call)
            if converted is None:
                raise
            raise converted from None

    def _retire(self) -> None:
        """After completion: a plain request becomes REQUEST_NULL.

        What it held for its completion and its error messages goes now, inside
        the call, not when the user's code drops the request (measured compute
        would charge that to the user's code).
        """
        self._req = None
        self._alive = False
        self._finish, self._call, self._also = _noop, _no_call, ()

    # ---- the MPI calls ----

    def Wait(self, status: Status | None = None) -> bool:
        """Wait for the operation to complete; fill ``status``; return True."""
        self._complete(status)
        return True

    def Test(self, status: Status | None = None) -> bool:
        """Return whether the operation has completed (completing it); never blocks."""
        if not self._test():
            return False
        self._complete(status)
        return True

    def _test(self, name: str = "Test") -> bool:
        req = self._req
        if req is None:
            return True
        if isinstance(req, _Deferred):
            return False
        return self._pending() is None or _poll(self, name)

    def Get_status(self, status: Status | None = None) -> bool:
        """Return whether the operation has completed, without completing it (fills ``status``)."""
        req = self._req
        if req is None or isinstance(req, _Immediate):
            if status is not None:
                status._null() if isinstance(req, _Immediate) and req.null_source else status._clear()
            return True
        if isinstance(req, _Deferred):
            return False
        if self._pending() is not None:
            _poll(self, "Get_status")
            return False
        if status is not None:
            sc_status = req.status
            if req.cancelled:
                status._clear()
                status.cancelled = True
            elif sc_status is None:
                status._clear()
            else:
                status._set(sc_status.source, sc_status.tag, sc_status.nbytes)
        return True

    def Cancel(self) -> None:
        """Ask to cancel the operation (a receive not yet matched); complete it with Wait or Test."""
        self._check_not_null("Cancel()")
        req = self._req
        if isinstance(req, ScRequest):
            req.cancel()

    def _check_not_null(self, call: str) -> None:
        if not self._alive:
            raise error(ERR_REQUEST, None, f"Request.{call}", "the request is REQUEST_NULL",
                        "call it on a request that is still active, or use free(), which "
                        "skips null requests")

    def Free(self) -> None:
        """Drop the handle; a pending operation still completes (its messages still arrive)."""
        self._check_not_null("Free()")
        if self._owner is not None:
            for r in self._ops():
                self._owner.adopt(r)
        self._req = None
        self._alive = False

    def free(self) -> None:
        """Free the request when it is not null (never raises for ``REQUEST_NULL``)."""
        if self._alive:
            self.Free()

    def wait(self, status: Status | None = None) -> Any:
        """Wait for the operation and return its object (the received object; None for sends)."""
        return self._complete(status)

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        """Return ``(True, object)`` once complete, else ``(False, None)``; never blocks."""
        if not self._test("test"):
            return (False, None)
        return (True, self._complete(status))

    def get_status(self, status: Status | None = None) -> bool:
        """Lowercase ``Get_status``."""
        return self.Get_status(status)

    def cancel(self) -> None:
        """Lowercase ``Cancel``."""
        self.Cancel()

    # ---- many requests ----

    @classmethod
    def Waitall(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        """Wait for every request; fill ``statuses``; return True."""
        cls.waitall(requests, statuses)
        return True

    @classmethod
    def waitall(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> list[Any]:
        """Wait for every request; return their objects."""
        reqs = _checked(requests, "waitall")
        pending = [p for r in reqs for p in r._ops() if not p.done()]
        if len(pending) > 1:
            try:
                block(_sc.wait_all(pending))
            except Exception:  # noqa: BLE001 - raised again below, by the request that failed
                pass
        _fit(statuses, len(reqs))
        return [r._complete(_slot(statuses, i)) for i, r in enumerate(reqs)]

    @classmethod
    def Waitany(cls, requests: Sequence[Request], status: Status | None = None) -> int:
        """Wait for one request; return its index (``UNDEFINED`` when none is active)."""
        return cls.waitany(requests, status)[0]

    @classmethod
    def waitany(cls, requests: Sequence[Request], status: Status | None = None) -> tuple[int, Any]:
        """Wait for one request; return ``(index, object)``."""
        reqs = _checked(requests, "waitany")
        active = [(i, r) for i, r in enumerate(reqs) if r._active()]
        if not active:
            if status is not None:
                status._clear()
            return (UNDEFINED, None)
        if not any(r._done() for _, r in active):
            _wait_any(active)
        for i, r in active:
            if r._done():
                return (i, r._complete(status))
        raise AssertionError("wait_any returned with no request complete")

    @classmethod
    def Waitsome(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                 ) -> list[int] | None:
        """Wait for at least one request; return the indices completed (None when none is active)."""
        return cls.waitsome(requests, statuses)[0]

    @classmethod
    def waitsome(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                 ) -> tuple[list[int] | None, list[Any] | None]:
        """Wait for at least one request; return ``(indices, objects)``."""
        reqs = _checked(requests, "waitsome")
        active = [(i, r) for i, r in enumerate(reqs) if r._active()]
        if not active:
            return (None, None)
        if not any(r._done() for _, r in active):
            _wait_any(active)
        return _collect(active, statuses)

    @classmethod
    def Testall(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        """Return whether every request has completed (completing them all only then)."""
        return cls.testall(requests, statuses)[0]

    @classmethod
    def testall(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                ) -> tuple[bool, list[Any] | None]:
        """Return ``(True, objects)`` once every request has completed, else ``(False, None)``."""
        reqs = _checked(requests, "testall")
        pending = [r for r in reqs if r._pending() is not None]
        if pending:
            _poll(pending[0], "Testall")
            return (False, None)
        _fit(statuses, len(reqs))
        return (True, [r._complete(_slot(statuses, i))
                       for i, r in enumerate(reqs)])

    @classmethod
    def Testany(cls, requests: Sequence[Request], status: Status | None = None) -> tuple[int, bool]:
        """Return ``(index, True)`` for a completed request, ``(UNDEFINED, False)`` if none yet."""
        index, flag, _ = cls.testany(requests, status)
        return (index, flag)

    @classmethod
    def testany(cls, requests: Sequence[Request], status: Status | None = None
                ) -> tuple[int, bool, Any]:
        """Return ``(index, True, object)`` for a completed request, else ``(UNDEFINED, False, None)``."""
        reqs = _checked(requests, "testany")
        active = [(i, r) for i, r in enumerate(reqs) if r._active()]
        if not active:
            if status is not None:
                status._clear()
            return (UNDEFINED, True, None)
        for i, r in active:
            if r._done():
                return (i, True, r._complete(status))
        _poll(active[0][1], "Testany")
        return (UNDEFINED, False, None)

    @classmethod
    def Testsome(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                 ) -> list[int] | None:
        """Return the indices of the requests completed now (None when none is active)."""
        return cls.testsome(requests, statuses)[0]

    @classmethod
    def testsome(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                 ) -> tuple[list[int] | None, list[Any] | None]:
        """Return ``(indices, objects)`` of the requests completed now."""
        reqs = _checked(requests, "testsome")
        active = [(i, r) for i, r in enumerate(reqs) if r._active()]
        if not active:
            return (None, None)
        if not any(r._done() for _, r in active):
            _poll(active[0][1], "Testsome")
        return _collect(active, statuses)

    @classmethod
    def Get_status_all(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        """Return whether every request has completed, without completing them."""
        reqs = _checked(requests, "Get_status_all")
        _fit(statuses, len(reqs))
        flags = [r.Get_status(_slot(statuses, i))
                 for i, r in enumerate(reqs)]
        return all(flags)

    get_status_all = Get_status_all

    @classmethod
    def Get_status_any(cls, requests: Sequence[Request], status: Status | None = None
                       ) -> tuple[int, bool]:
        """Return ``(index, True)`` of a completed request without completing it."""
        reqs = _checked(requests, "Get_status_any")
        active = [(i, r) for i, r in enumerate(reqs) if r._active()]
        if not active:
            if status is not None:
                status._clear()
            return (UNDEFINED, True)
        for i, r in active:
            if r._done():
                r.Get_status(status)
                return (i, True)
        _poll(active[0][1], "Get_status_any")
        return (UNDEFINED, False)

    get_status_any = Get_status_any

    @classmethod
    def Get_status_some(cls, requests: Sequence[Request], statuses: list[Status] | None = None
                        ) -> list[int] | None:
        """Return the indices of the completed requests without completing them."""
        reqs = _checked(requests, "Get_status_some")
        active = [(i, r) for i, r in enumerate(reqs) if r._active()]
        if not active:
            return None
        if not any(r._done() for _, r in active):
            _poll(active[0][1], "Get_status_some")
        done = [(i, r) for i, r in active if r._done()]
        _fit(statuses, len(done))
        for k, (_, r) in enumerate(done):
            r.Get_status(_slot(statuses, k))
        return [i for i, _ in done]

    get_status_some = Get_status_some


def _poll(r: Request, name: str) -> bool:
    """simcluster's test() of ``r``'s pending request for ``name`` (``Test``, ``Testall``, ...):
    finding it pending costs the rank the run's poll_cost of virtual time."""
    req = r._pending()
    if req is None:
        return True
    return (poll(req.test, lambda: _sync.Until(req), lambda: f"{name}() of {r._call()}")
            and r._pending() is None)


def _wait_any(active: list[tuple[int, Request]]) -> None:
    """Block until one of the active requests is done; one that never can be is the error of
    completing it (a generalized request nobody completes, a partitioned send not Pready)."""
    pending = [p for _, r in active if (p := r._pending()) is not None]
    if not pending:
        active[0][1]._complete(None)  # raises: nothing else can complete it
        return
    try:
        block(_sc.wait_any(pending))
    except Exception:  # noqa: BLE001 - raised again by the request that failed
        pass


def _convertible(request: object, cls: type[Request]) -> None:
    """mpi4py's copy constructors: any request converts to ``Request``; a ``Prequest`` does not
    become a ``Grequest`` nor the other way round."""
    if not isinstance(request, Request):
        raise TypeError(f"MPI.{cls.__name__}({request!r}): expected an MPI.Request, got "
                        f"{type(request).__name__}")
    if cls._family != "Request" and request._family not in ("Request", cls._family):
        raise TypeError(f"MPI.{cls.__name__}(request): cannot convert an "
                        f"MPI.{type(request).__name__} to an MPI.{cls.__name__}")


def _checked(requests: Sequence[Request], call: str) -> list[Request]:
    """Return the requests as a list; anything else is a TypeError, as in mpi4py."""
    reqs = list(requests)
    for r in reqs:
        if not isinstance(r, Request):
            raise TypeError(f"Request.{call}(): {r!r} is not an MPI.Request; pass the requests that "
                            "Isend/Irecv/I<collective> returned")
    return reqs


def _fit(statuses: Sequence[Status] | None, n: int) -> None:
    """Grow a list of statuses to ``n`` (as mpi4py does); other sequences are filled as far as they go."""
    if isinstance(statuses, list):
        while len(statuses) < n:
            statuses.append(Status())


def _slot(statuses: Sequence[Status] | None, i: int) -> Status | None:
    """The status to fill for request ``i``: None without statuses or past a sequence's end."""
    if statuses is None or i >= len(statuses):
        return None
    return statuses[i]


def _collect(active: list[tuple[int, Request]], statuses: list[Status] | None
             ) -> tuple[list[int] | None, list[Any] | None]:
    done = [(i, r) for i, r in active if r._done()]
    if statuses is not None:
        _fit(statuses, len(done))
    values = [r._complete(_slot(statuses, k))
              for k, (_, r) in enumerate(done)]
    return ([i for i, _ in done], values)


class Prequest(Request):
    """
    A persistent request: ``Start`` it, wait for it, start it again.

    ``Send_init``/``Recv_init``, ``Psend_init``/``Precv_init`` and the ``*_init``
    collectives make one. A partitioned send (``Psend_init``) sends nothing at ``Start``: the message leaves, whole,
    once every partition has been marked ready (``Pready``, ``Pready_range``, ``Pready_list``).
    A partitioned receive posts its receive at ``Start``; ``Parrived(i)`` says whether the
    message, and so partition ``i``, has arrived.
    """

    __slots__ = ("_start", "_partitions", "_send")

    _family = "Prequest"
    _start: Callable[[], tuple[Any, Finish]] | None
    _partitions: int  # 0: not partitioned
    _send: bool  # a partitioned send (Pready applies) rather than a receive (Parrived applies)

    def __new__(cls, request: Request | None = None) -> Prequest:
        self = super().__new__(cls, request)
        assert isinstance(self, Prequest)
        self._start = getattr(request, "_start", None)
        self._partitions = getattr(request, "_partitions", 0)
        self._send = getattr(request, "_send", False)
        return self

    @classmethod
    def _persistent(cls, start: Callable[[], tuple[Any, Finish]], rank: int,
                    call: Callable[[], str], owner: Any, partitions: int = 0,
                    send: bool = False) -> Prequest:
        self = cls.__new__(cls)
        self._start, self._rank, self._call, self._alive, self._owner = start, rank, call, True, owner
        self._partitions, self._send = partitions, send
        return self

    def _parts(self) -> int:
        return self._partitions

    def Start(self) -> None:
        """Start the operation again (it must be inactive)."""
        if not self._alive or self._start is None:
            raise error(ERR_REQUEST, self._rank, f"Prequest.Start() of {self._call()}",
                        "the request was freed", "make a new one with Send_init/Recv_init")
        if self._req is not None:
            raise error(ERR_REQUEST, self._rank, f"Prequest.Start() of {self._call()}",
                        "the request is still active", "Wait or Test it before starting it again")
        if self._partitions and self._send:
            self._req, self._finish = _Deferred(), _noop
        else:
            self._req, self._finish = self._start()

    @classmethod
    def Startall(cls, requests: Sequence[Prequest]) -> None:
        """Start every request."""
        for r in requests:
            r.Start()

    def _retire(self) -> None:
        self._req = None  # inactive, still usable

    def Free(self) -> None:
        """Free the persistent request (a pending operation still completes)."""
        super().Free()
        self._start = None

    # ---- partitioned communication ----

    def _partition(self, call: str, send: bool, partition: Any) -> int:
        """Check a partition number against the request, for ``call``."""
        if not self._partitions or self._send != send:
            want = "Psend_init" if send else "Precv_init"
            raise error(ERR_REQUEST, self._rank, f"Prequest.{call}", f"the request is not a "
                        f"partitioned {'send' if send else 'receive'} ({self._call()})",
                        f"call it on a request {want} returned")
        if isinstance(partition, bool) or not hasattr(partition, "__index__") or not (
                0 <= partition.__index__() < self._partitions):
            raise error(ERR_ARG, self._rank, f"Prequest.{call}", f"partition {partition!r} is "
                        f"not in range({self._partitions})", "number partitions from 0")
        return int(partition.__index__())

    def Pready(self, partition: int) -> None:
        """Mark one partition of a started partitioned send ready; the last one sends the message.

        Raises:
            MPI.Exception: ``ERR_REQUEST`` on a request that is not a started partitioned send,
                ``ERR_ARG`` for a partition out of range.
        """
        self._ready([partition], f"Pready({partition!r})")

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        """Mark partitions ``partition_low`` to ``partition_high`` (both included) ready."""
        lo = self._partition(f"Pready_range({partition_low!r}, {partition_high!r})", True,
                             partition_low)
        hi = self._partition(f"Pready_range({partition_low!r}, {partition_high!r})", True,
                             partition_high)
        self._ready(range(lo, hi + 1), f"Pready_range({lo}, {hi})")

    def Pready_list(self, partitions: Sequence[int]) -> None:
        """Mark every partition in ``partitions`` ready."""
        self._ready(list(partitions), f"Pready_list({list(partitions)!r})")

    def _ready(self, partitions: Any, call: str) -> None:
        parts = [self._partition(call, True, p) for p in partitions]
        req = self._req
        if not isinstance(req, _Deferred):
            raise error(ERR_REQUEST, self._rank, f"Prequest.{call}", "the partitioned send is not "
                        "started, or all its partitions are ready already", "Start() it first")
        req.ready.update(parts)
        if len(req.ready) == self._partitions:
            assert self._start is not None
            self._req, self._finish = self._start()

    def Parrived(self, partition: int) -> bool:
        """Return whether partition ``partition`` of a started partitioned receive has arrived.

        Never blocks; a rank that loops on it is charged the run's poll cost per call, as with
        ``Test``.
        """
        self._partition(f"Parrived({partition!r})", False, partition)
        if self._req is None:
            raise error(ERR_REQUEST, self._rank, f"Prequest.Parrived({partition!r})",
                        "the partitioned receive is not started", "Start() it first")
        return self._test("Parrived")


REQUEST_NULL = Request()


def immediate(rank: int, call: Callable[[], str], value: Any = None, null_source: bool = False,
              cls: type[Request] = Request) -> Request:
    """Return a request that is already complete (a send or receive with ``PROC_NULL``)."""
    return cls._of(_Immediate(value, null_source), rank, call)


assert PROC_NULL != UNDEFINED  # type: ignore[comparison-overlap]  # a guard on _constants' values
