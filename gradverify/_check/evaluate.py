"""Calls into fn and its derivatives, always on copies, in a chosen precision.

The checker works on float64 working arrays (numpy copies, or arrays of the
backend on the arguments' device: ``placed``, see _xp); an ``Evaluator``
turns them into fresh backend arrays of the right dtype, calls fn (or its
rules), and turns the answer back. It counts every call, and wraps every exception raised by user
code into ``CallFailed`` with the stage it happened in."""

from __future__ import annotations

import contextlib
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import ArgumentTypeError, ModeUnavailable, explain
from .._rule import Rule
from ..backends import Backend, backend_name_of, backend_of
from . import xp
from .validate import resolve_wrt

__all__ = ["FRAMEWORKS", "BadStructure", "CallFailed", "Derivative", "Evaluator", "fns_warnings_only"]

#: Packages whose own warnings, raised while gradverify takes a derivative,
#: are the machinery's and not fn's.
FRAMEWORKS = ("torch", "functorch", "jax", "jaxlib", "numpy", "gradverify")
_FRAMEWORK_MODULES = r"(" + "|".join(FRAMEWORKS) + r")(\..*)?$"


@contextlib.contextmanager
def fns_warnings_only() -> Iterator[None]:
    """Run a derivative with the warnings the frameworks raise from their own
    modules ignored (torch's forward mode, loading its decompositions on first
    use, warns that torch.jit.script is deprecated: under ``-W error`` a
    correct fn would fail). Warnings from any other module - fn's and its
    rules' - meet the caller's filters as they are. (Like every
    ``warnings.catch_warnings``, this sets the process's filters while the
    call runs.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=_FRAMEWORK_MODULES)
        yield


class CallFailed(Exception):
    """User code (fn or a rule) raised. ``stage`` says where."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        super().__init__(f"{stage}: {type(exc).__name__}: {exc}")
        self.stage = stage
        self.exc = exc
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        # Keep the user's frames: drop gradverify's own plumbing from the top.
        self.traceback = "".join(tb[-8:])


@dataclass(frozen=True)
class Derivative:
    """A derivative as returned by a mode: float64 values plus what it came as."""

    value: Any  # float64 working array; None: the rule returned None (a zero cotangent)
    dtype: str | None
    shape: tuple[int, ...] | None
    kind: str  # "array" or the foreign type's name


