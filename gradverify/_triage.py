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

from . import _io
from ._check import backend_of, check
from ._errors import ArgumentValueError, ModeUnavailable, explain
from ._evaluate import Evaluator
from ._result import Kind, Word
from ._validate import resolve_wrt
from ._verify import reproducible_generation, verify
from .backends import backend_name_of


class Verdict(Word):
    """What triage says of a test: of its CI runs (triage_junit) or of its
    gradient calls rerun (gv.triage)."""

    PASSES = "passes"
    # CI runs
    FAILS_EVERYWHERE = "fails everywhere"
    ENVIRONMENT_SPECIFIC = "environment-specific"
    FLAKY = "flaky"
    # gradient calls
    BUG = "bug"
    BUG_IN_A_REGION = "bug in a region"
    NONDETERMINISTIC_OP = "nondeterministic op"
    KINK_FLAKE = "kink flake"
    PRECISION_FLAKE = "precision flake"


Z95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclasses.dataclass(frozen=True)
class Run:
    file: str
    env: dict[str, str]
    outcomes: dict[str, str]  # test id -> passed | failed | error | skipped (the last attempt)
    properties: dict[str, dict[str, str]]  # test id -> its properties
    attempts: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # test id -> outcome per attempt

    def failed(self, test: str) -> bool:
        """Failed in this run: at its last attempt, or at an earlier one that a rerun hid."""
        return self.outcomes[test] in ("failed", "error") or any(
            a in ("failed", "error") for a in self.attempts.get(test, ())
        )


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
        attempts: dict[str, list[str]] = {}
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
                pairs = [] if elem is None else [(p.get("name"), p.get("value")) for p in elem]
                props[tid] = {k: v for k, v in pairs if k != "gradverify_attempt"}
                # the gradverify plugin's record of every attempt; the last entry of a test holds them all
                tried = [v.split(":", 1)[-1] for k, v in pairs if k == "gradverify_attempt"]
                if tried:
                    attempts[tid] = tried
        runs.append(Run(str(path), env, outcomes, props, attempts))
    return runs


def junit_files(paths: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """``gv.triage_junit``: per test of the JUnit files from several CI runs,
    its failures (reruns included), flip rate with a 95% interval, the
    environment fields separating failing runs from passing ones, and a verdict
    ("passes", "fails everywhere", "environment-specific", "flaky")."""
    return triage_junit(read_junit(paths))


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
        bad = [r for r in seen if r.failed(t)]
        good = [r for r in seen if not r.failed(t)]
        hidden = [r for r in bad if r.outcomes[t] == "passed"]  # failed, then passed on a rerun
        n, k = len(seen), len(bad)
        tried = [a for r in seen for a in r.attempts.get(t, ["passed"])]
        lo, hi = wilson(k, n)
        # gradverify's per-test figures (verdict, error, seed) are outcomes, not environments
        found = _separating(_envs(bad, t), _envs(good, t))
        sep = {f: v for f, v in found.items() if not f.startswith("gradverify_")}
        if k == 0:
            verdict = Verdict.PASSES
        elif k == n and not hidden:
            verdict = Verdict.FAILS_EVERYWHERE
        elif sep:
            verdict = Verdict.ENVIRONMENT_SPECIFIC
        else:
            verdict = Verdict.FLAKY
        out.append(
            {
                "test": t,
                "runs": n,
                "failures": k,
                "passed_on_rerun": len(hidden),
                "attempts": len(tried),
                "failed_attempts": sum(a in ("failed", "error") for a in tried),
                "flip_rate": k / n if n else 0.0,
                "interval95": [lo, hi],
                "verdict": verdict,
                "separating_fields": sep,
                "failing_files": [r.file for r in bad],
            }
        )
    return out


def _failures_cell(r: dict[str, Any]) -> str:
    cell = f"{r['failures']} / {r['runs']}"
    if r.get("passed_on_rerun"):
        cell += (
            f" ({r['passed_on_rerun']} passed on a rerun; {r['failed_attempts']} of {r['attempts']} attempts failed)"
        )
    return cell


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
            f"| {r['test']} | {_failures_cell(r)} | {r['flip_rate']:.2f} ({lo:.2f} - {hi:.2f}) | "
            f"{r['verdict']} | {sep or '-'} |"
        )
    return "\n".join(lines) + "\n"


