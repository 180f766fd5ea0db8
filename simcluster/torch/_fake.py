"""Shape-only execution: ``spawn(..., tensors="fake")`` and ``simcluster torchrun --fake``.

Every rank's floating-point tensors are torch ``FakeTensor``s: shape, dtype,
stride and device, no data. A model of any size is built without allocating
its weights; its forward, backward and optimizer steps run on shapes; the
backend's collectives carry fake tensors (in process, as ``wire.ObjectBuffer``s
holding a new fake tensor of the same shape: no bytes move) and are timed from
their ``nbytes``, as a data-carrying run with the same shapes is.

Rule 1: an op runs on shapes when one of its tensor inputs is fake, or when it
makes a floating-point (or complex) tensor out of nothing (``torch.empty``,
``randn``, ``zeros``, a parameter's initialisation). Everything else runs
for real: integer and bool bookkeeping (a DeviceMesh's rank map, token ids,
``torch.tensor([...])`` of known numbers) keeps its values, so the code that
reads them works as written.
Rule 2: a value that depends on fake data is never invented: reading one
(``.item()``, ``.tolist()``, ``float(t)``, ``torch.equal``, ``if t:``) raises
``UnknownValueError`` naming the rank and the call; printing a fake tensor
shows torch's ``FakeTensor(..., size=(...))``, no value.
Rule 3: random ops on fake tensors draw nothing: their outputs are computed on
the meta device (shape, dtype, stride) and keep the input's device, and the
rank's generators are left as they were.
Rule 4: in a torch build without CUDA, making a tensor on ``"cuda"`` is refused
with a clear error: a fake CUDA tensor can be made and multiplied there, but
autograd recording an op on one that requires grad aborts the whole process
("PyTorch is not linked with support for cuda devices").
Rule 5: one ``FakeTensorMode`` per spawn (``Shapes``), shared by the ranks,
since a collective hands one rank's fake tensors to another; each rank enters
its own ``ShapeOnlyMode`` (dispatch modes are per thread, and each rank is a
thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

TENSORS = ("real", "fake")
"""The values of ``spawn(tensors=...)``: data-carrying tensors, or shapes only."""

_SEEDED = torch.Tag.nondeterministic_seeded
_FAKE = torch._C._TorchDispatchModeKey.FAKE

_CALLS: dict[str, str] = {
    "_local_scalar_dense": "tensor.item() (also float(t), int(t), bool(t), t.tolist())",
    "equal": "torch.equal(a, b)",
    "nonzero": "t.nonzero() (its number of rows)",
    "masked_select": "t[mask] (its number of elements)",
    "unique": "t.unique() (its number of elements)",
}
"""What a user wrote, for the aten ops whose results depend on data."""


class UnknownValueError(RuntimeError):
    """A shape-only run read a value that depends on data no rank holds."""


def check(tensors: object) -> str:
    """Return ``tensors`` (``"real"`` or ``"fake"``), or raise a clear error."""
    if tensors not in TENSORS:
        raise ValueError(f"spawn(tensors={tensors!r}): tensors must be 'real' (tensors carry data) "
                         "or 'fake' (shape-only: shapes, dtypes and devices, no data)")
    return str(tensors)


def is_fake(t: object) -> bool:
    """Whether ``t`` is a tensor of a shape-only run (a torch ``FakeTensor``)."""
    return isinstance(t, FakeTensor)


class Shapes:
    """One spawn's shape-only state: the ``FakeTensorMode`` that every rank's fake tensors share.

    A context manager around the run: in a torch build without CUDA it sets
    what ``FakeTensorMode.__enter__`` sets for the process (``torch.tensor``
    lifts CPU tensors only; CUDA's device guard is a no-op) and restores it
    after; ``rank(r)`` then puts rank r's thread under the fake mode.
    """

    def __init__(self) -> None:
        # allow_non_fake_inputs: a real tensor (an index, a known constant) meeting a fake one
        # in an op is read as a fake of its own shape
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self._lift: bool | None = None

    def __enter__(self) -> Shapes:
        if self.fake.avoid_device_init:
            self._lift = torch._C._only_lift_cpu_tensors()
            torch._C._set_only_lift_cpu_tensors(True)
            torch._C._ensureCUDADeviceGuardSet()
        _pickle_objects_for_real()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lift is not None:
            torch._C._set_only_lift_cpu_tensors(self._lift)

    @contextlib.contextmanager
    def rank(self, rank: int) -> Iterator[None]:
        """Run rank ``rank``'s program (on its own thread) on shapes."""
        previous = torch._C._unset_dispatch_mode(_FAKE)
        torch._C._set_dispatch_mode(self.fake)  # below every user mode, as torch keeps it
        try:
            with ShapeOnlyMode(self.fake, rank):
                yield
        finally:
            torch._C._unset_dispatch_mode(_FAKE)
            if previous is not None:
                torch._C._set_dispatch_mode(previous)

    def enter(self, rank: int) -> None:
        """Put the calling rank's thread on shapes until it ends (``torchrun --fake``).

        Dispatch modes are per thread, and each rank's thread is its own and
        ends with the rank, so nothing is left to undo.
        """
        torch._C._set_dispatch_mode(self.fake)
        ShapeOnlyMode(self.fake, rank).__enter__()


class ShapeOnlyMode(TorchDispatchMode):  # type: ignore[misc]  # torch is not followed
    """One rank's shape-only dispatch (Rules 1-4 of this module), above the fake mode."""

    def __init__(self, fake: FakeTensorMode, rank: int) -> None:
        super().__init__()
        self.fake = fake
        self.rank = rank

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and _refused(device):
            raise RuntimeError(
                f"rank {self.rank}: shape-only run: {func.__name__.split('.')[0]}(device="
                f"{str(device)!r}): this torch build ({torch.__version__}) has no CUDA, and "
                "autograd on a fake CUDA tensor aborts the process in such a build; run the "
                "program with device='cpu' (the virtual times do not depend on it), or in a "
                "torch build with CUDA")
        tensors = _tensors(args, kwargs)
        fake = any(isinstance(t, FakeTensor) for t in tensors)
        if not fake and not (not tensors and _makes_floats(func, args, kwargs)):
            with unset_fake_temporarily():  # Rule 1: bookkeeping runs for real
                return func(*args, **kwargs)
        if _tags_of(func)[0]:
            return self._on_meta(func, args, kwargs)
        try:
            return func(*args, **kwargs)  # on to the fake mode below
        except (DataDependentOutputException, DynamicOutputShapeException):
            name = func.__name__.split(".")[0]
            raise UnknownValueError(
                f"rank {self.rank}: shape-only run: the value of {_CALLS.get(name, name)} is "
                f"unknown (aten.{func.__name__} on a tensor without data); run with "
                "tensors='real' to read values") from None

    def _on_meta(self, func: Any, args: Any, kwargs: Any) -> Any:
        """A random op: its outputs' shapes from the meta device, nothing drawn (Rule 3)."""
        device = kwargs.get("device")
        tensors = _tensors(args, kwargs)
        if tensors:
            device = tensors[0].device

        def to_meta(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
            return a
        meta_kwargs = {k: ("meta" if k == "device" else v) for k, v in kwargs.items()}
        with unset_fake_temporarily():
            out = func(*tree_map(to_meta, args), **tree_map(to_meta, meta_kwargs))
        device = torch.device("cpu") if device is None else torch.device(device)
        if _tags_of(func)[1]:
            return args[0]  # in place (uniform_, normal_): the tensor itself, unchanged

        def to_fake(t: Any) -> Any:
            if isinstance(t, torch.Tensor):
                return FakeTensor(self.fake, t, device)
            return t
        return tree_map(to_fake, out)


def _pickle_objects_for_real() -> None:
    """Make torch's object collectives (``send_object_list``, ``broadcast_object_list``, ...; the
    pipeline schedules send their stages' shapes with them) pickle into a real byte tensor.

    Under a fake mode, ``torch.UntypedStorage.from_buffer`` (which ``_object_to_tensor`` calls)
    makes a storage on the meta device, and setting a CPU tensor to it fails, so the pickling runs
    with the fake mode unset. Installed once, for the process; outside a fake mode it changes
    nothing.
    """
    import torch.distributed.distributed_c10d as c10d

    original = c10d._object_to_tensor
    if getattr(original, "_simcluster_real", False):
        return

    def object_to_tensor(*args: Any, **kwargs: Any) -> Any:
        with unset_fake_temporarily():
            return original(*args, **kwargs)
    object_to_tensor._simcluster_real = True  # type: ignore[attr-defined]
    c10d._object_to_tensor = object_to_tensor


def _refused(device: Any) -> bool:
    """Whether a shape-only run refuses tensors on ``device``: CUDA in a torch build without it."""
    kind = device.type if isinstance(device, torch.device) else str(device).partition(":")[0]
    return kind == "cuda" and not torch.cuda.is_available()


def _tensors(args: Any, kwargs: dict[str, Any]) -> list[Any]:
    """The tensors among an op's arguments, in ``tree_flatten`` order.

    Every op runs through here, so it scans flat: an aten op's tensors are
    arguments, or items of one list argument (``Tensor[]``, ``Tensor?[]``);
    anything nested deeper goes to ``tree_flatten``.
    """
    found = []
    for group in (args, kwargs.values()):
        for a in group:
            if isinstance(a, torch.Tensor):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, torch.Tensor):
                        found.append(b)
                    elif isinstance(b, (list, tuple, dict)):
                        return _nested_tensors(args, kwargs)
            elif isinstance(a, dict):
                return _nested_tensors(args, kwargs)
    return found


def _nested_tensors(args: Any, kwargs: dict[str, Any]) -> list[Any]:
    return [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]


_TAGS: dict[Any, tuple[bool, bool]] = {}
"""Per op (``OpOverload``): (draws random numbers, returns its first argument in place).

``func.tags`` builds a new list on every read, and every op asks."""


def _tags_of(func: Any) -> tuple[bool, bool]:
    tags = _TAGS.get(func)
    if tags is None:
        read = func.tags
        tags = _TAGS[func] = (_SEEDED in read, torch.Tag.inplace_view in read or _mutates_first(func))
    return tags


def _mutates_first(func: Any) -> bool:
    schema = func._schema
    return bool(schema.arguments) and schema.arguments[0].alias_info is not None \
        and schema.arguments[0].alias_info.is_write


def _makes_floats(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``func``, called without tensor inputs, makes a floating-point or complex tensor."""
    returns = func._schema.returns
    if len(returns) != 1 or not isinstance(returns[0].type, torch.TensorType):
        return False
    dtype = kwargs.get("dtype")
    if dtype is None:
        name = func.__name__.split(".")[0]
        if name == "full":  # full(size, 1.5) makes floats, full(size, 7) integers
            return len(args) > 1 and isinstance(args[1], (float, complex))
        return name in _FLOAT_DEFAULT  # arange(5): integers
    return bool(dtype.is_floating_point or dtype.is_complex)


_FLOAT_DEFAULT = frozenset({
    "empty", "empty_strided", "zeros", "ones", "rand", "randn", "normal", "linspace", "logspace",
    "eye",
})
"""Factories whose default dtype is the default floating-point one."""
