"""One level of the stencil: F at k h/4, the central differences, Richardson
values, fn's measured noise, the kink indicator and the convergence test.
The noise weights of the combinations are derived from their coefficients."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .. import tolerance as tol, xp as _xp
from .blocks import block_slices, blockwise, compiled
from .records import Array, Line

__all__ = [
    "DIFF",
    "KAPPA",
    "OFFSETS",
    "R1",
    "R2",
    "Combination",
    "central",
    "combine",
    "difference",
    "difference_noise",
    "noise_weight",
    "D4_NOISE",
    "R1_WEIGHT",
    "R2_WEIGHT",
    "KAPPA_WEIGHT",
    "DIFF_WEIGHT",
    "Stencil",
    "Estimate",
    "GRID_NOISE",
    "grid",
    "levels_at",
    "grid_bound",
    "model_noise",
    "scales_asked",
    "values_at",
    "evaluate_level",
    "tolerance_parts",
    "estimate",
    "tolerance_at",
    "scales",
    "richardson",
]


#: The stencil's offsets in units of h/4 (0 is F(0), shared).
OFFSETS = (-4, -3, -2, -1, 1, 2, 3, 4)


#: A combination of the stencil's values: offset (in units of h/4) ->
#: coefficient, the whole divided by h.
Combination = dict[int, Fraction]


def difference(order: int) -> tuple[int, ...]:
    """The coefficients of a forward difference of ``order`` on unit spacing,
    lowest point first: (-1)^(order - i) C(order, i)."""
    return tuple((-1) ** (order - i) * math.comb(order, i) for i in range(order + 1))


def difference_noise(order: int) -> float:
    """The standard deviation of a difference of ``order`` over independent
    noise of standard deviation 1: the root of its coefficients' squares,
    sqrt(C(2 order, order))."""
    return math.sqrt(sum(c * c for c in difference(order)))


def central(k: int) -> Combination:
    """D at half-spacing k h/4: (F(k h/4) - F(-k h/4)) / (k h/2)."""
    return {k: Fraction(2, k), -k: Fraction(-2, k)}


def combine(*terms: tuple[Fraction | int, Combination]) -> Combination:
    """The sum of ``weight * combination`` over ``terms``."""
    out: Combination = {}
    for weight, comb in terms:
        for k, c in comb.items():
            out[k] = out.get(k, Fraction(0)) + Fraction(weight) * c
    return out


def noise_weight(comb: Combination) -> float:
    """How much noise of size eps in each F value moves the combination, in
    units of eps / h: the sum of its coefficients' magnitudes."""
    return float(sum(abs(c) for c in comb.values()))


#: Richardson on D(h) and D(h/2), and on D(h/2) and D(h/4): R = (4 D(s/2) - D(s)) / 3.
R1 = combine((Fraction(4, 3), central(2)), (Fraction(-1, 3), central(4)))
R2 = combine((Fraction(4, 3), central(1)), (Fraction(-1, 3), central(2)))
#: The kink indicator 4 (F(h/2) + F(-h/2)) - (F(h) + F(-h)) - 6 F(0) (not divided by h).
KAPPA: Combination = {2: Fraction(4), -2: Fraction(4), 4: Fraction(-1), -4: Fraction(-1), 0: Fraction(-6)}
#: The convergence test's D(h/2) - D(h/4).
DIFF = combine((1, central(2)), (-1, central(1)))
#: Their noise weights (R1: 3, R2: 6, kappa: 16, the drift: 6).
R1_WEIGHT, R2_WEIGHT, KAPPA_WEIGHT, DIFF_WEIGHT = map(noise_weight, (R1, R2, KAPPA, DIFF))
#: A fourth difference of independent noise sigma has standard deviation
#: sqrt(70) sigma, a third one sqrt(20) sigma.
D4_NOISE = difference_noise(4)
_D3_NOISE = difference_noise(3)


@dataclass
class Stencil:
    """One level: F(k h/4) for k in OFFSETS (F(0) shared)."""

    h: float
    f: tuple[Array, ...]  # in the order of OFFSETS

    def at(self, k: int) -> Array:
        return self.f[OFFSETS.index(k)]


