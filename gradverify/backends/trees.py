"""Pytrees, flattened by the frameworks' own utilities: ``jax.tree_util``
(dicts, lists, tuples, namedtuples, and every node jax knows: flax's
``FrozenDict``, equinox modules, optax states) and ``torch.utils._pytree``
(the nodes torch registers: ``torch.return_types``). A path is written as
the utility's ``keystr`` writes it (``['params']['Dense_0']['kernel']``,
``.layers[0].weight``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ArgumentTypeError, explain

__all__ = ["Flat", "flatten", "is_module"]

#: Packages whose containers are jax pytrees (jax's registry knows their nodes).
_JAX_FAMILY = frozenset({"jax", "jaxlib", "flax", "equinox", "optax", "haiku", "chex"})


@dataclass(frozen=True)
class Flat:
    """A value as its leaves (in the utility's order), their paths, and how to rebuild it."""

    leaves: tuple[Any, ...]
    paths: tuple[str, ...]
    treedef: Any
    utility: str  #: "jax" or "torch"

    def rebuild(self, leaves: Sequence[Any]) -> Any:
        return _module(self.utility).tree_unflatten(*_order(self.utility, self.treedef, list(leaves)))


def _order(utility: str, treedef: Any, leaves: list[Any]) -> tuple[Any, Any]:
    # jax: tree_unflatten(treedef, leaves); torch: tree_unflatten(leaves, spec)
    return (treedef, leaves) if utility == "jax" else (leaves, treedef)


def _module(utility: str) -> Any:
    return importlib.import_module("jax.tree_util" if utility == "jax" else "torch.utils._pytree")


def _utility(x: Any) -> str:
    root = type(x).__module__.split(".")[0]
    if root == "torch":
        return "torch"
    if root in _JAX_FAMILY:
        return "jax"
    # builtin containers: both utilities agree; the one already loaded first
    for name, module in (("jax", "jax"), ("torch", "torch")):
        if module in sys.modules:
            return name
    for name, module in (("jax", "jax"), ("torch", "torch")):
        try:
            importlib.import_module(module)
            return name
        except ImportError:
            continue
    raise ArgumentTypeError(
        explain(
            "a pytree argument or output",
            "jax or torch installed (their tree utilities flatten it)",
            f"{type(x).__qualname__} with neither installed",
            "pip install jax (or torch), or pass the arrays as separate arguments",
        )
    )


def flatten(x: Any) -> Flat:
    """``x``'s leaves and paths by the utility of its framework (a builtin
    container: jax's where it is loaded, else torch's)."""
    utility = _utility(x)
    tu = _module(utility)
    pairs, treedef = tu.tree_flatten_with_path(x)
    if utility == "jax" and type(x).__module__ == "builtins" and "torch" in sys.modules:
        tensor = sys.modules["torch"].Tensor
        if any(isinstance(v, tensor) for _, v in pairs):
            # torch tensors in builtin containers: torch's utility (insertion order, torch's nodes)
            utility, tu = "torch", _module("torch")
            pairs, treedef = tu.tree_flatten_with_path(x)
    return Flat(tuple(v for _, v in pairs), tuple(tu.keystr(p) for p, _ in pairs), treedef, utility)


def is_module(fn: Any) -> str | None:
    """The framework of a model passed as fn whose parameters are to be
    checked with its inputs ("torch": an ``nn.Module``; "equinox": an
    ``eqx.Module``; "nnx": a ``flax.nnx.Module``), else None."""
    root = type(fn).__module__.split(".")[0]
    if "torch" in sys.modules and isinstance(fn, sys.modules["torch"].nn.Module):
        return "torch"
    if "flax.nnx" in sys.modules and isinstance(fn, sys.modules["flax.nnx"].Module):
        return "nnx"
    if "equinox" in sys.modules and isinstance(fn, sys.modules["equinox"].Module) and root != "jax":
        return "equinox"
    return None
