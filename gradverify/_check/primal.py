"""The first stages of a check: the primal and the precision of the oracle.

``evaluate`` runs fn at the point on copies: its output, and whether fn
mutated an argument; ``repeat`` runs it again: two different answers are
nondeterminism. ``choose``
picks the dtype the finite-difference oracle runs in (float64 when fn accepts
it) and whether AD runs in float64 besides the arguments' own low precision."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import ArgumentTypeError, explain
from .._result import ERROR, WARNING, ArraySummary, Kind
from . import tolerance as tol, xp as _xp
from .calls import CallFailed, Unshaped
from .evaluate import Evaluator
from .findings import Findings, unravel
from .validate import finite_arguments

__all__ = ["Precision", "Primal", "choose", "evaluate", "repeat", "resolution", "summary"]


@dataclass(frozen=True)
class Primal:
    """fn at the point, in the arguments' own precision."""

    dtype: str
    shape: tuple[int, ...]
    values: Any  # float64, flat (a working array: see xp)
    all_finite: bool
    summary: ArraySummary
    raw: Any  # the output as fn returned it (its shape; numpy in its own dtype, or float64 beside x)
    known_finite: Any = None  # the mask below, where it was made already

    @functools.cached_property
    def finite(self) -> Any:
        """bool per output element: only these are checked (made where first
        asked: a passing check whose output is finite everywhere, as its
        extremes say, never asks)."""
        return self.known_finite if self.known_finite is not None else _xp.finite(self.values)


@dataclass(frozen=True)
class Precision:
    """Where the oracle and AD run, and the steps that follow from it."""

    oracle: str | None  # the dtype FD evaluates fn in (None: the arguments' own)
    name: str  # that dtype's name
    reason: str  # why not float64, when it is not
    f0: Any  # fn at the point in the oracle's precision, flat float64
    f0_scale: float  # max |f0| over its finite elements
    native_u: float  # unit roundoff of the least precise argument or output
    u_oracle: float
    h: float  # base FD step, in units of each element's scale
    floor: float  # the smallest step the kink ladder goes down to
    native_ad: frozenset[str]  # the dtypes AD computes in natively
    ad64: bool  # AD also runs in float64 (low-precision arguments, fn accepts float64)
    notes: tuple[str, ...]  # reduced-precision matmuls and the like
    float32_as: str  # the limit float32 results are held to ("bfloat16" when matmuls round so)


def summaries(
    items: list[tuple[str, Any, str, bool]], known: dict[int, tuple[float, float]] | None = None
) -> tuple[ArraySummary, ...]:
    """``summary`` of each (name, array, dtype, differentiable): the
    extremes of the device arrays among them read in one read (``known``:
    item -> its extremes, read already)."""
    known = dict(known or {})
    device = [k for k, (_, v, _, _) in enumerate(items) if _xp.device_floating(v) and k not in known]
    known.update(zip(device, _xp.extremes_of(*(items[k][1] for k in device))))
    return tuple(summary(*item, known=known.get(k)) for k, item in enumerate(items))


def summary(
    name: str, v: Any, dtype: str, differentiable: bool, known: tuple[float, float] | None = None
) -> ArraySummary:
    """Shape, dtype and the finite extremes of ``v`` (``known``: its
    extremes, read already)."""
    shape = tuple(int(s) for s in v.shape)
    if _xp.on_host(v):
        a = np.asarray(v)
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            a = a[np.isfinite(a)]
        lo = float(a.min()) if a.size else None
        hi = float(a.max()) if a.size else None
        return ArraySummary(name, shape, dtype, lo, hi, differentiable)
    xp = _xp.ns(v)
    if _xp.size(v) and _xp.is_floating(v):
        lo, hi = known if known is not None else _xp.extremes(v)
        if math.isfinite(lo) and math.isfinite(hi):
            return ArraySummary(name, shape, dtype, lo, hi, differentiable)
    if _xp.is_floating(v):
        finite = _xp.finite(v)
        if not _xp.any_(finite):
            return ArraySummary(name, shape, dtype, None, None, differentiable)
        lo, hi = float(xp.min(xp.where(finite, v, xp.inf))), float(xp.max(xp.where(finite, v, -xp.inf)))
    else:
        lo, hi = float(xp.min(v)), float(xp.max(v))
    return ArraySummary(name, shape, dtype, lo, hi, differentiable)


