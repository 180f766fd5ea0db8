"""FSDP2's cut of each parameter into shards, made only where a rank looks.

``fully_shard`` builds an ``FSDPParam`` for every parameter, and its
``_init_sharded_param`` (and ``_init_sharded_post_forward_param_metadata``)
cut the parameter into as many chunks as the shard group has ranks
(``_fsdp_common._chunk_with_empty``, ``torch.chunk``), then read two of
them: the rank's own and the first (its size is the padded shard's). A real
process pays one cut of N views per parameter; here the N ranks are threads
of one process, so the spawn makes parameters x N x N views, each a tensor
that passes the dispatch modes of the run (fake tensors, the GPU clock): at
128 ranks and the 8B model's 291 parameters, 4.8 M views, most of the set-up
(docs/predict.md, "How long a prediction takes").

``Chunks`` is the same list, made lazily: item i is ``narrow`` of the same
dimension at the offset and length ``torch.chunk`` gives chunk i (``split``,
which ``chunk`` calls, makes each chunk by that ``narrow``), or
``chunks[0].new_empty(0)`` past the last non-empty chunk, as
``_chunk_with_empty`` pads. The tensors a rank reads are those torch would
have made: the same sizes, strides, storage offsets and values.

Rule 1: torch's function is swapped only in ``_fsdp_param``'s namespace (the
one caller), only while a spawn runs, and put back when it ends.
Rule 2: anything ``Chunks`` does not cover (a dimension of size 0, one chunk,
a tensor subclass other than fake tensors) goes to torch's own function.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch

_FSDP_PARAM = "torch.distributed.fsdp._fully_shard._fsdp_param"
_NAME = "_chunk_with_empty"


class Chunks(Sequence[torch.Tensor]):
    """``_chunk_with_empty(tensor, num_chunks, dim)`` as a list whose items are made when read."""

    def __init__(self, tensor: torch.Tensor, num_chunks: int, dim: int) -> None:
        self.tensor, self.num_chunks, self.dim = tensor, num_chunks, dim
        self.size = tensor.size(dim)
        self.step = -(-self.size // num_chunks)  # torch.chunk's chunk size: the ceiling
        self.filled = -(-self.size // self.step)  # chunks torch.chunk returns; the rest are padding

    def __len__(self) -> int:
        return self.num_chunks

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.num_chunks))]
        i = range(self.num_chunks)[index]  # an IndexError as a list's, negative indices too
        if i >= self.filled:
            return self[0].new_empty(0)
        start = i * self.step
        return self.tensor.narrow(self.dim, start, min(self.step, self.size - start))


def _lazy(torch_chunk_with_empty: Any) -> Any:
    def chunk_with_empty(tensor: torch.Tensor, num_chunks: int, dim: int) -> Any:
        if num_chunks <= 1 or tensor.size(dim) == 0 or not _plain(tensor):
            return torch_chunk_with_empty(tensor, num_chunks, dim)
        return Chunks(tensor, num_chunks, dim)

    chunk_with_empty.torch_own = torch_chunk_with_empty  # type: ignore[attr-defined]
    return chunk_with_empty


def _plain(tensor: torch.Tensor) -> bool:
    """A tensor whose ``chunk`` is ``narrow``s: a plain tensor, a parameter or a fake tensor."""
    kind = type(tensor)
    return kind in (torch.Tensor, torch.nn.Parameter) or kind.__name__ == "FakeTensor"


def install() -> Any:
    """Swap in the lazy cut once FSDP2 is imported; the module's namespace, else None (Rule 1)."""
    module = sys.modules.get(_FSDP_PARAM)
    torch_own = getattr(module, _NAME, None)
    if module is None or not callable(torch_own):
        return None
    if getattr(torch_own, "torch_own", None) is None:  # not already ours
        setattr(module, _NAME, _lazy(torch_own))
    return module


def restore(module: Any) -> None:
    """Put torch's ``_chunk_with_empty`` back in ``_fsdp_param``."""
    ours = getattr(module, _NAME, None)
    torch_own = getattr(ours, "torch_own", None)
    if torch_own is not None:
        setattr(module, _NAME, torch_own)
