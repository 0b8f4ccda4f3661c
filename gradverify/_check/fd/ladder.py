"""The kink ladder: flagged elements go down smaller steps until a kink
beside the point stops looking like one, a kink at the point is bracketed
by its one-sided derivatives, a jump shows, or nothing settles."""

from __future__ import annotations

import numpy as np

from .. import tolerance as tol
from .records import JUMP, KINK, SMOOTH, UNRELIABLE, Array, Problem
from .stencil import (
    D4_NOISE,
    DIFF_WEIGHT,
    GRID_NOISE,
    KAPPA_WEIGHT,
    R2_WEIGHT,
    Estimate,
    Stencil,
    estimate,
    evaluate_level,
    levels_at,
    tolerance_at,
)

__all__ = ["noise_explains", "descend", "hull"]


#: Two sides whose measured noise differs by more than this factor are not
#: both noise: one of them holds a kink (or a jump) near the point.
_SIDES_ALIKE = 8.0


def noise_explains(est: Estimate, idx: np.ndarray, ad_tol: Array | float) -> np.ndarray:
    """Of the flagged elements ``idx``, those whose flag is the function's noise:
    both sides of the point equally noisy, and the kink indicator and the
    convergence test within that noise."""
    left, right = est.side_noise(idx)
    lo, hi = np.minimum(left, right), np.maximum(left, right)
    eps = np.maximum(hi, est.eps_f)
    F, h = est._values(idx), est.stencil.h
    tol_i = tolerance_at(ad_tol, tuple(est.value.shape), idx)
    with np.errstate(invalid="ignore", over="ignore"):
        kappa = np.abs(4.0 * (F[2] + F[-2]) - (F[4] + F[-4]) - 6.0 * F[0])
        d1, d2, d4 = (F[4] - F[-4]) / (2 * h), (F[2] - F[-2]) / h, (F[1] - F[-1]) * (2 / h)
        ok = kappa <= tol.NOISE_SAFETY * KAPPA_WEIGHT * eps + tol_i * h
        ok &= np.abs(d2 - d4) - 0.5 * np.abs(d1 - d2) <= tol.NOISE_SAFETY * DIFF_WEIGHT / h * eps
        ok &= (hi <= _SIDES_ALIKE * lo) | (hi <= est.eps_f)
    return ok & est.take("finite", idx)


def _levels(p: Problem) -> dict[float, Stencil]:
    """Every level the ladder may descend to, from one vectorised evaluation
    of fn where F offers one (each level is otherwise evaluated when the
    ladder reaches it; a level it never reaches costs a batch a few points
    longer, not a call)."""
    steps, k = [], p.h
    while k / tol.LADDER_FACTOR >= p.floor:
        k /= tol.LADDER_FACTOR
        steps.append(k)
    stencils = levels_at(p.F, steps) if len(steps) >= 2 else None
    return {} if stencils is None else {k: Stencil(k, f) for k, f in zip(steps, stencils)}