class Evaluator:
    def __init__(
        self, fn: Callable, backend: Backend, args: Sequence[Any], wrt: Sequence[int], placed: bool = False
    ) -> None:
        self.rule = fn if isinstance(fn, Rule) else None
        self.fn = fn.fn if isinstance(fn, Rule) else fn
        self.backend = backend
        self.originals = tuple(args)
        # placed: working arrays of the backend on the arguments' device (the
        # caller enters backend.working()); else numpy copies
        self.placed = placed
        to = backend.to_working if placed else backend.to_numpy
        self.values = [to(a) for a in args]  # never handed to user code
        self.dtypes = [backend.dtype_name(a) for a in args]
        self.floating = [backend.is_floating(a) for a in args]
        self.wrt = tuple(wrt)
        self.counts: Counter[str] = Counter()
        # jax makes float64 arrays only under x64: calls at the arguments' own
        # dtypes need it whenever one of them is 64-bit.
        wide = any(d in ("float64", "int64", "uint64") for d in self.dtypes)
        self.native_precision = "float64" if wide else "native"
        self.batches = True  # False once fn at stacked points failed or disagreed with its plain run

    @classmethod
    def for_call(cls, fn: Callable, args: Sequence[Any]) -> Evaluator:
        """An Evaluator of fn at args (their backend's) with respect to every
        floating argument (gv.check's default), for probes outside a check."""
        ev = cls(fn, backend_of(args), args, ())
        ev.wrt = resolve_wrt(None, ev.floating, ev.dtypes)
        return ev

    # -- building arguments --------------------------------------------------------
    def _array(self, a: Any, like: Any, dtype: str, fresh: bool = False) -> Any:
        """A backend array of ``dtype`` from the working array ``a``; it never
        shares memory with ``a`` unless ``fresh`` (``a`` is ours to hand over)."""
        if self.placed:
            return self.backend.from_working(a, like, dtype, copy=not fresh)
        return self.backend.from_numpy(a if fresh else np.array(a, copy=True), like, dtype)

    def _args(self, points: Sequence[Any] | None, precision: str | None, keep: bool = False) -> list[Any]:
        """Backend arrays: ``points`` (fresh arrays, handed over) for the wrt arguments,
        copies of the base values elsewhere. Floating arguments get
        ``precision`` (None: their own dtype). ``keep``: remember the numpy
        buffers they were made from (for ``readback``)."""
        out = []
        buffers = []
        for (a, dtype, fresh), like in zip(self._sources(points, precision), self.originals):
            if not (fresh or self.placed):
                a = np.array(a, copy=True)
            if keep:
                buffers.append(a)
            out.append(self._array(a, like, dtype, fresh=fresh or not self.placed))
        self.last_buffers = buffers
        return out

    def _sources(self, points: Sequence[Any] | None, precision: str | None) -> list[tuple[Any, str, bool]]:
        """Per argument: the working array fn's argument is made from (the
        point's part for a wrt argument, else the base value), its dtype, and
        whether it is a point's (fresh, ours to hand over)."""
        wrt_pos = {i: k for k, i in enumerate(self.wrt)} if points is not None else {}
        return [
            (points[wrt_pos[i]] if i in wrt_pos else v, precision if (precision and f) else d, i in wrt_pos)
            for i, (v, f, d) in enumerate(zip(self.values, self.floating, self.dtypes))
        ]

    def _tangent_args(self, tangents: Sequence[Any], precision: str | None = None) -> list[Any]:
        return [self._array(t, self.originals[i], precision or self.dtypes[i]) for i, t in zip(self.wrt, tangents)]

    def _working(self, out: Any) -> Any:
        """fn's output (or a derivative) as a float64 working array."""
        if self.placed:
            return self.backend.derivative(out)
        return self.backend.to_numpy(out).astype(np.float64, copy=False)

    # -- the primal -------------------------------------------------------------------
    def primal_raw(self, precision: str | None = None) -> tuple[Any, str, list[Any]]:
        """Evaluate at the base point on copies; return the output (a working
        array: numpy in its own dtype, or float64 beside the arguments), its
        dtype, and the arguments as fn left them (to detect mutation)."""
        with self.backend.precision(precision or self.native_precision):
            args = self._args(None, precision, keep=not self.placed)
            out = self._call(self.fn, args, "evaluating fn")  # eager: mutation, nondeterminism
            self._check_output(out)
            if self.placed:
                after = [self.backend.to_working(a) for a in args]
                return self.backend.to_working(out), self.backend.dtype_name(out), after
            after = [self.backend.readback(a, buf) for a, buf in zip(args, self.last_buffers)]
            return self.backend.to_numpy(out), self.backend.dtype_name(out), after

    def primal(self, points: Sequence[Any] | None, precision: str | None, flat: bool = False) -> Any:
        """fn at ``points`` (None: the base point); ``flat``: its output
        flattened (the finite differences' evaluations)."""
        with self.backend.precision(precision or self.native_precision):
            out = self._host("primal_flat", points, precision) if flat and points is not None else None
            self.counts["primal"] += out is not None
            if out is None:
                out = self._call(
                    lambda *a: self._primal_fn(*a, flat=flat), self._args(points, precision), "evaluating fn"
                )
            self._check_output(out)
            return self._working(out)

    def primals(self, points: Sequence[Sequence[Any]], precision: str | None) -> list[Any] | None:
        """fn at every point of ``points`` (each the wrt arguments' working
        arrays) in one vectorised call, each output flattened; None where that
        call cannot be made - a gv.Rule, fn that the backend cannot vectorise,
        or any exception: then evaluate one point at a time, which says what
        went wrong. One call, counted as one evaluation of fn."""
        if self.rule is not None or not self.batches or len(points) < 2:
            return None
        k = len(points)
        with self.backend.precision(precision or self.native_precision):
            stacks = [(_stack([p[q] for p in points]), precision or self.dtypes[i]) for q, i in enumerate(self.wrt)]

            def plain() -> Any:
                stacked = [self._array(a, self.originals[i], d, True) for (a, d), i in zip(stacks, self.wrt)]
                return self.backend.primals(self.fn, self._args(None, precision), self.wrt, stacked)

            self.counts["primal"] += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # (fn's own warnings showed on its primal run)
                    out = self._host_or("primals", precision, stacks, plain)
            except Exception:
                out = None
            if backend_name_of(out) != self.backend.name or tuple(out.shape[:1]) != (k,):
                self.batches = False
                return None
            w = self._working(out)
            return [w[j].reshape(-1) for j in range(k)]

    def primal_compiled(self, precision: str | None = None) -> tuple[Any, str] | None:
        """fn at the base point through its compiled form, as a working array,
        and its dtype; None where fn is not compiled (then ``primal_raw``)."""
        with self.backend.precision(precision or self.native_precision):
            out = self._host("primal", None, precision)
            if out is None:
                return None
            self.counts["primal"] += 1
            self._check_output(out)
            return self._working(out), self.backend.dtype_name(out)

    def _host(self, form: str, points: Sequence[Any] | None, precision: str | None, operands: Any = ()) -> Any:
        """``backend.call_host``: fn's compiled ``form`` on the working arrays
        themselves (None: no such path; then the plain one)."""
        if self.rule is not None or self.placed or not self.backend.takes_host_arrays:
            return None
        sources = self._sources(points, precision)
        return self.backend.call_host(self.fn, form, [(a, d) for a, d, _ in sources], operands, self.wrt)

    def _host_or(self, form: str, precision: str | None, operands: Any, plain: Callable[[], Any]) -> Any:
        """A vectorised mode at the point: ``_host`` where it answers, else ``plain()``."""
        out = self._host(form, None, precision, operands)
        return plain() if out is None else out

    def _primal_fn(self, *args: Any, flat: bool = False) -> Any:
        if self.rule is None:
            return (self.backend.call_flat if flat else self.backend.call)(self.fn, args)
        out = self.fn(*args)
        return out.reshape(-1) if flat and hasattr(out, "reshape") else out

    # -- the modes ----------------------------------------------------------------------
    def jvp(
        self, tangents: Sequence[Any], precision: str | None = None, points: Sequence[Any] | None = None
    ) -> Derivative:
        """J u at the base point (or at ``points`` for the wrt arguments);
        ``precision`` (e.g. "float64") runs the arguments, the tangents and so
        the whole derivative in that dtype instead of their own."""
        with self.backend.precision(precision or self.native_precision):
            return self._jvp(tangents, precision, points)

    def vjp(
        self,
        cotangent: Any,
        out_dtype: str,
        precision: str | None = None,
        points: Sequence[Any] | None = None,
    ) -> list[Derivative]:
        with self.backend.precision(precision or self.native_precision):
            return self._vjp(cotangent, precision or out_dtype, precision, points)

    def jvps(self, tangents: Sequence[Sequence[Any]], precision: str | None = None) -> list[Derivative] | None:
        """``jvp`` along every tangent set of ``tangents`` in one vectorised
        call. None where that call cannot be made - a gv.Rule, or fn (or a
        rule inside it) that the backend cannot vectorise, or any exception:
        then ask one direction at a time, which says what went wrong."""
        if self.rule is None and len(tangents) > 1:
            with self.backend.precision(precision or self.native_precision):
                stacks = [
                    (_stack([t[p] for t in tangents]), precision or self.dtypes[i]) for p, i in enumerate(self.wrt)
                ]

                def plain() -> Any:
                    args = self._args(None, precision)
                    stacked = [self._array(a, self.originals[i], d, True) for (a, d), i in zip(stacks, self.wrt)]
                    return self.backend.jvps(self.fn, args, self.wrt, stacked)

                return self._vectorised("jvp", lambda: self._host_or("jvps", precision, stacks, plain), len(tangents))
        return None

    def vjps(
        self, cotangents: Sequence[Any], out_dtype: str, precision: str | None = None
    ) -> list[list[Derivative]] | None:
        """``vjp`` for every cotangent in one vectorised call (None: ask one at a time)."""
        if self.rule is None and len(cotangents) > 1:
            with self.backend.precision(precision or self.native_precision):
                stacked = _stack(cotangents)

                def plain() -> Any:
                    cot = self._array(stacked, self.originals[0], precision or out_dtype, True)
                    return self.backend.vjps(self.fn, self._args(None, precision), self.wrt, cot)

                operands = [(stacked, precision or out_dtype)]
                parts = self._vectorised(
                    "vjp", lambda: list(self._host_or("vjps", precision, operands, plain)), len(cotangents)
                )
                if parts is not None:
                    return [list(row) for row in zip(*parts)]
        return None

    def batched(self, mode: str, points: Sequence[Sequence[Any]], operands: Sequence[Any], out_dtype: str) -> list[Any]:
        """``mode`` ("JVP" or "VJP") at k points in one call under the backend's
        vmap, in fn's own dtypes: ``points[j]``, member j's wrt arguments
        (working arrays); ``operands[j]``, its tangents (one per wrt argument)
        or its cotangent (of the output's shape, in ``out_dtype``). Per member,
        the JVP's Derivative, or the VJP's list of them (one per wrt argument).
        Raises ModeUnavailable where the backend has no vmap, or fn or a rule
        inside it cannot run under it (in the framework's words)."""
        if self.rule is not None:
            raise ModeUnavailable("a gv.Rule's rules are numpy code, which nothing can vmap")
        if self.backend.no_batching:
            raise ModeUnavailable(self.backend.no_batching)
        k = len(points)
        self.counts["batched"] += 1
        with self.backend.precision(self.native_precision):
            stacked = [
                self._array(_stack([p[q] for p in points]), self.originals[i], self.dtypes[i], True)
                for q, i in enumerate(self.wrt)
            ]
            args = self._args(None, None)
            try:
                with fns_warnings_only():
                    if mode == "JVP":
                        tangents = [
                            self._array(_stack([t[q] for t in operands]), self.originals[i], self.dtypes[i], True)
                            for q, i in enumerate(self.wrt)
                        ]
                        out: Any = self.backend.batched_jvp(self.fn, args, self.wrt, stacked, tangents)
                    else:
                        cot = self._array(_stack(list(operands)), self.originals[0], out_dtype, True)
                        out = self.backend.batched_vjp(self.fn, args, self.wrt, stacked, cot)
            except ModeUnavailable:
                raise
            except Exception as e:
                words = " ".join(str(e).split())
                raise ModeUnavailable(f"{type(e).__name__} under vmap: {words[:400]}") from e

        def members(d: Any) -> list[Derivative]:
            if d is None:  # (fn ignores this argument)
                return [Derivative(None, None, None, "None")] * k
            if backend_name_of(d) != self.backend.name or tuple(d.shape[:1]) != (k,):
                got = f"shape {tuple(d.shape)}" if hasattr(d, "shape") else type(d).__name__
                raise ModeUnavailable(f"the batched {mode} came back as {got}, not a stack of {k}")
            w = self._working(d)
            return [
                Derivative(xp.copy(w[j]), self.backend.dtype_name(d), tuple(d.shape[1:]), "array") for j in range(k)
            ]

        if mode == "JVP":
            return members(out)
        per_argument = [members(d) for d in out]
        return [[part[j] for part in per_argument] for j in range(k)]

    def _vectorised(self, mode: str, call: Callable[[], Any], k: int) -> Any:
        """Run a vectorised mode; its k results as Derivatives (a list, or a
        list per wrt argument), or None on any trouble."""
        self.counts[mode] += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (fn's own warnings showed on its primal run)
                out = call()
        except Exception:
            return None
        stacks = out if isinstance(out, list) else [out]
        rows = []
        for d in stacks:
            if d is None:  # (fn ignores this argument)
                rows.append([Derivative(None, None, None, "None")] * k)
                continue
            if backend_name_of(d) != self.backend.name or tuple(d.shape[:1]) != (k,):
                return None
            w = self._working(d)
            dtype = self.backend.dtype_name(d)
            rows.append([Derivative(xp.copy(w[j]), dtype, tuple(d.shape[1:]), "array") for j in range(k)])
        return rows if isinstance(out, list) else rows[0]

    def _jvp(self, tangents: Sequence[Any], precision: str | None, points: Any = None) -> Derivative:
        self.counts["jvp"] += 1
        operands = [(t, precision or self.dtypes[i]) for t, i in zip(tangents, self.wrt)]
        host = self._host("jvp", points, precision, operands)
        if host is not None:
            return self._derivative(host)
        args = self._args(points, precision)
        tans = self._tangent_args(tangents, precision)
        if self.rule is not None:
            if self.rule.jvp is None:
                raise ModeUnavailable("the gv.Rule has no jvp rule")
            full = []
            for i, a in enumerate(args):
                if i in self.wrt:
                    full.append(tans[self.wrt.index(i)])
                elif self.floating[i]:
                    dtype = precision or self.dtypes[i]
                    v = self.values[i]
                    full.append(self._array(xp.zeros(tuple(v.shape), v), a, dtype, fresh=True))
                else:
                    full.append(None)
            out = self._call(lambda: self.rule.jvp(tuple(args), tuple(full)), (), "the jvp rule")
        else:
            out = self._call(lambda: self.backend.jvp(self.fn, args, self.wrt, tans), (), "forward mode (JVP)")
        return self._derivative(out)

    def _vjp(self, cotangent: Any, out_dtype: str, precision: str | None, points: Any = None) -> list[Derivative]:
        self.counts["vjp"] += 1
        host = self._host("vjp", points, precision, [(cotangent, out_dtype)])
        if host is not None:
            return [self._derivative(r) for r in host]
        args = self._args(points, precision)
        cot = self._array(cotangent, self.originals[0], out_dtype)
        if self.rule is not None:
            if self.rule.vjp is None:
                raise ModeUnavailable("the gv.Rule has no vjp rule")
            res = self._call(lambda: self.rule.vjp(tuple(args), cot), (), "the vjp rule")
            if backend_name_of(res) is not None and len(args) == 1:
                res = (res,)
            if not isinstance(res, (tuple, list)) or len(res) != len(args):
                got = f"{len(res)} items" if isinstance(res, (tuple, list)) else type(res).__name__
                raise BadStructure(
                    f"the vjp rule returned {got}; expected a tuple of {len(args)} cotangents, "
                    "one per positional argument (None for a constant)"
                )
            return [self._derivative(res[i]) for i in self.wrt]
        res = self._call(lambda: self.backend.vjp(self.fn, args, self.wrt, cot), (), "reverse mode (VJP)")
        return [self._derivative(r) for r in res]

    # -- helpers ---------------------------------------------------------------------
    def _call(self, f: Callable, args: Sequence[Any], stage: str) -> Any:
        if stage == "evaluating fn":
            self.counts["primal"] += 1
        try:
            if stage == "evaluating fn":
                return f(*args)
            with fns_warnings_only():  # (a derivative: the framework's machinery runs too)
                return f(*args)
        except ModeUnavailable:
            raise
        except Exception as e:  # user code: report, never crash the check
            raise CallFailed(stage, e) from e

    def _check_output(self, out: Any) -> None:
        if backend_name_of(out) != self.backend.name:
            raise ArgumentTypeError(
                explain(
                    "fn's return value",
                    f"one {self.backend.name} array (the backend of its arguments)",
                    f"{type(out).__module__}.{type(out).__qualname__}",
                    "return a single array; for several outputs check each (lambda *a: fn(*a)[k]) or concatenate them",
                )
            )

    def _derivative(self, d: Any) -> Derivative:
        if d is None:
            return Derivative(None, None, None, "None")
        if backend_name_of(d) != self.backend.name:
            return Derivative(None, None, None, f"{type(d).__module__}.{type(d).__qualname__}")
        return Derivative(self._working(d), self.backend.dtype_name(d), tuple(d.shape), "array")


def _stack(arrays: Sequence[Any]) -> Any:
    return xp.ns(arrays[0]).stack(arrays)


class BadStructure(Exception):
    """A rule returned the wrong number of cotangents."""
