"""A migrated suite's own tolerance, said where it decided.

``gv.check(..., suite_tol=(atol, rtol))`` (the drop-ins pass their peers'
``atol`` and ``rtol``) never fails an AD value within ``atol + rtol |FD|``
of finite differences, and never passes one beyond gradverify's bound
unless that tolerance covers it. A full Jacobian's elements are judged as
they are compared (``Judge._violation``, ``Comparisons._worst_jacobian_element``);
a random direction's disagreement by the element it was located at, here.
"""

from __future__ import annotations

import dataclasses

from .._result import ERROR, WARNING, Kind
from .findings import Findings
from .messages import name_of

__all__ = ["COVERED", "said"]

#: Said of a disagreement that the suite's tolerance passed.
COVERED = "- passed, as the suite asked (a bug smaller than that tolerance would pass here too)"


def said(report: Findings, tolerance: tuple[float, float] | None, covered: dict[tuple[str, int], int]) -> None:
    """Located mismatches within the suite's tolerance become warnings, and
    one warning per mode counts the elements it passed beyond the bound
    (``covered``: by mode and direction, from the comparisons)."""
    if tolerance is None:
        return
    atol, rtol = tolerance
    items, demoted = report.items, set()
    for k, f in enumerate(items):
        if f.kind != Kind.MISMATCH or f.level != ERROR or not f.pair or f.pair[1] != "FD" or f.input_index is None:
            continue
        ad, fd = f.values.get(f.pair[0]), f.values.get("FD")
        if ad is not None and fd is not None and abs(ad - fd) <= atol + rtol * abs(fd):
            items[k] = dataclasses.replace(f, level=WARNING, message=f"{f.message} {COVERED}")
            demoted.add(f.pair[0])
    for mode in ("JVP", "VJP"):
        n = sum(c for (m, _), c in covered.items() if m == mode)
        if n and mode not in demoted:
            report.add(
                Kind.MISMATCH,
                WARNING,
                f"{name_of(mode)} is off finite differences beyond gradverify's bound at {n} element(s), "
                f"within the suite's own tolerance (atol {atol:g} + rtol {rtol:g} x |FD|) {COVERED}",
                pair=(mode, "FD"),
            )
