"""The rounding model's fast path: a reference whose bound is the model's
rather than measured noise, accepted where AD agrees within it."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import tolerance as tol, xp as _xp
from .blocks import Scratch, block_slices, compiled
from .records import Array
from .stencil import (
    DIFF_WEIGHT,
    KAPPA_WEIGHT,
    R1_WEIGHT,
    R2_WEIGHT,
    first_level,
    kink_test,
    model_noise,
    richardson,
    scales as block_scales,
    scales_asked,
    tolerance_parts,
)

__all__ = [
    "COARSE_OFFSETS",
    "KEEP_POINTS",
    "MODEL_OFFSETS",
    "model_reference",
    "model_rows",
    "model_scales",
]


#: A model reference of at most this many elements keeps its six points for
#: the measurement (larger ones evaluate them again if it is ever needed).
KEEP_POINTS = 1 << 16


#: The points the rounding model's test needs: D(h), D(h/2) and D(h/4), so
#: R1 and R2 (t = +-h, +-h/2, +-h/4). The measured noise needs +-3h/4 besides.
MODEL_OFFSETS = (-4, -2, -1, 1, 2, 4)


#: The coarse model's points: D(h) and D(h/2), so R1 (t = +-h, +-h/2). A
#: directional check's first tier takes them (see model_reference's
#: ``coarse``); two evaluations of fn fewer than MODEL_OFFSETS.
COARSE_OFFSETS = (-4, -2, 2, 4)


def model_scales(f: dict[int, Array], h: float) -> tuple[list[Any], Any] | None:
    """The scales model_reference works out from F's values ``f`` (at
    COARSE_OFFSETS at least), asked for as torch device scalars to be read
    with another stage's (see stencil.scales_asked): those scalars, and what
    makes its ``scales`` of their values; None where ``f`` is not on such a
    device."""
    F = {k: _xp.flat(f[k]) for k in COARSE_OFFSETS}
    if not all(_xp.device_floating(a) for a in F.values()):
        return None
    with _xp.quiet():
        return scales_asked(F, block_slices(_xp.size(F[2]), F[2], None), h)


def model_reference(
    f: dict[int, Array],
    f0: Array,
    h: float,
    u_oracle: float,
    ad_tol: Array | float,
    f0_scale: float,
    ad: Array | None = None,
    chunk: int | None = None,
    point: float = 1.0,
    coarse: bool = False,
    scales: tuple[float, float] | None = None,
    ad_scale: float = 1.0,
) -> tuple[Array, Array, Array | None, float] | None:
    """The reference with fn's noise taken at the rounding model alone, from the
    points MODEL_OFFSETS: (value, err, shift, typical) - shift: how far R1 and
    R2, one of which the measured estimate takes, lie from value - or None where any element is
    flagged (a kink, no convergence, not finite, a bound as large as the
    derivatives) or, given ``ad`` (+- ``ad_tol``), disagrees with it.

    The interval is the intersection of R1's and R2's model intervals. The
    measured noise only ever raises a bound above the model's (eps =
    max(measured, model)) and only ever lowers the flags' sensitivity, and the
    measured estimate takes R1 or R2 - so this interval lies inside the
    measured one element by element, and an AD value that agrees with it
    agrees with the measured reference too. Measuring costs two more
    evaluations of fn and a difference table; a comparison asks for it only
    when it is about to fail.

    ``coarse``: from COARSE_OFFSETS alone (see _coarse_block): R1 with D(h/2)'s
    error estimate |R1 - D(h/2)| as its truncation bound, which bounds R1's
    own (of order h^4, D(h/2)'s of order h^2) where the expansion holds, and
    only where that bound is within R1's noise at every element (None
    elsewhere: a curved function, a feature between h/2 and h). The six-point
    interval is never narrower than R1's noise, so this one is at most twice
    as wide: a disagreement the six points would convict is at least half
    way to this bound, in the band of doubt that takes a second tier. It has
    no shift (None): it is not placed inside the measured interval.

    ``ad_scale``: ``ad`` is in units ``ad_scale`` times smaller (J u where
    the model is along c u): it is scaled block by block, in the block's
    scratch (on numpy and torch; jax takes it scaled whole), bit for bit as
    scaled whole, and no full-size scaled copy is held."""
    shape = tuple(f0.shape)
    offsets = COARSE_OFFSETS if coarse else MODEL_OFFSETS
    F = {k: _xp.flat(f[k]) for k in offsets}
    f0f = _xp.flat(f0)
    adf = None if ad is None else _xp.flat(ad)
    n = _xp.size(f0f)
    xp = _xp.ns(f0f, *F.values())
    tol_array, tol_f = tolerance_parts(ad_tol, shape)
    blocks = block_slices(n, f0f, chunk)
    slope_scale, stencil_scale = scales or (0.0, 0.0)
    with _xp.quiet():
        for b in () if scales is not None else blocks:
            slope, outer, _ = block_scales(F, b, h)  # (as estimate() computes them, bit for bit)
            slope_scale, stencil_scale = max(slope_scale, slope), max(stencil_scale, outer)
        eps_f = model_noise(u_oracle, h, f0_scale, stencil_scale, slope_scale, point)
        typical = max(f0_scale, slope_scale)
        noise2, noise1 = (tol.NOISE_SAFETY * R2_WEIGHT / h) * eps_f, (tol.NOISE_SAFETY * R1_WEIGHT / h) * eps_f
        kappa_max = (tol.NOISE_SAFETY * KAPPA_WEIGHT) * eps_f
        drift_max = (tol.NOISE_SAFETY * DIFF_WEIGHT / h) * eps_f
        limits = (noise1, noise2, typical, kappa_max, drift_max)
        kernel = compiled(_coarse_block if coarse else _model_block, f0f)
        scratch = Scratch.beside(f0f, max(b.stop - b.start for b in blocks))
        if scratch is None:  # (jax: one compiled block)
            adf = adf if adf is None or ad_scale == 1.0 else adf * ad_scale
            b = blocks[0]
            t = tol_f[b] if tol_array else tol_f
            ok, value, err, shift = kernel(
                tuple(F[k][b] for k in offsets), f0f[b], t, None if adf is None else adf[b], h, limits
            )
            if not bool(ok):
                return None
        else:
            value, err = _xp.empty(n, f0f), _xp.empty(n, f0f)
            shift = None if coarse else _xp.empty(n, f0f)
            for b in blocks:
                t = tol_f[b] if tol_array else tol_f
                ad_b = None if adf is None else adf[b] if ad_scale == 1.0 else (adf[b], ad_scale)
                fs = tuple(F[k][b] for k in offsets)
                outs = (value[b], err[b], None if shift is None else shift[b])
                ok, _, _, _ = kernel(fs, f0f[b], t, ad_b, h, limits, outs, scratch)
                if not bool(ok):
                    return None
    shift = None if shift is None else xp.reshape(shift, shape)
    return xp.reshape(value, shape), xp.reshape(err, shape), shift, typical


def model_rows(
    fs: list[dict[int, np.ndarray]],
    f0: np.ndarray,
    h: float,
    u_oracle: float,
    ad_tols: list[np.ndarray | float],
    f0_scale: float,
    ads: list[np.ndarray] | None,
    points: list[float],
    stacked: dict[int, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """model_reference() along many directions at once (host arrays of at
    most CHUNK elements): direction b's points ``fs[b]`` (``stacked``, where
    given: each offset's points of every direction, a row per direction, as
    they are stacked here), AD tolerance
    ``ad_tols[b]``, AD values ``ads[b]`` and ``points[b]``, all sharing F(0)
    and the step. Element for element the same operations as
    model_reference(), on a row per direction: each row's result is bit for
    bit that direction's. Returns (whether each direction's model holds,
    value, err, shift - a flat row per direction - and each direction's
    typical derivative)."""
    shape = tuple(f0.shape)
    f0f = np.ravel(f0)
    n = f0f.size
    if stacked is None:
        stacked = {k: np.stack([np.ravel(f[k]) for f in fs]) for k in MODEL_OFFSETS}
    with _xp.quiet():
        d2 = (stacked[2] - stacked[-2]) * (1.0 / h)  # (as scales computes them)
        slopes = np.max(np.abs(d2), axis=-1, where=np.isfinite(d2), initial=0.0)
        outer = np.maximum(
            *(np.max(np.abs(stacked[k]), axis=-1, where=np.isfinite(stacked[k]), initial=0.0) for k in (-4, 4))
        )
        limits, typicals = [], []
        for slope, edge, point in zip(slopes.tolist(), outer.tolist(), points):
            eps_f = model_noise(u_oracle, h, f0_scale, edge, slope, point)
            typical = max(f0_scale, slope)
            typicals.append(typical)
            limits.append(
                (
                    (tol.NOISE_SAFETY * R1_WEIGHT / h) * eps_f,
                    (tol.NOISE_SAFETY * R2_WEIGHT / h) * eps_f,
                    typical,
                    (tol.NOISE_SAFETY * KAPPA_WEIGHT) * eps_f,
                    (tol.NOISE_SAFETY * DIFF_WEIGHT / h) * eps_f,
                )
            )
        columns = tuple(np.array(c)[:, None] for c in zip(*limits))
        if all(type(a) is np.ndarray and a.shape == (n,) for a in ad_tols):
            t = np.stack(ad_tols)
        else:
            t = np.stack([np.ravel(np.broadcast_to(a, shape)) if np.ndim(a) else np.full(n, float(a)) for a in ad_tols])
        ad = None if ads is None else np.stack([np.ravel(a) for a in ads])
        ok, value, err, shift = _model_block(tuple(stacked[k] for k in MODEL_OFFSETS), f0f, t, ad, h, columns)
    return ok, value, err, shift, typicals


def _model_block(
    fs: tuple[Array, ...],
    f0: Array,
    t: Array | float,
    ad: Array | None,
    h: float,
    limits: tuple[float, ...],
    outs: tuple[Array, Array, Array] | None = None,
    scratch: Scratch | None = None,
) -> tuple:
    """model_reference() on one block: (every element passes, value, err,
    shift) from the points ``fs`` (in the order of MODEL_OFFSETS). Pure array
    arithmetic (see stencil's estimate block); on numpy and torch the results go into
    ``outs`` (value, err, shift) and the temporaries into ``scratch``."""
    noise1, noise2, typical, kappa_max, drift_max = limits
    f = dict(zip(MODEL_OFFSETS, fs))
    xp = _xp.ns(f0, *fs)
    m = tuple(f0.shape)[0]
    rows = len(tuple(fs[0].shape)) == 2  # (model_rows: a row per direction)

    def every(a: Array) -> Any:
        return np.all(a, axis=-1) if rows else xp.all(a)

    def tmp(name: str) -> Array | None:
        return None if scratch is None else scratch(name, m)

    out_v, out_e, out_s = outs if outs is not None else (None, None, None)
    d1, d2, d4, r1, r2 = richardson(f, h, tmp)
    # (the kink indicator first, while the block's points are still in cache)
    ok = every(kink_test(f, f0, t, h, kappa_max, tmp))
    trunc = _xp.iabs(_xp.sub(r1, r2, tmp("trunc")))
    trunc *= tol.FD_SAFETY
    e1 = _xp.mul(trunc, 16.0 / 15.0, tmp("e1"))
    e1 += noise1
    trunc += noise2  # R2's bound
    lo = _xp.imaximum(_xp.sub(r2, trunc, tmp("lo")), _xp.sub(r1, e1, tmp("a")))
    hi = _xp.iminimum(_xp.add(r2, trunc, tmp("hi")), _xp.add(r1, e1, tmp("a")))
    v = _xp.add(lo, hi, out_v)
    v *= 0.5
    e = _xp.sub(hi, lo, out_e)
    e *= 0.5
    room = _xp.absolute(v, tmp("room"))
    room += typical
    room *= 0.5
    ok = ok & every(e <= room)
    drift = _xp.iabs(_xp.sub(d2, d4, tmp("drift")))
    wide = _xp.iabs(_xp.sub(d1, d2, tmp("a")))
    wide *= 0.5
    drift -= wide
    ok = ok & every(drift <= drift_max)
    if ad is not None:
        room = _xp.add(e, t, tmp("room")) if _xp.is_array(t) else e + t
        ok = ok & every(_xp.iabs(_ad_minus(ad, v, tmp("a"))) <= room)
    r1 -= v
    r2 -= v
    shift = _xp.imaximum(_xp.iabs(r1), _xp.iabs(r2))
    if out_s is not None:
        out_s[...] = shift
        shift = out_s
    return ok, v, e, shift


#: The coarse model's temporaries in two buffers (D(h)'s and D(h/2)'s, let
#: go once R1 is made): each name shares one with no temporary alive beside it.
_COARSE_SCRATCH = {"kappa": "d1", "a": "d2", "limit": "d2", "room": "d1"}


def _coarse_block(
    fs: tuple[Array, ...],
    f0: Array,
    t: Array | float,
    ad: Array | None,
    h: float,
    limits: tuple[float, ...],
    outs: tuple[Array, Array, None] | None = None,
    scratch: Scratch | None = None,
) -> tuple:
    """The coarse model on one block, from the points ``fs`` (in the order of
    COARSE_OFFSETS): (every element passes, value, err, None). R1 and the
    kink indicator bit for bit as _model_block computes them; R1's interval
    R1 +- (FD_SAFETY |D(h/2) - D(h)| / 3 + R1's noise) in place of the
    intersection with R2's, where that truncation term is within R1's noise
    everywhere (else None: the six points decide), and no drift test (it
    needs D(h/4))."""
    noise1, _, typical, kappa_max, _ = limits
    f = dict(zip(COARSE_OFFSETS, fs))
    xp = _xp.ns(f0, *fs)
    m = tuple(f0.shape)[0]

    def tmp(name: str) -> Array | None:
        return None if scratch is None else scratch(_COARSE_SCRATCH.get(name, name), m)

    out_v, out_e, _ = outs if outs is not None else (None, None, None)
    _, _, r1 = first_level(f, h, tmp, out_v)
    ok = xp.all(kink_test(f, f0, t, h, kappa_max, tmp))
    # D(h/2)'s own error estimate R1 - D(h/2) = (D(h/2) - D(h)) / 3, with the
    # truncation's safety factor, held to R1's noise: then this interval is
    # at most twice the six-point model's, never narrower than R1's noise.
    # (As 2 (F(h/2) - F(-h/2)) - (F(h) - F(-h)), scaled once: the doubling is
    # exact, so a compiler that fuses a product into the subtraction rounds
    # it alike, and jax's error agrees with numpy's and torch's bit for bit.)
    e = _xp.sub(f[2], f[-2], out_e)
    e *= 2.0
    e -= _xp.sub(f[4], f[-4], tmp("a"))
    e = _xp.iabs(e)
    e *= tol.FD_SAFETY / 3.0 * (0.5 / h)
    ok = ok & xp.all(e <= noise1)
    e += noise1
    room = _xp.absolute(r1, tmp("room"))
    room += typical
    room *= 0.5
    ok = ok & xp.all(e <= room)
    if ad is not None:
        room = _xp.add(e, t, tmp("room")) if _xp.is_array(t) else e + t
        ok = ok & xp.all(_xp.iabs(_ad_minus(ad, r1, tmp("a"))) <= room)
    return ok, r1, e, None


def _ad_minus(ad: Array | tuple[Array, float], v: Array, out: Array | None) -> Array:
    """ad - v, into ``out`` where given; ``ad`` as (values, c): c values - v
    (the product rounded, then the difference, as ``ad * c - v`` rounds)."""
    if not isinstance(ad, tuple):
        return _xp.sub(ad, v, out)
    d = _xp.mul(ad[0], ad[1], out)
    d -= v
    return d
