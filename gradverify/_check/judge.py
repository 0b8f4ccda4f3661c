"""What every comparison of a check shares: its context, the AD values, the
oracle's references, the bounds, the excuses (one of each per check: each
keeps which directions it has looked at), the localiser, and the machinery
that judges a disagreement - its worst element or projection, the loop over
the excuses, the report of a projection that fails."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .bounds import Bounds, one_stack
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
        # (what gather read: sums by (kind, a, b); kind -> direction -> the reference they were read against)
        self._dots: dict[tuple[str, int, int], float] = {}
        self._terms: dict[tuple[str, int, int], float] = {}
        self._gathered: dict[str, dict[int, Any]] = {}
        #: direction -> (the FD reference, the largest ratio of J u_b's
        #: disagreement with it to its bound), where gather read it
        self.tops: dict[int, tuple[fd.Reference, float]] = {}

    def gather(self) -> None:
        """The sums a directional check's comparisons ask for, read in one
        read: <J^T v_a, u_b> with the Hoeffding term of its rounding, and
        where the modes give them, reverse mode's projections against the
        smooth FD references and the adjoint identity's, with theirs. A
        comparison never reached costs its dot products, no read; one that
        meets a reference an excuse has changed works its sums out again."""
        if self.probes.full:
            self._column_tops()
            return
        if not _xp.device_floating(self.probes.us[0]):
            return  # (on the host there is nothing to save: each comparison works out its own)
        us, vs, jvps, refs = self.probes.us, self.probes.vs, self.modes.jvps, self.oracle.refs
        smooth = {b: r for b, r in enumerate(refs) if r.all_smooth}
        jvp_bound = functools.lru_cache(maxsize=1)(self.bounds.jvp)  # (one direction's bound alive at a time)
        kinds = {
            "lhs": (self.modes.vjps, dict(enumerate(us)), lambda a, b: (us[b], self.bounds.vjp(a))),
            "fd": (vs, {b: r.value for b, r in smooth.items()}, lambda a, b: (vs[a], refs[b].err)),
            "adjoint": (vs, dict(enumerate(jvps)), lambda a, b: (vs[a], jvp_bound(b))),
        }
        # (by direction, then cotangent: each bound worked out once here)
        keys = [(k, a, b) for k, (left, right, _) in kinds.items() for b in right for a in range(len(left))]
        if not self.modes.vjps:
            keys = []
        # (and the largest ratio of J u_b to its bound from FD, each direction's, on a device)
        ratios = [b for b in smooth if b < len(jvps) and _xp.device_floating(jvps[b])]
        ends = [e for b in ratios for e in self.jvp_ratio(b, smooth[b], jvp_bound(b))[0].aminmax()]
        dots = {(k, a, b): (kinds[k][0][a], kinds[k][1][b]) for k, a, b in keys}
        terms = {(k, a, b): functools.partial(kinds[k][2], a, b) for k, a, b in keys}
        self._dots, self._terms, ends = gathered(dots, terms, ends)
        self.tops = {b: (smooth[b], _xp.maxabs_of(lo, hi)) for b, lo, hi in zip(ratios, ends[::2], ends[1::2])}
        self._gathered = {
            "lhs": dict.fromkeys(range(len(us))),
            "fd": smooth,
            "adjoint": dict.fromkeys(range(len(jvps))),
        }

    def _column_tops(self) -> None:
        """A full Jacobian's ``tops`` on the host: every smooth column's
        largest ratio to its bound (``jvp_ratio``'s, element for element),
        worked out as one array; a column whose top is not well within its
        bound is compared on its own, as ever."""
        jvps, refs = self.modes.jvps, self.oracle.refs
        smooth = [b for b, r in enumerate(refs) if r.all_smooth and b < len(jvps)]
        if not one_stack([a for b in smooth for a in (jvps[b], refs[b].value, refs[b].err)]):
            return
        jv = np.stack([jvps[b] for b in smooth])
        with _xp.quiet():
            scale = np.stack([self.bounds.jvp(b) for b in smooth])
            scale += np.stack([refs[b].err for b in smooth])
            scale += 1e-300
            ratio = np.abs(jv - np.stack([refs[b].value for b in smooth]))
            ratio /= scale
            tops = np.max(ratio, axis=1, initial=0.0)
        self.tops = {b: (refs[b], float(top)) for b, top in zip(smooth, tops)}

    def jvp_ratio(self, b: int, ref: fd.Reference, t: Any = None) -> tuple[Any, Any]:
        """|J u_b - FD| over J u_b's bound ``t`` and FD's half-width
        ``ref.err``, per output element, and that denominator (positive: a
        tiny floor)."""
        jv, t = self.modes.jvps[b], self.bounds.jvp(b) if t is None else t
        with _xp.quiet():
            scale = t + ref.err
            scale += 1e-300
            ratio = _xp.iabs(jv - ref.value)
            ratio /= scale  # (over the bound where > 1: the same test as _violation's)
        return ratio, scale

    def sums_of(
        self, kind: str, left: Sequence[Any], right: dict[int, Any], term: Callable[[int, int], tuple[Any, Any]]
    ) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
        """<left[a], right[b]> and the Hoeffding term of the pair ``term(a,
        b)`` returns, for every a and every b: as ``gather`` read them (the
        FD ones where the reference is still the one it read them against),
        the rest read now in one read."""
        refs, done = self.oracle.refs, self._gathered.get(kind, {})
        for b in [b for b in done if kind == "fd" and done[b] is not refs[b]]:
            del done[b]  # (read against a reference an excuse has replaced: let it go)
        old = [b for b in right if b in done]
        pairs = [(a, b) for a in range(len(left)) for b in right if b not in old]
        dots, terms, _ = gathered(
            {p: (left[p[0]], right[p[1]]) for p in pairs}, {p: functools.partial(term, *p) for p in pairs}
        )
        for a, b in ((a, b) for a in range(len(left)) for b in old):
            dots[a, b], terms[a, b] = self._dots[kind, a, b], self._terms[kind, a, b]
        return dots, terms

    @functools.cached_property
    def _reverse(self) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
        """<J^T v_a, u_b> for every projection (directional checks), and the
        Hoeffding term of VJP a's rounding in it: the weights are u_b's
        elements (a random sign times a magnitude each)."""
        us, vjp = self.probes.us, self.bounds.vjp
        return self.sums_of("lhs", self.modes.vjps, dict(enumerate(us)), lambda a, b: (us[b], vjp(a)))

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
                lhs = self._reverse[0][a, b]
                bound += self._reverse[1][a, b]
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
        undecided: bool = False,
    ) -> None:
        if w.found is not None:
            found = w.found
        elif pair == ("JVP", "VJP"):
            found = self.locate.adjoint(w.cotangent, w.direction)
        else:
            found = self.locate.vjp(w.cotangent, w.direction, use_jvp)
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
                undecided=undecided,
            )
        )


K = TypeVar("K")


def gathered(
    dots: dict[K, tuple[Any, Any]], terms: dict[K, Callable[[], tuple[Any, Any]]], also: Sequence[Any] = ()
) -> tuple[dict[K, float], dict[K, float], list[float]]:
    """The dot product of each pair of ``dots`` and the Hoeffding term of
    each pair ``terms``' makers return, by their keys, and the values of the
    device scalars ``also``, read in one read (tol.sums)."""
    d, t, rest = tol.sums(list(dots.values()), list(terms.values()), also)
    return dict(zip(dots, d)), dict(zip(terms, t)), rest
