"""The re-examinations a disagreement gets before finite differences may
convict AD. Each is an excuse: a small object with one method that looks
again at fn along the disagreeing direction and returns whether it changed
the reference there (the comparison then runs again). A comparison tries its
excuses in order until none changes anything, as Hypothesis's shrinker loops
over its passes; a disagreement that survives them all is a finding.

* ``Unmeasured`` / ``AllUnmeasured``: the reference was the rounding
  model's; measure fn's noise and judge again.
* ``OnGrid``: fn's values lie on a grid coarser than u |F| (a cancellation
  inside fn): raise the bounds to what rounding to it can do.
* ``FinerStep``: the estimate moves with a finer step (a feature of fn
  narrower than the step): FD cannot decide there.
* ``WideNoise``: noise seen only at wider spacings could tilt the slope by as
  much as the disagreement: FD has nothing left to convict.
* ``Nearby``: at a kink of a full Jacobian's column, the pieces that meet
  there may be more than the two along the column: take the derivatives of
  fn at points around it into the kink's interval.

An excuse never passes an element: it widens a bound or marks the element
unreliable, with its reason. It replaces the oracle's reference rather than
editing it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .levels import STAIRS, at_step, beneath, finer, grid_at, refined, staircase
from .oracle import Oracle
from .probes import below_steps

__all__ = [
    "AllUnmeasured",
    "Beneath",
    "Disagreement",
    "Excuse",
    "FinerStep",
    "Nearby",
    "OnGrid",
    "OncePerDirection",
    "Unmeasured",
    "WideNoise",
    "within",
]


@dataclass(frozen=True)
class Disagreement:
    """What a comparison about to fail puts to the excuses."""

    #: The direction (a column of a full Jacobian) whose reference disagrees.
    b: int
    #: By how much each element lies beyond its bound (-inf where nothing is
    #: compared), or one projection's excess; computed when first asked for.
    excess_of: Callable[[], Any]
    #: The cotangent a projection's excess was taken with (None: per element).
    weights: Any = None

    @functools.cached_property
    def excess(self) -> Any:
        return self.excess_of()


class Excuse:
    """One re-examination: ``__call__`` returns whether it changed the
    oracle's reference (the comparison must then run again)."""

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        raise NotImplementedError


class Unmeasured(Excuse):
    """The reference along the direction was the rounding model's (AD agreed
    within it in FD's units; in u's, rounding may differ): measure fn's noise."""

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        if not oracle.refs[case.b].modelled:
            return False
        oracle.measured(case.b)
        return True


class AllUnmeasured(Excuse):
    """A projection meets every direction's reference: where any was the
    rounding model's, measure them all."""

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        if not any(r.modelled for r in oracle.refs):
            return False
        for b in range(len(oracle.refs)):
            oracle.measured(b)
        return True


class OncePerDirection(Excuse):
    """An excuse that looks at each direction once."""

    def __init__(self) -> None:
        self.done: set[int] = set()  # directions looked at

    def first_look(self, oracle: Oracle, case: Disagreement) -> tuple[fd.Reference, Any] | None:
        """The direction's measured reference and its disagreeing elements that
        FD decided (smooth or a kink), the first time the direction is asked
        about; None after."""
        if case.b in self.done:
            return None
        self.done.add(case.b)
        ref = oracle.measured(case.b)
        with _xp.quiet():
            idx = _xp.nonzero((case.excess > 0) & (ref.status <= fd.KINK))
        return ref, idx