def descend(p: Problem, level0: Estimate, suspects: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Settle the flagged elements ``suspects`` (flat indices, on the host):
    their value, err and status (host arrays in the order of ``suspects``).
    Each level is estimated over the whole vector where
    it lives; only the suspects' values come to the host."""
    h, ad_tol, u_oracle = p.h, p.ad_tol, p.u_oracle
    count = suspects.size
    central, central_err = level0.take("value", suspects), level0.take("err", suspects)
    left_n, right_n = level0.side_noise(suspects)
    # fn's noise does not shrink with the step: what one side showed at a
    # coarser level still bounds the estimate at a finer one (where a
    # quantised fn can look exactly flat). One side: a kink beside the point
    # contaminates the other.
    r, le, se = level0.sides(suspects, np.minimum(left_n, right_n))
    # no measurable slope jump at the first level: the flag may be noise or a
    # feature smaller than the step, not a kink
    flat = np.abs(r - le) <= 2 * se
    # ... nor where the kink indicator is rounding-sized (see _rounding_sized)
    quantum, kappa = _rounding_sized(level0, suspects, u_oracle, p.inputs)
    # (all of the level's noise where no slope jump showed; else the cleaner
    # side's: a kink beside the point inflates the other) - and never below
    # the rounding to the grid fn's values lie on, nor below the noise a
    # rounding-sized indicator implies
    carried = np.where(flat, level0.take("noise", suspects), np.minimum(left_n, right_n))
    carried = np.maximum(carried, GRID_NOISE * level0.grid(suspects))
    carried = np.maximum(carried, np.where(quantum, kappa / D4_NOISE, 0.0))
    sides = {"r": r, "le": le, "se": se}
    status = np.where(level0.take("finite", suspects), KINK, UNRELIABLE).astype(np.int8)
    value, err = central.copy(), central_err.copy()
    everything = np.arange(count)
    hull(value, err, everything, r, le, se)
    # A kink at the point has the same one-sided derivatives at every step, so
    # each side's interval at every level holds its side's: they must have a
    # point in common, side by side. (A feature narrower than the step - a row
    # normalised while far smaller than it - gives sides that wander from level
    # to level, each within its own wide bound; sides without a limit, such as
    # log(1/h), drift a little at every level, within both bounds of the last.)
    side_lo, side_hi = np.stack([r, le]) - se, np.stack([r, le]) + se
    if not p.ladder:
        return value, err, status
    prev_step = level0.step_f(suspects)
    settled_sides = np.zeros(count, dtype=bool)  # one-sided derivatives agreed between two levels
    k = h
    open_ = everything  # positions in suspects
    levels = _levels(p)
    while open_.size and k / tol.LADDER_FACTOR >= p.floor:
        k /= tol.LADDER_FACTOR
        stencil = levels.pop(k, None) or evaluate_level(p.F, k)
        est = estimate(stencil, p.f0, u_oracle, ad_tol, p.f0_scale, outer=p.outer, point=p.point)
        sub = est.take("kink", suspects[open_])
        if sub.any():
            sub[sub] = ~noise_explains(est, suspects[open_[sub]], ad_tol)
        smooth = open_[~sub]
        carried[open_] = np.maximum(carried[open_], GRID_NOISE * est.grid(suspects[open_]))
        # The kink was beside the point: at this step both sides agree.
        fine_value, fine_err = est.take("value", suspects[smooth]), est.take("err", suspects[smooth])
        value[smooth] = fine_value
        err[smooth] = np.maximum(fine_err, (tol.NOISE_SAFETY * R2_WEIGHT / k) * carried[smooth])
        status[smooth] = SMOOTH
        # ... or there was no kink, only noise the first level's estimate
        # already carried: estimates that disagree beyond both bounds cannot
        # tell which is right. Undecided, not a confident wrong reference.
        drift = np.abs(fine_value - central[smooth]) > fine_err + central_err[smooth]
        status[smooth[drift & (flat | quantum)[smooth]]] = UNRELIABLE
        keep = open_[sub]
        at = suspects[keep]
        position = np.searchsorted(open_, keep)
        ln, rn = est.side_noise(at)
        carried[keep] = np.maximum(carried[keep], np.minimum(ln, rn))
        r, le, se = est.sides(at, np.minimum(ln, rn))
        # a kink at the point has the same one-sided derivatives at every step
        agree = (np.abs(r - sides["r"][position]) <= se + sides["se"][position]) & (
            np.abs(le - sides["le"][position]) <= se + sides["se"][position]
        )
        settled_sides[keep] = agree
        side_lo[:, keep] = np.maximum(side_lo[:, keep], np.stack([r, le]) - se)
        side_hi[:, keep] = np.minimum(side_hi[:, keep], np.stack([r, le]) + se)
        # every level's hull holds a kink at the point; keep the tightest (a
        # finer step trades truncation for rounding)
        tighter = np.abs(r - le) / 2 + se < err[keep]
        hull(value, err, keep[tighter], r[tighter], le[tighter], se[tighter])
        sides = {"r": r, "le": le, "se": se}
        step = est.step_f(at)
        # F(h) - F(0) shrinks ~8x per level on a kink, not at all on a jump, judged
        # against each element's own noise and rounding floor (the vector's grows
        # 8x per level beside a steep element or a jump: see Estimate.own_noise).
        prev = prev_step[position]
        own_noise = np.maximum(np.minimum(ln, rn), est.own_noise(at, u_oracle, p.point))
        finite = est.take("finite", at)
        jump = (step > 0.5 * prev) & (step > 1e3 * own_noise) & finite
        status[keep] = np.where(finite, KINK, UNRELIABLE)
        status[keep[jump]] = JUMP
        prev_step = step
        open_ = keep
    # Whatever is still open at the floor is a kink at the point when its
    # one-sided derivatives settled and each side's intervals over the levels
    # overlap, a jump when the last level said so, and otherwise undecidable.
    # With no finer level possible - the first step is already at the
    # resolution of the dtype under test - the first level's hull stands,
    # unless its sides showed no slope jump beyond their error: then the flag
    # was noise, and the central estimate (whose bound holds that noise) stands.
    if open_.size and k < h:
        disjoint = (side_lo[:, open_] > side_hi[:, open_]).any(axis=0)
        undecided = open_[(status[open_] == KINK) & (~settled_sides[open_] | disjoint)]
        status[undecided] = UNRELIABLE
    elif open_.size:
        # Within what u x fn's terms can make, the kink indicator is fn's
        # rounding: with no slope jump beyond the sides' error the flag was
        # noise (the central estimate stands); with one, it is a kink or a
        # quantum step of a quantised fn beside the point (jax's tanh-form
        # gelu in its tail), which no finer step can tell apart here: both
        # undecidable. Beyond that, no slope jump is a feature narrower than
        # the step (a normalisation of a row far smaller than the step).
        kinked = open_[status[open_] == KINK]
        rounding = quantum[kinked]
        no_jump = flat[kinked]
        noise = kinked[rounding & no_jump]
        value[noise], err[noise], status[noise] = central[noise], central_err[noise], SMOOTH
        status[kinked[rounding != no_jump]] = UNRELIABLE
    return value, err, status


def _rounding_sized(
    level0: Estimate, suspects: np.ndarray, u_oracle: float, inputs: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per suspect: whether the first level's kink indicator (a fourth
    difference) is within what u x fn's terms can make (ROUNDING_TERMS x u x
    the larger of its values and the inputs), and the indicator. A factor
    that cancels (1 + erf z in gelu's tail) moves in steps of that size,
    which the sides read as a slope jump; the noise that would make such an
    indicator (over D4_NOISE) bounds every finer level, whose difference
    table the steps straddle or miss."""
    Fv = level0._values(suspects)
    with np.errstate(invalid="ignore", over="ignore"):
        kappa = np.abs(4.0 * (Fv[2] + Fv[-2]) - (Fv[4] + Fv[-4]) - 6.0 * Fv[0])
        terms = np.maximum(np.max([np.abs(v) for v in Fv.values()], axis=0), inputs)
    return kappa <= tol.ROUNDING_TERMS * u_oracle * terms, kappa


def hull(value: np.ndarray, err: np.ndarray, idx: np.ndarray, r: np.ndarray, le: np.ndarray, se: np.ndarray) -> None:
    """At a kink the interval is the hull of the one-sided derivatives (host
    arrays, in place)."""
    lo = np.minimum(r, le) - se
    hi = np.maximum(r, le) + se
    value[idx] = (lo + hi) / 2
    err[idx] = (hi - lo) / 2
