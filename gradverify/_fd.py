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

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _tolerance as tol
from . import _xp

# Status of each element's reference after the kink analysis.
SMOOTH, KINK, JUMP, UNRELIABLE = 0, 1, 2, 3

#: The stencil's offsets in units of h/4 (0 is F(0), shared).
OFFSETS = (-4, -3, -2, -1, 1, 2, 3, 4)
#: sqrt(C(8, 4)) and sqrt(C(6, 3)): a k-th difference of independent noise of
#: standard deviation sigma has standard deviation sqrt(C(2k, k)) sigma.
_D4_NOISE = float(np.sqrt(70.0))
_D3_NOISE = float(np.sqrt(20.0))
#: The noise weights (sum of |coefficients| times h) of the stencil's
#: combinations: R1 = (8 (F(h/2) - F(-h/2)) - (F(h) - F(-h))) / (6h),
#: R2 = (8 (F(h/4) - F(-h/4)) - (F(h/2) - F(-h/2))) / (3h),
#: kappa (1 + 4 + 6 + 4 + 1), D(h/2) - D(h/4) (2 + 4).
_R1_WEIGHT, _R2_WEIGHT, _KAPPA_WEIGHT, _DIFF_WEIGHT = 3.0, 6.0, 16.0, 6.0

#: Arrays of the checker: numpy, or torch and jax arrays beside fn's arguments (see _xp).
Array = Any


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
    return (tol.NOISE_SAFETY * _R2_WEIGHT * GRID_NOISE / h) * q


def _model_noise(
    u_oracle: float, h: float, f0_scale: float, stencil_scale: float, slope_scale: float, point: float = 1.0
) -> float:
    """The rounding model's error of one F value (estimate and model_reference
    share it: the model's bound must be the measured one's floor, bit for bit).
    ``point``: the largest |x_j| / |u_j| over the moved elements, in the units
    of t (at most 1 for a direction scaled so that |u_j| >= |x_j|; along a
    column e_j it is |x_j| / c, far below 1 for an element much smaller than
    its argument's rms): x + t u rounds by u (point + |t|) in those units."""
    return tol.FD_EVAL_ROUNDING * u_oracle * 2.0 * (max(f0_scale, stencil_scale) + (point + h) * slope_scale)


def values_at(F: Callable[[float], Array], ts: list[float]) -> list[Array]:
    """[F(t) for t in ts]: in one vectorised evaluation of fn where F offers
    one (``F.many(ts)``, None where it cannot), else one t at a time."""
    many = getattr(F, "many", None)
    out = many(ts) if many is not None and len(ts) > 1 else None
    return [F(t) for t in ts] if out is None else out


def evaluate_level(F: Callable[[float], Array], h: float, have: dict[int, Array] | None = None) -> Stencil:
    """The level of step h; points already in ``have`` (offset -> F) are reused."""
    have = dict(have or {})
    missing = [k for k in OFFSETS if k not in have]
    have.update(zip(missing, values_at(F, [k * h / 4 for k in missing])))
    return Stencil(h, tuple(have[k] for k in OFFSETS))


#: Elements per block of estimate() and model_reference() on the CPU: their
#: passes stay in cache. On an accelerator a block is larger (each costs a
#: few dozen kernel launches) and only bounds the temporaries' memory; jax
#: arrays are done in one block.
CHUNK = 1 << 15
DEVICE_CHUNK = 1 << 22


def _blocks(n: int, like: Array, chunk: int | None) -> list[slice]:
    if chunk is None:
        if _xp.immutable(like):
            chunk = max(n, 1)  # jax: a slice is a copy, and every new shape compiles
        else:
            chunk = CHUNK if _xp.device_kind(like) == "cpu" else DEVICE_CHUNK
    return [slice(k, min(k + chunk, n)) for k in range(0, n, chunk)] or [slice(0, 0)]


