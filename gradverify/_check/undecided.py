"""A directional check's projections restricted to the output elements FD
decided along a direction (the cotangent zero elsewhere: one VJP more), for
a disagreement that meets elements FD left undecided, and the precision of
fn's own values there.

Where FD cannot decide an element (``fd_unreliable``: fn's rounding hides
its slope there), the VJP-vs-FD projection puts the JVP in FD's place, and
the projection's failure may come from there alone: the two modes'
disagreement, not one FD saw. Where fn's terms cancel, a rule that computes
the slope cancels them as well: it rounds to u times those terms, not to u
times its small result, and forward and reverse mode round it differently -
rounding that a rescaled direction does not move (jax's gelu in float32 at
x ~ -7 is exactly -0 as computed; its float64 JVP and VJP round 1 - tanh^2
there a few percent apart). So:

* a VJP-vs-FD failure is FD's only where the restricted projection repeats
  it (``vjp_disagrees``); otherwise the adjoint identity judges the modes;
* where there is no JVP to stand in, the restricted projection is the
  VJP-vs-FD comparison itself (``worst``): without it one undecided element
  left reverse mode compared with nothing;
* the adjoint identity's disagreement is a warning only where it lies on
  undecided elements - for every failing pair, the restricted identity
  holds within AD rounding (``holds_where_decided``) - and, at the element
  it is located at, where it can be rounding (``within_fn_precision``, a
  full Jacobian's element FD cannot resolve too): within the larger of
  sqrt(u) and what fn's own values carry there (their grid over their
  size, measured), relative. A rule is allowed the digits fn computes to,
  and half its dtype's. A wrong constant where fn is computed accurately,
  a sign flip or a dropped term where fn keeps a digit, stays an error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .bounds import Bounds
from .findings import Closeness
from .levels import grid_at
from .modes import AD, Modes
from .oracle import Oracle
from .worst import ProjectionWorst

__all__ = ["Undecided"]


class Undecided:
    """The restricted projections of one check (each VJP taken once per
    cotangent and reference)."""

    def __init__(self, ad: AD, oracle: Oracle, modes: Modes, bounds: Bounds) -> None:
        self.ad, self.oracle, self.modes, self.bounds = ad, oracle, modes, bounds
        self.probes = oracle.probes
        #: cotangent -> (the reference it was restricted by, what _restricted made of it)
        self._made: dict[int, tuple[fd.Reference, Any]] = {}

    def vjp_disagrees(self, a: int, b: int) -> bool:
        """Whether the VJP disagrees with FD on the output elements FD decided
        along u_b: J^T v_a with v_a zero elsewhere, projected on u_b, against
        FD's projection there, with their bound. True where FD decided every
        element v_a weighs (the projection is FD's whole), or where the
        reference is still the rounding model's (the excuses measure it
        first)."""
        ref = self.oracle.refs[b]
        restricted = None if ref.modelled else self._restricted(a, ref)
        if restricted is None:
            return True
        if restricted[1] is None:
            return False
        lhs, rhs, bound = self.projection(a, b)
        return abs(lhs - rhs) > bound

    def projection(self, a: int, b: int) -> tuple[float, float, float]:
        """<J^T v_a, u_b> with v_a zero on the elements FD left undecided along
        u_b, against FD's projection on the ones it decided, and their bound
        (the Hoeffding terms of the VJP's rounding and of FD's error): NaN
        where there is no such projection (FD decided every element v_a
        weighs, or none, or the VJP failed)."""
        ref = self.oracle.refs[b]
        restricted = None if ref.modelled else self._restricted(a, ref)
        if restricted is None or restricted[1] is None:
            return math.nan, math.nan, math.nan
        v_d, g, decided = restricted
        xp, u = _xp.ns(v_d), self.probes.us[b]
        value, err = xp.where(decided, ref.value, 0.0), xp.where(decided, ref.err, 0.0)
        (lhs, rhs), terms, _ = tol.sums(
            [(g, u), (v_d, value)], [lambda: (u, self.bounds.of_vjp(g)), lambda: (v_d, err)]
        )
        return lhs, rhs, sum(terms)

    def worst(self, directions: list[int], apart: tuple[Any, Any], closeness: Closeness) -> ProjectionWorst | None:
        """Where no JVP can stand in for the elements FD left undecided along
        ``directions`` (their VJP-vs-FD projections skipped), the projections
        restricted to the elements FD decided: the worst over its bound, if
        any (its ratio noted in ``closeness``), with the restricted cotangent
        and VJP the localiser is to use for it. Without this, one undecided
        element - a jump among 300 - left the VJP compared with nothing."""
        worst = None
        skip_directions, skip_cotangents = apart
        for b in directions:
            for a in range(len(self.modes.vjps)):
                if a in skip_cotangents or b in skip_directions:
                    continue
                lhs, rhs, bound = self.projection(a, b)
                if math.isnan(bound):
                    continue
                ratio = abs(lhs - rhs) / (bound + 1e-300)
                closeness.note(ratio)
                if ratio > 1 and (worst is None or ratio > worst.ratio):
                    worst = ProjectionWorst(ratio, a, b, lhs, rhs, bound)
        return worst

    def cotangent(self, a: int, b: int) -> tuple[Any, Any] | None:
        """The restricted cotangent v_a along u_b and its VJP (see projection)."""
        restricted = self._restricted(a, self.oracle.refs[b])
        return None if restricted is None or restricted[1] is None else (restricted[0], restricted[1])

    def holds_where_decided(self, a: int, b: int) -> bool:
        """Whether the adjoint identity's disagreement for cotangent a and
        direction b lies in output elements FD could not decide: FD decided
        none that v_a weighs, or the identity restricted to those it decided
        holds within AD rounding. A direction FD did not measure (the
        adjoint identity's alone: see oracle.FD_DIRECTIONS) takes the
        elements FD decided along the first: whether FD can resolve an
        output element's slope is fn's rounding there against that slope."""
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

    def _restricted(self, a: int, ref: fd.Reference) -> tuple[Any, Any, Any] | None:
        """Cotangent v_a zero on the output elements ``ref`` leaves undecided,
        J^T of it and the decided elements' mask; None where FD decided
        every element v_a weighs, or the VJP failed; its VJP None where FD
        decided nothing v_a weighs (nothing to take)."""
        if a not in self._made or self._made[a][0] is not ref:
            v, decided = self.probes.vs[a], self.oracle.usable(ref)
            out = None
            if not ref.all_smooth and _xp.any_((v != 0) & ~decided):
                v_d = _xp.ns(v).where(decided, v, 0.0)
                if not _xp.any_(v_d != 0):
                    out = (v_d, None, decided)
                elif (g := self.ad.vjp(v_d)) is not None:
                    out = (v_d, g, decided)
            self._made[a] = (ref, out)
        return self._made[a][1]

    def within_fn_precision(self, weights: Any, column: Any, vjp: float, gap: float, bound: float, b: int = 0) -> bool:
        """Whether the two modes' disagreement ``gap`` at an input element j
        (``vjp`` = (J^T v)_j against <v, J e_j>, v = ``weights``, ``column`` =
        J e_j from the JVP, their AD ``bound``) can be rounding. Each mode is
        allowed a relative error rho_i at output i of the larger of sqrt(u)
        (as for terms as large as the inputs, see adjoint._rounding_of_terms:
        rounding that cost half the digits is no longer rounding) and what
        fn's own values carry there, measured - the grid they lie on over
        their size (fd.grid along direction ``b``'s stencil: the first
        direction's, or a full Jacobian's column j; infinite where they do
        not move or are 0: no digit of them is known): the JVP's side is
        within sum_i |v_i| rho_i |(J e_j)_i| over the outputs the element
        feeds, and the VJP's within rho |(J^T v)_j| at the least precise of
        them (of every output v weighs where the JVP feeds none). A rule is
        allowed the digits fn computes to, and half its dtype's."""
        if column is None:
            return False
        w, v = _xp.host(column), np.abs(_xp.host(weights))
        weighed = np.isfinite(w) & (v != 0)
        idx = np.flatnonzero(weighed & (w != 0))
        idx = idx if idx.size else np.flatnonzero(weighed)
        if not idx.size:
            return gap <= bound
        F = self.oracle.F(self.probes.us[b], self.probes.cs[b])
        q, _ = grid_at(self.oracle, F, idx)
        f0 = np.abs(_xp.take(_xp.flat(self.oracle.f0), idx))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rho = np.where((q > 0) & (f0 > 0), q / f0, np.inf)
            rho = np.maximum(rho, tol.unit_roundoff(self.modes.ad_out) ** 0.5)
            forward = float(np.sum(np.where(w[idx] != 0, v[idx] * rho * np.abs(w[idx]), 0.0)))
            reverse = float(np.max(rho)) * abs(vjp) if vjp else 0.0
        return gap <= bound + forward + max(forward, reverse)
