"""The FD reference for J u: the rounding model first where it decides,
else the measured estimate, its flagged elements down the ladder, and the
elements no step can resolve marked unreliable."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import tolerance as tol, xp as _xp
from .ladder import descend, noise_explains
from .model import COARSE_OFFSETS, KEEP_POINTS, MODEL_OFFSETS, model_reference
from .records import SMOOTH, UNKNOWN, UNRELIABLE, Array, Line, Problem, Reference
from .stencil import OFFSETS, R1_WEIGHT, Stencil, estimate, evaluate_level, tolerance_parts, values_at

__all__ = ["reference", "mark_unresolved"]


def reference(
    problem: Problem,
    *,
    model_first: bool = False,
    ad: Array | None = None,
    sparse: bool = False,
    have: dict[int, Array] | None = None,
    quick: Any = UNKNOWN,
    coarse: bool = False,
    scales: tuple[float, float] | None = None,
    ad_scale: float = 1.0,
) -> Reference:
    """FD reference for F'(0) of ``problem``, with kink analysis of flagged
    elements. ``model_first``: try the rounding model first (see
    model_reference; ``ad`` +- the problem's ``ad_tol``, the AD values it will
    judge, must agree with it too); where nothing is flagged the reference is
    the model's, and ``Reference.measure`` measures fn's noise when a
    comparison needs it. ``sparse``: estimate only the outputs the steps move
    (see _on_support). ``have``: F's values at MODEL_OFFSETS, evaluated
    already (model_first); ``quick``: model_reference()'s result on them (None
    included), where model_rows() worked it out already. ``coarse``:
    the model from COARSE_OFFSETS (model_reference's ``coarse``): two
    evaluations fewer, the rest evaluated only where it is measured.
    ``scales``: the model's scales of ``have``, read already (model_scales);
    ``ad_scale``: see model_reference."""
    F, f0, h, u_oracle, ad_tol = problem.F, problem.f0, problem.h, problem.u_oracle, problem.ad_tol
    f0_scale, point = problem.f0_scale, problem.point
    if model_first:
        offsets = COARSE_OFFSETS if coarse else MODEL_OFFSETS
        have = have or dict(zip(offsets, values_at(F, [k * h / 4 for k in offsets])))
        if quick is UNKNOWN:
            quick = model_reference(
                have,
                f0,
                h,
                u_oracle,
                ad_tol,
                f0_scale,
                ad,
                point=point,
                coarse=coarse,
                scales=scales,
                ad_scale=ad_scale,
            )
            if quick is None and coarse:
                # (the coarse model stepped aside: the six points' model decides, two evaluations more)
                missing = [k for k in MODEL_OFFSETS if k not in have]
                have.update(zip(missing, values_at(F, [k * h / 4 for k in missing])))
                quick = model_reference(have, f0, h, u_oracle, ad_tol, f0_scale, ad, point=point, ad_scale=ad_scale)
        if quick is not None:
            value, err, shift, typical = quick
            if _xp.size(value) > KEEP_POINTS:
                have = {}  # (8 MB each at n = 10^6: measuring, rarely needed, evaluates them again)

            def measure() -> Reference:
                return _measured(problem, have, sparse)

            status = _xp.zeros(tuple(value.shape), value, "int8")
            return Reference(value, err, status, True, typical=typical, measure=measure, shift=shift)
    else:
        have = {}
    return _measured(problem, have, sparse)


def _measured(p: Problem, have: dict[int, Array], sparse: bool = False, unmoved: bool = False) -> Reference:
    """The reference with fn's noise measured (reusing the points in ``have``);
    ``sparse``: on the outputs the first step moves (see _on_support, which
    passes ``unmoved``: outputs were left out)."""
    h, ad_tol, f0_scale = p.h, p.ad_tol, p.f0_scale
    if sparse and _xp.size(p.f0) >= STREAM_COLUMN and not _xp.immutable(p.f0):
        # F's values kept where they differ from F(0), not whole (see _Moved)
        f0f = _xp.flat(p.f0)
        points = _Moved.each([_point(p, have, k * h / 4, k) for k in OFFSETS], f0f)
        narrowed = _on_support(p, h, points)
        if narrowed is not None:
            return narrowed
        shape = tuple(p.f0.shape)
        stencil = Stencil(h, tuple(_xp.ns(f0f).reshape(_Moved.whole(a, f0f), shape) for a in points))
    else:
        stencil = evaluate_level(p.F, h, have)
        if sparse:
            narrowed = _on_support(p, h, list(stencil.f))
            if narrowed is not None:
                return narrowed
    level0 = estimate(stencil, p.f0, p.u_oracle, ad_tol, f0_scale, outer=p.outer, point=p.point)
    value, err, noise = level0.value, level0.err, level0.noise
    shape = tuple(value.shape)
    status = _xp.zeros(shape, value, "int8")  # SMOOTH
    typical = max(f0_scale, level0.slope)
    # whether any element is flagged, and any unresolved as the status was made (all
    # SMOOTH): one read; the second serves where no suspect changes the status
    xp = _xp.ns(value)
    flagged, unresolved = _xp.read(xp.any(level0.kink), xp.any(_unresolved(err, value, status, typical)))
    suspects = _xp.nonzero(level0.kink) if flagged else np.zeros(0, np.int64)
    if suspects.size:
        suspects = suspects[~noise_explains(level0, suspects, ad_tol)]
    reasons: dict[int, str] = {}
    if suspects.size:
        with _xp.quiet():  # (a level's sides may be inf - inf: unsettled, not a warning)
            v_s, e_s, s_s = descend(p, level0, suspects)
        value = xp.reshape(_xp.put(_xp.copy(_xp.flat(value)), suspects, v_s), shape)
        err = xp.reshape(_xp.put(_xp.copy(_xp.flat(err)), suspects, e_s), shape)
        status = xp.reshape(_xp.put(_xp.flat(status), suspects, s_s), shape)
        unresolved = _xp.any_(_unresolved(err, value, status, typical))
    # (an output left out is 0 +- R1's modelled bound: unresolved against the same scales)
    left_out = unmoved and not (tol.NOISE_SAFETY * R1_WEIGHT / h) * level0.eps_f <= 0.5 * typical
    marked = left_out or bool(unresolved)
    if marked:
        # only then is the curvature worth its pass over the vector
        typical = max(typical, level0.curvature(status == SMOOTH))
        status = mark_unresolved(value, err, status, typical, reasons)
    # (without suspects or marks the status is as made, all SMOOTH: nothing to read)
    all_smooth = not suspects.size and not (marked and _xp.any_(status != SMOOTH))
    flagged = _xp.put(_xp.zeros(_xp.size(value), value, "bool"), suspects, True)
    flagged = _xp.ns(value).reshape(flagged, shape)
    return Reference(value, err, status, all_smooth, noise, reasons, typical, flagged, eps_f=level0.eps_f)


#: A column of at least this many outputs keeps each of its stencil's values
#: as where it differs from F(0) (a column moves few outputs), not whole.
STREAM_COLUMN = KEEP_POINTS


def _point(p: Problem, have: dict[int, Array], t: float, k: int) -> Callable[[], Array]:
    """F(t) flat, from ``have`` where it holds it (under offset k), when called."""
    return lambda: _xp.flat(have[k] if k in have else p.F(t))


@dataclasses.dataclass(frozen=True)
class _Moved:
    """F at one point of a column's stencil, held at host indices that take
    in every output where it differs from F(0) bit for bit (its value, or
    the sign of a zero), with F's values there beside F(0). Elsewhere F is
    F(0)."""

    idx: np.ndarray
    values: Array

    @staticmethod
    def of(a: Array, f0f: Array) -> Array | _Moved:
        """``a`` held so, or ``a`` itself where it differs in many places."""
        idx = _xp.nonzero(_differs(a, f0f))
        if idx.size > _xp.size(a) // 8:
            return a
        return _Moved(idx, a[_xp.index(idx, a)])

    @staticmethod
    def each(points: list[Callable[[], Array]], f0f: Array) -> list[Array | _Moved]:
        """``of`` of each point (made one at a time, in order), on a device
        in two reads, not one a point: the outputs the first point moves
        (the widest step: a column's other points move those or fewer) are
        read, every other point's values there are gathered, and whether
        any moves an output outside them is read once for all. A point that
        does is made again and held as ``of`` holds it."""
        first = _Moved.of(points[0](), f0f)
        if not isinstance(first, _Moved) or not first.idx.size or not _xp.device_floating(f0f):
            return [first, *(_Moved.of(make(), f0f) for make in points[1:])]
        xp = _xp.ns(f0f)
        at = _xp.index(first.idx, f0f)
        beyond = xp.ones(_xp.size(f0f), dtype=xp.bool, device=f0f.device)
        beyond[at] = False
        held, moves = [first], []
        for make in points[1:]:
            a = make()
            moves.append((_differs(a, f0f) & beyond).any())  # (torch: one kernel)
            held.append(_Moved(first.idx, a[at]))
        again = _xp.read(*moves)
        return [held[0], *(_Moved.of(make(), f0f) if o else m for make, m, o in zip(points[1:], held[1:], again))]

    @staticmethod
    def whole(a: Array | _Moved, f0f: Array) -> Array:
        """The flat array (bit for bit the value F returned)."""
        if not isinstance(a, _Moved):
            return a
        return _xp.put(_xp.copy(f0f), a.idx, a.values)

    @staticmethod
    def at_each(points: list[Array | _Moved], f0f: Array, support: np.ndarray) -> list[Array]:
        """flat(F)[support] of each point (host indices, ascending): F(0)
        there, with each point's values where it holds them. Points held at
        one index array (``each``'s) share where those lie in ``support``,
        worked out once."""
        sup = _xp.index(support, f0f)
        base = f0f[sup]
        placed: dict[int, tuple[Any, Any] | None] = {}  # id(idx) -> (positions in support, in idx)
        out = []
        for a in points:
            if not isinstance(a, _Moved):
                out.append(_xp.flat(a)[sup])
                continue
            if id(a.idx) not in placed:
                pos = np.searchsorted(support, a.idx)
                hit = pos < support.size
                hit[hit] = support[pos[hit]] == a.idx[hit]
                placed[id(a.idx)] = (
                    (_xp.index(pos[hit], f0f), _xp.index(np.flatnonzero(hit), f0f)) if hit.any() else None
                )
            at = placed[id(a.idx)]
            out.append(_xp.copy(base) if at is None else _xp.put(_xp.copy(base), at[0], a.values[at[1]]))
        return out


def _differs(a: Array, f0f: Array) -> Array:
    """Where ``a`` differs from F(0) bit for bit (its value, or the sign of a zero)."""
    xp = _xp.ns(a, f0f)
    if a.dtype == f0f.dtype == xp.float64:
        return a.view(xp.int64) != f0f.view(xp.int64)  # (one pass)
    with _xp.quiet():
        return (a != f0f) | (xp.signbit(a) != xp.signbit(f0f))


def _on_support(p: Problem, h: float, points: list[Array | _Moved]) -> Reference | None:
    """The measured reference worked out on the outputs the first step moves
    (or that are not finite at 0) and filled in elsewhere - None where every
    output moves. A column of the Jacobian moves few. An output whose nine
    values are equal has every difference 0: the estimate is 0, its bound the
    modelled noise's (R1's), unflagged; the whole vector's scales come out the
    same (such an output's |F(+-h)| is its |F(0)|: a floor under the stencil's
    scale). Where that bound is as large as the derivatives they are unreliable."""
    F = p.F
    shape = tuple(p.f0.shape)
    f0f = _xp.flat(p.f0)
    n = _xp.size(f0f)
    xp = _xp.ns(f0f)
    with _xp.quiet():
        moved = ~_xp.finite(f0f)
        shared: dict[int, tuple[np.ndarray, list[Array]]] = {}  # id(idx) -> (idx, the values held there)
        for a in points:
            if isinstance(a, _Moved):
                shared.setdefault(id(a.idx), (a.idx, []))[1].append(a.values)
            else:
                moved |= _xp.flat(a) != f0f
        for held_at, values in shared.values():  # (the points held at one index array: one pass)
            where = _xp.index(held_at, f0f)
            moved[where] = moved[where] | xp.any(xp.stack(values) != f0f[where], axis=0)
    idx = _xp.nonzero(moved)
    if idx.size == n:
        return None
    outer = _xp.fmax(f0f, where=~moved)  # the outputs left out: their |F(+-h)| is their |F(0)|
    at = _xp.index(idx, f0f)
    per_element, t = tolerance_parts(p.ad_tol, shape)
    have = dict(zip(OFFSETS, _Moved.at_each(points, f0f, idx)))
    part = dataclasses.replace(
        p, F=Line(lambda step: _xp.flat(F(step))[at]), f0=f0f[at], ad_tol=t[at] if per_element else t, outer=outer
    )
    sub = _measured(part, have, unmoved=True)
    err0 = (tol.NOISE_SAFETY * R1_WEIGHT / h) * sub.eps_f
    rest_unresolved = not err0 <= 0.5 * sub.typical  # (their value is 0)
    reasons = {int(idx[i]): why for i, why in (sub.reasons or {}).items()}

    def filled(fill: Any, part: Array, dtype: str) -> Array:
        return xp.reshape(_xp.put(_xp.full(n, fill, f0f, dtype), idx, part), shape)

    status = filled(UNRELIABLE if rest_unresolved else SMOOTH, sub.status, "int8")
    if rest_unresolved:
        for i in np.setdiff1d(np.arange(min(n, idx.size + 3)), idx)[:3].tolist():
            reasons.setdefault(
                i,
                f"the finite-difference error bound {err0:.3g} is as large as the derivatives "
                f"(about {sub.typical:.3g}): no step lies between the function's noise and its curvature",
            )
    return Reference(
        filled(0.0, sub.value, "float64"),
        filled(err0, sub.err, "float64"),
        status,
        sub.all_smooth and not rest_unresolved,
        None,  # (a column's noise and ladder flags serve no later test)
        reasons,
        sub.typical,
        None,
        eps_f=sub.eps_f,
    )


def _unresolved(err: Array, value: Array, status: Array, typical: float) -> Array:
    xp = _xp.ns(err)
    with _xp.quiet():
        return (status == SMOOTH) & ~(err <= 0.5 * (xp.abs(value) + typical))


def mark_unresolved(value: Array, err: Array, status: Array, typical: float, reasons: dict[int, str]) -> Array:
    """A smooth element whose error bound is as large as the derivatives around
    it (its own, and ``typical``: the vector's slope, or |F| since a step of
    t = 1 moves the input by its own scale) cannot tell a right derivative
    from a wrong one. Returns the status with those elements unreliable."""
    bad = _unresolved(err, value, status, typical)
    if not _xp.any_(bad):
        return status
    status = _xp.put(status, bad, UNRELIABLE)
    flat_value, flat_err = _xp.flat(value), _xp.flat(err)
    for i in _xp.nonzero(bad, limit=3):
        reasons[int(i)] = (
            f"the finite-difference error bound {float(flat_err[i]):.3g} is as large as the derivative "
            f"{float(flat_value[i]):.3g}: no step lies between the function's noise and its curvature"
        )
    return status
