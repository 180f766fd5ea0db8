"""What the collective conformance tests share: sizes, a latency model's numbers, order-sensitive ops."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from simcluster.ops import ReduceOp

WORLD_SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16]
"""Every size up to 9 (powers of two and not) and 16."""
ALPHA = 2.0**-20
BETA = 2.0**-30
"""AlphaBeta numbers that are powers of two, so expected times compare exactly."""


def _compose(f: Any, g: Any) -> Any:
    """Compose affine maps ``x -> a*x + b`` stored as ``a + b*1j``: first ``f``, then ``g``."""
    return f.real * g.real + 1j * (f.imag * g.real + g.imag)


AFFINE = ReduceOp.custom(_compose, commutative=False, name="affine", elementwise=True)
CONCAT = ReduceOp.custom(operator.add, commutative=False, name="concat")
MATMUL = ReduceOp.custom(np.matmul, commutative=False)
SHEARS = [np.array([[1, 1], [0, 1]]), np.array([[1, 0], [1, 1]]), np.array([[2, 1], [1, 1]])]
"""Matrices whose product depends on the order: non-commutative reductions show any reordering."""


def assert_same(received: Any, sent: Any) -> None:
    """Assert that a received item is the sent one: same type, and for arrays same dtype, shape and values."""
    assert type(received) is type(sent)
    if isinstance(sent, np.ndarray):
        assert received.dtype == sent.dtype and received.shape == sent.shape
        np.testing.assert_array_equal(received, sent)
    else:
        assert received == sent
