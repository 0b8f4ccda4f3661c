"""Pytree arguments and outputs, and models, as flat leaves with names.

An argument may be a pytree of arrays (a dict, list, tuple, namedtuple, or a
node the frameworks register: flax's ``FrozenDict``, an equinox module, an
optax state): it is flattened by its framework's own utility
(``backends.trees``), each array leaf becomes one argument of the core, and
every other leaf (an int, None, a function) is a constant put back as it was.
Floating leaves are differentiated, integer and bool ones are constants, as
for a positional array.

An output may be a pytree too: its array leaves are joined into one flat
array for the core (complex leaves as their real parts, every leaf in the
least precise floating dtype among them, so that the rounding model is
never tighter than the coarsest leaf), and an index into it is said back
as the leaf's name and its own index.

Every element is named by its path: ``arg0['params']['Dense_0']['kernel'][3, 2]``,
``model.fc1.weight[3, 2]``, ``output['logits'][0, 4]``; ``wrt`` takes these
names (a name selects every leaf under it). A model passed as fn (a torch
``nn.Module``, an equinox module) is called as a function of its parameters
and its inputs: see ``models``.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..._errors import ArgumentTypeError, ArgumentValueError, explain
from ..._result import CheckResult, Finding
from ...backends import Backend, backend_name_of, backend_of
from ...backends.trees import Flat, flatten
from .. import xp
from ..calls import Unshaped
from ..findings import unravel
from .base import Layer, View

__all__ = ["Tree", "is_tree"]

#: Dtypes from the least precise: a joined output takes the first its leaves have.
_COARSE_FIRST = ("bfloat16", "float16", "float32", "float64")


def is_tree(a: Any) -> bool:
    """Whether an argument is a container to flatten (not one array)."""
    return backend_name_of(a) is None


@dataclasses.dataclass(frozen=True)
class _Arg:
    """One positional argument as leaves: which core arguments it holds."""

    flat: Flat | None  #: None: the argument is one array
    arrays: tuple[int, ...]  #: positions in ``flat.leaves`` of its array leaves
    first: int  #: the core index of its first array leaf


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One leaf of fn's output as the core sees it."""

    path: str
    shape: tuple[int, ...]  #: its shape inward (a complex leaf: with its axis of 2)
    dtype: str
    offset: int
    complex: bool


