"""The levels below a disagreement's step, and the staircases no step
resolves: what the excuses (excuses.FinerStep, OnGrid) and the witness of
a located element (locate) share. Each looks at a few elements of F(t) =
fn(x + t c u) on the host."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .oracle import Oracle
from .primal import Precision
from .probes import Probes

__all__ = [
    "STAIRS",
    "at_step",
    "beneath",
    "finer",
    "grid_at",
    "moved_reason",
    "refined",
    "staircase",
    "steep_limit",
]


#: Why an element on a staircase of fn's own is unreliable (its step).
STAIRS = (
    "fn's values step by %.3g, far coarser than its dtype rounds them: a staircase of its own, "
    "whose slope over the step is no derivative (0 between its steps)"
)


def steep_limit(probes: Probes, precision: Precision) -> float:
    """The slope beyond which no finite difference can show a derivative: one
    that would move f over the finest step by more than the larger of 1,
    fn's largest value and the largest input (3e299 at least in float64).
    Never less: tiny values at the point do not make an ordinary slope (2
    for 2x at x = 1e-305) one no step can check."""
    span = max(precision.f0_scale, probes.inputs_max) if np.isfinite(precision.f0_scale) else probes.inputs_max
    return max(span, 1.0) / tol.finest_step(precision.u_oracle)


def beneath(oracle: Oracle, j: int, slope: float) -> str | None:
    """Why no finite difference can check AD's ``slope`` with respect to
    input element j, if none can: x_j lies below every step (probes.below_steps)
    and the slope is beyond steep_limit (inf always is). fn then changes by
    all that slope gives between the point and 0, at a scale no step
    resolves: lax.rem's d/dy = -trunc(x / y) at the smallest normal y,
    ~1e308, where FD reads rem's values far beyond y's own scale. A wrong
    rule at ordinary inputs, or a slope fn's values could show, is never
    excused here."""
    probes, precision = oracle.probes, oracle.precision
    limit, x = steep_limit(probes, precision), abs(float(probes.x[j]))
    if not (0.0 < x < tol.finest_step(precision.u_oracle) and abs(slope) > limit):
        return None
    return (
        f"x = {float(probes.x[j]):.17g} lies nearer 0 than any step finite differences take "
        f"({tol.finest_step(precision.u_oracle):.3g}), and a slope of {slope:.6g} would move f by more than its "
        f"values and 1 over such a step (beyond {limit:.3g}): fn's slope there lives between the point and 0, below "
        f"every step, and no finite difference can check it: inconclusive there"
    )


def grid_at(
    oracle: Oracle, F: Callable[[float], Any], idx: Any, h: float | None = None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The grid fn's values lie on (fd.grid) at the elements ``idx`` of F's
    stencil at step h (the first step by default), with those values (host
    arrays)."""
    h = oracle.precision.h if h is None else h
    values = [_xp.take(_xp.flat(v), idx) for v in fd.values_at(F, [k * h / 4 for k in fd.OFFSETS])]
    return fd.grid(values, _xp.take(_xp.flat(oracle.f0), idx)), values


def staircase(
    q: np.ndarray, values: list[np.ndarray], oracle: Oracle, F: Callable[[float], Any], idx: Any
) -> np.ndarray:
    """Of the elements ``idx`` whose values lie on grids ``q`` (host arrays,
    with their ``values`` at the first step's stencil), those on a staircase
    of fn's own (an integer part, a count), read by FD as its mean slope
    where its derivative is 0 between the steps: a grid coarser than
    rounding in fn's least precise dtype can make (ROUNDING_TERMS u x the
    larger of their values and the inputs), and one that does not shrink
    with the step (at a REFINE x finer step the values lie on a grid as
    coarse, or do not move). A function that only rounds lies on u x its
    terms and is read at its mean slope (OnGrid); one computed exactly at
    points on a coarse binary grid of their own (x + x^2 where the step's
    points are dyadic) lies on a grid that shrinks with the step."""
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.maximum(np.max([np.abs(v) for v in values], axis=0), oracle.probes.inputs_max)
        coarse = q > tol.ROUNDING_TERMS * oracle.precision.native_u * terms
    if not coarse.any():
        return coarse
    at = np.asarray(idx)[coarse]
    fine, _ = grid_at(oracle, F, at, oracle.precision.h / tol.REFINE)
    stairs = coarse.copy()
    stairs[coarse] = (fine == 0) | (fine >= q[coarse])
    return stairs


#: What ``finer`` found per element: the finer value, its bound and how many
#: times smaller the step was.
Moves = dict[int, tuple[float, float, float]]


