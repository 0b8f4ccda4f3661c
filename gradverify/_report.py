"""The human report of one check: fits on a screen, verdict first."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the result imports this module to print itself)
    from ._result import CheckResult, Finding

_MAX_FINDINGS = 8
_MAX_DETAIL_LINES = 12


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def render_finding(f: Finding) -> list[str]:
    head = f"[{f.level}] {f.kind}"
    if f.pair:
        head += f" ({f.pair[0]} vs {f.pair[1]})" if f.pair[1] not in ("-", "output", "inputs") else f" ({f.pair[0]})"
    if f.order != 1:
        head += f" [order {f.order}]"
    lines = [f"{head}: {f.message}"]
    if f.values:
        lines.append("    " + "   ".join(f"{k} = {_fmt(v)}" for k, v in f.values.items()))
    if f.error is not None and f.bound is not None:
        verdict = ">" if f.error > f.bound else "<="
        lines.append(f"    |error| = {f.error:.3g} {verdict} bound {f.bound:.3g}")
        if f.bound_reason:
            lines.append(f"    bound: {f.bound_reason}")
    if f.where:
        lines.append(f"    where: {f.where}")
    if f.detail:
        detail = f.detail.rstrip().splitlines()[-_MAX_DETAIL_LINES:]
        lines.extend("    | " + d for d in detail)
    return lines


def render_text(r: CheckResult) -> str:
    errors = r.errors
    if errors:
        verdict = "FAILED"
    elif any(f.kind == "nothing_compared" for f in r.findings):
        verdict = "PASSED (nothing compared)"
    elif r.inconclusive:
        verdict = "PASSED (partly inconclusive)"
    else:
        verdict = "PASSED"
    if not errors and r.second_order_checked is False:
        verdict += " (order 2 not checked: no derivative of the JVP or VJP could be taken)"
    n_warn = len(r.warnings)
    lines = [
        f"gradverify {verdict}: {r.function} [{r.backend}, order {r.order}] "
        f"- {len(errors)} error(s), {n_warn} warning(s)"
    ]
    modes = ", ".join(f"{k}: {v}" for k, v in r.modes.items())
    lines.append(f"  checked: {r.strategy}; {modes}")
    lines.append("  inputs:  " + "; ".join(str(s) for s in r.inputs))
    if r.output is not None:
        lines.append(f"  output:  {r.output}")
    lines.extend(f"  note:    {note}" for note in r.notes)
    ordered = sorted(r.findings, key=lambda f: (f.level != "error", f.level != "warning"))
    for f in ordered[:_MAX_FINDINGS]:
        lines.extend("  " + line for line in render_finding(f))
    if len(ordered) > _MAX_FINDINGS:
        lines.append(f"  ... {len(ordered) - _MAX_FINDINGS} more finding(s) in result.findings")
    calls = ", ".join(f"{k} {v}" for k, v in sorted(r.evaluations.items()))
    lines.append(f"  cost:    {calls}")
    lines.append(f"  reproduce: {r.reproduce}")
    return "\n".join(lines)
