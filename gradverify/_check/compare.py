"""The comparisons: forward mode against FD element by element, reverse mode
against FD through projections (or row by row for a full Jacobian), forward
against reverse mode through the adjoint identity, and low-precision AD
against its own float64 run (lowprecision).

A comparison about to fail puts its worst disagreement to its excuses in
order (see excuses); while one changes the oracle's reference the comparison
runs again. What survives is localised and reported (texts in messages)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import fd, suite, tolerance as tol, xp as _xp
from .excuses import Disagreement, Excuse
from .findings import unravel
from .judge import Judge
from .locate import Localiser
from .lowprecision import LowPrecision
from .messages import adjoint_mismatch, fd_mismatch, inconclusive
from .modes import Modes
from .oracle import Oracle
from .probes import Probes
from .worst import ElementWorst, JacobianWorst, ProjectionWorst

__all__ = ["MEASURED_ROUNDING", "Comparisons"]

# A JVP-vs-VJP difference within this many times the measured rounding of the
# rules (their change under a rescaled direction) is rounding, not a bug.
MEASURED_ROUNDING = 16.0


class Comparisons(Judge):
    """Every first-order comparison of one check, run by ``run``."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: (cotangent, id of a reference) -> (that reference, what _restricted made of it)
        self._decided: dict[tuple[int, int], tuple[fd.Reference, Any]] = {}

    def run(self) -> None:
        modes = self.modes
        self.gather()
        jvp_ok = self.jvp_fd() if modes.jvps else False
        vjp_ok = self.vjp_fd(jvp_ok) if modes.vjps else True
        if adjoint := bool(modes.jvps and modes.vjps and jvp_ok and vjp_ok):
            # the sharper test (its bound is AD rounding alone); after a failure against FD, a repeat
            self.adjoint()
        low = LowPrecision(self.ctx, self.ad, modes, self.bounds)
        if modes.low_jvps and jvp_ok:
            low.compare("JVP")
        if modes.low_vjps and vjp_ok:
            low.compare("VJP")
        # last: the excuses and measurements may have made elements unreliable
        inconclusive(self.oracle, self.ctx.report, adjoint)
        suite.said(self.ctx.report, self.ctx.options.suite, self.covered)

    # -- JVP against FD ---------------------------------------------------------------------
    def jvp_fd(self) -> bool:
        def excuses(w: ElementWorst) -> tuple[Disagreement, Sequence[Excuse]]:
            b = w.direction
            excess = lambda: self._violation(self.modes.jvps[b], self.oracle.refs[b], self.bounds.jvp(b), b)  # noqa: E731
            last = () if self.probes.full else (_Witness(self.locate, w.element),)
            return Disagreement(b, excess), (*self.column_excuses, self.wide_noise, *last)

        worst = self._until_unexcused(self._worst_jvp, excuses)
        if worst is None:
            return True
        b, i, t_i = worst.direction, worst.element, worst.ad_bound
        ref, jv, probes = self.oracle.refs[b], self.modes.jvps[b], self.probes
        out_idx = unravel(i, self.primal.shape)
        if probes.full:
            arg, idx = probes.flat.locate(b)
            s = float(probes.scale[b])
            ad, fdv, bound = float(jv[i]) / s, float(ref.value[i]) / s, (t_i + float(ref.err[i])) / s
            where = probes.direction_name(b)
        else:
            found = self.locate.jvp(b, i)
            arg, idx = probes.flat.locate(found.element)
            ad, fdv, bound = found.values["JVP"], found.values["FD"], found.bound
            where = f"located by bisection from {probes.direction_name(b)}"
        kink = int(ref.status[i]) == fd.KINK
        self.ctx.report.keep(
            fd_mismatch(
                "JVP",
                out_idx,
                arg,
                idx,
                ad,
                fdv,
                bound,
                kink=kink,
                count=f"{worst.count} element(s)",
                where=where,
                bound_reason=self.suite_reason(self._bound_reason(kink), fdv),
            )
        )
        return False

    def _worst_jvp(self) -> ElementWorst | None:
        """The output element of J u_b furthest over its bound, over every direction."""
        worst = None
        count = 0
        for b, (jv, ref) in enumerate(zip(self.modes.jvps, self.oracle.refs)):
            known, top = self.tops.pop(b, (None, math.nan))
            if known is ref and top <= 0.5:
                self.tops[b] = (ref, top)
                self.closeness.note(top)
                continue  # (every element well within its bound, as gather read)
            t = self.bounds.jvp(b)
            xp = _xp.ns(jv)
            ratio, scale = self.jvp_ratio(b, ref, t)
            usable = True if ref.all_smooth else self.oracle.usable(ref)
            if usable is True:
                top = _xp.absmax(ratio)
                self.closeness.note(top if math.isfinite(top) else _xp.fmax(ratio))
                if top <= 0.5:
                    continue  # every element well within its bound: nothing over it
            elif _xp.any_(usable):
                self.closeness.note(_xp.fmax(ratio, where=usable))
            viol = self._violation(jv, ref, t, b)
            over = viol > 0
            bad = _xp.count(over)
            count += bad
            if bad:
                i = _xp.argmax(xp.where(over, viol / scale, -xp.inf))
                t_i = float(t[i])
                ratio = abs(float(jv[i]) - float(ref.value[i])) / (t_i + float(ref.err[i]) + 1e-300)
                if worst is None or ratio > worst.ratio:
                    worst = ElementWorst(ratio, b, i, t_i, 0)
        return None if worst is None else dataclasses.replace(worst, count=count)

    # -- VJP against FD ---------------------------------------------------------------------
    def _ref_for_projection(self, b: int) -> tuple[np.ndarray, np.ndarray] | None:
        """FD reference for J u_b as (value, half-width), with unusable elements
        replaced by the JVP's values when there is one. None where FD decided
        no element along u_b: the projection would be the JVP's alone - the
        adjoint identity, which ``adjoint`` judges with the rules' rounding
        measured - not a comparison with FD."""
        ref = self.oracle.refs[b]
        if ref.all_smooth:
            return ref.value, ref.err
        finite, value, err, xp = self.primal.finite, ref.value, ref.err, _xp.ns(ref.value)
        usable = self.oracle.usable(ref)
        if not _xp.any_(usable):
            return None
        missing = ~usable & finite
        if _xp.any_(missing):
            if not self.modes.jvps:
                return None
            value = xp.where(missing, self.modes.jvps[b], value)
            err = xp.where(missing, self.bounds.jvp(b), err)
        return xp.where(finite, value, 0.0), xp.where(finite, err, 0.0)

    def vjp_fd(self, jvp_ok: bool) -> bool:
        if self.probes.full:
            return self._vjp_full()
        vs = self.probes.vs

        def excuses(w: ProjectionWorst) -> tuple[Disagreement, Sequence[Excuse]]:
            case = Disagreement(w.direction, lambda: abs(w.lhs - w.rhs) - w.bound, vs[w.cotangent])
            if w.found is not None:
                return case, ()
            # (When the JVP agreed with FD along this direction element by element,
            # FD's projection is the JVP's within its bound: noise is no excuse.)
            return case, (self.all_unmeasured,) if jvp_ok else (self.all_unmeasured, self.wide_noise)

        worst = self._until_unexcused(lambda: self._worst_vjp_projection(jvp_ok), excuses)
        if worst is None:
            return True
        self._report_vjp(worst, ("VJP", "FD"), use_jvp=jvp_ok or worst.found is not None)
        return False

    def _worst_vjp_projection(self, jvp_ok: bool) -> ProjectionWorst | None:
        """The projection furthest from FD's; where a reference is still the
        rounding model's, with the VJP's element that FD along e_j convicts on
        its own (then the measurement along u_b could only say the same)."""
        refs = [self._ref_for_projection(b) for b in range(len(self.oracle.refs))]
        vs = self.probes.vs
        usable = [b for b, r in enumerate(refs) if r is not None]
        projected, fd_terms = self.sums_of("fd", vs, {b: refs[b][0] for b in usable}, lambda a, b: (vs[a], refs[b][1]))
        # Against the model's reference a projection must pass with room for
        # the measured one's centre, which may sit anywhere within |R1 - R2|
        # of it: then it passes against the measured one too.
        for a, b in fd_terms:
            ref = self.oracle.refs[b]
            fd_terms[a, b] -= ref.shift_terms[a] if ref.modelled and ref.shift_terms else 0.0

        def rhs(a: int, b: int) -> tuple[float, float] | None:
            return (projected[a, b], fd_terms[a, b]) if (a, b) in projected and (a, b) not in adjoint_only else None

        adjoint_only: set[tuple[int, int]] = set()
        worst = self._worst_projection(rhs)
        while worst is not None and not self._decided_disagree(worst.cotangent, worst.direction):
            # (what disagrees is the JVP put in FD's place: the adjoint identity's to judge, FD's not)
            adjoint_only.add((worst.cotangent, worst.direction))
            worst = self._worst_projection(rhs)
        if worst is not None and jvp_ok and any(r.modelled for r in self.oracle.refs):
            found = self.locate.confirmed_vjp(worst.cotangent, worst.direction)
            if found is not None:
                return dataclasses.replace(worst, found=found)
        return worst

    def _decided_disagree(self, a: int, b: int) -> bool:
        """Whether the VJP disagrees with FD on the output elements FD decided
        along u_b: the projection of J^T v_a with v_a zero elsewhere against
        FD's there, with their bound. Where FD left elements undecided, the
        projection put the JVP in their place, and a failure there is the two
        modes' disagreement, not one FD saw: it is left to ``adjoint``, which
        judges the modes against each other where the JVP agreed with FD. (A
        reference still the rounding model's is measured first, by the
        excuses.)"""
        ref = self.oracle.refs[b]
        restricted = None if ref.modelled else self._restricted(a, ref)
        if restricted is None:
            return True
        v_d, g, decided = restricted
        if g is None:
            return False
        xp, u = _xp.ns(v_d), self.probes.us[b]
        value, err = xp.where(decided, ref.value, 0.0), xp.where(decided, ref.err, 0.0)
        (lhs, rhs), terms, _ = tol.sums(
            [(g, u), (v_d, value)], [lambda: (u, self.bounds.of_vjp(g)), lambda: (v_d, err)]
        )
        return abs(lhs - rhs) > sum(terms)

    def _restricted(self, a: int, ref: fd.Reference) -> tuple[Any, Any, Any] | None:
        """Cotangent v_a zero on the output elements ``ref`` leaves undecided,
        J^T of it (one VJP more, once per pair) and the decided elements'
        mask; None where FD decided every element v_a weighs, or the VJP
        failed; its VJP None where FD decided nothing v_a weighs."""
        key = (a, id(ref))
        if key not in self._decided or self._decided[key][0] is not ref:
            v, decided = self.probes.vs[a], self.oracle.usable(ref)
            xp = _xp.ns(v)
            out = None
            if not ref.all_smooth and _xp.any_((v != 0) & ~decided):
                v_d = xp.where(decided, v, 0.0)
                if not _xp.any_(v_d != 0):
                    out = (v_d, None, decided)  # (FD decided nothing v_a weighs: no VJP to take)
                elif (g := self.ad.vjp(v_d)) is not None:
                    out = (v_d, g, decided)
            self._decided[key] = (ref, out)
        return self._decided[key][1]

    def _vjp_full(self) -> bool:
        """Full Jacobian: row i from VJP(e_i) against column j from FD(e_j)."""

        def excuses(w: JacobianWorst) -> tuple[Disagreement, Sequence[Excuse]]:
            def excess() -> np.ndarray:
                e = np.full(_xp.size(self.primal.values), -np.inf)
                e[w.row] = abs(w.ad - w.fd) - w.bound
                return _xp.like(e, self.oracle.refs[w.column].value)

            passes = self.column_excuses
            return Disagreement(w.column, excess), passes if w.kink else (*passes, self.wide_noise)

        worst = self._until_unexcused(self._worst_jacobian_element, excuses)
        if worst is None:
            return True
        i, j = worst.row, worst.column
        arg, idx = self.probes.flat.locate(j)
        out_idx = unravel(i, self.primal.shape)
        kink = bool(worst.kink)
        self.ctx.report.keep(
            fd_mismatch(
                "VJP",
                out_idx,
                arg,
                idx,
                worst.ad,
                worst.fd,
                worst.bound,
                kink=kink,
                count=f"{worst.count} Jacobian element(s)",
                where=f"full Jacobian, row {out_idx}",
                bound_reason=self.suite_reason(self._bound_reason(kink), worst.fd),
            )
        )
        return False

    def _worst_jacobian_element(self) -> JacobianWorst | None:
        # (a full Jacobian is small: its elements are compared on the host, all
        # at once; each value is the elementwise one, and the worst is the
        # first of the largest ratios in column-major order, as a loop over
        # columns then rows finds it: tests/check/test_jacobian_comparison.py)
        m, n = _xp.size(self.primal.values), self.probes.flat.n
        J = np.stack([_xp.host(g) for g in self.modes.vjps]) if self.modes.vjps else np.zeros((0, n))  # (m, n)
        refs = self.oracle.refs
        if not refs or m == 0:
            return None
        T = self.bounds.of_vjp_rows(J).T[: len(refs)]  # (columns, m)
        s = _xp.host(self.probes.scale)[: len(refs), None]
        value = _rows([r.value for r in refs], m)
        err = _rows([r.err for r in refs], m)
        usable = _rows([self.oracle.usable(r) for r in refs], m, bool)
        ad = J.T[: len(refs)]
        with np.errstate(all="ignore"):
            over = np.maximum((value - err) / s - ad, ad - (value + err) / s) - T
            ratio = np.abs(ad - value / s) / (T + err / s + 1e-300)
            over = self.beyond_suite(np.where(usable, over, -np.inf), ad, value / s, ("VJP", -1))
        seen = ratio[usable]
        seen = seen[np.isfinite(seen)]
        if seen.size:
            self.closeness.note(float(seen.max()))
        flagged = usable & (over > 0)
        count = int(flagged.sum())
        if not count:
            return None
        cols, rows = np.nonzero(flagged)  # (column-major: columns, then rows)
        r = ratio[cols, rows]  # (never NaN: an element over its bound has finite terms)
        k = int(np.argmax(r))
        j, i = int(cols[k]), int(rows[k])
        status = np.broadcast_to(_xp.host(refs[j].status), (m,))
        return JacobianWorst(
            r[k], i, j, J[i, j], value[j, i] / s[j, 0], T[j, i] + err[j, i] / s[j, 0], bool(status[i] == fd.KINK), count
        )

    # -- JVP against VJP (the adjoint identity) --------------------------------------------
    def adjoint(self) -> None:
        """<v, J u> from JVP against <J^T v, u> from VJP: no FD, rounding only."""
        if self.probes.full:
            self._adjoint_full()
            return
        jvps, vs = self.modes.jvps, self.probes.vs
        bound = self.bounds.jvp
        # (v is 0 on non-finite outputs: they weigh nothing)
        projected, jv_terms = self.sums_of("adjoint", vs, dict(enumerate(jvps)), lambda a, b: (vs[a], bound(b)))
        worst = self._worst_projection(lambda a, b: (projected[a, b], jv_terms[a, b]))
        if worst is None:
            return
        a, b = worst.cotangent, worst.direction
        g3, jv3 = self.ad.rescaled(vs[a], self.probes.us[b])
        if g3 is not None and jv3 is not None:
            measured = abs(_xp.dot(g3, self.probes.us[b]) - worst.lhs) + abs(_xp.dot(vs[a], jv3) - worst.rhs)
            if abs(worst.lhs - worst.rhs) <= worst.bound + MEASURED_ROUNDING * measured:
                return
        terms, size = _rounding_of_terms(self.modes, self.probes, a, b)
        scale = max(size, abs(worst.lhs), abs(worst.rhs))
        within = abs(worst.lhs - worst.rhs) <= worst.bound + terms * scale
        undecided = not within and self._in_undecided(a, b)
        self._report_vjp(
            worst, ("JVP", "VJP"), use_jvp=True, terms=terms if within else None, terms_scale=scale, undecided=undecided
        )

    def _in_undecided(self, a: int, b: int) -> bool:
        """Whether the adjoint identity's disagreement for cotangent a and
        direction b lies in output elements FD could not decide: FD decided
        none that v_a weighs, or the identity restricted to those it decided
        holds within AD rounding. There fn's rounding hides its slope, and
        the rules' rounding is as large: a rule that computes a slope its
        terms cancel (1 - tanh^2 in a tail) rounds to u times those terms,
        not to u times the slope, and forward and reverse mode round it
        differently - rounding that a rescaled direction does not move. As
        for a full Jacobian's element FD cannot resolve, it is said as a
        warning, not failed. A direction FD did not measure (the adjoint
        identity's alone: see oracle.FD_DIRECTIONS) takes the elements FD
        decided along the first: whether FD can resolve an output element's
        slope is fn's rounding there against that slope."""
        refs = self.oracle.refs
        if not refs:
            return False
        ref = self.oracle.measured(b if b < len(refs) else 0)
        restricted = self._restricted(a, ref)
        if restricted is None:
            return False
        v_d, g, _ = restricted
        if g is None:
            return True
        u, jv, bound = self.probes.us[b], self.modes.jvps[b], self.bounds.jvp(b)
        (lhs, rhs), terms, _ = tol.sums([(g, u), (v_d, jv)], [lambda: (u, self.bounds.of_vjp(g)), lambda: (v_d, bound)])
        return abs(lhs - rhs) <= sum(terms)

    def _adjoint_full(self) -> None:
        modes, probes, bounds = self.modes, self.probes, self.bounds
        scales = _xp.host(probes.scale)
        J_r = np.stack([_xp.host(g) for g in modes.vjps])  # (m, n)
        J_f = np.stack([_xp.host(jv) / s for jv, s in zip(modes.jvps, scales)], axis=1)  # (m, n)
        t = tol.ad_bound(J_f, modes.ad_out, bounds.rtol, bounds.atol, modes.jmax_jvp) + tol.ad_bound(
            J_r, modes.ad_out, bounds.rtol, bounds.atol, modes.jmax_vjp
        )
        over = (diff := _compared(np.abs(J_r - J_f), self.oracle.refs)) - t
        if over.size:
            self.closeness.note(float(np.max(diff / (t + 1e-300))))
        if (over <= 0).all():
            return
        i, j = (int(k) for k in np.unravel_index(int(np.argmax(over / (t + 1e-300))), over.shape))
        g3, jv3 = self.ad.rescaled(probes.vs[i], probes.us[j])
        if g3 is not None and jv3 is not None:
            measured = abs(float(g3[j]) - J_r[i, j]) + abs(float(jv3[i]) / scales[j] - J_f[i, j])
            if abs(J_r[i, j] - J_f[i, j]) <= t[i, j] + MEASURED_ROUNDING * measured:
                return
        arg, idx = probes.flat.locate(j)
        out_idx = unravel(i, self.primal.shape)
        # Both modes already agreed with FD; a disagreement FD cannot resolve
        # is rounding of a rule that cancels large terms (a normalization of a
        # slice with variance near eps) or a bug below FD's resolution: said,
        # as a warning, not failed.
        ref = self.oracle.measured(j)
        fd_err = float(ref.err[i]) / float(scales[j])
        undecided = int(ref.status[i]) in (fd.UNRELIABLE, fd.JUMP)
        self.ctx.report.keep(
            adjoint_mismatch(
                out_idx,
                arg,
                idx,
                J_f[i, j],
                J_r[i, j],
                t[i, j],
                count=int((over > 0).sum()),
                fd_err=fd_err,
                unresolved=undecided or abs(J_r[i, j] - J_f[i, j]) <= fd_err,
                ad_out=modes.ad_out,
            )
        )


