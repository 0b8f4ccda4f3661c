"""Finite differences along a direction: F(t) = fn(x + t u), F'(0) = J u.

Two central stencils (steps h and h/2) give D(h), D(h/2), their Richardson
extrapolation R and an error estimate |D(h) - D(h/2)|/3 (the error of D(h/2),
a safe bound for R's). The same four evaluations plus F(0) also give

* one-sided second-order estimates D+ and D- (the derivatives on each side),
* a kink indicator kappa = h |SD(h/2) - SD(h)|, SD the second difference:
  O(h^3) on smooth pieces but equal to the slope jump |D+ - D-| at a kink,
  whatever its size, so a kink the central difference silently averages over
  is still seen.

Elements the indicator flags go down a ladder of smaller steps: a kink *beside*
the point stops looking like one once the step is smaller than its distance
(then both sides agree), a kink *at* the point never does (then an AD value is
valid when it lies between D- and D+), and a jump shows as F(h) - F(0) that
does not shrink with h.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _tolerance as tol

# Status of each element's reference after the kink analysis.
SMOOTH, KINK, JUMP, UNRELIABLE = 0, 1, 2, 3
STATUS_NAMES = {SMOOTH: "smooth", KINK: "kink", JUMP: "jump", UNRELIABLE: "unreliable"}


@dataclass
class Stencil:
    """One level: F at -h, -h/2, h/2, h (and F(0) shared)."""

    h: float
    fm1: np.ndarray
    fm2: np.ndarray
    fp2: np.ndarray
    fp1: np.ndarray


@dataclass
class Estimate:
    """What one level says about F'(0), element by element."""

    value: np.ndarray  # Richardson-extrapolated central difference
    err: np.ndarray  # its error bound (safety factor and rounding included)
    right: np.ndarray  # one-sided D+
    left: np.ndarray  # one-sided D-
    side_err: np.ndarray  # error bound of D+ and D-
    kink: np.ndarray  # bool: the kink indicator exceeds its noise
    finite: np.ndarray  # bool: every stencil value finite
    step_f: np.ndarray  # max(|F(h) - F(0)|, |F(-h) - F(0)|), for jump detection
    noise_f: np.ndarray  # rounding level of F values


def evaluate_level(F: Callable[[float], np.ndarray], h: float) -> Stencil:
    return Stencil(h, F(-h), F(-h / 2), F(h / 2), F(h))


def estimate(s: Stencil, f0: np.ndarray, u_oracle: float, ad_tol: np.ndarray) -> Estimate:
    h = s.h
    with np.errstate(invalid="ignore", over="ignore"):
        d1 = (s.fp1 - s.fm1) / (2 * h)
        d2 = (s.fp2 - s.fm2) / h
        value = d2 + (d2 - d1) / 3.0
        mag = np.maximum.reduce([np.abs(f0), np.abs(s.fp1), np.abs(s.fm1)])
        finite = np.isfinite(mag) & np.isfinite(value)
        scale = float(np.max(np.where(finite, mag, 0.0), initial=0.0))
        # Error of one F value: fn's own rounding (relative to |F| and, for
        # cancellation inside fn, to the vector's scale) plus the rounding of the
        # point x + t u itself, which moves F by |dF/dt| u |x|/|u| <= |dF/dt| u
        # (directions are scaled so that |u_j| >= |x_j|).
        slope = np.abs(np.where(finite, value, 0.0))
        slope_scale = float(np.max(slope, initial=0.0))
        eps_f = tol.FD_EVAL_ROUNDING * u_oracle * (mag + scale + slope + slope_scale)
        # R = (4 D(h/2) - D(h)) / 3 weighs F errors by 3/h in total (see module doc).
        err = tol.FD_SAFETY * (np.abs(d2 - d1) / 3.0 + 3.0 * eps_f / h)
        right = (4 * s.fp2 - 3 * f0 - s.fp1) / h
        left = (3 * f0 - 4 * s.fm2 + s.fm1) / h
        first_r = (s.fp2 - f0) / (h / 2)
        first_l = (f0 - s.fm2) / (h / 2)
        side_err = tol.FD_SAFETY * (
            np.maximum(np.abs(right - first_r), np.abs(left - first_l)) + 8.0 * eps_f / h
        )
        sd1 = (s.fp1 - 2 * f0 + s.fm1) / h**2
        sd2 = (s.fp2 - 2 * f0 + s.fm2) / (h / 2) ** 2
        kappa = h * np.abs(sd2 - sd1)
        # h |SD(h/2) - SD(h)| sums F errors with weights (4+8+16+1+2+1)/h = 32/h.
        kink = ~finite | (kappa > tol.FD_SAFETY * 32.0 * eps_f / h + ad_tol)
        step_f = np.maximum(np.abs(s.fp1 - f0), np.abs(s.fm1 - f0))
    return Estimate(value, err, right, left, side_err, kink, finite, step_f, eps_f)


