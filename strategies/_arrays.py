"""Arrays for gradient checks: dense, varied values, kept away from declared
kinks by construction, in any backend and dtype.

Small arrays are drawn element by element, so Hypothesis shrinks each value
toward the simplest; large ones are described by a few draws (a seed, a scale,
an offset, planted special values) and filled by a seeded numpy generator
(Hypothesis fills of 10^5 elements are slow and almost all repeated).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from gradverify._check.tolerance import SMALLEST_NORMAL, base_step, unit_roundoff
from gradverify._errors import ArgumentTypeError, ArgumentValueError, explain
from gradverify.backends import BACKENDS

DTYPES = ("float64", "float32", "float16", "bfloat16")
LARGE = 64  # above this many elements, arrays are filled by a seeded generator
# A finite-difference stencil reaches base_step(dtype) x the local scale from
# the point: the margin keeps values FD_REACH stencils away from a kink.
FD_REACH = 4.0


def kink_margin(dtype: str, magnitude: float) -> float:
    """How far values stay from a kink: FD_REACH finite-difference steps at the
    scale ``magnitude`` of the values (at least 1). The step is the one the
    checker takes in ``dtype`` when fn accepts nothing wider (half precision:
    float32's, the narrowest it differentiates in), and at least 8 rounding
    units of ``dtype`` (x + b itself is rounded to it)."""
    step = base_step(dtype if dtype in ("float32", "float64") else "float32")
    return FD_REACH * max(step, 8 * unit_roundoff(dtype)) * max(1.0, float(magnitude))


def check_backend_dtype(backend: str, dtype: str) -> None:
    if backend not in BACKENDS:
        raise ArgumentValueError(explain("backend", f"one of {BACKENDS}", repr(backend), "e.g. backend='torch'"))
    if dtype not in DTYPES:
        raise ArgumentValueError(explain("dtype", f"one of {DTYPES}", repr(dtype), "e.g. dtype='float64'"))
    if backend == "numpy" and dtype == "bfloat16":
        raise ArgumentValueError(
            explain("dtype", "a dtype numpy has", "bfloat16 with backend 'numpy'", "use torch or jax for bfloat16")
        )


def flush_subnormal(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` with every value (or part) that would be subnormal in ``dtype``
    as 0. Arithmetic on subnormals depends on the processor's flush-to-zero
    mode, so a derivative there can pass on one machine and fail on another."""
    tiny = SMALLEST_NORMAL.get(COMPLEX_DTYPES.get(dtype, dtype))
    if tiny is None:
        return a
    if np.iscomplexobj(a):
        return flush_subnormal(a.real, dtype) + 1j * flush_subnormal(a.imag, dtype)
    return np.where(np.abs(a) < tiny, 0.0, a)


def to_backend(a: np.ndarray, backend: str, dtype: str) -> Any:
    """A fresh array of ``backend`` with a's values rounded to ``dtype`` (a
    complex one for complex values)."""
    a = np.asarray(a, dtype=np.complex128 if np.iscomplexobj(a) else np.float64)
    if backend == "numpy":
        return a.astype(dtype)
    if backend == "torch":
        import torch

        return torch.from_numpy(a.copy()).to(getattr(torch, dtype))
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(dtype in ("float64", "complex128")):
        return jnp.asarray(a, dtype=getattr(jnp, dtype))


def as_drawn(a: np.ndarray, backend: str, dtype: str) -> Any:
    """Drawn values as an array of ``backend`` and ``dtype``, none subnormal
    in it (see flush_subnormal)."""
    return to_backend(flush_subnormal(np.asarray(a), dtype), backend, dtype)


def push_off(values: np.ndarray, kinks: Sequence[float], margin: float, lo: float, hi: float) -> np.ndarray:
    """Move every value closer than ``margin`` to a kink out to the margin, on
    its own side (upward when exactly on it, or when the range ends there).
    Constructed, not filtered: every draw gives a usable array."""
    out = np.array(values, dtype=np.float64, copy=True)
    for k in sorted(set(float(k) for k in kinks)):
        near = np.abs(out - k) < margin
        if not near.any():
            continue
        up = np.where(out[near] >= k, k + margin, k - margin)
        up = np.where(up > hi, k - margin, np.where(up < lo, k + margin, up))
        out[near] = up
    return out


def _shape_strategy(shape: Any) -> st.SearchStrategy:
    if isinstance(shape, st.SearchStrategy):
        return shape
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, tuple) and all(isinstance(s, int) and s >= 0 for s in shape):
        return st.just(shape)
    raise ArgumentTypeError(
        explain(
            "shape",
            "an int, a tuple of ints, or a Hypothesis strategy of such tuples",
            repr(shape),
            "e.g. shape=(3, 4) or shape=hypothesis.extra.numpy.array_shapes(max_dims=2)",
        )
    )