class _Witness(Excuse):
    """A random direction's JVP mismatch at output ``i`` is reported at the
    input element localisation finds, with FD along e_j as its witness.
    Where that witness cannot decide (see Localiser._witness_undecided),
    neither could the direction's FD, which moves the same element: the
    output element is unreliable along that direction, with the witness's
    reason. Returns whether it was."""

    def __init__(self, locate: Localiser, i: int) -> None:
        self.locate, self.i = locate, i

    def __call__(self, oracle: Oracle, case: Disagreement) -> bool:
        found = self.locate.jvp(case.b, self.i)
        if found.undecided is None:
            return False
        ref = oracle.refs[case.b]
        arg, idx = oracle.probes.flat.locate(found.element)
        why = f"at argument {arg} {idx}, {found.undecided}"
        oracle.refs[case.b] = ref.gave_up_at(np.array([self.i]), lambda _: why)
        return True


def _rounding_of_terms(modes: Modes, probes: Probes, a: int, b: int) -> tuple[float, float]:
    """The relative rounding of terms as large as the inputs, and the scale it
    is relative to, for the adjoint identity of cotangent a and direction b.

    A rule that subtracts its inputs before exponentiating (softmax weights
    exp(x - lse)) rounds them to u |x|: at inputs of 1e6 its derivative
    carries 1e-10 of relative rounding, and forward and reverse mode round it
    differently. Within ROUNDING_TERMS x u x the largest input (at most
    sqrt(u): rounding that cost half the digits is no longer rounding) of the
    projection's size the disagreement is a precision warning; beyond it, an
    error. Its size: the larger of the projections and of the 2-norm of their
    terms, sqrt(sum (v_i (J u)_i)^2) - what |<v, J u>| is on average over the
    random signs, so that a projection whose terms happened to cancel to a
    small value is not held to the rounding of that value."""
    u = tol.unit_roundoff(modes.ad_out)
    terms = min(tol.ROUNDING_TERMS * u * probes.inputs_max, u**0.5)
    v, g = probes.vs[a], modes.vjps[a]
    # (sqrt(sum (v_i (J u)_i)^2) is a Hoeffding term without its multiplier)
    norms = tol.hoeffdings([lambda: (v, modes.jvps[b]), lambda: (g, probes.us[b])])
    size = max(norms) / tol.HOEFFDING_K
    return terms, size if math.isfinite(size) else 0.0  # (a size beyond floats widens nothing)


def _compared(diff: np.ndarray, refs: Sequence[fd.Reference]) -> np.ndarray:
    """A full Jacobian's ``diff`` (m, n) with 0 at the elements set aside
    (AD's NaN/inf where fn is not differentiable: see singular)."""
    if not refs:
        return diff
    aside = (_rows([r.status for r in refs], diff.shape[0], np.int8) == fd.ASIDE).T
    return np.where(aside, 0.0, diff)


def _rows(items: Sequence[Any], m: int, dtype: Any = np.float64) -> np.ndarray:
    """The columns' values (each a number or m of them) as the rows of one
    host array: each row its item, broadcast."""
    out = np.empty((len(items), m), dtype)
    for k, a in enumerate(items):
        out[k] = _xp.host(a)
    return out
