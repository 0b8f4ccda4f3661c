"""Calls into fn and its derivatives, always on copies, in a chosen precision.

The checker works on float64 working arrays (numpy copies, or arrays of the
backend on the arguments' device: ``placed``, see xp); an ``Evaluator``
turns them into fresh backend arrays of the right dtype, calls fn (or its
rules), and turns the answer back. It counts every call, and wraps every exception raised by user
code into ``CallFailed`` with the stage it happened in."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import ArgumentTypeError, ModeNotAsked, ModeUnavailable
from .._rule import Rule
from ..backends import Backend, backend_name_of, backend_of
from ..backends.trees import flatten
from . import xp
from .calls import BadStructure, CallFailed, Derivative, Unshaped, check_output, fns_warnings_only
from .staged import Staged
from .validate import resolve_wrt

__all__ = ["Evaluator", "derivative_fn"]


class Evaluator(Staged):
    """fn and its derivatives at the point or at others, on copies (see the module)."""

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
        to = backend.to_working if placed else backend.to_host
        self.values = [to(a) for a in args]  # never handed to user code
        #: whether fn's arguments at the point are copied where the caller's
        #: lie (Backend.copies_where_held: on a device), not from the host's copies
        self.held_copies = not placed and backend.copies_where_held(args)
        #: where the backend copies arguments where they lie (and the check
        #: is on the host): the arguments as they were, copied there once -
        #: what every call at the point gets a copy of, as the host's copies
        #: are of them, whatever becomes of the caller's
        self.held = [backend.copy_of(a, backend.dtype_name(a)) for a in args] if self.held_copies else []
        self.dtypes = [backend.dtype_name(a) for a in args]
        self.floating = [backend.is_floating(a) for a in args]
        #: argument -> (min, max) of its values and the sum of their squares
        #: (with the array summed: a sum depends on where its data lies),
        #: where validation asked for them (device scalars, ``asked``; read
        #: with fn's first output)
        self.asked: dict[int, tuple[Any, ...]] = {}
        self.extremes: dict[int, tuple[float, float]] = {}
        self.squares: dict[int, tuple[Any, float]] = {}
        self.wrt = tuple(wrt)
        #: the modes the check was asked to leave out ("JVP", "VJP"): never called
        self.skip: frozenset[str] = frozenset()
        #: fn itself, inside the views it is seen through
        self.inner = getattr(self.fn, "fn", self.fn) if hasattr(self.fn, "views") else self.fn
        self.vmaps = backend.vectorises(self.inner)
        self.counts: Counter[str] = Counter()
        #: arrays fn's output depends on that are not its arguments (read
        #: from the first reverse-mode call at the point; None: not yet read)
        self.reached: list[Any] | None = None
        # jax makes float64 arrays only under x64: calls at the arguments' own
        # dtypes need it whenever one of them is 64-bit.
        wide = any(d in ("float64", "int64", "uint64") for d in self.dtypes)
        self.native_precision = "float64" if wide else "native"

    @classmethod
    def for_call(cls, fn: Callable, args: Sequence[Any]) -> Evaluator:
        """An Evaluator of fn at args (their backend's) with respect to every
        floating argument (gv.check's default), for probes outside a check."""
        ev = cls(fn, backend_of(args), args, ())
        ev.wrt = resolve_wrt(None, ev.floating, ev.dtypes)
        return ev

    # -- building arguments --------------------------------------------------------
    def array(self, a: Any, like: Any, dtype: str, fresh: bool = False) -> Any:
        """A backend array of ``dtype`` from the working array ``a``; it never
        shares memory with ``a`` unless ``fresh`` (``a`` is ours to hand over)."""
        if self.placed:
            return self.backend.from_working(a, like, dtype, copy=not fresh)
        return self.backend.from_numpy(a if fresh else np.array(a, copy=True), like, dtype)

    def arguments(self, points: Sequence[Any] | None, precision: str | None, keep: bool = False) -> list[Any]:
        """Backend arrays: ``points`` (fresh arrays, handed over) for the wrt arguments,
        copies of the base values elsewhere. Floating arguments get
        ``precision`` (None: their own dtype). ``keep``: remember the numpy
        buffers they were made from (for ``readback``). Where the backend
        copies an argument where it lies (Backend.copy_of) a base value is
        copied there, not made again from the host's copy: on a device no
        transfer (the same values: the host's is a copy of it)."""
        out = []
        buffers = []
        there = self.held_copies and not keep
        for i, ((a, dtype, fresh), like) in enumerate(zip(self._sources(points, precision), self.originals)):
            if there and not fresh:
                out.append(self.backend.copy_of(self.held[i], dtype))
                continue
            if not (fresh or self.placed):
                a = np.array(a, copy=True)
            if keep:
                buffers.append(a)
            out.append(self.array(a, like, dtype, fresh=fresh or not self.placed))
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
        return [self.array(t, self.originals[i], precision or self.dtypes[i]) for i, t in zip(self.wrt, tangents)]

    def working(self, out: Any) -> Any:
        """fn's output (or a derivative) as a float64 working array."""
        if self.placed:
            return self.backend.derivative(out)
        return self.backend.to_host(out).astype(np.float64, copy=False)

    # -- the primal -------------------------------------------------------------------
    def primal_raw(self, precision: str | None = None, first: bool = False) -> tuple[Any, str, list[Any]] | Unshaped:
        """Evaluate at the base point on copies; return the output (a working
        array: numpy in its own dtype, or float64 beside the arguments), its
        dtype, and the arguments as fn left them (to detect mutation).
        ``first``: an output that is not one dense real array is said
        (``Unshaped``) rather than read."""
        with self.backend.precision(precision or self.native_precision):
            args = self.arguments(None, precision, keep=not (self.placed or self.held_copies))
            out = self._call(self.fn, args, "evaluating fn")  # eager: mutation, nondeterminism
            if first:
                kind = unshaped(self.backend, out)
                if kind is not None:
                    return Unshaped(kind)
            check_output(self.backend, out)
            if self.placed:
                # (the arguments as fn left them, compared at once: ours, not copied again)
                after = [self.backend.to_working(a, copy=False) for a in args]
                return self.backend.to_working(out), self.backend.dtype_name(out), after
            if self.held_copies:  # (compared where they lie, with the originals: see before)
                return self.backend.to_host(out), self.backend.dtype_name(out), args
            after = [self.backend.readback(a, buf) for a, buf in zip(args, self.last_buffers)]
            return self.backend.to_host(out), self.backend.dtype_name(out), after

    def before(self, i: int) -> Any:
        """What argument i as fn left it at the point (primal_raw) is compared
        with to tell a write: its working array, or where it was copied where
        the caller's lies, that copy (never handed to fn)."""
        return self.held[i] if self.held_copies else self.values[i]

    def primal(self, points: Sequence[Any] | None, precision: str | None, flat: bool = False) -> Any:
        """fn at ``points`` (None: the base point); ``flat``: its output
        flattened (the finite differences' evaluations)."""
        with self.backend.precision(precision or self.native_precision):
            out = self._host("primal_flat", points, precision) if flat and points is not None else None
            self.counts["primal"] += out is not None
            if out is None:
                out = self._call(
                    lambda *a: self._primal_fn(*a, flat=flat), self.arguments(points, precision), "evaluating fn"
                )
            check_output(self.backend, out)
            return self.working(out)

    def primal_compiled(self, precision: str | None = None) -> tuple[Any, str] | None:
        """fn at the base point through its compiled form, as a working array,
        and its dtype; None where fn is not compiled (then ``primal_raw``)."""
        with self.backend.precision(precision or self.native_precision):
            out = self._host("primal", None, precision)
            if out is None:
                return None
            self.counts["primal"] += 1
            check_output(self.backend, out)
            return self.working(out), self.backend.dtype_name(out)

    def _host(self, form: str, points: Sequence[Any] | None, precision: str | None, operands: Any = ()) -> Any:
        """``backend.call_host``: fn's compiled ``form`` on the working arrays
        themselves (None: no such path; then the plain one)."""
        if self.rule is not None or self.placed or not self.backend.takes_host_arrays:
            return None
        sources = self._sources(points, precision)
        return self.backend.call_host(self.fn, form, [(a, d) for a, d, _ in sources], operands, self.wrt)

    def host_or(self, form: str, precision: str | None, operands: Any, plain: Callable[[], Any]) -> Any:
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

    def _jvp(self, tangents: Sequence[Any], precision: str | None, points: Any = None) -> Derivative:
        if "JVP" in self.skip:
            raise ModeNotAsked("left out by modes=")
        self.counts["jvp"] += 1
        why = self.backend.forward_unavailable(self.inner) if self.rule is None else None
        if why is not None:
            raise ModeUnavailable(why)
        operands = [(t, precision or self.dtypes[i]) for t, i in zip(tangents, self.wrt)]
        host = self._host("jvp", points, precision, operands)
        if host is not None:
            return self._derivative(host)
        args = self.arguments(points, precision)
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
                    full.append(self.array(xp.zeros(tuple(v.shape), v), a, dtype, fresh=True))
                else:
                    full.append(None)
            out = self._call(lambda: self.rule.jvp(tuple(args), tuple(full)), (), "the jvp rule")
        else:
            out = self._call(lambda: self.backend.jvp(self.fn, args, self.wrt, tans), (), "forward mode (JVP)")
        return self._derivative(out)

    def _vjp(self, cotangent: Any, out_dtype: str, precision: str | None, points: Any = None) -> list[Derivative]:
        if "VJP" in self.skip:
            raise ModeNotAsked("left out by modes=")
        self.counts["vjp"] += 1
        host = self._host("vjp", points, precision, [(cotangent, out_dtype)])
        if host is not None:
            return [self._derivative(r) for r in host]
        args = self.arguments(points, precision)
        cot = self.array(cotangent, self.originals[0], out_dtype)
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
        with self.reaching(points):
            res = self._call(lambda: self.backend.vjp(self.fn, args, self.wrt, cot), (), "reverse mode (VJP)")
        return [self._derivative(r) for r in res]

    def reaching(self, points: Any = None) -> contextlib.AbstractContextManager[None]:
        """Around the first reverse-mode call at the point: what fn reaches
        beyond its arguments goes to ``reached`` (see Backend.reaching)."""
        if self.reached is not None or points is not None:
            return contextlib.nullcontext()
        self.reached = []
        return self.backend.reaching(self.reached)

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

    def _derivative(self, d: Any) -> Derivative:
        if d is None:
            return Derivative(None, None, None, "None")
        if backend_name_of(d) != self.backend.name:
            return Derivative(None, None, None, f"{type(d).__module__}.{type(d).__qualname__}")
        if self.backend.is_sparse(d):
            layout = str(getattr(d, "layout", type(d).__name__)).removeprefix("torch.")
            return Derivative(None, self.backend.dtype_name(d), tuple(d.shape), f"{layout} array")
        return Derivative(self.working(d), self.backend.dtype_name(d), tuple(d.shape), "array")


def unshaped(backend: Backend, out: Any) -> str | None:
    """What view fn's output needs before the core can read it (None: none)."""
    if backend_name_of(out) is None and out is not None and not isinstance(out, (int, float, complex, str)):
        try:
            leaves = flatten(out).leaves
        except ArgumentTypeError:
            return None  # (refused in check_output's words)
        if any(backend_name_of(leaf) == backend.name for leaf in leaves):
            return "pytree"
    if backend_name_of(out) != backend.name:
        return None  # (refused in check_output's words)
    if backend.is_sparse(out):
        return "sparse"
    if hasattr(out, "dtype") and backend.unsupported(out, output=True) is None and backend.is_complex(out):
        return "complex"
    return None


def derivative_fn(ev: Evaluator, kind: str, arg: Any) -> Callable:
    """The derivative ``kind`` of ev's fn ("jvp": x -> J(x) u along the
    tangents ``arg``; "vjp": x -> J(x)^T v for the cotangent ``arg``) as a
    function of the arguments, to be checked at a higher order."""
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
