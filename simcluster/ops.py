"""Reduction operators: the built-in ``ReduceOp`` members and user-defined ops.

A ``ReduceOp`` knows three things the reduction collectives need: whether it
fits a payload (``check``, called at the collective so the error names the rank
and the call), how to combine two values (``apply``, always ``a op b`` with
``a`` from the lower ranks), and how to finish (``finalize``: AVG divides by
the count, every other op leaves the value alone).

Payloads of the built-in ops: Python numbers (bool, int, float, complex),
numpy scalars and numpy arrays of a numeric dtype. Which dtypes fit:

==================  ==============================================
SUM, PRODUCT        bool, integer, float, complex
MIN, MAX            bool, integer, float (not complex)
BAND, BOR, BXOR     bool, integer
LAND, LOR, LXOR     bool, integer, float, complex
AVG                 Python numbers, numpy scalars, float or complex arrays
==================  ==============================================

AVG refuses integer and bool *arrays*: their average is not an integer and the
result is stored back into the caller's array in place. Results keep the
payload's type: arrays keep dtype and shape (numpy's rules, so SUM of bool
arrays is a logical or), logical ops on numpy values give 0/1 of the input
dtype, on Python numbers a ``bool``; SUM of Python ints is an ``int``.

Arrays of other libraries (torch, CuPy, array_api_strict) are reduced by their
own array-API namespace (``xp.add``, ``xp.minimum``, ``xp.logical_and``, ...;
AVG by ``xp.divide``), never through numpy, and keep their type, dtype and
device. Their dtypes are checked by kind as above (bfloat16 counts as float).
On bool arrays SUM, MAX and AVG are a logical or, PRODUCT and MIN a logical
and, as numpy computes them.

User ops (``ReduceOp.custom(fn)``) accept any payload and call ``fn(a, b)``.
They are not split into pieces by the chunking algorithms unless created with
``elementwise=True`` (MPI user ops are elementwise; a Python function on whole
objects, such as a 2x2 matrix product, is not).

Rule 1: ``apply`` never mutates its inputs; it returns a new value.
Rule 2: ``apply(a, b)`` keeps operand order, so non-commutative ops reduce in
rank order ``x0 op x1 op ... op x(p-1)`` whenever the algorithm keeps it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, ClassVar, Final

import numpy as np

from . import arrays as _arrays

__all__ = ["ALIASES", "ReduceOp", "as_op"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()

_ANY_NUMBER: Final = frozenset("biufc")
_REAL: Final = frozenset("biuf")
_INTEGER: Final = frozenset("biu")
_NOT_NUMERIC_FIX: Final = "pass numbers or numeric arrays, or use ReduceOp.custom(fn)"
_PY_NUMBERS: Final = frozenset({int, float, bool, complex})
_ON_BOOL: Final = {"add": "logical_or", "maximum": "logical_or", "multiply": "logical_and",
                   "minimum": "logical_and"}
"""What numpy's ufuncs compute on bool arrays, in array-API names (which refuse bool there)."""

ALIASES: Final = {"PROD": "PRODUCT", "AND": "BAND", "OR": "BOR", "MEAN": "AVG"}
"""Other names ``as_op`` accepts (mpi4py's PROD, ignite's AND/OR)."""


def _py_min(a: Any, b: Any) -> Any:
    return a if a <= b or a != a else b  # ``a != a``: a NaN wins, as numpy.minimum


def _py_max(a: Any, b: Any) -> Any:
    return a if a >= b or a != a else b


def _kind(obj: object) -> tuple[str | None, str]:
    """Return ``(numpy dtype kind or None, how to name the payload's type in errors)``."""
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj.dtype.kind, f"dtype {obj.dtype}"
    if _arrays.is_array(obj):  # torch, CuPy, ...: kinds by the array API's isdtype
        return _arrays.kind(obj), f"dtype {_arrays.dtype_name(obj)}"
    for py, kind in ((bool, "b"), (int, "i"), (float, "f"), (complex, "c")):
        if isinstance(obj, py):
            return kind, py.__name__
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and hasattr(obj, "__array_namespace__"):
        try:
            return np.dtype(dtype).kind, f"dtype {dtype}"
        except TypeError:
            return "?", f"dtype {dtype}"  # an array library with its own dtypes: not checked
    return None, type(obj).__name__