def finer(
    oracle: Oracle, F: Callable[[float], Any], c: float, terms: float, own: float, ref: fd.Reference, idx: Any
) -> tuple[Moves, dict[int, tuple[float, float]], set[int]]:
    """FinerStep's levels for the elements ``idx`` of ``ref`` (FD along
    F(t) = fn(x + t c u), in the units of u): the elements whose estimate
    moved beyond both bounds (element -> finer value, its bound, the
    shrink), those a finer level settled where the first was flagged
    (element -> value, bound), and those neither where a finer level found
    a kink or a jump the first step straddled. An element smooth at a level and within both
    bounds of the first estimate goes on down too: a feature narrower than
    that level's step (a staircase) still reads as the same mean slope, and
    only a step below its width sees it. The levels stop where an element
    is noise-bound or on its values' grid, or where x + t u itself would
    round (``own``: the moved element's magnitude in units of c)."""
    p = oracle.precision
    moved: Moves = {}
    replaced: dict[int, tuple[float, float]] = {}
    shrink = tol.REFINE
    grid: dict[int, float] = {}  # element -> the coarsest grid its values showed (see fd.grid)
    flagged: set[int] = set()  # elements the level before was not smooth at
    featured: set[int] = set()  # elements some level found a kink or jump beside
    floor = tol.LADDER_ROUNDING_FLOOR * p.u_oracle * own
    ahead = _Ahead(F, p.h, floor)
    while idx.size and p.h / shrink >= floor:
        at = idx
        seen: list[np.ndarray] = []

        def one(t: float, at: np.ndarray = at, seen: list = seen) -> np.ndarray:
            v = _xp.take(_xp.flat(F(t)), at)
            seen.append(v)
            return v

        def many(ts: list[float], at: np.ndarray = at, seen: list = seen) -> list[np.ndarray] | None:
            out = ahead(ts)
            if out is None:
                return None
            vs = [_xp.take(_xp.flat(v), at) for v in out]
            seen.extend(vs)
            return vs

        f0_at = _xp.take(oracle.f0, at)
        fine = at_step(oracle, fd.Line(one, many), f0_at, p.h / shrink, terms)
        # fn's grid does not shrink with the step: a level where a quantised
        # fn looks flat still carries the rounding to the grid a coarser
        # one showed (a slope error of up to its spacing over the step)
        q = fd.grid(seen, f0_at)
        q = np.maximum(q, np.array([grid.get(int(i), 0.0) for i in at.tolist()]))
        grid.update(zip(at.tolist(), q.tolist()))
        reach = fd.grid_bound(q, p.h / shrink)
        value, err = fine.value / c, np.maximum(fine.err, reach) / c
        with np.errstate(invalid="ignore"):
            gridded = ~(reach <= 0.5 * (np.abs(fine.value) + fine.typical))
            far = np.abs(value - _xp.take(ref.value, at)) > err + _xp.take(ref.err, at)
        smooth = (fine.status == fd.SMOOTH) & ~gridded
        first_smooth = _xp.take(ref.status, at) == fd.SMOOTH
        decided = np.zeros(at.size, dtype=bool)
        for k in np.flatnonzero(smooth).tolist():
            i = int(at[k])
            if i not in flagged:
                # (the first level, or one where it read the same mean slope)
                if far[k]:
                    moved[i], decided[k] = (float(value[k]), float(err[k]), shrink), True
            elif far[k] and first_smooth[k]:
                # Smooth here, after a flagged level, it replaces the
                # reference - unless the first step was smooth too and the
                # two contradict each other beyond both bounds: then one
                # misreads fn as computed (a factor that cancels moves in
                # steps of u x its terms, straddled by the levels between
                # and held still by this one, whose slope is then the
                # factor's alone), and FD cannot decide there.
                moved[i], decided[k] = (float(value[k]), float(err[k]), shrink), True
            else:
                replaced[i], decided[k] = (float(value[k]), float(err[k])), True
        flagged = {int(i) for i in at[~smooth].tolist()}
        featured.update(int(i) for i in at[np.isin(fine.status, (fd.KINK, fd.JUMP)) & ~gridded].tolist())
        idx = at[~decided & ~gridded & ~noise_bound(fine, p.h / shrink)]
        shrink *= tol.REFINE
    return moved, replaced, featured - set(moved) - set(replaced)


#: At most this many of ``finer``'s levels are evaluated in one vectorised call.
LEVELS_AT_ONCE = 4


