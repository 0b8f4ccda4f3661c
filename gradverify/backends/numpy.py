"""numpy: no AD. Modes come only from a ``gv.Rule`` (handled by the checker)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import ModeUnavailable
from .base import Backend

__all__ = ["NumpyBackend"]

_NO_AD = (
    "numpy has no automatic differentiation; wrap the function as "
    "gv.Rule(fn, jvp=..., vjp=...) to check hand-written rules"
)


class NumpyBackend(Backend):
    name = "numpy"
    differentiates = False

    def dtype_name(self, x: Any) -> str:
        return np.asarray(x).dtype.name

    def is_floating(self, x: Any) -> bool:
        return np.issubdtype(np.asarray(x).dtype, np.floating)

    def is_complex(self, x: Any) -> bool:
        return np.issubdtype(np.asarray(x).dtype, np.complexfloating)

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.array(x, copy=True)

    def readback(self, x: Any, buffer: np.ndarray) -> np.ndarray:
        return buffer if x is buffer else np.array(x, copy=True)

    def from_numpy(self, a: np.ndarray, like: Any, dtype_name: str) -> Any:
        return np.asarray(a, dtype=dtype_name)

    def to_working(self, x: Any) -> Any:
        return np.array(x, dtype=np.float64 if np.issubdtype(np.asarray(x).dtype, np.floating) else None, copy=True)

    def from_working(self, a: Any, like: Any, dtype_name: str, copy: bool = True) -> Any:
        return np.array(a, dtype=dtype_name, copy=copy or None)

    def derivative(self, d: Any) -> Any:
        return np.asarray(d, dtype=np.float64)

    def jvp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        raise ModeUnavailable(_NO_AD)

    def vjp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangent: Any) -> list[Any]:
        raise ModeUnavailable(_NO_AD)

    def vjp_function(self, fn: Callable, wrt: Sequence[int], cotangent: Any) -> Callable:
        raise ModeUnavailable(_NO_AD)

    def jvp_function(self, fn: Callable, wrt: Sequence[int], tangents: Sequence[Any]) -> Callable:
        raise ModeUnavailable(_NO_AD)

    def concat_flat(self, parts: Sequence[Any]) -> Any:
        return np.concatenate([np.asarray(p).reshape(-1) for p in parts])
