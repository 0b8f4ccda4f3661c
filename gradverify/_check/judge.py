"""What every comparison of a check shares: its context, the AD values, the
oracle's references, the bounds, the excuses (one of each per check: each
keeps which directions it has looked at), the localiser, and the machinery
that judges a disagreement - its worst element or projection, the loop over
the excuses, the report of a projection that fails."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .bounds import Bounds
from .calls import CallFailed
from .context import Context
from .excuses import (
    AllUnmeasured,
    Beneath,
    Disagreement,
    Excuse,
    FinerStep,
    Nearby,
    OnGrid,
    Unmeasured,
    WideNoise,
)
from .locate import Localiser
from .messages import fd_bound_reason, projection_mismatch
from .modes import AD, Modes
from .oracle import Oracle
from .worst import ProjectionWorst

__all__ = ["Judge"]

W = TypeVar("W")


class Judge:
    """The shared part of the comparisons (see compare)."""

    def __init__(self, ctx: Context, ad: AD, oracle: Oracle, modes: Modes, bounds: Bounds) -> None:
        self.ctx, self.ad, self.oracle, self.modes, self.bounds = ctx, ad, oracle, modes, bounds
        self.probes, self.primal, self.closeness = ctx.probes, ctx.primal, ctx.closeness
        self.locate = Localiser(
            ad, oracle, modes, bounds.jvp, bounds.vjp, lambda w: tol.ad_bound(w, modes.ad_out, bounds.rtol, bounds.atol)
        )
        # (each excuse keeps which directions it has looked at: one set per check)
        self.unmeasured, self.all_unmeasured = Unmeasured(), AllUnmeasured()
        self.on_grid, self.finer_step, self.wide_noise = OnGrid(), FinerStep(), WideNoise()
        self.nearby, self.beneath = Nearby(), Beneath(self.column_slopes)
        #: What a column's disagreement is re-examined with before the wide noise (in order).
        self.column_excuses = (self.unmeasured, self.beneath, self.on_grid, self.finer_step, self.nearby)
        #: (pair, direction) -> elements beyond the model's bound that the
        #: suite's tolerance covers (the last look at each counts)
        self.covered: dict[tuple[str, int], int] = {}

    @functools.cached_property
    def lhs(self) -> list[list[float]]:
        """<J^T v_a, u_b> for every projection (directional checks)."""
        us, vjps = self.probes.us, self.modes.vjps
        projected = projections(vjps, dict(enumerate(us)))
        return [[projected[a, b] for b in range(len(us))] for a in range(len(vjps))]

    @functools.cached_property
    def g_terms(self) -> dict[tuple[int, int], float]:
        """The Hoeffding term of VJP a's rounding in its projection on u_b,
        for every pair: the weights are u_b's elements (a random sign times a
        magnitude each)."""
        us, vjp = self.probes.us, self.bounds.vjp
        return pair_terms(range(len(self.modes.vjps)), range(len(us)), lambda a, b: (us[b], vjp(a)))

    def column_slopes(self, b: int) -> np.ndarray:
        """|AD| along column b of a full Jacobian (real units), per output
        element: the larger of forward and reverse mode's."""
        cols = [np.abs(_xp.host(jv)) / float(self.probes.scale[b]) for jv in self.modes.jvps[b : b + 1]]
        if self.modes.vjps:
            cols.append(np.abs(np.array([float(g[b]) for g in self.modes.vjps])))
        return np.max(np.stack(cols), axis=0) if cols else np.zeros(_xp.size(self.primal.values))

    def _until_unexcused(
        self, attempt: Callable[[], W | None], excuses: Callable[[W], tuple[Disagreement, Sequence[Excuse]]]
    ) -> W | None:
        """The worst disagreement ``attempt`` finds once no excuse changes the
        oracle's reference any more (None: none left). Each excuse is tried in
        order; the first that changes something sends the comparison round
        again, and what it noted of its closeness is taken back."""
        while True:
            mark = self.closeness.mark()
            worst = attempt()
            if worst is None:
                return None
            case, passes = excuses(worst)
            if not any(self._tried(excuse, case) for excuse in passes):
                return worst
            self.closeness.restore(mark)

    def _tried(self, excuse: Excuse, case: Disagreement) -> bool:
        """Whether ``excuse`` explains ``case``; not where fn raises at the
        points it looks at (outside a thin set fn is defined on): the
        disagreement then stands, with a note."""
        try:
            return excuse(self.oracle, case)
        except CallFailed as e:
            if e.stage != "evaluating fn":
                raise
            note = (
                f"fn raised at the points the {type(excuse).__name__} excuse evaluates ({type(e.exc).__name__}: "
                f"{str(e.exc)[:120]}); it was not tried"
            )
            if note not in self.oracle.notes:
                self.oracle.notes.append(note)
            return False

    def _violation(self, ad: np.ndarray, ref: fd.Reference, ad_tol: np.ndarray, b: int | None = None) -> np.ndarray:
        """By how much ``ad`` lies outside the reference interval widened by its
        rounding bound (positive: a mismatch); -inf where nothing is compared.
        With a suite's tolerance (along direction ``b``), only what lies
        outside both is over."""
        xp = _xp.ns(ad)
        over = xp.abs(ad - ref.value) - ref.err - ad_tol
        over = over if ref.all_smooth else xp.where(self.oracle.usable(ref), over, -xp.inf)
        if b is None or not self.probes.full:
            return over  # (a random direction's disagreement is judged where it is located: suite.said)
        return self.beyond_suite(over, ad, ref.value, ("JVP", b), float(self.probes.scale[b]))

    def beyond_suite(self, over: np.ndarray, ad: np.ndarray, fd: np.ndarray, key: tuple[str, int], scale: float = 1.0):
        """``over`` (by how much AD lies beyond gradverify's bound: positive,
        a mismatch) where it lies beyond the suite's tolerance too; the
        elements that tolerance covers counted under ``key``."""
        if self.ctx.options.suite is None:
            return over
        xp = _xp.ns(over)
        within = xp.abs(ad - fd) - self.suite_floor(fd, scale)
        self.covered[key] = _xp.count((over > 0) & (within <= 0))
        return xp.minimum(over, within)

    def suite_floor(self, value: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """The suite's own tolerance of AD values against FD ``value``,
        atol + rtol |FD| per Jacobian element (a column scaled by ``scale``:
        its atol too)."""
        atol, rtol = self.ctx.options.suite or (0.0, 0.0)
        return atol * scale + rtol * _xp.ns(value).abs(value)

    def suite_reason(self, reason: str, value: float) -> str:
        """``reason`` and, under a suite's tolerance, that the value lies beyond it too."""
        if self.ctx.options.suite is None:
            return reason
        atol, rtol = self.ctx.options.suite
        limit = float(self.suite_floor(np.asarray(value)))
        return f"{reason}; and beyond the suite's own tolerance atol {atol:g} + rtol {rtol:g} x |FD| = {limit:.3g}"

    def _bound_reason(self, kink: bool) -> str:
        return fd_bound_reason(kink, self.bounds.ad_reason(), self.ctx.precision.name)

    def _worst_projection(
        self, rhs_and_bound: Callable[[int, int], tuple[float, float] | None]
    ) -> ProjectionWorst | None:
        worst = None
        directions, cotangents = self.ad.apart  # (meeting AD's NaN/inf where fn is not differentiable)
        for a in range(len(self.modes.vjps)):
            for b in range(len(self.probes.us)):
                if a in cotangents or b in directions:
                    continue
                rb = rhs_and_bound(a, b)
                if rb is None:
                    continue
                rhs, bound = rb
                lhs = self.lhs[a][b]
                bound += self.g_terms[a, b]
                ratio = abs(lhs - rhs) / (bound + 1e-300)
                self.closeness.note(ratio)
                if ratio > 1 and (worst is None or ratio > worst.ratio):
                    worst = ProjectionWorst(ratio, a, b, lhs, rhs, bound)
        return worst

    def _report_vjp(
        self,
        w: ProjectionWorst,
        pair: tuple[str, str],
        *,
        use_jvp: bool,
        terms: float | None = None,
        terms_scale: float = 0.0,
    ) -> None:
        found = w.found or self.locate.vjp(w.cotangent, w.direction, use_jvp)
        arg, idx = self.probes.flat.locate(found.element)
        self.ctx.report.keep(
            projection_mismatch(
                pair,
                arg,
                idx,
                found.values,
                found.bound,
                lhs=w.lhs,
                rhs=w.rhs,
                bound=w.bound,
                modelled=w.found is not None,  # (judged against FD with the rounding model's noise)
                user_bounds=self.bounds.user,
                ad_out=self.modes.ad_out,
                cotangent=f"cotangent v {w.cotangent + 1} (random, seed {self.probes.seed})",
                how=found.how,
                terms=terms,
                terms_scale=terms_scale,
            )
        )


def pair_terms(
    cotangents: Iterable[int], directions: Iterable[int], term: Callable[[int, int], tuple[Any, Any]]
) -> dict[tuple[int, int], float]:
    """The Hoeffding term (tol.hoeffdings) of the weights and bounds
    ``term(a, b)`` returns, for every cotangent a and direction b."""
    pairs = [(a, b) for a in cotangents for b in directions]
    return dict(zip(pairs, tol.hoeffdings([functools.partial(term, a, b) for a, b in pairs])))


def projections(left: Sequence[Any], right: dict[int, Any]) -> dict[tuple[int, int], float]:
    """<left[a], right[b]> for every a and every b, read in one read (see xp.dots)."""
    pairs = [(a, b) for a in range(len(left)) for b in right]
    return dict(zip(pairs, _xp.dots([(left[a], right[b]) for a, b in pairs])))