def _tolerance(ad_tol: Array | float, shape: tuple[int, ...]) -> tuple[bool, Array | float]:
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
    left out of this vector, see _on_support); ``point``: see _model_noise."""
    h = s.h
    shape = tuple(f0.shape)
    f0f = _xp.flat(f0)
    F = {k: _xp.flat(a) for k, a in zip(OFFSETS, s.f)}
    n = _xp.size(f0f)
    xp = _xp.ns(f0f, *F.values())
    _, tol_f = _tolerance(ad_tol, shape)
    blocks = _blocks(n, f0f, chunk)
    slope_scale = f0_max = 0.0
    stencil_scale = outer
    with _xp.quiet():
        # pass 1: the scales of the rounding model
        for b in blocks:
            # (the outer points bound the stencil: at a minimum they are its largest)
            slope, edge, top = _scales(F, b, h, f0f if f0_scale is None else None)
            slope_scale, stencil_scale, f0_max = max(slope_scale, slope), max(stencil_scale, edge), max(f0_max, top)
        if f0_scale is None:
            f0_scale = f0_max
        # The rounding model, a floor under the measured noise: fn's rounding
        # relative to the vector's scale plus the rounding of the point x + t u
        # itself, which moves F by |dF/dt| u (|x|/|u| + |t|) (see _model_noise:
        # ``point`` is that |x|/|u|). The stencil's own values count too: at a
        # minimum F(+-h) ~ h^2 F''/2 can dwarf both |F0| and h |F'|.
        eps_f = _model_noise(u_oracle, h, f0_scale, stencil_scale, slope_scale, point)
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
    d1, d2, d4, r1, r2 = _richardson(f, h)
    # measured noise: a difference table on spacing h/4 (its fourth
    # differences over the five windows). The kink threshold's noise
    # comes from each side's third difference without F(0): a kink at
    # the point leaves them clean, and so does a feature narrower than
    # the step, which F(0) alone sees.
    row = [f[k] for k in range(-4, 5)]
    for order in range(1, 5):
        row = [row[j + 1] - row[j] for j in range(len(row) - 1)]
        if order == 3:
            one_sided = _xp.iminimum(_xp.iabs(row[0] + 0.0), _xp.iabs(row[5] + 0.0))
            one_sided *= 1.0 / _D3_NOISE
    sig = _xp.iabs(row[0])
    for d in row[1:]:
        sig = _xp.imaximum(sig, _xp.iabs(d))
    sig *= 1.0 / _D4_NOISE
    # (the noise sees every stencil value: a NaN or inf anywhere shows there)
    fin = _xp.finite(r1) & _xp.finite(r2) & _xp.finite(sig)
    eps = xp.maximum(sig, eps_f)
    # error bound: truncation and noise, each with its safety. |R1 - R2|
    # bounds R2's truncation generously and is ~16/15 of R1's; R1 weighs
    # noise half as much (3/h). Each element takes the one bounded tighter
    # (R1 where noise dominates: a linear piece, a cancelling fn).
    trunc = _xp.iabs(r1 - r2)
    trunc *= tol.FD_SAFETY
    e = (tol.NOISE_SAFETY * _R2_WEIGHT / h) * eps
    e += trunc
    e1 = (tol.NOISE_SAFETY * _R1_WEIGHT / h) * eps
    trunc *= 16.0 / 15.0
    e1 += trunc
    use_r1 = e1 < e
    value, err = xp.where(use_r1, r1, r2), xp.where(use_r1, e1, e)
    # kink indicator against the one-sided noise and the AD tolerance
    kappa = f[2] + f[-2]
    kappa *= 4.0
    kappa -= f[4] + f[-4]
    kappa -= 6.0 * f[0]
    threshold = _xp.imaximum(one_sided, eps_f)
    threshold *= tol.NOISE_SAFETY * _KAPPA_WEIGHT
    threshold += t * h
    k = _xp.iabs(kappa) > threshold
    # convergence: |D(h/2) - D(h/4)| about |D(h) - D(h/2)| / 4
    drift = _xp.iabs(d2 - d4)
    drift -= 0.5 * _xp.iabs(d1 - d2)
    eps *= tol.NOISE_SAFETY * _DIFF_WEIGHT / h
    k = k | (drift > eps)
    return value, err, k | ~fin, fin, sig


_KERNELS: dict[Any, Any] = {}


def blockwise(fn: Callable, like: Array, *args: Any, chunk: int | None = None) -> tuple[Array, ...]:
    """``fn`` (an elementwise kernel returning a tuple of float64 or bool
    vectors) over vectors of ``like``'s length: one compiled call for jax,
    block by block (of ``chunk`` elements, see _blocks) into whole-length
    outputs elsewhere (each block's temporaries stay in cache). An argument
    is sliced per block when it is an array of that length, or a tuple of
    them; anything else is passed as it is."""
    if _xp.immutable(like):
        return _kernel(fn, like)(*args)
    n = _xp.size(like)

    def sliced(a: Any, b: slice) -> Any:
        if isinstance(a, tuple):
            return tuple(sliced(v, b) for v in a)
        if _xp.is_array(a) and len(tuple(a.shape)) == 1 and tuple(a.shape)[0] == n:
            return a[b]
        return a

    blocks = _blocks(n, like, chunk)
    if len(blocks) == 1:
        return fn(*args)
    outs: list[Array] = []
    for b in blocks:
        parts = fn(*(sliced(a, b) for a in args))
        if not outs:
            outs = [_xp.empty(n, like, "bool" if _is_bool(p) else "float64") for p in parts]
        for o, p in zip(outs, parts):
            o[b] = p
    return tuple(outs)


def _is_bool(a: Array) -> bool:
    return str(a.dtype).endswith("bool")


def _kernel(fn: Callable, like: Array, static: tuple[int, ...] = ()) -> Callable:
    """``fn`` compiled by jax for jax arrays (one fused pass; numbers are traced
    arguments, so a new step compiles nothing; ``static``: the positions of
    arguments that are structure, not data), ``fn`` itself elsewhere."""
    if not _xp.immutable(like):
        return fn
    if fn not in _KERNELS:
        import jax

        _KERNELS[fn] = jax.jit(fn, static_argnums=static)
    return _KERNELS[fn]


@dataclass
class Reference:
    """The FD reference for J u: an interval value +- err per element, and why.

    Where F is smooth the interval is the estimate with its error bound; at a
    kink it is the hull of the one-sided derivatives (value its midpoint)."""

    value: Array
    err: Array  # half-width of the interval
    status: Array  # SMOOTH / KINK / JUMP / UNRELIABLE per element (int8)
    all_smooth: bool  # no element was flagged: every status is SMOOTH
    noise: Array | None = None  # measured noise of one F value, per element
    reasons: dict[int, str] | None = None  # why an element is unreliable (the first few)
    typical: float = 0.0  # the size of a derivative along this direction (|F| and slope scales)
    flagged: Array | None = None  # bool: went down the ladder (a kink, jump or feature near)
    # set while the reference is the rounding model's (AD agreed within it):
    # measures fn's noise and returns the measured reference
    measure: Callable[[], Reference] | None = None
    # with it: how far the measured value may sit from this one (|R1 - R2| at most)
    shift: Array | None = None
    eps_f: float = 0.0  # the rounding model's error of one F value at the first step

    @property
    def lo(self) -> Array:
        return self.value - self.err

    @property
    def hi(self) -> Array:
        return self.value + self.err

    @property
    def modelled(self) -> bool:
        """Whether fn's noise is still the rounding model's, not measured."""
        return self.measure is not None

    def give_up(self, mask: Array, reason: Callable[[int], str]) -> None:
        """Mark the elements of ``mask`` unreliable; the first few keep ``reason(i)``."""
        self.status = _xp.put(self.status, mask, UNRELIABLE)
        self.all_smooth = False
        if self.reasons is None:
            self.reasons = {}
        for i in _xp.nonzero(mask, limit=3):
            self.reasons[int(i)] = reason(int(i))


#: Two sides whose measured noise differs by more than this factor are not
#: both noise: one of them holds a kink (or a jump) near the point.
_SIDES_ALIKE = 8.0


def _tolerance_at(ad_tol: Array | float, shape: tuple[int, ...], idx: np.ndarray) -> np.ndarray | float:
    per_element, t = _tolerance(ad_tol, shape)
    return _xp.take(t, idx) if per_element else t


def _noise_explains(est: Estimate, idx: np.ndarray, ad_tol: Array | float) -> np.ndarray:
    """Of the flagged elements ``idx``, those whose flag is the function's noise:
    both sides of the point equally noisy, and the kink indicator and the
    convergence test within that noise."""
    left, right = est.side_noise(idx)
    lo, hi = np.minimum(left, right), np.maximum(left, right)
    eps = np.maximum(hi, est.eps_f)
    F, h = est._values(idx), est.stencil.h
    tol_i = _tolerance_at(ad_tol, tuple(est.value.shape), idx)
    with np.errstate(invalid="ignore", over="ignore"):
        kappa = np.abs(4.0 * (F[2] + F[-2]) - (F[4] + F[-4]) - 6.0 * F[0])
        d1, d2, d4 = (F[4] - F[-4]) / (2 * h), (F[2] - F[-2]) / h, (F[1] - F[-1]) * (2 / h)
        ok = kappa <= tol.NOISE_SAFETY * _KAPPA_WEIGHT * eps + tol_i * h
        ok &= np.abs(d2 - d4) - 0.5 * np.abs(d1 - d2) <= tol.NOISE_SAFETY * _DIFF_WEIGHT / h * eps
        ok &= (hi <= _SIDES_ALIKE * lo) | (hi <= est.eps_f)
    return ok & est.take("finite", idx)


#: A model reference of at most this many elements keeps its six points for
#: the measurement (larger ones evaluate them again if it is ever needed).
KEEP_POINTS = 1 << 16
#: The points the rounding model's test needs: D(h), D(h/2) and D(h/4), so
#: R1 and R2 (t = +-h, +-h/2, +-h/4). The measured noise needs +-3h/4 besides.
MODEL_OFFSETS = (-4, -2, -1, 1, 2, 4)


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
) -> tuple[Array, Array, Array, float] | None:
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
    when it is about to fail."""
    shape = tuple(f0.shape)
    F = {k: _xp.flat(f[k]) for k in MODEL_OFFSETS}
    f0f = _xp.flat(f0)
    adf = None if ad is None else _xp.flat(ad)
    n = _xp.size(f0f)
    xp = _xp.ns(f0f, *F.values())
    tol_array, tol_f = _tolerance(ad_tol, shape)
    blocks = _blocks(n, f0f, chunk)
    slope_scale = stencil_scale = 0.0
    with _xp.quiet():
        for b in blocks:
            slope, outer, _ = _scales(F, b, h)  # (as estimate() computes them, bit for bit)
            slope_scale, stencil_scale = max(slope_scale, slope), max(stencil_scale, outer)
        eps_f = _model_noise(u_oracle, h, f0_scale, stencil_scale, slope_scale, point)
        typical = max(f0_scale, slope_scale)
        noise2, noise1 = (tol.NOISE_SAFETY * _R2_WEIGHT / h) * eps_f, (tol.NOISE_SAFETY * _R1_WEIGHT / h) * eps_f
        kappa_max = (tol.NOISE_SAFETY * _KAPPA_WEIGHT) * eps_f
        drift_max = (tol.NOISE_SAFETY * _DIFF_WEIGHT / h) * eps_f
        limits = (noise1, noise2, typical, kappa_max, drift_max)
        kernel = _kernel(_model_block, f0f)
        scratch = _xp.Scratch.beside(f0f, max(b.stop - b.start for b in blocks))
        if scratch is None:  # (jax: one compiled block)
            b = blocks[0]
            t = tol_f[b] if tol_array else tol_f
            ok, value, err, shift = kernel(
                tuple(F[k][b] for k in MODEL_OFFSETS), f0f[b], t, None if adf is None else adf[b], h, limits
            )
            if not bool(ok):
                return None
        else:
            value, err, shift = (_xp.empty(n, f0f) for _ in range(3))
            for b in blocks:
                t = tol_f[b] if tol_array else tol_f
                ad_b = None if adf is None else adf[b]
                fs = tuple(F[k][b] for k in MODEL_OFFSETS)
                ok, _, _, _ = kernel(fs, f0f[b], t, ad_b, h, limits, (value[b], err[b], shift[b]), scratch)
                if not bool(ok):
                    return None
    return xp.reshape(value, shape), xp.reshape(err, shape), xp.reshape(shift, shape), typical


def model_references(
    fs: list[dict[int, np.ndarray]],
    f0: np.ndarray,
    h: float,
    u_oracle: float,
    ad_tols: list[np.ndarray | float],
    f0_scale: float,
    ads: list[np.ndarray] | None,
    points: list[float],
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, float] | None]:
    """model_reference() along many directions at once (host arrays of at
    most CHUNK elements): direction b's points ``fs[b]``, AD tolerance
    ``ad_tols[b]``, AD values ``ads[b]`` and ``points[b]``, all sharing F(0)
    and the step. Element for element the same operations as
    model_reference(), on a row per direction: each row's result is bit for
    bit that direction's."""
    shape = tuple(f0.shape)
    f0f = np.ravel(f0)
    n = f0f.size
    stacked = {k: np.stack([np.ravel(f[k]) for f in fs]) for k in MODEL_OFFSETS}
    with _xp.quiet():
        d2 = (stacked[2] - stacked[-2]) * (1.0 / h)  # (as _scales computes them)
        slopes = np.max(np.abs(d2), axis=-1, where=np.isfinite(d2), initial=0.0)
        outer = np.maximum(
            *(np.max(np.abs(stacked[k]), axis=-1, where=np.isfinite(stacked[k]), initial=0.0) for k in (-4, 4))
        )
        limits, typicals = [], []
        for slope, edge, point in zip(slopes.tolist(), outer.tolist(), points):
            eps_f = _model_noise(u_oracle, h, f0_scale, edge, slope, point)
            typical = max(f0_scale, slope)
            typicals.append(typical)
            limits.append(
                (
                    (tol.NOISE_SAFETY * _R1_WEIGHT / h) * eps_f,
                    (tol.NOISE_SAFETY * _R2_WEIGHT / h) * eps_f,
                    typical,
                    (tol.NOISE_SAFETY * _KAPPA_WEIGHT) * eps_f,
                    (tol.NOISE_SAFETY * _DIFF_WEIGHT / h) * eps_f,
                )
            )
        columns = tuple(np.array(c)[:, None] for c in zip(*limits))
        t = np.stack([np.ravel(np.broadcast_to(a, shape)) if np.ndim(a) else np.full(n, float(a)) for a in ad_tols])
        ad = None if ads is None else np.stack([np.ravel(a) for a in ads])
        ok, value, err, shift = _model_block(tuple(stacked[k] for k in MODEL_OFFSETS), f0f, t, ad, h, columns)
    return [
        (value[b].reshape(shape), err[b].reshape(shape), shift[b].reshape(shape), typicals[b]) if ok[b] else None
        for b in range(len(fs))
    ]


