"""Forward and reverse mode: J u and J^T v along the probes, validated.

``AD`` makes every AD call of a check (the first-order runs, and the later
ones the comparisons and localisation ask for). With the float64 tier on
(low-precision arguments, fn accepts float64) each call also runs in float64:
that value is what finite differences judge, and the native one is kept for
the precision comparison. ``run`` makes the first-order calls and returns
them as ``Modes``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import ModeNotAsked, ModeUnavailable
from .._result import ERROR, WARNING, Kind, Word
from . import tolerance as tol, xp as _xp
from .calls import BadStructure, CallFailed, Derivative
from .context import Context
from .levels import steep_limit
from .probes import Probes, below_steps

__all__ = ["AD", "CHECKED", "FAILED", "NOT_ASKED", "UNAVAILABLE", "ModeStatus", "Modes", "run"]


class ModeStatus(Word):
    """What became of a mode (JVP, VJP) in a check."""

    CHECKED = "checked"
    UNAVAILABLE = "unavailable"  # fn has no such rule (or the backend cannot run it)
    FAILED = "failed"  # it raised, or gave a derivative of the wrong structure
    NOT_ASKED = "not asked"  # left out by the check's ``modes`` (never run)


CHECKED, UNAVAILABLE, FAILED = ModeStatus.CHECKED, ModeStatus.UNAVAILABLE, ModeStatus.FAILED
NOT_ASKED = ModeStatus.NOT_ASKED


@dataclass(frozen=True)
class Modes:
    """The first-order AD values along the probes."""

    jvps: tuple[np.ndarray, ...]  # J u_b (float64 tier's where on), one per direction
    vjps: tuple[np.ndarray, ...]  # J^T v_a, flat over the inputs
    low_jvps: dict[int, np.ndarray]  # the native low-precision J u_b (float64 tier on)
    low_vjps: dict[int, np.ndarray]
    ad_out: str  # the dtype the compared AD values were computed in
    ad64: bool  # the compared values are the float64 tier's
    # A full Jacobian's columns and rows are single-element vectors for an
    # elementwise fn: their rounding floor comes from the whole Jacobian.
    jmax_jvp: float | None
    jmax_vjp: float | None
    #: (mode, probe) -> (the value, max |.| of each argument's part of it
    #: (VJP) or of all of it (JVP)), where its validation read them
    seen: dict[tuple[str, int], tuple[Any, list[float]]] = field(default_factory=dict)

    def tops(self, mode: str, key: int, value: Any) -> list[float] | None:
        """max |.| of ``value``'s parts (see ``seen``), where they were read (None: not)."""
        known = self.seen.get((mode, key))
        return known[1] if known is not None and known[0] is value else None