class OnGrid(OncePerDirection):
    """Measure the grid fn's values lie on (see fd.grid) where direction
    b's estimate disagrees with AD, and raise those elements' bounds to
    what rounding to it can do to the estimate. Where fn cancels inside
    (z - tanh z at small z) the grid is u x its terms, far coarser than
    u |F|, and rounding to it can be linear across the whole stencil -
    invisible to a difference table, yet a slope error of up to its
    spacing over the step. An element whose bound then reaches its
    derivatives is unreliable (see fd.mark_unresolved). Done once per
    direction; returns whether any bound was raised."""

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        look = self.first_look(oracle, case)
        if look is None:
            return False
        b, (ref, idx) = case.b, look
        if not idx.size:
            return False
        p, c = oracle.precision, oracle.probes.cs[b]
        F = oracle.F(oracle.probes.us[b], c)
        q, values = grid_at(oracle, F, idx)
        reach = fd.grid_bound(q, p.h) / c
        stairs = staircase(q, values, oracle, F, idx)
        raised = (reach > _xp.take(ref.err, idx)) & ~stairs
        if not raised.any() and not stairs.any():
            return False
        if raised.any():
            at = idx[raised]
            shape, xp = tuple(ref.value.shape), _xp.ns(ref.value)
            err = xp.reshape(_xp.put(_xp.copy(_xp.flat(ref.err)), at, reach[raised]), shape)
            reasons = dict(ref.reasons or {})
            status = fd.mark_unresolved(ref.value, err, _xp.copy(ref.status), ref.typical / c, reasons)
            ref = dataclasses.replace(ref, err=err, status=status, reasons=reasons, all_smooth=False)
        if stairs.any():
            steps = dict(zip(idx[stairs].tolist(), q[stairs].tolist()))
            ref = ref.gave_up_at(idx[stairs], lambda i: STAIRS % steps[i])
        oracle.refs[b] = ref
        return True


class FinerStep(OncePerDirection):
    """Estimate direction b again with steps REFINE, REFINE^2, ... times
    smaller. A smooth function gives the same value within both bounds;
    where the estimate moves by more, the step was larger than a feature of
    fn (a row normalised while far smaller than the step, an eps) and FD
    cannot decide there: those elements become unreliable, with both
    values. An element the finer step cannot settle (a kink flag, or a
    bound as large as the derivatives: a feature it still straddles) is
    taken one level further down: a feature narrower than the
    first step can also hide from the first level's flags. Where such an
    element is smooth at a later level, the first step straddled a feature
    that this step no longer reaches (as down the kink ladder): the finer
    estimate replaces the reference. So that the feature cannot hide from
    these levels too, they estimate the disagreeing elements alone: the
    rounding model's slope scale is then theirs, not that of a neighbour
    whose own feature made its slope huge. The levels stop where an element
    is smooth or noise-bound (a finer step only adds noise), or
    where the point x + t u itself would round: along a column that is at
    the moved element's own magnitude, not its argument's (a row of norm
    1e-9 beside rows of 6 needs a step of 1e-11, which that element
    represents exactly). Done once per direction; returns whether any
    element changed."""

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        look = self.first_look(oracle, case)
        if look is None:
            return False
        b, (ref, idx) = case.b, look
        probes = oracle.probes
        c = probes.cs[b]
        own = max(abs(float(probes.x[b])), tol.TINY_SCALE) / c if probes.full else 1.0
        F = oracle.F(probes.us[b], c)
        moved, replaced, _ = finer(oracle, F, c, oracle.terms(c, column=probes.full), own, ref, idx)
        oracle.refs[b] = refined(ref, moved, replaced)
        return bool(moved or replaced)


class Beneath(OncePerDirection):
    """A full Jacobian's column whose input element lies below every step FD
    takes (levels.beneath): its disagreeing elements where AD's slope (the
    larger of forward and reverse mode's, ``slopes(b)``) is steeper than fn's
    values can show over such a step are unreliable, with why. Done once per
    column; returns whether any element changed."""

    def __init__(self, slopes: Callable[[int], np.ndarray]) -> None:
        super().__init__()
        self.slopes = slopes

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        if not oracle.probes.full or not bool(below_steps(oracle.probes.x, oracle.precision)[case.b]):
            return False
        look = self.first_look(oracle, case)
        if look is None:
            return False
        ref, idx = look
        slopes = self.slopes(case.b)
        whys = {int(i): beneath(oracle, case.b, float(slopes[i])) for i in idx.tolist()}
        why = {i: w for i, w in whys.items() if w}
        if not why:
            return False
        oracle.refs[case.b] = ref.gave_up_at(np.array(sorted(why)), why.__getitem__)
        return True