def default_shapes(max_dims: int = 2, max_side: int = 5) -> st.SearchStrategy:
    """Shapes of 1..max_dims axes of 1..max_side, shrinking toward (1,)."""
    return st.integers(1, max_dims).flatmap(lambda d: st.tuples(*[st.integers(1, max_side)] * d))


def values(
    n: int,
    *,
    min_value: float,
    max_value: float,
    distinct: bool,
    large: int = LARGE,
    specials: Sequence[float] = (),
) -> st.SearchStrategy:
    """n float64 values in [min_value, max_value] as a numpy vector."""
    if n <= large:
        elem = st.floats(min_value, max_value, allow_nan=False, allow_infinity=False, allow_subnormal=False)
        return st.lists(elem, min_size=n, max_size=n, unique=distinct and n > 1).map(
            lambda v: np.array(v, dtype=np.float64)
        )
    span = max_value - min_value
    centre = 0.0 if min_value <= 0 <= max_value else (min_value + max_value) / 2
    planted = [v for v in (0.0, 1.0, -1.0, min_value, max_value, *specials) if min_value <= v <= max_value]

    @st.composite
    def filled(draw: Any) -> np.ndarray:
        seed = draw(st.integers(0, 2**32 - 1))
        scale = draw(st.sampled_from([span / 8, span / 80, span / 2]))
        offset = draw(st.floats(min_value, max_value).map(lambda o: centre + 0.5 * (o - centre)))
        rng = np.random.default_rng(seed)
        out = _reflect(offset + scale * rng.standard_normal(n), min_value, max_value)
        for index, value in draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(planted)), max_size=4)):
            out[index] = value
        return out

    return filled()


