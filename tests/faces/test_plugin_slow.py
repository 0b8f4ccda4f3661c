"""The pytest plugin, driven through pytester: options and ini keys, the
header, the marker and fixture, per-test seeds independent of order and
workers, JUnit properties under every family, the terminal summary, and one
report written by the controller under pytest-xdist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import hypothesis.strategies  # noqa: F401  (loaded once, before pytester's in-process runs
import pytest

import gradverify.strategies  # noqa: F401  snapshot sys.modules: one copy of each class)

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow

SUITE = """
import numpy as np
import pytest
import gradverify as gv
from gradverify import strategies as gst
from gradverify._sweep.examples import BUILDERS


def test_correct_rule(gradverify):
    r = gradverify.verify(BUILDERS["numpy"](False), gst.bias_act_args("swish", "numpy"))
    assert r.ok
    print("SEED", gradverify.seed)


def test_seed_bug(gradverify):
    r = gradverify.verify(BUILDERS["numpy"](True), gst.bias_act_args("swish", "numpy"))
    assert r.ok, str(r)


@pytest.mark.gradverify(max_examples=7, seed=123)
def test_marker(gradverify):
    r = gradverify.verify(BUILDERS["numpy"](False), gst.bias_act_args("tanh", "numpy"))
    assert (gradverify.seed, r.examples_run) == (123, 7)
    # numpy without rules compares nothing: allowed here, so a warning, not a failure
    r = gradverify.check(np.tanh, np.ones(3), allow_unchecked=True)
    assert r.ok and "nothing_checked" in {f.kind.value for f in r.findings}


def test_plain():
    assert True
"""


def _props(xml_path):
    root = ET.parse(xml_path).getroot()
    out = {}
    for tc in root.iter("testcase"):
        props = tc.find("properties")
        out[tc.get("name")] = {} if props is None else {p.get("name"): p.get("value") for p in props}
    return out


@pytest.mark.parametrize("family", ["xunit1", "xunit2", "legacy"])
def test_plugin_figures_junit_summary_and_report(pytester, family):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini(f"[pytest]\njunit_family = {family}\ngradverify_seed = 5\n")
    result = pytester.runpytest("--junitxml=out.xml", "--gradverify-report=gvreport", "-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["gradverify: seed 5, max_examples 100*"])
    # terminal summary: the failure with its minimal counterexample
    result.stdout.fnmatch_lines(
        [
            "*= gradverify =*",
            "* gradient check(s) in 3 test(s), 1 failed",
            "FAILED test_suite.py::test_seed_bug: fused_swish_seed_bug [[]numpy[]] seed *",
            "    arg0: float64[[]1, 1[]] = *",
            "    arg1: float64[[]1[]] = *",
            "    |error| * > bound *",
        ]
    )
    props = _props(pytester.path / "out.xml")
    assert props["test_seed_bug"]["gradverify_verdict"] == "failed"
    assert props["test_seed_bug"]["gradverify_counterexample"].endswith(".npz")
    assert props["test_correct_rule"]["gradverify_verdict"] == "passed"
    assert props["test_marker"]["gradverify_seed"] == "123"
    assert props["test_plain"] == {}
    data = json.loads((pytester.path / "gvreport" / "gradverify-pytest.json").read_text())
    assert data["seed"] == 5 and len(data["records"]) == 4
    bug = [r for r in data["records"] if r["nodeid"].endswith("test_seed_bug")][0]
    assert not bug["ok"] and len(bug["counterexample"]) == 2
    # the set the command writes, named for the plugin: JSON, Markdown, JUnit XML, HTML
    written = {p.name for p in (pytester.path / "gvreport").iterdir()}
    assert {f"gradverify-pytest.{ext}" for ext in ("json", "md", "xml", "html")} | {"cases"} == written
    page = (pytester.path / "gvreport" / "gradverify-pytest.html").read_text()
    assert "<h2" in page and "FAILED test_suite.py::test_seed_bug: fused_swish_seed_bug</h2>" in page
    assert "## FAILED test_suite.py::test_seed_bug" in (pytester.path / "gvreport" / "gradverify-pytest.md").read_text()
    suite = ET.parse(pytester.path / "gvreport" / "gradverify-pytest.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("4", "1")


def _seeds(output):
    return re.findall(r"SEED (\d+)", output)


def test_seed_depends_on_base_and_node_id_only(pytester):
    pytester.makepyfile(test_suite=SUITE)
    a = pytester.runpytest("-s", "-k", "correct", "--gradverify-seed=1", "-p", "no:cacheprovider")
    b = pytester.runpytest("-s", "--gradverify-seed=1", "-p", "no:xdist", "-p", "no:cacheprovider")  # no xdist at all
    c = pytester.runpytest("-s", "-k", "correct", "--gradverify-seed=2", "-p", "no:cacheprovider")
    sa, sb, sc = (_seeds(r.stdout.str()) for r in (a, b, c))
    assert sa and sa == sb and sa != sc


def test_under_xdist_the_controller_writes_one_report(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--junitxml=out.xml", "--gradverify-report=gvreport", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["* gradient check(s) in 3 test(s), 1 failed"])
    props = _props(pytester.path / "out.xml")
    assert props["test_seed_bug"]["gradverify_verdict"] == "failed"  # carried from the worker
    data = json.loads((pytester.path / "gvreport" / "gradverify-pytest.json").read_text())
    assert len(data["records"]) == 4
    assert not list((pytester.path / "gvreport").glob(".*.tmp"))


def test_profile_option_and_bad_marker(pytester):
    pytester.makepyfile(
        test_suite="""
