"""Non-finite entries of an argument, held fixed.

A point with -inf, +inf or NaN entries (an attention mask, a padded row) is a
well-posed question about its finite entries: fn restricted to them has
derivatives, and that restriction is what gv.check checks. The checked
arguments carry 0 at the held entries and the view puts the held values back
before fn sees them (``where(held, value, x)``), so neither AD nor finite
differences move them, and every index still names the caller's element.

What fn's own rules say about a held entry is asked apart, at the caller's
point: finite differences there are 0 (x + h is x at +-inf, and NaN stays
NaN), so a non-zero derivative is a finding -- the VJP's gradient at a held
entry for a cotangent on the finite outputs, or the JVP's tangent of the
finite outputs for a tangent at the held entries (a rule that leaks gradient
into a mask). The report says how many entries were held, which values,
and what each mode returned there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._errors import ModeUnavailable
from ..._result import ERROR, ArraySummary, CheckResult, Finding, Kind
from ..._rule import Rule
from ...backends import Backend
from .. import xp
from ..findings import unravel
from ..modes import CHECKED
from ..validate import validate_readable
from .base import Layer, View

__all__ = ["Held", "held_entries"]


def held_entries(backend: Backend, args: Sequence[Any]) -> tuple[np.ndarray | None, ...]:
    """Per argument, the mask of its non-finite entries (None: all finite,
    or not a floating array)."""
    masks: list[np.ndarray | None] = [None] * len(args)
    asked: dict[int, Any] = {}  # (the floating arguments, whose finiteness is read together)
    for k, a in enumerate(args):
        if hasattr(a, "dtype") and (backend.is_floating(a) or backend.is_complex(a)):
            v = a.detach() if hasattr(a, "detach") else a
            if backend.read_in_place((a,)):
                v = np.asarray(v)  # (read where it lies: no program compiled for the test)
            if xp.size(v) != 0:
                asked[k] = v
    # (a real torch array's extremes say it: NaN and inf reach them, one pass each)
    ends = [k for k, v in asked.items() if xp.device_floating(v)]
    rest = [k for k in asked if k not in ends]
    finite = dict(zip(ends, (all(map(math.isfinite, e)) for e in xp.extremes_of(*(asked[k] for k in ends)))))
    finite.update(zip(rest, xp.read(*(xp.ns(asked[k]).all(xp.ns(asked[k]).isfinite(asked[k])) for k in rest))))
    for k in asked:
        if not finite[k]:
            bad = ~np.isfinite(backend.to_numpy(args[k]))
            masks[k] = bad if bad.any() else None
    return tuple(masks)


class Held(View):
    """Arguments whose held entries are 0 inward and put back before fn sees them."""

    def __init__(self, backend: Backend, args: tuple[Any, ...], masks: tuple[np.ndarray | None, ...]) -> None:
        self.backend, self.masks = backend, masks
        values: list[Any] = []  # per held argument, the held values at their entries (0 elsewhere)
        key: list[Any] = [backend.name]
        for a, m in zip(args, masks):
            if m is None:
                values.append(None)
                key.append(None)
                continue
            v = np.where(m, backend.to_numpy(a), 0)
            values.append(v)
            key.append((m.shape, m.tobytes(), v.dtype.str, v[m].tobytes()))
        self._values = tuple(values)
        self.key = tuple(key)
        self._placed: dict[tuple[int, str, str], tuple[Any, Any]] = {}
        self.args = _checked_args(backend, args, masks)

    @classmethod
    def of(cls, backend: Backend, args: tuple[Any, ...], outputs: frozenset[str]) -> Held | None:
        validate_readable(backend, args)  # (the first view to read the values)
        masks = held_entries(backend, args)
        return cls(backend, args, masks) if any(m is not None for m in masks) else None

    def _operands(self, i: int, like: Any) -> tuple[Any, Any]:
        mask, values = np.asarray(self.masks[i]), self._values[i]
        if not hasattr(like, "detach"):
            return mask, values  # (numpy and jax take numpy operands; jax's stay constants under its tracing)
        key = (i, str(like.device), str(like.dtype))
        held = self._placed.get(key)
        if held is None:
            ns = xp.ns(like)
            held = (xp.like(mask, like, dtype=ns.bool), xp.like(values, like, dtype=like.dtype))
            self._placed[key] = held
        return held

    def inputs(self, args: Sequence[Any]) -> list[Any]:
        out = list(args)
        for i, m in enumerate(self.masks):
            if m is not None:
                mask, values = self._operands(i, args[i])
                out[i] = xp.ns(args[i]).where(mask, values, args[i])
        return out

    def _zeroed(self, i: int, d: Any) -> Any:
        """A derivative with respect to argument i, 0 at its held entries."""
        if i >= len(self.masks) or self.masks[i] is None or d is None or not hasattr(d, "dtype"):
            return d
        mask, _ = self._operands(i, d)
        return xp.ns(d).where(mask, 0, d)

    def tangents(self, tangents: Sequence[Any]) -> list[Any]:
        return [self._zeroed(i, t) for i, t in enumerate(tangents)]

    def cotangents(self, cotangents: Sequence[Any]) -> list[Any]:
        return [self._zeroed(i, r) for i, r in enumerate(cotangents)]

    def said(self, result: CheckResult, layer: Layer) -> CheckResult:
        return report(result, layer.fn, self.backend, layer.args, self.masks)


def _checked_args(backend: Backend, args: Sequence[Any], masks: tuple[np.ndarray | None, ...]) -> tuple[Any, ...]:
    """The arguments with 0 at their held entries (new arrays: the caller's are untouched)."""
    out = []
    with backend.precision(_native(backend, args)):
        for a, m in zip(args, masks):
            if m is None:
                out.append(a)
                continue
            out.append(backend.from_numpy(np.where(m, 0, backend.to_numpy(a)), a, backend.dtype_name(a)))
    return tuple(out)


def _native(backend: Backend, args: Sequence[Any]) -> str:
    """The precision fn runs in at these arguments (jax makes 64-bit arrays only under x64)."""
    wide = ("float64", "complex128", "int64", "uint64")
    return "float64" if any(hasattr(a, "dtype") and backend.dtype_name(a) in wide for a in args) else "native"


# -- what fn's rules say at the held entries ------------------------------------------
def report(
    result: CheckResult, fn: Any, backend: Backend, args: tuple[Any, ...], masks: tuple[np.ndarray | None, ...]
) -> CheckResult:
    """The check of the view, said in the caller's terms, with fn's own
    derivatives at the held entries asked and judged (finite differences
    there are 0)."""
    wrt = tuple(i for i, s in enumerate(result.inputs) if s.differentiable and masks[i] is not None)
    findings = list(result.findings)
    counts = dict(result.evaluations)
    said: list[str] = []
    if wrt:
        asked = _Asked(fn, backend, args, masks, wrt, result.modes, counts)
        for mode in ("VJP", "JVP"):
            with backend.precision(_native(backend, args)):
                outcome = asked.mode(mode)
            if outcome is None:
                continue
            if isinstance(outcome, str):
                said.append(f"{mode} {outcome}")
                continue
            if outcome.nonzero:
                findings.append(outcome.finding(mode))
            said.append(outcome.said(mode))
    inputs = tuple(_summary(s, a, m, backend) for s, a, m in zip(result.inputs, args, masks))
    held = "; ".join(f"arg{i}: {_held_values(backend, args[i], m)}" for i, m in enumerate(masks) if m is not None)
    note = f"held fixed (non-finite, not perturbed): {held}"
    if said:
        note += f"; fn's derivatives there: {', '.join(said)} (finite differences: 0)"
    elif not any(masks[i] is not None for i, s in enumerate(result.inputs) if s.differentiable):
        note += " (constant arguments)"
    return dataclasses.replace(
        result, findings=tuple(findings), inputs=inputs, evaluations=counts, notes=(*result.notes, note)
    )


def _summary(s: ArraySummary, a: Any, mask: np.ndarray | None, backend: Backend) -> ArraySummary:
    if mask is None:
        return s
    finite = backend.to_numpy(a)[~mask]
    if np.iscomplexobj(finite):
        finite = np.abs(finite)
    lo = float(finite.min()) if finite.size else None
    hi = float(finite.max()) if finite.size else None
    return dataclasses.replace(s, min=lo, max=hi, held=int(mask.sum()))


def _held_values(backend: Backend, a: Any, mask: np.ndarray) -> str:
    v = backend.to_numpy(a)[mask]
    if np.iscomplexobj(v):
        kinds = {"non-finite complex": v.size}
    else:
        kinds = {name: int(np.count_nonzero(sel)) for name, sel in (("-inf", v == -np.inf), ("inf", v == np.inf))}
        kinds["NaN"] = int(np.count_nonzero(np.isnan(v)))
    counted = ", ".join(f"{k} x{n}" for k, n in kinds.items() if n)
    return f"{int(mask.sum())} of {mask.size} element(s) ({counted})"


@dataclasses.dataclass
class _Judged:
    asked: int
    nonzero: int
    argument: int
    index: tuple[int, ...]
    value: float
    held_value: float
    output_index: tuple[int, ...] | None = None
    indeterminate: int = 0  # NaN/inf values (0 x inf at a held entry): not judged

    def said(self, mode: str) -> str:
        what = "held entries" if mode == "VJP" else "finite outputs"
        judged = f"non-zero at {self.nonzero}" if self.nonzero else "0 at each"
        if self.indeterminate:
            judged += f", NaN/inf at {self.indeterminate} {what} (0 x inf is indeterminate: not judged)"
        return f"{mode} {judged}"

    def finding(self, mode: str) -> Finding:
        if mode == "VJP":
            message = (
                f"reverse mode returned {self.value:.6g} for argument {self.argument} at index {self.index}, an "
                f"entry held fixed ({self.held_value}) that fn's finite outputs do not depend on (finite "
                f"differences: 0); {self.nonzero} of {self.asked} held entries got a non-zero gradient -- "
                "a rule that leaks gradient into masked entries (give them 0: e.g. where(mask, 0, grad))"
            )
        else:
            message = (
                f"forward mode moved output {self.output_index} by {self.value:.6g} for a tangent at argument "
                f"{self.argument}'s held entries ({self.nonzero} output element(s) non-zero), which fn's finite "
                "outputs do not depend on (finite differences: 0) -- a rule that reads masked entries"
            )
        return Finding(
            kind=Kind.HELD_GRADIENT,
            level=ERROR,
            message=message,
            pair=(mode, "FD"),
            argument=self.argument,
            input_index=self.index,
            output_index=self.output_index,
            values={mode: self.value, "FD": 0.0},
            where="held entries (non-finite at the point)",
        )


class _Asked:
    """fn's JVP and VJP at the caller's point, read at the held entries."""

    def __init__(
        self,
        fn: Any,
        backend: Backend,
        args: tuple[Any, ...],
        masks: tuple[np.ndarray | None, ...],
        wrt: tuple[int, ...],
        modes: dict[str, str],
        counts: dict[str, int],
    ) -> None:
        self.fn, self.backend, self.args, self.masks, self.wrt, self.modes = fn, backend, args, masks, wrt, modes
        self.counts = counts
        self.rng = np.random.default_rng(17)
        self._out: Any = None

    def _copies(self) -> list[Any]:
        b = self.backend
        return [b.from_numpy(b.to_numpy(a), a, b.dtype_name(a)) if hasattr(a, "dtype") else a for a in self.args]

    def _primal(self) -> Any:
        if self._out is None:
            b = self.backend
            fn = self.fn.fn if isinstance(self.fn, Rule) else self.fn
            self._out = b.to_numpy(b.call(fn, self._copies()))
            self.counts["primal"] = self.counts.get("primal", 0) + 1
        return self._out

    def mode(self, mode: str) -> _Judged | str | None:
        if self.modes.get(mode) != CHECKED:
            return None
        try:
            return self._vjp() if mode == "VJP" else self._jvp()
        except ModeUnavailable:
            return None
        except Exception as e:  # noqa: BLE001 -- fn's own error, said in the note
            return f"not asked ({type(e).__name__}: {str(e)[:120]})"

    def _vjp(self) -> _Judged:
        b, out = self.backend, self._primal()
        signs = self.rng.choice([-1.0, 1.0], size=out.shape)
        cot_np = np.where(np.isfinite(out), signs, 0.0).astype(out.dtype)
        like = self.args[self.wrt[0]]
        cot = b.from_numpy(cot_np, like, str(cot_np.dtype))
        if isinstance(self.fn, Rule):
            res = self.fn.vjp(tuple(self._copies()), cot)
            res = (res,) if not isinstance(res, (tuple, list)) else res
            grads = [res[i] for i in self.wrt]
        else:
            grads = b.vjp(self.fn, self._copies(), self.wrt, cot)
        self.counts["vjp"] = self.counts.get("vjp", 0) + 1
        asked = nonzero = indeterminate = 0
        first: _Judged | None = None
        for i, g in zip(self.wrt, grads):
            mask = self.masks[i]
            g = np.broadcast_to(np.asarray(b.to_numpy(g)), mask.shape) if g is not None else np.zeros(mask.shape)
            at = g[mask]
            bad = np.isfinite(at) & (at != 0)
            asked += at.size
            nonzero += int(np.count_nonzero(bad))
            indeterminate += int(np.count_nonzero(~np.isfinite(at)))
            if first is None and bad.any():
                k = int(np.flatnonzero(mask)[np.flatnonzero(bad)[0]])
                index = unravel(k, mask.shape)
                held = b.to_numpy(self.args[i]).reshape(-1)[k]
                first = _Judged(0, 0, i, index, _real(g.reshape(-1)[k]), _real(held))
        if first is None:
            return _Judged(asked, 0, self.wrt[0], (), 0.0, 0.0, indeterminate=indeterminate)
        first.asked, first.nonzero, first.indeterminate = asked, nonzero, indeterminate
        return first

    def _jvp(self) -> _Judged:
        b, out = self.backend, self._primal()
        finite = np.isfinite(out)
        asked = nonzero = indeterminate = 0
        first: _Judged | None = None
        for i in self.wrt:
            mask = self.masks[i]
            tangents = []
            for j in self.wrt:
                a = self.args[j]
                t = mask.astype(b.to_numpy(a).dtype) if j == i else np.zeros(np.shape(b.to_numpy(a)))
                tangents.append(b.from_numpy(np.asarray(t), a, b.dtype_name(a)))
            if isinstance(self.fn, Rule):
                full: list[Any] = [None] * len(self.args)
                for t, j in zip(tangents, self.wrt):
                    full[j] = t
                d = self.fn.jvp(tuple(self._copies()), tuple(full))
            else:
                d = b.jvp(self.fn, self._copies(), self.wrt, tangents)
            self.counts["jvp"] = self.counts.get("jvp", 0) + 1
            moved = np.broadcast_to(np.asarray(b.to_numpy(d)), out.shape)
            at = moved[finite]
            bad = np.isfinite(at) & (at != 0)
            indeterminate += int(np.count_nonzero(~np.isfinite(at)))
            asked += 1
            if bad.any():
                nonzero += int(np.count_nonzero(bad))
                if first is None:
                    k = int(np.flatnonzero(finite)[np.flatnonzero(bad)[0]])
                    first = _Judged(0, 0, i, (), _real(moved.reshape(-1)[k]), 0.0, unravel(k, out.shape))
        if first is None:
            return _Judged(asked, 0, self.wrt[0], (), 0.0, 0.0, indeterminate=indeterminate)
        first.asked, first.nonzero, first.indeterminate = asked, nonzero, indeterminate
        first.index = None  # type: ignore[assignment]  # (a tangent at every held entry of the argument)
        return first


def _real(v: Any) -> float:
    v = complex(v)
    return v.real if v.imag == 0 else abs(v)
