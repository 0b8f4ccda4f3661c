"""``gradverify triage junit``: read JUnit XML from several CI runs and tell,
per test, how often it fails, with what confidence, and which recorded
environment fields separate its failing runs from its passing ones.

Files are parsed with defusedxml (they come from other machines) through
junitparser. Environment fields come from each suite's ``<properties>``
(the gradverify pytest plugin records the machine, thread counts and
versions there), the suite's ``hostname``, and each test's own properties.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

from ._errors import ArgumentValueError, explain

Z95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclasses.dataclass(frozen=True)
class Run:
    file: str
    env: dict[str, str]
    outcomes: dict[str, str]  # test id -> passed | failed | error | skipped
    properties: dict[str, dict[str, str]]  # test id -> its properties


def read_junit(paths: Sequence[str | os.PathLike[str]]) -> list[Run]:
    """One Run per file (a file with several suites merges their tests)."""
    import defusedxml.ElementTree as safe_et
    from junitparser import Error, Failure, JUnitXml, Skipped

    runs = []
    for path in paths:
        try:
            xml = JUnitXml.fromfile(str(path), parse_func=safe_et.parse)
        except Exception as e:  # unreadable, not XML, or refused by defusedxml
            raise ArgumentValueError(
                explain(
                    "triage junit FILE",
                    "a JUnit XML file",
                    f"{path} ({type(e).__name__}: {e})",
                    "pass --junitxml output",
                )
            ) from e
        suites = [xml] if xml._tag == "testsuite" else list(xml)
        env: dict[str, str] = {}
        outcomes: dict[str, str] = {}
        props: dict[str, dict[str, str]] = {}
        for suite in suites:
            for p in suite.properties():
                env[p.name] = p.value
            host = suite._elem.get("hostname")
            if host:
                env["hostname"] = host
            for case in suite:
                tid = f"{case.classname}::{case.name}" if case.classname else case.name
                result = case.result
                if any(isinstance(r, Failure) for r in result):
                    outcomes[tid] = "failed"
                elif any(isinstance(r, Error) for r in result):
                    outcomes[tid] = "error"
                elif any(isinstance(r, Skipped) for r in result):
                    outcomes[tid] = "skipped"
                else:
                    outcomes[tid] = "passed"
                elem = case._elem.find("properties")
                props[tid] = {} if elem is None else {p.get("name"): p.get("value") for p in elem}
        runs.append(Run(str(path), env, outcomes, props))
    return runs


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k failures in n runs."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _separating(failing: list[dict[str, str]], passing: list[dict[str, str]]) -> dict[str, dict[str, list[str]]]:
    """Fields whose values on failing runs and on passing runs do not overlap."""
    out = {}
    fields = set().union(*failing, *passing) if failing or passing else set()
    for f in sorted(fields):
        fv = {r.get(f, "<unset>") for r in failing}
        pv = {r.get(f, "<unset>") for r in passing}
        if fv and pv and not (fv & pv):
            out[f] = {"failing": sorted(fv), "passing": sorted(pv)}
    return out


def _envs(runs: Sequence[Run], test: str) -> list[dict[str, str]]:
    return [{**r.env, **r.properties.get(test, {})} for r in runs]


def triage_junit(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per test: runs, failures, flip rate with its 95% interval, the fields
    that separate failing from passing runs, and a verdict."""
    tests = sorted({t for r in runs for t in r.outcomes})
    out = []
    for t in tests:
        seen = [r for r in runs if t in r.outcomes and r.outcomes[t] != "skipped"]
        bad = [r for r in seen if r.outcomes[t] in ("failed", "error")]
        good = [r for r in seen if r.outcomes[t] == "passed"]
        n, k = len(seen), len(bad)
        lo, hi = wilson(k, n)
        # gradverify's per-test figures (verdict, error, seed) are outcomes, not environments
        found = _separating(_envs(bad, t), _envs(good, t))
        sep = {f: v for f, v in found.items() if not f.startswith("gradverify_")}
        if k == 0:
            verdict = "passes"
        elif k == n:
            verdict = "fails everywhere"
        elif sep:
            verdict = "environment-specific"
        else:
            verdict = "flaky"
        out.append(
            {
                "test": t,
                "runs": n,
                "failures": k,
                "flip_rate": k / n if n else 0.0,
                "interval95": [lo, hi],
                "verdict": verdict,
                "separating_fields": sep,
                "failing_files": [r.file for r in bad],
            }
        )
    return out


def render_markdown(rows: Sequence[dict[str, Any]], files: int) -> str:
    lines = [
        "# gradverify triage (JUnit)",
        "",
        f"{files} run(s); {sum(r['failures'] > 0 for r in rows)} test(s) failed at least once.",
        "",
        "| test | failures / runs | flip rate (95% interval) | verdict | separating fields |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (-r["failures"], r["test"])):
        sep = "; ".join(
            f"{f}: fails on {v['failing']}, passes on {v['passing']}" for f, v in r["separating_fields"].items()
        )
        lo, hi = r["interval95"]
        lines.append(
            f"| {r['test']} | {r['failures']} / {r['runs']} | {r['flip_rate']:.2f} ({lo:.2f} - {hi:.2f}) | "
            f"{r['verdict']} | {sep or '-'} |"
        )
    return "\n".join(lines) + "\n"
