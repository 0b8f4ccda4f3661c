"""The modes that raised for want of a derivative rule (a framework's "not
implemented", a rule that says it has none), told from a rule that crashes:
each failed mode asked again one argument at a time."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .._errors import ModeUnavailable
from .._result import Finding, Kind
from . import modes as _modes, xp
from .calls import CallFailed, brief
from .evaluate import Evaluator

__all__ = ["missing_rules"]


#: What a framework (or a rule) raises for a derivative it does not have:
#: "gradient with respect to a and b not supported" (jax's betainc), "the
#: derivative for 'self' is not implemented" (torch), "does not support
#: automatic differentiation for outputs with complex dtype"; "transpose_solve
#: required for backwards mode automatic differentiation" (jax's
#: custom_linear_solve); "Reverse-mode differentiation does not work for
#: lax.while_loop"; "Pure callbacks do not support JVP".
_MISSING_RULE = re.compile(
    r"\bnot (?:yet )?(?:supported|implemented)\b|does not support (?:automatic differentiation|forward AD)"
    r"|\bno (?:derivative|differentiation|gradient) rule\b|\brequired for (?:backwards?|reverse)[- ]mode\b"
    r"|\b(?:reverse|forward)-mode differentiation does not work\b|\bdo(?:es)? not support (?:JVP|VJP)\b",
    re.IGNORECASE,
)


def _is_missing_rule(e: BaseException) -> bool:
    return isinstance(e, NotImplementedError) or bool(_MISSING_RULE.search(str(e)))


def missing_rules(ev: Evaluator, findings: Sequence[Finding], modes: dict[str, str]) -> dict[str, dict[int, str]]:
    """The modes that raised for want of a derivative rule, each with the
    arguments it has none for alone (the framework's words): one call of
    the mode per argument, at the point. Empty where no mode raised so, or
    where a raising argument raised something else too (a rule that
    crashes is an error, not a missing rule)."""
    raised = [f.message for f in findings if f.kind == Kind.EXCEPTION]
    failed = [m for m in ("JVP", "VJP") if modes.get(m) == _modes.FAILED]
    if not failed or not any(_MISSING_RULE.search(t) or "NotImplementedError" in t for t in raised):
        return {}
    wrt = ev.wrt
    found: dict[str, dict[int, str]] = {}
    try:
        out, out_dtype, _ = ev.primal_raw()
        ones = xp.ns(out).ones_like(out)
        for mode in failed:
            for i in wrt:
                ev.wrt = (i,)
                v = ev.values[i]
                try:
                    if mode == "JVP":
                        ev.jvp([xp.ns(v).ones_like(v)])
                    else:
                        ev.vjp(ones, out_dtype)
                except CallFailed as e:
                    if not _is_missing_rule(e.exc):
                        return {}
                    found.setdefault(mode, {})[i] = f"{type(e.exc).__name__}: {brief(e.exc)}"
                except ModeUnavailable:
                    pass
    except CallFailed:
        return {}
    finally:
        ev.wrt = wrt
    return found