class Nearby(Excuse):
    """Where kinks of several variables meet (bilinear sampling exactly on
    pixel edges, moved by a parameter that moves every sample), the pieces
    adjacent to the point are more than the two a column's one-sided
    derivatives see: moving x_j alone sends some samples one way and others
    the other (and may even leave the column smooth), while AD takes each
    sample's piece by its own rule (floor: as if each had moved up) - the
    gradient of a piece adjacent to the point along another direction. A
    limiting gradient lies in the hull of the limits of fn's gradient at
    points approaching x (Clarke's generalized Jacobian), so at a point where
    finite differences found a kink, a full Jacobian column's disagreeing
    elements take in those limits along directions around x (see
    ``directions``):
    the column's derivative measured at two distances (NEARBY and NEARBY / 8
    steps along each input) and extrapolated to the point, so that on a
    smooth function the limit is the derivative at x itself (the hull does
    not grow) and across a kink it is the adjacent piece's. Host arrays (a
    full Jacobian is a small check). Done once per element; returns whether
    any interval grew."""

    #: Directions probed around x (antithetic pairs: half Gaussian, half random signs).
    PROBES = 32
    #: How far the outer probe lies from x, in FD steps along each input.
    NEARBY = 64.0
    #: The inner probe's distance is NEARBY / SHRINK.
    SHRINK = 8.0
    #: Up to this many inputs, every input and every pair is probed too.
    SPARSE = 8

    def __init__(self) -> None:
        self.seen: set[tuple[int, int]] = set()  # (column, element) looked at
        self.hulls: dict[int, tuple[tuple[np.ndarray, np.ndarray], int]] = {}  # column -> its limits' hull

    def _hull(self, oracle: Oracle, b: int) -> tuple[tuple[np.ndarray, np.ndarray], int]:
        """The hull (lo, hi per element of column b) of the limits of fn's
        derivative along the directions probed (+-inf where none was smooth),
        and how many directions were probed. All of the column's elements at
        once: each probe evaluates fn whole."""
        probes, p = oracle.probes, oracle.precision
        x, cs = probes.x, np.asarray(probes.cs, dtype=float)
        directions = self.directions(x.size, np.random.default_rng([probes.seed, b]))
        every = np.arange(_xp.size(oracle.f0))
        lo, hi = np.full(every.size, np.inf), np.full(every.size, -np.inf)
        for r in directions:
            outer = self._derivative(oracle, x + self.NEARBY * p.h * cs * r, b, every)
            inner = self._derivative(oracle, x + (self.NEARBY / self.SHRINK) * p.h * cs * r, b, every)
            if outer is None or inner is None:
                continue
            (d1, e1, ok1), (d2, e2, ok2) = outer, inner
            # the limit at x along r: linear in the distance on a smooth piece
            slope = (d1 - d2) / (self.SHRINK - 1.0)
            limit, err = d2 - slope, e2 + e1 / (self.SHRINK - 1.0) + np.abs(slope)
            ok = ok1 & ok2 & np.isfinite(limit) & np.isfinite(err)
            lo = np.where(ok, np.minimum(lo, limit - err), lo)
            hi = np.where(ok, np.maximum(hi, limit + err), hi)
        return (lo, hi), len(directions)

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        probes = oracle.probes
        if not probes.full or not _xp.on_host(probes.x):
            return False
        if not any(not r.all_smooth and bool(np.any(np.asarray(r.status) == fd.KINK)) for r in oracle.refs):
            return False  # (no kink at this point: fn is smooth around it, its pieces are one)
        b, ref = case.b, oracle.measured(case.b)
        with _xp.quiet():
            idx = np.asarray(_xp.nonzero((case.excess > 0) & (ref.status <= fd.KINK)))
        # (each element once: a full Jacobian's rows come to a column one at a time)
        idx = np.array([i for i in idx.tolist() if (b, i) not in self.seen], dtype=np.int64)
        self.seen.update((b, i) for i in idx.tolist())
        if not idx.size:
            return False
        if b not in self.hulls:
            self.hulls[b] = self._hull(oracle, b)
        found, count = self.hulls[b]
        lo = np.minimum(np.asarray(ref.lo)[idx], found[0][idx])
        hi = np.maximum(np.asarray(ref.hi)[idx], found[1][idx])
        before = np.asarray(ref.hi)[idx] - np.asarray(ref.lo)[idx]
        grown = hi - lo > before * (1 + 1e-9)
        if not grown.any():
            return False
        at, lo, hi = idx[grown], lo[grown], hi[grown]
        shape = tuple(ref.value.shape)
        value, err = _xp.copy(_xp.flat(ref.value)), _xp.copy(_xp.flat(ref.err))
        status = _xp.copy(_xp.flat(ref.status))
        value[at], err[at], status[at] = (lo + hi) / 2, (hi - lo) / 2, fd.KINK
        reasons = dict(ref.reasons or {})
        for k, i in enumerate(at[:3].tolist()):
            reasons[int(i)] = (
                f"kinks of several variables meet here: the limits of fn's derivative from {count} "
                f"directions around the point span [{probes.unscale(b, float(lo[k])):.6g}, "
                f"{probes.unscale(b, float(hi[k])):.6g}]"
            )
        oracle.refs[b] = dataclasses.replace(
            ref,
            value=value.reshape(shape),
            err=err.reshape(shape),
            status=status.reshape(shape),
            reasons=reasons,
            all_smooth=False,
        )
        return True

    def directions(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The directions probed, antithetic pairs: on at most SPARSE inputs
        every one and every pair of them (a piece is often entered by moving
        a few inputs together - a translation moves every sample the same
        way - where a random direction in all of them rarely enters it), and
        PROBES random ones, half Gaussian and half random signs."""
        half = self.PROBES // 2
        found = [rng.standard_normal((half // 2, n)), rng.choice([-1.0, 1.0], (half - half // 2, n))]
        if n <= self.SPARSE:
            eye = np.eye(n)
            found.append(eye)
            found.extend(eye[k] + sign * eye[k + 1 :] for k in range(n - 1) for sign in (1.0, -1.0))
        directions = np.concatenate(found)
        return np.concatenate([directions, -directions])

    @staticmethod
    def _derivative(oracle: Oracle, y: np.ndarray, b: int, idx: np.ndarray) -> tuple | None:
        """Column b's elements ``idx`` at the flat point y: (value, error
        bound, smooth), per unit of x_b; None where fn is not finite there."""
        p, probes = oracle.precision, oracle.probes
        c = float(probes.cs[b])
        f_y = _xp.take(_xp.flat(oracle.at_point(y)), idx)

        def line(t: float) -> np.ndarray:
            moved = y.copy()
            moved[b] += t * c
            return _xp.take(_xp.flat(oracle.at_point(moved)), idx)

        there = at_step(oracle, line, f_y, p.h, oracle.terms(c, column=True))
        smooth = np.asarray(there.status) == fd.SMOOTH
        return np.asarray(there.value) / c, np.asarray(there.err) / c, smooth


class WideNoise(Excuse):
    """Look at fn over wider spacings along direction b. A function computed
    through a cancellation can be smooth or flat at the step and still carry
    an error of u x its terms that shows only further out (jax's tanh-form
    gelu in its tail: flat pieces and quantum steps): a slope read between
    two steps says nothing about the function's. Where such noise - a
    plausible rounding artifact, see ROUNDING_TERMS - could tilt the slope
    at the step by as much as the disagreement (``excess`` beyond the bound
    per element, or for one projection with ``weights``), FD has nothing
    left to convict: those elements become unreliable, with the reason -
    never a pass. Elements the ladder settled (a kink nearby, known
    structure) are left alone. Returns whether anything was explained
    (then the comparison is made again)."""

    def __init__(self) -> None:
        self.levels: dict[int, int] = {}  # direction -> wider noise tables measured
        self.spans: dict[int, float] = {}  # direction -> the widest span they reached

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        b, excess, weights = case.b, case.excess, case.weights
        ref = oracle.measured(b)
        eligible = ref.status == fd.SMOOTH
        if ref.flagged is not None:
            eligible = eligible & ~ref.flagged
        # (every element is, where no element was flagged: known without a read)
        if not (ref.all_smooth and _xp.size(eligible)) and not _xp.any_(eligible):
            return False
        p = oracle.precision
        c = oracle.probes.cs[b]
        F = oracle.F(oracle.probes.us[b], c)
        inputs = oracle.probes.inputs_max
        xp = _xp.ns(oracle.f0)
        peak = xp.abs(oracle.f0)
        level = self.levels.get(b, 0)
        why = "noise"
        # (an earlier call may have measured every table already: the quantum
        # is then judged over the span they reached)
        span = self.spans.get(b, 0.0)
        if not _xp.on_host(peak) and fd.wide_table_fits(p.h, level):
            ruled_out = self._none_could(oracle, case, F, eligible, level)
            if ruled_out is not None:
                self.levels[b], self.spans[b] = ruled_out
                return False
        while True:
            table = fd.wide_table(F, oracle.f0, p.h, level)
            if table is None:
                # No noise at any spacing: what fn's rounding could still hide is
                # a smooth deviation of up to its quantum (u x its terms) over
                # more than the widest table - a slope error of quantum / span.
                # (z - tanh z at z = 1e-16 is exactly 0 there, z tanh z at
                # 1e-286 underflows, jax's tanh-form gelu is linear with the
                # wrong slope between far-apart steps.)
                if span == 0.0:
                    return False
                why = "quantum"
                tilt = _quantum_tilt(p, peak, inputs, span * c, eligible)
                explained = within(tilt, excess, weights, ref.err)
                if explained is None:
                    return False
                break
            span = 8 * table.d
            level += 1
            self.levels[b], self.spans[b] = level, span
            scalars = (inputs, p.u_oracle, p.h * c)
            with _xp.quiet():
                fs = tuple(table.f[k] for k in sorted(table.f))
                # The most any noise of these points could tilt: noise at the
                # largest a rounding artifact of fn's terms can have. Where that
                # explains nothing (a real bug, whatever the noise) the table's
                # noise is not worked out: the tilt is never above this bound.
                top, most = fd.blockwise(_wide_bound, peak, fs, peak, eligible, scalars)
                tilt = None
                if within(most, excess, weights, ref.err) is not None:
                    table.measure()
                    _, tilt = fd.blockwise(_wide_tilt, peak, fs, table.sigma, peak, eligible, scalars)
                peak = top
                # (the points have served: let them go before the next table's are made)
                del fs, most
                table.f.clear()
            if tilt is not None and (explained := within(tilt, excess, weights, ref.err)) is not None:
                break
        oracle.refs[b] = ref.gave_up(
            explained,
            lambda i: (
                f"fn as computed is quantised here: steps of {float(table.sigma[i]):.3g} (rounding of its terms) "
                f"seen at wider spacings can tilt the finite-difference slope by up to {float(tilt[i]):.3g}, "
                "more than the disagreement"
                if why == "noise"
                else f"the disagreement is below what fn's rounding (u x its terms, smooth over more than "
                f"{span * c:.3g}) can hide from any step: a slope error up to {float(tilt[i]):.3g}; finite differences "
                "cannot see that far into the function as computed"
            ),
        )
        return True

    @staticmethod
    def _none_could(oracle: Oracle, case: Disagreement, F: Callable, eligible: Any, level: int) -> tuple | None:
        """Where fn's values are not on the host (each read a synchronisation):
        whether no table from ``level`` on, nor the quantum beyond the widest,
        could explain the disagreement, in one read. Every table's points are
        made one table at a time and let go, as in the loop, but only the most
        any of them could tilt (``_wide_bound``, never below a table's tilt)
        is kept, with the quantum's tilt over the span they reach: ``within``
        explains more the larger its tilt (per element, and a projection's
        reach grows with each term), so where this bound explains nothing, no
        level does. Returns the levels and span a full loop would
        have left (nothing could), or None (some level might: the loop decides)."""
        p, probes = oracle.precision, oracle.probes
        c = probes.cs[case.b]
        xp = _xp.ns(oracle.f0)
        peak = xp.abs(oracle.f0)
        scalars = (probes.inputs_max, p.u_oracle, p.h * c)
        bound, span = None, 0.0
        with _xp.quiet():
            while (table := fd.wide_table(F, oracle.f0, p.h, level)) is not None:
                span, level = 8 * table.d, level + 1
                fs = tuple(table.f[k] for k in sorted(table.f))
                peak, most = fd.blockwise(_wide_bound, peak, fs, peak, eligible, scalars)
                bound = most if bound is None else _xp.imaximum(bound, most)
                del fs, most
                table.f.clear()
            bound = _xp.imaximum(bound, _quantum_tilt(p, peak, probes.inputs_max, span * c, eligible))
            if within(bound, case.excess, case.weights, oracle.refs[case.b].err) is not None:
                return None
        return level, span


def _quantum_tilt(p: Any, peak: Any, inputs: float, span: float, eligible: Any) -> Any:
    """The slope error a smooth deviation of up to fn's rounding quantum (u x
    its terms: the largest |F| seen, ``peak``, or the inputs) over ``span``
    (in the step's units) can cause, where ``eligible``."""
    xp = _xp.ns(peak)
    quantum = tol.ROUNDING_TERMS * p.u_oracle * xp.maximum(peak, inputs)
    quantum = quantum + tol.SMALLEST_NORMAL.get(p.name, 2.0**-126)
    return xp.where(eligible, tol.NOISE_SAFETY * quantum / span, 0.0)


def _wide_bound(fs: tuple[Any, ...], peak: Any, eligible: Any, scalars: tuple[float, ...]) -> tuple:
    """The largest |F| seen so far (``peak``) with a wide table's values ``fs``,
    and the most its noise can tilt the slope: _wide_tilt's tilt with sigma
    at its plausible limit (ROUNDING_TERMS u x fn's terms), rounded as that
    tilt is, so never below it element by element."""
    inputs, u_oracle, hc = scalars
    xp = _xp.ns(*fs)
    values = _table_values(fs)
    terms = xp.maximum(values, inputs)
    most = xp.where(eligible, tol.NOISE_SAFETY * 6.0 * (tol.ROUNDING_TERMS * u_oracle * terms) / hc, 0.0)
    return xp.maximum(peak, values), most


def _table_values(fs: tuple[Any, ...]) -> Any:
    """max |F| over a table's points, element by element (0 where not finite)."""
    xp = _xp.ns(*fs)
    values = xp.abs(fs[0])
    for v in fs[1:]:
        values = xp.maximum(values, xp.abs(v))
    return xp.where(_xp.finite(values), values, 0.0)


def _wide_tilt(fs: tuple[Any, ...], sigma: Any, peak: Any, eligible: Any, scalars: tuple[float, ...]) -> tuple:
    """The largest |F| seen so far (``peak``) with a wide table's values ``fs``,
    and the slope tilt its noise ``sigma`` can cause where that noise is a
    plausible rounding artifact of fn's terms (0 elsewhere)."""
    inputs, u_oracle, hc = scalars
    xp = _xp.ns(*fs)
    values = _table_values(fs)
    terms = xp.maximum(values, inputs)
    plausible = sigma <= tol.ROUNDING_TERMS * u_oracle * terms
    # a noise of sigma anywhere beyond the stencil tilts its slope by up to ~sigma / h
    tilt = xp.where(eligible & plausible, tol.NOISE_SAFETY * 6.0 * sigma / hc, 0.0)
    return xp.maximum(peak, values), tilt


def within(tilt: Any, excess: Any, weights: Any, err: Any) -> Any | None:
    """The elements whose disagreement a slope error of ``tilt`` explains:
    per element, or (``weights``) all that add to one projection's, whose
    excess is positive; None where it explains none (one read either way:
    a projection's reach is positive only where an element is noisy)."""
    if weights is None:
        explained = (excess > 0) & (excess <= tilt)
        return explained if _xp.any_(explained) else None
    xp = _xp.ns(tilt)
    noisy = tilt > err
    reach = tol.hoeffding(weights, xp.where(noisy, tilt, 0.0))
    return noisy if reach >= excess and reach > 0 else None