@dataclass
class Reference:
    """The FD reference for J u: an interval per element, and why."""

    value: np.ndarray  # best point estimate (midpoint of the interval)
    lo: np.ndarray
    hi: np.ndarray
    status: np.ndarray  # SMOOTH / KINK / JUMP / UNRELIABLE per element
    err: np.ndarray  # half-width of the interval
    evaluations: int


def reference(
    F: Callable[[float], np.ndarray],
    f0: np.ndarray,
    h: float,
    floor: float,
    u_oracle: float,
    ad_tol: np.ndarray,
    *,
    ladder: bool = True,
) -> Reference:
    """FD reference for F'(0) with kink analysis of flagged elements."""
    level0 = estimate(evaluate_level(F, h), f0, u_oracle, ad_tol)
    evaluations = 4
    value = level0.value.copy()
    err = level0.err.copy()
    status = np.full(value.shape, SMOOTH, dtype=np.int8)
    lo, hi = value - err, value + err
    suspects = np.flatnonzero(level0.kink)
    if suspects.size:
        # At a kink the interval is the hull of the one-sided derivatives.
        r, le, se = level0.right[suspects], level0.left[suspects], level0.side_err[suspects]
        lo[suspects] = np.minimum(r, le) - se
        hi[suspects] = np.maximum(r, le) + se
        status[suspects] = KINK
        bad = ~np.isfinite(lo[suspects]) | ~np.isfinite(hi[suspects])
        status[suspects[bad]] = UNRELIABLE
    if suspects.size and ladder:
        prev_step = level0.step_f[suspects]
        k = h
        open_ = suspects
        while open_.size and k / tol.LADDER_FACTOR >= floor:
            k /= tol.LADDER_FACTOR
            est = estimate(evaluate_level(F, k), f0, u_oracle, ad_tol)
            evaluations += 4
            sub = est.kink[open_]
            smooth = open_[~sub]
            # The kink was beside the point: at this step both sides agree.
            value[smooth], err[smooth] = est.value[smooth], est.err[smooth]
            lo[smooth], hi[smooth] = value[smooth] - err[smooth], value[smooth] + err[smooth]
            status[smooth] = SMOOTH
            keep = open_[sub]
            step = est.step_f[keep]
            # F(h) - F(0) shrinks ~8x per level on a kink, not at all on a jump.
            prev = prev_step[sub]
            jump = (step > 0.5 * prev) & (step > 1e3 * est.noise_f[keep]) & est.finite[keep]
            status[keep] = np.where(status[keep] == UNRELIABLE, UNRELIABLE, KINK)
            status[keep[jump]] = JUMP
            prev_step = step
            open_ = keep
        # Whatever is still open at the floor is a kink at the point (hull kept)
        # unless its last level called it a jump.
    value = np.where(status == KINK, (lo + hi) / 2, value)
    half = np.where(status == SMOOTH, err, (hi - lo) / 2)
    return Reference(value, lo, hi, status, half, evaluations)