def _model_block(
    fs: tuple[Array, ...],
    f0: Array,
    t: Array | float,
    ad: Array | None,
    h: float,
    limits: tuple[float, ...],
    outs: tuple[Array, Array, Array] | None = None,
    scratch: _xp.Scratch | None = None,
) -> tuple:
    """model_reference() on one block: (every element passes, value, err,
    shift) from the points ``fs`` (in the order of MODEL_OFFSETS). Pure array
    arithmetic (see _estimate_block); on numpy and torch the results go into
    ``outs`` (value, err, shift) and the temporaries into ``scratch``."""
    noise1, noise2, typical, kappa_max, drift_max = limits
    f = dict(zip(MODEL_OFFSETS, fs))
    xp = _xp.ns(f0, *fs)
    m = tuple(f0.shape)[0]
    rows = len(tuple(fs[0].shape)) == 2  # (model_references: a row per direction)

    def every(a: Array) -> Any:
        return np.all(a, axis=-1) if rows else xp.all(a)

    def tmp(name: str) -> Array | None:
        return None if scratch is None else scratch(name, m)

    out_v, out_e, out_s = outs if outs is not None else (None, None, None)
    d1, d2, d4, r1, r2 = _richardson(f, h, tmp)
    # (the kink indicator first, while the block's points are still in cache)
    kappa = _xp.add(f[2], f[-2], tmp("kappa"))
    kappa *= 4.0
    kappa -= _xp.add(f[4], f[-4], tmp("a"))
    kappa -= _xp.mul(f0, 6.0, tmp("a"))
    limit = _xp.mul(t, h, tmp("limit")) if _xp.is_array(t) else t * h
    limit += kappa_max
    ok = every(_xp.iabs(kappa) <= limit)
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
        ok = ok & every(_xp.iabs(_xp.sub(ad, v, tmp("a"))) <= room)
    r1 -= v
    r2 -= v
    shift = _xp.imaximum(_xp.iabs(r1), _xp.iabs(r2))
    if out_s is not None:
        out_s[...] = shift
        shift = out_s
    return ok, v, e, shift