# -- rerun: one test, many seeds, threads and repeats ----------------------------------------


def _flat(a: Any) -> Any:
    import numpy as np

    return np.asarray(_io.to_numpy(a), dtype=np.float64).reshape(-1)


def kink_distance(args: Sequence[Any], kinks: Sequence[float], position: Any) -> float | None:
    import numpy as np

    if not kinks:
        return None
    z = position(*args) if position is not None else _flat(args[0])
    z = np.asarray(_flat(z))
    return float(np.min(np.abs(z.reshape(-1, 1) - np.asarray(kinks, dtype=np.float64))))


def _gradients(fn: Any, args: Sequence[Any], cotangent_seed: int = 0) -> list[Any]:
    """VJP of fn at args for a fixed cotangent, through the checker's Evaluator."""
    import numpy as np

    ev = _evaluator(fn, args)
    out = ev.primal(None, None)
    v = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
    dtype = next(d for d, f in zip(ev.dtypes, ev.floating) if f)
    try:
        return [np.asarray(d.value) for d in ev.vjp(v, dtype)]
    except ModeUnavailable:
        return []  # no reverse mode (plain numpy): outputs alone are compared


def _thread_counts_differ(fn: Any, args: Sequence[Any], threads: Sequence[int], repeats: int) -> dict[str, Any] | None:
    """Bitwise differences of outputs and gradients across repeated calls and
    torch thread counts: the evidence of a nondeterministic op (None: none)."""
    import numpy as np

    torch = None
    if any(backend_name_of(a) == "torch" for a in args):
        import torch
    seen: dict[str, list[Any]] = {}
    previous = torch.get_num_threads() if torch is not None else None
    try:
        for t in threads if torch is not None else (None,):
            if torch is not None:
                torch.set_num_threads(t)
            for _ in range(repeats):
                y = np.asarray(_io.to_numpy(fn(*args)), dtype=np.float64)
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

        return [float(np.asarray(_io.to_numpy(args[err.argument]), dtype=np.float64)[tuple(err.input_index)])]
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

    with reproducible_generation():
        explore()
    return found, counts


KINK_MARGIN = 1e-3  # a minimal case stays this far (relative) from any declared kink
FD_STEPS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
DTYPES = ("float64", "float32")


def _evaluator(fn: Any, args: Sequence[Any]) -> Any:

    ev = Evaluator(fn, backend_of(args), args, ())
    ev.wrt = resolve_wrt(None, ev.floating, ev.dtypes)
    return ev


def fd_step_sweep(fn: Any, args: Sequence[Any], steps: Sequence[float] = FD_STEPS, seed: int = 0) -> dict[str, Any]:
    """One random directional derivative u^T J v of ``fn`` at ``args``: reverse
    mode at the arguments' own dtype against central differences in float64 at
    each step h (relative to the largest |x|).

    How |FD(h) - AD| moves with h tells the causes apart: a wrong rule levels
    off at the size of the mistake whatever the step; a stencil across a kink
    is wrong while h exceeds the distance to the kink and falls once it does
    not; rounding levels off at the AD's own precision (float32: ~1e-7)."""
    import numpy as np

    ev = _evaluator(fn, args)
    rng = np.random.default_rng(seed)
    base = [np.asarray(ev.values[i], dtype=np.float64) for i in ev.wrt]
    v = [rng.standard_normal(b.shape) for b in base]
    u = rng.standard_normal(ev.primal(None, None).shape)
    out_dtype = next(d for d, f in zip(ev.dtypes, ev.floating) if f)
    ad = 0.0
    for d, b, vk in zip(ev.vjp(u, out_dtype), base, v):
        if d.value is not None:
            ad += float(np.sum(np.asarray(d.value, dtype=np.float64).reshape(b.shape) * vk))
    scale = max([1.0] + [float(np.max(np.abs(b))) for b in base if b.size])
    rows = []
    for h in steps:
        t = h * scale
        plus = ev.primal([b + t * vk for b, vk in zip(base, v)], "float64")
        minus = ev.primal([b - t * vk for b, vk in zip(base, v)], "float64")
        fd = float(np.sum(u * (plus - minus))) / (2 * t)
        rows.append([t, fd, abs(fd - ad)])
    errors = [r[2] for r in rows]
    floor = min(errors)
    relative = floor / max(abs(ad), 1e-300)
    best = steps[errors.index(floor)] * scale
    return {
        "AD": ad,
        "steps": rows,
        "floor": floor,
        "relative_floor": relative,
        "best_step": best,
        "trend": (
            f"levels off at {relative:.2g} of |AD|: AD itself is off, whatever the step"
            if relative > STEP_EXPLAINS
            else f"falls to {relative:.2g} of |AD| at h = {best:.1e}: the step, not AD"
        ),
    }


