"""Forward against reverse mode through the adjoint identity <v, J u> =
<J^T v, u>: no FD, the two modes' rounding alone - the sharpest test a check
makes - with the rounding it measures (a rescaled direction), the rounding
of terms as large as the inputs, and what FD cannot resolve, said as
warnings (see docs/verdicts.md, "Forward against reverse mode")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .bounds import Bounds, host_rows
from .context import Context
from .findings import unravel
from .judge import Judge
from .messages import adjoint_mismatch
from .modes import AD, Modes
from .oracle import Oracle
from .probes import Probes
from .undecided import Undecided

__all__ = ["MEASURED_ROUNDING", "AdjointIdentity"]

# A JVP-vs-VJP difference within this many times the measured rounding of the
# rules (their change under a rescaled direction) is rounding, not a bug.
MEASURED_ROUNDING = 16.0


class AdjointIdentity(Judge):
    """The adjoint identity's comparison (``adjoint``), shared by every
    first-order comparison of a check (compare.Comparisons); ``undecided``:
    the projections restricted to what FD decided (see undecided)."""

    def __init__(self, ctx: Context, ad: AD, oracle: Oracle, modes: Modes, bounds: Bounds) -> None:
        super().__init__(ctx, ad, oracle, modes, bounds)
        self.undecided = Undecided(self.ad, self.oracle, self.modes, self.bounds)

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
        undecided = False
        if not within and all(self.undecided.holds_where_decided(*p) for p in self._failing(projected, jv_terms)):
            # on elements FD could not decide: a warning where the located
            # element's disagreement is within fn's own precision there
            found = self.locate.adjoint(a, b)
            worst = dataclasses.replace(worst, found=found)
            gap = abs(found.values["VJP"] - found.values["JVP"])
            column = self.locate.jvp_columns.get(found.element)
            undecided = self.undecided.within_fn_precision(vs[a], column, found.values["VJP"], gap, found.bound)
        self._report_vjp(
            worst, ("JVP", "VJP"), use_jvp=True, terms=terms if within else None, terms_scale=scale, undecided=undecided
        )

    def _failing(
        self, projected: dict[tuple[int, int], float], terms: dict[tuple[int, int], float]
    ) -> list[tuple[int, int]]:
        """Every (cotangent, direction) whose adjoint identity fails its bound
        (as _worst_projection judges each)."""
        directions, cotangents = self.ad.apart
        lhs, lhs_terms = self._reverse
        return [
            (a, b)
            for (a, b), rhs in projected.items()
            if a not in cotangents and b not in directions and abs(lhs[a, b] - rhs) > terms[a, b] + lhs_terms[a, b]
        ]

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
        # as a warning, not failed - where it can be rounding (see
        # Undecided.within_fn_precision: a wrong constant where fn is
        # computed to full precision is no rounding, FD's resolution or not).
        ref = self.oracle.measured(j)
        fd_err = float(ref.err[i]) / float(scales[j])
        gap = abs(J_r[i, j] - J_f[i, j])
        unresolved = int(ref.status[i]) in (fd.UNRELIABLE, fd.JUMP) or gap <= fd_err
        if unresolved:
            e_i = np.eye(1, J_f.shape[0], i)[0]
            unresolved = self.undecided.within_fn_precision(e_i, J_f[:, j], J_r[i, j], gap, t[i, j], b=j)
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
                unresolved=unresolved,
                ad_out=modes.ad_out,
            )
        )


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
    aside = (host_rows([r.status for r in refs], diff.shape[0], np.int8) == fd.ASIDE).T
    return np.where(aside, 0.0, diff)
