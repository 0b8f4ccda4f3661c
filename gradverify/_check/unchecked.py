"""No PASS without a check: a result that compared no derivative is not a pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from .._result import ERROR, WARNING, CheckResult, Finding, Kind

__all__ = ["NOTHING_TO_DIFFERENTIATE", "empty_allowed", "lacking", "required_failed", "required_unmet", "unchecked"]

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
        return _derivatives_unchecked(result, allowed)
    if result.strategy == NOTHING_TO_DIFFERENTIATE:
        why = "every argument to differentiate is empty"
        fix = "check fn at a point with at least one element"
    elif result.by_kind(Kind.NOTHING_COMPARED):
        why = "the point gave nothing to compare (see the nothing_compared finding)"
        fix = "check fn at another point"
    elif left := [m for m in ("JVP", "VJP") if result.modes.get(m) == "not asked"]:
        tried = [m for m in ("JVP", "VJP") if m not in left]
        why = f"{' and '.join(left)} {'was' if len(left) == 1 else 'were'} left out by the check's modes=" + (
            f" and {tried[0]} could not be taken (see the findings)" if tried else ""
        )
        fix = f"ask for {' and '.join(left)} too (without modes=, every mode fn has is checked)"
    elif not modes and result.backend == "numpy":
        why = (
            "neither forward nor reverse mode could be taken: numpy has no automatic differentiation, so there "
            "is no derivative to check"
        )
        fix = "wrap fn as gv.Rule(fn, jvp=..., vjp=...) to check hand-written rules, or pass torch or jax arrays"
    else:
        why = "neither forward nor reverse mode could be taken (see the mode_unavailable findings)"
        fix = "give fn a derivative rule (or check the arguments that have one: wrt=...)"
    return _with(result, allowed, why, fix)


def _derivatives_unchecked(result: CheckResult, allowed: bool) -> CheckResult:
    """``result``, with a ``nothing_checked`` finding where a check of order
    2 or more was asked for its derivatives' modes (``modes=``) and compared
    none of them: the first order alone is not the check asked for."""
    deeper = {m: s for m, s in result.modes.items() if " of " in m}
    if result.order < 2 or "not asked" not in deeper.values() or "checked" in deeper.values():
        return result
    asked = [m for m, s in deeper.items() if s != "not asked"]
    why = f"the modes asked for ({', '.join(asked)}) could not be taken (see the findings)" if asked else "none ran"
    fix = "ask for a mode of a derivative fn's rules have (e.g. 'VJP of VJP'), or check order=1"
    return _with(result, allowed, why, fix, f"no derivative of order {result.order} was compared")


def _with(
    result: CheckResult, allowed: bool, why: str, fix: str, head: str = "no derivative was compared"
) -> CheckResult:
    said = "allowed by allow_unchecked=True" if allowed else "not a pass"
    finding = Finding(
        kind=Kind.NOTHING_CHECKED,
        level=WARNING if allowed else ERROR,
        message=f"{head} ({said}): {why}; {fix}",
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


def lacking(result: CheckResult, modes: Sequence[str], run: Callable[[str], Any], framework: str) -> CheckResult:
    """``result``, where it compared nothing (an empty check, an output not
    finite), with each of ``modes`` that raises when run there said
    unavailable: the peer's call runs those modes even there, and raises
    with them (fn lacks the mode: an autograd.Function without a jvp, a
    custom_vjp's forward mode; or the mode fails). ``run(mode)`` runs the
    mode at the point."""
    if not result.by_kind(Kind.NOTHING_CHECKED):
        return result
    said, findings = dict(result.modes), list(result.findings)
    for mode in modes:
        if said.get(mode) in ("checked", "unavailable"):
            continue
        try:
            run(mode)
        except Exception as e:
            said[mode] = "unavailable"
            message = f"{mode} is unavailable ({framework}: {type(e).__name__}: {e})"
            findings.append(Finding(kind=Kind.MODE_UNAVAILABLE, level=WARNING, message=message, pair=(mode, "-")))
    return dataclasses.replace(result, modes=said, findings=tuple(findings)) if said != result.modes else result


def required_failed(result: CheckResult, required: Sequence[str], by: str) -> tuple[CheckResult, list[str]]:
    """``result`` failed for the modes of ``required`` that kept it from a
    pass unchecked (``required_unmet``), as the peer whose call required
    them (``by``) fails: each one's ``mode_unavailable`` warning an error,
    or an error of its own where it said none; and those modes. As it is
    where they were checked, where it failed for its own reasons, or where
    there was nothing to check (an empty check the peer passes), unless a
    required mode was found unavailable there."""
    if result.ok and result.by_kind(Kind.NOTHING_CHECKED):
        # (an empty check the peer passes, but for a mode it requires that fn lacks, where its call raises)
        missing = [m for m in required if result.modes.get(m) == "unavailable"]
    else:
        missing = required_unmet(result, required)
    findings = list(result.findings)
    for mode in missing:
        said = f"{mode} is required by {by}: {result.modes.get(mode, 'not run')}, not a pass"
        at = next(
            (k for k, f in enumerate(findings) if f.kind == Kind.MODE_UNAVAILABLE and f.pair == (mode, "-")), None
        )
        if at is None:
            findings.append(Finding(kind=Kind.MODE_UNAVAILABLE, level=ERROR, message=said, pair=(mode, "-")))
        else:
            unavailable = findings[at].message.removesuffix("; the other checks ran")
            findings[at] = dataclasses.replace(findings[at], level=ERROR, message=f"{unavailable}; {said}")
    return (dataclasses.replace(result, findings=tuple(findings)) if missing else result), missing


def required_unmet(result: CheckResult, required: Sequence[str]) -> list[str]:
    """The modes of ``required`` (a drop-in's call asked for them) that
    ``result`` did not check, where they are what keeps it from a pass: it
    passed without them; or, where it compared nothing (its only error
    ``nothing_checked``), those of them found unavailable, failed or not
    asked. Empty
    where they were all checked, or where the check failed for its own
    reasons (fn's output NaN everywhere never reached them)."""
    missing = [m for m in required if result.modes.get(m) != "checked"]
    if result.ok:
        return missing
    said = [m for m in missing if m in result.modes]  # (said so: not merely never reached)
    return said if said and all(f.kind == Kind.NOTHING_CHECKED for f in result.errors) else []
