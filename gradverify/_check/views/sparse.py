"""Sparse arguments and outputs, checked as their specified values.

A sparse argument (torch COO, CSR, CSC, BSR, BSC) is checked as a function
of its values, its pattern held fixed -- gradcheck's ``masked=True``: the
derivatives compared are those with respect to the specified values, and
finite differences perturb those alone. The view rebuilds the sparse array
from the checked values with the backend's own differentiable constructor,
so fn's rules reach the values through it. A sparse output is read at the
point's own pattern, the same way: at a nearby point, an element outside
it is not read and one of it that is not specified there reads 0. Every
index in a finding is the dense index of the element.

What the view cannot see is asked apart, at the caller's point: the layout
of fn's own gradient for each sparse argument, and whether it has values
outside the pattern (a rule that treats the argument as a dense matrix, as
``torch.mm`` does; the check compared the specified values only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._errors import ArgumentTypeError, explain
from ..._result import WARNING, ArraySummary, CheckResult, Finding, Kind
from ...backends import Backend
from ...backends.base import SparseArray
from ..findings import unravel
from .base import Layer, View, relocated

__all__ = ["Sparse"]


def sparse_args(backend: Backend, args: Sequence[Any]) -> tuple[SparseArray | None, ...]:
    """Per argument, its values and pattern (None: dense); a sparse argument
    the backend cannot differentiate through its values is refused."""
    splits = tuple(backend.sparse(a) for a in args)
    for i, s in enumerate(splits):
        why = None if s is None else s.unusable()
        if why is not None:
            raise ArgumentTypeError(
                explain(
                    f"argument {i}",
                    "a sparse array whose values the framework differentiates",
                    f"{backend.dtype_name(args[i])} {s.layout}: {why}",
                    "pass it as COO (x.to_sparse()) or dense (x.to_dense())",
                )
            )
    return splits


class Sparse(View):
    """Sparse arguments as their values (dense), rebuilt in their pattern
    before fn sees them; a sparse output read at the point's own pattern."""

    takes = "sparse"

    def __init__(self, backend: Backend, args: tuple[Any, ...], splits: tuple[SparseArray | None, ...]) -> None:
        self.backend, self.splits = backend, splits
        self.output_pattern: SparseArray | None = None  # the sparse output's pattern, once seen
        self.args = tuple(a if s is None else s.values for a, s in zip(args, splits))

    @classmethod
    def of(cls, backend: Backend, args: tuple[Any, ...], outputs: frozenset[str]) -> Sparse | None:
        splits = sparse_args(backend, args)
        if not any(s is not None for s in splits) and "sparse" not in outputs:
            return None
        return cls(backend, args, splits)

    def for_order(self, order: int) -> None:
        """Say why the values' derivatives stop at the first, where they do."""
        if order >= 2:
            self.higher_order_unavailable = next(
                (why for s in self.splits if s is not None and (why := s.once())), None
            )

    def inputs(self, args: Sequence[Any]) -> list[Any]:
        return [a if s is None else s.rebuild(a) for a, s in zip(args, self.splits)]

    def output(self, out: Any) -> Any:
        if not self.backend.is_sparse(out):
            return out
        if self.output_pattern is None:
            self.output_pattern = self.backend.sparse(out)  # (the point's: fn evaluates there first)
        assert self.output_pattern is not None
        return self.output_pattern.read(out)

    def said(self, result: CheckResult, layer: Layer) -> CheckResult:
        """The values' result in the sparse function's terms: dense indices,
        the layouts said, and fn's own gradient layouts judged."""
        splits, out = self.splits, self.output_pattern

        def named(f: Finding) -> Finding:
            changes: dict[str, Any] = {}
            said = []
            if f.input_index is not None and f.argument is not None and splits[f.argument] is not None:
                s = splits[f.argument]
                k = _flat(f.input_index, tuple(s.values.shape))
                changes["input_index"] = s.dense_index(k)
                said.append(f"argument {f.argument}'s value element {k} of {_size(s)}")
            if f.output_index is not None and out is not None:
                k = _flat(f.output_index, tuple(out.values.shape))
                changes["output_index"] = out.dense_index(k)
                said.append(f"the output's value element {k} of {_size(out)}")
            return relocated(f, changes, said)

        findings = [named(f) for f in result.findings]
        inputs = tuple(_summary(s, sp) for s, sp in zip(result.inputs, splits))
        output = result.output if out is None or result.output is None else _summary(result.output, out)
        notes = list(result.notes)
        shown = [
            f"arg{i} {s.layout} {'x'.join(map(str, s.shape))}, {s.nnz} specified" for i, s in enumerate(splits) if s
        ]
        if out is not None:
            shown.append(f"the output {out.layout} {'x'.join(map(str, out.shape))}, {out.nnz} specified")
        notes.append(
            "sparse: checked as the specified values, the pattern held fixed (masked semantics): " + "; ".join(shown)
        )
        if any(s is not None and s.coalesced_here for s in splits):
            notes.append("an uncoalesced COO argument was read coalesced (duplicate entries summed)")
        wrt = tuple(i for i, s in enumerate(result.inputs) if s.differentiable and splits[i] is not None)
        counts = dict(result.evaluations)
        if wrt and result.modes.get("VJP") == "checked":
            findings += _gradient_layouts(layer.fn, self.backend, layer.args, splits, wrt, layer.seed, notes, counts)
        return dataclasses.replace(
            result, findings=tuple(findings), inputs=inputs, output=output, evaluations=counts, notes=tuple(notes)
        )