def _scales(F: dict[int, Array], b: slice, h: float, f0: Array | None = None) -> tuple[float, float, float]:
    """The rounding model's scales on block b: the largest finite |D(h/2)|,
    |F(+-h)| and |F(0)| (0 when ``f0`` is None)."""
    if b.stop - b.start == 0 or _xp.size(F[2]) == 0:
        return 0.0, 0.0, 0.0
    if _xp.immutable(F[2]):
        parts = tuple(a[b] for a in (F[2], F[-2], F[-4], F[4], F[2] if f0 is None else f0))
        return tuple(float(v) for v in _kernel(_scales_block, F[2])(parts, h))
    d2 = (F[2][b] - F[-2][b]) * (1.0 / h)  # D(h/2)
    top = 0.0 if f0 is None else _xp.fmax(f0[b])
    return _xp.fmax(d2), max(_xp.fmax(F[-4][b]), _xp.fmax(F[4][b])), top


def _scales_block(parts: tuple[Array, ...], h: float) -> tuple[Array, Array, Array]:
    f2, fm2, fm4, f4, f0 = parts
    xp = _xp.ns(*parts)

    def fmax(a: Array) -> Array:
        return xp.max(xp.where(_xp.finite(a), xp.abs(a), 0.0))

    return fmax((f2 - fm2) * (1.0 / h)), xp.maximum(fmax(fm4), fmax(f4)), fmax(f0)