def evaluate(ev: Evaluator, report: Findings) -> Primal | Unshaped | None:
    """fn at the point, on copies (None when it raised: said in ``report``;
    ``Unshaped`` when the output needs a view first)."""
    try:
        first = ev.primal_raw(first=True)
    except CallFailed as e:
        report.exception(e)
        return None
    if isinstance(first, Unshaped):
        return first
    out1, out_dtype, after = first
    if not _xp.is_floating(out1):
        raise ArgumentTypeError(
            explain(
                "fn's return value",
                "a floating-point array (derivatives need a real output)",
                f"dtype {out_dtype}",
                "return a float array, e.g. cast with .astype(float)",
            )
        )
    shape = tuple(out1.shape)
    # (whether fn changed each argument, the output's extremes - NaN and inf
    # reach them, so they say its finiteness too - and what validation asked
    # of the arguments come in one read)
    befores = [ev.before(i) for i in range(len(after))]
    tests = [_xp.changed(before, now) for before, now in zip(befores, after)]
    ends = list(out1.aminmax()) if _xp.device_floating(out1) else []
    asked, ev.asked = ev.asked, {}
    got = iter(_xp.read(*(t for t in tests if not isinstance(t, bool)), *ends, *(s for a in asked.values() for s in a)))
    tests = [t if isinstance(t, bool) else bool(next(got)) for t in tests]
    known = (next(got), next(got)) if ends else None
    for i in asked:
        ev.extremes[i], ev.squares[i] = (next(got), next(got)), (ev.values[i], next(got))
    finite_arguments(ev.values, {i: ev.extremes[i] for i in asked})
    for i, (before, now) in enumerate(zip(befores, after)):
        if tests[i] and not _xp.equal(before, now):
            same_shape = tuple(before.shape) == tuple(now.shape)
            diff = (before != now) if same_shape else None
            count = _xp.count(diff) if same_shape else 1
            changed = _xp.nonzero(diff, limit=1) if same_shape else np.zeros(1, int)
            first = unravel(int(changed[0]), tuple(before.shape)) if len(changed) else ()
            report.add(
                Kind.MUTATION,
                ERROR,
                f"fn mutates argument {i}: {count} element(s) changed in place, "
                f"the first at index {first}; it must leave its inputs alone "
                "(gradverify passed it a copy, your array is untouched)",
                argument=i,
                input_index=first,
            )
    values = _xp.flat(_xp.as64(out1))
    finite = None if known is not None else _xp.finite(values)
    all_finite = all(map(math.isfinite, known)) if known is not None else _xp.all_(finite)
    if not all_finite:
        finite = _xp.finite(values) if finite is None else finite
        first = unravel(int(_xp.nonzero(~finite, limit=1)[0]), shape)
        report.add(
            Kind.NONFINITE_OUTPUT,
            WARNING,
            f"fn's output is NaN/inf at {_xp.count(~finite)} element(s) (first at output index "
            f"{first}); those elements are not checked",
            output_index=first,
        )
    out_summary = summary("output", out1, out_dtype, True, known=known)
    return Primal(out_dtype, shape, values, all_finite, out_summary, out1, finite)


def repeat(ev: Evaluator, primal: Primal, report: Findings, tolerated: float = 0.0) -> None:
    """fn once more at the point: two different answers are nondeterminism
    (an error beyond rounding noise and ``tolerated``, a warning within)."""
    out2, _, _ = ev.primal_raw()
    if not _xp.equal(primal.raw, out2):
        _nondeterminism(primal.raw, out2, primal.dtype, report, tolerated)


def repeat_noise(out_dtype: str, first: Any) -> float:
    """How far two evaluations of fn at the same inputs may differ and be
    rounding (an ERROR beyond it, a warning within): 256 u of the output's
    dtype times the largest finite |value| of ``first`` (flat, float64)."""
    return tol.ad_rounding(out_dtype) * tol.unit_roundoff(out_dtype) * _xp.fmax(first)


def _nondeterminism(out1: Any, out2: Any, out_dtype: str, report: Findings, tolerated: float = 0.0) -> None:
    a, b = _xp.flat(_xp.as64(out1)), _xp.flat(_xp.as64(out2))
    xp = _xp.ns(a)
    d = xp.abs(a - b)
    d = xp.where(xp.isnan(d), xp.inf, d)
    k = _xp.argmax(d)
    worst = unravel(k, tuple(out1.shape))
    largest = float(d[k])
    noise = repeat_noise(out_dtype, a)
    level = ERROR if largest > max(noise, tolerated) else WARNING
    report.add(
        Kind.NONDETERMINISM,
        level,
        f"two evaluations of fn at the same inputs differ: {_xp.count(d > 0)} element(s), "
        f"the largest by {largest:.3g} at output index {worst}",
        output_index=worst,
        values={"first": float(a[k]), "second": float(b[k])},
        error=largest,
        bound=noise,
        bound_reason=f"{tol.ad_rounding(out_dtype):g} u({out_dtype}) x max|output|: beyond rounding noise"
        if level == ERROR
        else "within rounding noise"
        if largest <= noise
        else f"within the tolerated nondeterminism {tolerated:g}",
    )


