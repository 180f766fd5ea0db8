from typing import Any, Protocol, SupportsIndex, TypeVar

class SupportsBuffer(Protocol): ...
class SupportsDLPack(Protocol): ...
class SupportsCAI(Protocol): ...

Buffer = Any
Bottom = Any
InPlace = Any
Aint = SupportsIndex
Count = SupportsIndex
Displ = SupportsIndex
Offset = SupportsIndex
TypeSpec = Any
BufSpec = Any
BufSpecB = Any
BufSpecV = Any
BufSpecW = Any
TargetSpec = Any
S = TypeVar("S")
T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V")
