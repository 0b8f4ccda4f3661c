"""The finite-difference oracle: J u along each probe direction, with fn's
noise measured, its kinks and jumps told apart (see _fd), and the two
re-examinations a disagreement gets before FD may convict AD - a finer step,
and fn's noise at wider spacings. What FD cannot decide becomes
``fd_unreliable`` with its reason, never a mismatch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._result import INFO, WARNING, Kind
from . import fd as _fd
from . import tolerance as tol
from . import xp as _xp
from .evaluate import Evaluator
from .findings import Findings, unravel
from .primal import Precision, Primal
from .probes import Probes

__all__ = ["FD_DIRECTIONS", "Oracle", "within"]

#: Directional checks run FD along this many of their directions: it checks all
#: of J u_1 element by element and, projected, every J^T v_a; the other
#: directions meet the VJP through the adjoint identity, which needs no FD and
#: is sharper. A full Jacobian needs every column.
FD_DIRECTIONS = 1


class Oracle:
    """FD references along the probe directions (``refs``: one per FD direction)."""

    def __init__(
        self, ev: Evaluator, primal: Primal, precision: Precision, probes: Probes, *, vectorise: bool = True
    ) -> None:
        self.ev, self.primal, self.precision, self.probes = ev, primal, precision, probes
        self.vectorise = vectorise  # fn at many points of a small check in one vectorised call
        self.batched = False  # whether any F value came from such a call
        # F(0): the finite differences' centre, from the same fn as their
        # stencil (a compiled fn may round unlike its eager run)
        self.f0 = precision.f0
        if ev.rule is None and ev.backend.compiles(ev.fn):
            self.f0 = ev.primal(probes.flat.split(_xp.copy(probes.x)), precision.oracle, flat=True)
        self.refs: list[_fd.Reference] = []
        self.widened: dict[int, int] = {}  # direction -> wider noise tables measured
        self.refined: set[int] = set()  # directions estimated again with a finer step
        self.gridded: set[int] = set()  # directions whose grid was measured

    @property
    def label(self) -> str:
        p = self.precision
        return p.name + (f" ({p.reason})" if p.reason else "")

    def F(self, u: np.ndarray | None, c: float = 1.0, *, j: int | None = None) -> Callable[[float], np.ndarray]:
        """t -> fn(x + t c u) in the oracle precision; along the basis vector
        e_j instead when ``j`` is given (the point is then a copy of x with
        one element moved)."""
        x, flat, ev, oracle = self.probes.x, self.probes.flat, self.ev, self.precision.oracle
        if j is not None:

            def at_basis(t: float) -> Any:
                return ev.primal(flat.split(_xp.shifted(x, j, t * c)), oracle, flat=True)

            at_basis.many = lambda ts: self._many([_xp.shifted(x, j, t * c) for t in ts])  # type: ignore[attr-defined]
            return at_basis
        w, k = _mover(u, c)
        if _xp.immutable(x):  # jax: the point and its split in one compiled pass
            split = _fd.compiled(_split_point, x, static=(3,))
            layout = (flat.offsets, flat.sizes, flat.shapes)

            def at_jax(t: float) -> Any:
                return ev.primal(list(split(x, w, t * k, layout)), oracle, flat=True)

            return at_jax

        point = self._along(u, c)

        def at(t: float) -> Any:
            return ev.primal(flat.split(point(t)), oracle, flat=True)

        at.many = lambda ts: self._many([point(t) for t in ts])  # type: ignore[attr-defined]
        return at

    def _along(self, u: Any, c: float) -> Callable[[float], Any]:
        """t -> the flat point x + t c u (fresh, on the host's working arrays)."""
        x = self.probes.x
        w, k = _mover(u, c)
        return lambda t: _xp.axpy(x, t * k, w)

    def stencils(self, us: Any, cs: Any) -> list[dict[int, np.ndarray]] | None:
        """F's values at the model's offsets (_fd.MODEL_OFFSETS) along every
        c u of ``us``, ``cs``, all from one vectorised evaluation of fn (see
        ``_many``); None where there is none."""
        offsets = [k * self.precision.h / 4 for k in _fd.MODEL_OFFSETS]
        points = [self._along(u, c)(t) for u, c in zip(us, cs) for t in offsets]
        out = self._many(points)
        if out is None:
            return None
        n = len(offsets)
        return [dict(zip(_fd.MODEL_OFFSETS, out[b * n : (b + 1) * n])) for b in range(len(us))]

    def _many(self, points: list[Any]) -> list[np.ndarray] | None:
        """fn at every flat point of ``points`` in the oracle precision, in one
        vectorised call (Evaluator.primals) with the point itself beside them.
        Only for a full Jacobian: a small check (at most FULL_MAX_IN inputs,
        so the batch stays small) whose modes are vectorised too, and whose
        failure is run again with plain calls. None where there is no such
        call, or where its value at the point itself is not bit for bit F(0),
        fn's own there (a vectorised fn that rounds otherwise): then each point
        is evaluated alone. Where they agree, each value is the one F gives."""
        x, ev = self.probes.x, self.ev
        if not (self.vectorise and self.probes.full and ev.batches and _xp.on_host(x)):
            return None
        split = self.probes.flat.split
        out = ev.primals([split(_xp.copy(x))] + [split(p) for p in points], self.precision.oracle)
        if out is None:
            return None
        centre, f0 = out[0], _xp.flat(self.f0)
        with np.errstate(invalid="ignore"):
            same = centre.shape == f0.shape and bool(
                (((centre == f0) & (np.signbit(centre) == np.signbit(f0))) | (np.isnan(centre) & np.isnan(f0))).all()
            )
        if not same:
            ev.batches = False
            return None
        self.batched = True
        return out[1:]

    def fd(
        self,
        u: np.ndarray,
        ad_tol: np.ndarray | float,
        c: float = 1.0,
        *,
        ladder: bool = True,
        h: float | None = None,
        model_first: bool = False,
        ad: np.ndarray | None = None,
        j: int | None = None,
        point: float | None = None,
        have: dict[int, np.ndarray] | None = None,
        quick: Any = _fd.UNKNOWN,
    ) -> _fd.Reference:
        """FD reference for J u, run along c u (steps relative to the input's own
        scale; base step ``h``, default the oracle's) and returned in the units of u.
        ``model_first``: the rounding model's reference where it flags nothing
        (and agrees with ``ad``, the J u it will judge); see _fd.model_reference.
        ``j``: along the basis vector e_j (``u`` unused): a column of the
        Jacobian, whose outputs mostly do not move; only those that do are
        estimated (see _fd.estimate's ``sparse``). ``point``: the magnitude
        at which the point and fn's terms round, in units of c (see
        _fd.model_noise): at most 1 along a direction (|u_j| >= |x_j| / c), the
        default; along e_j see ``terms``. ``quick``: see _fd.reference."""
        p = self.precision
        if point is None:
            point = self.terms(c, column=j is not None)
        ad_tol, ad = _along_c(ad_tol, ad, c)
        ref = _fd.reference(
            self.F(u, c, j=j),
            self.f0,
            p.h if h is None else h,
            p.floor,
            p.u_oracle,
            ad_tol,
            ladder=ladder,
            f0_scale=p.f0_scale,
            inputs=self.probes.inputs_max,
            model_first=model_first,
            ad=ad,
            sparse=j is not None,
            point=point,
            have=have,
            quick=quick,
        )
        return self._in_units(ref, c)

    def terms(self, c: float, column: bool) -> float:
        """The magnitude at which the point and fn's terms round, in units of
        the step scale c: along a column the largest input's, whatever the
        moved element's own (x + b rounds at |x| however small b is); along a
        direction at most 1 (|u_j| >= |x_j| / c)."""
        return max(self.probes.inputs_max, tol.TINY_SCALE) / c if column else 1.0

    def _in_units(self, ref: _fd.Reference, c: float) -> _fd.Reference:
        if c != 1.0:  # (the reference's own arrays: in place where arrays are mutable)
            ref.value /= c
            ref.err /= c
            if ref.shift is not None:
                ref.shift /= c
        if not self.primal.all_finite:
            ref.status = _xp.put(ref.status, ~self.primal.finite, _fd.UNRELIABLE)
            ref.all_smooth = False
        if ref.measure is not None:
            measure = ref.measure
            ref.measure = lambda: self._in_units(measure(), c)
        return ref

    def first_order(self, jvps: tuple[np.ndarray, ...], bound: Callable[[int], np.ndarray]) -> None:
        """The references the first-order comparisons judge: every column of a
        full Jacobian, FD_DIRECTIONS directions otherwise. ``bound(b)``: the
        JVP's rounding bound along b (the kink test allows for it)."""
        probes = self.probes
        us = probes.us if probes.full else probes.us[:FD_DIRECTIONS]
        # a full Jacobian's columns: small, many stencils - fn at all their
        # points at once, and the rounding model's references in one pass
        have = self.stencils(us, probes.cs) if probes.full else None  # (None where not vectorised)
        cs = probes.cs[: len(us)]
        points = [self.terms(c, column=probes.full) for c in cs]
        tols = [bound(b) if jvps else 0.0 for b in range(len(us))]
        quick = [_fd.UNKNOWN] * len(us)
        if have and _xp.size(self.f0) and _xp.size(self.f0) <= _fd.CHUNK:
            scaled = [_along_c(t, jvps[b] if jvps else None, c) for b, (t, c) in enumerate(zip(tols, cs))]
            p = self.precision
            quick = _fd.model_references(
                have,
                self.f0,
                p.h,
                p.u_oracle,
                [t for t, _ in scaled],
                p.f0_scale,
                [a for _, a in scaled] if jvps else None,
                points,
            )
        for b, u in enumerate(us):
            jv = jvps[b] if jvps else None
            ref = self.fd(
                u, tols[b], cs[b], model_first=True, ad=jv, point=points[b], have=have and have[b], quick=quick[b]
            )
            self.refs.append(ref)

    def measured(self, b: int) -> _fd.Reference:
        """Direction b's reference with fn's noise measured (done on demand:
        only a comparison about to fail, or an excuse for one, needs it)."""
        if self.refs[b].modelled:
            self.refs[b] = self.refs[b].measure()
        return self.refs[b]

    def close(self) -> None:
        """Drop what a reference's measure() holds on to (fn, the point)."""
        for ref in self.refs:
            ref.measure = None

    def usable(self, ref: _fd.Reference) -> np.ndarray | bool:
        """The elements a comparison may judge: smooth or a kink, finite output."""
        if ref.all_smooth:
            return True
        return (ref.status <= _fd.KINK) & self.primal.finite

    # -- before FD convicts AD ------------------------------------------------------
    def on_grid(self, b: int, excess: np.ndarray) -> bool:
        """Measure the grid fn's values lie on (see _fd.grid) where direction
        b's estimate disagrees with AD, and raise those elements' bounds to
        what rounding to it can do to the estimate. Where fn cancels inside
        (z - tanh z at small z) the grid is u x its terms, far coarser than
        u |F|, and rounding to it can be linear across the whole stencil -
        invisible to a difference table, yet a slope error of up to its
        spacing over the step. An element whose bound then reaches its
        derivatives is unreliable (see _fd.mark_unresolved). Done once per
        direction; returns whether any bound was raised."""
        if b in self.gridded:
            return False
        self.gridded.add(b)
        ref = self.measured(b)
        with _xp.quiet():
            idx = _xp.nonzero((excess > 0) & (ref.status <= _fd.KINK))
        if not idx.size:
            return False
        p, c = self.precision, self.probes.cs[b]
        F = self.F(self.probes.us[b], c)
        values = [_xp.take(_xp.flat(v), idx) for v in _fd.values_at(F, [k * p.h / 4 for k in _fd.OFFSETS])]
        q = _fd.grid(values, _xp.take(_xp.flat(self.f0), idx))
        reach = _fd.grid_bound(q, p.h) / c
        err = _xp.take(ref.err, idx)
        raised = reach > err
        if not raised.any():
            return False
        at = idx[raised]
        shape, xp = tuple(ref.value.shape), _xp.ns(ref.value)
        ref.err = xp.reshape(_xp.put(_xp.copy(_xp.flat(ref.err)), at, reach[raised]), shape)
        reasons = dict(ref.reasons or {})
        ref.status = _fd.mark_unresolved(ref.value, ref.err, ref.status, ref.typical / c, reasons)
        ref.reasons = reasons
        ref.all_smooth = False
        return True

    def step_dependent(self, b: int, excess: np.ndarray) -> bool:
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
        if b in self.refined:
            return False
        self.refined.add(b)
        ref = self.measured(b)
        p, probes = self.precision, self.probes
        with _xp.quiet():
            idx = _xp.nonzero((excess > 0) & (ref.status <= _fd.KINK))
        c = probes.cs[b]
        terms = self.terms(c, column=probes.full)
        own = max(abs(float(probes.x[b])), tol.TINY_SCALE) / c if probes.full else 1.0
        F = self.F(probes.us[b], c)
        moved: dict[int, tuple[float, float, float]] = {}  # element -> fine value, err, shrink
        replaced: dict[int, tuple[float, float]] = {}
        shrink = tol.REFINE
        grid: dict[int, float] = {}  # element -> the coarsest grid its values showed (see _fd.grid)
        while idx.size and p.h / shrink >= tol.LADDER_ROUNDING_FLOOR * p.u_oracle * own:
            at = idx
            seen: list[np.ndarray] = []

            def level(t: float, at: np.ndarray = at, seen: list = seen) -> np.ndarray:
                v = _xp.take(_xp.flat(F(t)), at)
                seen.append(v)
                return v

            f0_at = _xp.take(self.f0, at)
            fine = _fd.reference(
                level,
                f0_at,
                p.h / shrink,
                p.floor,
                p.u_oracle,
                0.0,
                ladder=False,
                f0_scale=p.f0_scale,
                inputs=probes.inputs_max,
                point=terms,
            )
            # fn's grid does not shrink with the step: a level where a quantised
            # fn looks flat still carries the rounding to the grid a coarser
            # one showed (a slope error of up to its spacing over the step)
            q = _fd.grid(seen, f0_at)
            q = np.maximum(q, np.array([grid.get(int(i), 0.0) for i in at.tolist()]))
            grid.update(zip(at.tolist(), q.tolist()))
            reach = _fd.grid_bound(q, p.h / shrink)
            value, err = fine.value / c, np.maximum(fine.err, reach) / c
            with np.errstate(invalid="ignore"):
                gridded = ~(reach <= 0.5 * (np.abs(fine.value) + fine.typical))
            smooth = (fine.status == _fd.SMOOTH) & ~gridded
            if shrink == tol.REFINE:
                with np.errstate(invalid="ignore"):
                    far = np.abs(value - _xp.take(ref.value, at)) > err + _xp.take(ref.err, at)
                for k in np.flatnonzero(smooth & far).tolist():
                    moved[int(at[k])] = (float(value[k]), float(err[k]), shrink)
            else:  # (every element here was flagged one level up)
                for k in np.flatnonzero(smooth).tolist():
                    replaced[int(at[k])] = (float(value[k]), float(err[k]))
            idx = at[~smooth & ~gridded & ~_noise_bound(fine, p.h / shrink)]
            shrink *= tol.REFINE
        if replaced:
            at = np.array(sorted(replaced))
            shape, xp = tuple(ref.value.shape), _xp.ns(ref.value)
            for name, k in (("value", 0), ("err", 1)):
                part = np.array([replaced[i][k] for i in at.tolist()])
                setattr(ref, name, xp.reshape(_xp.put(_xp.copy(_xp.flat(getattr(ref, name))), at, part), shape))
            # (a smooth estimate now, whatever the first level's flag said)
            ref.status = xp.reshape(_xp.put(_xp.copy(_xp.flat(ref.status)), at, _fd.SMOOTH), shape)
        if moved:
            before_value, before_err = ref.value, ref.err
            mask = _xp.put(_xp.zeros(_xp.size(ref.value), ref.value, "bool"), np.array(sorted(moved)), True)
            ref.give_up(
                _xp.ns(ref.value).reshape(mask, tuple(ref.value.shape)),
                lambda i: (
                    f"the estimate moved from {float(before_value[i]):.6g} +- {float(before_err[i]):.2g} to "
                    f"{moved[i][0]:.6g} +- {moved[i][1]:.2g} "
                    f"with a {moved[i][2]:g}x smaller step: a feature of fn narrower than the step"
                ),
            )
        return bool(moved or replaced)

    def explained_by_wide_noise(self, b: int, excess: np.ndarray | float, weights: np.ndarray | None = None) -> bool:
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
        ref = self.measured(b)
        eligible = ref.status == _fd.SMOOTH
        if ref.flagged is not None:
            eligible = eligible & ~ref.flagged
        if not _xp.any_(eligible):
            return False
        p = self.precision
        c = self.probes.cs[b]
        F = self.F(self.probes.us[b], c)
        inputs = self.probes.inputs_max
        xp = _xp.ns(self.f0)
        peak = xp.abs(self.f0)
        level = self.widened.get(b, 0)
        why = "noise"
        span = 0.0
        while True:
            table = _fd.wide_table(F, self.f0, p.h, level)
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
                quantum = tol.ROUNDING_TERMS * p.u_oracle * xp.maximum(peak, inputs)
                quantum = quantum + tol.SMALLEST_NORMAL.get(p.name, 2.0**-126)
                tilt = xp.where(eligible, tol.NOISE_SAFETY * quantum / (span * c), 0.0)
                explained = within(tilt, excess, weights, ref.err)
                if not _xp.any_(explained):
                    return False
                break
            span = 8 * table.d
            level += 1
            self.widened[b] = level
            with _xp.quiet():
                fs = tuple(table.f[k] for k in sorted(table.f))
                peak, tilt = _fd.blockwise(
                    _wide_tilt, peak, fs, table.sigma, peak, eligible, (inputs, p.u_oracle, p.h * c)
                )
                # (the points have served: let them go before the next table's are made)
                del fs
                table.f.clear()
            explained = within(tilt, excess, weights, ref.err)
            if _xp.any_(explained):
                break
        ref.give_up(
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

    # -- what FD could not decide ---------------------------------------------------------
    def report_inconclusive(self, report: Findings) -> None:
        """One inconclusive finding per kind of non-smooth point found."""
        probes, primal = self.probes, self.primal
        if all(r.all_smooth for r in self.refs):
            return
        for status, kind, what in (
            (_fd.KINK, Kind.NONDIFFERENTIABLE, "non-differentiable point (a kink)"),
            (_fd.JUMP, Kind.DISCONTINUITY, "discontinuity (a jump)"),
            (_fd.UNRELIABLE, Kind.FD_UNRELIABLE, "finite differences cannot decide"),
        ):
            masks = [(r.status == status) & primal.finite for r in self.refs]
            counts = [_xp.count(m) for m in masks]
            if not any(counts):
                continue
            b = next(k for k, c in enumerate(counts) if c)
            i = int(_xp.nonzero(masks[b], limit=1)[0])
            r = self.refs[b]
            where, arg, idx = probes.where(b, i, primal.shape)
            values = {}
            if status == _fd.KINK:  # the hull of the two one-sided derivatives (which side is which is not kept)
                values = {
                    "lower": float(probes.unscale(b, float(r.lo[i]))),
                    "upper": float(probes.unscale(b, float(r.hi[i]))),
                }
            if probes.full:  # (b, i) pairs: Jacobian elements
                count = sum(counts)
            else:  # output elements, whichever direction saw them
                union = masks[0]
                for m in masks[1:]:
                    union = union | m
                count = _xp.count(union)
            reason = None
            if status == _fd.UNRELIABLE:
                reason = (r.reasons or {}).get(int(i)) or (
                    "the estimates did not settle as the step shrank: a feature of fn smaller than the step "
                    "(an eps, a period, a jump that is no jump), or noise as large as the slope"
                )
            report.add(
                kind,
                INFO if status == _fd.KINK else WARNING,
                f"{what} at {count} element(s), e.g. {where}: inconclusive there; "
                + (
                    "AD values are accepted between the one-sided derivatives"
                    if status == _fd.KINK
                    else "those elements are not compared"
                ),
                argument=arg,
                input_index=idx,
                output_index=unravel(int(i), primal.shape),
                values=values,
                where=probes.direction_name(b),
                detail=reason,
            )
        compared = 0
        for r in self.refs:
            compared += _xp.count((r.status != _fd.JUMP) & (r.status != _fd.UNRELIABLE) & primal.finite)
        if compared == 0:
            report.add(
                Kind.NOTHING_COMPARED,
                WARNING,
                "nothing compared: at every element fn jumps or finite differences cannot decide; "
                "no derivative was checked (check fn at another point)",
            )


def _noise_bound(ref: _fd.Reference, h: float) -> np.ndarray:
    """Elements of a host reference at step h whose rounding alone (the model's,
    which a finer step only raises) makes the bound as large as the
    derivatives (see _fd.mark_unresolved). The measured noise does not count
    here: a feature narrower than the step shows in a difference table as
    noise too."""
    part = (tol.NOISE_SAFETY * _fd.R2_WEIGHT / h) * ref.eps_f
    with np.errstate(invalid="ignore"):
        return ~(part <= 0.5 * (np.abs(ref.value) + ref.typical))


def _split_point(x: Any, w: Any, t: float, layout: tuple) -> tuple[Any, ...]:
    """x + t w cut into the arguments (offsets, sizes, shapes)."""
    p = x + t * w
    return tuple(p[o : o + s].reshape(sh) for o, s, sh in zip(*layout))


def _wide_tilt(fs: tuple[Any, ...], sigma: Any, peak: Any, eligible: Any, scalars: tuple[float, ...]) -> tuple:
    """The largest |F| seen so far (``peak``) with a wide table's values ``fs``,
    and the slope tilt its noise ``sigma`` can cause where that noise is a
    plausible rounding artifact of fn's terms (0 elsewhere)."""
    inputs, u_oracle, hc = scalars
    xp = _xp.ns(*fs)
    values = xp.abs(fs[0])
    for v in fs[1:]:
        values = xp.maximum(values, xp.abs(v))
    values = xp.where(_xp.finite(values), values, 0.0)
    terms = xp.maximum(values, inputs)
    plausible = sigma <= tol.ROUNDING_TERMS * u_oracle * terms
    # a noise of sigma anywhere beyond the stencil tilts its slope by up to ~sigma / h
    tilt = xp.where(eligible & plausible, tol.NOISE_SAFETY * 6.0 * sigma / hc, 0.0)
    return xp.maximum(peak, values), tilt


def within(tilt: Any, excess: Any, weights: Any, err: Any) -> Any:
    """The elements whose disagreement a slope error of ``tilt`` explains:
    per element, or (``weights``) all that add to one projection's."""
    if weights is None:
        return (excess > 0) & (excess <= tilt)
    xp = _xp.ns(tilt)
    noisy = tilt > err
    reach = tol.hoeffding(weights, xp.where(noisy, tilt, 0.0)) if _xp.any_(noisy) else 0.0
    return noisy if reach >= excess else noisy & False


def _along_c(ad_tol: Any, ad: Any, c: float) -> tuple[Any, Any]:
    """The AD tolerance and values in the units of a step along c u."""
    if c == 1.0:
        return ad_tol, ad
    return ad_tol * c, None if ad is None else ad * c


def _mover(u: Any, c: float) -> tuple[Any, float]:
    """(w, k) with t c u = (t k) w: t (c u) is (t c) u exactly when c is a
    power of two, as a directional check's normalisation is, and then no
    scaled copy of u is kept."""
    return (u, c) if math.frexp(c)[0] == 0.5 else (u * c, 1.0)
