"""No PASS without a check: a result that compared no derivative is not a pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .._result import ERROR, WARNING, CheckResult, Finding, Kind

__all__ = ["NOTHING_TO_DIFFERENTIATE", "empty_allowed", "unchecked"]

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
    elif left := [m for m in ("JVP", "VJP") if result.modes.get(m) == "not asked"]:
        tried = [m for m in ("JVP", "VJP") if m not in left]
        why = f"{' and '.join(left)} {'was' if len(left) == 1 else 'were'} not asked (modes=)" + (
            f" and {tried[0]} could not be taken (see the findings)" if tried else ""
        )
        fix = f"ask for {' and '.join(left)} too (modes=None checks every mode fn has)"
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


def empty_allowed(result: CheckResult, all_nan: Callable[[], bool] | None = None) -> CheckResult:
    """``result`` with its ``nothing_checked`` error a warning where there was
    nothing to check at all - every argument to differentiate empty, or fn's
    output empty - as the drop-ins' peers pass such a call; with ``all_nan``
    (whether fn's output is NaN at every element, asked only where nothing
    was compared because it is not finite) also there, for a peer that
    compares NaN as equal to NaN."""
    if not any(f.kind == Kind.NOTHING_CHECKED and f.level == ERROR for f in result.findings):
        return result
    empty = result.strategy == NOTHING_TO_DIFFERENTIATE or (
        result.output is not None and any(d == 0 for d in result.output.shape)
    )
    if empty:
        said = "allowed: the checker this call was written for passes an empty check"
    elif (
        all_nan is not None
        and result.by_kind(Kind.NONFINITE_OUTPUT)
        and result.by_kind(Kind.NOTHING_COMPARED)
        and all_nan()
    ):
        said = "allowed: fn's output is NaN at every element, which the checker this call was written for passes"
    else:
        return result
    findings = tuple(
        dataclasses.replace(f, level=WARNING, message=f.message.replace("not a pass", said))
        if f.kind == Kind.NOTHING_CHECKED
        else f
        for f in result.findings
    )
    return dataclasses.replace(result, findings=findings)
