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


# -- rerun: one test, many seeds, threads and repeats ----------------------------------------
PRECISION_FACTOR = 8.0  # a failing error within this many FD/rounding bounds is a precision question


def _flat(a: Any) -> Any:
    import numpy as np

    from ._verify import _to_numpy

    return np.asarray(_to_numpy(a), dtype=np.float64).reshape(-1)


def _kink_distance(args: Sequence[Any], kinks: Sequence[float], position: Any) -> float | None:
    import numpy as np

    if not kinks:
        return None
    z = position(*args) if position is not None else _flat(args[0])
    z = np.asarray(_flat(z))
    return float(np.min(np.abs(z.reshape(-1, 1) - np.asarray(kinks, dtype=np.float64))))


def _gradients(fn: Any, args: Sequence[Any], cotangent_seed: int = 0) -> list[Any]:
    """VJP of fn at args for a fixed cotangent, through the checker's Evaluator."""
    import numpy as np

    from ._check import backend_of
    from ._evaluate import Evaluator
    from ._validate import resolve_wrt

    ev = Evaluator(fn, backend_of(args), args, ())
    ev.wrt = resolve_wrt(None, ev.floating, ev.dtypes)
    out = ev.primal(None, None)
    v = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
    dtype = next(d for d, f in zip(ev.dtypes, ev.floating) if f)
    return [np.asarray(d.value) for d in ev.vjp(v, dtype)]


def _thread_counts_differ(fn: Any, args: Sequence[Any], threads: Sequence[int], repeats: int) -> dict[str, Any] | None:
    """Bitwise differences of outputs and gradients across repeated calls and
    torch thread counts: the evidence of a nondeterministic op (None: none)."""
    import numpy as np

    from ._verify import _to_numpy

    torch = None
    if any(type(a).__module__.startswith("torch") for a in args):
        import torch
    seen: dict[str, list[Any]] = {}
    previous = torch.get_num_threads() if torch is not None else None
    try:
        for t in threads if torch is not None else (None,):
            if torch is not None:
                torch.set_num_threads(t)
            for _ in range(repeats):
                y = np.asarray(_to_numpy(fn(*args)), dtype=np.float64)
                g = _gradients(fn, args)
                seen.setdefault(f"threads={t}", []).append((y, g))
    finally:
        if torch is not None:
            torch.set_num_threads(previous)
    first_key = next(iter(seen))
    y0, g0 = seen[first_key][0]
    for key, rows in seen.items():
        for y, g in rows:
            if not np.array_equal(y, y0) or any(not np.array_equal(a, b) for a, b in zip(g, g0)):
                diff = max([float(np.max(np.abs(y - y0)))] + [float(np.max(np.abs(a - b))) for a, b in zip(g, g0)])
                return {"differs_between": [first_key, key], "max_difference": diff}
    return None


def _located(result: Any, args: Sequence[Any], position: Any) -> list[float]:
    """Where the check located the wrong element: its input value (with
    ``position``, the positions instead)."""
    if position is not None:
        return [float(v) for v in _flat(position(*args))[:16]]
    err = result.errors[0] if result.errors else None
    if err is not None and err.argument is not None and err.input_index is not None:
        import numpy as np

        from ._verify import _to_numpy

        return [float(np.asarray(_to_numpy(args[err.argument]), dtype=np.float64)[tuple(err.input_index)])]
    return [float(v) for v in _flat(args[0])[:16]]


