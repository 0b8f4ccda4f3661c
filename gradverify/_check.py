"""``gv.check``: cross-check forward mode, reverse mode and finite differences.

Data flow (see shared/DESIGN.md): primal twice on copies (mutation,
nondeterminism) -> choose the FD oracle precision (float64 when fn accepts it)
-> directions u and cotangents v (seeded random signs times the local scale; the
basis vectors for small inputs) -> JVP J u, VJP J^T v, FD J u with kink
analysis -> element-wise comparisons JVP/FD, projected VJP/FD and JVP/VJP
(adjoint identity) -> localisation of a failing projection by bisection ->
findings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _fd, _observe
from . import _tolerance as tol
from ._errors import ArgumentTypeError, GradientError, ModeUnavailable, explain
from ._evaluate import BadStructure, CallFailed, Derivative, Evaluator
from ._result import ERROR, INFO, WARNING, ArraySummary, CheckResult, Finding, Kind
from ._validate import function_name, resolve_wrt, validate_arrays, validate_fn, validate_options
from .backends import backend_of

#: Inputs with at most this many differentiable elements (and outputs with at
#: most FULL_MAX_OUT) get the full Jacobian: n JVPs, m VJPs, 4n evaluations,
#: which is cheap there and names the exact (output, input) pair.
FULL_MAX_IN = 32
FULL_MAX_OUT = 128
#: Directional checks run FD along this many of their directions (see _first_order).
FD_DIRECTIONS = 1
# A JVP-vs-VJP difference within this many times the measured rounding of the
# rules (their change under a rescaled direction) is rounding, not a bug.
MEASURED_ROUNDING = 16.0


def check(
    fn: Callable[..., Any],
    *args: Any,
    wrt: int | Sequence[int] | None = None,
    order: int = 1,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    full: bool | None = None,
    directions: int = 2,
    name: str | None = None,
) -> CheckResult:
    """Check the derivatives of ``fn`` at ``args``.

    ``fn`` takes positional arrays of one backend (numpy, torch or jax) and
    returns one array. ``wrt`` picks the positional arguments to differentiate
    (default: every floating one; integer and bool arguments are constants).
    ``order=2`` also checks the derivatives of the JVP and VJP. ``seed`` fixes
    the random directions. ``rtol``/``atol`` replace the rounding model for AD
    values (the finite-difference error estimate is always added). ``full``
    forces (True) or forbids (False) the full Jacobian; ``directions`` is the
    number of random directions otherwise.
    """
    validate_fn(fn)
    validate_options(order, seed, rtol, atol, directions)
    options = {"wrt": wrt, "order": order, "seed": seed, "rtol": rtol, "atol": atol, "full": full}
    with _observe.call("check", fn, args, {**options, "directions": directions, "name": name}):
        return _check(fn, args, wrt, order, seed, rtol, atol, full, directions, name)


def _check(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    wrt: int | Sequence[int] | None,
    order: int,
    seed: int,
    rtol: float | None,
    atol: float | None,
    full: bool | None,
    directions: int,
    name: str | None,
) -> CheckResult:
    backend = backend_of(args)
    ev = Evaluator(fn, backend, args, ())
    validate_arrays(backend, args, ev.values)
    wrt_t = resolve_wrt(wrt, ev.floating, ev.dtypes)
    ev.wrt = wrt_t
    run = _Run(ev, seed=int(seed), rtol=rtol, atol=atol, full=full, k=int(directions))
    findings = run.run(order)
    label = name or function_name(fn)
    return CheckResult(
        findings=tuple(findings),
        function=label,
        backend=backend.name,
        seed=int(seed),
        order=order,
        inputs=tuple(_summary(f"arg{i}", v, d, i in wrt_t) for i, (v, d) in enumerate(zip(ev.values, ev.dtypes))),
        output=run.output_summary,
        oracle_dtype=run.oracle_name,
        strategy=run.strategy,
        modes=dict(run.modes),
        evaluations=dict(ev.counts),
        reproduce=_reproduce(label, len(args), wrt, order, seed, rtol, atol, full, directions),
        worst_ratio=run.worst_ratio,
        notes=tuple(run.notes),
    )


def assert_gradients(fn: Callable[..., Any], *args: Any, **options: Any) -> CheckResult:
    """``check`` that raises ``GradientError`` (an AssertionError) on failure."""
    result = check(fn, *args, **options)
    if not result.ok:
        raise GradientError(result)
    return result


# -----------------------------------------------------------------------------------
@dataclass
class _Flat:
    """The differentiable inputs as one flat vector of n elements."""

    shapes: list[tuple[int, ...]]
    sizes: list[int]
    offsets: list[int]
    args: tuple[int, ...]  # positional index of each segment

    @property
    def n(self) -> int:
        return self.offsets[-1] + self.sizes[-1]

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        return [flat[o : o + s].reshape(sh) for o, s, sh in zip(self.offsets, self.sizes, self.shapes)]

    def locate(self, j: int) -> tuple[int, tuple[int, ...]]:
        seg = int(np.searchsorted(self.offsets, j, side="right") - 1)
        idx = np.unravel_index(j - self.offsets[seg], self.shapes[seg]) if self.shapes[seg] else ()
        return self.args[seg], tuple(int(k) for k in idx)


@dataclass
class _ModeState:
    status: str = "not run"  # "checked" | "unavailable" | "failed" | "not run"
    results: dict[int, np.ndarray] = field(default_factory=dict)


class _Run:
    def __init__(
        self, ev: Evaluator, *, seed: int, rtol: float | None, atol: float | None, full: bool | None, k: int
    ) -> None:
        self.ev = ev
        self.seed = seed
        self.rtol, self.atol = rtol, atol
        self.full_opt = full
        self.k = k
        self.findings: list[Finding] = []
        self.modes: dict[str, str] = {}
        self.output_summary: ArraySummary | None = None
        self.oracle_name: str | None = None
        self.strategy = "not run"
        self.notes: list[str] = []
        self.float32_as = "float32"
        self.widened: dict[int, int] = {}  # direction -> wider noise tables measured
        self.refined: set[int] = set()  # directions estimated again with a finer step
        self._jvp_bounds: dict[int, np.ndarray] = {}
        # the largest |AD - reference| / bound over everything compared: how
        # near the check came to failing (gv.verify steers Hypothesis by it)
        self.worst_ratio = 0.0

    def _note(self, ratio: float) -> None:
        if np.isfinite(ratio) and ratio > self.worst_ratio:
            self.worst_ratio = float(ratio)

    # -- top level ------------------------------------------------------------------
    def run(self, order: int) -> list[Finding]:
        try:
            if not self._primal():
                return self.findings
            self._choose_oracle()
            self._directions()
            self._first_order()
            if order == 2:
                self._second_order()
        except CallFailed as e:
            self._exception(e)
        return self.findings

    def add(self, kind: str, level: str, message: str, **kw: Any) -> None:
        # A mode called once per direction repeats its structural faults: say each once.
        if any(f.kind == kind and f.message == message for f in self.findings):
            return
        self.findings.append(Finding(kind=kind, level=level, message=message, **kw))

    def _exception(self, e: CallFailed) -> None:
        self.add(
            Kind.EXCEPTION,
            ERROR,
            f"{type(e.exc).__name__} raised while {e.stage}: {e.exc}",
            detail=e.traceback,
        )

    # -- 1. the primal ------------------------------------------------------------------
    def _primal(self) -> bool:
        ev = self.ev
        try:
            out1, out_dtype, after = ev.primal_raw()
        except CallFailed as e:
            self._exception(e)
            return False
        if not np.issubdtype(out1.dtype, np.floating):
            raise ArgumentTypeError(
                explain(
                    "fn's return value",
                    "a floating-point array (derivatives need a real output)",
                    f"dtype {out_dtype}",
                    "return a float array, e.g. cast with .astype(float)",
                )
            )
        self.out_dtype = out_dtype
        self.out_shape = tuple(out1.shape)
        self.f_native = out1.astype(np.float64, copy=False).ravel()
        self.output_summary = _summary("output", out1, out_dtype, True)
        for i, (before, now) in enumerate(zip(ev.values, after)):
            if before.shape != now.shape or not np.array_equal(before, now, equal_nan=True):
                changed = np.argwhere(before != now) if before.shape == now.shape else np.zeros((1, before.ndim), int)
                first = tuple(int(k) for k in changed[0]) if len(changed) else ()
                self.add(
                    Kind.MUTATION,
                    ERROR,
                    f"fn mutates argument {i}: {len(changed)} element(s) changed in place, "
                    f"the first at index {first}; it must leave its inputs alone "
                    "(gradverify passed it a copy, your array is untouched)",
                    argument=i,
                    input_index=first,
                )
        out2, _, _ = ev.primal_raw()
        if not np.array_equal(out1, out2, equal_nan=True):
            d = np.abs(out1.astype(np.float64) - out2.astype(np.float64))
            d = np.where(np.isnan(d), np.inf, d)
            worst = np.unravel_index(int(np.argmax(d)), out1.shape) if out1.ndim else ()
            scale = float(np.max(np.abs(np.where(np.isfinite(out1), out1, 0)), initial=0.0))
            noise = tol.ad_rounding(out_dtype) * tol.unit_roundoff(out_dtype) * scale
            level = ERROR if float(np.max(d)) > noise else WARNING
            self.add(
                Kind.NONDETERMINISM,
                level,
                f"two evaluations of fn at the same inputs differ: {int((d > 0).sum())} element(s), "
                f"the largest by {float(np.max(d)):.3g} at output index {tuple(map(int, worst))}",
                output_index=tuple(map(int, worst)),
                values={"first": float(out1[worst]), "second": float(out2[worst])},
                error=float(np.max(d)),
                bound=noise,
                bound_reason=f"{tol.ad_rounding(out_dtype):g} u({out_dtype}) x max|output|: beyond rounding noise"
                if level == ERROR
                else "within rounding noise",
            )
        self.out_finite = np.isfinite(self.f_native)
        self.all_finite = bool(self.out_finite.all())
        if not self.out_finite.all():
            bad = np.flatnonzero(~self.out_finite)
            self.add(
                Kind.NONFINITE_OUTPUT,
                WARNING,
                f"fn's output is NaN/inf at {bad.size} element(s) (first at output index "
                f"{_unravel(int(bad[0]), self.out_shape)}); those elements are not checked",
                output_index=_unravel(int(bad[0]), self.out_shape),
            )
        return True

    # -- 2. the oracle precision ------------------------------------------------------
    def _choose_oracle(self) -> None:
        ev = self.ev
        float_dtypes = {ev.dtypes[i] for i in range(len(ev.dtypes)) if ev.floating[i]}
        self.native_u = max(tol.unit_roundoff(d) for d in float_dtypes | {self.out_dtype})
        self.oracle_reason = ""
        if float_dtypes == {"float64"} and self.out_dtype == "float64":
            self.oracle, self.oracle_name = None, "float64"
            self.f0 = self.f_native
        else:
            try:
                out64, dt, _ = ev.primal_raw("float64")
                ok = dt == "float64" and tuple(out64.shape) == self.out_shape
                why = f"fn returned {dt} for float64 inputs"
            except CallFailed as e:
                ok, why = False, f"fn raised {type(e.exc).__name__} on float64 inputs"
            if ok:
                self.oracle, self.oracle_name = "float64", "float64"
                self.f0 = out64.astype(np.float64).ravel()
            else:
                self.oracle = None
                self.oracle_name = self.out_dtype
                self.oracle_reason = why
                self.f0 = self.f_native
        self.f0_scale = float(np.max(np.abs(self.f0), where=np.isfinite(self.f0), initial=0.0))
        # Low-precision AD is also run in float64 when fn accepts float64: that
        # run is what FD judges (a wrong rule is wrong there too), the native
        # run is compared with it (rounding, or a low-precision code path).
        self.native_ad = {self.out_dtype} | {ev.dtypes[i] for i in ev.wrt}
        self.ad64 = self.oracle == "float64" and bool(self.native_ad & set(tol.LOW_PRECISION_LIMIT))
        self.low_jvps: dict[int, np.ndarray] = {}
        self.low_vjps: dict[int, np.ndarray] = {}
        self.ad64_dropped: str | None = None
        self.ad_out = self.out_dtype
        reduced = ev.backend.reduced_precision(ev.originals)
        self.notes = [note for note, _ in reduced]
        # float32 products in bfloat16 passes round like bfloat16: their limit
        self.float32_as = "bfloat16" if any(p == "bfloat16" for _, p in reduced) else "float32"
        self.u_oracle = tol.unit_roundoff(self.oracle_name)
        self.h = tol.base_step(self.oracle_name)
        self.floor = tol.ladder_floor(self.out_dtype if self.native_u > 0 else "float64", self.oracle_name)
        self.floor = max(self.floor, tol.KINK_RESOLUTION * self.native_u)

    # -- 3. directions ------------------------------------------------------------------
    def _directions(self) -> None:
        """Directions u and cotangents v. Each input element's step scale is its
        magnitude, or the rms of its argument where that is larger (floored so a
        step of it stays a normal float64). AD never sees those scales: a
        direction is handed to it divided by a power of two c that brings its
        largest element to [1, 2), and FD runs along c u, so subnormal, huge
        and zero inputs give tangents that neither underflow nor overflow;
        every comparison is in the units of the normalised u."""
        ev = self.ev
        segs = [ev.values[i] for i in ev.wrt]
        sizes = [int(s.size) for s in segs]
        self.flat = _Flat([tuple(s.shape) for s in segs], sizes, list(np.cumsum([0] + sizes[:-1])), ev.wrt)
        self.x = np.concatenate([s.astype(np.float64).ravel() for s in segs])
        raw = []
        for s in segs:
            a = np.abs(s.astype(np.float64).ravel())
            rms = _rms(a)
            raw.append(np.maximum(a, rms if rms > 0 else 1.0))
        self.raw_scale = np.maximum(np.concatenate(raw), tol.TINY_SCALE)
        # The slope a derivative formula works at: |f| over |x|. A rule that
        # cancels (1 - tanh^2 near saturation, elu's y + alpha) rounds
        # relative to it, not to its small result; the AD bound allows that.
        x_rms = _rms(self.x)
        self.inputs_max = float(np.max(np.abs(self.x), initial=0.0))
        self.slope_scale = self.f0_scale / x_rms if x_rms > 0 and np.isfinite(self.f0_scale) else 0.0
        n, m = self.flat.n, self.f0.size
        self.full = self.full_opt if self.full_opt is not None else (n <= FULL_MAX_IN and m <= FULL_MAX_OUT)
        rng = np.random.default_rng(self.seed)
        if self.full:
            # column j along e_j itself: J e_j is the real column
            self.scale = np.ones(n)
            self.us = [self._basis(j, n) for j in range(n)]
            self.cs = [float(c) for c in self.raw_scale]
            self.vs = [self._basis(i, m) for i in range(m)]
            self.strategy = f"full Jacobian ({m}x{n})"
        else:
            c = _power_of_two(float(np.max(self.raw_scale)))
            self.scale = self.raw_scale / c
            self.us = [_signs(rng, n, self.scale) for _ in range(self.k)]
            self.cs = [c] * self.k
            self.vs = [_signs(rng, m) for _ in range(self.k)]
            self.strategy = f"directional ({self.k} random-sign directions, seed {self.seed})"
        self.scale_max = float(np.max(self.scale, initial=0.0))
        # Non-finite outputs are not checked: give them no weight.
        if not self.all_finite:
            self.vs = [np.where(self.out_finite, v, 0.0) for v in self.vs]

    @staticmethod
    def _basis(j: int, n: int) -> np.ndarray:
        e = np.zeros(n)
        e[j] = 1.0
        return e

    def F(self, u: np.ndarray, c: float = 1.0) -> Callable[[float], np.ndarray]:
        """t -> fn(x + t c u) in the oracle precision."""
        w = u * c if c != 1.0 else u

        def at(t: float) -> np.ndarray:
            points = self.flat.split(self.x + t * w)
            return self.ev.primal(points, self.oracle).ravel()

        return at

    def fd(
        self, u: np.ndarray, ad_tol: np.ndarray | float, c: float = 1.0, *, ladder: bool = True, h: float | None = None
    ) -> _fd.Reference:
        """FD reference for J u, run along c u (steps relative to the input's own
        scale; base step ``h``, default the oracle's) and returned in the units of u."""
        ref = _fd.reference(
            self.F(u, c),
            self.f0,
            self.h if h is None else h,
            self.floor,
            self.u_oracle,
            ad_tol * c,
            ladder=ladder,
            f0_scale=self.f0_scale,
            inputs=self.inputs_max,
        )
        if c != 1.0:
            ref.value /= c
            ref.err /= c
        if not self.all_finite:
            ref.status[~self.out_finite] = _fd.UNRELIABLE
            ref.all_smooth = False
        return ref

    # -- 4. modes --------------------------------------------------------------------
    def _run_jvp(self, u: np.ndarray, b: int | None = None) -> np.ndarray | None:
        """J u, validated; with the float64 tier on, the float64 run (the native
        one is kept in low_jvps[b] for the precision comparison)."""
        value = self._run_jvp_native(u)
        if value is None or not self.ad64:
            return value
        v64 = self._ad64(lambda: self.ev.jvp(self.flat.split(u), "float64"), "forward mode")
        if v64 is None:
            return value
        if b is not None:
            self.low_jvps[b] = value
        d = v64[0]
        return d if self.all_finite else np.where(self.out_finite, d, 0.0)

    def _run_vjp(self, v: np.ndarray, a: int | None = None) -> np.ndarray | None:
        g = self._run_vjp_native(v)
        if g is None or not self.ad64:
            return g
        parts = self._ad64(lambda: self.ev.vjp(v.reshape(self.out_shape), self.out_dtype, "float64"), "reverse mode")
        if parts is None:
            return g
        g64 = np.concatenate(parts)
        if a is not None:
            self.low_vjps[a] = g
        return np.where(np.isfinite(g64), g64, 0.0) if not self.all_finite else g64

    def _ad64(self, call: Callable[[], Any], what: str) -> list[np.ndarray] | None:
        """Run one AD call in float64; on any trouble, drop the float64 tier for
        the whole check (saying why) and return None."""
        try:
            out = call()
        except (ModeUnavailable, CallFailed, BadStructure) as e:
            return self._drop_ad64(f"{what} raised {type(getattr(e, 'exc', e)).__name__} on float64 inputs")
        ds = out if isinstance(out, list) else [out]
        values = []
        for k, d in enumerate(ds):
            if d.kind == "None" and isinstance(out, list):
                values.append(np.zeros(self.flat.sizes[k]))
                continue
            if d.kind != "array" or d.dtype != "float64":
                return self._drop_ad64(f"{what} returned {d.dtype or d.kind} for float64 inputs")
            values.append(d.value.ravel())
        if isinstance(out, list) and any(v.size != s for v, s in zip(values, self.flat.sizes)):
            return self._drop_ad64(f"{what} returned the wrong shape for float64 inputs")
        if not isinstance(out, list) and values[0].size != self.f0.size:
            return self._drop_ad64(f"{what} returned the wrong shape for float64 inputs")
        return values

    def _drop_ad64(self, why: str) -> None:
        self.ad64 = False
        self.ad64_dropped = why
        self.notes.append(f"AD ran in {'/'.join(sorted(self.native_ad))} only ({why}); FD judged it directly")
        return None

    def _run_jvp_native(self, u: np.ndarray) -> np.ndarray | None:
        try:
            d = self.ev.jvp(self.flat.split(u))
        except ModeUnavailable as e:
            self._unavailable("JVP", str(e))
            return None
        except CallFailed as e:
            self._exception(e)
            self.modes["JVP"] = "failed"
            return None
        problem = self._validate(d, "JVP", "output tangent", self.out_shape, self.out_dtype, None)
        if problem:
            self.modes["JVP"] = "failed"
            return None
        value = d.value.ravel()
        bad = ~np.isfinite(value) & self.out_finite
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self.add(
                Kind.NONFINITE_GRADIENT,
                ERROR,
                f"forward mode returned {value[i]} at output index {_unravel(i, self.out_shape)} "
                f"where the output is finite ({bad.sum()} element(s))",
                pair=("JVP", "output"),
                output_index=_unravel(i, self.out_shape),
                values={"JVP": float(value[i]), "output": float(self.f_native[i])},
            )
            self.modes["JVP"] = "failed"
            return None
        return value if self.all_finite else np.where(self.out_finite, value, 0.0)

    def _run_vjp_native(self, v: np.ndarray) -> np.ndarray | None:
        ev = self.ev
        try:
            ds = ev.vjp(v.reshape(self.out_shape), self.out_dtype)
        except ModeUnavailable as e:
            self._unavailable("VJP", str(e))
            return None
        except BadStructure as e:
            self.add(Kind.WRONG_SHAPE, ERROR, str(e), pair=("VJP", "inputs"))
            self.modes["VJP"] = "failed"
            return None
        except CallFailed as e:
            self._exception(e)
            self.modes["VJP"] = "failed"
            return None
        parts = []
        for k, (i, d) in enumerate(zip(ev.wrt, ds)):
            shape = self.flat.shapes[k]
            if d.kind == "None":
                parts.append(np.zeros(self.flat.sizes[k]))
                continue
            if self._validate(d, "VJP", f"cotangent of argument {i}", shape, ev.dtypes[i], i):
                self.modes["VJP"] = "failed"
                return None
            parts.append(d.value.ravel())
        g = np.concatenate(parts)
        bad = ~np.isfinite(g)
        if not bad.any():
            return g
        j = int(np.flatnonzero(bad)[0])
        arg, idx = self.flat.locate(j)
        if not self.all_finite:
            # The cotangent is 0 on NaN/inf outputs and 0 * inf = NaN: which
            # inputs feed those outputs is unknown, so say so and skip them.
            self.add(
                Kind.NONFINITE_GRADIENT,
                WARNING,
                f"reverse mode returned NaN/inf at {int(bad.sum())} input element(s) (the first: argument "
                f"{arg} at {idx}), which may feed the NaN/inf outputs; those elements are not compared",
                pair=("VJP", "output"),
                argument=arg,
                input_index=idx,
            )
            return np.where(bad, 0.0, g)
        self.add(
            Kind.NONFINITE_GRADIENT,
            ERROR,
            f"reverse mode returned {g[j]} for argument {arg} at index {idx} while every output is "
            f"finite ({int(bad.sum())} element(s))",
            pair=("VJP", "output"),
            argument=arg,
            input_index=idx,
            values={"VJP": float(g[j])},
        )
        self.modes["VJP"] = "failed"
        return None

    def _validate(
        self, d: Derivative, mode: str, what: str, shape: tuple[int, ...], dtype: str, arg: int | None
    ) -> bool:
        if d.kind not in ("array", "None"):
            self.add(
                Kind.WRONG_DTYPE,
                ERROR,
                f"{mode}: the {what} is a {d.kind}; expected a {self.ev.backend.name} array",
                pair=(mode, "inputs" if arg is not None else "output"),
                argument=arg,
            )
            return True
        if d.kind == "None":
            self.add(
                Kind.WRONG_SHAPE,
                ERROR,
                f"{mode}: the {what} is None; expected an array of shape {shape}",
                pair=(mode, "output"),
            )
            return True
        if tuple(d.shape) != tuple(shape):
            self.add(
                Kind.WRONG_SHAPE,
                ERROR,
                f"{mode}: the {what} has shape {tuple(d.shape)}; expected {tuple(shape)}",
                pair=(mode, "inputs" if arg is not None else "output"),
                argument=arg,
            )
            return True
        if d.dtype != dtype:
            self.add(
                Kind.WRONG_DTYPE,
                ERROR,
                f"{mode}: the {what} has dtype {d.dtype}; expected {dtype}",
                pair=(mode, "inputs" if arg is not None else "output"),
                argument=arg,
            )
            return False  # values are still comparable; keep checking them
        return False

    def _unavailable(self, mode: str, why: str) -> None:
        if self.modes.get(mode) == "unavailable":
            return
        self.modes[mode] = "unavailable"
        self.add(
            Kind.MODE_UNAVAILABLE,
            WARNING,
            f"{mode} is unavailable ({why}); the other checks ran",
            pair=(mode, "-"),
        )

    # -- 5. first order -----------------------------------------------------------------
    def _first_order(self) -> None:
        jvps: list[np.ndarray | None] = []
        for b, u in enumerate(self.us):
            if self.modes.get("JVP") in ("unavailable", "failed"):
                break
            jvps.append(self._run_jvp(u, b))
        if self.modes.get("JVP") in ("unavailable", "failed"):
            jvps = []
        vjps: list[np.ndarray | None] = []
        for a, v in enumerate(self.vs):
            if self.modes.get("VJP") in ("unavailable", "failed"):
                break
            vjps.append(self._run_vjp(v, a))
        if self.modes.get("VJP") in ("unavailable", "failed"):
            vjps = []
        if self.ad64_dropped:
            # some calls ran in float64 before one could not: use the native runs throughout
            jvps = [self.low_jvps.get(b, j) for b, j in enumerate(jvps)]
            vjps = [self.low_vjps.get(a, g) for a, g in enumerate(vjps)]
            self.low_jvps.clear()
            self.low_vjps.clear()
        # the dtype the compared AD values were computed in
        self.ad_out = "float64" if self.ad64 else self.out_dtype
        self.jvps = [j for j in jvps if j is not None]
        self.vjps = [g for g in vjps if g is not None]
        if self.jvps:
            self.modes["JVP"] = "checked"
        if self.vjps:
            self.modes["VJP"] = "checked"

        # A full Jacobian's columns and rows are single-element vectors for an
        # elementwise fn: their rounding floor comes from the whole Jacobian.
        self.jmax_jvp = self.jmax_vjp = None
        if self.full:
            if self.jvps:
                self.jmax_jvp = max(float(np.max(np.abs(jv))) / s for jv, s in zip(self.jvps, self.scale))
                self.jmax_jvp = max(self.jmax_jvp, self.slope_scale)
            if self.vjps:
                self.jmax_vjp = max(float(np.max(np.abs(g))) for g in self.vjps)
                self.jmax_vjp = max(self.jmax_vjp, self.slope_scale)
        self.refs: list[_fd.Reference] = []
        # FD along the first direction only when directional: it checks all of
        # J u_1 element by element and, projected, every J^T v_a; the other
        # directions meet the VJP through the adjoint identity, which needs no
        # FD and is sharper. A full Jacobian needs every column.
        fd_us = self.us if self.full else self.us[:FD_DIRECTIONS]
        for b, u in enumerate(fd_us):
            ad_t = self._jvp_bound(self.jvps[b], b) if self.jvps else 0.0
            self.refs.append(self.fd(u, ad_t, self.cs[b]))
        self.modes["FD"] = f"{self.oracle_name}" + (f" ({self.oracle_reason})" if self.oracle_reason else "")
        jvp_ok = self._compare_jvp_fd() if self.jvps else False
        vjp_fd_ok = self._compare_vjp_fd(jvp_ok) if self.vjps else True
        # after the comparisons: wide-noise measurements may have made elements unreliable
        self._report_kinks()
        if self.jvps and self.vjps:
            self._compare_adjoint(jvp_ok, vjp_fd_ok)
        if self.low_jvps and jvp_ok:
            self._compare_precision("JVP")
        if self.low_vjps and vjp_fd_ok:
            self._compare_precision("VJP")
        if not self.jvps and not self.vjps:
            self.modes.setdefault("JVP", "unavailable")
            self.modes.setdefault("VJP", "unavailable")

    def _g_bound(self, g: np.ndarray) -> np.ndarray:
        """AD rounding bound of a VJP result (real units, per input element)."""
        parts = [
            tol.ad_bound(
                p,
                "float64" if self.ad64 else self.ev.dtypes[i],
                self.rtol,
                self.atol,
                self.jmax_vjp if self.full else max(float(np.max(np.abs(p), initial=0.0)), self.slope_scale),
            )
            for p, i in zip(self.flat.split(g), self.ev.wrt)
        ]
        return np.concatenate([p.ravel() for p in parts])

    def _jvp_bound(self, jv: np.ndarray, b: int) -> np.ndarray:
        """AD rounding bound of the JVP along direction b (that direction's units)."""
        cache = self._jvp_bounds
        if b < len(self.jvps) and jv is self.jvps[b] and b in cache:
            return cache[b]
        if self.full:
            scale = None if self.jmax_jvp is None else self.jmax_jvp * self.scale[b]
        else:
            scale = max(float(np.max(np.abs(jv), initial=0.0)), self.slope_scale * self.scale_max)
        bound = tol.ad_bound(jv, self.ad_out, self.rtol, self.atol, scale)
        if b < len(self.jvps) and jv is self.jvps[b]:
            cache[b] = bound
        return bound

    def _report_kinks(self) -> None:
        """One inconclusive finding per kind of non-smooth point found."""
        for status, kind, what in (
            (_fd.KINK, Kind.NONDIFFERENTIABLE, "non-differentiable point (a kink)"),
            (_fd.JUMP, Kind.DISCONTINUITY, "discontinuity (a jump)"),
            (_fd.UNRELIABLE, Kind.FD_UNRELIABLE, "finite differences cannot decide"),
        ):
            hits = [
                (b, i) for b, r in enumerate(self.refs) for i in np.flatnonzero((r.status == status) & self.out_finite)
            ]
            if not hits:
                continue
            b, i = hits[0]
            r = self.refs[b]
            where, arg, idx = self._where(b, i)
            values = {}
            if status == _fd.KINK:  # the hull of the two one-sided derivatives (which side is which is not kept)
                values = {"lower": float(self._unscale(b, r.lo[i])), "upper": float(self._unscale(b, r.hi[i]))}
            count = len({(i if not self.full else (b, i)) for b, i in hits})
            reason = None
            if status == _fd.UNRELIABLE:
                reason = (r.reasons or {}).get(int(i)) or (
                    "the estimates did not settle as the step shrank: a feature of fn smaller than the step "
                    "(an eps, a period, a jump that is no jump), or noise as large as the slope"
                )
            self.add(
                kind,
                INFO if status == _fd.KINK else WARNING,
                f"{what} at {count} element(s), e.g. {where}: inconclusive there; "
                + (
                    "AD values are accepted between the one-sided derivatives"
                    if status == _fd.KINK
                    else "those elements are not compared"
                ),
                argument=arg,
                input_index=idx,
                output_index=_unravel(int(i), self.out_shape),
                values=values,
                where=self._direction_name(b),
                detail=reason,
            )

    def _where(self, b: int, i: int) -> tuple[str, int | None, tuple[int, ...] | None]:
        out_idx = _unravel(int(i), self.out_shape)
        if self.full:
            arg, idx = self.flat.locate(b)
            x = self.x[b]
            return f"output {out_idx} w.r.t. argument {arg} {idx} (x = {x:.17g})", arg, idx
        return f"output {out_idx}", None, None

    def _unscale(self, b: int, value: float) -> float:
        return value / self.scale[b] if self.full else value

    def _direction_name(self, b: int) -> str:
        if self.full:
            arg, idx = self.flat.locate(b)
            return f"column for argument {arg} {idx}"
        return f"random direction {b + 1} of {len(self.us)} (seed {self.seed})"

    # -- comparisons -----------------------------------------------------------------
    def _violation(self, ad: np.ndarray, ref: _fd.Reference, ad_tol: np.ndarray) -> np.ndarray:
        """By how much ``ad`` lies outside the reference interval widened by its
        rounding bound (positive: a mismatch); -inf where nothing is compared."""
        over = np.abs(ad - ref.value)
        over -= ref.err
        over -= ad_tol
        return over if ref.all_smooth else np.where(self._usable(ref), over, -np.inf)

    def _usable(self, ref: _fd.Reference) -> np.ndarray | bool:
        if ref.all_smooth:
            return True
        return (ref.status <= _fd.KINK) & self.out_finite

    def _compare_jvp_fd(self) -> bool:
        ratio_before = self.worst_ratio
        worst = None
        count = 0
        for b, (jv, ref) in enumerate(zip(self.jvps, self.refs)):
            t = self._jvp_bound(jv, b)
            viol = self._violation(jv, ref, t)
            usable = viol > -np.inf
            if usable.any():
                self._note(np.max((np.abs(jv - ref.value) / (t + ref.err + 1e-300))[usable]))
            bad = np.flatnonzero(viol > 0)
            count += bad.size
            if bad.size:
                i = int(bad[np.argmax(viol[bad] / (t[bad] + ref.err[bad] + 1e-300))])
                ratio = (abs(jv[i] - ref.value[i])) / (t[i] + ref.err[i] + 1e-300)
                if worst is None or ratio > worst[0]:
                    worst = (ratio, b, i, t[i])
        if worst is None:
            return True
        b = worst[1]
        excess = self._violation(self.jvps[b], self.refs[b], self._jvp_bound(self.jvps[b], b))
        if self._step_dependent(b, excess) or self._explained_by_wide_noise(b, excess):
            self.worst_ratio = ratio_before
            return self._compare_jvp_fd()
        _, b, i, t_i = worst
        ref = self.refs[b]
        jv = self.jvps[b]
        out_idx = _unravel(i, self.out_shape)
        if self.full:
            arg, idx = self.flat.locate(b)
            s = self.scale[b]
            ad, fdv, bound = jv[i] / s, ref.value[i] / s, (t_i + ref.err[i]) / s
            where = self._direction_name(b)
        else:
            arg, idx, ad, fdv, bound = self._locate_jvp(b, i)
            where = f"located by bisection from {self._direction_name(b)}"
        kink = ref.status[i] == _fd.KINK
        self.add(
            Kind.MISMATCH,
            ERROR,
            f"forward mode disagrees with finite differences: d output{list(out_idx)} / d arg{arg}{list(idx)}"
            + (" lies outside the one-sided derivatives at a kink" if kink else "")
            + f" ({count} element(s) over the bound)",
            pair=("JVP", "FD"),
            argument=arg,
            input_index=idx,
            output_index=out_idx,
            values={"JVP": float(ad), "FD": float(fdv)},
            error=float(abs(ad - fdv)),
            bound=float(bound),
            bound_reason=self._bound_reason(kink),
            where=where,
        )
        return False

    def _bound_reason(self, kink: bool) -> str:
        ad = (
            f"user atol {self.atol or 0:g} + rtol {self.rtol or 0:g} x |AD|"
            if (self.rtol is not None or self.atol is not None)
            else f"AD rounding {tol.ad_rounding(self.ad_out):g} u({self.ad_out}) x (|AD| + max|AD|)"
        )
        if kink:
            return f"one-sided derivatives (FD in {self.oracle_name}) with their error bounds + {ad}"
        return (
            f"FD error: Richardson difference x{tol.FD_SAFETY:g} (steps h, h/2, h/4 in {self.oracle_name}) "
            f"+ fn's measured noise x{tol.NOISE_SAFETY:g} + {ad}"
        )

    def _ref_for_projection(self, b: int) -> tuple[np.ndarray, np.ndarray] | None:
        """FD reference for J u_b as (value, half-width), with unusable elements
        replaced by the JVP's values when there is one."""
        ref = self.refs[b]
        if ref.all_smooth:
            return ref.value, ref.err
        usable = self._usable(ref)
        value, err = ref.value.copy(), ref.err.copy()
        missing = ~usable & self.out_finite
        if missing.any():
            if not self.jvps:
                return None
            value[missing] = self.jvps[b][missing]
            err[missing] = self._jvp_bound(self.jvps[b], b)[missing]
        value[~self.out_finite] = 0.0
        err[~self.out_finite] = 0.0
        return value, err

    def _projection_terms(self) -> None:
        """What every projection comparison shares, computed once: <J^T v_a, u_b>
        and the Hoeffding term of the VJP's rounding. Directions are random signs
        times the local scale, so |u_b| = scale and (u_b g)^2 = (scale g)^2."""
        self.lhs = [[float(g @ u) for u in self.us] for g in self.vjps]
        self.gbs = [self._g_bound(g) for g in self.vjps]
        self.g_terms = [tol.hoeffding(self.scale, gb) for gb in self.gbs]

    def _worst_projection(self, rhs_and_bound: Callable[[int, int], tuple[float, float] | None]) -> tuple | None:
        worst = None
        for a in range(len(self.vjps)):
            for b in range(len(self.us)):
                rb = rhs_and_bound(a, b)
                if rb is None:
                    continue
                rhs, bound = rb
                lhs = self.lhs[a][b]
                bound += self.g_terms[a]
                ratio = abs(lhs - rhs) / (bound + 1e-300)
                self._note(ratio)
                if ratio > 1 and (worst is None or ratio > worst[0]):
                    worst = (ratio, a, b, lhs, rhs, bound)
        return worst

    def _compare_vjp_fd(self, jvp_ok: bool) -> bool:
        if self.full:
            return self._compare_vjp_full(("VJP", "FD"))
        self._projection_terms()
        refs = [self._ref_for_projection(b) for b in range(len(self.refs))]
        # v is +-1 on finite outputs and err is 0 elsewhere: (v err)^2 = err^2
        fd_terms = [None if r is None else tol.hoeffding(1.0, r[1]) for r in refs]

        def rhs(a: int, b: int) -> tuple[float, float] | None:
            r = refs[b] if b < len(refs) else None
            return None if r is None else (float(self.vs[a] @ r[0]), fd_terms[b])

        ratio_before = self.worst_ratio
        worst = self._worst_projection(rhs)
        if worst is None:
            return True
        _, a, b, lhs, rhs_v, bound = worst
        # (When the JVP agreed with FD along this direction element by element,
        # FD's projection is the JVP's within its bound: noise is no excuse.)
        if not jvp_ok and self._explained_by_wide_noise(b, abs(lhs - rhs_v) - bound, self.vs[a]):
            self.worst_ratio = ratio_before
            return self._compare_vjp_fd(jvp_ok)
        _, a, b, lhs, rhs_v, bound = worst
        self._report_vjp(a, b, lhs, rhs_v, bound, ("VJP", "FD"), use_jvp=jvp_ok)
        return False

    def _compare_vjp_full(self, pair: tuple[str, str]) -> bool:
        """Full Jacobian: row i from VJP(e_i) against column j from FD(e_j)."""
        m, n = self.f0.size, self.flat.n
        J = np.stack(self.vjps) if self.vjps else np.zeros((0, n))  # (m, n) in real units
        ratio_before = self.worst_ratio
        worst = None
        count = 0
        for j, ref in enumerate(self.refs):
            s = self.scale[j]
            usable = np.broadcast_to(self._usable(ref), (m,))
            for i in range(m):
                if not usable[i]:
                    continue
                ad = J[i, j]
                t = self._g_bound(J[i])[j]
                over = max(ref.lo[i] / s - ad, ad - ref.hi[i] / s) - t
                self._note(abs(ad - ref.value[i] / s) / (t + ref.err[i] / s + 1e-300))
                if over > 0:
                    count += 1
                    ratio = abs(ad - ref.value[i] / s) / (t + ref.err[i] / s + 1e-300)
                    if worst is None or ratio > worst[0]:
                        worst = (ratio, i, j, ad, ref.value[i] / s, t + ref.err[i] / s, ref.status[i] == _fd.KINK)
        if worst is None:
            return True
        _, i, j, ad, fdv, bound, kink = worst
        excess = np.full(m, -np.inf)
        excess[i] = abs(ad - fdv) - bound
        if self._step_dependent(j, excess) or (not kink and self._explained_by_wide_noise(j, excess)):
            self.worst_ratio = ratio_before
            return self._compare_vjp_full(pair)
        _, i, j, ad, fdv, bound, kink = worst
        arg, idx = self.flat.locate(j)
        out_idx = _unravel(i, self.out_shape)
        self.add(
            Kind.MISMATCH,
            ERROR,
            f"reverse mode disagrees with finite differences: d output{list(out_idx)} / d arg{arg}{list(idx)}"
            + (" lies outside the one-sided derivatives at a kink" if kink else "")
            + f" ({count} Jacobian element(s) over the bound)",
            pair=pair,
            argument=arg,
            input_index=idx,
            output_index=out_idx,
            values={"VJP": float(ad), "FD": float(fdv)},
            error=float(abs(ad - fdv)),
            bound=float(bound),
            bound_reason=self._bound_reason(bool(kink)),
            where=f"full Jacobian, row {out_idx}",
        )
        return False

    def _rescaled(self, v: np.ndarray, u: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """VJP(3v)/3 and JVP(3u)/3: the same derivatives rounded differently
        (3 is not a power of two). How far they move is the rules' rounding
        at this point, measured - it can exceed the model when a rule cancels
        terms far larger than its result (a normalization over a slice of
        variance near eps). Run only to confirm a JVP-vs-VJP mismatch."""
        g3 = self._run_vjp(3.0 * v)
        jv3 = self._run_jvp(3.0 * u)
        return (None if g3 is None else g3 / 3.0), (None if jv3 is None else jv3 / 3.0)

    def _compare_adjoint(self, jvp_ok: bool, vjp_fd_ok: bool) -> None:
        """<v, J u> from JVP against <J^T v, u> from VJP: no FD, rounding only.

        Run when both modes passed against FD: it is the sharper test (its bound
        is AD rounding alone), and when either failed it would only repeat that."""
        if not (jvp_ok and vjp_fd_ok):
            return
        if self.full:
            self._compare_adjoint_full()
            return
        jv_terms = [
            tol.hoeffding(np.where(self.out_finite, 1.0, 0.0), self._jvp_bound(jv, b)) for b, jv in enumerate(self.jvps)
        ]
        worst = self._worst_projection(lambda a, b: (float(self.vs[a] @ self.jvps[b]), jv_terms[b]))
        if worst is None:
            return
        _, a, b, lhs, rhs, bound = worst
        g3, jv3 = self._rescaled(self.vs[a], self.us[b])
        if g3 is not None and jv3 is not None:
            measured = abs(float(g3 @ self.us[b]) - lhs) + abs(float(self.vs[a] @ jv3) - rhs)
            if abs(lhs - rhs) <= bound + MEASURED_ROUNDING * measured:
                return
        self._report_vjp(a, b, lhs, rhs, bound, ("JVP", "VJP"), use_jvp=True)

    def _compare_adjoint_full(self) -> None:
        J_r = np.stack(self.vjps)  # (m, n)
        J_f = np.stack([jv / s for jv, s in zip(self.jvps, self.scale)], axis=1)  # (m, n)
        t = tol.ad_bound(J_f, self.ad_out, self.rtol, self.atol, self.jmax_jvp) + tol.ad_bound(
            J_r, self.ad_out, self.rtol, self.atol, self.jmax_vjp
        )
        over = np.abs(J_r - J_f) - t
        if over.size:
            self._note(float(np.max(np.abs(J_r - J_f) / (t + 1e-300))))
        if (over <= 0).all():
            return
        i, j = np.unravel_index(int(np.argmax(over / (t + 1e-300))), over.shape)
        g3, jv3 = self._rescaled(self.vs[i], self.us[j])
        if g3 is not None and jv3 is not None:
            measured = abs(g3[j] - J_r[i, j]) + abs(jv3[i] / self.scale[j] - J_f[i, j])
            if abs(J_r[i, j] - J_f[i, j]) <= t[i, j] + MEASURED_ROUNDING * measured:
                return
        arg, idx = self.flat.locate(int(j))
        out_idx = _unravel(int(i), self.out_shape)
        # Both modes already agreed with FD; a disagreement FD cannot resolve
        # is rounding of a rule that cancels large terms (a normalization of a
        # slice with variance near eps) or a bug below FD's resolution: said,
        # as a warning, not failed.
        fd_err = float(self.refs[int(j)].err[int(i)]) / self.scale[int(j)]
        undecided = self.refs[int(j)].status[int(i)] in (_fd.UNRELIABLE, _fd.JUMP)
        unresolved = undecided or abs(J_r[i, j] - J_f[i, j]) <= fd_err
        self.add(
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
            bound_reason=f"AD rounding {tol.ad_rounding(self.ad_out):g} u({self.ad_out}) "
            "(the adjoint identity needs no FD)",
            where="full Jacobian",
        )

    def _explained_by_wide_noise(self, b: int, excess: np.ndarray | float, weights: np.ndarray | None = None) -> bool:
        """Before FD may convict AD along direction b, look at fn over wider
        spacings. A function computed through a cancellation can be smooth or
        flat at the step and still carry an error of u x its terms that shows
        only further out (jax's tanh-form gelu in its tail: flat pieces and
        quantum steps): a slope read between two steps says nothing about the
        function's. Where such noise - a plausible rounding artifact, see
        ROUNDING_TERMS - could tilt the slope at the step by as much as the
        disagreement (``excess`` beyond the bound per element, or for one
        projection with ``weights``), FD has nothing left to convict: those
        elements become unreliable, with the reason - never a pass. Elements
        the ladder settled (a kink nearby, known structure) are left alone.
        Returns whether anything was explained (then the comparison is made
        again)."""
        ref = self.refs[b]
        eligible = ref.status == _fd.SMOOTH
        if ref.flagged is not None:
            eligible &= ~ref.flagged
        if not eligible.any():
            return False
        c = self.cs[b]
        F = self.F(self.us[b], c)
        inputs = float(np.max(np.abs(self.x), initial=0.0))
        peak = np.abs(self.f0)
        level = self.widened.get(b, 0)
        why = "noise"
        span = 0.0
        while True:
            table = _fd.wide_table(F, self.f0, self.h, level)
            if table is None:
                # No noise at any spacing: what fn's rounding could still hide is
                # a smooth deviation of up to its quantum (u x its terms) over
                # more than the widest table - a slope error of quantum / span.
                # (z - tanh z at z = 1e-16 is exactly 0 there, z tanh z at
                # 1e-286 underflows, jax's tanh-form gelu is linear with the
                # wrong slope between far-apart steps.)
                if span == 0.0:
                    return False
                why = "quantum"
                quantum = tol.ROUNDING_TERMS * self.u_oracle * np.maximum(peak, inputs)
                quantum += tol.SMALLEST_NORMAL.get(self.oracle_name, 2.0**-126)
                tilt = np.where(eligible, tol.NOISE_SAFETY * quantum / (span * c), 0.0)
                explained = self._within(tilt, excess, weights, ref.err)
                if not explained.any():
                    return False
                break
            span = 8 * table.d
            level += 1
            self.widened[b] = level
            with np.errstate(invalid="ignore", over="ignore"):
                values = np.max([np.abs(v) for v in table.f.values()], axis=0)
                values = np.where(np.isfinite(values), values, 0.0)
                peak = np.maximum(peak, values)
                terms = np.maximum(values, inputs)
                plausible = table.sigma <= tol.ROUNDING_TERMS * self.u_oracle * terms
                # a noise of sigma anywhere beyond the stencil tilts its slope by up to ~sigma / h
                tilt = np.where(eligible & plausible, tol.NOISE_SAFETY * 6.0 * table.sigma / (self.h * c), 0.0)
            explained = self._within(tilt, excess, weights, ref.err)
            if explained.any():
                break
        ref.give_up(
            explained,
            lambda i: (
                f"fn as computed is quantised here: steps of {table.sigma[i]:.3g} (rounding of its terms) "
                f"seen at wider spacings can tilt the finite-difference slope by up to {tilt[i]:.3g}, "
                "more than the disagreement"
                if why == "noise"
                else f"the disagreement is below what fn's rounding (u x its terms, smooth over more than "
                f"{span * c:.3g}) can hide from any step: a slope error up to {tilt[i]:.3g}; finite differences "
                "cannot see that far into the function as computed"
            ),
        )
        return True

    def _step_dependent(self, b: int, excess: np.ndarray) -> bool:
        """Before FD may convict AD along direction b, estimate again with a step
        REFINE times smaller. A smooth function gives the same value within
        both bounds; where the estimate moves by more, the step was larger than
        a feature of fn (a row normalised while far smaller than the step, an
        eps) and FD cannot decide there: those elements become unreliable,
        with both values. Done once per direction; returns whether any moved."""
        if b in self.refined:
            return False
        self.refined.add(b)
        ref = self.refs[b]
        fine = self.fd(self.us[b], 0.0, self.cs[b], ladder=False, h=self.h / tol.REFINE)
        value, err = fine.value, fine.err
        with np.errstate(invalid="ignore"):
            moved = (excess > 0) & (ref.status <= _fd.KINK) & (fine.status == _fd.SMOOTH)
            moved &= np.abs(value - ref.value) > err + ref.err
        if not moved.any():
            return False
        ref.give_up(
            moved,
            lambda i: (
                f"the estimate moved from {ref.value[i]:.6g} +- {ref.err[i]:.2g} to {value[i]:.6g} +- {err[i]:.2g} "
                f"with a {tol.REFINE:g}x smaller step: a feature of fn narrower than the step"
            ),
        )
        return True

    @staticmethod
    def _within(
        tilt: np.ndarray, excess: np.ndarray | float, weights: np.ndarray | None, err: np.ndarray
    ) -> np.ndarray:
        """The elements whose disagreement a slope error of ``tilt`` explains:
        per element, or (``weights``) all that add to one projection's."""
        if weights is None:
            return (excess > 0) & (excess <= tilt)
        noisy = tilt > err
        reach = tol.hoeffding(weights[noisy], tilt[noisy]) if noisy.any() else 0.0
        return noisy if reach >= excess else np.zeros_like(noisy)

    def _compare_precision(self, mode: str) -> None:
        """The native low-precision AD against the same AD in float64, which
        finite differences have just accepted. Within the rounding model: fine.
        Beyond it but within the low-precision limit: a ``precision`` warning
        (rounding of the low-precision run, measured). Beyond the limit: an
        error - a low-precision code path that computes something else."""
        worst = None  # (excess over the limit, over the model, label, index, native, float64, dtype, model, limit)
        if mode == "JVP":
            items = [(b, self.low_jvps[b], self.jvps[b], self.out_dtype) for b in sorted(self.low_jvps)]
        else:
            items = []
            for a in sorted(self.low_vjps):
                for k, (i, lo_p, hi_p) in enumerate(
                    zip(self.ev.wrt, self.flat.split(self.low_vjps[a]), self.flat.split(self.vjps[a]))
                ):
                    items.append(((a, k), lo_p.ravel(), hi_p.ravel(), self.ev.dtypes[i]))
        for key, low, ref, dtype in items:
            if dtype not in tol.LOW_PRECISION_LIMIT:
                continue
            if mode == "JVP" and self.full:
                scale = None if self.jmax_jvp is None else self.jmax_jvp * self.scale[key]
            elif mode == "JVP":
                scale = max(float(np.max(np.abs(ref), initial=0.0)), self.slope_scale * self.scale_max)
            else:
                scale = self.jmax_vjp if self.full else max(float(np.max(np.abs(ref), initial=0.0)), self.slope_scale)
            model = tol.ad_bound(ref, dtype, self.rtol, self.atol, scale)
            top = float(np.max(np.abs(ref), initial=0.0)) if scale is None else scale
            effective = self.float32_as if dtype == "float32" else dtype
            limit = tol.LOW_PRECISION_LIMIT[effective] * (np.abs(ref) + top) + self.terms_floor(effective)
            diff = np.abs(low - ref)
            if not diff.size:
                continue
            if (diff > limit).any():
                # A point within the low-precision rounding of a kink may take
                # either side's derivative: no error where the float64 AD just
                # beside the point (either way) brackets the low-precision value.
                for side in self._beside(mode, key):
                    gap = np.maximum(np.minimum(ref, side) - low, low - np.maximum(ref, side))
                    diff = np.where(gap <= model, 0.0, diff)
            with np.errstate(invalid="ignore", divide="ignore"):
                over_limit = diff / np.maximum(limit, 1e-300)
                over_model = diff / np.maximum(model, 1e-300)
            i = int(np.argmax(over_model))
            self._note(float(over_limit[i]))
            if over_model[i] <= 1:
                continue
            j = int(np.argmax(over_limit)) if over_limit.max() > 1 else i
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
                int((diff > model).sum()),
            )
            if worst is None or cand[:2] > worst[:2]:
                worst = cand
        if worst is None:
            return
        ratio, _, key, j, low_v, ref_v, dtype, model_b, limit_b, count = worst
        if self.rtol is not None or self.atol is not None:
            # the caller's rtol/atol are the limit they asked for
            ratio, limit_b = max(ratio, worst[1]), model_b
        err = abs(low_v - ref_v)
        ulps = err / (tol.unit_roundoff(dtype) * max(abs(ref_v), 1e-300) * 2)
        rel = err / max(abs(ref_v), 1e-300)
        if mode == "JVP":
            b = key
            arg, idx = self.flat.locate(b) if self.full else (None, None)
            out_idx = _unravel(j, self.out_shape)
            what = (
                f"d output{list(out_idx)} / d arg{arg}{list(idx)}" if self.full else f"(J u) at output{list(out_idx)}"
            )
            where = self._direction_name(b)
        else:
            a, k = key
            arg, idx = self.flat.locate(self.flat.offsets[k] + j)
            out_idx = None
            what = f"(J^T v) at arg{arg}{list(idx)}"
            where = f"cotangent v {a + 1}" + (f" (random signs, seed {self.seed})" if not self.full else "")
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
            limit = tol.LOW_PRECISION_LIMIT[self.float32_as if dtype == "float32" else dtype]
            self.add(
                Kind.MISMATCH,
                ERROR,
                f"{name} in {dtype} disagrees with the same {name} in float64, which finite differences accept: "
                f"{what} off by {rel:.3g} relative, beyond the {dtype} limit: the {dtype} code path computes "
                f"something else ({count} element(s) over the rounding model)",
                bound=limit_b,
                bound_reason=(
                    "user atol + rtol x |AD|"
                    if self.rtol is not None or self.atol is not None
                    else f"{dtype} limit {limit:g} x (|AD| + max|AD|) + u x the terms"
                ),
                **common,
            )
            return
        self.add(
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
        terms = max(float(np.max(np.abs(self.x), initial=0.0)), self.f0_scale, 1.0)
        return tol.ROUNDING_TERMS * tol.unit_roundoff(dtype) * terms

    def _beside(self, mode: str, key: Any) -> list[np.ndarray]:
        """The float64 AD of ``mode`` (direction b, or cotangent a's part k) at
        the point moved by +- the low-precision kink resolution of each element:
        what the derivative is on either side of a kink the native dtype cannot
        resolve."""
        native = max(self.native_ad & set(tol.LOW_PRECISION_LIMIT), key=tol.unit_roundoff)
        delta = tol.kink_resolution(native, self.raw_scale)
        out = []
        for sign in (1.0, -1.0):
            points = self.flat.split(self.x + sign * delta)
            try:
                if mode == "JVP":
                    d = self.ev.jvp(self.flat.split(self.us[key]), "float64", points)
                    out.append(d.value.ravel() if d.value is not None else np.full(self.f0.size, np.nan))
                else:
                    a, k = key
                    ds = self.ev.vjp(self.vs[a].reshape(self.out_shape), self.out_dtype, "float64", points)
                    d = ds[k]
                    out.append(d.value.ravel() if d.value is not None else np.zeros(self.flat.sizes[k]))
            except (ModeUnavailable, CallFailed, BadStructure):
                continue
        return out

    # -- localisation -------------------------------------------------------------------
    def _column(self, j: int) -> dict[str, Any]:
        """Column j of the Jacobian (J e_j, real units) by FD with steps relative to
        that element's scale, with its error: the independent witness for a
        located element."""
        ref = self.fd(self._basis(j, self.flat.n), 0.0, float(self.raw_scale[j]))
        value, err = self._ref_for_column(ref)
        return {"FD": value, "FD_err": err}

    def _vjp_element(self, a: int, j: int, col: dict[str, Any]) -> tuple[dict[str, float], float, bool]:
        """(J^T v)_j from VJP against <v, J e_j> from FD (and JVP): the labelled
        values, the bound, and whether the element is confirmed wrong."""
        v, g = self.vs[a], self.vjps[a]
        values = {"VJP": float(g[j]), "FD": float(v @ col["FD"])}
        bound = float(self.gbs[a][j]) + tol.hoeffding(v, col["FD_err"])
        return values, bound, abs(values["VJP"] - values["FD"]) > bound

    def _diagonal_guess(self, a: int, b: int, use_jvp: bool) -> int | None:
        """If fn were elementwise in an input shaped like the output, its element
        j would feed output j alone: (J^T v)_j u_j = v_j (J u_k)_j with u_k the
        direction restricted to that input (one oracle call). The worst
        violation is the candidate; it is confirmed along e_j before use, so a
        wrong guess costs one column and falls back to bisection."""
        v, g, u = self.vs[a], self.vjps[a], self.us[b]
        best: tuple[float, int] | None = None
        for off, size, shape in zip(self.flat.offsets, self.flat.sizes, self.flat.shapes):
            if tuple(shape) != self.out_shape:
                continue
            uk = np.zeros_like(u)
            uk[off : off + size] = u[off : off + size]
            w = self._oracle(uk, use_jvp=False)  # ranking needs no precision: 2 evaluations
            r = np.abs(g[off : off + size] * u[off : off + size] - v * w)
            k = int(np.argmax(r))
            if best is None or r[k] > best[0]:
                best = (float(r[k]), off + k)
        return None if best is None else best[1]

    def _oracle(self, u: np.ndarray, use_jvp: bool) -> np.ndarray:
        """J u from the trusted JVP, or from one central difference (2 evaluations)."""
        if use_jvp:
            w = self._jvp_value(u)
            if w is not None:
                return w
        c = self.cs[0]  # directional: every direction shares its normalisation
        F = self.F(u, c)
        with np.errstate(invalid="ignore", over="ignore"):
            d = (F(self.h) - F(-self.h)) / (2 * self.h * c)
        return np.where(np.isfinite(d) & self.out_finite, d, 0.0)

    def _report_vjp(
        self, a: int, b: int, lhs: float, rhs: float, bound: float, pair: tuple[str, str], *, use_jvp: bool
    ) -> None:
        use_jvp = use_jvp and bool(self.jvps)
        oracle = "JVP" if use_jvp else "FD"
        j = self._diagonal_guess(a, b, use_jvp)
        confirmed = False
        if j is not None:
            col = self._column(j)
            values, elem_bound, confirmed = self._vjp_element(a, j, col)
            how = "found by the elementwise guess, confirmed along e_j"
        if not confirmed:
            j, steps = self._bisect_vjp(a, b, use_jvp)
            col = self._column(j)
            values, elem_bound, _ = self._vjp_element(a, j, col)
            how = f"located in {steps} bisection steps using {oracle}"
        arg, idx = self.flat.locate(j)
        proj = (
            f"<J^T v, u> = {lhs:.6g} vs <v, J u> = {rhs:.6g} from "
            + ("JVP" if pair == ("JVP", "VJP") else "FD")
            + f" (bound {bound:.3g}: Hoeffding {tol.HOEFFDING_K:g} sigma over random signs)"
        )
        self.add(
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
            values=values,
            error=float(abs(values["VJP"] - values["FD"])),
            bound=float(elem_bound),
            bound_reason=(
                f"AD rounding {tol.ad_rounding(self.ad_out):g} u + FD error estimate x{tol.FD_SAFETY:g}, projected on v"
                if self.rtol is None and self.atol is None
                else "user rtol/atol + FD error estimate, projected on v"
            ),
            where=f"cotangent v {a + 1} (random signs, seed {self.seed}); {proj}; {how}",
        )

    def _ref_for_column(self, ref: _fd.Reference) -> tuple[np.ndarray, np.ndarray]:
        if ref.all_smooth:
            return ref.value, ref.err
        usable = self._usable(ref)
        value = np.where(usable, ref.value, 0.0)
        err = np.where(usable, ref.err, 0.0)
        return value, err

    def _jvp_value(self, u: np.ndarray) -> np.ndarray | None:
        try:
            d = self.ev.jvp(self.flat.split(u), "float64" if self.ad64 else None)
        except (ModeUnavailable, CallFailed):
            return None
        if d.value is None:
            return None
        return d.value.ravel() if self.all_finite else np.where(self.out_finite, d.value.ravel(), 0.0)

    def _bisect_vjp(self, a: int, b: int, use_jvp: bool) -> tuple[int, int]:
        """Find the input element whose reverse-mode value is wrong: the
        discrepancy <J^T v, u_S> - <v, J u_S> is linear in the mask S, so halve
        S toward the larger discrepancy (log2 n oracle calls)."""
        v, g, u = self.vs[a], self.vjps[a], self.us[b]
        use_jvp = use_jvp and bool(self.jvps)

        def disc(lo: int, hi: int) -> float:
            # Choosing a half needs no precision: the wrong element's share of
            # the discrepancy is large, so one central difference does.
            uS = np.zeros_like(u)
            uS[lo:hi] = u[lo:hi]
            return float(g[lo:hi] @ u[lo:hi] - v @ self._oracle(uS, use_jvp))

        return _bisect(self.flat.n, disc)

    def _locate_jvp(self, b: int, i: int) -> tuple[int, tuple[int, ...], float, float, float]:
        """Find the input element behind a JVP mismatch at output element i:
        first the elementwise guess (the same index in an input shaped like the
        output), confirmed along e_j; otherwise bisection."""
        u = self.us[b]
        jv_t = self._jvp_bound(self.jvps[b], b)

        def element(j: int) -> tuple[float, float, float]:
            e = self._basis(j, self.flat.n)
            w = self._jvp_value(e)
            ref = self.fd(e, 0.0, float(self.raw_scale[j]))
            ad = w[i] if w is not None else np.nan
            return float(ad), float(ref.value[i]), float(jv_t[i] / self.scale[j] + ref.err[i])

        for off, shape in zip(self.flat.offsets, self.flat.shapes):
            if tuple(shape) == self.out_shape:
                ad, fdv, bound = element(off + i)
                if abs(ad - fdv) > bound:
                    arg, idx = self.flat.locate(off + i)
                    return arg, idx, ad, fdv, bound

        def disc(lo: int, hi: int) -> float:
            uS = np.zeros_like(u)
            uS[lo:hi] = u[lo:hi]
            w = self._jvp_value(uS)
            ref = self.fd(uS, jv_t, self.cs[b], ladder=False)
            return float((w[i] if w is not None else 0.0) - ref.value[i])

        j, _ = _bisect(self.flat.n, disc)
        arg, idx = self.flat.locate(j)
        return (arg, idx, *element(j))

    # -- 6. second order --------------------------------------------------------------
    def _second_order(self) -> None:
        ev = self.ev
        if self.modes.get("VJP") != "checked" and self.modes.get("JVP") != "checked":
            return
        rng = np.random.default_rng([self.seed, 2])
        m = self.f0.size
        v = _signs(rng, m)
        u = _signs(rng, self.flat.n)
        backend = ev.backend
        like = ev.originals[0]
        derived: list[tuple[str, Callable]] = []
        with backend.precision(ev.native_precision):
            cot = backend.from_numpy(v.reshape(self.out_shape), like, self.out_dtype)
            tans = [backend.from_numpy(t, ev.originals[i], ev.dtypes[i]) for t, i in zip(self.flat.split(u), ev.wrt)]
        if self.modes.get("VJP") == "checked":
            try:
                derived.append(("the VJP x -> J(x)^T v", self._derivative_fn("vjp", cot)))
            except ModeUnavailable as e:
                self._unavailable("second-order VJP", str(e))
        if self.modes.get("JVP") == "checked":
            try:
                derived.append(("the JVP x -> J(x) u", self._derivative_fn("jvp", tans)))
            except ModeUnavailable as e:
                self._unavailable("second-order JVP", str(e))
        for label, g in derived:
            sub = check(
                g,
                *ev.originals,
                wrt=ev.wrt,
                order=1,
                seed=self.seed + 1,
                rtol=self.rtol,
                atol=self.atol,
                full=self.full_opt,
                directions=self.k,
                name=label,
            )
            for f in sub.findings:
                if f.kind in (Kind.NONDETERMINISM,) or (f.kind == Kind.MUTATION):
                    continue
                of = label.split()[1]  # "VJP" or "JVP": whose derivative this is
                pair = None if f.pair is None else (f"{f.pair[0]} of {of}", f.pair[1])
                self.findings.append(
                    Finding(
                        **{**f.__dict__, "order": 2, "pair": pair, "message": f"derivative of {label}: {f.message}"}
                    )
                )
            for mode, status in sub.modes.items():
                if mode in ("JVP", "VJP"):
                    self.modes[f"{mode} of {label.split()[1]}"] = status
            for key, count in sub.evaluations.items():
                ev.counts[key] += count

    def _derivative_fn(self, kind: str, arg: Any) -> Callable:
        ev = self.ev
        rule = ev.rule
        if rule is not None:
            backend, wrt = ev.backend, ev.wrt
            if kind == "vjp":

                def vjp_rule(*xs: Any) -> Any:
                    cs = rule.vjp(tuple(xs), arg)
                    cs = (cs,) if len(xs) == 1 and not isinstance(cs, (tuple, list)) else cs
                    return backend.concat_flat([cs[i] for i in wrt])

                return vjp_rule

            def jvp_rule(*xs: Any) -> Any:
                full = [None] * len(xs)
                for t, i in zip(arg, wrt):
                    full[i] = t
                return rule.jvp(tuple(xs), tuple(full))

            return jvp_rule
        if kind == "vjp":
            return ev.backend.vjp_function(ev.fn, ev.wrt, arg)
        return ev.backend.jvp_function(ev.fn, ev.wrt, arg)


def _signs(rng: np.random.Generator, n: int, scale: np.ndarray | None = None) -> np.ndarray:
    """n random signs (Rademacher) times ``scale``, float64."""
    bits = np.unpackbits(np.frombuffer(rng.bytes((n + 7) // 8), dtype=np.uint8), count=n)
    signs = bits.astype(np.float64)
    signs *= -2.0
    signs += 1.0
    if scale is not None:
        signs *= scale
    return signs


def _rms(a: np.ndarray) -> float:
    """Root mean square without overflow or underflow of the squares."""
    top = float(np.max(np.abs(a), initial=0.0))
    if top == 0.0 or not np.isfinite(top):
        return top
    b = a / top
    return top * float(np.sqrt(b @ b / b.size))


def _power_of_two(x: float) -> float:
    """The power of two p with x / p in [1, 2) (x > 0, finite)."""
    return float(np.ldexp(1.0, int(np.frexp(x)[1]) - 1))


def _bisect(n: int, disc: Callable[[int, int], float]) -> tuple[int, int]:
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


def _unravel(i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(k) for k in np.unravel_index(i, shape)) if shape else ()


def _summary(name: str, v: np.ndarray, dtype: str, differentiable: bool) -> ArraySummary:
    a = np.asarray(v)
    if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
        a = a[np.isfinite(a)]
    lo = float(a.min()) if a.size else None
    hi = float(a.max()) if a.size else None
    return ArraySummary(name, tuple(int(s) for s in a.shape), dtype, lo, hi, differentiable)


def _reproduce(label: str, nargs: int, wrt: Any, order: int, seed: int, rtol: Any, atol: Any, full: Any, k: int) -> str:
    argnames = ", ".join(f"arg{i}" for i in range(nargs))
    opts = [f"seed={seed}"]
    for key, value, default in (
        ("wrt", wrt, None),
        ("order", order, 1),
        ("rtol", rtol, None),
        ("atol", atol, None),
        ("full", full, None),
        ("directions", k, 2),
    ):
        if value != default:
            opts.append(f"{key}={value!r}")
    return f"gv.check({label}, {argnames}, {', '.join(opts)})"
