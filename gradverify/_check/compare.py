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

import numpy as np

from . import fd, suite, xp as _xp
from .adjoint import MEASURED_ROUNDING, AdjointIdentity
from .bounds import host_rows
from .excuses import Disagreement, Excuse
from .findings import unravel
from .locate import Localiser
from .lowprecision import LowPrecision
from .messages import fd_mismatch, inconclusive
from .oracle import Oracle
from .worst import ElementWorst, JacobianWorst, ProjectionWorst

__all__ = ["MEASURED_ROUNDING", "Comparisons"]


class Comparisons(AdjointIdentity):
    """Every first-order comparison of one check, run by ``run``."""

    def run(self) -> None:
        modes = self.modes
        self.gather()
        jvp_ok = self.jvp_fd() if modes.jvps else False
        vjp_ok = self.vjp_fd(jvp_ok) if modes.vjps else True
        if adjoint := bool(modes.jvps and modes.vjps and jvp_ok and vjp_ok):
            # the sharper test (its bound is AD rounding alone); after a failure against FD, a repeat
            self.adjoint()
        lows = (modes.low_jvps and jvp_ok) or (modes.low_vjps and vjp_ok)
        low = LowPrecision(self.ctx, self.ad, modes, self.bounds, bool(lows) and self.oracle.decided())
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
        while worst is not None and not self.undecided.vjp_disagrees(worst.cotangent, worst.direction):
            # (what disagrees is the JVP put in FD's place: the adjoint identity's to judge, FD's not)
            adjoint_only.add((worst.cotangent, worst.direction))
            worst = self._worst_projection(rhs)
        if not self.modes.jvps and (skipped := [b for b, r in enumerate(refs) if r is None]):
            restricted = self.undecided.worst(skipped, self.ad.apart, self.closeness)
            if restricted is not None and (worst is None or restricted.ratio > worst.ratio):
                worst, pair = restricted, (restricted.cotangent, restricted.direction)
                self.locate.cotangents[pair] = self.undecided.cotangent(*pair)
        if worst is not None and jvp_ok and any(r.modelled for r in self.oracle.refs):
            found = self.locate.confirmed_vjp(worst.cotangent, worst.direction)
            if found is not None:
                return dataclasses.replace(worst, found=found)
        return worst

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
        value = host_rows([r.value for r in refs], m)
        err = host_rows([r.err for r in refs], m)
        usable = host_rows([self.oracle.usable(r) for r in refs], m, bool)
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