def _richardson(
    f: dict[int, Array], h: float, tmp: Callable[[str], Array | None] = lambda name: None
) -> tuple[Array, Array, Array, Array, Array]:
    """D(h), D(h/2), D(h/4) and R1 = R(h, h/2), R2 = R(h/2, h/4) from the
    stencil ``f`` (offset -> F): estimate() and model_reference() share them
    bit for bit. ``tmp(name)``: a buffer to compute into, or None."""
    d1 = _xp.sub(f[4], f[-4], tmp("d1"))
    d1 *= 0.5 / h
    d2 = _xp.sub(f[2], f[-2], tmp("d2"))
    d2 *= 1.0 / h
    d4 = _xp.sub(f[1], f[-1], tmp("d4"))
    d4 *= 2.0 / h
    r1 = _xp.mul(d2, 4.0, tmp("r1"))
    r1 -= d1
    r1 *= 1.0 / 3.0
    r2 = _xp.mul(d4, 4.0, tmp("r2"))
    r2 -= d2
    r2 *= 1.0 / 3.0
    return d1, d2, d4, r1, r2


@dataclass(frozen=True)
class Problem:
    """F'(0) to be measured: F along the direction and its value ``f0`` at 0,
    the first step ``h`` and the finest the ladder may take (``floor``), the
    oracle's unit roundoff, the AD tolerance the estimate must settle, whether
    flagged elements go down the ladder, F(0)'s scale, the largest input
    magnitude (see ``reference``), the point's magnitude along the direction,
    and for part of the outputs the largest |F(0)| of those left out
    (``outer``: see _on_support)."""

    F: Callable[[float], Array]
    f0: Array
    h: float
    floor: float
    u_oracle: float
    ad_tol: Array | float
    ladder: bool
    f0_scale: float
    inputs: float = 0.0
    point: float = 1.0
    outer: float = 0.0


#: reference()'s ``quick`` before model_reference() has run.
UNKNOWN: Any = object()


def reference(
    F: Callable[[float], Array],
    f0: Array,
    h: float,
    floor: float,
    u_oracle: float,
    ad_tol: Array | float,
    *,
    ladder: bool = True,
    f0_scale: float | None = None,
    inputs: float = 0.0,
    model_first: bool = False,
    ad: Array | None = None,
    sparse: bool = False,
    point: float = 1.0,
    have: dict[int, Array] | None = None,
    quick: Any = UNKNOWN,
) -> Reference:
    """FD reference for F'(0) with kink analysis of flagged elements. ``inputs``:
    the largest input magnitude (what fn's terms are at least, for telling its
    rounding from a feature). ``model_first``: try the rounding model first
    (see model_reference; ``ad`` +- ``ad_tol``, the AD values it will judge, must
    agree with it too); where nothing is flagged the reference is the model's,
    and ``Reference.measure`` measures fn's noise when a comparison needs it.
    ``sparse``: estimate only the outputs the steps move (see _on_support).
    ``point``: the point's magnitude along the direction (see _model_noise).
    ``have``: F's values at MODEL_OFFSETS, evaluated already (model_first);
    ``quick``: model_reference()'s result on them (None included), where
    model_references() worked it out already."""
    if f0_scale is None:
        f0_scale = _xp.fmax(f0)
    problem = Problem(F, f0, h, floor, u_oracle, ad_tol, ladder, f0_scale, inputs, point)
    if model_first:
        have = have or dict(zip(MODEL_OFFSETS, values_at(F, [k * h / 4 for k in MODEL_OFFSETS])))
        if quick is UNKNOWN:
            quick = model_reference(have, f0, h, u_oracle, ad_tol, f0_scale, ad, point=point)
        if quick is not None:
            value, err, shift, typical = quick
            if _xp.size(value) > KEEP_POINTS:
                have = {}  # (8 MB each at n = 10^6: measuring, rarely needed, evaluates them again)

            def measure() -> Reference:
                return _measured(problem, have, sparse)

            status = _xp.zeros(tuple(value.shape), value, "int8")
            return Reference(value, err, status, True, typical=typical, measure=measure, shift=shift)
    else:
        have = {}
    return _measured(problem, have, sparse)


