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
from collections.abc import Sequence
from typing import Any

from ..._result import CheckResult, Finding
from ...backends import Backend
from .base import Layer, View, relocated

__all__ = ["Complex"]


class Complex(View):
    """Complex arguments (at ``complex_args``) as real views with a trailing
    axis of 2, made complex before fn sees them; a complex output returned
    as its real view."""

    takes = "complex"

    def __init__(self, backend: Backend, args: tuple[Any, ...], complex_args: tuple[bool, ...]) -> None:
        self.backend, self.complex_args = backend, complex_args
        self.args = tuple(backend.as_real(a) if c else a for a, c in zip(args, complex_args))
        self.output_complex = False  # whether fn's output was complex (and returned as its real view)
        self.key = (complex_args, backend.name)

    @classmethod
    def of(cls, backend: Backend, args: tuple[Any, ...], outputs: frozenset[str]) -> Complex | None:
        complex_args = tuple(bool(hasattr(a, "dtype") and backend.is_complex(a)) for a in args)
        if not any(complex_args) and "complex" not in outputs:
            return None
        return cls(backend, args, complex_args)

    def inputs(self, args: Sequence[Any]) -> list[Any]:
        return [self.backend.as_complex(a) if c else a for a, c in zip(args, self.complex_args)]

    def output(self, out: Any) -> Any:
        # (an output the checker cannot read goes back as it is, for the
        # evaluator to refuse in its own words)
        readable = out is not None and hasattr(out, "dtype") and self.backend.unsupported(out) is None
        if readable and self.backend.is_complex(out):
            self.output_complex = True
            return self.backend.as_real(out)
        return out

    def tangents(self, tangents: Sequence[Any]) -> list[Any]:
        return [
            t if t is None else (self.backend.as_complex(t) if c else t) for t, c in zip(tangents, self.complex_args)
        ]

    def output_cotangent(self, cotangent: Any) -> Any:
        # (the check evaluates the primal first: its output's kind is known)
        return self.backend.as_complex(cotangent) if self.output_complex else cotangent

    def cotangents(self, cotangents: Sequence[Any]) -> list[Any]:
        return [
            r if r is None or not c else self.backend.as_real(r) for r, c in zip(cotangents, self.complex_args)
        ] + list(cotangents[len(self.complex_args) :])

    def said(self, result: CheckResult, layer: Layer) -> CheckResult:
        """The result of the real view in the complex function's terms: an
        index whose last component is the part names the element and the part."""
        complex_out, complex_args, backend = self.output_complex, self.complex_args, self.backend

        def named(f: Finding) -> Finding:
            changes: dict[str, Any] = {}
            said = []
            if f.input_index and f.argument is not None and complex_args[f.argument]:
                changes["input_index"] = f.input_index[:-1]
                said.append(f"the {_PART[f.input_index[-1]]} part of argument {f.argument} {f.input_index[:-1]}")
            # (a second-order finding's output is the rule's, not fn's: its index stays in real terms)
            if f.output_index and complex_out and f.order == 1:
                changes["output_index"] = f.output_index[:-1]
                said.append(f"the {_PART[f.output_index[-1]]} part of output {f.output_index[:-1]}")
            return relocated(f, changes, said)

        shown = ", ".join(
            f"arg{i} {backend.dtype_name(a)}{list(a.shape)}"
            for i, (a, c) in enumerate(zip(layer.args, complex_args))
            if c
        )
        note = (
            "complex values checked as their real and imaginary parts (a trailing axis of 2 in the shapes above"
            + (f": {shown}" if shown else "")
            + (", and the output" if complex_out else "")
            + ")"
        )
        findings = tuple(named(f) for f in result.findings)
        return dataclasses.replace(result, findings=findings, notes=(*result.notes, note))


_PART = {0: "real", 1: "imaginary"}