import pytest
from hypothesis import settings

def test_profile():
    assert settings.default.derandomize and settings.default.database is None

@pytest.mark.gradverify(max_exampels=3)
def test_typo(gradverify):
    pass

@pytest.mark.gradverify(5)
def test_positional(gradverify):
    pass
"""
    )
    result = pytester.runpytest_subprocess("--gradverify-profile=ci", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*expected options from*found [[]'max_exampels'[]]*did you mean 'max_examples'*"])
    result.stdout.fnmatch_lines(
        ["*expected keyword options*found positional 5*@pytest.mark.gradverify(max_examples=5)*"]
    )


def test_loading_the_plugin_imports_no_backend():
    code = (
        "import sys, gradverify.pytest_plugin; "
        "print(sorted(m for m in ('torch', 'jax', 'hypothesis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_under_xdist_auto_every_attempt_reaches_junit(pytester):
    """-n auto and pytest-rerunfailures: the first attempt's failure, hidden by
    JUnit's single outcome, arrives at the controller in the plugin's record."""
    pytester.makepyfile(
        test_flaky="""
import pathlib

def test_first_attempt_fails():
    counter = pathlib.Path(__file__).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    assert n >= 1

def test_fine():
    pass
"""
    )
    result = pytester.runpytest_subprocess(
        "-n", "auto", "--reruns", "1", "--junitxml=out.xml", "-p", "no:cacheprovider"
    )
    assert result.parseoutcomes() == {"passed": 2, "rerun": 1}
    from gradverify._triage import junit as _triage_junit

    (run,) = _triage_junit.read_junit([pytester.path / "out.xml"])
    name = next(t for t in run.outcomes if t.endswith("test_first_attempt_fails"))
    assert run.outcomes[name] == "passed" and run.attempts[name] == ["failed", "passed"]
    assert run.failed(name) and not run.failed(next(t for t in run.outcomes if t.endswith("test_fine")))


def test_a_rerun_that_passes_reports_its_own_calls(pytester):
    """pytest-rerunfailures: the first attempt's failing check is not carried
    into the passing attempt's figures."""
    pytester.makepyfile(
        test_rerun="""
import pathlib
import numpy as np
import gradverify as gv

def test_wrong_then_right(gradverify):
    counter = pathlib.Path(__file__).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    sign = -1.0 if n == 0 else 1.0  # the first attempt's rule is wrong
    rule = gv.Rule(np.sin, vjp=lambda p, g: (sign * np.cos(p[0]) * g,))
    assert gradverify.check(rule, np.array([0.3, 1.1])).ok
"""
    )
    result = pytester.runpytest_subprocess("--reruns", "1", "--junitxml=out.xml", "-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    import xml.etree.ElementTree as ET

    *_, last = ET.parse(pytester.path / "out.xml").getroot().iter("testcase")  # (the passing attempt's)
    props = {p.get("name"): p.get("value") for p in last.iter("property")}
    assert props["gradverify_verdict"] == "passed" and props["gradverify_calls"] == "1", props
    # the session saw both attempts' calls, the first one failing
    assert "2 gradient check(s) in 1 test(s), 1 failed" in result.stdout.str()


SHRINKING = """
import pytest
import gradverify as gv
from hypothesis import strategies as st
from gradverify.strategies import arrays

WRONG = gv.Rule(lambda x: x * x, vjp=lambda p, g: (2.5 * p[0] * g,))


def test_budget_from_the_run(gradverify):
    r = gradverify.verify(WRONG, st.tuples(arrays("numpy", shape=(6,))), max_examples=20)
    print("CUT:", r.shrink_cut)


@pytest.mark.gradverify(max_shrinks=2)
def test_budget_from_the_marker(gradverify):
    r = gradverify.verify(WRONG, st.tuples(arrays("numpy", shape=(6,))), max_examples=20)
    print("CUT:", r.shrink_cut)
"""


def test_the_shrink_budget_comes_from_the_option_the_ini_key_and_the_marker(pytester):
    """A failing verify shrinks to its end by default here (a fast check); the
    marker cuts it after two checks, the option or ini key at 0 seconds
    (which, the first budget spent, cuts the marked test too)."""
    pytester.makepyfile(test_shrinking=SHRINKING)

    def cuts(*args):
        out = pytester.runpytest("-s", "-p", "no:cacheprovider", "-p", "no:xdist", *args).stdout.str()
        return re.findall(r"CUT: (.*)", out)

    assert cuts() == ["None", "after 2 step(s): max_shrinks=2"]
    zero = "after 0 step(s): max_shrinking_seconds=0"
    assert cuts("--gradverify-max-shrinking-seconds=0") == [zero, zero]
    pytester.makeini("[pytest]\ngradverify_max_shrinking_seconds = 0\n")
    assert cuts() == [zero, zero]