def _measured(p: Problem, have: dict[int, Array], sparse: bool = False, unmoved: bool = False) -> Reference:
    """The reference with fn's noise measured (reusing the points in ``have``);
    ``sparse``: on the outputs the first step moves (see _on_support, which
    passes ``unmoved``: outputs were left out)."""
    h, ad_tol, f0_scale = p.h, p.ad_tol, p.f0_scale
    stencil = evaluate_level(p.F, h, have)
    if sparse:
        narrowed = _on_support(p, stencil)
        if narrowed is not None:
            return narrowed
    level0 = estimate(stencil, p.f0, p.u_oracle, ad_tol, f0_scale, outer=p.outer, point=p.point)
    value, err, noise = level0.value, level0.err, level0.noise
    shape = tuple(value.shape)
    status = _xp.zeros(shape, value, "int8")  # SMOOTH
    suspects = _xp.nonzero(level0.kink)
    if suspects.size:
        suspects = suspects[~_noise_explains(level0, suspects, ad_tol)]
    reasons: dict[int, str] = {}
    if suspects.size:
        with _xp.quiet():  # (a level's sides may be inf - inf: unsettled, not a warning)
            v_s, e_s, s_s = _ladder(p, level0, suspects)
        xp = _xp.ns(value)
        value = xp.reshape(_xp.put(_xp.copy(_xp.flat(value)), suspects, v_s), shape)
        err = xp.reshape(_xp.put(_xp.copy(_xp.flat(err)), suspects, e_s), shape)
        status = xp.reshape(_xp.put(_xp.flat(status), suspects, s_s), shape)
    typical = max(f0_scale, level0.slope)
    # (an output left out is 0 +- R1's modelled bound: unresolved against the same scales)
    left_out = unmoved and not (tol.NOISE_SAFETY * _R1_WEIGHT / h) * level0.eps_f <= 0.5 * typical
    if left_out or _xp.any_(_unresolved(err, value, status, typical)):
        # only then is the curvature worth its pass over the vector
        typical = max(typical, level0.curvature(status == SMOOTH))
        status = mark_unresolved(value, err, status, typical, reasons)
    all_smooth = not suspects.size and not _xp.any_(status != SMOOTH)
    flagged = _xp.put(_xp.zeros(_xp.size(value), value, "bool"), suspects, True)
    flagged = _xp.ns(value).reshape(flagged, shape)
    return Reference(value, err, status, all_smooth, noise, reasons, typical, flagged, eps_f=level0.eps_f)


def _on_support(p: Problem, stencil: Stencil) -> Reference | None:
    """The measured reference worked out on the outputs the first step moves
    (or that are not finite at 0) and filled in elsewhere - None where every
    output moves. A column of the Jacobian moves few. An output whose nine
    values are equal has every difference 0: the estimate is 0, its bound the
    modelled noise's (R1's), unflagged; the whole vector's scales come out the
    same (such an output's |F(+-h)| is its |F(0)|: a floor under the stencil's
    scale). Where that bound is as large as the derivatives they are unreliable."""
    h, F = stencil.h, p.F
    shape = tuple(p.f0.shape)
    f0f = _xp.flat(p.f0)
    n = _xp.size(f0f)
    with _xp.quiet():
        moved = ~_xp.finite(f0f)
        for a in stencil.f:
            moved |= _xp.flat(a) != f0f
    idx = _xp.nonzero(moved)
    if idx.size == n:
        return None
    outer = _xp.fmax(f0f, where=~moved)  # the outputs left out: their |F(+-h)| is their |F(0)|
    at = _xp.index(idx, f0f)
    per_element, t = _tolerance(p.ad_tol, shape)
    have = {k: _xp.flat(a)[at] for k, a in zip(OFFSETS, stencil.f)}
    part = dataclasses.replace(
        p, F=lambda step: _xp.flat(F(step))[at], f0=f0f[at], ad_tol=t[at] if per_element else t, outer=outer
    )
    sub = _measured(part, have, unmoved=True)
    err0 = (tol.NOISE_SAFETY * _R1_WEIGHT / h) * sub.eps_f
    rest_unresolved = not err0 <= 0.5 * sub.typical  # (their value is 0)
    reasons = {int(idx[i]): why for i, why in (sub.reasons or {}).items()}
    xp = _xp.ns(f0f)

    def filled(fill: Any, part: Array, dtype: str) -> Array:
        return xp.reshape(_xp.put(_xp.full(n, fill, f0f, dtype), idx, part), shape)

    status = filled(UNRELIABLE if rest_unresolved else SMOOTH, sub.status, "int8")
    if rest_unresolved:
        for i in np.setdiff1d(np.arange(min(n, idx.size + 3)), idx)[:3].tolist():
            reasons.setdefault(
                i,
                f"the finite-difference error bound {err0:.3g} is as large as the derivatives "
                f"(about {sub.typical:.3g}): no step lies between the function's noise and its curvature",
            )
    return Reference(
        filled(0.0, sub.value, "float64"),
        filled(err0, sub.err, "float64"),
        status,
        sub.all_smooth and not rest_unresolved,
        None,  # (a column's noise and ladder flags serve no later test)
        reasons,
        sub.typical,
        None,
        eps_f=sub.eps_f,
    )