#: An FD-step sweep whose best step brings FD within this fraction of |AD|
#: says the disagreement was the step's (or fn's rounding at it), not AD's: a
#: wrong rule stays off by the size of its mistake, 1e-4 and more, at every step.
STEP_EXPLAINS = 1e-4


def _step_explains(sweep: dict[str, Any] | None) -> bool:
    return sweep is not None and "relative_floor" in sweep and sweep["relative_floor"] <= STEP_EXPLAINS


def dtype_sweep(fn: Any, args: Sequence[Any], run_test: Any, dtypes: Sequence[str] = DTYPES) -> dict[str, Any]:
    """The test again on the same values cast to each of ``dtypes``:
    ``{dtype: {"ok", "error"}}``; a failure that goes away in a wider dtype is
    a question of precision, one that stays is not."""
    import numpy as np

    backend = backend_of(args)
    out: dict[str, Any] = {}
    for d in dtypes:
        try:
            with backend.precision(d):
                cast = [
                    backend.from_numpy(np.array(backend.to_numpy(a), copy=True), a, d) if backend.is_floating(a) else a
                    for a in args
                ]
                ok, err = run_test(fn, *cast)
            out[d] = {"ok": bool(ok), "error": float(err)}
        except Exception as e:  # a dtype the op does not take is a fact, not a crash
            out[d] = {"ok": None, "error": None, "raised": f"{type(e).__name__}: {e}"[:200]}
    return out