class Tree(View):
    """Positional pytrees as their array leaves; a pytree output joined into one array."""

    takes = "pytree"

    def __init__(self, args: tuple[Any, ...], names: tuple[str, ...], model: str | None) -> None:
        self.names, self.model = names, model
        parts, inward, leaf_names, owner = [], [], [], []
        for i, a in enumerate(args):
            if not is_tree(a):
                parts.append(_Arg(None, (0,), len(inward)))
                inward.append(a)
                leaf_names.append(names[i])
                owner.append(i)
                continue
            flat = flatten(a)
            arrays = tuple(k for k, leaf in enumerate(flat.leaves) if backend_name_of(leaf) is not None)
            parts.append(_Arg(flat, arrays, len(inward)))
            for k in arrays:
                inward.append(flat.leaves[k])
                leaf_names.append(_joined(names[i], flat.paths[k], model if i == 0 else None))
                owner.append(i)
        self.parts = tuple(parts)
        self.args = tuple(inward)
        self.leaf_names = tuple(leaf_names)
        self.owner = tuple(owner)  #: per core argument, its positional argument
        self.backend: Backend | None = None
        self.out_flat: Flat | None = None  #: the output's structure, once seen (None: one array)
        self.out_leaves: tuple[_Leaf, ...] = ()
        self.out_dtype: str | None = None

    @classmethod
    def of(cls, backend: Backend, args: tuple[Any, ...], outputs: frozenset[str]) -> Tree | None:
        raise NotImplementedError("built by Tree.build: the backend follows from its leaves")

    @classmethod
    def build(
        cls, args: tuple[Any, ...], outputs: frozenset[str], names: tuple[str, ...], model: str | None, wrt: Any
    ) -> Tree | None:
        """The view for ``args`` (named ``names``), or None where every
        argument is one array, no pytree output was seen and wrt names none."""
        named = isinstance(wrt, str) or (isinstance(wrt, (list, tuple)) and any(isinstance(w, str) for w in wrt))
        if not any(is_tree(a) for a in args) and "pytree" not in outputs and model is None and not named:
            return None
        return cls(args, names, model)

    # -- calls ------------------------------------------------------------------------
    def inputs(self, args: Sequence[Any]) -> list[Any]:
        return self._rebuilt(args, constants=True)

    def tangents(self, tangents: Sequence[Any]) -> list[Any]:
        return self._rebuilt(tangents, constants=False)

    def _rebuilt(self, arrays: Sequence[Any], constants: bool) -> list[Any]:
        """The positional arguments from the core's arrays, their other
        leaves as they were (``constants``) or None (a tangent's)."""
        out = []
        for part in self.parts:
            if part.flat is None:
                out.append(arrays[part.first])
                continue
            leaves = list(part.flat.leaves) if constants else [None] * len(part.flat.leaves)
            for n, k in enumerate(part.arrays):
                leaves[k] = arrays[part.first + n]
            out.append(part.flat.rebuild(leaves))
        return out

    def cotangents(self, cotangents: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for part, c in zip(self.parts, cotangents):
            if part.flat is None:
                out.append(c)
            elif c is None:
                out.extend([None] * len(part.arrays))
            else:
                leaves = flatten(c).leaves
                out.extend(leaves[k] if k < len(leaves) else None for k in part.arrays)
        return out

    def output(self, out: Any) -> Any:
        if self.out_flat is None and not is_tree(out):
            return out  # (one array: the views inward read it as it is)
        if self.out_flat is None:
            self._see(out)
        flat = flatten(out)
        leaves = [flat.leaves[k] for k in self._out_arrays]
        if self._alone:
            return leaves[0]
        backend = self._backend(leaves[0])
        parts = []
        for leaf, seen in zip(leaves, self.out_leaves):
            if seen.complex:
                leaf = backend.as_real(leaf)
            if backend.dtype_name(leaf) != self.out_dtype:
                leaf = xp.ns(leaf).astype(leaf, _dtype_like(leaves, self.out_dtype, backend))
            parts.append(leaf)
        return backend.concat_flat(parts)

    def output_cotangent(self, cotangent: Any) -> Any:
        if self.out_flat is None:
            return cotangent
        if self._alone:
            pieces = [cotangent]
        else:
            backend = self._backend(cotangent)
            ns = xp.ns(cotangent)
            pieces = []
            for leaf in self.out_leaves:
                piece = ns.reshape(cotangent[leaf.offset : leaf.offset + _size(leaf.shape)], leaf.shape)
                pieces.append(backend.as_complex(piece) if leaf.complex else piece)
        leaves: list[Any] = [None] * len(self.out_flat.leaves)
        for k, piece in zip(self._out_arrays, pieces):
            leaves[k] = piece
        return self.out_flat.rebuild(leaves)

    @property
    def _alone(self) -> bool:
        """One real output leaf: handed inward as it is (the inner views read it)."""
        return len(self.out_leaves) == 1 and not self.out_leaves[0].complex

    def _backend(self, like: Any) -> Backend:
        if self.backend is None:
            self.backend = backend_of([like])
        return self.backend

    def _see(self, out: Any) -> None:
        """Record the output's structure (the point's: fn evaluates there first)."""
        flat = flatten(out)
        arrays = []
        leaves: list[_Leaf] = []
        offset = 0
        for k, leaf in enumerate(flat.leaves):
            if backend_name_of(leaf) is None:
                continue
            backend = self._backend(leaf)
            if not (backend.is_floating(leaf) or backend.is_complex(leaf)) or backend.is_sparse(leaf):
                if backend.is_sparse(leaf):
                    raise ArgumentTypeError(
                        explain(
                            f"fn's output{flat.paths[k]}",
                            "dense array leaves in a pytree output",
                            "a sparse array",
                            "return it dense (out.to_dense()), or check that output alone (its values are checked)",
                        )
                    )
                continue  # (integer and bool outputs have no derivative)
            c = bool(backend.is_complex(leaf))
            shape = tuple(int(s) for s in leaf.shape) + ((2,) if c else ())
            dtype = backend.dtype_name(backend.as_real(leaf)) if c else backend.dtype_name(leaf)
            arrays.append(k)
            leaves.append(_Leaf(flat.paths[k], shape, dtype, offset, c))
            offset += _size(shape)
        if not leaves:
            raise ArgumentTypeError(
                explain(
                    "fn's return value",
                    "an array, or a pytree with at least one floating array leaf",
                    f"{type(out).__qualname__} with no floating array leaf",
                    "return the arrays whose derivatives are to be checked",
                )
            )
        self._out_arrays = tuple(arrays)
        self.out_leaves = tuple(leaves)
        ranked = [d for d in _COARSE_FIRST if any(leaf.dtype == d for leaf in leaves)]
        self.out_dtype = ranked[0] if ranked else leaves[0].dtype
        self.out_flat = flat

    # -- names --------------------------------------------------------------------------
    def wrt(self, wrt: Any, backend: Backend) -> Any:
        """The core's wrt (indices of leaves) for the caller's: positional
        indices (every floating leaf of those arguments), names and paths
        (every leaf under them), "inputs" and "parameters" for a model."""
        if wrt is None:
            return None
        items = [wrt] if isinstance(wrt, (str, numbers.Integral)) else list(wrt)
        chosen: list[int] = []
        for w in items:
            found = self._select(w)
            if not isinstance(w, numbers.Integral) or len(found) != 1:
                # (a name or a whole argument selects its floating leaves; one leaf is refused in its own words)
                found = [k for k in found if backend.is_floating(self.args[k]) or backend.is_complex(self.args[k])]
            if not found:
                raise ArgumentTypeError(
                    explain(
                        f"wrt={w!r}",
                        "floating-point leaves to differentiate",
                        "only integer or bool leaves",
                        "integer and bool leaves are constants; drop it from wrt",
                    )
                )
            chosen.extend(k for k in found if k not in chosen)
        return tuple(chosen)

    def _select(self, w: Any) -> list[int]:
        n = len(self.parts)
        offset = 1 if self.model else 0
        if isinstance(w, numbers.Integral) and not isinstance(w, bool):
            k = int(w) + (n - offset) if w < 0 else int(w)
            if not 0 <= k < n - offset:
                raise ArgumentValueError(
                    explain(
                        "wrt",
                        f"indices in range(-{n - offset}, {n - offset})",
                        str(int(w)),
                        f"fn has {n - offset} argument(s)",
                    )
                )
            return [j for j, i in enumerate(self.owner) if i == k + offset]
        if not isinstance(w, str):
            raise ArgumentTypeError(
                explain(
                    "wrt",
                    "argument indices, names or paths",
                    repr(w),
                    "e.g. wrt=0, wrt='arg0' or wrt=['model.fc.weight']",
                )
            )
        if self.model and w in ("inputs", "parameters"):
            return [j for j, i in enumerate(self.owner) if (i == 0) == (w == "parameters")]
        hits = [
            j
            for j, name in enumerate(self.leaf_names)
            if _under(name, w) or (self.model and _under(name, f"{self.model}.{w}"))
        ]
        if not hits:
            shown = ", ".join(self.leaf_names[:12]) + (", ..." if len(self.leaf_names) > 12 else "")
            raise ArgumentValueError(
                explain(
                    f"wrt={w!r}",
                    "the name of an argument, a leaf or a subtree"
                    + (', or "inputs" / "parameters"' if self.model else ""),
                    f"no leaf named so; the leaves are: {shown}",
                    "pass one of those names (a prefix selects every leaf under it)",
                )
            )
        return hits

    def said(self, result: CheckResult, layer: Layer) -> CheckResult:
        findings = tuple(self._rename(f) for f in result.findings)
        inputs = tuple(dataclasses.replace(s, name=self.leaf_names[k]) for k, s in enumerate(result.inputs))
        output = result.output
        if output is not None and self.out_flat is not None and len(self.out_leaves) > 1:
            shown = ", ".join(f"output{leaf.path} {leaf.dtype}{list(leaf.shape)}" for leaf in self.out_leaves)
            output = dataclasses.replace(output, name=f"output ({len(self.out_leaves)} leaves joined: {shown})")
        notes = list(result.notes)
        trees = [
            f"{self.names[i]} ({type(layer.args[i]).__qualname__}) as {len(p.arrays)} array leaves"
            for i, p in enumerate(self.parts)
            if p.flat is not None
        ]
        if trees:
            constants = sum(len(p.flat.leaves) - len(p.arrays) for p in self.parts if p.flat is not None)
            notes.append(
                "pytrees checked as their leaves: "
                + "; ".join(trees)
                + (f" ({constants} non-array leaf/leaves held as constants)" if constants else "")
            )
        reproduce = _reproduce(result.reproduce, len(self.leaf_names), self.names[1 if self.model else 0 :])
        return dataclasses.replace(
            result, findings=findings, inputs=inputs, output=output, notes=tuple(notes), reproduce=reproduce
        )

    def _rename(self, f: Finding) -> Finding:
        changes: dict[str, Any] = {}
        message = f.message
        if f.argument is not None and 0 <= f.argument < len(self.leaf_names):
            changes["input_name"] = self.leaf_names[f.argument]
            changes["argument"] = self.owner[f.argument] - (1 if self.model else 0)
            if changes["argument"] < 0:
                changes["argument"] = None
        message = _ARG.sub(lambda m: self._leaf_text(int(m.group(1))), message)
        message = _ARGUMENT.sub(lambda m: "argument " + self._leaf_text(int(m.group(1))), message)
        if self.out_flat is not None and len(self.out_leaves) > 1 and f.output_index is not None:
            leaf, index = self._out_leaf(f.output_index)
            changes["output_index"] = index
            changes["output_name"] = f"output{leaf.path}"
            message = message.replace(f"output{list(f.output_index)}", f"output{leaf.path}{list(index)}")
        elif self.out_flat is not None and f.output_index is not None:
            changes["output_name"] = f"output{self.out_leaves[0].path}"
            message = message.replace("output[", f"output{self.out_leaves[0].path}[")
        changes["message"] = message
        if f.where:
            changes["where"] = _ARGUMENT.sub(lambda m: "argument " + self._leaf_text(int(m.group(1))), f.where)
        return dataclasses.replace(f, **changes)

    def _leaf_text(self, k: int) -> str:
        return self.leaf_names[k] if 0 <= k < len(self.leaf_names) else f"arg{k}"

    def _out_leaf(self, index: tuple[int, ...]) -> tuple[_Leaf, tuple[int, ...]]:
        k = int(index[0]) if index else 0
        for leaf in reversed(self.out_leaves):
            if k >= leaf.offset:
                return leaf, unravel(k - leaf.offset, leaf.shape)
        return self.out_leaves[0], tuple(index)


#: The core's names of its arguments in finding texts: ``arg3`` (before an
#: index or at a word's end) and ``argument 3``.
_ARG = re.compile(r"\barg(\d+)\b")
_ARGUMENT = re.compile(r"\bargument (\d+)\b")


def _joined(name: str, path: str, model: str | None) -> str:
    if model is not None and path.startswith("['") and path.endswith("']"):
        return f"{model}.{path[2:-2]}"  # (a model's parameters: by their dotted names)
    if model is not None:
        return f"{model}{path}"
    return f"{name}{path}"


def _under(name: str, prefix: str) -> bool:
    return name == prefix or (name.startswith(prefix) and name[len(prefix)] in "[.")


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) if shape else 1