def _levels(p: Problem) -> dict[float, Stencil]:
    """Every level the ladder may descend to, from one vectorised evaluation
    of fn where F offers one (each level is otherwise evaluated when the
    ladder reaches it; a level it never reaches costs a batch a few points
    longer, not a call)."""
    many = getattr(p.F, "many", None)
    steps, k = [], p.h
    while k / tol.LADDER_FACTOR >= p.floor:
        k /= tol.LADDER_FACTOR
        steps.append(k)
    if many is None or len(steps) < 2:
        return {}
    values = many([o * k / 4 for k in steps for o in OFFSETS])
    if values is None:
        return {}
    n = len(OFFSETS)
    return {k: Stencil(k, tuple(values[j * n : (j + 1) * n])) for j, k in enumerate(steps)}


def _ladder(p: Problem, level0: Estimate, suspects: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    # (all of the level's noise where no slope jump showed; else the cleaner
    # side's: a kink beside the point inflates the other)
    carried = np.where(flat, level0.take("noise", suspects), np.minimum(left_n, right_n))
    # ... and never below the rounding to the grid fn's values lie on
    carried = np.maximum(carried, GRID_NOISE * level0.grid(suspects))
    sides = {"r": r, "le": le, "se": se}
    status = np.where(level0.take("finite", suspects), KINK, UNRELIABLE).astype(np.int8)
    value, err = central.copy(), central_err.copy()
    everything = np.arange(count)
    _hull(value, err, everything, r, le, se)
    # A kink at the point has the same one-sided derivatives at every step, so
    # every level's hull holds them: the hulls must have a point in common.
    # (A feature narrower than the step - a row normalised while far smaller
    # than it - gives sides that wander from level to level, each within its
    # own wide bound.)
    common_lo = np.minimum(r, le) - se
    common_hi = np.maximum(r, le) + se
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
            sub[sub] = ~_noise_explains(est, suspects[open_[sub]], ad_tol)
        smooth = open_[~sub]
        carried[open_] = np.maximum(carried[open_], GRID_NOISE * est.grid(suspects[open_]))
        # The kink was beside the point: at this step both sides agree.
        fine_value, fine_err = est.take("value", suspects[smooth]), est.take("err", suspects[smooth])
        value[smooth] = fine_value
        err[smooth] = np.maximum(fine_err, (tol.NOISE_SAFETY * _R2_WEIGHT / k) * carried[smooth])
        status[smooth] = SMOOTH
        # ... or there was no kink, only noise the first level's estimate
        # already carried: estimates that disagree beyond both bounds cannot
        # tell which is right. Undecided, not a confident wrong reference.
        drift = np.abs(fine_value - central[smooth]) > fine_err + central_err[smooth]
        status[smooth[drift & flat[smooth]]] = UNRELIABLE
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
        common_lo[keep] = np.maximum(common_lo[keep], np.minimum(r, le) - se)
        common_hi[keep] = np.minimum(common_hi[keep], np.maximum(r, le) + se)
        # every level's hull holds a kink at the point; keep the tightest (a
        # finer step trades truncation for rounding)
        tighter = np.abs(r - le) / 2 + se < err[keep]
        _hull(value, err, keep[tighter], r[tighter], le[tighter], se[tighter])
        sides = {"r": r, "le": le, "se": se}
        step = est.step_f(at)
        # F(h) - F(0) shrinks ~8x per level on a kink, not at all on a jump,
        # judged against each element's own noise.
        prev = prev_step[position]
        own_noise = np.maximum(np.minimum(ln, rn), est.eps_f)
        finite = est.take("finite", at)
        jump = (step > 0.5 * prev) & (step > 1e3 * own_noise) & finite
        status[keep] = np.where(finite, KINK, UNRELIABLE)
        status[keep[jump]] = JUMP
        prev_step = step
        open_ = keep
    # Whatever is still open at the floor is a kink at the point when its
    # one-sided derivatives settled and every level's hull overlaps the
    # others, a jump when the last level said so, and otherwise undecidable.
    # With no finer level possible - the first step is already at the
    # resolution of the dtype under test - the first level's hull stands,
    # unless its sides showed no slope jump beyond their error: then the flag
    # was noise, and the central estimate (whose bound holds that noise) stands.
    if open_.size and k < h:
        disjoint = common_lo[open_] > common_hi[open_]
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
        Fv = level0._values(suspects[kinked])
        with np.errstate(invalid="ignore", over="ignore"):
            kappa = np.abs(4.0 * (Fv[2] + Fv[-2]) - (Fv[4] + Fv[-4]) - 6.0 * Fv[0])
            terms = np.maximum(np.max([np.abs(v) for v in Fv.values()], axis=0), p.inputs)
        rounding = kappa <= tol.ROUNDING_TERMS * u_oracle * terms
        no_jump = flat[kinked]
        noise = kinked[rounding & no_jump]
        value[noise], err[noise], status[noise] = central[noise], central_err[noise], SMOOTH
        status[kinked[rounding != no_jump]] = UNRELIABLE
    return value, err, status


#: Spacings of the wider noise tables, in units of the step h, tried one
#: after the other while AD still disagrees; their nine points span 8
#: spacings, at most WIDE_SPAN of the input's scale (2^-2: far enough to see
#: a quantised tail's steps even where the input itself is 0 and the function
#: works at another argument's scale; the sixth difference of a smooth
#: function at that spacing still tilts a slope by only ~1e-8 of its sixth
#: derivative, far below a bug).
WIDE_SPACINGS = (4.0, 64.0, 1024.0, 8192.0)
WIDE_SPAN = 2.0**-2
_D6_NOISE = float(np.sqrt(924.0))


@dataclass
class WideTable:
    """F on nine points of spacing d (t = k d, k = -4..4), the noise sigma it
    shows per element and the slope error that noise can cause over d (its tilt)."""

    d: float
    f: dict[int, Array]
    sigma: Array
    tilt: Array


def wide_table(F: Callable[[float], Array], f0: Array, h: float, level: int) -> WideTable | None:
    """The ``level``-th wider table (None when it does not fit). A noise of
    size sigma seen at spacing d varies over about d, so it tilts a slope by
    about sigma / d: at the step's own spacing h/4 this is the usual 6 sigma / h
    of the estimate, 1.5 sigma / d. sigma is the smaller of the fourth- and
    sixth-difference estimates: noise gives both the same value, a smooth
    function's curvature shows in the fourth far more than in the sixth."""
    if level >= len(WIDE_SPACINGS) or 8 * WIDE_SPACINGS[level] * h > WIDE_SPAN:
        return None
    d = WIDE_SPACINGS[level] * h
    f = dict(zip(OFFSETS, values_at(F, [k * d for k in OFFSETS])))
    f[0] = f0
    with _xp.quiet():
        sigma, tilt = blockwise(_wide_block, _xp.flat(f0), tuple(_xp.flat(f[k]) for k in range(-4, 5)), d)
    return WideTable(d, f, sigma, tilt)


def _wide_block(fs: tuple[Array, ...], d: float) -> tuple[Array, Array]:
    """A wide table's noise sigma and the tilt it can cause, from F at t = k d,
    k = -4..4 (see _estimate_block; in place on two temporaries per block)."""
    f = dict(zip(range(-4, 5), fs))
    xp = _xp.ns(*fs)
    m = tuple(fs[0].shape)[0]
    mutable = not _xp.immutable(fs[0])
    acc, tmp = (_xp.empty(m, fs[0]), _xp.empty(m, fs[0])) if mutable else (None, None)
    d4 = d6 = None
    for j in range(-4, 1):
        w = _xp.iabs(_combination(f, j, (1, -4, 6, -4, 1), acc, tmp))
        d4 = _xp.copy(w) if d4 is None else _xp.imaximum(d4, w)
    for j in range(-4, -1):
        w = _xp.iabs(_combination(f, j, (1, -6, 15, -20, 15, -6, 1), acc, tmp))
        d6 = _xp.copy(w) if d6 is None else _xp.imaximum(d6, w)
    d4 /= _D4_NOISE
    d6 /= _D6_NOISE
    sigma = _xp.iminimum(d4, d6)
    sigma = xp.where(_xp.finite(sigma), sigma, 0.0)
    return sigma, sigma * (tol.NOISE_SAFETY * 1.5 / d)


def _combination(f: dict[int, Array], j: int, c: tuple[int, ...], out: Array | None, tmp: Array | None) -> Array:
    """f[j] + c1 f[j+1] + c2 f[j+2] + ..., added left to right as the written
    expression is (c0 = 1), into ``out`` with ``tmp`` for the products where given."""
    term = f[j + 1] if abs(c[1]) == 1 else _xp.mul(f[j + 1], float(abs(c[1])), tmp)
    acc = _xp.sub(f[j], term, out) if c[1] < 0 else _xp.add(f[j], term, out)
    for k in range(2, len(c)):
        term = f[j + k] if abs(c[k]) == 1 else _xp.mul(f[j + k], float(abs(c[k])), tmp)
        if c[k] < 0:
            acc -= term
        else:
            acc += term
    return acc


def _hull(value: np.ndarray, err: np.ndarray, idx: np.ndarray, r: np.ndarray, le: np.ndarray, se: np.ndarray) -> None:
    """At a kink the interval is the hull of the one-sided derivatives (host
    arrays, in place)."""
    lo = np.minimum(r, le) - se
    hi = np.maximum(r, le) + se
    value[idx] = (lo + hi) / 2
    err[idx] = (hi - lo) / 2


def _unresolved(err: Array, value: Array, status: Array, typical: float) -> Array:
    xp = _xp.ns(err)
    with _xp.quiet():
        return (status == SMOOTH) & ~(err <= 0.5 * (xp.abs(value) + typical))


def mark_unresolved(value: Array, err: Array, status: Array, typical: float, reasons: dict[int, str]) -> Array:
    """A smooth element whose error bound is as large as the derivatives around
    it (its own, and ``typical``: the vector's slope, or |F| since a step of
    t = 1 moves the input by its own scale) cannot tell a right derivative
    from a wrong one. Returns the status with those elements unreliable."""
    bad = _unresolved(err, value, status, typical)
    if not _xp.any_(bad):
        return status
    status = _xp.put(status, bad, UNRELIABLE)
    flat_value, flat_err = _xp.flat(value), _xp.flat(err)
    for i in _xp.nonzero(bad, limit=3):
        reasons[int(i)] = (
            f"the finite-difference error bound {float(flat_err[i]):.3g} is as large as the derivative "
            f"{float(flat_value[i]):.3g}: no step lies between the function's noise and its curvature"
        )
    return status
