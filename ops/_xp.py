"""Binding the table's formulas to a backend: the array-api-compat namespace
of the array, plus ``erf`` (outside the array API standard; gelu_erf needs it).
A backend gets its own code only here, and only for what the standard lacks."""

from __future__ import annotations

from functools import cache
from typing import Any

import array_api_compat

from gradverify.backends import require_backend_name


class _Namespace:
    def __init__(self, base: Any, erf: Any, erfc: Any) -> None:
        self._base = base
        self.erf = erf
        self.erfc = erfc  # 1 - erf without cancelling where erf is near 1

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._base, name)
        setattr(self, name, value)  # (found directly from then on)
        return value


def backend_name(x: Any) -> str:
    """'numpy', 'torch' or 'jax' (gradverify's backend registry), or a clear error."""
    return require_backend_name(x)


@cache
def _namespace(name: str) -> _Namespace:
    if name == "torch":
        import torch

        return _Namespace(array_api_compat.array_namespace(torch.zeros(0)), torch.special.erf, torch.special.erfc)
    if name == "jax":
        import jax.numpy as jnp
        import jax.scipy.special

        return _Namespace(jnp, jax.scipy.special.erf, jax.scipy.special.erfc)
    import numpy as np

    return _Namespace(array_api_compat.array_namespace(np.zeros(0)), *_numpy_erf())


def _numpy_erf() -> tuple[Any, Any]:
    try:
        from scipy.special import erf, erfc  # scipy is a dependency of jax; optional here
    except ImportError:  # pragma: no cover - exercised only without scipy
        import math

        import numpy as np

        def erf(x: Any) -> Any:
            return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)

        def erfc(x: Any) -> Any:
            return np.vectorize(math.erfc, otypes=[np.asarray(x).dtype])(x)

    return erf, erfc


def namespace(x: Any) -> _Namespace:
    return _namespace(backend_name(x))


def broadcast_axes(x_shape: tuple[int, ...], p_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Axes of x over which an array of shape ``p_shape`` was broadcast (as in
    ``x + p``): the gradient of p sums over them."""
    lead = len(x_shape) - len(p_shape)
    return tuple(range(lead)) + tuple(lead + k for k, s in enumerate(p_shape) if s == 1 and x_shape[lead + k] != 1)
