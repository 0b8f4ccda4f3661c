"""What the pytest plugin keeps of each gv.check / gv.verify call a test
makes: a JSON-ready record of it, and whether the test's failure already
shows its report."""

from __future__ import annotations

from typing import Any

from .._verify import exact_leaves

__all__ = ["record_of", "shown_by"]


def record_of(nodeid: str, kind: str, res: Any) -> dict[str, Any]:
    """A JSON-ready record of one gv.check (``kind`` "check") or gv.verify call."""

    check = res.result if kind == "verify" else res
    worst = check.errors[0] if check is not None and check.errors else None
    ratio = res.worst_ratio
    if worst is not None and worst.error is not None and worst.bound:
        ratio = max(ratio, worst.error / worst.bound)  # the failure's own: above 1
    counterexample = getattr(res, "counterexample", None)
    return {
        "nodeid": nodeid,
        "call": kind,
        "function": res.function,
        "backend": res.backend,
        "seed": res.seed,
        "ok": res.ok,
        "inconclusive": int(res.inconclusive),
        **({"examples_run": res.examples_run} if kind == "verify" else {}),
        # the largest error / bound of the call: over the passing inputs, or the failure's
        "worst_ratio": ratio,
        "pair": None if worst is None or worst.pair is None else " vs ".join(worst.pair),
        "values": {} if worst is None else dict(worst.values),
        "where": None if worst is None else worst.message,
        "error": None if worst is None else worst.error,
        "bound": None if worst is None else worst.bound,
        "counterexample": None if counterexample is None else exact_leaves(tuple(counterexample)),
        "npz": getattr(res, "saved", None),
        "reproduce": None if check is None else check.reproduce,
        "report": None if res.ok else str(res),
    }


def shown_by(exc: BaseException) -> str:
    """What a test's failure already shows: its exception's text (a
    GradientError's, or ``assert r.ok, r``'s, is the report itself), and
    that of each exception in a group."""
    return "\n".join([str(exc), *(shown_by(e) for e in getattr(exc, "exceptions", ()))])