def choose(ev: Evaluator, primal: Primal) -> Precision:
    """The oracle's precision: fn on float64 inputs where it accepts them
    (whatever the arguments' own), else on float32 inputs where an argument
    is coarser than that, else fn as called. A run serves when its output is
    at least as fine as the native one (fn may cast to a fixed dtype): its
    output's dtype is the finite differences' precision, and no FD step is
    rounded to an argument's coarser spacing. Low-precision AD is then run in
    float64 too: that run is what FD judges (a wrong rule is wrong there as
    well), the native run is compared with it (rounding, or a low-precision
    code path)."""
    float_dtypes = {ev.dtypes[i] for i in range(len(ev.dtypes)) if ev.floating[i]}
    native_u = max(tol.unit_roundoff(d) for d in float_dtypes | {primal.dtype})
    # fn as called: its steps are the coarsest differentiated argument's or its output's
    coarsest = max([primal.dtype, *(ev.dtypes[i] for i in ev.wrt)], key=tol.unit_roundoff)
    oracle, name, reason, f0 = None, coarsest, "", primal.values
    if float_dtypes == {"float64"} and primal.dtype == "float64":
        return _precision(ev, primal, None, "float64", "", f0, native_u)
    candidates = []
    refused = ev.backend.float64_refused()
    if refused:
        reason = refused
    else:
        candidates.append("float64")
    if any(tol.unit_roundoff(d) > tol.unit_roundoff("float32") for d in float_dtypes):
        candidates.append("float32")
    said = []
    for candidate in candidates:
        try:
            # (no mutation or nondeterminism to look for here: a compiled fn serves)
            out, dt = ev.primal_compiled(candidate) or ev.primal_raw(candidate)[:2]
        except CallFailed as e:
            said.append(f"fn raised {type(e.exc).__name__} on {candidate} inputs")
            continue
        if tuple(out.shape) != primal.shape or dt not in tol.UNIT_ROUNDOFF or tol.unit_roundoff(dt) > native_u:
            said.append(f"fn returned {dt} for {candidate} inputs")
            continue
        oracle, name, f0 = candidate, dt, _xp.flat(_xp.as64(out))
        if dt != candidate:
            said.append(f"fn returns {dt} for {candidate} inputs")
        break
    reason = "; ".join([reason, *said] if reason else said)
    return _precision(ev, primal, oracle, name, reason, f0, native_u)


def _f0_scale(primal: Primal, f0: Any) -> float:
    """max |f0| over its finite elements: where f0 is fn's output on a
    device, finite, the extremes its evaluation read say it."""
    s = primal.summary
    if f0 is primal.values and primal.all_finite and _xp.device_floating(primal.raw) and s.min is not None:
        return _xp.maxabs_of(s.min, s.max)  # (as fmax finds it: one pass, the same two ends)
    return _xp.fmax(f0)


def resolution(precision: Precision, strategy: str) -> list[str]:
    """What a directional check resolves where FD has no precision finer
    than float32 (said in the report; [] otherwise)."""
    if precision.name == "float64" or not strategy.startswith("directional"):
        return []
    return [
        f"finite differences in {precision.name} only: along random directions an error in a few elements "
        f"is resolved only above the {precision.name} noise of the whole sum; full=True compares element by element"
    ]


def _precision(
    ev: Evaluator, primal: Primal, oracle: str | None, name: str, reason: str, f0: Any, native_u: float
) -> Precision:
    native_ad = frozenset({primal.dtype} | {ev.dtypes[i] for i in ev.wrt})
    reduced = ev.backend.reduced_precision(ev.originals)
    u_oracle = tol.unit_roundoff(name)
    floor = tol.ladder_floor(primal.dtype if native_u > 0 else "float64", name)
    return Precision(
        oracle=oracle,
        name=name,
        reason=reason,
        f0=f0,
        f0_scale=_f0_scale(primal, f0),
        native_u=native_u,
        u_oracle=u_oracle,
        h=tol.base_step(name),
        floor=max(floor, tol.KINK_RESOLUTION * native_u),
        native_ad=native_ad,
        ad64=oracle == "float64" and bool(native_ad & set(tol.LOW_PRECISION_LIMIT)),
        notes=tuple(note for note, _ in reduced),
        # float32 products in bfloat16 passes round like bfloat16: their limit
        float32_as="bfloat16" if any(p == "bfloat16" for _, p in reduced) else "float32",
    )