@dataclasses.dataclass(frozen=True)
class Triage:
    """The verdict on one gradient test and its evidence.

    ``verdict``: passes, bug, bug in a region, kink flake, precision flake or
    nondeterministic op (a Verdict); ``evidence`` holds the counts,
    the failing seeds, per failure the kink distance, the FD-step and dtype
    sweeps, and the verdict's own figures (``region``, ``kink_distances`` and
    ``avoid_with``, ``proposed_tolerance``, ``nondeterminism``, and for a bug
    ``minimal_case``); ``example`` is the minimal failing input for a bug (shrunk
    by gv.verify), else the first failing one, and ``check`` gv.check's result
    there."""

    verdict: Verdict
    evidence: dict[str, Any]
    example: tuple[Any, ...] | None
    check: Any

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.PASSES

    def __str__(self) -> str:
        ev = self.evidence
        lines = [
            f"verdict: {self.verdict}",
            f"  {ev['failing_examples']} of {ev['examples']} input(s) failed, "
            f"on seeds {ev['failing_seeds'] or 'none'} of {ev['seeds']}",
        ]
        for key in ("region", "minimal_case", "kink_distances", "avoid_with", "proposed_tolerance", "nondeterminism"):
            if ev.get(key) is not None:
                lines.append(f"  {key}: {ev[key]}")
        first = ev["failures"][0] if ev["failures"] else None
        if first is not None:
            sweep = first.get("fd_sweep")
            if sweep:
                lines.append(f"  FD step sweep: {sweep['trend']}")
            if first.get("dtypes"):
                shown = ", ".join(
                    f"{d} {'passes' if r['ok'] else 'fails' if r['ok'] is False else 'raises'}"
                    for d, r in first["dtypes"].items()
                )
                lines.append(f"  the failing input in other dtypes: {shown}")
        if self.check is not None:
            lines.append(f"  the check at the {'minimal' if 'minimal_case' in ev else 'first failing'} input:")
            lines += ["    " + ln for ln in str(self.check).splitlines()]
        return "\n".join(lines)


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
    fd_steps: Sequence[float] = FD_STEPS,
    dtypes: Sequence[str] = DTYPES,
) -> Triage:
    """Rerun one gradient test across seeds, thread counts, FD steps, dtypes
    and repeated identical evaluations, and give a verdict with its evidence.

    ``test(fn, *args) -> (ok, error)`` is the test as written (default: gv.check
    with the rounding model). Each failing input is judged again by gv.check:
    confirmed failures are a **bug** (nearly every input fails) or a **bug in a
    region** (some do; the failing positions are given); unconfirmed ones are a
    **kink flake** when the input lies within 2 ``fd_step`` of one of ``kinks``
    (``position(*args)`` gives the points to measure, default the first
    argument) or gv.check finds a kink there, else a **precision flake** with
    the tolerance that would hold; outputs or gradients that change between
    identical calls or thread counts make it a **nondeterministic op**. Each
    failure also records an FD-step sweep (:func:`fd_step_sweep`) and the test
    on its values in each of ``dtypes`` (:func:`dtype_sweep`)."""
    import numpy as np

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
            sweep = _quietly(fd_step_sweep, fn, args, fd_steps) if fd_steps else None
            failures.append(
                {
                    "seed": s,
                    "test_error": float(err),
                    # a bug only if gv.check fails there and no FD step brings AD and FD together
                    "confirmed": not accurate.ok and not _step_explains(sweep),
                    "check_fails": not accurate.ok,
                    "accurate_error": max((e.error or 0.0) for e in accurate.errors) if accurate.errors else 0.0,
                    "accurate_bound": max((e.bound or 0.0) for e in accurate.errors) if accurate.errors else None,
                    # gv.check's worst |error| / (FD error estimate + rounding) at this input: <= 1 means the
                    # derivative agrees with FD as well as FD can tell
                    "error_over_estimate": float(accurate.worst_ratio),
                    "inconclusive": accurate.inconclusive,
                    "kink_distance": kink_distance(args, kinks, position),
                    "position": _located(accurate, args, position),
                    "fd_sweep": sweep,
                    "dtypes": dtype_sweep(fn, args, run_test, dtypes) if dtypes else None,
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
    unconfirmed = [f for f in failures if not f["confirmed"]]

    def near_kink(f: dict[str, Any]) -> bool:
        declared = fd_step is not None and f["kink_distance"] is not None and f["kink_distance"] <= 2 * fd_step
        return declared or bool(f["inconclusive"])

    if nondeterminism is not None:
        verdict = Verdict.NONDETERMINISTIC_OP
    elif not failures:
        verdict = Verdict.PASSES
    elif any(f["confirmed"] for f in failures):
        # a confirmed failure is a bug, whatever else flaked; everywhere (nearly
        # every input fails) or only where inputs reach a region
        everywhere = totals["failing"] >= 0.95 * totals["examples"]
        verdict = Verdict.BUG if everywhere else Verdict.BUG_IN_A_REGION
        positions = np.concatenate([np.asarray(f["position"], dtype=np.float64) for f in failures if f["confirmed"]])
        evidence["region"] = (
            _pieces(positions, kinks) if len(kinks) else [float(positions.min()), float(positions.max())]
        )
    elif all(near_kink(f) for f in unconfirmed):
        verdict = Verdict.KINK_FLAKE
        evidence["kink_distances"] = [f["kink_distance"] for f in failures]
        evidence["avoid_with"] = (
            "gradverify.strategies.arrays(..., kinks=[...]) or bias_act_args: values kept off kinks"
        )
    else:
        verdict = Verdict.PRECISION_FLAKE
        evidence["proposed_tolerance"] = 2 * max(f["test_error"] for f in failures)
    evidence["failures"] = [{k: v for k, v in f.items() if k not in ("args", "check")} for f in failures]
    first = next((f for f in failures if f["confirmed"]), failures[0] if failures else None)
    example = None if first is None else tuple(first["args"])
    at = None if first is None else first["check"]
    if verdict in (Verdict.BUG, Verdict.BUG_IN_A_REGION):
        # shrink: gv.verify on the first confirmed seed gives the minimal case

        # a minimal case off the kinks, declared or found by gv.check there: no shrinking onto one
        if len(kinks):
            margin = KINK_MARGIN * max(1.0, *(abs(float(k)) for k in kinks))
            strategy = args_strategy.filter(lambda a: (kink_distance(a, kinks, position) or 0.0) > margin)
        else:
            strategy = args_strategy.filter(lambda a: not check(fn, *a).by_kind(Kind.NONDIFFERENTIABLE))
        shrunk = verify(fn, strategy, seed=first["seed"], max_examples=max_examples)
        if not shrunk.ok:
            example, at = tuple(shrunk.counterexample), shrunk.result
            evidence["minimal_case"] = {
                "seed": first["seed"],
                "shrink_steps": shrunk.shrink_steps,
                "shapes": [list(np.shape(a)) for a in example],
                "kink_distance": kink_distance(example, kinks, position),
                "position": _located(shrunk.result, example, position),
            }
    return Triage(verdict=verdict, evidence=evidence, example=example, check=at)


def _pieces(positions: Any, kinks: Sequence[float]) -> list[str]:
    """The pieces between kinks that hold the failing positions, e.g. ["x < -3", "x > 3"]."""
    import numpy as np

    ks = sorted(float(k) for k in kinks)
    edges = [-np.inf, *ks, np.inf]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if np.any((positions > lo) & (positions < hi)):
            out.append(f"x > {lo:g}" if hi == np.inf else f"x < {hi:g}" if lo == -np.inf else f"{lo:g} < x < {hi:g}")
    out += [f"x = {k:g}" for k in ks if np.any(positions == k)]
    return out


def _quietly(probe: Any, *args: Any) -> Any:
    """An extra view of a failure: a function it cannot be computed for gets none."""
    try:
        return probe(*args)
    except Exception as e:
        return {"trend": f"not computed ({type(e).__name__}: {e})"[:200], "steps": []}


# -- the rerun report --------------------------------------------------------------------------
def rerun_record(target: str, result: Triage, reproduce: str) -> dict[str, Any]:
    """A JSON-ready record of one rerun: verdict, evidence, the first failing
    input exactly, and the command that reproduces the triage."""
    import numpy as np

    example = result.example
    return {
        "target": target,
        "verdict": result.verdict,
        "evidence": result.evidence,
        "example": None if example is None else [_io.exact(np.asarray(_io.to_numpy(a))) for a in example],
        "check": None if result.check is None else str(result.check),
        "reproduce": reproduce,
    }


def _evidence_line(r: dict[str, Any]) -> str:
    """One line of a record's evidence: its inputs, or its CI runs and calls."""
    ev = r.get("evidence")
    parts = []
    if ev is not None:
        parts.append(
            f"{ev['failing_examples']} / {ev['examples']} inputs failed (seeds {ev['failing_seeds'] or 'none'})"
        )
        keys = ("region", "minimal_case", "kink_distances", "proposed_tolerance", "nondeterminism")
        parts += [f"{k}: {ev[k]}" for k in keys if ev.get(k)]
    runs = r.get("runs")
    if runs is not None:
        lo, hi = runs["interval95"]
        parts.append(f"{runs['failures']} / {runs['runs']} runs failed ({lo:.2f} - {hi:.2f})")
        parts += [
            f"{f}: fails on {v['failing']}, passes on {v['passing']}" for f, v in runs["separating_fields"].items()
        ]
    for c in r.get("calls", ()):
        parts.append(f"{c['call']} {c['function']}: {c['verdict']}")
    return "; ".join(parts) or "-"


def _failure_lines(ev: dict[str, Any]) -> list[str]:
    lines = []
    for f in ev.get("failures", ()):
        sweep = f.get("fd_sweep") or {}
        dtypes = f.get("dtypes") or {}
        shown = ", ".join(
            f"{d}: {'passes' if v['ok'] else 'fails' if v['ok'] is False else 'raises'}" for d, v in dtypes.items()
        )
        lines.append(
            f"- seed {f['seed']}: error {f['test_error']:.3g}, confirmed by gv.check: {f['confirmed']}, "
            f"kink distance {f['kink_distance']}; FD step sweep {sweep.get('trend', '-')}; dtypes {shown or '-'}"
        )
    return lines


def rerun_markdown(records: Sequence[dict[str, Any]]) -> str:
    lines = ["# gradverify triage (rerun)", "", "| target | verdict | evidence |", "|---|---|---|"]
    for r in records:
        lines.append(f"| {r['target']} | **{r['verdict']}** | {_evidence_line(r)} |")
    for r in records:
        lines += ["", f"## {r['target']}: {r['verdict']}", "", f"reproduce: `{r['reproduce']}`"]
        for c in [r, *r.get("calls", ())]:
            if c is not r:
                lines += ["", f"### {c['call']} {c['function']}: {c['verdict']}"]
            if c.get("evidence"):
                lines += ["", *_failure_lines(c["evidence"])]
            if c.get("example"):
                minimal = "minimal_case" in (c.get("evidence") or {})
                lines += ["", "minimal failing input (shrunk):" if minimal else "first failing input:"]
                lines += [f"- `arg{k}` {a['dtype']}{a['shape']}: `{a['values']}`" for k, a in enumerate(c["example"])]
            if c.get("check"):
                lines += ["", "```", c["check"], "```"]
    return "\n".join(lines) + "\n"


_STYLE = ".verdict{font-weight:bold}td,th{text-align:left}"


def _page(title: str, body: list[str]) -> str:
    return _io.html_page(title, body, _STYLE)


def rerun_html(records: Sequence[dict[str, Any]]) -> str:
    import html

    e = html.escape
    body = ['<table id="verdicts"><tr><th>target</th><th>verdict</th><th>evidence</th></tr>']
    for r in records:
        body.append(
            f'<tr><td><a href="#{e(r["target"])}">{e(r["target"])}</a></td>'
            f'<td class="verdict">{e(r["verdict"])}</td><td>{e(_evidence_line(r))}</td></tr>'
        )
    body.append("</table>")
    for r in records:
        body.append(f'<h2 id="{e(r["target"])}">{e(r["target"])}: {e(r["verdict"])}</h2>')
        body.append(f"<p>reproduce: <code>{e(r['reproduce'])}</code></p>")
        for c in [r, *r.get("calls", ())]:
            if c is not r:
                body.append(f"<h3>{e(c['call'])} {e(c['function'])}: {e(c['verdict'])}</h3>")
            if c.get("evidence"):
                body.append("<ul>" + "".join(f"<li>{e(ln[2:])}</li>" for ln in _failure_lines(c["evidence"])) + "</ul>")
            if c.get("check"):
                body.append(f"<pre>{e(c['check'])}</pre>")
    return _page("gradverify triage (rerun)", body)


def junit_html(rows: Sequence[dict[str, Any]], files: int) -> str:
    import html

    e = html.escape
    failed = sum(r["failures"] > 0 for r in rows)
    body = [
        f"<p>{files} run(s); {failed} test(s) failed at least once.</p>",
        '<table id="tests"><tr><th>test</th><th>failures / runs</th><th>flip rate (95% interval)</th>'
        "<th>verdict</th><th>separating fields</th></tr>",
    ]
    for r in sorted(rows, key=lambda r: (-r["failures"], r["test"])):
        lo, hi = r["interval95"]
        sep = "; ".join(
            f"{f}: fails on {v['failing']}, passes on {v['passing']}" for f, v in r["separating_fields"].items()
        )
        body.append(
            f"<tr><td>{e(r['test'])}</td><td>{e(_failures_cell(r))}</td>"
            f'<td>{r["flip_rate"]:.2f} ({lo:.2f} - {hi:.2f})</td><td class="verdict">{e(r["verdict"])}</td>'
            f"<td>{e(sep or '-')}</td></tr>"
        )
    body.append("</table>")
    return _page("gradverify triage (JUnit)", body)
