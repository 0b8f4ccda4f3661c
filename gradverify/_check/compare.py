"""The comparisons: forward mode against FD element by element, reverse mode
against FD through projections (or row by row for a full Jacobian), forward
against reverse mode through the adjoint identity, and low-precision AD
against its own float64 run. A comparison about to fail first asks the
oracle for its measured noise and its two re-examinations; what survives is
localised and reported as a finding."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._result import ERROR, WARNING, Kind
from . import fd
from . import tolerance as tol
from . import xp as _xp
from .findings import Closeness, Findings, unravel
from .locate import Localiser, Located
from .modes import AD, Modes
from .oracle import Oracle

__all__ = ["MEASURED_ROUNDING", "Bounds", "Comparisons"]

# A JVP-vs-VJP difference within this many times the measured rounding of the
# rules (their change under a rescaled direction) is rounding, not a bug.
MEASURED_ROUNDING = 16.0


class Bounds:
    """The AD values' rounding bounds (or the caller's rtol/atol)."""

    def __init__(self, oracle: Oracle, modes: Modes, dtypes: list[str], rtol: float | None, atol: float | None):
        self.probes, self.modes, self.dtypes = oracle.probes, modes, dtypes
        self.rtol, self.atol = rtol, atol
        self._jvp: dict[int, np.ndarray] = {}
        self._vjp: dict[int, np.ndarray] = {}

    @property
    def user(self) -> bool:
        return self.rtol is not None or self.atol is not None

    def jvp(self, b: int) -> np.ndarray:
        """Bound of J u_b (that direction's units)."""
        if b not in self._jvp:
            jv, probes, modes = self.modes.jvps[b], self.probes, self.modes
            if probes.full:
                scale = None if modes.jmax_jvp is None else modes.jmax_jvp * probes.scale[b]
            else:
                scale = max(_xp.absmax(jv), probes.slope_scale * probes.scale_max)
            self._jvp[b] = tol.ad_bound(jv, modes.ad_out, self.rtol, self.atol, scale)
        return self._jvp[b]

    def vjp(self, a: int) -> np.ndarray:
        """Bound of J^T v_a (real units, per input element)."""
        if a not in self._vjp:
            self._vjp[a] = self.of_vjp(self.modes.vjps[a])
        return self._vjp[a]

    def of_vjp(self, g: np.ndarray) -> np.ndarray:
        probes, modes = self.probes, self.modes
        parts = [
            tol.ad_bound(
                p,
                "float64" if modes.ad64 else self.dtypes[i],
                self.rtol,
                self.atol,
                modes.jmax_vjp if probes.full else max(_xp.absmax(p), probes.slope_scale),
            )
            for p, i in zip(probes.flat.split(g), probes.flat.args)
        ]
        return _xp.concat([_xp.flat(p) for p in parts]) if len(parts) > 1 else _xp.flat(parts[0])

    def ad_reason(self) -> str:
        if self.user:
            return f"user atol {self.atol or 0:g} + rtol {self.rtol or 0:g} x |AD|"
        ad_out = self.modes.ad_out
        return f"AD rounding {tol.ad_rounding(ad_out):g} u({ad_out}) x (|AD| + max|AD|)"


class Comparisons:
    def __init__(
        self,
        ad: AD,
        oracle: Oracle,
        modes: Modes,
        bounds: Bounds,
        report: Findings,
        closeness: Closeness,
    ) -> None:
        self.ad, self.oracle, self.modes, self.bounds = ad, oracle, modes, bounds
        self.probes, self.primal, self.precision = oracle.probes, oracle.primal, oracle.precision
        self.report, self.closeness = report, closeness
        self.locate = Localiser(
            ad, oracle, modes, bounds.jvp, bounds.vjp, lambda w: tol.ad_bound(w, modes.ad_out, bounds.rtol, bounds.atol)
        )

    @functools.cached_property
    def lhs(self) -> list[list[float]]:
        """<J^T v_a, u_b> for every projection (directional checks)."""
        return [[_xp.dot(g, u) for u in self.probes.us] for g in self.modes.vjps]

    @functools.cached_property
    def g_terms(self) -> list[float]:
        """The Hoeffding term of each VJP's rounding in a projection: |u_b| =
        scale, so (u_b g)^2 = (scale g)^2 whatever the direction."""
        return [tol.hoeffding(self.probes.scale, self.bounds.vjp(a)) for a in range(len(self.modes.vjps))]

    def run(self) -> None:
        modes = self.modes
        jvp_ok = self.jvp_fd() if modes.jvps else False
        vjp_ok = self.vjp_fd(jvp_ok) if modes.vjps else True
        if modes.jvps and modes.vjps and jvp_ok and vjp_ok:
            # the sharper test (its bound is AD rounding alone); when either
            # mode failed against FD it would only repeat that
            self.adjoint()
        if modes.low_jvps and jvp_ok:
            self.precision_of("JVP")
        if modes.low_vjps and vjp_ok:
            self.precision_of("VJP")
        # last: the re-examinations and measurements may have made elements unreliable
        self.oracle.report_inconclusive(self.report)

    # -- shared ---------------------------------------------------------------------------
    def _violation(self, ad: np.ndarray, ref: fd.Reference, ad_tol: np.ndarray) -> np.ndarray:
        """By how much ``ad`` lies outside the reference interval widened by its
        rounding bound (positive: a mismatch); -inf where nothing is compared."""
        xp = _xp.ns(ad)
        over = xp.abs(ad - ref.value) - ref.err - ad_tol
        return over if ref.all_smooth else xp.where(self.oracle.usable(ref), over, -xp.inf)

    def _bound_reason(self, kink: bool) -> str:
        ad, oracle = self.bounds.ad_reason(), self.precision.name
        if kink:
            return f"one-sided derivatives (FD in {oracle}) with their error bounds + {ad}"
        return (
            f"FD error: Richardson difference x{tol.FD_SAFETY:g} (steps h, h/2, h/4 in {oracle}) "
            f"+ fn's measured noise x{tol.NOISE_SAFETY:g} + {ad}"
        )

    def _worst_projection(self, rhs_and_bound: Callable[[int, int], tuple[float, float] | None]) -> tuple | None:
        worst = None
        for a in range(len(self.modes.vjps)):
            for b in range(len(self.probes.us)):
                rb = rhs_and_bound(a, b)
                if rb is None:
                    continue
                rhs, bound = rb
                lhs = self.lhs[a][b]
                bound += self.g_terms[a]
                ratio = abs(lhs - rhs) / (bound + 1e-300)
                self.closeness.note(ratio)
                if ratio > 1 and (worst is None or ratio > worst[0]):
                    worst = (ratio, a, b, lhs, rhs, bound)
        return worst

    # -- JVP against FD ---------------------------------------------------------------------
    def jvp_fd(self) -> bool:
        mark = self.closeness.mark()
        refs, jvps = self.oracle.refs, self.modes.jvps
        worst = None
        count = 0
        for b, (jv, ref) in enumerate(zip(jvps, refs)):
            t = self.bounds.jvp(b)
            xp = _xp.ns(jv)
            with _xp.quiet():
                scale = t + ref.err
                scale += 1e-300
                ratio = _xp.iabs(jv - ref.value)
                ratio /= scale  # (over the bound where > 1: the same test as _violation's)
            usable = True if ref.all_smooth else self.oracle.usable(ref)
            if usable is True:
                top = _xp.absmax(ratio)
                self.closeness.note(top if math.isfinite(top) else _xp.fmax(ratio))
                if top <= 0.5:
                    continue  # every element well within its bound: nothing over it
            elif _xp.any_(usable):
                self.closeness.note(_xp.fmax(ratio, where=usable))
            viol = self._violation(jv, ref, t)
            over = viol > 0
            bad = _xp.count(over)
            count += bad
            if bad:
                i = _xp.argmax(xp.where(over, viol / scale, -xp.inf))
                t_i = float(t[i])
                ratio = abs(float(jv[i]) - float(ref.value[i])) / (t_i + float(ref.err[i]) + 1e-300)
                if worst is None or ratio > worst[0]:
                    worst = (ratio, b, i, t_i)
        if worst is None:
            return True
        _, b, i, t_i = worst
        if refs[b].modelled:
            # (the model accepted it in FD's units; in u's, rounding may differ)
            self.oracle.measured(b)
            self.closeness.restore(mark)
            return self.jvp_fd()
        excess = self._violation(jvps[b], refs[b], self.bounds.jvp(b))
        oracle = self.oracle
        if oracle.on_grid(b, excess) or oracle.step_dependent(b, excess) or oracle.explained_by_wide_noise(b, excess):
            self.closeness.restore(mark)
            return self.jvp_fd()
        ref, jv, probes = refs[b], jvps[b], self.probes
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
        self._report_fd("JVP", out_idx, arg, idx, ad, fdv, bound, kink, f"{count} element(s)", where)
        return False

    def _report_fd(
        self,
        mode: str,
        out_idx: tuple[int, ...],
        arg: int,
        idx: tuple[int, ...],
        ad: float,
        fdv: float,
        bound: float,
        kink: bool,
        count: str,
        where: str,
    ) -> None:
        """A mismatch of ``mode`` (JVP or VJP) against FD at one Jacobian element."""
        name = "forward mode" if mode == "JVP" else "reverse mode"
        self.report.add(
            Kind.MISMATCH,
            ERROR,
            f"{name} disagrees with finite differences: d output{list(out_idx)} / d arg{arg}{list(idx)}"
            + (" lies outside the one-sided derivatives at a kink" if kink else "")
            + f" ({count} over the bound)",
            pair=(mode, "FD"),
            argument=arg,
            input_index=idx,
            output_index=out_idx,
            values={mode: float(ad), "FD": float(fdv)},
            error=float(abs(ad - fdv)),
            bound=float(bound),
            bound_reason=self._bound_reason(kink),
            where=where,
        )

    # -- VJP against FD ---------------------------------------------------------------------
    def _ref_for_projection(self, b: int) -> tuple[np.ndarray, np.ndarray] | None:
        """FD reference for J u_b as (value, half-width), with unusable elements
        replaced by the JVP's values when there is one."""
        ref = self.oracle.refs[b]
        if ref.all_smooth:
            return ref.value, ref.err
        finite = self.primal.finite
        missing = ~self.oracle.usable(ref) & finite
        value, err = ref.value, ref.err
        xp = _xp.ns(value)
        if _xp.any_(missing):
            if not self.modes.jvps:
                return None
            value = xp.where(missing, self.modes.jvps[b], value)
            err = xp.where(missing, self.bounds.jvp(b), err)
        return xp.where(finite, value, 0.0), xp.where(finite, err, 0.0)

    def vjp_fd(self, jvp_ok: bool) -> bool:
        if self.probes.full:
            return self._vjp_full()
        refs = [self._ref_for_projection(b) for b in range(len(self.oracle.refs))]
        # v is +-1 on finite outputs and err is 0 elsewhere: (v err)^2 = err^2
        fd_terms = [None if r is None else tol.hoeffding(1.0, r[1]) for r in refs]
        for b, ref in enumerate(self.oracle.refs):
            if ref.modelled and fd_terms[b] is not None:
                # Against the model's reference a projection must pass with room
                # for the measured one's centre, which may sit anywhere within
                # |R1 - R2| of it: then it passes against the measured one too.
                fd_terms[b] -= tol.hoeffding(1.0, ref.shift)
        vs = self.probes.vs

        def rhs(a: int, b: int) -> tuple[float, float] | None:
            r = refs[b] if b < len(refs) else None
            return None if r is None else (_xp.dot(vs[a], r[0]), fd_terms[b])

        mark = self.closeness.mark()
        worst = self._worst_projection(rhs)
        if worst is None:
            return True
        if any(r.modelled for r in self.oracle.refs):
            _, a, b, lhs, rhs_v, bound = worst
            found = self.locate.confirmed_vjp(a, b) if jvp_ok else None
            if found is not None:
                # FD along e_j, noise measured, convicts the VJP's element on its
                # own: the measurement along u_b could only say the same
                self._report_vjp(a, b, lhs, rhs_v, bound, ("VJP", "FD"), use_jvp=True, found=found)
                return False
            # the JVP agreed within the rounding model; judge the VJP by the measured noise
            for b in range(len(self.oracle.refs)):
                self.oracle.measured(b)
            self.closeness.restore(mark)
            return self.vjp_fd(jvp_ok)
        _, a, b, lhs, rhs_v, bound = worst
        # (When the JVP agreed with FD along this direction element by element,
        # FD's projection is the JVP's within its bound: noise is no excuse.)
        if not jvp_ok and self.oracle.explained_by_wide_noise(b, abs(lhs - rhs_v) - bound, vs[a]):
            self.closeness.restore(mark)
            return self.vjp_fd(jvp_ok)
        self._report_vjp(a, b, lhs, rhs_v, bound, ("VJP", "FD"), use_jvp=jvp_ok)
        return False

    def _vjp_full(self) -> bool:
        """Full Jacobian: row i from VJP(e_i) against column j from FD(e_j)."""
        # (a full Jacobian is small: its elements are compared on the host)
        m, n = _xp.size(self.primal.values), self.probes.flat.n
        J = np.stack([_xp.host(g) for g in self.modes.vjps]) if self.modes.vjps else np.zeros((0, n))  # (m, n)
        rows = [self.bounds.of_vjp(J[i]) for i in range(m)]
        scales = _xp.host(self.probes.scale)
        mark = self.closeness.mark()
        worst = None
        count = 0
        for j, ref in enumerate(self.oracle.refs):
            s = float(scales[j])
            usable = np.broadcast_to(_xp.host(self.oracle.usable(ref)), (m,))
            value, err, status = _xp.host(ref.value), _xp.host(ref.err), _xp.host(ref.status)
            lo, hi = value - err, value + err
            for i in range(m):
                if not usable[i]:
                    continue
                ad = J[i, j]
                t = rows[i][j]
                over = max(lo[i] / s - ad, ad - hi[i] / s) - t
                ratio = abs(ad - value[i] / s) / (t + err[i] / s + 1e-300)
                self.closeness.note(ratio)
                if over > 0:
                    count += 1
                    if worst is None or ratio > worst[0]:
                        worst = (ratio, i, j, ad, value[i] / s, t + err[i] / s, status[i] == fd.KINK)
        if worst is None:
            return True
        _, i, j, ad, fdv, bound, kink = worst
        if self.oracle.refs[j].modelled:
            self.oracle.measured(j)
            self.closeness.restore(mark)
            return self._vjp_full()
        excess = np.full(m, -np.inf)
        excess[i] = abs(ad - fdv) - bound
        excess = _xp.like(excess, self.oracle.refs[j].value)
        oracle = self.oracle
        if (
            oracle.on_grid(j, excess)
            or oracle.step_dependent(j, excess)
            or (not kink and oracle.explained_by_wide_noise(j, excess))
        ):
            self.closeness.restore(mark)
            return self._vjp_full()
        arg, idx = self.probes.flat.locate(j)
        out_idx = unravel(i, self.primal.shape)
        where = f"full Jacobian, row {out_idx}"
        self._report_fd("VJP", out_idx, arg, idx, ad, fdv, bound, bool(kink), f"{count} Jacobian element(s)", where)
        return False

    def _report_vjp(
        self,
        a: int,
        b: int,
        lhs: float,
        rhs: float,
        bound: float,
        pair: tuple[str, str],
        *,
        use_jvp: bool,
        found: Located | None = None,
    ) -> None:
        modelled = found is not None  # (judged against FD with the rounding model's noise)
        found = found or self.locate.vjp(a, b, use_jvp)
        arg, idx = self.probes.flat.locate(found.element)
        proj = (
            f"<J^T v, u> = {lhs:.6g} vs <v, J u> = {rhs:.6g} from "
            + ("JVP" if pair == ("JVP", "VJP") else "FD" + (" (fn's noise at the rounding model)" if modelled else ""))
            + f" (bound {bound:.3g}: Hoeffding {tol.HOEFFDING_K:g} sigma over random signs)"
        )
        ad_out = self.modes.ad_out
        self.report.add(
            Kind.MISMATCH,
            ERROR,
            (
                "reverse mode disagrees with finite differences"
                if pair == ("VJP", "FD")
                else "reverse mode disagrees with forward mode (adjoint identity <v, J u> = <J^T v, u>)"
            )
            + f": (J^T v) at arg{arg}{list(idx)}",
            pair=pair,
            argument=arg,
            input_index=idx,
            values=found.values,
            error=float(abs(found.values["VJP"] - found.values["FD"])),
            bound=float(found.bound),
            bound_reason=(
                f"AD rounding {tol.ad_rounding(ad_out):g} u + FD error estimate x{tol.FD_SAFETY:g}, projected on v"
                if not self.bounds.user
                else "user rtol/atol + FD error estimate, projected on v"
            ),
            where=f"cotangent v {a + 1} (random signs, seed {self.probes.seed}); {proj}; {found.how}",
        )

    # -- JVP against VJP (the adjoint identity) --------------------------------------------
    def adjoint(self) -> None:
        """<v, J u> from JVP against <J^T v, u> from VJP: no FD, rounding only."""
        if self.probes.full:
            self._adjoint_full()
            return
        finite = _xp.ns(self.primal.values).where(self.primal.finite, 1.0, 0.0)
        jvps, vs = self.modes.jvps, self.probes.vs
        jv_terms = [tol.hoeffding(finite, self.bounds.jvp(b)) for b in range(len(jvps))]
        worst = self._worst_projection(lambda a, b: (_xp.dot(vs[a], jvps[b]), jv_terms[b]))
        if worst is None:
            return
        _, a, b, lhs, rhs, bound = worst
        g3, jv3 = self.ad.rescaled(vs[a], self.probes.us[b])
        if g3 is not None and jv3 is not None:
            measured = abs(_xp.dot(g3, self.probes.us[b]) - lhs) + abs(_xp.dot(vs[a], jv3) - rhs)
            if abs(lhs - rhs) <= bound + MEASURED_ROUNDING * measured:
                return
        self._report_vjp(a, b, lhs, rhs, bound, ("JVP", "VJP"), use_jvp=True)

    def _adjoint_full(self) -> None:
        modes, probes, bounds = self.modes, self.probes, self.bounds
        scales = _xp.host(probes.scale)
        J_r = np.stack([_xp.host(g) for g in modes.vjps])  # (m, n)
        J_f = np.stack([_xp.host(jv) / s for jv, s in zip(modes.jvps, scales)], axis=1)  # (m, n)
        t = tol.ad_bound(J_f, modes.ad_out, bounds.rtol, bounds.atol, modes.jmax_jvp) + tol.ad_bound(
            J_r, modes.ad_out, bounds.rtol, bounds.atol, modes.jmax_vjp
        )
        over = np.abs(J_r - J_f) - t
        if over.size:
            self.closeness.note(float(np.max(np.abs(J_r - J_f) / (t + 1e-300))))
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
        unresolved = undecided or abs(J_r[i, j] - J_f[i, j]) <= fd_err
        self.report.add(
            Kind.MISMATCH,
            WARNING if unresolved else ERROR,
            f"forward and reverse mode disagree: d output{list(out_idx)} / d arg{arg}{list(idx)} "
            f"({int((over > 0).sum())} Jacobian element(s) over the bound; "
            + (
                f"within finite differences' resolution {fd_err:.3g}: rounding or a bug below it)"
                if unresolved
                else "finite differences could not tell which is wrong)"
            ),
            pair=("JVP", "VJP"),
            argument=arg,
            input_index=idx,
            output_index=out_idx,
            values={"JVP": float(J_f[i, j]), "VJP": float(J_r[i, j])},
            error=float(abs(J_f[i, j] - J_r[i, j])),
            bound=float(t[i, j]),
            bound_reason=f"AD rounding {tol.ad_rounding(modes.ad_out):g} u({modes.ad_out}) "
            "(the adjoint identity needs no FD)",
            where="full Jacobian",
        )

    # -- low-precision AD against its float64 run -------------------------------------------
    def precision_of(self, mode: str) -> None:
        """The native low-precision AD against the same AD in float64, which
        finite differences have just accepted. Within the rounding model: fine.
        Beyond it but within the low-precision limit: a ``precision`` warning
        (rounding of the low-precision run, measured). Beyond the limit: an
        error - a low-precision code path that computes something else."""
        modes, probes, bounds, prec = self.modes, self.probes, self.bounds, self.precision
        worst = None  # (over the limit, over the model, key, index, native, float64, dtype, model, limit, count)
        if mode == "JVP":
            items = [(b, modes.low_jvps[b], modes.jvps[b], self.primal.dtype) for b in sorted(modes.low_jvps)]
        else:
            items = []
            for a in sorted(modes.low_vjps):
                for k, (i, lo_p, hi_p) in enumerate(
                    zip(probes.flat.args, probes.flat.split(modes.low_vjps[a]), probes.flat.split(modes.vjps[a]))
                ):
                    items.append(((a, k), _xp.flat(lo_p), _xp.flat(hi_p), bounds.dtypes[i]))
        for key, low, ref, dtype in items:
            if dtype not in tol.LOW_PRECISION_LIMIT:
                continue
            xp = _xp.ns(ref)
            if mode == "JVP" and probes.full:
                scale = None if modes.jmax_jvp is None else modes.jmax_jvp * float(probes.scale[key])
            elif mode == "JVP":
                scale = max(_xp.absmax(ref), probes.slope_scale * probes.scale_max)
            else:
                scale = modes.jmax_vjp if probes.full else max(_xp.absmax(ref), probes.slope_scale)
            model = tol.ad_bound(ref, dtype, bounds.rtol, bounds.atol, scale)
            top = _xp.absmax(ref) if scale is None else scale
            effective = prec.float32_as if dtype == "float32" else dtype
            limit = tol.LOW_PRECISION_LIMIT[effective] * (xp.abs(ref) + top) + self.terms_floor(effective)
            diff = xp.abs(low - ref)
            if not _xp.size(diff):
                continue
            if _xp.any_(diff > limit):
                # A point within the low-precision rounding of a kink may take
                # either side's derivative: no error where the float64 AD just
                # beside the point (either way) brackets the low-precision value.
                for side in self.ad.beside(mode, key):
                    gap = xp.maximum(xp.minimum(ref, side) - low, low - xp.maximum(ref, side))
                    diff = xp.where(gap <= model, 0.0, diff)
            with _xp.quiet():
                over_limit = diff / xp.maximum(limit, 1e-300)
                over_model = diff / xp.maximum(model, 1e-300)
            i = _xp.argmax(over_model)
            self.closeness.note(float(over_limit[i]))
            if float(over_model[i]) <= 1:
                continue
            j = _xp.argmax(over_limit) if float(xp.max(over_limit)) > 1 else i
            cand = (
                float(over_limit[j]),
                float(over_model[j]),
                key,
                j,
                float(low[j]),
                float(ref[j]),
                dtype,
                float(model[j]),
                float(limit[j]),
                _xp.count(diff > model),
            )
            if worst is None or cand[:2] > worst[:2]:
                worst = cand
        if worst is not None:
            self._report_precision(mode, worst)

    def _report_precision(self, mode: str, worst: tuple) -> None:
        probes, bounds = self.probes, self.bounds
        ratio, _, key, j, low_v, ref_v, dtype, model_b, limit_b, count = worst
        if bounds.user:
            # the caller's rtol/atol are the limit they asked for
            ratio, limit_b = max(ratio, worst[1]), model_b
        err = abs(low_v - ref_v)
        ulps = err / (tol.unit_roundoff(dtype) * max(abs(ref_v), 1e-300) * 2)
        rel = err / max(abs(ref_v), 1e-300)
        if mode == "JVP":
            b = key
            arg, idx = probes.flat.locate(b) if probes.full else (None, None)
            out_idx = unravel(j, self.primal.shape)
            what = (
                f"d output{list(out_idx)} / d arg{arg}{list(idx)}" if probes.full else f"(J u) at output{list(out_idx)}"
            )
            where = probes.direction_name(b)
        else:
            a, k = key
            arg, idx = probes.flat.locate(probes.flat.offsets[k] + j)
            out_idx = None
            what = f"(J^T v) at arg{arg}{list(idx)}"
            where = f"cotangent v {a + 1}" + (f" (random signs, seed {probes.seed})" if not probes.full else "")
        name = "forward mode" if mode == "JVP" else "reverse mode"
        common: dict[str, Any] = {
            "pair": (mode, f"{mode} float64"),
            "argument": arg,
            "input_index": idx,
            "output_index": out_idx,
            "values": {f"{mode} {dtype}": low_v, f"{mode} float64": ref_v},
            "error": err,
            "where": where,
        }
        if ratio > 1:
            limit = tol.LOW_PRECISION_LIMIT[self.precision.float32_as if dtype == "float32" else dtype]
            self.report.add(
                Kind.MISMATCH,
                ERROR,
                f"{name} in {dtype} disagrees with the same {name} in float64, which finite differences accept: "
                f"{what} off by {rel:.3g} relative, beyond the {dtype} limit: the {dtype} code path computes "
                f"something else ({count} element(s) over the rounding model)",
                bound=limit_b,
                bound_reason=(
                    "user atol + rtol x |AD|"
                    if bounds.user
                    else f"{dtype} limit {limit:g} x (|AD| + max|AD|) + u x the terms"
                ),
                **common,
            )
            return
        self.report.add(
            Kind.PRECISION,
            WARNING,
            f"{name} in {dtype} is off its float64 run by {rel:.3g} relative ({ulps:.3g} ulps of {dtype}) at "
            f"{what}: rounding of the {dtype} computation, beyond the rounding model but within the {dtype} "
            f"limit ({count} element(s)); the float64 AD agrees with finite differences",
            bound=model_b,
            bound_reason=f"AD rounding {tol.ad_rounding(dtype):g} u({dtype}) x (|AD| + max|AD|)",
            **common,
        )

    def terms_floor(self, dtype: str) -> float:
        """The absolute rounding a low-precision derivative may carry: u x the
        magnitude of the terms its formula combines, up to ROUNDING_TERMS x the
        largest input, output or 1 (the constants of 1 - tanh^2, 1 + erf).
        Where the derivative itself is tiny (a tail, a cancellation) this, not
        its own size, is its precision. Used only to tell a low-precision run's
        rounding from a low-precision code path that computes something else;
        the float64 run is judged without it."""
        terms = max(self.probes.inputs_max, self.precision.f0_scale, 1.0)
        return tol.ROUNDING_TERMS * tol.unit_roundoff(dtype) * terms