class AD:
    """Every AD call of one check, validated, with the float64 tier."""

    def __init__(self, ctx: Context) -> None:
        self.ev, self.primal, self.probes, self.report = ctx.ev, ctx.primal, ctx.probes, ctx.report
        self.ad64 = ctx.precision.ad64
        self.native_ad = ctx.precision.native_ad
        self.status: dict[str, str] = {}
        self.notes: list[str] = []
        self.dropped: str | None = None
        self.vectorise = ctx.options.vectorise
        self.vectorised = False  # whether any value came from a vectorised call
        #: mode -> probe -> mask of the elements where AD returned NaN/inf at a
        #: finite output (zeros in the values): FD decides them (see singular)
        self.holes: dict[str, dict[int, Any]] = {"JVP": {}, "VJP": {}}
        self.raw: dict[str, dict[int, Any]] = {"JVP": {}, "VJP": {}}  # (their values as AD gave them)
        #: what the holes leave out of projections (directions, cotangents: see singular)
        self.apart: tuple[set[int], set[int]] = (set(), set())
        #: cotangent -> mask of the VJP's NaN/inf elements beside NaN/inf
        #: outputs (0 x inf inside the rule: never compared, said)
        self.fed: dict[int, Any] = {}
        #: inputs below every FD step, and the slope no step checks there (levels.beneath): holes too
        if (below := ctx.probes.below) is None:  # (else worked out with the probes: see Probes.below)
            below = m if _xp.any_(m := below_steps(ctx.probes.x, ctx.precision)) else False
        self.steep = None if below is False else (below, steep_limit(ctx.probes, ctx.precision))
        self.beyond: dict[str, dict[int, Any]] = {"JVP": {}, "VJP": {}}  # mode -> probe -> those holes
        self.deferred = Deferred(self)

    def usable(self, mode: str) -> bool:
        return self.status.get(mode) not in (UNAVAILABLE, FAILED, NOT_ASKED)

    # -- one call ---------------------------------------------------------------------
    def jvp(
        self, u: np.ndarray, low: dict[int, np.ndarray] | None = None, b: int | None = None, given: Any = None
    ) -> np.ndarray | None:
        """J u, validated (None: the mode failed or is unavailable, said); with
        the float64 tier on, the float64 run (the native one kept in low[b]).
        ``given``: this direction's (native, float64) derivatives from a
        vectorised call (``vectorised``), validated here the same way."""
        value = self._jvp_native(u, given[0] if given else None)
        if value is None or not self.ad64:
            return None if value is None else self._holed("JVP", b, value)
        wide = given[1] if given else None
        v64 = self._ad64(lambda: _raised(wide) or self.ev.jvp(self.probes.flat.split(u), "float64"), "forward mode")
        if v64 is None:
            return self._holed("JVP", b, value)
        d = v64[0]
        d = d if self.primal.all_finite else _xp.ns(d).where(self.primal.finite, d, 0.0)
        d, value = self._holed("JVP", b, d, value)
        if low is not None and b is not None:
            low[b] = value
        return d

    def vjp(
        self, v: np.ndarray, low: dict[int, np.ndarray] | None = None, a: int | None = None, given: Any = None
    ) -> np.ndarray | None:
        g = self._vjp_native(v, given[0] if given else None, a)
        if g is None or not self.ad64:
            return None if g is None else self._holed("VJP", a, g)
        wide = given[1] if given else None
        parts = self._ad64(
            (lambda: wide)
            if wide is not None
            else (lambda: self.ev.vjp(v.reshape(self.primal.shape), self.primal.dtype, "float64")),
            "reverse mode",
        )
        if parts is None:
            return self._holed("VJP", a, g)
        g64 = _xp.concat(parts) if len(parts) > 1 else parts[0]
        if not self.primal.all_finite:
            xp = _xp.ns(g64)
            g64 = xp.where(xp.isfinite(g64), g64, 0.0)  # (the native run said which elements: fed)
        else:
            g64, g = self._holed("VJP", a, g64, g)
        if low is not None and a is not None:
            low[a] = g
        return g64

    def _holed(self, mode: str, key: int | None, value: Any, native: Any = None) -> Any:
        """``value`` (and the ``native`` run beside it) with zeros where
        either is NaN/inf at a finite output, those elements kept as holes of
        probe ``key`` for FD to decide (see singular). A call outside the
        first-order runs (key None) only gets the zeros: its holes are the
        first-order ones."""
        if self.deferred.finite(mode, key, value, native):
            return value if native is None else (value, native)
        if not (self.steep and key is not None) and _finite_on_host(value, native):
            return value if native is None else (value, native)  # (no hole: one pass on the host)
        bad = ~_xp.finite(value)
        if native is not None:
            bad = bad | ~_xp.finite(native)
        steep = _steep(self.steep, self.probes.full, mode, key, value) if self.steep and key is not None else None
        bad = bad if steep is None else bad | steep
        if mode == "JVP" and not self.primal.all_finite:
            bad = bad & self.primal.finite
        if not _xp.any_(bad):
            return value if native is None else (value, native)
        xp = _xp.ns(value)
        if key is not None:
            holes = self.holes[mode]
            holes[key] = bad if key not in holes else holes[key] | bad
            if steep is not None:
                self.beyond[mode][key] = steep & bad
            self.raw[mode][key] = value if native is None else xp.where(_xp.finite(value), native, value)
        value = xp.where(bad, 0.0, value)
        return value if native is None else (value, xp.where(bad, 0.0, native))

    def vectorised_calls(self, mode: str, probes: tuple[Any, ...]) -> list[tuple[Any, Any]] | None:
        """Every probe's native and float64-tier derivatives of ``mode`` from
        one vectorised call per precision (a JVP without one: plain calls staged,
        Evaluator.jvp_rows), for ``jvp``/``vjp`` to validate (a float64 entry
        None: asked one probe at a time). None when not vectorising: one call per probe."""
        if not self.vectorise or len(probes) < 2:
            return None
        ev, primal = self.ev, self.primal
        if mode == "JVP":
            sets = [self.probes.flat.split(u) for u in probes]
            native = ev.jvps(sets)
            if native is None and (staged := ev.jvp_rows(sets)) is not None:  # (fn as written: not run again)
                return list(zip(staged, (self.ad64 and ev.jvp_rows(sets, "float64")) or [None] * len(staged)))
            wide = ev.jvps(sets, "float64") if native is not None and self.ad64 else None
        else:
            cots = [_xp.ns(v).reshape(v, primal.shape) for v in probes]
            native = ev.vjps(cots, primal.dtype)
            wide = ev.vjps(cots, primal.dtype, "float64") if native is not None and self.ad64 else None
        if native is None:
            return None
        self.vectorised = True
        return [(d, None if wide is None else wide[k]) for k, d in enumerate(native)]

    def jvp_value(self, u: np.ndarray) -> np.ndarray | None:
        """J u for localisation: no validation, no findings (None on any trouble)."""
        try:
            d = self.ev.jvp(self.probes.flat.split(u), "float64" if self.ad64 else None)
        except (ModeUnavailable, CallFailed):
            return None
        if d.value is None:
            return None
        value = _xp.flat(d.value)
        return value if self.primal.all_finite else _xp.ns(value).where(self.primal.finite, value, 0.0)

    def rescaled(self, v: np.ndarray, u: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """VJP(3v)/3 and JVP(3u)/3: the same derivatives rounded differently
        (3 is not a power of two). How far they move is the rules' rounding at
        this point, measured - it can exceed the model when a rule cancels
        terms far larger than its result (a normalization over a slice of
        variance near eps). Run only to confirm a JVP-vs-VJP mismatch."""
        g3 = self.vjp(3.0 * v)
        jv3 = self.jvp(3.0 * u)
        return (None if g3 is None else g3 / 3.0), (None if jv3 is None else jv3 / 3.0)

    def beside(self, mode: str, key: Any) -> list[np.ndarray]:
        """The float64 AD of ``mode`` (direction b, or cotangent a's part k) at
        the point moved by +- the low-precision kink resolution of each element:
        what the derivative is on either side of a kink the native dtype cannot
        resolve."""
        probes, flat = self.probes, self.probes.flat
        native = max(self.native_ad & set(tol.LOW_PRECISION_LIMIT), key=tol.unit_roundoff)
        delta = tol.kink_resolution(native, probes.raw_scale)
        out = []
        for sign in (1.0, -1.0):
            points = flat.split(probes.x + sign * delta)
            try:
                if mode == "JVP":
                    d = self.ev.jvp(flat.split(probes.us[key]), "float64", points)
                    out.append(
                        _xp.flat(d.value)
                        if d.value is not None
                        else _xp.full(_xp.size(self.primal.values), np.nan, probes.x)
                    )
                else:
                    a, k = key
                    ds = self.ev.vjp(probes.vs[a].reshape(self.primal.shape), self.primal.dtype, "float64", points)
                    d = ds[k]
                    out.append(_xp.flat(d.value) if d.value is not None else _xp.zeros(flat.sizes[k], probes.x))
            except (ModeUnavailable, CallFailed, BadStructure):
                continue
        return out

    # -- the float64 tier -----------------------------------------------------------
    def _ad64(self, call: Callable[[], Any], what: str) -> list[np.ndarray] | None:
        """Run one AD call in float64; on any trouble, drop the float64 tier for
        the whole check (saying why) and return None."""
        flat = self.probes.flat
        try:
            out = call()
        except (ModeUnavailable, CallFailed, BadStructure) as e:
            return self._drop(f"{what} raised {type(getattr(e, 'exc', e)).__name__} on float64 inputs")
        ds = out if isinstance(out, list) else [out]
        values = []
        for k, d in enumerate(ds):
            if d.kind == "None" and isinstance(out, list):
                values.append(_xp.zeros(flat.sizes[k], self.probes.x))
                continue
            if d.kind != "array" or d.dtype != "float64":
                return self._drop(f"{what} returned {d.dtype or d.kind} for float64 inputs")
            values.append(_xp.flat(d.value))
        if isinstance(out, list) and any(_xp.size(v) != s for v, s in zip(values, flat.sizes)):
            return self._drop(f"{what} returned the wrong shape for float64 inputs")
        if not isinstance(out, list) and _xp.size(values[0]) != _xp.size(self.primal.values):
            return self._drop(f"{what} returned the wrong shape for float64 inputs")
        return values

    def _drop(self, why: str) -> None:
        self.ad64 = False
        self.dropped = why
        self.notes.append(f"AD ran in {'/'.join(sorted(self.native_ad))} only ({why}); FD judged it directly")
        return None

    # -- native calls, validated ------------------------------------------------------
    def _jvp_native(self, u: np.ndarray, d: Derivative | None = None) -> np.ndarray | None:
        primal = self.primal
        try:
            d = _raised(d) or self.ev.jvp(self.probes.flat.split(u))
        except ModeUnavailable as e:
            self.unavailable("JVP", e)
            return None
        except CallFailed as e:
            self.report.exception(e)
            self.status["JVP"] = FAILED
            return None
        if _invalid(self.report, self.ev.backend.name, d, "JVP", "output tangent", primal.shape, primal.dtype, None):
            self.status["JVP"] = FAILED
            return None
        value = _xp.flat(d.value)
        if primal.all_finite:
            return value  # (NaN/inf elements: holes, see _holed)
        return _xp.ns(value).where(primal.finite, value, 0.0)

    def _vjp_native(self, v: np.ndarray, ds: list[Derivative] | None = None, a: int | None = None) -> np.ndarray | None:
        ev, primal, flat = self.ev, self.primal, self.probes.flat
        try:
            ds = ds or ev.vjp(v.reshape(primal.shape), primal.dtype)
        except ModeUnavailable as e:
            self.unavailable("VJP", e)
            return None
        except BadStructure as e:
            self.report.add(Kind.WRONG_SHAPE, ERROR, str(e), pair=("VJP", "inputs"))
            self.status["VJP"] = FAILED
            return None
        except CallFailed as e:
            self.report.exception(e)
            self.status["VJP"] = FAILED
            return None
        parts = []
        for k, (i, d) in enumerate(zip(ev.wrt, ds)):
            if d.kind == "None":
                parts.append(_xp.zeros(flat.sizes[k], self.probes.x))
                continue
            if _invalid(
                self.report,
                self.ev.backend.name,
                d,
                "VJP",
                f"cotangent of argument {i}",
                flat.shapes[k],
                ev.dtypes[i],
                i,
            ):
                self.status["VJP"] = FAILED
                return None
            parts.append(_xp.flat(d.value))
        g = _xp.concat(parts) if len(parts) > 1 else parts[0]
        if primal.all_finite or _xp.all_finite(g):
            return g  # (NaN/inf elements at finite outputs: holes, see _holed)
        bad = ~_xp.finite(g)
        j = int(_xp.nonzero(bad, limit=1)[0])
        arg, idx = flat.locate(j)
        # The cotangent is 0 on NaN/inf outputs and 0 * inf = NaN: which
        # inputs feed those outputs is unknown, so say so and skip them.
        self.report.add(
            Kind.NONFINITE_GRADIENT,
            WARNING,
            f"reverse mode returned NaN/inf at {_xp.count(bad)} input element(s) (the first: argument "
            f"{arg} at {idx}), which may feed the NaN/inf outputs; those elements are not compared",
            pair=("VJP", "output"),
            argument=arg,
            input_index=idx,
        )
        if a is not None:
            self.fed[a] = bad if a not in self.fed else self.fed[a] | bad
        return _xp.ns(g).where(bad, 0.0, g)

    def unavailable(self, mode: str, why: str | ModeUnavailable, order: int = 1) -> None:
        if isinstance(why, ModeNotAsked):
            self.status[mode] = NOT_ASKED  # (said in the modes line, not a finding)
            return
        if self.status.get(mode) == UNAVAILABLE:
            return
        self.status[mode] = UNAVAILABLE
        self.report.add(
            Kind.MODE_UNAVAILABLE,
            WARNING,
            f"{mode} is unavailable ({why}); the other checks ran",
            pair=(mode, "-"),
            order=order,
        )


def _invalid(
    report: Any, backend: str, d: Derivative, mode: str, what: str, shape: tuple[int, ...], dtype: str, arg: int | None
) -> bool:
    """Whether ``d`` cannot be compared (wrong kind or shape: said). A wrong
    dtype is said too, but its values are still compared."""
    side = "inputs" if arg is not None else "output"
    wrong: tuple[str, str, tuple[str, str], int | None] | None = None  # (kind, message, pair, argument)
    invalid = True
    if d.kind.startswith("sparse") or d.kind == "BCOO array":
        wrong = (
            Kind.WRONG_LAYOUT,
            f"is a {d.kind}; expected a dense one, as its argument is: return it dense (grad.to_dense())",
            (mode, side),
            arg,
        )
    elif d.kind not in ("array", "None"):
        wrong = (Kind.WRONG_DTYPE, f"is a {d.kind}; expected a {backend} array", (mode, side), arg)
    elif d.kind == "None":
        wrong = (Kind.WRONG_SHAPE, f"is None; expected an array of shape {shape}", (mode, "output"), None)
    elif tuple(d.shape) != tuple(shape):
        wrong = (Kind.WRONG_SHAPE, f"has shape {tuple(d.shape)}; expected {tuple(shape)}", (mode, side), arg)
    else:
        invalid = False
        if d.dtype != dtype:
            whose = "argument" if arg is not None else "output"
            fix = f"return it in the {whose}'s dtype" + (
                " (g.astype(x.dtype), g.to(x.dtype))" if arg is not None else ""
            )
            wrong = (
                Kind.WRONG_DTYPE,
                f"has dtype {d.dtype}; expected {dtype}, as its {whose} has: {fix}",
                (mode, side),
                arg,
            )
    if wrong is not None:
        kind, message, pair, argument = wrong
        report.add(kind, ERROR, f"{mode}: the {what} {message}", pair=pair, argument=argument)
    return invalid


class Deferred:
    """The first-order runs' finiteness, read together. Where nothing but a
    NaN or inf can make a hole (no input below every step; a VJP, or an
    output finite everywhere), a torch run's extremes say it (NaN and inf
    reach them) - those of each argument's part of a VJP, or of a whole
    JVP - and they are its bound's scale too (``seen``). While ``pending``
    is a list, the runs' extremes are asked for and read by ``settle``, all
    at once; else at once."""

    def __init__(self, ad: AD) -> None:
        self.ad = ad
        self.seen: dict[tuple[str, int], tuple[Any, list[float]]] = {}  # (see Modes.seen)
        self.pending: list[tuple[str, int, Any, Any, int, list[Any]]] | None = None

    def finite(self, mode: str, key: int | None, value: Any, native: Any) -> bool:
        """Whether a first-order run's ``value`` (and ``native``) is finite,
        tested this way (for now, where it is pending: ``settle`` reads it);
        False where it is not, or not tested this way."""
        ad = self.ad
        if key is None or ad.steep is not None or (mode == "JVP" and not ad.primal.all_finite):
            return False
        if not _xp.device_floating(value):
            return False  # (nor are its parts)
        parts = ad.probes.flat.split(value) if mode == "VJP" else [value]
        arrays = [*parts, *(() if native is None else (native,))]
        if not all(_xp.device_floating(a) for a in arrays):
            return False
        if self.pending is not None:
            self.pending.append((mode, key, value, native, len(parts), arrays))
            return True
        return self._seen(mode, key, value, len(parts), _xp.extremes_of(*arrays))

    def _seen(self, mode: str, key: int, value: Any, parts: int, ends: list[tuple[float, float]]) -> bool:
        if not all(math.isfinite(lo) and math.isfinite(hi) for lo, hi in ends):
            return False
        self.seen[mode, key] = (value, [max(-lo, hi) for lo, hi in ends[:parts]])
        return True

    def settle(self, values: dict[str, list[Any]], low: dict[str, dict[int, Any]], asked: _xp.Asked | None) -> None:
        """The pending runs' finiteness, in one read (with what another
        stage ``asked``); a run found non-finite is validated in full
        (AD._holed), its values in ``values`` (mode -> the runs) and ``low``
        (mode -> the native runs) replaced."""
        pending, self.pending = self.pending or [], None
        ends, also = _xp.extremes_and([a for *_, arrays in pending for a in arrays], asked.scalars if asked else ())
        if asked is not None:
            asked.take(also)
        ends = iter(ends)
        for mode, key, value, native, parts, arrays in pending:
            if self._seen(mode, key, value, parts, [next(ends) for _ in arrays]):
                continue
            out = self.ad._holed(mode, key, value, native)  # (its holes kept, whether or not the mode failed later)
            if key >= len(values[mode]):
                continue
            if native is None:
                values[mode][key] = out
            else:
                values[mode][key], low[mode][key] = out


def _finite_on_host(value: Any, native: Any) -> bool:
    """Whether ``value`` (and ``native``, where given) are host arrays, finite everywhere."""
    arrays = (value,) if native is None else (value, native)
    return all(type(a) is np.ndarray and np.isfinite(a).all() for a in arrays)


def _steep(steep: tuple[Any, float], full: bool, mode: str, key: int, value: Any) -> Any:
    """Where ``value`` is steeper than any step checks at an input below every step (levels.beneath):
    a column of such an input, a random direction (every input is in it), or the element itself."""
    below, limit = steep
    with _xp.quiet():
        steep_ = _xp.ns(value).abs(value) > limit
    if mode == "VJP":
        return steep_ & below
    return steep_ if not full or bool(below[key]) else steep_ & False


def run(ad: AD, probes: Probes, meanwhile: Callable[[], _xp.Asked | None] | None = None) -> Modes:
    """J u_b for every direction and J^T v_a for every cotangent.
    ``meanwhile``: what another stage does after the AD calls, before their
    values are read; the device scalars it asks for are read with them."""
    low_jvps: dict[int, np.ndarray] = {}
    low_vjps: dict[int, np.ndarray] = {}
    ad.deferred.pending = []  # (every run's finiteness in one read)
    jvps = _every(ad, "JVP", ad.jvp, probes.us, low_jvps, probes.full)
    vjps = _every(ad, "VJP", ad.vjp, probes.vs, low_vjps, probes.full)
    asked = meanwhile() if meanwhile is not None else None
    ad.deferred.settle({"JVP": jvps, "VJP": vjps}, {"JVP": low_jvps, "VJP": low_vjps}, asked)
    if ad.dropped:
        # some calls ran in float64 before one could not: use the native runs throughout
        jvps = [low_jvps.get(b, j) for b, j in enumerate(jvps)]
        vjps = [low_vjps.get(a, g) for a, g in enumerate(vjps)]
        low_jvps.clear()
        low_vjps.clear()
    jv = tuple(j for j in jvps if j is not None)
    gs = tuple(g for g in vjps if g is not None)
    if jv:
        ad.status["JVP"] = CHECKED
    if gs:
        ad.status["VJP"] = CHECKED
    jmax_jvp = jmax_vjp = None
    if probes.full:
        if jv:
            jmax_jvp = max((_rows_absmax(jv) / _xp.host(probes.scale)[: len(jv)]).tolist())
            jmax_jvp = max(jmax_jvp, probes.slope_scale)
        if gs:
            jmax_vjp = max(max(_rows_absmax(gs).tolist()), probes.slope_scale)
    seen, ad.deferred.seen = ad.deferred.seen, {}  # (the dropped tier's runs not held by the AD)
    return Modes(
        jvps=jv,
        vjps=gs,
        low_jvps=low_jvps,
        low_vjps=low_vjps,
        ad_out="float64" if ad.ad64 else ad.primal.dtype,
        ad64=ad.ad64,
        jmax_jvp=jmax_jvp,
        jmax_vjp=jmax_vjp,
        seen={} if ad.dropped else seen,
    )


def _every(
    ad: AD,
    mode: str,
    call: Callable[[np.ndarray, dict[int, np.ndarray], int, Any], np.ndarray | None],
    probes: tuple[np.ndarray, ...],
    low: dict[int, np.ndarray],
    vectorise: bool,
) -> list[np.ndarray | None]:
    """``mode`` along every probe, until it fails or proves unavailable (then
    none). The full Jacobian's rows and columns come from one vectorised call
    where fn allows: on small inputs a call costs its fixed overhead, not its
    arithmetic."""
    given = ad.vectorised_calls(mode, probes) if vectorise else None
    out: list[np.ndarray | None] = []
    for k, p in enumerate(probes):
        if not ad.usable(mode):
            break
        out.append(call(p, low, k, None if given is None else given[k]))
    return out if ad.usable(mode) else []


def _raised(given: Any) -> Any:
    """A derivative a staged call gave (Evaluator.jvp_rows), or what it
    raised, raised here as the call's own."""
    if isinstance(given, Exception):
        raise given
    return given


def _rows_absmax(rows: Sequence[Any]) -> np.ndarray:
    """absmax of each array of ``rows`` (NaN propagates; 0 for an empty one),
    in one operation where they are host arrays of one size."""
    if all(isinstance(r, np.ndarray) for r in rows) and len({r.size for r in rows}) == 1:
        return np.max(np.abs(np.stack([np.ravel(r) for r in rows])), axis=1, initial=0.0)
    return np.array([_xp.absmax(r) for r in rows])
