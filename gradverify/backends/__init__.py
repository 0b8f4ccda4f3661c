"""Backends behind one small protocol, chosen from the argument types and
imported lazily: ``import gradverify`` never imports torch or jax. An array
of a framework can only exist once the framework is imported, so we look the
framework up in ``sys.modules`` instead of importing it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import ArgumentTypeError, explain
from .base import Backend
from .numpy import NumpyBackend
from .session import compiling

__all__ = ["BACKENDS", "Backend", "backend_name_of", "backend_of", "compiling", "require_backend_name"]

#: Every backend, by name: the one list the CLI, the sweeps, the strategies
#: and the ops take their choices from.
BACKENDS = ("numpy", "torch", "jax")


def backend_name_of(x: Any) -> str | None:
    """'numpy', 'torch', 'jax' or None when ``x`` is no array we know."""
    if isinstance(x, (np.ndarray, np.generic)):
        return "numpy"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        return "jax"
    jsparse = sys.modules.get("jax.experimental.sparse")
    if jsparse is not None and isinstance(x, jsparse.JAXSparse):
        return "jax"
    return None


def require_backend_name(x: Any) -> str:
    """``backend_name_of(x)``, or a clear error where ``x`` is no array we know."""
    name = backend_name_of(x)
    if name is None:
        raise ArgumentTypeError(
            explain(
                "an array argument",
                "a numpy array, a torch tensor or a jax array",
                f"{type(x).__module__}.{type(x).__qualname__}",
                "convert it with np.asarray, torch.as_tensor or jnp.asarray",
            )
        )
    return name


def backend_of(args: Sequence[Any]) -> Backend:
    if not args:
        raise ArgumentTypeError(
            explain(
                "gv.check(fn, *args)",
                "at least one array argument",
                "no arguments",
                "pass the inputs of fn after it: gv.check(fn, x, b)",
            )
        )
    names = []
    for i, a in enumerate(args):
        name = backend_name_of(a)
        if name is None:
            raise ArgumentTypeError(
                explain(
                    f"argument {i}",
                    "a numpy array, a torch tensor or a jax array",
                    f"{type(a).__module__}.{type(a).__qualname__} ({a!r:.40})",
                    "wrap it as an array (np.asarray, torch.as_tensor or jnp.asarray); "
                    "close over non-array parameters with functools.partial or a lambda",
                )
            )
        names.append(name)
    distinct = sorted(set(names))
    if len(distinct) > 1:
        where = ", ".join(f"argument {i}: {n}" for i, n in enumerate(names))
        raise ArgumentTypeError(
            explain(
                "gv.check arguments",
                "arrays of one backend",
                f"{' and '.join(distinct)} mixed ({where})",
                f"convert every argument to one backend, e.g. all {names[0]}",
            )
        )
    return _load(distinct[0])


def _load(name: str) -> Backend:
    if name == "numpy":
        return NumpyBackend()
    if name == "torch":
        from .torch import TorchBackend  # (imports torch: only when a tensor is checked)

        return TorchBackend()
    from .jax import JaxBackend  # (imports jax: only when a jax array is checked)

    return JaxBackend()