class ReduceOp:
    """A reduction operator: ``ReduceOp.SUM``, ..., or ``ReduceOp.custom(fn)``.

    Attributes:
        name: ``"SUM"`` for the built-ins, the function's name for user ops.
        commutative: whether ``a op b == b op a``; algorithms that would
            reorder operands keep rank order for ops where this is false.
        elementwise: whether the op may be applied to pieces of an array
            (true for the built-ins), which the chunking algorithms need.
        fn: a user op's function (None for the built-ins).
        py: a built-in's function on Python numbers (None for user ops).
        ufunc: a built-in's numpy ufunc (None for user ops and AVG).
        logical: whether the result is a truth value, cast back to the input dtype.
    """

    __slots__ = ("name", "commutative", "elementwise", "py", "ufunc", "_kinds", "_fix", "logical",
                 "fn", "_xp")

    SUM: ClassVar[ReduceOp]
    PRODUCT: ClassVar[ReduceOp]
    MIN: ClassVar[ReduceOp]
    MAX: ClassVar[ReduceOp]
    BAND: ClassVar[ReduceOp]
    BOR: ClassVar[ReduceOp]
    BXOR: ClassVar[ReduceOp]
    LAND: ClassVar[ReduceOp]
    LOR: ClassVar[ReduceOp]
    LXOR: ClassVar[ReduceOp]
    AVG: ClassVar[ReduceOp]

    name: str
    commutative: bool
    elementwise: bool
    py: Callable[[Any, Any], Any] | None  # built-ins: on Python numbers
    ufunc: np.ufunc | None  # built-ins: on numpy values
    _kinds: frozenset[str]  # numpy dtype kinds the op is defined for
    _fix: str  # what to do when the dtype does not fit
    logical: bool  # result is a truth value, cast back to the input dtype
    fn: Callable[[Any, Any], Any] | None  # user ops
    _xp: str  # built-ins: the array-API function, for arrays of other libraries

    def __init__(self, name: str, *, commutative: bool = True, elementwise: bool = True,
                 py: Callable[[Any, Any], Any] | None = None, ufunc: np.ufunc | None = None,
                 kinds: frozenset[str] = _ANY_NUMBER, fix: str = "", logical: bool = False,
                 fn: Callable[[Any, Any], Any] | None = None) -> None:
        """Build an op; use the members or :meth:`custom` rather than calling this."""
        set_ = object.__setattr__
        xp = "" if ufunc is None else ufunc.__name__  # numpy's ufunc names are the array API's
        for slot, value in (("name", name), ("commutative", commutative), ("elementwise", elementwise),
                            ("py", py), ("ufunc", ufunc), ("_kinds", kinds), ("_fix", fix),
                            ("logical", logical), ("fn", fn), ("_xp", xp)):
            set_(self, slot, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ReduceOp is immutable; make a new one with ReduceOp.custom(fn) "
                             f"instead of setting {name!r}")

    @classmethod
    def custom(cls, fn: Callable[[Any, Any], Any], commutative: bool = True, name: str | None = None,
               *, elementwise: bool = False) -> ReduceOp:
        """Return a user op that combines two values with ``fn(a, b)``.

        Args:
            fn: binary function returning a new value; ``a`` comes from lower ranks.
            commutative: say False when ``fn(a, b) != fn(b, a)``; results then
                follow rank order ``x0 op x1 op ... op x(p-1)``.
            name: shown in calls and errors; defaults to ``fn.__name__``.
            elementwise: True when ``fn`` works on any slice of array payloads
                (as MPI user ops do), so chunking algorithms may split arrays.

        Raises:
            TypeError: ``fn`` is not callable.
        """
        if not callable(fn):
            raise TypeError(f"ReduceOp.custom(fn={fn!r}): fn must be callable; pass a function "
                            "fn(a, b) -> value")
        label = name if name is not None else getattr(fn, "__name__", type(fn).__name__)
        return cls(label, commutative=commutative, elementwise=elementwise, fn=fn)

    @property
    def is_custom(self) -> bool:
        """True for ops made by :meth:`custom`."""
        return self.fn is not None

    # ---- what the collectives call ----

    def check(self, obj: object, rank: int, call: str) -> None:
        """Raise TypeError when this op is not defined for ``obj``'s type.

        The message names the rank, the call, the op and the dtype, e.g.
        ``rank 0: all_reduce(op=BAND): BAND is not defined for dtype float64;
        use an integer or bool dtype, or another op``. User ops accept anything.
        """
        if self.fn is not None:
            return
        t = type(obj)  # the common cases first, with nothing to say: no message is built
        if t is np.ndarray:
            kind = obj.dtype.kind  # type: ignore[attr-defined]
            if kind in self._kinds and not (self is ReduceOp.AVG and kind in _INTEGER):
                return
        elif (t is float and "f" in self._kinds) or (t is int and "i" in self._kinds):
            return
        kind, what = _kind(obj)
        if kind == "?":
            return
        if kind is None or kind not in _ANY_NUMBER:
            raise TypeError(f"rank {rank}: {call}: {self.name} is not defined for {what}; "
                            f"{_NOT_NUMERIC_FIX}")
        if kind not in self._kinds:
            raise TypeError(f"rank {rank}: {call}: {self.name} is not defined for {what}; {self._fix}")
        if self is ReduceOp.AVG and kind in _INTEGER and not isinstance(obj, (np.generic, int, float)):
            raise TypeError(f"rank {rank}: {call}: AVG is not defined for {what} arrays, whose "
                            "average is stored in place; use a float dtype, or SUM and divide")

    def apply(self, a: Any, b: Any) -> Any:
        """Return ``a op b`` as a new value (the inputs are never modified)."""
        if self.fn is None and type(a) in _PY_NUMBERS and type(b) in _PY_NUMBERS:
            return self.py(a, b)  # type: ignore[misc]
        ufunc = self.ufunc
        if type(a) is np.ndarray and type(b) is np.ndarray and ufunc is not None and self.fn is None \
                and not self.logical:  # the common case of reductions over arrays, early
            value = ufunc(a, b)
            return value if type(value) is np.ndarray else np.asarray(value)  # keep 0-d arrays arrays
        if self.fn is not None:
            value = self.fn(a, b)
            if isinstance(a, np.ndarray) and isinstance(value, np.generic):
                value = np.asarray(value)  # numpy turns 0-d results into scalars; keep the array
            return value
        assert ufunc is not None and self.py is not None
        if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
            value = ufunc(a, b)
            dtype = a.dtype if isinstance(a, (np.ndarray, np.generic)) else b.dtype
            if self.logical:
                value = value.astype(dtype)
            if isinstance(a, np.ndarray) and not isinstance(value, np.ndarray):
                value = np.asarray(value)  # ufuncs turn 0-d arrays into scalars; keep the array
            return value
        if type(a) in _PY_NUMBERS and type(b) in _PY_NUMBERS:
            return self.py(a, b)
        if _arrays.is_array(a) or _arrays.is_array(b):
            return self._apply_xp(a, b)
        return self.py(a, b)

    def _apply_xp(self, a: Any, b: Any) -> Any:
        """Return ``a op b`` for arrays of another library, computed by its own namespace."""
        like = a if _arrays.is_array(a) else b
        xp = _arrays.namespace(like)
        dtype = like.dtype
        if not _arrays.is_array(a):
            a = xp.asarray(a, dtype=dtype, device=_arrays.device(like))
        if not _arrays.is_array(b):
            b = xp.asarray(b, dtype=dtype, device=_arrays.device(like))
        name = self._xp
        if xp.isdtype(dtype, "bool"):
            name = _ON_BOOL.get(name, name)
        elif self.logical:  # numpy's logical ufuncs take numbers: nonzero is true
            a, b = a != 0, b != 0
        value = getattr(xp, name)(a, b)
        return value if value.dtype == dtype else xp.astype(value, dtype)

    def finalize(self, value: Any, count: int) -> Any:
        """Return the reduction of ``count`` values: AVG divides by ``count``; others return ``value``."""
        if self is not ReduceOp.AVG:
            return value
        if isinstance(value, np.ndarray):
            out = np.empty_like(value)
            np.true_divide(value, count, out=out)
            return out
        if _arrays.is_array(value):
            return _arrays.namespace(value).divide(value, count)
        return value / count

    # ---- protocol ----

    def __repr__(self) -> str:
        if self.fn is None:
            return f"ReduceOp.{self.name}"
        return f"ReduceOp.custom({self.name}, commutative={self.commutative})"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self.fn is None:
            return (_builtin, (self.name,))  # members stay singletons across processes
        return (_custom, (self.fn, self.commutative, self.name, self.elementwise))


