"""gradverify triage junit over pytest-rerunfailures: JUnit keeps only a
rerun's pass, the plugin's record of every attempt keeps the failure visible,
and triage of the node id says the same from the same runs."""

from __future__ import annotations

import pytest

from gradverify._triage import junit as _triage_junit, node as _triage_node, render as _reports_triage

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow


RERUN_SUITE = """
import os, pathlib

def test_fails_on_first_attempt():
    counter = pathlib.Path(os.environ["ATTEMPTS_FILE"])
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    assert n >= 1

def test_fine():
    assert True
"""


def test_reruns_that_pass_are_not_lost(pytester, monkeypatch):
    """pytest-rerunfailures reruns a failed test and JUnit keeps only the pass;
    the plugin's own record of every attempt keeps the failure visible."""
    pytester.makepyfile(test_rr=RERUN_SUITE)
    files = []
    for k in range(4):
        monkeypatch.setenv("ATTEMPTS_FILE", str(pytester.path / f"attempts{k}"))
        path = pytester.path / f"run{k}.xml"
        result = pytester.runpytest("--reruns", "2", f"--junitxml={path}", "-p", "no:cacheprovider", "-q")
        outcomes = result.parseoutcomes()
        outcomes.pop("warnings", None)  # in-process, gradverify is imported before pytest can rewrite it
        assert outcomes == {"passed": 2, "rerun": 1}
        files.append(str(path))
    runs = _triage_junit.read_junit(files)
    name = next(t for t in runs[0].outcomes if t.endswith("test_fails_on_first_attempt"))
    assert all(r.outcomes[name] == "passed" for r in runs)  # what JUnit alone says
    assert all(r.attempts[name] == ["failed", "passed"] for r in runs)
    rows = {r["test"].split("::")[-1]: r for r in _triage_junit.triage_junit(runs)}
    t = rows["test_fails_on_first_attempt"]
    assert (t["failures"], t["passed_on_rerun"], t["failed_attempts"], t["attempts"]) == (4, 4, 4, 8)
    assert t["verdict"] == "flaky"
    # triage of the node id says the same from the same runs (its gradient
    # calls all passing); a call that did not pass decides instead
    assert _triage_node.verdict_of(t, [{"verdict": "passes"}]) == "flaky"
    assert _triage_node.verdict_of(t, [{"verdict": "passes"}, {"verdict": "kink flake"}]) == "kink flake"
    assert _triage_node.verdict_of(None, []) == "passes"
    assert rows["test_fine"]["verdict"] == "passes" and rows["test_fine"]["attempts"] == 4
    assert "4 passed on a rerun; 4 of 8 attempts failed" in _reports_triage.junit_markdown(list(rows.values()), 4)


def test_the_triage_pages_fit_a_1280_px_window(tmp_path):
    """The JUnit triage page (long node ids, every failing file linked) and
    the rerun page (a check's report in full) drawn in headless Chromium."""
    from gradverify._triage import render
    from gradverify._triage.junit import Run, triage_junit

    from .._helpers import assert_fits

    name = "tests/" + "very_long_directory_name/" * 6 + "test_file.py::TestA::test_" + "x" * 80 + "[param-1]"
    runs = [
        Run(
            f"{tmp_path}/{'runner-artifacts-' * 4}{k}.xml",
            {"env.omp_num_threads": str(k % 2)},
            {"t": "failed" if k % 2 else "passed"},
            {"t": {"gradverify_nodeid": name, "gradverify_seed": "7"}},
        )
        for k in range(12)
    ]
    rows = triage_junit(runs)
    page = tmp_path / "triage.html"
    page.write_text(render.junit_html(rows, len(runs)))
    assert "failing in: " in page.read_text() and ".xml</a>" in page.read_text()
    assert_fits(page)
    check = "gradverify FAILED: f [numpy, order 1]\n  reproduce: gv.check(" + "x" * 400 + ")"
    record = {"target": name, "verdict": "bug", "reproduce": "gradverify triage rerun " + name, "check": check}
    page = tmp_path / "triage-rerun.html"
    page.write_text(render.rerun_html([record]))
    assert_fits(page)
