"""Gradients of the wrong dtype, device, shape or layout, read where fn's
rules returned them.

A framework may mend a rule's gradient before anyone sees it: torch's engine
casts a custom ``autograd.Function``'s float32 gradient for a float64 input
to float64, so the rule's bug shows only as float32 rounding in a float64
gradient -- a precision mismatch that names neither cause nor fix. Where a
check's reverse mode failed or disagreed, the backend is asked what each
rule returned before the framework saw it; each gradient whose structure is
not its input's is a finding naming the rule, its input (fn's argument where
it is one), both values and the fix.
"""

from __future__ import annotations

from typing import Any

from .._result import ERROR, Finding, Kind
from .evaluate import Evaluator

__all__ = ["findings"]

#: The engine's words for a gradient it refused (said better by the finding).
ENGINE_REFUSAL = "returned an invalid gradient at index"


def findings(ev: Evaluator) -> list[Finding]:
    try:
        found = ev.backend.gradient_structure(ev.fn, list(ev.originals), ev.wrt)  # (it calls fn on copies)
    except Exception:  # noqa: BLE001 -- fn raised again: the check has said so already
        return []
    return [_finding(d) for d in found]


def _finding(d: dict[str, Any]) -> Finding:
    what, got, want = d["what"], _name(d["found"]), _name(d["expected"])
    whose = f"the backward of {d['function']}"
    of = f"its input {d['index']}" + (f" (argument {d['argument']} of fn)" if d["argument"] is not None else "")
    if what == "dtype":
        kind = Kind.WRONG_DTYPE
        message = (
            f"{whose} returned a {got} gradient for {of}, a {want} tensor; torch casts it to {want} afterwards, "
            f"so the gradient carries {got} rounding. Compute it in the input's dtype (no .float() or .half() in "
            "backward), or return grad.to(x.dtype)"
        )
    elif what == "device":
        kind = Kind.WRONG_DEVICE
        message = f"{whose} returned a gradient on {got} for {of}, which is on {want}; return it on the input's device"
        message += " (grad.to(x.device))"
    elif what == "shape":
        kind = Kind.WRONG_SHAPE
        message = (
            f"{whose} returned a gradient of shape {got} for {of}, of shape {want}; return one gradient of the "
            "input's shape per input (a broadcast input's summed down to it)"
        )
    else:
        kind = Kind.WRONG_LAYOUT
        message = f"{whose} returned a {got} gradient for {of}, a {want} tensor; return it in the input's layout"
    return Finding(
        kind=kind,
        level=ERROR,
        message=message,
        pair=("VJP", what),
        argument=d["argument"],
        values={},
        where=f"{d['function']}.backward, gradient {d['index']}",
    )


def _name(v: Any) -> str:
    if isinstance(v, tuple):
        return str(tuple(int(s) for s in v))
    return str(v).removeprefix("torch.")