def _gradient_layouts(
    fn: Any,
    backend: Backend,
    args: tuple[Any, ...],
    splits: tuple[SparseArray | None, ...],
    wrt: tuple[int, ...],
    seed: int,
    notes: list[str],
    counts: dict[str, int],
) -> list[Finding]:
    try:
        grads = backend.sparse_gradients(fn, args, wrt, seed)
    except Exception as e:  # noqa: BLE001 -- fn's own error, said in the note
        notes.append(f"fn's gradient layouts were not read ({type(e).__name__}: {str(e)[:120]})")
        return []
    if grads is None:
        notes.append(f"{backend.name} differentiates a sparse array with respect to its values alone")
        return []
    counts["vjp"] = counts.get("vjp", 0) + 1
    found = []
    said = []
    for i, (layout, dense) in zip(wrt, grads):
        s = splits[i]
        assert s is not None
        outside = (dense != 0) & ~s.pattern()
        n = int(np.count_nonzero(outside))
        said.append(f"arg{i}: {layout}" + (f" with {n} value(s) outside the pattern" if n else ""))
        if n:
            k = int(np.flatnonzero(outside)[0])
            index = unravel(k, s.shape)
            found.append(
                Finding(
                    kind=Kind.WRONG_LAYOUT,
                    level=WARNING,
                    message=f"the gradient for argument {i} ({s.layout}, {s.nnz} specified) is {layout} with "
                    f"non-zero values at {n} unspecified element(s) (the first {float(dense.reshape(-1)[k]):.6g} "
                    f"at {index}): fn's rule differentiates the argument as a dense array; the check compared "
                    "the specified values only (masked semantics). For a gradient in the pattern use a masked "
                    "rule (torch.sparse.mm, or grad.sparse_mask(x) in a backward)",
                    pair=("VJP", "layout"),
                    argument=i,
                    input_index=index,
                    values={"VJP": float(dense.reshape(-1)[k])},
                )
            )
        elif layout not in (s.layout, "none"):
            found.append(
                Finding(
                    kind=Kind.WRONG_LAYOUT,
                    level=WARNING,
                    message=f"the gradient for argument {i} is {layout}; the argument is {s.layout} (its values "
                    "are in the pattern and were compared)",
                    pair=("VJP", "layout"),
                    argument=i,
                )
            )
    notes.append("fn's own gradient layouts: " + ", ".join(said))
    return found


def _size(s: SparseArray) -> int:
    return int(np.prod(tuple(s.values.shape)))


def _flat(index: Sequence[int], shape: tuple[int, ...]) -> int:
    return int(np.ravel_multi_index(tuple(int(j) for j in index), shape)) if shape else 0


def _summary(s: ArraySummary, split: SparseArray | None) -> ArraySummary:
    if split is None:
        return s
    trailing = s.shape[len(tuple(split.values.shape)) :]  # (a complex array's real view: its axis of 2)
    return dataclasses.replace(s, shape=split.shape + trailing, layout=split.layout, specified=split.nnz)
