"""Finite differences along a direction: F(t) = fn(x + t u), F'(0) = J u.

One level of step h evaluates F at the nine equally spaced points
t = k h/4, k = -4..4 (F(0) is shared by every level). From them:

* three central differences D(h), D(h/2), D(h/4) and two Richardson values
  R1 = R(h, h/2) and R2 = R(h/2, h/4). R2 is the estimate; |R1 - R2| bounds
  its truncation error (in the asymptotic range it is about 15x that error);
* the noise of fn, *measured*: a fourth difference on spacing h/4 has a
  truncation part (h/4)^4 F'''' far below rounding, so what it shows is fn's
  own noise, |Delta^4| ~ sqrt(70) sigma (Moré & Wild, "Estimating
  computational noise", SIAM J. Sci. Comput. 2011). Where fn cancels inside
  (a log-sum-exp near 0, 1 + erf in a tail) that noise is many times u |F|;
  the bound never drops below it, nor below the rounding model;
* a kink indicator kappa = |4 (F(h/2) + F(-h/2)) - (F(h) + F(-h)) - 6 F(0)|:
  O(h^4) on smooth pieces, about the slope jump times h at a kink, whatever
  its size. Its noise threshold comes from the *one-sided* fourth
  differences (points -4..0 and 0..4), which a kink at the point leaves clean;
* a convergence test: D(h/2) - D(h/4) must be about a quarter of
  D(h) - D(h/2). A step larger than a feature of fn (an eps inside a
  normalisation, a period of sin at 1e15) breaks that.

Elements flagged by either test go down a ladder of smaller steps: a kink
*beside* the point stops looking like one once the step is smaller than its
distance (then both sides agree), a kink *at* the point never does (then an AD
value is valid between the one-sided derivatives, which must agree from one
level to the next), a jump shows as F(h) - F(0) that does not shrink with h,
and what never settles is *unreliable*: finite differences cannot decide
there, and nothing is compared. So is an element whose error bound is as
large as the derivatives themselves.
"""

from .blocks import CHUNK, DEVICE_CHUNK, blockwise, compiled
from .model import (
    COARSE_OFFSETS,
    KEEP_POINTS,
    MODEL_OFFSETS,
    model_reference,
    model_rows,
    model_scales,
)
from .noise import WIDE_SPACINGS, WIDE_SPAN, WideTable, wide_table, wide_table_fits
from .records import ASIDE, JUMP, KINK, SMOOTH, UNKNOWN, UNRELIABLE, Array, Line, Problem, Reference
from .reference import mark_unresolved, reference
from .stencil import (
    GRID_NOISE,
    OFFSETS,
    R2_WEIGHT,
    Estimate,
    Stencil,
    estimate,
    evaluate_level,
    grid,
    grid_bound,
    levels_at,
    model_noise,
    values_at,
)

__all__ = [
    "ASIDE",
    "CHUNK",
    "COARSE_OFFSETS",
    "DEVICE_CHUNK",
    "GRID_NOISE",
    "JUMP",
    "KEEP_POINTS",
    "KINK",
    "MODEL_OFFSETS",
    "OFFSETS",
    "R2_WEIGHT",
    "SMOOTH",
    "UNKNOWN",
    "UNRELIABLE",
    "WIDE_SPACINGS",
    "WIDE_SPAN",
    "Array",
    "Estimate",
    "Line",
    "Problem",
    "Reference",
    "Stencil",
    "WideTable",
    "blockwise",
    "estimate",
    "evaluate_level",
    "levels_at",
    "grid",
    "grid_bound",
    "compiled",
    "mark_unresolved",
    "model_noise",
    "model_reference",
    "model_rows",
    "model_scales",
    "reference",
    "values_at",
    "wide_table",
    "wide_table_fits",
]
