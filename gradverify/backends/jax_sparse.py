"""jax's ``BCOO`` arrays as their specified values (``data``), the pattern
(``indices``) held fixed: jax differentiates a BCOO with respect to its data
alone, so the values are the whole question."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from .base import SparseArray

__all__ = ["JaxSparse", "is_sparse"]


def is_sparse(x: Any) -> bool:
    return isinstance(x, jsparse.BCOO)


class JaxSparse(SparseArray):
    layout = "bcoo"

    def __init__(self, x: Any) -> None:
        self._x = x
        self.values = x.data
        self.shape = tuple(int(s) for s in x.shape)
        self.nnz = int(x.nse)

    @property
    def key(self) -> Any:  # type: ignore[override]
        try:
            return ("bcoo", self.shape, np.asarray(self._x.indices).tobytes())
        except jax.errors.TracerArrayConversionError:
            return None  # (inside a compiled call: the pattern is not known yet)

    def rebuild(self, values: Any) -> Any:
        x = self._x
        return jsparse.BCOO(
            (values, x.indices), shape=x.shape, indices_sorted=x.indices_sorted, unique_indices=x.unique_indices
        )

    def numbered(self) -> np.ndarray:
        n = int(np.prod(self.values.shape))
        with jax.enable_x64(True):
            numbered = jnp.arange(1, n + 1, dtype=jnp.float64).reshape(self.values.shape)
            return np.asarray(self.rebuild(numbered).todense()).reshape(-1)
