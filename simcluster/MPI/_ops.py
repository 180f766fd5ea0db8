"""Reduction operations: ``MPI.SUM`` ... ``MPI.MAXLOC``, ``REPLACE``, ``NO_OP`` and ``Op.Create``.

An ``Op`` works two ways, as in mpi4py:

* on Python objects (the lowercase ``reduce``/``allreduce``/``scan``/``exscan``,
  and ``op(x, y)``), with mpi4py's Python definitions: ``SUM`` is ``x + y``,
  ``MAX`` keeps ``y`` only when ``y > x``, ``LAND`` is ``bool(x) and bool(y)``,
  ``MAXLOC`` compares ``(value, index)`` pairs and breaks ties by the lower
  index; a user op is called as ``function(x, y, None)`` and returns the result;
* on buffers (the uppercase reductions), as a ``simcluster.ReduceOp`` that the
  collective algorithms apply elementwise: the built-ins map to simcluster's,
  ``MAXLOC``/``MINLOC`` reduce the pair types (``DOUBLE_INT``, ``TWOINT``, ...)
  field by field, and a user op is called as MPI calls it,
  ``function(invec, inoutvec, datatype)`` with ``inoutvec`` to update in place
  and ``invec`` from the lower ranks.

Rule 1: an operand is never modified; the buffer form computes into a copy.
Rule 2: every rank gets the same ``ReduceOp`` name for the same ``Op``, so
collective signatures agree.
Rule 3: on buffers, a predefined op takes only the datatypes MPI defines it
for (``SUM`` integer, floating point and complex ones, ``LAND`` integer and
logical ones, ``BAND`` integer and byte ones, ...); others are ``ERR_OP``, as
MPICH reports them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ops import ReduceOp
from ._datatypes import Datatype
from ._constants import ERR_COUNT, ERR_OP, ERR_TYPE
from ._errors import error
from ._limits import UserSlots, _Holder

_ids = itertools.count(1)


def _max(x: Any, y: Any) -> Any:
    return y if y > x else x


def _min(x: Any, y: Any) -> Any:
    return y if y < x else x


def _maxloc(x: Any, y: Any) -> Any:
    (u, i), (v, j) = x, y
    if u > v:
        return u, i
    if v > u:
        return v, j
    return (v, j) if j < i else (u, i)


def _minloc(x: Any, y: Any) -> Any:
    (u, i), (v, j) = x, y
    if u < v:
        return u, i
    if v < u:
        return v, j
    return (v, j) if j < i else (u, i)


def _pair_op(name: str, better: Callable[[Any, Any], Any]) -> ReduceOp:
    """A ReduceOp for MAXLOC/MINLOC on arrays of (value, index) pairs (numpy structured dtypes)."""
    def apply(a: Any, b: Any) -> Any:
        if not (isinstance(a, np.ndarray) and a.dtype.names and len(a.dtype.names) == 2):
            raise TypeError(f"{name} reduces (value, index) pairs; pass [buf, MPI.DOUBLE_INT] (or "
                            "FLOAT_INT, LONG_INT, TWOINT, SHORT_INT)")
        value, index = a.dtype.names
        va, vb, ia, ib = a[value], b[value], a[index], b[index]
        take_b = better(vb, va) | ((vb == va) & (ib < ia))
        out = np.array(a, copy=True)
        out[take_b] = b[take_b]
        return out

    return ReduceOp.custom(apply, commutative=True, name=name, elementwise=True)


class Op:
    """A reduction operation (predefined, or made by ``Op.Create``)."""

    __slots__ = ("_id", "_name", "_py", "_reduce", "_commute", "_fn", "_freed", "_predefined",
                 "_buffer_ops", "_bare", "_slot", "__weakref__")

    _id: int
    _name: str
    _py: Callable[[Any, Any], Any] | None
    _reduce: ReduceOp | None  # the built-in simcluster op for buffers (None: made per datatype)
    _commute: bool
    _fn: Callable[..., Any] | None  # Op.Create's function
    _freed: bool
    _predefined: bool
    _buffer_ops: dict[int, ReduceOp]
    _bare: bool  # made from a handle (fromint, ...): a user op's MPI op without its Python side
    _slot: _Holder | None  # the user-op slot Create took (None otherwise)

    def __new__(cls, op: Op | None = None) -> Op:
        if op is not None and not isinstance(op, Op):
            raise TypeError(f"MPI.Op({op!r}): expected an MPI.Op, got {type(op).__name__}")
        self = object.__new__(cls)
        source = OP_NULL if op is None else op
        for slot in Op.__slots__[:-1]:
            object.__setattr__(self, slot, getattr(source, slot))
        self._slot = None  # only the handle Create returned holds the user-op slot
        return self

    @classmethod
    def _make(cls, name: str, py: Callable[[Any, Any], Any] | None, reduce: ReduceOp | None,
              commute: bool = True) -> Op:
        self = object.__new__(cls)
        self._id = next(_ids)
        self._name = name
        self._py = py
        self._reduce = reduce
        self._commute = commute
        self._fn = None
        self._freed = False
        self._predefined = True
        self._buffer_ops = {}
        self._bare = False
        self._slot = None
        return self

    @classmethod
    def _from_handle(cls, op: Op) -> Op:
        """Return a new object for ``op``'s handle (``fromint``, ``fromhandle``, ``f2py``).

        As in mpi4py, the handle is the MPI op alone: a user op made this way reduces
        buffers, but only the object ``Create`` returned (and its copies) can be called on
        Python objects or pickled.
        """
        new = cls(op)
        new._bare = not op._predefined
        return new

    @classmethod
    def Create(cls, function: Callable[..., Any], commute: bool = False) -> Op:
        """Return a user op: ``function(invec, inoutvec, datatype)`` updates ``inoutvec`` in place.

        On Python objects (lowercase collectives, ``op(x, y)``) it is called as
        ``function(x, y, None)`` and returns the result, as mpi4py does.
        """
        if not callable(function):
            raise TypeError(f"Op.Create(function={function!r}): function must be callable as "
                            "function(invec, inoutvec, datatype)")
        slot = _USER_OPS.take("Op.Create()")
        self = cls._make(getattr(function, "__name__", "user_op"), None, None, bool(commute))
        self._fn = function
        self._predefined = False
        self._slot = slot
        return self

    def __call__(self, x: Any, y: Any) -> Any:
        """Return ``x op y`` on Python objects (``x`` from the lower rank)."""
        if self._fn is not None and self._bare:
            raise ValueError(f"{self._name}(x, y): this op was made from a handle (fromint), which "
                             "carries no Python function; call the op Op.Create returned")
        if self._fn is not None:
            return self._fn(x, y, None)
        if self._py is None or self._freed:
            raise ValueError(f"{self._name}(x, y): a null or freed op cannot reduce; pass a live "
                             "op such as MPI.SUM")
        return self._py(x, y)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Op) and other._id == self._id

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mpi4py's handles are unhashable

    def __bool__(self) -> bool:
        return self._name != "MPI_OP_NULL" and not self._freed

    def __repr__(self) -> str:
        return f"<MPI.Op {self._name}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._predefined:
            name = self._name.removeprefix("MPI_")
            return name if self is _PREDEFINED.get(name) else (type(self), (_PREDEFINED[name],))
        if self._fn is None or self._freed:
            raise ValueError(f"cannot pickle {self!r}: it was freed")
        if self._bare:
            raise ValueError(f"cannot pickle {self!r}: it was made from a handle (fromint), which "
                             "carries no Python function; pickle the op Op.Create returned")
        return (_recreate, (self._fn, self._commute))  # a new op of the same function, as mpi4py

    def Is_commutative(self) -> bool:
        """Return whether the op is commutative."""
        return self._commute

    is_commutative = property(Is_commutative, doc="Whether the op is commutative.")
    is_predefined = property(lambda self: self._predefined, doc="True for MPI's own ops.")

    def Free(self) -> None:
        """Free a user op (predefined ops cannot be freed)."""
        if self._predefined:
            raise error(ERR_OP, None, f"{self._name}.Free()", "a predefined op cannot be freed",
                        "free only ops made by Op.Create")
        if self._freed:
            raise error(ERR_OP, None, f"{self._name}.Free()", "the op was freed already",
                        "free each op once")
        self._freed = True
        if self._slot is not None:
            _USER_OPS.give_back(self._slot)
            self._slot = None

    def free(self) -> None:
        """Free the op, never raising: this handle becomes ``OP_NULL`` (a predefined constant stays)."""
        if self is _PREDEFINED.get(self._name.removeprefix("MPI_")):
            return
        if not self._predefined and not self._freed:
            self.Free()
        for slot in Op.__slots__[:-1]:
            object.__setattr__(self, slot, getattr(OP_NULL, slot))
        self._slot = None

    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None:
        """Apply the op locally: ``inoutbuf = inbuf op inoutbuf`` elementwise."""
        from ._buffers import message

        src = message(inbuf, -1, "Op.Reduce_local(inbuf)", False)
        dst = message(inoutbuf, -1, "Op.Reduce_local(inoutbuf)", True)
        if src.count != dst.count:  # as mpi4py: both buffers hold the same items
            raise error(ERR_COUNT, None, "Op.Reduce_local()", f"inbuf holds {src.count} items but "
                        f"inoutbuf {dst.count}", "pass buffers of the same count", mismatch=True)
        if src.datatype != dst.datatype:
            raise error(ERR_TYPE, None, "Op.Reduce_local()", f"inbuf holds {src.datatype!r} but "
                        f"inoutbuf {dst.datatype!r}", "pass buffers of the same datatype",
                        mismatch=True)
        rop = self.for_buffer(dst.datatype, None, "Op.Reduce_local()")
        dst.put(0, rop.apply(src.take(0, src.count), dst.take(0, dst.count)))

    # ---- what the communicators use ----

    def for_objects(self) -> Callable[[Any, Any], Any]:
        """Return the Python function the lowercase collectives apply."""
        if self._freed or not self:
            raise error(ERR_OP, None, "reduce()", f"{self._name} cannot reduce (freed or null)",
                        "pass a live op")
        return self.__call__

    def for_buffer(self, datatype: Datatype, rank: int | None, op: str) -> ReduceOp:
        """Return the simcluster ReduceOp that applies this op to arrays of ``datatype``."""
        if self._freed or not self:
            raise error(ERR_OP, rank, op, f"{self._name} cannot reduce (freed or null)",
                        "pass a live op such as MPI.SUM")
        if self._name in _TAKES:
            _check_category(self._name.removeprefix("MPI_"), datatype, rank, op)
        if self._reduce is not None:
            return self._reduce
        cached = self._buffer_ops.get(datatype._id)
        if cached is None:
            fn = self._fn
            assert fn is not None

            def apply(a: Any, b: Any) -> Any:
                inout = np.array(b, copy=True, order="C").reshape(-1)
                fn(np.ascontiguousarray(a).reshape(-1).data, inout.data, datatype)
                return inout.reshape(np.shape(b))

            cached = ReduceOp.custom(apply, commutative=self._commute, name=self._name,
                                     elementwise=True)
            self._buffer_ops[datatype._id] = cached
        return cached


_INTEGER, _FLOAT, _COMPLEX, _LOGICAL, _BYTE = "integer", "floating point", "complex", "logical", "byte"
_TAKES: dict[str, tuple[str, ...]] = {
    "MPI_MAX": (_INTEGER, _FLOAT), "MPI_MIN": (_INTEGER, _FLOAT),
    "MPI_SUM": (_INTEGER, _FLOAT, _COMPLEX), "MPI_PROD": (_INTEGER, _FLOAT, _COMPLEX),
    "MPI_LAND": (_INTEGER, _LOGICAL), "MPI_LOR": (_INTEGER, _LOGICAL), "MPI_LXOR": (_INTEGER, _LOGICAL),
    "MPI_BAND": (_INTEGER, _BYTE), "MPI_BOR": (_INTEGER, _BYTE), "MPI_BXOR": (_INTEGER, _BYTE),
}
"""The datatype categories each predefined op is defined for (the MPI standard's table, as MPICH checks)."""
_KINDS: dict[str, str] = {"i": _INTEGER, "u": _INTEGER, "f": _FLOAT, "c": _COMPLEX, "b": _LOGICAL}
_NAMED: dict[str, str] = {"MPI_BYTE": _BYTE, "MPI_PACKED": _BYTE, "MPI_LOGICAL": _LOGICAL}


def _check_category(name: str, datatype: Datatype, rank: int | None, op: str) -> None:
    """Raise ERR_OP when the predefined op ``name`` is not defined for ``datatype``'s category."""
    base = datatype._base
    category = _NAMED.get(base._name) or (None if base._np is None else _KINDS.get(base._np.kind))
    if category is None or category in _TAKES[f"MPI_{name}"]:
        return  # characters and pair types are checked where they are reduced
    fits = [o.removeprefix("MPI_") for o, takes in _TAKES.items() if category in takes]
    raise error(ERR_OP, rank, op, f"{name} is not defined for {base._name}, a {category} datatype",
                f"use {', '.join(fits[:-1])} or {fits[-1]} on {category} data, or another datatype")


def _land(x: Any, y: Any) -> bool:
    return bool(x) and bool(y)


def _lor(x: Any, y: Any) -> bool:
    return bool(x) or bool(y)


def _lxor(x: Any, y: Any) -> bool:
    return bool(x) != bool(y)


OP_NULL = Op._make("MPI_OP_NULL", None, None)
MAX = Op._make("MPI_MAX", _max, ReduceOp.MAX)
MIN = Op._make("MPI_MIN", _min, ReduceOp.MIN)
SUM = Op._make("MPI_SUM", lambda x, y: x + y, ReduceOp.SUM)
PROD = Op._make("MPI_PROD", lambda x, y: x * y, ReduceOp.PRODUCT)
LAND = Op._make("MPI_LAND", _land, ReduceOp.LAND)
BAND = Op._make("MPI_BAND", lambda x, y: x & y, ReduceOp.BAND)
LOR = Op._make("MPI_LOR", _lor, ReduceOp.LOR)
BOR = Op._make("MPI_BOR", lambda x, y: x | y, ReduceOp.BOR)
LXOR = Op._make("MPI_LXOR", _lxor, ReduceOp.LXOR)
BXOR = Op._make("MPI_BXOR", lambda x, y: x ^ y, ReduceOp.BXOR)
MAXLOC = Op._make("MPI_MAXLOC", _maxloc, _pair_op("MAXLOC", np.greater))
MINLOC = Op._make("MPI_MINLOC", _minloc, _pair_op("MINLOC", np.less))
REPLACE = Op._make("MPI_REPLACE", lambda x, y: y,
                   ReduceOp.custom(lambda a, b: b, commutative=False, name="REPLACE", elementwise=True),
                   commute=False)
NO_OP = Op._make("MPI_NO_OP", lambda x, y: x,
                 ReduceOp.custom(lambda a, b: a, commutative=False, name="NO_OP", elementwise=True),
                 commute=False)

OP_NULL._predefined = True
_PREDEFINED = {op._name.removeprefix("MPI_"): op for op in (
    OP_NULL, MAX, MIN, SUM, PROD, LAND, BAND, LOR, BOR, LXOR, BXOR, MAXLOC, MINLOC, REPLACE, NO_OP)}
_USER_OPS = UserSlots("user-defined ops", 32, "Free() ops you no longer use")


def _recreate(function: Callable[..., Any], commute: bool) -> Op:
    """Unpickle a user op: ``Op.Create`` of its function on the receiving side."""
    return Op.Create(function, commute)


def as_object_op(op: object, rank: int, call: str) -> tuple[Callable[[Any, Any], Any], bool, str]:
    """Return (function, commutative, name) for a lowercase collective's ``op``: an Op or a callable."""
    if isinstance(op, Op):
        return op.for_objects(), op._commute, op._name.removeprefix("MPI_")
    if callable(op):
        return op, False, getattr(op, "__name__", "op")
    raise TypeError(f"rank {rank}: {call}: op={op!r} is not an MPI.Op or a function; pass e.g. "
                    "MPI.SUM, or a function op(x, y)")


def as_buffer_op(op: object, datatype: Datatype, rank: int, call: str) -> ReduceOp:
    """Return the ReduceOp for an uppercase collective's ``op`` on ``datatype`` buffers."""
    if not isinstance(op, Op):
        raise TypeError(f"rank {rank}: {call}: op={op!r} is a {type(op).__name__}, not an MPI.Op; "
                        "pass e.g. MPI.SUM, or MPI.Op.Create(function, commute)")
    return op.for_buffer(datatype, rank, call)