class _Ahead:
    """F's values at the stencils of ``finer``'s levels (steps h / REFINE,
    h / REFINE^2, ... down to ``floor``), LEVELS_AT_ONCE levels in one
    vectorised call where F offers one (fd.levels_at; on small inputs a
    call costs its overhead, not its arithmetic): asked for a level's
    points, it evaluates the levels from there on together. Each value is
    F's own at that t; levels an early stop leaves unread were evaluated for
    nothing, which is cheaper than a call each. None for points that are no
    level's, or where F offers no such call."""

    def __init__(self, F: Callable[[float], Any], h: float, floor: float) -> None:
        self.F, self.values = F, {}
        self.steps: list[float] = []  # as finer's loop steps them
        shrink = tol.REFINE
        while math.isfinite(shrink) and h / shrink >= floor:
            self.steps.append(h / shrink)
            shrink *= tol.REFINE
        self.index = {tuple(k * s / 4 for k in fd.OFFSETS): i for i, s in enumerate(self.steps)}

    def __call__(self, ts: list[float]) -> list[Any] | None:
        if not all(t in self.values for t in ts):
            i = self.index.get(tuple(ts))
            hs = self.steps[i : i + LEVELS_AT_ONCE] if i is not None else []
            stencils = fd.levels_at(self.F, hs) if hs else None
            if stencils is None:
                return None
            self.values = {k * s / 4: v for s, f in zip(hs, stencils) for k, v in zip(fd.OFFSETS, f)}
        return [self.values[t] for t in ts]


def refined(ref: fd.Reference, moved: Moves, replaced: dict[int, tuple[float, float]]) -> fd.Reference:
    """``ref`` with what ``finer`` found: the settled elements' finer
    estimates (smooth now), the moved elements unreliable with both values."""
    if replaced:
        at = np.array(sorted(replaced))
        shape, xp = tuple(ref.value.shape), _xp.ns(ref.value)
        changes: dict[str, Any] = {}
        for name, k in (("value", 0), ("err", 1)):
            part = np.array([replaced[i][k] for i in at.tolist()])
            changes[name] = xp.reshape(_xp.put(_xp.copy(_xp.flat(getattr(ref, name))), at, part), shape)
        # (a smooth estimate now, whatever the first level's flag said)
        changes["status"] = xp.reshape(_xp.put(_xp.copy(_xp.flat(ref.status)), at, fd.SMOOTH), shape)
        ref = dataclasses.replace(ref, **changes)
    if moved:
        before_value, before_err = ref.value, ref.err
        ref = ref.gave_up_at(
            np.array(sorted(moved)), lambda i: moved_reason(float(before_value[i]), float(before_err[i]), moved[i])
        )
    return ref


_ROUNDING = ", or fn's rounding (a factor that cancels moves in steps one step cannot see)"


def moved_reason(value: float, err: float, move: tuple[float, float, float]) -> str:
    """Why an element ``finer`` moved is unreliable, with both estimates."""
    fine, fine_err, shrink = move
    return (
        f"the estimate moved from {value:.6g} +- {err:.2g} to {fine:.6g} +- {fine_err:.2g} "
        f"with a {shrink:g}x smaller step: a feature of fn narrower than the step"
        + (
            ", or fn's rounding (a factor that cancels moves in steps one step cannot see)"
            if shrink > tol.REFINE
            else ""
        )
    )


def at_step(oracle: Oracle, F: Callable[[float], Any], f0: Any, h: float, point: float) -> fd.Reference:
    """The estimate of F'(0) at step h alone (no ladder), with the oracle's
    precision and the point's magnitude ``point`` for the rounding model."""
    p = oracle.precision
    problem = fd.Problem.of(
        F if isinstance(F, fd.Line) else fd.Line(F),
        f0,
        h,
        p.floor,
        p.u_oracle,
        0.0,
        ladder=False,
        f0_scale=p.f0_scale,
        inputs=oracle.probes.inputs_max,
        point=point,
    )
    return fd.reference(problem)


def noise_bound(ref: fd.Reference, h: float) -> np.ndarray:
    """Elements of a host reference at step h whose rounding alone (the model's,
    which a finer step only raises) makes the bound as large as the
    derivatives (see fd.mark_unresolved). The measured noise does not count
    here: a feature narrower than the step shows in a difference table as
    noise too."""
    part = (tol.NOISE_SAFETY * fd.R2_WEIGHT / h) * ref.eps_f
    with np.errstate(invalid="ignore"):
        return ~(part <= 0.5 * (np.abs(ref.value) + ref.typical))