def _first_failure(
    fn: Any, strategy: Any, run_test: Any, seed: int, max_examples: int, first_args: list[Any]
) -> list[Any]:
    """The first input (in the seed's order, unshrunk) on which the test fails,
    and how many of the seed's inputs ran and failed."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list[Any] = []
    counts = {"examples": 0, "failing": 0}

    @settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def explore(args: Any) -> None:
        if not first_args:
            first_args.append(args)
        ok, err = run_test(fn, *args)
        counts["examples"] += 1
        counts["failing"] += not ok
        if not ok and not found:
            found.append((args, err))

    from ._verify import _reproducible_generation

    with _reproducible_generation():
        explore()
    return found, counts


def rerun(
    fn: Any,
    args_strategy: Any,
    *,
    test: Any = None,
    seeds: int = 8,
    max_examples: int = 50,
    kinks: Sequence[float] = (),
    position: Any = None,
    threads: Sequence[int] = (1, 2),
    repeats: int = 3,
    fd_step: float | None = None,
) -> dict[str, Any]:
    """Rerun one gradient test across seeds, thread counts and repeated
    identical evaluations, and give a verdict with its evidence.

    ``test(fn, *args) -> (ok, error)`` is the test as written (default: gv.check
    with the rounding model). Each failing input is judged again by gv.check:
    confirmed failures are a **bug** (every seed) or a **bug in a region** (some
    seeds; the failing positions are given); unconfirmed ones are a **kink
    flake** when the input lies within ``fd_step`` of one of ``kinks``
    (``position(*args)`` gives the points to measure, default the first
    argument), else a **precision flake** with the tolerance that would hold;
    outputs or gradients that change between identical calls or thread counts
    make it a **nondeterministic op**."""
    import numpy as np

    from ._check import check

    def default_test(f: Any, *args: Any) -> tuple[bool, float]:
        r = check(f, *args)
        return r.ok, max((e.error or 0.0) for e in r.errors) if r.errors else 0.0

    run_test = test or default_test
    failures: list[dict[str, Any]] = []
    first_args: list[Any] = []
    failing_seeds = []
    totals = {"examples": 0, "failing": 0}
    for s in range(seeds):
        found, counts = _first_failure(fn, args_strategy, run_test, s, max_examples, first_args)
        totals["examples"] += counts["examples"]
        totals["failing"] += counts["failing"]
        if found:
            failing_seeds.append(s)
            args, err = found[0]
            accurate = check(fn, *args)
            failures.append(
                {
                    "seed": s,
                    "test_error": float(err),
                    "confirmed": not accurate.ok,
                    "accurate_error": max((e.error or 0.0) for e in accurate.errors) if accurate.errors else 0.0,
                    "accurate_bound": max((e.bound or 0.0) for e in accurate.errors) if accurate.errors else None,
                    "inconclusive": accurate.inconclusive,
                    "kink_distance": _kink_distance(args, kinks, position),
                    "position": _located(accurate, args, position),
                    "args": args,
                    "check": accurate,
                }
            )
    nondeterminism = _thread_counts_differ(fn, first_args[0], threads, repeats) if first_args else None
    evidence: dict[str, Any] = {
        "seeds": seeds,
        "examples": totals["examples"],
        "failing_examples": totals["failing"],
        "failing_seeds": failing_seeds,
        "nondeterminism": nondeterminism,
    }
    if nondeterminism is not None:
        verdict = "nondeterministic op"
    elif not failures:
        verdict = "passes"
    elif any(f["confirmed"] for f in failures):
        # a confirmed failure is a bug, whatever else flaked; everywhere (nearly
        # every input fails) or only where inputs reach a region
        everywhere = totals["failing"] >= 0.95 * totals["examples"]
        verdict = "bug" if everywhere else "bug in a region"
        positions = np.concatenate([np.asarray(f["position"], dtype=np.float64) for f in failures if f["confirmed"]])
        evidence["region"] = [float(positions.min()), float(positions.max())]
    elif fd_step is not None and all(
        f["kink_distance"] is not None and f["kink_distance"] <= 2 * fd_step for f in failures if not f["confirmed"]
    ):
        verdict = "kink flake"
        evidence["kink_distances"] = [f["kink_distance"] for f in failures]
        evidence["avoid_with"] = (
            "gradverify.strategies.arrays(..., kinks=[...]) or bias_act_args: values kept off kinks"
        )
    else:
        verdict = "precision flake"
        evidence["proposed_tolerance"] = 2 * max(f["test_error"] for f in failures)
    evidence["failures"] = [{k: v for k, v in f.items() if k not in ("args", "check")} for f in failures]
    minimal = next((f for f in failures if f["confirmed"]), failures[0] if failures else None)
    return {
        "verdict": verdict,
        "evidence": evidence,
        "example": None if minimal is None else minimal["args"],
        "check": None if minimal is None else minimal["check"],
    }


# -- the rerun report --------------------------------------------------------------------------
def rerun_record(target: str, result: dict[str, Any], reproduce: str) -> dict[str, Any]:
    """A JSON-ready record of one rerun: verdict, evidence, the first failing
    input exactly, and the command that reproduces the triage."""
    import numpy as np

    from ._verify import _exact, _to_numpy

    example = result["example"]
    return {
        "target": target,
        "verdict": result["verdict"],
        "evidence": result["evidence"],
        "example": None if example is None else [_exact(np.asarray(_to_numpy(a))) for a in example],
        "check": None if result["check"] is None else str(result["check"]),
        "reproduce": reproduce,
    }


def rerun_markdown(records: Sequence[dict[str, Any]]) -> str:
    lines = ["# gradverify triage (rerun)", "", "| target | verdict | failing inputs | evidence |", "|---|---|---|---|"]
    for r in records:
        ev = r["evidence"]
        shown = {k: ev[k] for k in ("region", "kink_distances", "proposed_tolerance", "nondeterminism") if ev.get(k)}
        lines.append(
            f"| {r['target']} | **{r['verdict']}** | {ev['failing_examples']} / {ev['examples']} "
            f"(seeds {ev['failing_seeds'] or 'none'}) | {shown or '-'} |"
        )
    for r in records:
        lines += ["", f"## {r['target']}: {r['verdict']}", "", f"reproduce: `{r['reproduce']}`"]
        if r["example"]:
            lines.append("")
            lines.append("first failing input:")
            for k, a in enumerate(r["example"]):
                lines.append(f"- `arg{k}` {a['dtype']}{a['shape']}: `{a['values']}`")
        if r["check"]:
            lines += ["", "```", r["check"], "```"]
    return "\n".join(lines) + "\n"


def rerun_html(records: Sequence[dict[str, Any]]) -> str:
    import html

    e = html.escape
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>gradverify triage</title></head><body>',
        "<h1>gradverify triage (rerun)</h1>",
        '<table id="verdicts"><tr><th>target</th><th>verdict</th><th>failing inputs</th></tr>',
    ]
    for r in records:
        ev = r["evidence"]
        out.append(
            f'<tr><td><a href="#{e(r["target"])}">{e(r["target"])}</a></td>'
            f'<td class="verdict">{e(r["verdict"])}</td><td>{ev["failing_examples"]} / {ev["examples"]}</td></tr>'
        )
    out.append("</table>")
    for r in records:
        out.append(f'<h2 id="{e(r["target"])}">{e(r["target"])}: {e(r["verdict"])}</h2>')
        out.append(f"<p>reproduce: <code>{e(r['reproduce'])}</code></p>")
        if r["check"]:
            out.append(f"<pre>{e(r['check'])}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
