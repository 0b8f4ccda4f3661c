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


_TRACED = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
)


class JaxSparse(SparseArray):
    layout = "bcoo"

    def __init__(self, x: Any) -> None:
        if not x.unique_indices:
            try:
                y = x.sum_duplicates()  # (duplicates summed: each element once in the pattern)
            except _TRACED:
                pass  # (inside a compiled call: read as it is)
            else:
                self.coalesced_here = int(y.nse) != int(x.nse)
                x = y
        self._x = x
        self.values = x.data
        self.shape = tuple(int(s) for s in x.shape)
        self.nnz = int(x.nse)

    @property
    def key(self) -> Any:  # type: ignore[override]
        try:
            return ("bcoo", self.shape, np.asarray(self._x.indices).tobytes())
        except _TRACED:
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

    def read(self, out: Any) -> Any:
        try:
            where = self._positions()
        except _TRACED:
            return out.data
        return out.todense().reshape(-1)[where].reshape(self.values.shape)
