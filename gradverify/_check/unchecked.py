"""No PASS without a check: a result that compared no derivative is not a pass."""

from __future__ import annotations

import dataclasses

from .._result import ERROR, WARNING, CheckResult, Finding, Kind

__all__ = ["NOTHING_TO_DIFFERENTIATE", "unchecked"]

#: What a check whose every argument to differentiate is empty says it ran.
NOTHING_TO_DIFFERENTIATE = "not run (nothing to differentiate)"


def unchecked(result: CheckResult, allowed: bool = False) -> CheckResult:
    """``result`` with a ``nothing_checked`` finding where no derivative was
    compared (an error, unless ``allowed``): no first-order mode checked, or
    one alone at a point that gave finite differences nothing to compare.
    (Two modes checked were compared with each other, whatever FD decided.)"""
    if result.errors:
        return result
    modes = [m for m in ("JVP", "VJP") if result.modes.get(m) == "checked"]
    if len(modes) == 2 or (modes and not result.by_kind(Kind.NOTHING_COMPARED)):
        return result
    if result.strategy == NOTHING_TO_DIFFERENTIATE:
        why = "every argument to differentiate is empty"
        fix = "check fn at a point with at least one element"
    elif result.by_kind(Kind.NOTHING_COMPARED):
        why = "the point gave nothing to compare (see the nothing_compared finding)"
        fix = "check fn at another point"
    elif not modes and result.backend == "numpy":
        why = (
            "neither forward nor reverse mode could be taken: numpy has no automatic differentiation, so there "
            "is no derivative to check"
        )
        fix = "wrap fn as gv.Rule(fn, jvp=..., vjp=...) to check hand-written rules, or pass torch or jax arrays"
    else:
        why = "neither forward nor reverse mode could be taken (see the mode_unavailable findings)"
        fix = "give fn a derivative rule (or check the arguments that have one: wrt=...)"
    said = "allowed by allow_unchecked=True" if allowed else "not a pass"
    finding = Finding(
        kind=Kind.NOTHING_CHECKED,
        level=WARNING if allowed else ERROR,
        message=f"no derivative was compared ({said}): {why}; {fix}",
    )
    return dataclasses.replace(result, findings=(finding, *result.findings))
