"""Localisation: from a failing projection or vector to the input element.

A directional check compares whole vectors J u and projections <J^T v, u>;
when one fails, the wrong element is found by an elementwise guess (for fn
elementwise in an input shaped like the output: one oracle call, confirmed
along e_j) or by bisection on the input mask (log2 n oracle calls), and
confirmed by FD along e_j - the independent witness the finding reports."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .levels import STAIRS, beneath, finer, grid_at, moved_reason, staircase
from .modes import AD, Modes
from .oracle import Oracle
from .probes import basis
from .worst import Located

__all__ = ["Localiser", "bisect"]


class Localiser:
    def __init__(
        self,
        ad: AD,
        oracle: Oracle,
        modes: Modes,
        jvp_bound: Callable[[int], np.ndarray],
        vjp_bounds: Callable[[int], np.ndarray],
        column_bound: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        self.ad, self.oracle, self.modes = ad, oracle, modes
        self.probes, self.primal = oracle.probes, oracle.primal
        self.jvp_bound, self.vjp_bounds = jvp_bound, vjp_bounds
        self._guesses: dict[tuple[int, int], tuple] = {}
        self._columns: dict[int, tuple] = {}
        self._located: dict[tuple[int, int], Located] = {}  # (direction, output element) -> JVP's
        #: input element -> J e_j from forward mode, as the adjoint identity's located element was judged by
        self.jvp_columns: dict[int, np.ndarray | None] = {}
        #: (cotangent, direction) -> the cotangent and its VJP a projection was judged with in their
        #: place: v_a zero on the outputs FD could not decide (see undecided), where no JVP fills them
        self.cotangents: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        # the rounding bound of a JVP's column J e_j (the caller's rtol/atol where given)
        self.column_bound = column_bound

    # -- reverse mode -------------------------------------------------------------------
    def vjp(self, a: int, b: int, use_jvp: bool) -> Located:
        """The element of J^T v_a that is wrong (the projection on u_b failed);
        ``use_jvp``: the JVP is trusted as the oracle for choosing halves."""
        use_jvp = use_jvp and bool(self.modes.jvps)
        j, (values, bound, confirmed, _) = self._guessed(a, b, use_jvp)
        if j is not None and confirmed:
            return Located(j, values, bound, "found by the elementwise guess, confirmed along e_j")
        j, steps = self._bisect_vjp(a, b, use_jvp)
        values, bound, _, _ = self._vjp_element(a, j, b)
        return Located(j, values, bound, f"located in {steps} bisection steps using {'JVP' if use_jvp else 'FD'}")

    def _cotangent(self, a: int, b: int | None) -> tuple[np.ndarray, np.ndarray]:
        """v_a and J^T v_a, or what was judged in their place along u_b."""
        return self.cotangents.get((a, b)) or (self.probes.vs[a], self.modes.vjps[a])

    def adjoint(self, a: int, b: int) -> Located:
        """The element of J^T v_a that breaks the adjoint identity with
        direction b: the elementwise guess (ranked by the JVP), confirmed
        against <v_a, J e_j> from forward mode, otherwise bisection with the
        JVP as the oracle. Its values are the two modes' there - not FD's,
        which the identity never asked (and which may not decide there)."""
        j = self._diagonal_guess(a, b, use_jvp=True)
        if j is not None:
            values, bound = self._adjoint_element(a, j)
            if abs(values["VJP"] - values["JVP"]) > bound:
                return Located(j, values, bound, "found by the elementwise guess, confirmed along e_j by forward mode")
        j, steps = self._bisect_vjp(a, b, use_jvp=True)
        values, bound = self._adjoint_element(a, j)
        return Located(j, values, bound, f"located in {steps} bisection steps using JVP")

    def _adjoint_element(self, a: int, j: int) -> tuple[dict[str, float], float]:
        """(J^T v_a)_j from VJP against <v_a, J e_j> from JVP, and the bound
        of their difference (the two modes' rounding)."""
        v, g = self.probes.vs[a], self.modes.vjps[a]
        w = self.ad.jvp_value(basis(j, self.probes.flat.n, self.probes.x))
        self.jvp_columns[j] = w
        if w is None:
            (ad, ad_bound) = _xp.read(g[j], self.vjp_bounds(a)[j])
            return {"JVP": float("nan"), "VJP": ad}, ad_bound
        (jv,), (terms,), (ad, ad_bound) = tol.sums(
            [(v, w)], [lambda: (v, self.column_bound(w))], (g[j], self.vjp_bounds(a)[j])
        )
        return {"JVP": jv, "VJP": ad}, ad_bound + terms

    def confirmed_vjp(self, a: int, b: int) -> Located | None:
        """The elementwise guess for a failing projection when FD along e_j
        convicts the VJP there on its own: the column fully estimated (no
        element left undecided), the VJP's element outside its bound, and
        the trusted JVP's column J e_j inside FD's, element by element (so no
        feature narrower than the step, no rounding FD misread, stands behind
        the conviction). None otherwise: then the projection is measured."""
        j, (values, bound, confirmed, complete) = self._guessed(a, b, bool(self.modes.jvps))
        if j is None or not (confirmed and complete):
            return None
        w = self.ad.jvp_value(basis(j, self.probes.flat.n, self.probes.x))
        if w is None:
            return None
        value, err, _ = self._column(j)  # (estimated for the guess's test already)
        xp = _xp.ns(w)
        with _xp.quiet():
            outside = xp.abs(w - value) > err + self.column_bound(w)
        if _xp.any_(outside & self.primal.finite):
            return None
        return Located(j, values, bound, "found by the elementwise guess, confirmed along e_j by FD and forward mode")

    def _guessed(self, a: int, b: int, use_jvp: bool) -> tuple[int | None, tuple[dict[str, float], float, bool, bool]]:
        """The elementwise guess (ranked by the JVP when it is trusted) and its
        test along e_j, made once per pair."""
        key = (a, b)
        if key not in self._guesses:
            j = self._diagonal_guess(a, b, use_jvp)
            self._guesses[key] = (j, self._vjp_element(a, j, b) if j is not None else ({}, 0.0, False, False))
        return self._guesses[key]

    def _column(self, j: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """Column j of the Jacobian (J e_j, real units) by FD with steps relative to
        that element's scale, with its error; 0 where FD cannot decide. Also
        whether FD decided every element (Oracle.column, estimated once per element)."""
        if j not in self._columns:
            self._columns[j] = self.oracle.column(j)
        return self._columns[j]

    def _vjp_element(self, a: int, j: int, b: int | None = None) -> tuple[dict[str, float], float, bool, bool]:
        """(J^T v)_j from VJP against <v, J e_j> from FD: the labelled values,
        the bound, whether the element is confirmed wrong, and whether FD
        decided every element of the column (v_a, or what was judged in its
        place along u_b)."""
        value, err, complete = self._column(j)
        v, g = self._cotangent(a, b)
        # (the projection, its Hoeffding term, the VJP's element with its bound and
        # whether FD decided the column: one read)
        unread = (complete,) if _xp.is_array(complete) else ()
        (fd_value,), (terms,), (ad, ad_bound, *decided) = tol.sums(
            [(v, value)], [lambda: (v, err)], (g[j], self.vjp_bounds(a)[j], *unread)
        )
        values = {"VJP": ad, "FD": fd_value}
        bound = ad_bound + terms
        return values, bound, abs(values["VJP"] - values["FD"]) > bound, bool(decided[0]) if decided else complete

    def _diagonal_guess(self, a: int, b: int, use_jvp: bool = False) -> int | None:
        """If fn were elementwise in an input shaped like the output, its element
        j would feed output j alone: (J^T v)_j u_j = v_j (J u_k)_j with u_k the
        direction restricted to that input (one oracle call). The worst
        violation is the candidate."""
        probes = self.probes
        (v, g), u = self._cotangent(a, b), probes.us[b]
        offsets, tops = [], []
        for off, size, shape in zip(probes.flat.offsets, probes.flat.sizes, probes.flat.shapes):
            if tuple(shape) != self.primal.shape:
                continue
            uk = _xp.window(u, off, off + size)
            # ranking needs no precision: one JVP, or a central difference (2 evaluations)
            w = self.projection_oracle(uk, use_jvp=use_jvp)
            offsets.append(off)
            tops += _xp.top_of(_xp.ns(w).abs(g[off : off + size] * u[off : off + size] - v * _xp.flat(w)))
        got = _xp.read(*tops)  # (every candidate's largest violation and where: one read)
        best: tuple[float, int] | None = None
        for off, top, k in zip(offsets, got[::2], got[1::2]):
            if best is None or top > best[0]:
                best = (top, off + int(k))
        return None if best is None else best[1]

    def projection_oracle(self, u: np.ndarray, use_jvp: bool) -> np.ndarray:
        """J u from the trusted JVP, or from one central difference (2 evaluations)."""
        if use_jvp:
            w = self.ad.jvp_value(u)
            if w is not None:
                return w
        c = self.probes.cs[0]  # directional: every direction shares its normalisation
        F = self.oracle.F(u, c)
        h = self.oracle.precision.h
        with _xp.quiet():
            d = F(h) - F(-h)  # (fn's outputs are not ours to write: a new array, then in place)
            d /= 2 * h * c
        xp = _xp.ns(d)
        if not self.primal.all_finite:
            return xp.where(_xp.finite(d) & self.primal.finite, d, 0.0)
        if not _xp.on_host(d):  # (no read: the same values where every element is finite)
            return xp.where(_xp.finite(d), d, 0.0)
        return d if _xp.all_finite(d) else xp.where(_xp.finite(d), d, 0.0)

    def _bisect_vjp(self, a: int, b: int, use_jvp: bool) -> tuple[int, int]:
        """The discrepancy <J^T v, u_S> - <v, J u_S> is linear in the mask S:
        halve S toward the larger discrepancy."""
        (v, g), u = self._cotangent(a, b), self.probes.us[b]

        def disc(lo: int, hi: int) -> float:
            # Choosing a half needs no precision: the wrong element's share of
            # the discrepancy is large, so one central difference does.
            uS = _xp.window(u, lo, hi)
            return _xp.dot(g, uS) - _xp.dot(v, self.projection_oracle(uS, use_jvp))

        return bisect(self.probes.flat.n, disc)

    # -- forward mode -------------------------------------------------------------------
    def jvp(self, b: int, i: int) -> Located:
        """The input element behind a JVP mismatch at output element i: first the
        elementwise guess (the same index in an input shaped like the output),
        confirmed along e_j; otherwise bisection. Found once per pair."""
        if (b, i) not in self._located:
            self._located[(b, i)] = self._jvp(b, i)
        return self._located[(b, i)]

    def _jvp(self, b: int, i: int) -> Located:
        probes = self.probes
        u = probes.us[b]
        jv_t = self.jvp_bound(b)

        def element(j: int) -> tuple[dict[str, float], float, str | None]:
            e_j = basis(j, probes.flat.n, probes.x)
            w = self.ad.jvp_value(e_j)
            c = probes.raw_at(j)
            ref = self.oracle.fd(None, 0.0, c, j=j)
            ad = float(w[i]) if w is not None else np.nan
            values = {"JVP": ad, "FD": float(ref.value[i])}
            bound = float(jv_t[i]) / probes.element_scale(j) + float(ref.err[i])
            return values, bound, self._witness_undecided(ref, i, j, c, values, bound)

        for off, shape in zip(probes.flat.offsets, probes.flat.shapes):
            if tuple(shape) == self.primal.shape:
                values, bound, undecided = element(off + i)
                if undecided is None and abs(values["JVP"] - values["FD"]) > bound:
                    return Located(off + i, values, bound, "found by the elementwise guess, confirmed along e_j")

        def disc(lo: int, hi: int) -> float:
            uS = _xp.window(u, lo, hi)
            w = self.ad.jvp_value(uS)
            ref: fd.Reference = self.oracle.fd(uS, jv_t, probes.cs[b], ladder=False)
            return (float(w[i]) if w is not None else 0.0) - float(ref.value[i])

        j, steps = bisect(probes.flat.n, disc)
        values, bound, undecided = element(j)
        return Located(j, values, bound, f"located in {steps} bisection steps", undecided)

    def _witness_undecided(
        self, ref: fd.Reference, i: int, j: int, c: float, values: dict[str, float], bound: float
    ) -> str | None:
        """Why FD along e_j cannot witness a mismatch at output i, if it
        cannot: it agrees with the JVP within its bound (the disagreement
        along the direction is not confirmed there); it finds no derivative
        there (a jump, or undecidable); x_j lies below every step and the
        JVP is steeper than fn's values can show (levels.beneath); or, where it convicts, the scrutiny a
        direction gets (excuses.OnGrid, FinerStep) excuses it: fn's values lie
        on a staircase of its own or on a grid whose rounding can tilt the
        slope that far, or finer steps move the estimate beyond both bounds,
        settle it within the JVP's bound, or find a kink or jump beside the
        point that the first step straddled."""
        status = int(ref.status[i])
        if status == fd.JUMP:
            return "finite differences along e_j find a jump there"
        if status == fd.UNRELIABLE:
            return "finite differences along e_j cannot decide there"
        if abs(values["JVP"] - values["FD"]) <= bound:
            return f"finite differences along e_j agree with the JVP there, within their bound {bound:.3g}"
        below = beneath(self.oracle, j, values["JVP"])
        if below is not None:
            return below
        if status == fd.KINK:
            return None
        own = max(abs(float(self.probes.x[j])), tol.TINY_SCALE) / c
        F = self.oracle.F(None, c, j=j)
        # (as OnGrid along a direction: values on a grid coarser than u |F|,
        # a staircase's steps or a cancellation's, tilt the slope by up to
        # what rounding to it can do over the step)
        grid, seen = grid_at(self.oracle, F, np.array([i]))
        q = float(grid[0])
        if staircase(grid, seen, self.oracle, F, np.array([i]))[0]:
            return "along e_j " + STAIRS % q
        reach = float(fd.grid_bound(grid, self.oracle.precision.h)[0]) / c
        if abs(values["JVP"] - values["FD"]) <= bound + reach:
            return (
                f"along e_j fn's values lie on a grid of {q:.3g}, and rounding to it can move the slope by {reach:.3g}"
            )
        moved, replaced, featured = finer(self.oracle, F, c, self.oracle.terms(c, column=True), own, ref, np.array([i]))
        if i in moved:
            return "along e_j " + moved_reason(values["FD"], float(ref.err[i]), moved[i])
        if i in replaced:
            value, err = replaced[i]
            if abs(values["JVP"] - value) <= bound - float(ref.err[i]) + err:
                return f"along e_j a finer step settles FD at {value:.6g} +- {err:.2g}, which the JVP meets"
        if i in featured:
            return "along e_j a finer step finds a kink or a jump that the first step straddled"
        return None


def bisect(n: int, disc: Callable[[int, int], float]) -> tuple[int, int]:
    """The element of 0..n-1 carrying a linear discrepancy ``disc(lo, hi)``
    (over the mask [lo, hi)), and the calls it took."""
    lo, hi = 0, n
    total = None
    steps = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if total is None:
            total = disc(lo, hi)
            steps += 1
        left = disc(lo, mid)
        steps += 1
        right = total - left
        if abs(left) >= abs(right):
            hi, total = mid, left
        else:
            lo, total = mid, right
    return lo, steps
