"""``gradverify triage rerun NODE_ID``: a pytest test as the triage target.

Two looks at the test, each in fresh processes so that nothing of one run
leaks into the next:

* the test as CI runs it, once per seed x thread count
  (``--hypothesis-seed``, ``--gradverify-seed``, ``OMP_NUM_THREADS``), each run
  writing JUnit XML that :func:`gradverify._triage.junit.triage_junit` reads: the
  flip rate and the environment fields that separate failing runs;
* the gradient calls inside it: the test runs once in a child process with an
  observer on ``gv.check``/``gv.verify`` (``gradverify._observe``), and each
  call it makes is rerun by :func:`gradverify._triage.rerun.rerun` (seeds, thread
  counts, FD steps, dtypes, repeated calls) for a verdict with evidence.

A test whose gradient calls all pass may still fail on some runs: its verdict
then comes from the runs (environment-specific or flaky).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import _io, _observe
from .._check.pipeline import check
from .._errors import ArgumentValueError, explain
from . import junit, render, rerun
from .verdict import Verdict

__all__ = ["CALLS_PER_TEST", "SEVERITY", "captured", "ci_runs", "is_node_id", "junit_id", "triage_node", "verdict_of"]

SEVERITY = (
    Verdict.BUG,
    Verdict.BUG_IN_A_REGION,
    Verdict.NONDETERMINISTIC_OP,
    Verdict.KINK_FLAKE,
    Verdict.PRECISION_FLAKE,
    Verdict.PASSES,
)
CALLS_PER_TEST = 3


def is_node_id(target: str) -> bool:
    return "::" in target or target.split("::", 1)[0].endswith(".py")


def junit_id(nodeid: str) -> str:
    """The id under which pytest's JUnit XML lists a node (``classname::name``)."""
    parts = nodeid.split("::")
    module = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    classname = ".".join([module.replace("/", "."), *parts[1:-1]])
    return f"{classname}::{parts[-1]}"


def _pytest(args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args], env=env, capture_output=True, text=True, check=False)


def ci_runs(node: str, seeds: int, threads: Sequence[int], directory: Path) -> list[junit.Run]:
    """The test as CI runs it, once per seed x thread count; one Run each."""
    runs = []
    for s in range(seeds):
        for t in threads:
            env = {**os.environ, **{k: str(t) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
            xml = directory / f"seed{s}-threads{t}.xml"
            done = _pytest(
                [
                    node,
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--hypothesis-seed={s}",
                    f"--gradverify-seed={s}",
                    f"--junitxml={xml}",
                ],
                env,
            )
            if done.returncode not in (0, 1) or not xml.exists():
                raise ArgumentValueError(
                    explain(
                        "triage rerun NODE_ID",
                        "a pytest node id that collects and runs",
                        f"{node!r}: pytest exited {done.returncode}: {(done.stdout + done.stderr).strip()[-400:]}",
                        "run it once with pytest yourself; pass a path::test that exists",
                    )
                )
            (run,) = junit.read_junit([xml])
            run.env["triage.seed"] = str(s)
            runs.append(run)
    return runs


def captured(node: str, seeds: int, threads: Sequence[int], max_examples: int, directory: Path) -> dict[str, Any]:
    """Run the test once in a child process that reruns each gradient call it
    makes; the node ids it ran (``tests``) and the records (``records``,
    JSON-ready, one per call) come back through a file."""
    out = directory / "calls.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradverify._triage.node",
            node,
            str(seeds),
            ",".join(map(str, threads)),
            str(max_examples),
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"triage of {node!r}'s gradient calls failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return json.loads(out.read_text())


def triage_node(
    node: str, *, seeds: int = 4, threads: Sequence[int] = (1, 4), max_examples: int = 20
) -> list[dict[str, Any]]:
    """One entry per test the node id names: verdict, the CI runs' row and the
    gradient calls' records."""
    with tempfile.TemporaryDirectory(prefix="gradverify-triage-") as tmp:
        runs = ci_runs(node, seeds, threads, Path(tmp))
        seen = captured(node, seeds, threads, max_examples, Path(tmp))
    rows = {r["test"]: r for r in junit.triage_junit(runs)}
    ran, calls = seen["tests"], seen["records"]
    by_junit = {junit_id(t): t for t in ran}
    out = []
    for t in sorted(set(ran) | {r for r in rows if r not in by_junit}):
        row = rows.get(junit_id(t)) or rows.get(t)
        own = [c for c in calls if c["nodeid"] == t]
        out.append({"test": t, "verdict": verdict_of(row, own), "runs": row, "calls": own})
    return out


def verdict_of(row: Mapping[str, Any] | None, calls: Sequence[Mapping[str, Any]]) -> Verdict:
    """A test's verdict: the most severe of its gradient calls' where one did
    not pass, else its CI runs' own (triage_junit's row; "passes" where it
    never ran there)."""
    verdicts = [c["verdict"] for c in calls if c["verdict"] != Verdict.PASSES]
    if verdicts:
        return Verdict(min(verdicts, key=SEVERITY.index))
    return Verdict.PASSES if row is None else Verdict(row["verdict"])


def _child(node: str, seeds: int, threads: Sequence[int], max_examples: int, output: str) -> int:
    """In the child: run the test with an observer, then triage each call."""
    import contextlib
    import io

    import pytest

    current = {"nodeid": None}
    seen: list[tuple[str, str, Any, Any, dict[str, Any]]] = []
    ran: list[str] = []

    class Tracker:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item: pytest.Item) -> Any:
            current["nodeid"] = item.nodeid
            ran.append(item.nodeid)
            try:
                return (yield)
            finally:
                current["nodeid"] = None

    def observer(kind: str, fn: Any, inputs: Any, options: dict[str, Any]) -> None:
        nodeid = current["nodeid"]
        if nodeid is not None and sum(s[0] == nodeid for s in seen) < CALLS_PER_TEST:
            seen.append((nodeid, kind, fn, inputs, dict(options)))

    with _observe.observing(observer), contextlib.redirect_stdout(io.StringIO()):
        pytest.main([node, "-q", "-p", "no:cacheprovider"], plugins=[Tracker()])

    from hypothesis import strategies as st

    records = []
    for nodeid, kind, fn, inputs, options in seen:
        judged = {k: v for k, v in options.items() if k in ("order", "rtol", "atol", "wrt", "full", "directions")}

        def test(f: Any, *args: Any, _o: dict[str, Any] = judged) -> tuple[bool, float]:
            r = check(f, *args, **_o)
            return r.ok, max((e.error or 0.0) for e in r.errors) if r.errors else 0.0

        if kind == "verify":
            strategy, n_seeds, n_examples = inputs, seeds, min(max_examples, int(options.get("max_examples", 100)))
        else:
            strategy, n_seeds, n_examples = st.just(tuple(inputs)), 1, 1
        result = rerun.rerun(fn, strategy, test=test, seeds=n_seeds, max_examples=n_examples, threads=threads)
        label = options.get("name") or getattr(fn, "__name__", type(fn).__name__)
        record = render.rerun_record(f"{nodeid} ({kind} {label})", result, f"gradverify triage rerun {nodeid}")
        records.append({"nodeid": nodeid, "call": kind, "function": label, **record})
    _io.atomic_write(output, _io.to_json({"tests": ran, "records": records}))
    return 0


if __name__ == "__main__":
    node_, seeds_, threads_, examples_, output_ = sys.argv[1:6]
    sys.exit(_child(node_, int(seeds_), [int(t) for t in threads_.split(",")], int(examples_), output_))