def _reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold values into [lo, hi] by mirroring at the bounds: unlike clipping,
    it piles nothing onto the bounds, so the values stay distinct."""
    span = hi - lo
    t = np.mod(v - lo, 2 * span)
    return lo + np.where(t <= span, t, 2 * span - t)


def arrays(
    backend: str,
    dtype: str = "float64",
    shape: Any = None,
    *,
    min_value: float = -10.0,
    max_value: float = 10.0,
    kinks: Sequence[float] = (),
    margin: float | None = None,
    distinct: bool = True,
    large: int = LARGE,
    mask: float | None = None,
) -> st.SearchStrategy:
    """Arrays of ``backend`` (numpy, torch, jax) and ``dtype`` with dense,
    varied values in [min_value, max_value].

    ``kinks``: points where the user's function is not smooth; every value
    stays ``margin`` away from them (default: :func:`kink_margin` of the
    dtype at the range's magnitude). ``distinct``: no repeated values in
    small arrays (a constant row zeroes a normalization's variance).
    ``shape``: an int, a tuple or a strategy (default: 1-2 axes of 1-5).
    ``mask``: a non-finite value (``-math.inf`` for an attention mask,
    ``math.inf``, ``math.nan``) put at a drawn set of entries, never all of
    them; examples shrink toward fewer masked entries (gv.check holds them
    fixed and checks the others).
    """
    check_backend_dtype(backend, dtype)
    if mask is not None and (not isinstance(mask, (int, float)) or isinstance(mask, bool) or math.isfinite(mask)):
        raise ArgumentValueError(
            explain(
                "arrays(mask=...)",
                "None, or the non-finite value to put at masked entries",
                repr(mask),
                "e.g. mask=-math.inf for an attention mask",
            )
        )
    if not (math.isfinite(min_value) and math.isfinite(max_value) and min_value < max_value):
        raise ArgumentValueError(
            explain(
                "arrays(min_value, max_value)",
                "finite bounds with min_value < max_value",
                f"[{min_value}, {max_value}]",
                "e.g. min_value=-10, max_value=10",
            )
        )
    m = kink_margin(dtype, max(abs(min_value), abs(max_value))) if margin is None else float(margin)
    shapes = _shape_strategy(default_shapes() if shape is None else shape)

    def build(shp: tuple[int, ...]) -> st.SearchStrategy:
        n = math.prod(shp)
        drawn = values(n, min_value=min_value, max_value=max_value, distinct=distinct, large=large)
        if mask is None:
            return drawn.map(
                lambda v: as_drawn(push_off(v, kinks, m, min_value, max_value).reshape(shp), backend, dtype)
            )

        def masked(pair: tuple[np.ndarray, np.ndarray]) -> Any:
            v, where = pair
            v = push_off(v, kinks, m, min_value, max_value)
            v[where] = mask
            return as_drawn(v.reshape(shp), backend, dtype)

        return st.tuples(drawn, masks(n, large=large)).map(masked)

    return shapes.flatmap(build)


def masks(n: int, *, large: int = LARGE) -> st.SearchStrategy:
    """Boolean vectors of n entries, never all True, shrinking toward none."""
    if n <= large:
        return st.lists(st.booleans(), min_size=n, max_size=n).map(lambda b: _keep_one(np.array(b, dtype=bool)))

    def spread(seed_fraction: tuple[int, float]) -> np.ndarray:
        seed, fraction = seed_fraction
        return _keep_one(np.random.default_rng(seed).random(n) < fraction)

    return st.tuples(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.05, 0.3, 0.9])).map(spread)


def _keep_one(where: np.ndarray) -> np.ndarray:
    if where.size and where.all():
        where[-1] = False
    return where


#: The complex dtypes and the real dtype of their parts.
COMPLEX_DTYPES = {"complex128": "float64", "complex64": "float32"}


def complex_arrays(
    backend: str,
    dtype: str = "complex128",
    shape: Any = None,
    *,
    min_magnitude: float = 0.0,
    max_magnitude: float = 10.0,
    branch_cut: bool = False,
    margin: float | None = None,
) -> st.SearchStrategy:
    """Complex arrays of ``backend`` (numpy, torch, jax) and ``dtype``
    (complex128, complex64): each element r e^(i theta) with its magnitude r
    in [min_magnitude, max_magnitude] and its phase theta in (-pi, pi].

    ``branch_cut``: keep off the principal branch cut of log, sqrt, angle
    and the powers - the negative real axis and 0 - as :func:`arrays` keeps
    off kinks: every element at least ``margin`` from 0 and ``margin`` (in
    its imaginary part) from the negative real axis (default:
    :func:`kink_margin` of the parts' dtype at the magnitude). Across the
    cut those functions jump: without the margin a check there says
    ``discontinuity`` (inconclusive), not a verdict on the rule.
    ``shape``: an int, a tuple or a strategy (default: 1-2 axes of 1-5)."""
    if dtype not in COMPLEX_DTYPES:
        raise ArgumentValueError(explain("dtype", f"one of {tuple(COMPLEX_DTYPES)}", repr(dtype), "e.g. 'complex128'"))
    check_backend_dtype(backend, COMPLEX_DTYPES[dtype])
    if not (math.isfinite(max_magnitude) and 0.0 <= min_magnitude < max_magnitude):
        raise ArgumentValueError(
            explain(
                "complex_arrays(min_magnitude, max_magnitude)",
                "finite magnitudes with 0 <= min_magnitude < max_magnitude",
                f"[{min_magnitude}, {max_magnitude}]",
                "e.g. min_magnitude=0, max_magnitude=10",
            )
        )
    m = kink_margin(COMPLEX_DTYPES[dtype], max_magnitude) if margin is None else float(margin)
    low = max(min_magnitude, m) if branch_cut else min_magnitude
    if low >= max_magnitude:
        raise ArgumentValueError(
            explain(
                "complex_arrays(branch_cut=True)",
                "room between the margin from 0 and max_magnitude",
                f"margin {m:.3g} >= max_magnitude {max_magnitude}",
                "raise max_magnitude or lower margin",
            )
        )
    shapes = _shape_strategy(default_shapes() if shape is None else shape)

    def build(shp: tuple[int, ...]) -> st.SearchStrategy:
        n = math.prod(shp)
        radii = values(n, min_value=low, max_value=max_magnitude, distinct=True)
        phases = values(n, min_value=-math.pi, max_value=math.pi, distinct=True)
        return st.tuples(radii, phases).map(lambda rp: _complex(rp[0], rp[1], shp, branch_cut, m, backend, dtype))

    return shapes.flatmap(build)


def _complex(
    r: np.ndarray, theta: np.ndarray, shape: tuple[int, ...], away: bool, margin: float, backend: str, dtype: str
) -> Any:
    z = r * np.exp(1j * theta)
    if away:
        # off the negative real axis: an imaginary part at least ``margin`` there
        near = (z.real < 0) & (np.abs(z.imag) < margin)
        z = np.where(near, z.real + 1j * np.where(z.imag < 0, -margin, margin), z)
    return as_drawn(z.reshape(shape), backend, dtype)