def _builtin(name: str) -> ReduceOp:
    op: ReduceOp = getattr(ReduceOp, name)
    return op


def _custom(fn: Callable[[Any, Any], Any], commutative: bool, name: str, elementwise: bool) -> ReduceOp:
    return ReduceOp.custom(fn, commutative, name, elementwise=elementwise)


def _logical(fn: Callable[[bool, bool], bool]) -> Callable[[Any, Any], bool]:
    return lambda a, b: fn(bool(a), bool(b))


_INT_FIX: Final = "use an integer or bool dtype, or another op"
_BUILTINS: Final[tuple[ReduceOp, ...]] = (
    ReduceOp("SUM", py=operator.add, ufunc=np.add),
    ReduceOp("PRODUCT", py=operator.mul, ufunc=np.multiply),
    ReduceOp("MIN", py=_py_min, ufunc=np.minimum, kinds=_REAL, fix="use a real dtype, or another op"),
    ReduceOp("MAX", py=_py_max, ufunc=np.maximum, kinds=_REAL, fix="use a real dtype, or another op"),
    ReduceOp("BAND", py=operator.and_, ufunc=np.bitwise_and, kinds=_INTEGER, fix=_INT_FIX),
    ReduceOp("BOR", py=operator.or_, ufunc=np.bitwise_or, kinds=_INTEGER, fix=_INT_FIX),
    ReduceOp("BXOR", py=operator.xor, ufunc=np.bitwise_xor, kinds=_INTEGER, fix=_INT_FIX),
    ReduceOp("LAND", py=_logical(operator.and_), ufunc=np.logical_and, logical=True),
    ReduceOp("LOR", py=_logical(operator.or_), ufunc=np.logical_or, logical=True),
    ReduceOp("LXOR", py=_logical(operator.ne), ufunc=np.logical_xor, logical=True),
    ReduceOp("AVG", py=operator.add, ufunc=np.add),
)
for _op in _BUILTINS:
    setattr(ReduceOp, _op.name, _op)
del _op

_BY_NAME: Final[dict[str, ReduceOp]] = {op.name: op for op in _BUILTINS}


def as_op(op: object) -> ReduceOp:
    """Return the ReduceOp that ``op`` names: None (SUM), a ReduceOp, or a name in any case.

    Names are the members' (``"sum"``, ``"SUM"``, ``"band"``, ...) plus the
    aliases ``PROD``, ``AND``, ``OR`` and ``MEAN`` used by mpi4py and ignite.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
        TypeError: anything else (a plain function must be wrapped with ``ReduceOp.custom``).
    """
    if op is None:
        return ReduceOp.SUM
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str):
        key = op.upper()
        found = _BY_NAME.get(ALIASES.get(key, key))
        if found is None:
            raise ValueError(f"op={op!r} is not a reduction op; valid: {', '.join(sorted(_BY_NAME))} "
                             "(any case), or ReduceOp.custom(fn)")
        return found
    hint = "wrap it as ReduceOp.custom(fn, commutative=...)" if callable(op) else \
        "pass e.g. ReduceOp.SUM or 'sum'"
    raise TypeError(f"op={op!r} is a {type(op).__name__}, not a ReduceOp; {hint}")
