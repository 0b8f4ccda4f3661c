"""``gradverify triage junit`` (``gv.triage_junit``): read JUnit XML from
several CI runs and tell, per test, how often it fails, with what confidence,
and which recorded environment fields separate its failing runs from its
passing ones.

Files are parsed with defusedxml (they come from other machines) through
junitparser. Environment fields come from each suite's ``<properties>``
(the gradverify pytest plugin records the machine, thread counts and
versions there), the suite's ``hostname``, and each test's own properties.
Rendering is the reports layer's (``render``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

from .._errors import ArgumentValueError, explain
from .._io import Record
from .verdict import Verdict

__all__ = [
    "SEED_FIELDS",
    "Z95",
    "JunitRow",
    "Run",
    "follows_seed",
    "junit_files",
    "node_id",
    "read_junit",
    "seed_field",
    "seed_of",
    "triage_junit",
    "verdict_of_runs",
    "wilson",
]

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


def junit_files(paths: Sequence[str | os.PathLike[str]]) -> list[JunitRow]:
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


@dataclasses.dataclass(frozen=True)
class JunitRow(Record):
    """One test across the CI runs (a Record: ``row.verdict`` or ``row["verdict"]``)."""

    test: str
    runs: int  # runs in which it ran (not skipped)
    failures: int  # runs in which it failed, at its last attempt or at one a rerun hid
    passed_on_rerun: int  # of those, the runs whose last attempt passed
    attempts: int
    failed_attempts: int
    flip_rate: float  # failures / runs
    interval95: list[float]  # Wilson 95% interval of the flip rate
    verdict: Verdict
    separating_fields: dict[str, dict[str, list[str]]]  # field -> its values on failing and on passing runs
    failing_files: list[str]
    nodeid: str = ""  # the test as pytest names it (pastes into pytest and triage rerun)
    failing_seeds: list[str] = dataclasses.field(default_factory=list)  # the seeds of its failing runs, where recorded
    passing_seeds: list[str] = dataclasses.field(default_factory=list)
    seed_field: str | None = None  # which of SEED_FIELDS the seeds are
    failing_inputs: list[str] = dataclasses.field(default_factory=list)  # the .npz the plugin saved of a failing call

    OPTIONAL = frozenset({"seed_field"})


def verdict_of_runs(
    runs: int, failures: int, passed_on_rerun: int, separating: bool, follows_seed: bool = False
) -> Verdict:
    """The verdict of a test's CI runs: it passes, fails in every run (none of
    them saved by a rerun), fails on some seeds and on each of them every time
    (a bug those seeds' inputs reach: a seed is no environment), fails where a
    recorded environment field says (the same seed passes elsewhere), or flips."""
    if failures == 0:
        return Verdict.PASSES
    if failures == runs and not passed_on_rerun:
        return Verdict.FAILS_EVERYWHERE
    if follows_seed:
        return Verdict.BUG
    return Verdict.ENVIRONMENT_SPECIFIC if separating else Verdict.FLAKY


#: The fields that say which seed a run drew its inputs with: the base seed
#: triage ran it with (``--gradverify-seed`` and ``--hypothesis-seed``), else
#: the test's own gradverify seed (a per-test property of the plugin, which
#: ``@pytest.mark.gradverify(seed=...)`` pins). They are not environments.
SEED_FIELDS = ("triage.seed", "gradverify_seed")


def seed_field(runs: Sequence[Run], test: str) -> str | None:
    """The seed field the test's runs record (the first of SEED_FIELDS any has)."""
    have = set().union(*({*r.env, *r.properties.get(test, {})} for r in runs)) if runs else set()
    return next((f for f in SEED_FIELDS if f in have), None)


def seed_of(run: Run, test: str, field: str | None) -> str | None:
    """The seed the test ran with in ``run`` (None: not recorded)."""
    return None if field is None else {**run.env, **run.properties.get(test, {})}.get(field)


def follows_seed(bad: Sequence[Run], good: Sequence[Run], test: str) -> bool:
    """Whether the test's failures follow its seed: every run's seed is
    recorded, no seed both fails and passes, and some failing seed failed in
    more than one run (so that a flake that struck once is not taken for it)."""
    field = seed_field([*bad, *good], test)
    failing = [seed_of(r, test, field) for r in bad]
    passing = {seed_of(r, test, field) for r in good}
    if not failing or not passing or None in failing or None in passing or set(failing) & passing:
        return False
    return any(failing.count(s) > 1 for s in set(failing))


def node_id(test: str, run: Run | None = None) -> str:
    """A JUnit test id (``classname::name``) as pytest's node id
    (``path/to/test_file.py::TestClass::test_name[param]``): the plugin's
    record of it where there is one, else read off the dotted class name (its
    leading lower-case parts the module's path, the rest classes)."""
    recorded = None if run is None else run.properties.get(test, {}).get("gradverify_nodeid")
    if recorded:
        return recorded
    classname, sep, name = test.rpartition("::")
    if not sep:
        return test
    parts = classname.split(".")
    split = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    return "::".join(["/".join(parts[:split]) + ".py", *parts[split:], name])


def triage_junit(runs: Sequence[Run]) -> list[JunitRow]:
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
        # gradverify's per-test figures (verdict, error, seed) are outcomes, and a seed is
        # no environment: neither separates machines
        found = _separating(_envs(bad, t), _envs(good, t))
        sep = {f: v for f, v in found.items() if not f.startswith("gradverify_") and f not in SEED_FIELDS}
        field = seed_field(seen, t)
        seeds = sorted({s for r in bad if (s := seed_of(r, t, field)) is not None}, key=_numeric_first)
        out.append(
            JunitRow(
                test=t,
                runs=n,
                failures=k,
                passed_on_rerun=len(hidden),
                attempts=len(tried),
                failed_attempts=sum(a in ("failed", "error") for a in tried),
                flip_rate=k / n if n else 0.0,
                interval95=list(wilson(k, n)),
                verdict=verdict_of_runs(n, k, len(hidden), bool(sep), follows_seed(bad, good, t)),
                separating_fields=sep,
                failing_files=[r.file for r in bad],
                nodeid=node_id(t, next(iter(seen), None)),
                failing_seeds=seeds,
                passing_seeds=sorted({s for r in good if (s := seed_of(r, t, field)) is not None}, key=_numeric_first),
                seed_field=field,
                failing_inputs=sorted(
                    {p for r in bad if (p := r.properties.get(t, {}).get("gradverify_counterexample"))}
                ),
            )
        )
    return out


def _numeric_first(seed: str) -> tuple[int, float, str]:
    """Seeds in numeric order where they are numbers."""
    try:
        return (0, float(seed), seed)
    except ValueError:
        return (1, 0.0, seed)
