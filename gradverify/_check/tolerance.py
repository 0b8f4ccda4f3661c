"""The tolerance model, in one place. Every constant says why it has its value.

Nothing here scales with the number of elements: per-element bounds come from
the dtype's rounding and the finite-difference error estimate; sums over many
elements (projections <v, J u>) use Hoeffding bounds, valid because each
element of a direction or cotangent is a random sign, drawn independently of
the errors it weights, times a magnitude that the bound takes as the weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import xp as _xp

__all__ = [
    "AD_ROUNDING",
    "AD_ROUNDING_LOW",
    "FD_EVAL_ROUNDING",
    "FD_SAFETY",
    "HOEFFDING_K",
    "KINK_RESOLUTION",
    "LADDER_FACTOR",
    "LADDER_ROUNDING_FLOOR",
    "LOW_PRECISION_LIMIT",
    "NOISE_SAFETY",
    "REFINE",
    "ROUNDING_TERMS",
    "SMALLEST_NORMAL",
    "STEP_DITHER",
    "TINY_SCALE",
    "UNIT_ROUNDOFF",
    "ad_bound",
    "ad_rounding",
    "base_step",
    "finest_step",
    "hoeffding",
    "kink_resolution",
    "ladder_floor",
    "unit_roundoff",
]

#: Unit roundoff (half an ulp at 1) per dtype name.
UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}

#: A derivative computed in dtype d is trusted to AD_ROUNDING * u_d, relative to
#: its own magnitude plus the largest magnitude in its vector. Derivative
#: formulas chain ~10 operations of a few ulps each, and the evaluation point
#: itself was rounded (x + b in float32 moves the point by u|x+b|, which moves
#: f' by |f''| u |x+b|). 256 keeps correct float32 activations and short
#: reductions passing while a wrong rule (an O(1) relative error) still fails.
AD_ROUNDING = 256.0

#: ... except in half precision, where 256 ulps would be 12% (float16) or 100%
#: (bfloat16) and hide wrong rules: there a derivative chain stays within a few
#: ulps of its own magnitude, and the relative spread of the rounding is what we
#: allow (32 u = 1.6% for float16, 16 u = 6% for bfloat16, where jax.nn.gelu's
#: derivative was seen 7 u off).
AD_ROUNDING_LOW = {"float16": 32.0, "bfloat16": 16.0}


def ad_rounding(dtype_name: str) -> float:
    """The AD rounding factor (in units of u) for results of ``dtype_name``."""
    return AD_ROUNDING_LOW.get(dtype_name, AD_ROUNDING)


#: A function value is trusted to FD_EVAL_ROUNDING * u of the output's scale
#: (its largest magnitude plus the step's share of the slope). With FD_SAFETY
#: and the 3/h weight of the Richardson stencil, evaluation errors up to ~50 ulps
#: of the scale (long reductions, cancellation like x - tanh(x)) stay inside
#: the bound; a larger factor would hide float64 rules that are only float32
#: accurate (torch's hardsigmoid derivative, see tests/check/test_kinks.py).
FD_EVAL_ROUNDING = 4.0

#: Richardson's error estimate is an estimate; we allow 4x before calling a
#: difference real (the estimate was checked to be within 2x on the
#: activation table's smooth pieces).
FD_SAFETY = 4.0

#: The measured noise sigma of one F value (from fourth differences) is an
#: estimate from a handful of samples, and one rounding error can reach a few
#: sigma: a combination of stencil values is allowed NOISE_SAFETY x sigma x
#: the sum of its |coefficients| (the worst case of aligned errors, itself
#: about twice their standard deviation), so ~8 standard deviations in all.
NOISE_SAFETY = 4.0

#: Tangent scales (per input element) are floored here, so that a step of
#: ~2^-20 of them and a quarter of it stay normal float64 numbers: zeros and
#: subnormal inputs get a usable step, not one that underflows.
TINY_SCALE = 2.0**-960

#: Where fn runs in float32/16/bf16 and accepts float64, its AD runs in both:
#: the float64 AD is what finite differences judge (a wrong rule shows there),
#: and the low-precision AD is compared with it. Within the rounding model it
#: is fine; beyond the model but within this limit (relative to its own
#: magnitude plus the largest in its vector) it is a ``precision`` warning:
#: rounding of the low-precision run, e.g. 1 + erf cancelling in float32 or a
#: TF32 matmul (10 mantissa bits: ~2^-11 per product, a few times that
#: accumulated); beyond the limit it is an error: a low-precision code path
#: that computes something else. 2^-7 is 16 TF32 ulps (131072 float32 ulps);
#: half precision has 2^-11 (float16) and 2^-8 (bfloat16) ulps, so its limit
#: is 64 and 16 of its own ulps.
LOW_PRECISION_LIMIT = {"float32": 2.0**-7, "float16": 2.0**-5, "bfloat16": 2.0**-4}

#: fn's noise seen only at spacings wider than the step (a quantised tail:
#: flat pieces and steps of u x the terms) may excuse a disagreement only if
#: it is a plausible rounding artifact: at most ROUNDING_TERMS x u x the
#: largest magnitude among the inputs and the function's values there. An
#: elementwise formula's terms are low powers of its inputs (0.044715 z^3 at
#: z = 10 is 45; z^3 at 10 is 1000); a kink or a real feature further out
#: moves F by far more than that and excuses nothing.
ROUNDING_TERMS = 1024.0

#: Before FD convicts AD, the disagreeing direction is estimated again with a
#: step REFINE times smaller (two rungs of the kink ladder): far enough to
#: move an estimate whose step spanned a feature of fn, near enough to stay
#: well above the rounding floor of float64 differences.
REFINE = 64.0

#: Hoeffding multiplier: a sum of n terms with random signs exceeds
#: HOEFFDING_K * sqrt(sum of squared bounds) with probability <= 2 exp(-K^2/2)
#: = 3e-8 for K = 6, so a correct function raises a false alarm less than once
#: in ten million projection comparisons.
HOEFFDING_K = 6.0

#: The finite-difference ladder near kinks shrinks the step 8x per level, down to
#: a floor of KINK_RESOLUTION * u_native of the local scale: a kink closer to
#: the point than the dtype under test can even represent counts as *at* the
#: point (x + b in float32 can land on either side of it).
LADDER_FACTOR = 8.0
KINK_RESOLUTION = 16.0
#: ... and above 2^18 u of the oracle dtype: the kink indicator's noise is
#: ~2^11 u |F| / h (see fd.estimate), so at this floor a slope jump of 1% of
#: the function's scale is still told from rounding (2.9e-11 in float64).
LADDER_ROUNDING_FLOOR = 2.0**18


#: The smallest normal number per dtype: below it a value has no relative
#: precision left (a product with it underflows), so a kink within this many
#: of them of the point is as good as at the point.
SMALLEST_NORMAL = {"float64": 2.0**-1022, "float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}


def kink_resolution(dtype_name: str, scale: np.ndarray) -> np.ndarray:
    """How close to a kink a point of ``dtype_name`` with these magnitudes may
    lie and still count as on it: KINK_RESOLUTION ulps of its scale, and never
    less than KINK_RESOLUTION smallest normals."""
    xp = _xp.ns(scale)
    return KINK_RESOLUTION * xp.maximum(unit_roundoff(dtype_name) * scale, SMALLEST_NORMAL.get(dtype_name, 2.0**-126))


def unit_roundoff(dtype_name: str) -> float:
    return UNIT_ROUNDOFF.get(dtype_name, 2.0**-24)


#: Steps are an irrational multiple of a power of two: with a dyadic step
#: and a dyadic input (Hypothesis draws 2^-9 and 0.5 often) every stencil
#: point lies on the input's own binary grid and fn's rounding errors at
#: neighbouring points repeat in step with it - noise that a difference
#: table then cannot see (tanhshrink at z = 2^-9 looked exact at h/32).
STEP_DITHER = 1.0 / math.sqrt(2.0)


def base_step(oracle_dtype: str) -> float:
    """Central-difference step (in units of the local scale) for the Richardson
    stencil: ~u^(1/3) balances the O(h^2) truncation of the error estimate
    against the O(u/h) rounding; a power of two times STEP_DITHER."""
    u = unit_roundoff(oracle_dtype)
    return STEP_DITHER * 2.0 ** round(math.log2(u) / 3.0)


def finest_step(u_oracle: float) -> float:
    """The smallest step FD takes along any element at any level (the finer
    levels stop where x + t rounds, x's scale floored at TINY_SCALE): an
    input nearer 0 than this is crossed by every step."""
    return LADDER_ROUNDING_FLOOR * u_oracle * TINY_SCALE


def ladder_floor(native_dtype: str, oracle_dtype: str) -> float:
    return max(
        KINK_RESOLUTION * unit_roundoff(native_dtype),
        LADDER_ROUNDING_FLOOR * unit_roundoff(oracle_dtype),
    )


def ad_bound(
    values: np.ndarray,
    dtype_name: str,
    rtol: float | None,
    atol: float | None,
    scale: float | None = None,
    out: Any = None,
) -> np.ndarray:
    """Per-element bound on the rounding error of an AD result ``values``
    (into ``out`` where given, on a device: a part of a joined bound).

    ``scale`` is the magnitude the absolute part is relative to: by default the
    largest element of ``values`` (a whole J u or J^T v vector); a single
    Jacobian column or row passes the largest Jacobian element instead, since
    a derivative formula cancels terms of the derivative's overall size
    (1 - tanh^2 near saturation loses u relative to 1, not to the result).
    A user's ``rtol``/``atol`` replace the model (``atol + rtol*|value|``)."""
    mag = _xp.absolute(values, out) if out is not None else _xp.ns(values).abs(values)
    if rtol is not None or atol is not None:
        return (atol or 0.0) + (rtol or 0.0) * mag
    c = ad_rounding(dtype_name) * unit_roundoff(dtype_name)
    if scale is None:
        scale = _xp.absmax(mag)
    # below the smallest normal a result has no relative precision left (a
    # derivative of 4e-47 is 0 in float32, and rightly so)
    tiny = ad_rounding(dtype_name) * SMALLEST_NORMAL.get(dtype_name, 2.0**-126)
    if _xp.on_host(mag):
        return c * (mag + scale) + tiny
    mag *= c  # (in place on our own |values|: two passes, not three)
    mag += c * scale + tiny
    return mag


def hoeffdings(terms: list[Callable[[], tuple[Any, Any]]]) -> list[float]:
    """``hoeffding(weights, bounds)`` of each pair ``terms[k]()`` returns:
    each pair is made and dropped in turn (one full-size term alive at a
    time), and the sums of squares of torch arrays come to the host in one
    read. A sum that overflows is worked out again, rescaled."""
    return sums([], terms)[1]


def sums(
    pairs: list[tuple[Any, Any]], terms: list[Callable[[], tuple[Any, Any]]], also: Sequence[Any] = ()
) -> tuple[list[float], list[float], list[float]]:
    """``xp.dots(pairs)``, ``hoeffdings(terms)`` and the values of the
    device scalars ``also``, with the torch arrays' sums handed to the host
    together with them, in one read."""
    if not (pairs or terms or also):
        return [], [], []  # (a full Jacobian's columns ask for no term: nothing to read)
    torch_pairs = all(hasattr(a, "dot") and hasattr(a, "detach") for pair in pairs for a in pair)
    dots = [a.dot(b) for a, b in pairs] if torch_pairs else _xp.dots(pairs)
    out: list[Any] = []  # (a host term, or a torch sum of squares on the device)
    for make in terms:
        p = _xp.flat(_weighted(*make()))
        out.append(p.dot(p) if hasattr(p, "detach") else hoeffding(1.0, p))
    device = [k for k, q in enumerate(out) if not isinstance(q, float)]
    read = iter(_xp.read(*(dots if torch_pairs else []), *(out[k] for k in device), *also))
    if torch_pairs:
        dots = [next(read) for _ in dots]
    for k in device:
        q = next(read)
        out[k] = HOEFFDING_K * math.sqrt(q) if q < math.inf else hoeffding(*terms[k]())
    return dots, out, list(read)


def _weighted(weights: Any, bounds: Any) -> Any:
    return bounds if isinstance(weights, float) and weights == 1.0 else weights * bounds


def hoeffding(weights: Any, bounds: Any) -> float:
    """Bound on |sum_i w_i e_i| for |e_i| <= bounds_i and random-sign w."""
    p = _weighted(weights, bounds)
    xp = _xp.ns(p)
    if xp is np:
        top = float(np.max(np.abs(p), initial=0.0))
        if not 0.0 < top < math.inf:
            return HOEFFDING_K * top  # (0, or a term beyond any bound)
        scale = math.ldexp(1.0, math.frexp(top)[1])  # (a power of two: exact, and no square overflows)
        return HOEFFDING_K * scale * float(np.sqrt(np.sum(np.square(p / scale))))
    if len(tuple(p.shape)) != 1:
        p = _xp.flat(p)
    squares = _xp.dot(p, p)
    if squares == math.inf:  # (terms near 1e154 and beyond: a power of two out first)
        top = _xp.absmax(p)
        if not top < math.inf:
            return HOEFFDING_K * top
        scale = math.ldexp(1.0, math.frexp(top)[1])
        q = p / scale
        return HOEFFDING_K * scale * math.sqrt(_xp.dot(q, q))
    return HOEFFDING_K * math.sqrt(squares)
