"""``mpi4py.typing`` under ``simcluster mpirun``: the type aliases of mpi4py's buffer arguments.

The same names as mpi4py 4.1's, over ``simcluster.MPI``'s classes, so annotations written
against mpi4py (``BufSpec``, ``TargetSpec``, ...) import and mean the same here.
"""

from __future__ import annotations

import sys  # noqa: F401 - mpi4py.typing has it (its checks of the version)
from typing import Any, Dict, List, Optional, Protocol, Sequence, SupportsIndex, Tuple, TypeVar, Union

from .MPI import BottomType, Datatype, InPlaceType  # type: ignore[attr-defined]

__all__ = ["SupportsBuffer", "SupportsDLPack", "SupportsCAI", "Buffer", "Bottom", "InPlace",
           "Aint", "Count", "Displ", "Offset", "TypeSpec", "BufSpec", "BufSpecB", "BufSpecV",
           "BufSpecW", "TargetSpec"]


class SupportsBuffer(Protocol):
    """Python's buffer protocol (``memoryview(obj)`` works)."""

    def __buffer__(self, flags: int, /) -> memoryview:
        """Create a buffer from a Python object."""


class SupportsDLPack(Protocol):
    """The DLPack protocol."""

    def __dlpack__(self, /, *, stream: Optional[Union[int, Any]] = None) -> object:
        """Export the array as a DLPack capsule."""

    def __dlpack_device__(self) -> Tuple[int, int]:
        """Return the device type and id."""


class SupportsCAI(Protocol):
    """The CUDA array interface."""

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """The CUDA array interface."""


Buffer = Union[SupportsBuffer, SupportsDLPack, SupportsCAI]
Bottom = Union[BottomType, None]
InPlace = Union[InPlaceType, None]
Aint = SupportsIndex
Count = SupportsIndex
Displ = SupportsIndex
Offset = SupportsIndex
TypeSpec = Union[Datatype, str]
BufSpec = Union[Buffer, Tuple[Buffer, Count], Tuple[Buffer, TypeSpec],
                Tuple[Buffer, Count, TypeSpec], Tuple[Bottom, Count, Datatype], List[Any]]
BufSpecB = Union[Buffer, Tuple[Buffer, Count], Tuple[Buffer, TypeSpec],
                 Tuple[Buffer, Count, TypeSpec], List[Any]]
BufSpecV = Union[
    Buffer, Tuple[Buffer, Sequence[Count]], Tuple[Buffer, Tuple[Sequence[Count], Sequence[Displ]]],
    Tuple[Buffer, TypeSpec], Tuple[Buffer, Sequence[Count], TypeSpec],
    Tuple[Buffer, Tuple[Sequence[Count], Sequence[Displ]], TypeSpec],
    Tuple[Buffer, Sequence[Count], Sequence[Displ], TypeSpec],
    Tuple[Bottom, Tuple[Sequence[Count], Sequence[Displ]], Datatype],
    Tuple[Bottom, Sequence[Count], Sequence[Displ], Datatype], List[Any]]
BufSpecW = Union[
    Tuple[Buffer, Sequence[Datatype]],
    Tuple[Buffer, Tuple[Sequence[Count], Sequence[Displ]], Sequence[Datatype]],
    Tuple[Buffer, Sequence[Count], Sequence[Displ], Sequence[Datatype]],
    Tuple[Bottom, Tuple[Sequence[Count], Sequence[Displ]], Sequence[Datatype]],
    Tuple[Bottom, Sequence[Count], Sequence[Displ], Sequence[Datatype]], List[Any]]
TargetSpec = Union[Displ, Tuple[()], Tuple[Displ], Tuple[Displ, Count],
                   Tuple[Displ, Count, TypeSpec], List[Any]]

S = TypeVar("S")
T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V")