@dataclass
class Estimate:
    """What one level says about F'(0), element by element. The one-sided
    quantities are computed on demand, for the few flagged elements only, on
    the host (they take the indices ``idx`` and return numpy arrays)."""

    stencil: Stencil
    f0: Array
    value: Array  # R2, or R1 where its bound is tighter
    err: Array  # its error bound: truncation + noise (measured or modelled)
    kink: Array  # bool: flagged (kink indicator, no convergence, or not finite)
    finite: Array  # bool: every stencil value finite
    noise: Array  # measured noise of one F value (sigma), per element
    eps_f: float  # modelled error of one F value (the same for every element)
    slope: float = 0.0  # the largest finite |D(h/2)|: the vector's slope scale
    # F at the indices last asked for (the ladder asks several tests of the same ones)
    _at: tuple[bytes, dict[int, np.ndarray]] | None = dataclasses.field(default=None, repr=False)

    def curvature(self, smooth: Array) -> float:
        """The largest |F''| over the ``smooth`` elements: at a minimum the slope
        is 0 while a unit step still moves F by about F''."""
        ok = self.finite & smooth
        if not _xp.any_(ok):
            return 0.0
        F, h = self.stencil, self.stencil.h
        xp = _xp.ns(self.f0)
        with _xp.quiet():
            second = xp.abs(F.at(4) + F.at(-4) - 2.0 * _xp.flat(self.f0))
            # a second difference within fn's noise (weights 1 + 2 + 1) measures nothing
            ok = _xp.flat(ok) & (second > tol.NOISE_SAFETY * 4.0 * xp.maximum(_xp.flat(self.noise), self.eps_f))
            second = second / (h * h)
        return _xp.fmax(second, where=ok & xp.isfinite(second))

    def take(self, name: str, idx: np.ndarray) -> np.ndarray:
        """Field ``name`` at the flat indices ``idx``, on the host."""
        return _xp.take(_xp.flat(getattr(self, name)), idx)

    def side_noise(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Noise measured on each side of the point alone, without F(0) (points
        -4..-1 and 1..4: a third difference), at ``idx``."""
        F = self._values(idx)
        out = []
        for a, b, c, d in ((F[-4], F[-3], F[-2], F[-1]), (F[1], F[2], F[3], F[4])):
            with np.errstate(invalid="ignore", over="ignore"):
                out.append(np.abs(a - 3 * b + 3 * c - d) / _D3_NOISE)
        return out[0], out[1]

    def sides(self, idx: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One-sided second-order D+ and D- at ``idx`` (steps h/2 and h) and
        their error bound, given the noise of one F value there."""
        F, h = self._values(idx), self.stencil.h
        with np.errstate(invalid="ignore", over="ignore"):
            right = (4 * F[2] - 3 * F[0] - F[4]) / h
            left = (3 * F[0] - 4 * F[-2] + F[-4]) / h
            first_r = (F[2] - F[0]) / (h / 2)
            first_l = (F[0] - F[-2]) / (h / 2)
            eps = np.maximum(self.eps_f, noise)
            err = tol.FD_SAFETY * np.maximum(np.abs(right - first_r), np.abs(left - first_l))
            err += tol.NOISE_SAFETY * 8.0 * eps / h
        return right, left, err

    def step_f(self, idx: np.ndarray) -> np.ndarray:
        """max(|F(h) - F(0)|, |F(-h) - F(0)|): shrinks with h unless F jumps."""
        F = self._values(idx)
        with np.errstate(invalid="ignore", over="ignore"):
            return np.maximum(np.abs(F[4] - F[0]), np.abs(F[-4] - F[0]))

    def _values(self, idx: np.ndarray) -> dict[int, np.ndarray]:
        """F(k h/4) at the flat indices ``idx`` (offset -> host array; read only)."""
        key = np.asarray(idx, dtype=np.int64).tobytes()
        if self._at is not None and self._at[0] == key:
            return self._at[1]
        F = {k: _xp.take(_xp.flat(a), idx) for k, a in zip(OFFSETS, self.stencil.f)}
        F[0] = _xp.take(_xp.flat(self.f0), idx)
        self._at = (key, F)
        return F

    def own_noise(self, idx: np.ndarray, u_oracle: float, point: float) -> np.ndarray:
        """The rounding model's error of one F value (model_noise) at ``idx``
        from those elements alone: their own values and their own gentler
        side's slope (a jump beside the point is no slope). ``eps_f`` is the
        vector's: one element with a steep slope (or a jump, whose central
        difference grows as 1/h) raises it for every element, down the kink
        ladder by 8x per level, until it hides a jump. (Not the grid the
        values lie on: a jump between +-1 lies on a grid of 1.)"""
        F, h = self._values(idx), self.stencil.h
        with np.errstate(invalid="ignore", over="ignore"):
            top = np.max([np.abs(v) for v in F.values()], axis=0)
            slope = np.minimum(np.abs(F[2] - F[0]), np.abs(F[-2] - F[0])) / (h / 2)
            return model_noise(u_oracle, h, top, top, slope, point)

    def grid(self, idx: np.ndarray) -> np.ndarray:
        """The grid fn's values lie on at ``idx`` (see grid())."""
        F = self._values(idx)
        return grid([F[k] for k in OFFSETS], F[0])


#: The standard deviation of rounding to a grid of spacing q, in units of q
#: (the error is uniform over one spacing).
GRID_NOISE = 1.0 / float(np.sqrt(12.0))


def grid(values: list[np.ndarray], f0: np.ndarray) -> np.ndarray:
    """Per element (host arrays): the largest power of two dividing every
    difference F_k - F(0) - the grid fn's values lie on (0 where none moved).
    Where fn is computed accurately that grid is u |F|; where it cancels
    inside (z - tanh z at z = 1e-3: both terms round at u |z|, their
    difference is exact) it is u x its terms, far coarser. Rounding to it is
    noise of GRID_NOISE x the spacing in every value, which a few differences
    can still show as exactly 0: a finer step's estimate of such an fn can
    be flat, or smooth, with a bound from no noise at all."""
    if not len(values):
        return np.zeros(np.shape(f0))
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.asarray(values, dtype=np.float64) - f0  # a row per value (exact between neighbours)
        m, e = np.frexp(np.where(np.isfinite(d), d, 0.0))
        mant = np.abs(m * 2.0**53).astype(np.int64)
        low = (mant & -mant).astype(np.float64) * np.ldexp(1.0, e - 53)
        q = np.min(np.where(d != 0, low, np.inf), axis=0)
    return np.where(np.isfinite(q), q, 0.0)


def grid_bound(q: np.ndarray, h: float) -> np.ndarray:
    """What rounding to a grid of spacing ``q`` can do to the estimate at
    step h (R2's noise weight, with NOISE_SAFETY, on GRID_NOISE x q per value)."""
    return (tol.NOISE_SAFETY * R2_WEIGHT * GRID_NOISE / h) * q


def model_noise(
    u_oracle: float, h: float, f0_scale: Any, stencil_scale: Any, slope_scale: Any, point: float = 1.0
) -> Any:
    """The rounding model's error of one F value (estimate and model_reference
    share it: the model's bound must be the measured one's floor, bit for bit).
    ``point``: the largest |x_j| / |u_j| over the moved elements, in the units
    of t (at most 1 for a direction scaled so that |u_j| >= |x_j|; along a
    column e_j it is |x_j| / c, far below 1 for an element much smaller than
    its argument's rms): x + t u rounds by u (point + |t|) in those units.
    The scales are numbers, or host arrays of one element's each."""
    top = np.maximum(f0_scale, stencil_scale) if isinstance(f0_scale, np.ndarray) else max(f0_scale, stencil_scale)
    return tol.FD_EVAL_ROUNDING * u_oracle * 2.0 * (top + (point + h) * slope_scale)


def values_at(F: Callable[[float], Array], ts: list[float]) -> list[Array]:
    """[F(t) for t in ts]: in one vectorised evaluation of fn where F is a
    ``Line`` that offers one, else one t at a time."""
    out = F.many(ts) if isinstance(F, Line) and len(ts) > 1 else None
    return [F(t) for t in ts] if out is None else out


def levels_at(F: Callable[[float], Array], hs: list[float]) -> list[tuple[Array, ...]] | None:
    """F's stencil (OFFSETS) at each step of ``hs``, from one vectorised
    evaluation of fn; None where F offers none (each level is then
    evaluated when it is reached)."""
    values = F.many([k * h / 4 for h in hs for k in OFFSETS]) if isinstance(F, Line) else None
    if values is None:
        return None
    n = len(OFFSETS)
    return [tuple(values[j * n : (j + 1) * n]) for j in range(len(hs))]


def evaluate_level(F: Callable[[float], Array], h: float, have: dict[int, Array] | None = None) -> Stencil:
    """The level of step h; points already in ``have`` (offset -> F) are reused."""
    have = dict(have or {})
    missing = [k for k in OFFSETS if k not in have]
    have.update(zip(missing, values_at(F, [k * h / 4 for k in missing])))
    return Stencil(h, tuple(have[k] for k in OFFSETS))


def tolerance_parts(ad_tol: Array | float, shape: tuple[int, ...]) -> tuple[bool, Array | float]:
    """(whether it is per element, the flat tolerance or the one number)."""
    if _xp.is_array(ad_tol) and len(tuple(ad_tol.shape)) > 0:
        xp = _xp.ns(ad_tol)
        return True, _xp.flat(xp.broadcast_to(ad_tol, shape))
    return False, float(ad_tol)


def estimate(
    s: Stencil,
    f0: Array,
    u_oracle: float,
    ad_tol: Array | float,
    f0_scale: float | None = None,
    chunk: int | None = None,
    outer: float = 0.0,
    point: float = 1.0,
) -> Estimate:
    """Richardson value, its error bound, the measured noise and the flags, done
    block by block: on a large vector each pass over the whole of it would leave
    the caches. Element for element the same operations in the same order, so
    the result does not depend on ``chunk`` (a test holds it bit for bit); only
    the scales of the rounding model (maxima) need the whole vector, gathered in
    a first pass. ``outer``: a floor under the largest |F(+-h)| (from outputs
    left out of this vector, see _on_support); ``point``: see model_noise."""
    h = s.h
    shape = tuple(f0.shape)
    f0f = _xp.flat(f0)
    F = {k: _xp.flat(a) for k, a in zip(OFFSETS, s.f)}
    n = _xp.size(f0f)
    xp = _xp.ns(f0f, *F.values())
    _, tol_f = tolerance_parts(ad_tol, shape)
    blocks = block_slices(n, f0f, chunk)
    slope_scale = f0_max = 0.0
    stencil_scale = outer
    with _xp.quiet():
        # pass 1: the scales of the rounding model
        for b in blocks:
            # (the outer points bound the stencil: at a minimum they are its largest)
            slope, edge, top = scales(F, b, h, f0f if f0_scale is None else None)
            slope_scale, stencil_scale, f0_max = max(slope_scale, slope), max(stencil_scale, edge), max(f0_max, top)
        if f0_scale is None:
            f0_scale = f0_max
        # The rounding model, a floor under the measured noise: fn's rounding
        # relative to the vector's scale plus the rounding of the point x + t u
        # itself, which moves F by |dF/dt| u (|x|/|u| + |t|) (see model_noise:
        # ``point`` is that |x|/|u|). The stencil's own values count too: at a
        # minimum F(+-h) ~ h^2 F''/2 can dwarf both |F0| and h |F'|.
        eps_f = model_noise(u_oracle, h, f0_scale, stencil_scale, slope_scale, point)
        stencil = tuple(F[k] for k in OFFSETS)
        parts = blockwise(_estimate_block, f0f, stencil, f0f, tol_f, h, eps_f, chunk=chunk)
    value, err, kink, fin, sig = (xp.reshape(a, shape) for a in parts)
    return Estimate(s, f0, value, err, kink, fin, sig, eps_f, slope_scale)


def _estimate_block(fs: tuple[Array, ...], f0: Array, t: Array | float, h: float, eps_f: float) -> tuple:
    """estimate() on one block: (value, err, kink, finite, noise) from the
    stencil values ``fs`` (in the order of OFFSETS), F(0), the AD tolerance
    ``t`` and the model's noise ``eps_f``. Pure array arithmetic: jax compiles it
    into one pass; elsewhere it works in place on its own temporaries (the same
    operations in the same order as the expressions they spell out)."""
    f = dict(zip(OFFSETS, fs))
    f[0] = f0
    xp = _xp.ns(f0, *fs)
    # central differences and Richardson (R = (4 D(k/2) - D(k)) / 3)
    d1, d2, d4, r1, r2 = richardson(f, h)
    # convergence: |D(h/2) - D(h/4)| about |D(h) - D(h/2)| / 4 (worked out
    # first, so that the D's are let go: a block as large as a GPU's holds
    # each temporary as an array of its size)
    drift = _xp.iabs(d2 - d4)
    drift -= 0.5 * _xp.iabs(d1 - d2)
    del d1, d2, d4
    # measured noise: a difference table on spacing h/4 (its fourth
    # differences over the five windows). The kink threshold's noise
    # comes from each side's third difference without F(0): a kink at
    # the point leaves them clean, and so does a feature narrower than
    # the step, which F(0) alone sees.
    row = [f[k] for k in range(-4, 5)]
    mutable = not _xp.immutable(f0)
    for order in range(1, 5):
        # (the first differences are new arrays - F's values are not ours -,
        # each later one overwrites the difference only it needed: eight
        # temporaries of the block at most, not fifteen)
        row = [_xp.sub(row[j + 1], row[j], row[j] if mutable and order > 1 else None) for j in range(len(row) - 1)]
        if order == 3:
            one_sided = _xp.iminimum(_xp.iabs(row[0] + 0.0), _xp.iabs(row[5] + 0.0))
            one_sided *= 1.0 / _D3_NOISE
    sig = _xp.iabs(row[0])
    for d in row[1:]:
        sig = _xp.imaximum(sig, _xp.iabs(d))
    del row, d  # (the other fourth differences have served)
    sig *= 1.0 / D4_NOISE
    # (the noise sees every stencil value: a NaN or inf anywhere shows there)
    fin = _xp.finite(r1) & _xp.finite(r2) & _xp.finite(sig)
    eps = xp.maximum(sig, eps_f)
    # error bound: truncation and noise, each with its safety. |R1 - R2|
    # bounds R2's truncation generously and is ~16/15 of R1's; R1 weighs
    # noise half as much (3/h). Each element takes the one bounded tighter
    # (R1 where noise dominates: a linear piece, a cancelling fn).
    trunc = _xp.iabs(r1 - r2)
    trunc *= tol.FD_SAFETY
    e = (tol.NOISE_SAFETY * R2_WEIGHT / h) * eps
    e += trunc
    e1 = (tol.NOISE_SAFETY * R1_WEIGHT / h) * eps
    trunc *= 16.0 / 15.0
    e1 += trunc
    del trunc
    use_r1 = e1 < e
    value = xp.where(use_r1, r1, r2)
    del r1, r2
    err = xp.where(use_r1, e1, e)
    del e, e1, use_r1
    # kink indicator against the one-sided noise and the AD tolerance
    kappa = f[2] + f[-2]
    kappa *= 4.0
    kappa -= f[4] + f[-4]
    kappa -= 6.0 * f[0]
    threshold = _xp.imaximum(one_sided, eps_f)
    threshold *= tol.NOISE_SAFETY * KAPPA_WEIGHT
    threshold += t * h
    k = _xp.iabs(kappa) > threshold
    del kappa, threshold, one_sided
    eps *= tol.NOISE_SAFETY * DIFF_WEIGHT / h
    k = k | (drift > eps)
    return value, err, k | ~fin, fin, sig


def tolerance_at(ad_tol: Array | float, shape: tuple[int, ...], idx: np.ndarray) -> np.ndarray | float:
    per_element, t = tolerance_parts(ad_tol, shape)
    return _xp.take(t, idx) if per_element else t


def scales(F: dict[int, Array], b: slice, h: float, f0: Array | None = None) -> tuple[float, float, float]:
    """The rounding model's scales on block b: the largest finite |D(h/2)|,
    |F(+-h)| and |F(0)| (0 when ``f0`` is None)."""
    if b.stop - b.start == 0 or _xp.size(F[2]) == 0:
        return 0.0, 0.0, 0.0
    if _xp.immutable(F[2]):
        parts = tuple(a[b] for a in (F[2], F[-2], F[-4], F[4], F[2] if f0 is None else f0))
        return tuple(float(v) for v in compiled(_scales_block, F[2])(parts, h))
    slope, below, above, *top = _xp.fmaxes(*(_scaled(F, b, h, i) for i in range(3)), *(() if f0 is None else (f0[b],)))
    return slope, max(below, above), top[0] if top else 0.0


def scales_asked(F: dict[int, Array], blocks: list[slice], h: float) -> tuple[list[Any], Callable]:
    """``scales`` of every block of torch arrays, as model_reference takes
    them - (the largest slope, the largest |F(+-h)|) over the blocks - with
    their extremes asked for as device scalars: those scalars, and what
    makes the two scales of their values (bit for bit ``scales``': an
    array with a non-finite element takes a second pass, as fmax does)."""
    asked, parts = [], []
    for b in blocks:
        if b.stop - b.start == 0 or _xp.size(F[2]) == 0:
            continue
        # (D(h/2)'s extremes are F(h/2) - F(-h/2)'s times 1/h: a product by a
        # positive number rounds monotonically, so scaled on the host they
        # are bit for bit the scaled array's, and the array is not made)
        asked.extend((F[2][b] - F[-2][b]).aminmax())
        for i in (1, 2):
            asked.extend(_scaled(F, b, h, i).aminmax())
        parts.append(b)

    def finish(values: list[float]) -> tuple[float, float]:
        slope_scale = stencil_scale = 0.0
        for k, b in enumerate(parts):
            ends = [v * (1.0 / h) if j < 2 else v for j, v in enumerate(values[6 * k : 6 * k + 6])]
            tops = [_xp.maxabs_of(*ends[2 * i : 2 * i + 2]) for i in range(3)]
            slope, below, above = (t if math.isfinite(t) else _xp.fmax(_scaled(F, b, h, i)) for i, t in enumerate(tops))
            slope_scale, stencil_scale = max(slope_scale, slope), max(stencil_scale, max(below, above))
        return slope_scale, stencil_scale

    return asked, finish


def _scaled(F: dict[int, Array], b: slice, h: float, i: int) -> Array:
    """What ``scales`` takes the largest finite |.| of on block b: D(h/2)
    (i = 0), F(-h), F(h)."""
    return (F[2][b] - F[-2][b]) * (1.0 / h) if i == 0 else F[(-4, 4)[i - 1]][b]


def _scales_block(parts: tuple[Array, ...], h: float) -> tuple[Array, Array, Array]:
    f2, fm2, fm4, f4, f0 = parts
    xp = _xp.ns(*parts)

    def fmax(a: Array) -> Array:
        return xp.max(xp.where(_xp.finite(a), xp.abs(a), 0.0))

    return fmax((f2 - fm2) * (1.0 / h)), xp.maximum(fmax(fm4), fmax(f4)), fmax(f0)


def first_level(
    f: dict[int, Array], h: float, tmp: Callable[[str], Array | None], out: Array | None = None
) -> tuple[Array, Array, Array]:
    """D(h), D(h/2) and R1 = R(h, h/2) from the points +-h, +-h/2 of ``f``
    (R1 into ``out`` where given): richardson()'s first level, and the
    coarse model's whole one."""
    d1 = _xp.sub(f[4], f[-4], tmp("d1"))
    d1 *= 0.5 / h
    d2 = _xp.sub(f[2], f[-2], tmp("d2"))
    d2 *= 1.0 / h
    r1 = _xp.mul(d2, 4.0, out)
    r1 -= d1
    r1 *= 1.0 / 3.0
    return d1, d2, r1


def kink_test(
    f: dict[int, Array], f0: Array, t: Array | float, h: float, kappa_max: float, tmp: Callable[[str], Array | None]
) -> Array:
    """Where the kink indicator 4 (F(h/2) + F(-h/2)) - (F(h) + F(-h)) - 6 F(0)
    (of order h^4 on a smooth function) stays within ``t`` h + ``kappa_max``."""
    kappa = _xp.add(f[2], f[-2], tmp("kappa"))
    kappa *= 4.0
    kappa -= _xp.add(f[4], f[-4], tmp("a"))
    kappa -= _xp.mul(f0, 6.0, tmp("a"))
    limit = _xp.mul(t, h, tmp("limit")) if _xp.is_array(t) else t * h
    limit += kappa_max
    return _xp.iabs(kappa) <= limit


def richardson(
    f: dict[int, Array], h: float, tmp: Callable[[str], Array | None] = lambda name: None
) -> tuple[Array, Array, Array, Array, Array]:
    """D(h), D(h/2), D(h/4) and R1 = R(h, h/2), R2 = R(h/2, h/4) from the
    stencil ``f`` (offset -> F): estimate() and model_reference() share them
    bit for bit. ``tmp(name)``: a buffer to compute into, or None."""
    d1, d2, r1 = first_level(f, h, tmp, tmp("r1"))
    d4 = _xp.sub(f[1], f[-1], tmp("d4"))
    d4 *= 2.0 / h
    r2 = _xp.mul(d4, 4.0, tmp("r2"))
    r2 -= d2
    r2 *= 1.0 / 3.0
    return d1, d2, d4, r1, r2
