"""Models passed as fn, called as functions of their parameters and inputs.

``gv.check(module, x)`` checks the inputs and every parameter: a torch
``nn.Module`` is called through ``torch.func.functional_call`` with its
parameters that require grad as the first argument (a dict by their dotted
names) and its buffers as fresh copies at every call, so running
statistics a call updates never reach the caller's module (the report says
which were updated and held); an equinox module is itself a pytree, its
inexact-array leaves the parameters. Either way the parameters are named
``model.<path>`` and ``wrt="inputs"`` / ``"parameters"`` narrow the check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..._result import CheckResult, Kind
from ...backends.trees import is_module

__all__ = ["MODEL", "Model", "model_of"]

#: The name of a model's parameters in reports and ``wrt``.
MODEL = "model"


class Model:
    """A model as fn: ``call(params, *inputs)`` and its parameters."""

    framework: str
    params: Any
    call: Callable[..., Any]

    def said(self, result: CheckResult, inputs: tuple[Any, ...]) -> CheckResult:
        """The result with what the model's own call says (its buffers, its mode)."""
        return result


class _Torch(Model):
    framework = "torch"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        self.frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
        self.buffers = dict(module.named_buffers())

    def call(self, params: dict[str, Any], *inputs: Any) -> Any:
        import torch.func  # (a torch model's call: torch is loaded)

        fresh = {n: b.clone() for n, b in self.buffers.items()}
        return torch.func.functional_call(self.module, {**params, **fresh}, inputs)

    def updated(self, inputs: tuple[Any, ...]) -> list[str]:
        """The buffers one call at ``inputs`` updates (running statistics)."""
        import torch  # (a torch model's call: torch is loaded)

        fresh = {n: b.clone() for n, b in self.buffers.items()}
        with torch.no_grad():
            torch.func.functional_call(self.module, {**self.params, **fresh}, inputs)
        return [n for n, b in fresh.items() if not torch.equal(b, self.buffers[n])]

    def said(self, result: CheckResult, inputs: tuple[Any, ...]) -> CheckResult:
        notes = list(result.notes)
        if self.frozen:
            notes.append(f"parameters with requires_grad=False held as constants: {', '.join(self.frozen[:8])}")
        try:
            updated = self.updated(inputs) if self.buffers else []
        except Exception:  # noqa: BLE001 -- fn's own error is the check's to report
            updated = []
        if updated:
            notes.append(
                f"fn updates buffers ({', '.join(updated)}): each call ran on fresh copies of the module's "
                "buffers, so those updates were held and the caller's module is unchanged"
            )
        findings = result.findings
        if self.module.training:
            random = sorted({type(m).__name__ for m in self.module.modules() if "Dropout" in type(m).__name__})
            cause = f" ({', '.join(random)})" if random else ""
            findings = tuple(
                dataclasses.replace(
                    f,
                    message=f"{f.message}; the module is in training mode{cause}: call module.eval() before "
                    "checking, or fix its randomness (a seeded generator)",
                )
                if f.kind == Kind.NONDETERMINISM
                else f
                for f in findings
            )
        return dataclasses.replace(result, findings=findings, notes=tuple(notes))


class _Equinox(Model):
    framework = "equinox"

    def __init__(self, module: Any) -> None:
        self.params = module

    @staticmethod
    def call(model: Any, *inputs: Any) -> Any:
        return model(*inputs)


def model_of(fn: Any) -> Model | None:
    """fn as a model whose parameters are checked (None: fn is a function)."""
    kind = is_module(fn)
    if kind == "torch":
        return _Torch(fn)
    if kind == "equinox":
        return _Equinox(fn)
    return None
