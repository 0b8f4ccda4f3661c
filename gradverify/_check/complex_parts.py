"""Complex arguments and outputs, checked as their real and imaginary parts.

A function of n complex numbers is a function of 2n real ones, and that real
function is what gv.check checks: each complex argument becomes a real array
with a trailing axis of 2 (real part, imaginary part), a complex output
likewise, and the JVP, the VJP and finite differences are compared on it as
on any other function, with the same bounds and localisation (an index into
the real view names the element and the part).

The real function's JVP is fn's real-linear differential, holomorphic or
not. Its VJP, for the cotangent (a, b) on the output's real and imaginary
parts, is the gradient (dL/dx, dL/dy) of L = <a, Re f> + <b, Im f> with
respect to each argument's parts: written as one complex number
dL/dx + i dL/dy, it is torch's VJP of the complex function for the
cotangent a + ib (the conjugate Wirtinger convention, 2 dL/dz*), and the
conjugate of jax's for the cotangent a - ib. Both frameworks differentiate
through the real view themselves, so a rule that conjugates where it should
not (or forgets to) disagrees with finite differences like any wrong rule.
A ``gv.Rule`` on complex arrays takes and gives its derivatives in torch's
convention: ``jvp`` the complex output tangent for complex input tangents,
``vjp`` dL/dx + i dL/dy per argument for the cotangent a + ib.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._result import CheckResult, Finding
from .._rule import Rule
from ..backends import Backend

__all__ = ["ComplexOutput", "RealView", "parts", "real_view"]


class ComplexOutput(Exception):
    """fn of real arguments returned a complex array: check its real view."""


class RealView:
    """fn as a function of real arrays: the arguments at the ``complex``
    positions are real views (trailing axis of 2) made complex before fn
    sees them; a complex output is returned as its real view."""

    def __init__(self, fn: Callable[..., Any], complex_args: tuple[bool, ...], backend: Backend) -> None:
        self.fn, self.complex_args, self.backend = fn, complex_args, backend
        self.output_complex = False  # whether fn's output was complex (and returned as its real view)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = getattr(fn, "__module__", None)

    def inputs(self, args: tuple[Any, ...]) -> list[Any]:
        return [self.backend.as_complex(a) if c else a for a, c in zip(args, self.complex_args)]

    def output(self, out: Any) -> Any:
        # (an output the checker cannot read goes back as it is, for the
        # evaluator to refuse in its own words)
        readable = out is not None and hasattr(out, "dtype") and self.backend.unsupported(out) is None
        if readable and self.backend.is_complex(out):
            self.output_complex = True
            return self.backend.as_real(out)
        return out

    def __call__(self, *args: Any) -> Any:
        return self.output(self.fn(*self.inputs(args)))


#: One view per (fn, complex positions): jax compiles a function once per
#: function object, so every check of one fn must see the same view.
_VIEWS: dict[tuple[int, tuple[bool, ...], str], tuple[Any, Any]] = {}
_MAX_VIEWS = 64


def real_view(fn: Any, complex_args: tuple[bool, ...], backend: Backend) -> Any:
    """fn (a function or a gv.Rule) on the real views of its complex arguments."""
    key = (id(fn), complex_args, backend.name)
    held = _VIEWS.get(key)
    if held is not None and held[0] is fn:
        return held[1]
    view = _rule_view(fn, complex_args, backend) if isinstance(fn, Rule) else RealView(fn, complex_args, backend)
    if len(_VIEWS) >= _MAX_VIEWS:
        _VIEWS.pop(next(iter(_VIEWS)))
    _VIEWS[key] = (fn, view)
    return view


def _rule_view(rule: Rule, complex_args: tuple[bool, ...], backend: Backend) -> Rule:
    primal = RealView(rule.fn, complex_args, backend)
    jvp = vjp = None
    if rule.jvp is not None:
        user_jvp = rule.jvp

        def jvp(primals: tuple, tangents: tuple) -> Any:
            ts = tuple(t if t is None else (backend.as_complex(t) if c else t) for t, c in zip(tangents, complex_args))
            return primal.output(user_jvp(tuple(primal.inputs(primals)), ts))

    if rule.vjp is not None:
        user_vjp = rule.vjp

        def vjp(primals: tuple, cotangent: Any) -> Any:
            z = tuple(primal.inputs(primals))
            # (the check evaluates the primal first: its output's kind is known)
            ct = backend.as_complex(cotangent) if primal.output_complex else cotangent
            res = user_vjp(z, ct)
            if not isinstance(res, (tuple, list)):
                return res  # (the checker says what it expected)
            return tuple(r if r is None or not c else backend.as_real(r) for r, c in zip(res, complex_args))

    return Rule(primal, jvp=jvp, vjp=vjp)


def parts(result: CheckResult, args: tuple[Any, ...], view: Any, backend: Backend) -> CheckResult:
    """The result of the real view in the complex function's terms: an index
    whose last component is the part names the element and the part."""
    primal = view.fn if isinstance(view, Rule) else view
    complex_out, complex_args = primal.output_complex, primal.complex_args

    def named(f: Finding) -> Finding:
        changes: dict[str, Any] = {}
        said = []
        if f.input_index and f.argument is not None and complex_args[f.argument]:
            changes["input_index"] = f.input_index[:-1]
            said.append(f"the {_PART[f.input_index[-1]]} part of argument {f.argument} {f.input_index[:-1]}")
        if f.output_index and complex_out:
            changes["output_index"] = f.output_index[:-1]
            said.append(f"the {_PART[f.output_index[-1]]} part of output {f.output_index[:-1]}")
        if not changes:
            return f
        where = ", ".join(said)
        changes["where"] = f"{f.where}; {where}" if f.where else where
        return dataclasses.replace(f, **changes)

    shown = ", ".join(
        f"arg{i} {backend.dtype_name(a)}{list(a.shape)}" for i, (a, c) in enumerate(zip(args, complex_args)) if c
    )
    note = (
        "complex values checked as their real and imaginary parts (a trailing axis of 2 in the shapes above"
        + (f": {shown}" if shown else "")
        + (", and the output" if complex_out else "")
        + ")"
    )
    return dataclasses.replace(result, findings=tuple(named(f) for f in result.findings), notes=(*result.notes, note))


_PART = {0: "real", 1: "imaginary"}