def _dtype_like(leaves: Sequence[Any], name: str, backend: Backend) -> Any:
    for leaf in leaves:
        if backend.dtype_name(leaf) == name:
            return leaf.dtype
    return getattr(xp.ns(leaves[0]), name)


def _reproduce(line: str, n_core: int, names: Sequence[str]) -> str:
    core = ", ".join(f"arg{i}" for i in range(n_core))
    return line.replace(core, ", ".join(names), 1) if core else line


#: Set by a caller that decides itself which of fn's several outputs are
#: checked (torch's gradcheck leaves out those that do not require grad):
#: where fn returns a pytree, the check raises TreeOutput after fn's first call.
TREES_REFUSED: ContextVar[bool] = ContextVar("gradverify_trees_refused", default=False)


class TreeOutput(Exception):
    """fn returned a pytree of arrays where TREES_REFUSED was set."""


def trees_refused(fn: Any, first: Any) -> bool:
    """Whether TREES_REFUSED is set and fn (a composition of views) returned
    several outputs at its first call: ``first`` says a pytree needs a view
    (Unshaped), or a Tree view of the arguments' pytrees took them already."""
    if not TREES_REFUSED.get():
        return False
    if isinstance(first, Unshaped):
        return first.kind == "pytree"
    return any(isinstance(v, Tree) and v.out_flat is not None for v in getattr(fn, "views", ()))
