"""The finite-difference oracle: J u along each probe direction, with fn's
noise measured, its kinks and jumps told apart (see fd). The excuses a
disagreement gets before FD may convict AD (see excuses) look at fn again
through it and replace its references. What FD cannot decide becomes
``fd_unreliable`` with its reason, never a mismatch."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import fd, tolerance as tol, xp as _xp
from .calls import CallFailed
from .context import Context

__all__ = ["FD_DIRECTIONS", "Oracle", "first_points"]

#: A point of at least this many elements is written into one buffer of the
#: oracle's, not a fresh array per evaluation of fn (whose memory would be
#: paged in anew each time, which costs more than writing it).
REUSED_POINT = 1 << 16

#: Directional checks run FD along this many of their directions: it checks all
#: of J u_1 element by element and, projected, every J^T v_a; the other
#: directions meet the VJP through the adjoint identity, which needs no FD and
#: is sharper. A full Jacobian needs every column.
FD_DIRECTIONS = 1


#: Where fn raises at a point of a direction's stencil but not at x itself
#: (its domain is thin there: boxes that must stay cubes, weights that must
#: sum to one), the reference along it is taken again at a step this many
#: times shorter, up to FINER_TRIES times, before the exception is said.
FINER_ON_RAISE = 8.0
FINER_TRIES = 3


class Oracle:
    """FD references along the probe directions (``refs``: one per FD direction)."""

    def __init__(self, ctx: Context) -> None:
        ev, precision, probes = ctx.ev, ctx.precision, ctx.probes
        self.ev, self.primal, self.precision, self.probes = ev, ctx.primal, precision, probes
        self.vectorise = ctx.options.vectorise  # fn at many points of a small check in one vectorised call
        self.coarse = ctx.coarse  # (the directions' references from the coarse model)
        self.batched = False  # whether any F value came from such a call
        self.refs = References()
        self._buffer: Any = None  # (see REUSED_POINT)
        self.notes: list[str] = []  # (said in the check's notes)
        #: direction -> F's values at the coarse model's points (or what fn
        #: raised there), its scales and the step (see first_points)
        self.prepared: dict[int, tuple[Any, tuple[float, float] | None, float]] = {}
        # (F at the model's offsets along every direction and at the point,
        # one vectorised call: the check's largest batch, its others' size)
        stencil = len(fd.MODEL_OFFSETS) * len(probes.us) + 1 if self._batches() else 0
        ev.uniform(stencil, sum(_xp.size(v) for v in ev.values) + _xp.size(ctx.primal.values))

    @functools.cached_property
    def f0(self) -> Any:
        """F(0): the finite differences' centre, from the same fn as their
        stencil (a compiled fn may round unlike its eager run); worked out
        where first asked for, after the AD runs."""
        ev, probes, precision = self.ev, self.probes, self.precision
        if ev.rule is None and ev.backend.compiles(ev.fn):
            return ev.primal(probes.flat.split(_xp.copy(probes.x)), precision.oracle, flat=True)
        return precision.f0

    @property
    def label(self) -> str:
        p = self.precision
        return p.name + (f" ({p.reason})" if p.reason else "")

    def F(self, u: np.ndarray | None, c: float = 1.0, *, j: int | None = None) -> fd.Line:
        """t -> fn(x + t c u) in the oracle precision; along the basis vector
        e_j instead when ``j`` is given (the point is then a copy of x with
        one element moved)."""
        x, flat, ev, oracle = self.probes.x, self.probes.flat, self.ev, self.precision.oracle
        if j is not None:

            def at_basis(t: float) -> Any:
                return self._at(lambda out: _xp.shifted(x, j, t * c, out))

            if not self._batches():
                return fd.Line(at_basis)
            return fd.Line(at_basis, lambda ts: self._many(_rows_shifted(x, j, [t * c for t in ts]), len(ts)))
        w, k = _mover(u, c)
        if _xp.immutable(x):  # jax: the point and its split in one compiled pass
            split = fd.compiled(_split_point, x, static=(3,))
            layout = (flat.offsets, flat.sizes, flat.shapes)

            def at_jax(t: float) -> Any:
                return ev.primal(list(split(x, w, t * k, layout)), oracle, flat=True)

            return fd.Line(at_jax)

        def at(t: float) -> Any:
            return self._at(lambda out: _xp.axpy(x, t * k, w, out))

        if not self._batches():
            return fd.Line(at)
        return fd.Line(at, lambda ts: self._many(_rows_along(x, [w], [[t * k for t in ts]]), len(ts)))

    def at_point(self, y: np.ndarray) -> Any:
        """fn at the flat host point ``y`` (a fresh array) in the oracle precision."""
        return self.ev.primal(self.probes.flat.split(y), self.precision.oracle, flat=True)

    def _at(self, write: Callable[[Any], Any]) -> Any:
        """fn at the flat point ``write(out)`` makes: written into the
        oracle's buffer on large arrays (out=None: a fresh array). fn may
        mutate it (the next point is written whole); an output that is the
        point or a view of it is copied before the buffer is written again."""
        x = self.probes.x
        if self._buffer is None and _xp.size(x) >= REUSED_POINT and not _xp.immutable(x):
            self._buffer = _xp.empty(_xp.size(x), x)
        point = write(self._buffer)
        out = self.ev.primal(self.probes.flat.split(point), self.precision.oracle, flat=True)
        if point is self._buffer and _xp.shares_memory(out, point):
            out = _xp.copy(out)
        return out

    def stencils(self, us: Any, cs: Any) -> tuple[list[dict[int, np.ndarray]], Callable[[], dict]] | None:
        """F's values at the model's offsets (fd.MODEL_OFFSETS) along every c u
        of ``us``, ``cs``, from one vectorised evaluation of fn (see ``_many``),
        as ``_by_direction`` gives them; None where there is none."""
        offsets = [k * self.precision.h / 4 for k in fd.MODEL_OFFSETS]
        movers = [_mover(u, c) for u, c in zip(us, cs)]
        steps = [[t * k for t in offsets] for _, k in movers]
        out = self._many(_rows_along(self.probes.x, [w for w, _ in movers], steps), len(us) * len(offsets))
        if out is None:
            return None
        return _by_direction(out, len(us))

    def _batches(self) -> bool:
        """Whether fn's points may go to one vectorised call (see ``_many``):
        where they may not, none is made for it."""
        return bool(self.vectorise and self.probes.full and self.ev.batches and _xp.on_host(self.probes.x))

    def _many(self, fill: Callable[[np.ndarray], None], k: int) -> list[np.ndarray] | None:
        """fn at k flat points in the oracle precision, in one vectorised call
        (Evaluator.primals) with the point itself beside them:
        ``fill(rows)`` writes the points into the rows of a (k, n) array.
        Only for a full Jacobian: a small check (at most FULL_MAX_IN inputs,
        so the batch stays small) whose modes are vectorised too, and whose
        failure is run again with plain calls. None where there is no such
        call, or where its value at the point itself is not bit for bit F(0),
        fn's own there (a vectorised fn that rounds otherwise): then each point
        is evaluated alone. Where they agree, each value is the one F gives."""
        x, ev, flat = self.probes.x, self.ev, self.probes.flat
        if not self._batches():
            return None
        points = np.empty((k + 1, x.size), dtype=x.dtype)
        points[0] = x
        fill(points[1:])
        stacks = [points[:, o : o + s].reshape((k + 1, *sh)) for o, s, sh in zip(flat.offsets, flat.sizes, flat.shapes)]
        out = ev.primals(stacks, self.precision.oracle)
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
        quick: Any = fd.UNKNOWN,
        coarse: bool = False,
        scales: tuple[float, float] | None = None,
        along: bool = False,
    ) -> fd.Reference:
        """FD reference for J u, run along c u (steps relative to the input's own
        scale; base step ``h``, default the oracle's) and returned in the units of u.
        ``model_first``: the rounding model's reference where it flags nothing
        (and agrees with ``ad``, the J u it will judge); see fd.model_reference.
        ``j``: along the basis vector e_j (``u`` unused): a column of the
        Jacobian, whose outputs mostly do not move; only those that do are
        estimated (see fd.reference's ``sparse``). ``point``: the magnitude
        at which the point and fn's terms round, in units of c (see
        fd.model_noise): at most 1 along a direction (|u_j| >= |x_j| / c), the
        default; along e_j see ``terms``. ``quick``, ``coarse``, ``scales``: see
        fd.reference. ``along``: ``ad_tol`` is along c u already (first_order's:
        the bounds are not held in u's units beside)."""
        p = self.precision
        if point is None:
            point = self.terms(c, column=j is not None)
        ad_tol = ad_tol if along else _along_c(ad_tol, c)
        problem = fd.Problem.of(
            self.F(u, c, j=j),
            self.f0,
            p.h if h is None else h,
            p.floor,
            p.u_oracle,
            ad_tol,
            ladder=ladder,
            f0_scale=p.f0_scale,
            inputs=self.probes.inputs_max,
            point=point,
        )
        ref = fd.reference(
            problem,
            model_first=model_first,
            ad=ad,
            sparse=j is not None,
            have=have,
            quick=quick,
            coarse=coarse,
            scales=scales,
            ad_scale=c,
        )
        return _in_units(self, ref, c)

    def column(self, j: int) -> tuple[Any, Any, bool]:
        """Column j of the Jacobian (J e_j, real units) by FD with steps
        relative to that element's scale, with its error; 0 where FD cannot
        decide. Also whether FD decided every element of a finite output
        (unread where the column is on a device: a 0-d array to read with
        the next read, or ``bool``)."""
        ref = self.fd(None, 0.0, self.probes.raw_at(j), j=j)
        if ref.all_smooth:
            return ref.value, ref.err, True
        usable, xp = self.usable(ref), _xp.ns(ref.value)
        complete: Any = xp.all(usable | ~self.primal.finite) if _xp.is_array(usable) else bool(usable)
        complete = bool(complete) if _xp.on_host(complete) else complete
        return xp.where(usable, ref.value, 0.0), xp.where(usable, ref.err, 0.0), complete

    def terms(self, c: float, column: bool) -> float:
        """The magnitude at which the point and fn's terms round, in units of
        the step scale c: along a column the largest input's, whatever the
        moved element's own (x + b rounds at |x| however small b is); along a
        direction at most 1 (|u_j| >= |x_j| / c)."""
        return max(self.probes.inputs_max, tol.TINY_SCALE) / c if column else 1.0

    def first_order(self, jvps: tuple[np.ndarray, ...], bound: Callable[[int], np.ndarray]) -> None:
        """The references the first-order comparisons judge: every column of a
        full Jacobian, FD_DIRECTIONS directions otherwise. ``bound(b)``: the
        JVP's rounding bound along b (the kink test allows for it)."""
        probes = self.probes
        us = probes.us if probes.full else probes.us[:FD_DIRECTIONS]
        # a full Jacobian's columns: small, many stencils - fn at all their
        # points at once, and the rounding model's references in one pass
        stencils = self.stencils(us, probes.cs) if probes.full else None  # (None where not vectorised)
        have, stacked = stencils if stencils is not None else (None, None)
        if probes.full and have is None and _xp.on_host(probes.x):
            # (fn's points one call each, the model's arithmetic still in one pass)
            have = _each(self, us, probes.cs)
        cs = probes.cs[: len(us)]
        points = [self.terms(c, column=probes.full) for c in cs]
        tols = [_along_c(bound(b), c) if jvps else 0.0 for b, c in enumerate(cs)]  # (along c u)
        # (the columns the rounding model decides, worked out together; None where it ran on none)
        modelled = _modelled(self, us, cs, tols, points, have, jvps, stacked) if have else None
        for b, u in enumerate(us):
            if modelled and modelled[b] is not None:
                self.refs.append(modelled[b])
                continue
            jv = jvps[b] if jvps else None
            h, floor, raised = self.precision.h, self.precision.floor, None
            ready, scales, at = self.prepared.pop(b, (None, None, None))  # (evaluated at step ``at``)
            for tried in range(FINER_TRIES + 1):
                if at != h:
                    ready = scales = None
                try:
                    if isinstance(ready, CallFailed):
                        raise ready
                    ref = self.fd(
                        u,
                        tols[b],
                        cs[b],
                        along=True,
                        model_first=True,
                        ad=jv,
                        point=points[b],
                        have=(have and have[b]) or ready,
                        quick=None if modelled else fd.UNKNOWN,  # (where the model did not hold: measured)
                        coarse=self.coarse,
                        h=h,
                        scales=scales,
                    )
                    break
                except CallFailed as e:
                    # (a column moves one element and a small check - the only one given its
                    # points - says what raised as it is; no step below the kink ladder's floor)
                    shorter = h / FINER_ON_RAISE
                    if probes.full or tried == FINER_TRIES or e.stage != "evaluating fn" or shorter < floor:
                        raise
                    h, raised = shorter, e.exc
            if h != self.precision.h:
                self.notes.append(
                    f"fn raised at the finite differences' points along {probes.direction_name(b)} but not at x "
                    f"({type(raised).__name__}: {str(raised)[:120]}; its inputs may be held to a thin set, as boxes "
                    f"that must stay cubes): FD took a step {self.precision.h / h:g}x shorter, for the rest of "
                    "the check"
                )
                # (every later evaluation - measuring, excuses, locating - steps from there)
                self.precision = dataclasses.replace(self.precision, h=h)
            self.refs.append(ref)

    def measured(self, b: int) -> fd.Reference:
        """Direction b's reference with fn's noise measured (done on demand:
        only a comparison about to fail, or an excuse for one, needs it)."""
        if self.refs[b].modelled:
            self.refs[b] = self.refs[b].measure()
        return self.refs[b]

    def close(self) -> None:
        """Drop what a reference's measure() holds on to (fn, the point)."""
        for ref in self.refs:
            ref.measure = None
        self._buffer = None
        self.prepared.clear()

    def usable(self, ref: fd.Reference) -> np.ndarray | bool:
        """The elements a comparison may judge: smooth or a kink, finite output."""
        if ref.all_smooth:
            return True
        return (ref.status <= fd.KINK) & self.primal.finite

    def decided(self) -> bool:
        """Whether FD decided any element along any direction (a comparison had something to judge)."""
        return any(_xp.any_((r.status <= fd.KINK) & self.primal.finite) for r in self.refs)


def first_points(oracle: Oracle) -> _xp.Asked | None:
    """The coarse first tier's points along the oracle's FD direction,
    evaluated now (after the AD runs, where first_order would) with the
    rounding model's scales of them asked for as device scalars, read with
    the AD runs' (modes.run): one read for both. None where there is no such
    tier, the arrays are not on a torch device, or fn raises there
    (first_order then evaluates them itself, as it does everywhere else)."""
    oracle.f0  # noqa: B018  (F(0) first, where fn is compiled: evaluated where it always was)
    probes = oracle.probes
    if probes.full or not oracle.coarse or not _xp.device_floating(probes.x):
        return None
    h = oracle.precision.h
    asked: list[Any] = []
    finishes = []
    for b in range(min(FD_DIRECTIONS, len(probes.us))):
        steps = [k * h / 4 for k in fd.COARSE_OFFSETS]
        try:
            have = dict(zip(fd.COARSE_OFFSETS, fd.values_at(oracle.F(probes.us[b], probes.cs[b]), steps)))
        except CallFailed as e:
            oracle.prepared[b] = (e, None, h)  # (raised again where first_order evaluates them: its retries)
            break
        scales = fd.model_scales(have, h)
        if scales is None:
            break
        asked += scales[0]
        finishes.append((b, have, len(scales[0]), scales[1]))
    # (the points' buffer is let go: the model's arithmetic comes next, and a
    # later evaluation, on doubt, makes another)
    oracle._buffer = None

    def take(values: list[float]) -> None:
        at = 0
        for b, have, k, finish in finishes:
            oracle.prepared[b] = (have, finish(values[at : at + k]), h)
            at += k

    return _xp.Asked(asked, take)


def _each(oracle: Oracle, us: Any, cs: Any) -> list[dict[int, np.ndarray]]:
    """F's values at the model's offsets along every c u of ``us``, ``cs``
    (host arrays), one plain call of fn a point, in the order F would make
    them; the points made together (bit for bit as F makes each), so that
    on a device they cross at once (Evaluator.primal_rows)."""
    x, flat = oracle.probes.x, oracle.probes.flat
    offsets = [k * oracle.precision.h / 4 for k in fd.MODEL_OFFSETS]
    movers = [_mover(u, c) for u, c in zip(us, cs)]
    points = np.empty((len(us) * len(offsets), x.size), dtype=x.dtype)
    _rows_along(x, [w for w, _ in movers], [[t * k for t in offsets] for _, k in movers])(points)
    stacks = [
        points[:, o : o + s].reshape((len(points), *sh)) for o, s, sh in zip(flat.offsets, flat.sizes, flat.shapes)
    ]
    return _by_direction(oracle.ev.primal_rows(stacks, oracle.precision.oracle), len(us))[0]


def _by_direction(out: list[np.ndarray], k: int) -> tuple[list[dict[int, np.ndarray]], Callable[[], dict]]:
    """F's values at the model's offsets along k directions (``out``: each
    direction's in the order of fd.MODEL_OFFSETS) by direction, by offset;
    and what stacks them by offset, a row per direction (fd.model_rows'
    ``stacked``: made only where the model's references are)."""
    n = len(fd.MODEL_OFFSETS)
    by_direction = [dict(zip(fd.MODEL_OFFSETS, out[b * n : (b + 1) * n])) for b in range(k)]
    return by_direction, lambda: {o: np.stack(out[q::n]) for q, o in enumerate(fd.MODEL_OFFSETS)}


def _modelled(
    oracle: Oracle,
    us: Any,
    cs: Any,
    tols: list[Any],
    points: list[float],
    have: list[dict[int, np.ndarray]],
    jvps: tuple[np.ndarray, ...],
    stacked: Callable[[], dict] | None,
) -> list[fd.Reference | None] | None:
    """A full Jacobian's references where the rounding model holds
    (fd.model_rows on F's values ``have``, ``stacked()`` by offset where
    given), as ``Oracle.fd`` makes each column's from it, worked out on the
    rows together: in the units of u (each row divided by its c, bit for bit
    as a column's own division), their status one array, the model's shift
    dropped (a full Jacobian projects no cotangent). Each reference's
    ``measure`` sets up its problem when first asked. None for a column
    whose model does not hold; None in all where the model cannot run (an
    output of no element or more than fd.CHUNK)."""
    p, probes = oracle.precision, oracle.probes
    if not 0 < _xp.size(oracle.f0) <= fd.CHUNK:
        return None
    ads = [_along_c(jvps[b], c) for b, c in enumerate(cs)] if jvps else None
    stack = stacked() if stacked is not None else None
    rows = fd.model_rows(have, oracle.f0, p.h, p.u_oracle, tols, p.f0_scale, ads, points, stack)
    ok, value, err, _, typicals = rows
    shape = tuple(oracle.f0.shape)
    scale = np.array(cs, dtype=value.dtype)[:, None]
    if (scale != 1.0).any():
        value /= scale  # (a column with c = 1 divides by 1: exact)
        err /= scale
    status = np.zeros((len(us), *shape), dtype=np.int8)
    finite = oracle.primal.all_finite
    if not finite:
        status[:, ~np.asarray(oracle.primal.finite)] = fd.UNRELIABLE

    def measure(b: int) -> fd.Reference:
        problem = fd.Problem.of(
            oracle.F(us[b], cs[b]),
            oracle.f0,
            p.h,
            p.floor,
            p.u_oracle,
            tols[b],
            f0_scale=p.f0_scale,
            inputs=probes.inputs_max,
            point=points[b],
        )
        kept = have[b] if _xp.size(oracle.f0) <= fd.KEEP_POINTS else {}  # (as fd.reference keeps them)
        return _in_units(oracle, fd.reference(problem, model_first=True, have=kept, quick=None), cs[b])

    return [
        fd.Reference(
            value[b].reshape(shape),
            err[b].reshape(shape),
            status[b],
            finite,
            typical=typicals[b],
            measure=functools.partial(measure, b),
            shift_terms=(),
        )
        if ok[b]
        else None
        for b in range(len(us))
    ]


def _in_units(oracle: Oracle, ref: fd.Reference, c: float) -> fd.Reference:
    """``ref`` (along c u) in the units of u, its arrays in place."""
    if c != 1.0:  # (the reference's own arrays: in place where arrays are mutable)
        ref.value /= c
        ref.err /= c
        if ref.shift is not None:
            ref.shift /= c
    if ref.shift is not None:
        # (a projection uses its Hoeffding term alone, weighted by its
        # cotangent: the vector is not kept; a full Jacobian has none)
        shift, vs = ref.shift, () if oracle.probes.full else oracle.probes.vs
        ref.shift_terms = tuple(tol.hoeffdings([functools.partial(lambda v: (v, shift), v) for v in vs]))
        ref.shift = None
    if not oracle.primal.all_finite:
        ref.status = _xp.put(ref.status, ~oracle.primal.finite, fd.UNRELIABLE)
        ref.all_smooth = False
    if ref.measure is not None:
        measure = ref.measure
        ref.measure = lambda: _in_units(oracle, measure(), c)
    return ref


class References(list):
    """The references, one per direction. Elements set aside (``set_aside``)
    stay aside when an excuse or a measurement replaces a reference."""

    def __init__(self) -> None:
        super().__init__()
        self.aside: dict[int, Any] = {}

    def set_aside(self, b: int, mask: Any) -> None:
        """Direction b's elements of ``mask`` are no longer compared."""
        self.aside[b] = mask if b not in self.aside else self.aside[b] | mask
        self[b] = self[b]

    def __setitem__(self, b: Any, ref: Any) -> None:
        mask = self.aside.get(b)
        if mask is not None and _xp.any_(mask):
            status = _xp.copy(_xp.ns(ref.status).broadcast_to(ref.status, tuple(mask.shape)))
            ref = dataclasses.replace(ref, status=_xp.put(status, mask, fd.ASIDE), all_smooth=False)
        super().__setitem__(b, ref)


def _split_point(x: Any, w: Any, t: float, layout: tuple) -> tuple[Any, ...]:
    """x + t w cut into the arguments (offsets, sizes, shapes)."""
    p = x + t * w
    return tuple(p[o : o + s].reshape(sh) for o, s, sh in zip(*layout))


def _along_c(a: Any, c: float) -> Any:
    """An AD tolerance or values in the units of a step along c u."""
    return a if c == 1.0 or a is None else a * c


def _rows_along(x: np.ndarray, ws: list[np.ndarray], steps: list[list[float]]) -> Callable[[np.ndarray], None]:
    """Writes the flat points x + t w, for each w of ``ws`` and t of its
    ``steps``, into the rows of an array: bit for bit each ``axpy(x, t, w)``
    (t w rounded in w's dtype, as a Python float times w is, then added)."""

    def fill(rows: np.ndarray) -> None:
        at = 0
        for w, ts in zip(ws, steps):
            block = rows[at : at + len(ts)]
            np.multiply(np.array(ts, dtype=w.dtype)[:, None], w[None, :], out=block)
            np.add(x[None, :], block, out=block)
            at += len(ts)

    return fill


def _rows_shifted(x: np.ndarray, j: int, deltas: list[float]) -> Callable[[np.ndarray], None]:
    """Writes copies of the flat x with each of ``deltas`` added to element j
    into the rows of an array: bit for bit each ``shifted(x, j, delta)``."""

    def fill(rows: np.ndarray) -> None:
        rows[:] = x
        rows[:, j] += np.array(deltas, dtype=rows.dtype)

    return fill


def _mover(u: Any, c: float) -> tuple[Any, float]:
    """(w, k) with t c u = (t k) w: t (c u) is (t c) u exactly when c is a
    power of two, as a directional check's normalisation is, and then no
    scaled copy of u is kept."""
    return (u, c) if math.frexp(c)[0] == 0.5 else (u * c, 1.0)
