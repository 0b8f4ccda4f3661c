"""gradverify triage junit: real JUnit files written by pytest (with the
gradverify plugin recording the environment) from ten runs, one test failing
on the runners with one thread: flagged, with the field named."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from gradverify import cli
from gradverify._check import steps
from gradverify._triage import junit as _triage_junit
from gradverify._triage import node as _triage_node
from gradverify._triage import render as _reports_triage
from gradverify._triage import rerun as _triage_rerun

pytest_plugins = ["pytester"]


def gv_json(obj):
    from gradverify import _io

    return _io.to_json(obj)


SUITE = """
import os

def test_thread_sensitive():
    assert os.environ.get("OMP_NUM_THREADS") != "1"

def test_always_wrong():
    assert 1 + 1 == 3

def test_fine():
    assert True
"""


@pytest.fixture
def ten_runs(pytester, monkeypatch):
    pytester.makepyfile(test_ci=SUITE)
    files = []
    for k in range(10):
        threads = "1" if k in (2, 5, 7) else "4"
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        path = pytester.path / f"run{k}.xml"
        pytester.runpytest(f"--junitxml={path}", "-p", "no:cacheprovider", "-q")
        files.append(str(path))
    return files


def test_ten_runs_one_test_failing_on_one_thread_count(ten_runs):
    import gradverify as gv

    runs = _triage_junit.read_junit(ten_runs)
    assert len(runs) == 10 and runs[0].env["env.omp_num_threads"] in ("1", "4")
    rows = {r["test"].split("::")[-1]: r for r in gv.triage_junit(ten_runs)}
    t = rows["test_thread_sensitive"]
    assert (t["failures"], t["runs"]) == (3, 10)
    assert t["verdict"] == "environment-specific"
    assert t["separating_fields"] == {"env.omp_num_threads": {"failing": ["1"], "passing": ["4"]}}
    lo, hi = t["interval95"]
    assert lo < 0.3 < hi and 0.05 < lo and hi < 0.65
    assert rows["test_always_wrong"]["verdict"] == "fails everywhere"
    assert rows["test_always_wrong"]["separating_fields"] == {}
    assert rows["test_fine"]["verdict"] == "passes" and rows["test_fine"]["failures"] == 0


def test_cli_prints_the_table_and_writes_the_report(ten_runs, tmp_path, capsys):
    code = cli.main(["triage", "junit", *ten_runs, "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "10 run(s); 2 test(s) failed at least once." in out
    line = next(ln for ln in out.splitlines() if "test_thread_sensitive" in ln)
    assert "| 3 / 10 |" in line and "environment-specific" in line and "env.omp_num_threads: fails on ['1']" in line
    data = json.loads((tmp_path / "triage.json").read_text())
    assert data["schema"] == "gradverify-triage-junit/1" and len(data["files"]) == 10
    cells = _TableCells()
    cells.feed((tmp_path / "triage.html").read_text())
    row = next(r for r in cells.rows if r and r[0].endswith("test_thread_sensitive"))
    assert row[1] == "3 / 10" and row[3] == "environment-specific" and "env.omp_num_threads" in row[4]


class _TableCells(HTMLParser):
    """The text of each table row's cells."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


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


@pytest.mark.slow
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


def test_hostile_or_broken_files_get_a_clear_error(tmp_path, capsys):
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
        "<testsuite><testcase name='a'>&lol2;</testcase></testsuite>"
    )
    junk = tmp_path / "junk.xml"
    junk.write_text("not xml at all")
    for f in (bomb, junk):
        code = cli.main(["triage", "junit", str(f)])
        err = capsys.readouterr().err
        assert code == 2 and "expected a JUnit XML file" in err and str(f) in err


def test_wilson_interval():
    lo, hi = _triage_junit.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = _triage_junit.wilson(10, 10)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.7225, abs=1e-4)


# -- triage rerun: the four fixtures of a bug, a kink flake, a precision flake and a nondeterministic op
def _hardsigmoid_rule(saturated_slope):
    """numpy hardsigmoid with its rule; the saturated slope is the bug knob."""
    import numpy as np

    import gradverify as gv

    def f(x):
        return np.clip((x + 3) / 6, 0, 1)

    def slope(x):
        return np.where(np.abs(x) < 3, 1 / 6, saturated_slope)

    return gv.Rule(f, jvp=lambda p, t: slope(p[0]) * t[0], vjp=lambda p, g: (slope(p[0]) * g,))


def _naive_inputs(lo=-5.0, hi=5.0):
    from hypothesis import strategies as st

    from gradverify import strategies as gst

    return gst.arrays("numpy", "float64", st.tuples(st.integers(1, 6)), min_value=lo, max_value=hi).map(lambda a: (a,))


def test_a_bug_on_negative_inputs_without_kinks_is_named_by_its_sign():
    """A scaled softplus whose backward uses exp(x) for sigmoid(x) where x < 0:
    the region is "x < 0", not the span of the elements it happened to locate."""
    pytest.importorskip("torch")
    from hypothesis import strategies as st

    import gradverify as gv
    from gradverify import strategies as gst

    from ._helpers import PLANTED_TORCH_OPS

    planted: dict = {}
    exec(PLANTED_TORCH_OPS, planted)  # the downstream project's module (tests/test_downstream.py)
    ScaledSoftplus = planted["ScaledSoftplus"]

    args = gst.arrays("torch", "float64", st.tuples(st.integers(1, 6)), min_value=-5, max_value=5)
    r = gv.triage(ScaledSoftplus.apply, args.map(lambda a: (a,)), seeds=3, max_examples=10, threads=(1,))
    assert r.verdict in ("bug", "bug in a region"), r.evidence
    assert r.evidence["region"] == ["x < 0"], r.evidence
    assert all(v < 0 for f in r.evidence["failures"] for v in f["position"])


def test_rerun_wrong_saturated_slope_is_a_bug_in_a_region():
    """The seed's hardsigmoid: slope 1 instead of 0 beyond +-3, random inputs in [-5, 5]."""
    import gradverify as gv

    r = gv.triage(_hardsigmoid_rule(1.0), _naive_inputs(), seeds=6, max_examples=5, kinks=[-3.0, 3.0])
    assert isinstance(r, gv.Triage) and not r.ok
    assert r.verdict == "bug in a region", r.evidence
    located = [v for f in r.evidence["failures"] for v in f["position"]]
    assert located and all(abs(v) > 3 for v in located)  # every wrong element found is a saturated one
    assert r.evidence["region"] and set(r.evidence["region"]) <= {"x < -3", "x > 3"}
    m = r.evidence["minimal_case"]  # shrunk by gv.verify to one saturated element, far from the kinks
    assert m["shapes"] == [[1]] and m["kink_distance"] >= 0.5 and abs(m["position"][0]) > 3
    assert r.example[0].shape == (1,) and not r.check.ok
    assert 0 < r.evidence["failing_examples"] < r.evidence["examples"]
    assert not r.check.ok and r.example[0].size >= 1
    assert all(f["confirmed"] for f in r.evidence["failures"])
    for f in r.evidence["failures"]:  # the error stays whatever the step, and in float64 too
        assert f["fd_sweep"]["relative_floor"] > 1e-2 and "levels off" in f["fd_sweep"]["trend"]
        assert f["dtypes"]["float64"]["ok"] is False


def naive_fd_test(eps=1e-3, tol=1e-4):
    """A test as people write it: one central difference per element, fixed eps."""
    import numpy as np

    def test(fn, x):
        fd = (fn(x + eps) - fn(x - eps)) / (2 * eps)
        ad = fn.jvp((x,), (np.ones_like(x),))
        err = float(np.max(np.abs(fd - ad)))
        return err <= tol, err

    return test


def test_rerun_correct_rule_near_kinks_with_naive_fd_is_a_kink_flake():
    from hypothesis import strategies as st

    near = st.lists(
        st.sampled_from([-3.0, 3.0]).flatmap(lambda k: st.floats(k - 5e-4, k + 5e-4)) | st.floats(-2.0, 2.0),
        min_size=1,
        max_size=4,
    ).map(lambda v: (__import__("numpy").array(v),))
    r = _triage_rerun.rerun(
        _hardsigmoid_rule(0.0), near, test=naive_fd_test(), seeds=6, max_examples=10, kinks=[-3.0, 3.0], fd_step=1e-3
    )
    assert r.verdict == "kink flake", r.evidence
    assert r.evidence["failing_seeds"]
    assert all(d <= 2e-3 for d in r.evidence["kink_distances"])
    assert "kinks" in r.evidence["avoid_with"]
    for f in r.evidence["failures"]:  # a small enough step sees the rule is right
        assert f["fd_sweep"]["relative_floor"] < 1e-6 and "the step, not AD" in f["fd_sweep"]["trend"]


def test_rerun_thread_dependent_bias_sum_is_a_nondeterministic_op():
    import torch

    class Bias(torch.autograd.Function):
        @staticmethod
        def forward(x, b):
            return x + b

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            # float32 partial sums whose grouping follows the thread count
            k = torch.get_num_threads()
            parts = [p.sum(0) for p in g.chunk(k, 0)]
            gb = parts[0]
            for p in parts[1:]:
                gb = gb + p
            return g, gb

    import numpy as np
    from hypothesis import strategies as st

    args = st.just(
        (
            torch.from_numpy(np.random.default_rng(0).standard_normal((512, 3)).astype(np.float32) * 1e3),
            torch.from_numpy(np.float32([0.5, -1.0, 2.0])),
        )
    )
    r = _triage_rerun.rerun(lambda x, b: Bias.apply(x, b), args, seeds=1, max_examples=1, threads=(1, 7))
    assert r.verdict == "nondeterministic op", r.evidence
    assert r.evidence["nondeterminism"]["differs_between"] == ["threads=1", "threads=7"]


def test_rerun_float32_op_with_a_float64_tolerance_is_a_precision_flake():
    import torch
    from hypothesis import strategies as st

    import gradverify as gv
    from gradverify import strategies as gst

    def strict(fn, *args):
        r = gv.check(fn, *args, rtol=1e-12, atol=0.0)
        return r.ok, max(
            (e.error or 0.0) / max(abs(e.values.get("FD", 1.0)), 1e-30) for e in r.errors
        ) if r.errors else 0.0

    args = gst.arrays("torch", "float32", st.tuples(st.integers(2, 6)), min_value=-2, max_value=2).map(lambda a: (a,))
    r = _triage_rerun.rerun(torch.tanh, args, test=strict, seeds=3, max_examples=5, threads=(1,))
    assert r.verdict == "precision flake", r.evidence
    tol = r.evidence["proposed_tolerance"]
    assert 1e-9 < tol < 1e-4  # float32 rounding, not a float64 one
    assert all(not f["confirmed"] for f in r.evidence["failures"])
    for f in r.evidence["failures"]:  # the same values pass in float64: precision, not the rule
        assert f["dtypes"]["float64"]["ok"] is True and f["dtypes"]["float32"]["ok"] is False
        assert f["fd_sweep"]["relative_floor"] < 1e-4
    assert "float64 passes, float32 fails" in str(r)
    # the evidence is typed and reads as the JSON it is written as
    ev = r.evidence
    assert isinstance(ev, _triage_rerun.Evidence) and ev.proposed_tolerance == tol
    assert list(ev) == [
        "seeds",
        "examples",
        "failing_examples",
        "failing_seeds",
        "nondeterminism",
        "proposed_tolerance",
        "failures",
    ]  # a precision flake's own figure only; the others are left out, not written as null
    assert "region" not in ev and ev.get("region") is None and ev.region is None
    with pytest.raises(KeyError):
        ev["region"]
    assert ev.failures[0].dtypes["float64"].ok is True and ev.failures[0].fd_sweep.explains
    record = _reports_triage.rerun_record("tanh", r, "reproduce")
    assert json.loads(json.dumps(record["evidence"])) == record["evidence"] == json.loads(gv_json(ev))


def test_cli_rerun_a_check_target(capsys):
    code = cli.main(["triage", "rerun", "example:seed-bug", "--backend", "numpy", "--seeds", "2"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("example:seed-bug[numpy,fused,float64]: bug")
    assert "the check at the minimal input:" in out and "reproduce: gradverify triage rerun" in out
    code = cli.main(["triage", "rerun", "bias_act:relu6", "--backend", "numpy", "--seeds", "2", "--max-examples", "5"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("bias_act:relu6[numpy,fused,float64]: passes")


def test_cli_rerun_writes_its_report(tmp_path, capsys):
    from html.parser import HTMLParser

    code = cli.main(
        ["triage", "rerun", "example:seed-bug", "--backend", "numpy", "--seeds", "2", "--report", str(tmp_path)]
    )
    capsys.readouterr()
    assert code == 1
    data = json.loads((tmp_path / "triage-rerun.json").read_text())
    (rec,) = data["records"]
    assert rec["verdict"].startswith("bug") and rec["reproduce"].startswith("gradverify triage rerun example:seed-bug")
    assert rec["example"][1]["values"] != [0.0] * len(rec["example"][1]["values"])  # b != 0 where it fails
    assert rec["example"][0]["shape"] == [1, 1] and rec["evidence"]["minimal_case"]["shapes"] == [[1, 1], [1]]
    md = (tmp_path / "triage-rerun.md").read_text()
    assert f"reproduce: `{rec['reproduce']}`" in md

    class Verdicts(HTMLParser):
        def __init__(self):
            super().__init__()
            self.inside, self.found = False, []

        def handle_starttag(self, tag, attrs):
            self.inside = tag == "td" and ("class", "verdict") in attrs

        def handle_data(self, data):
            if self.inside:
                self.found.append(data)

    page = Verdicts()
    page.feed((tmp_path / "triage-rerun.html").read_text())
    assert page.found == [rec["verdict"]]


# -- triage rerun NODE_ID: a pytest test as the target ------------------------------------------
NODE_SUITE = """
import os

import numpy as np
from hypothesis import strategies as st

import gradverify as gv
from gradverify import strategies as gst


def hardsigmoid(saturated_slope):
    def slope(x):
        return np.where(np.abs(x) < 3, 1 / 6, saturated_slope)

    f = lambda x: np.clip((x + 3) / 6, 0, 1)
    return gv.Rule(f, jvp=lambda p, t: slope(p[0]) * t[0], vjp=lambda p, g: (slope(p[0]) * g,))


inputs = gst.arrays("numpy", "float64", st.tuples(st.integers(1, 6)), min_value=-5, max_value=5).map(lambda a: (a,))


def test_wrong_saturated_slope(gradverify):
    assert gradverify.verify(hardsigmoid(1.0), inputs, max_examples=10).ok


def test_right_rule(gradverify):
    assert gradverify.verify(hardsigmoid(0.0), inputs, max_examples=10).ok


def test_thread_count(gradverify):
    assert gradverify.check(np.tanh, np.array([0.3, -1.2])).ok
    assert os.environ["OMP_NUM_THREADS"] != "1"


def test_no_gradient_call():
    assert os.environ["OMP_NUM_THREADS"] in ("1", "4")
"""


@pytest.mark.slow
def test_cli_rerun_a_pytest_node_id(pytester, capsys, monkeypatch, tmp_path):
    """Each verdict of a node-id target, from real pytest runs and the test's own
    gradient calls: the wrong rule is a bug in a region (its calls rerun), the
    thread-count-dependent test environment-specific (its runs), the right rule passes."""
    pytester.makepyfile(test_node=NODE_SUITE)
    monkeypatch.chdir(pytester.path)
    code = cli.main(
        ["triage", "rerun", "test_node.py", "--seeds", "2", "--max-examples", "5", "--report", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 1
    verdicts = dict(ln.split(": ", 1) for ln in out.splitlines() if ln.startswith("test_node"))
    assert verdicts == {
        "test_node.py::test_no_gradient_call": "passes",  # by its node id, though it makes no gradient call
        "test_node.py::test_right_rule": "passes",
        "test_node.py::test_thread_count": "environment-specific",
        "test_node.py::test_wrong_saturated_slope": "bug in a region",
    }
    assert "env.omp_num_threads: fails on ['1'], passes on ['4']" in out
    assert "CI runs (seeds x threads [1, 4]): 4 of 4 failed" in out  # the wrong rule, every run
    data = json.loads((tmp_path / "triage-rerun.json").read_text())
    wrong = next(r for r in data["records"] if r["target"].endswith("test_wrong_saturated_slope"))
    (call,) = wrong["calls"]
    assert call["call"] == "verify" and call["verdict"] == "bug in a region"
    assert all(abs(v) > 3 for f in call["evidence"]["failures"] for v in f["position"])
    minimal = call["evidence"]["minimal_case"]  # off the kink, though none was declared
    assert minimal["shapes"] == [[1]] and abs(minimal["position"][0]) > 3 + 1e-3
    assert wrong["reproduce"].startswith("gradverify triage rerun test_node.py::test_wrong_saturated_slope --seeds 2")
    cells = _TableCells()
    cells.feed((tmp_path / "triage-rerun.html").read_text())
    assert sorted(r[1] for r in cells.rows[1:]) == ["bug in a region", "environment-specific", "passes", "passes"]
    assert "no gv.check / gv.verify call in the test" in out


@pytest.mark.slow
def test_cli_rerun_a_node_id_that_does_not_exist(pytester, capsys, monkeypatch):
    pytester.makepyfile(test_node="def test_a():\n    pass\n")
    monkeypatch.chdir(pytester.path)
    code = cli.main(["triage", "rerun", "test_node.py::test_missing", "--seeds", "1", "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "expected a pytest node id that collects and runs" in err


def test_node_ids_map_to_junit_ids():
    from gradverify._triage.node import is_node_id, junit_id

    assert junit_id("tests/test_a.py::TestB::test_c[1-2]") == "tests.test_a.TestB::test_c[1-2]"
    assert junit_id("test_a.py::test_b") == "test_a::test_b"
    assert is_node_id("tests/test_a.py") and is_node_id("t.py::x") and not is_node_id("bias_act:relu")


def test_a_failure_the_fd_step_sweep_explains_is_never_a_bug():
    """torch's float64 hardsigmoid derivative is float32(1/6): gv.check fails
    it (3e-8 relative), but the FD-step sweep brings FD within 1e-4 of AD: a
    precision flake, not a bug."""
    import torch
    from hypothesis import strategies as st

    from gradverify import strategies as gst

    args = gst.arrays("torch", "float64", st.tuples(st.integers(2, 5)), min_value=-2.5, max_value=2.5).map(
        lambda a: (a,)
    )
    r = _triage_rerun.rerun(torch.nn.functional.hardsigmoid, args, seeds=2, max_examples=5, threads=(1,))
    assert r.verdict == "precision flake", r.evidence
    for f in r.evidence["failures"]:
        assert f["check_fails"] and not f["confirmed"]
        assert f["fd_sweep"]["relative_floor"] < _triage_rerun.STEP_EXPLAINS


def test_a_junit_row_is_the_json_object_it_is_written_as():
    from gradverify._triage.junit import JunitRow, Run, triage_junit

    runs = [
        Run("a.xml", {"host": "x"}, {"t": "failed"}, {}),
        Run("b.xml", {"host": "y"}, {"t": "passed"}, {}),
    ]
    (row,) = triage_junit(runs)
    assert isinstance(row, JunitRow) and row.verdict == row["verdict"] == "environment-specific"
    assert list(row) == [
        "test",
        "runs",
        "failures",
        "passed_on_rerun",
        "attempts",
        "failed_attempts",
        "flip_rate",
        "interval95",
        "verdict",
        "separating_fields",
        "failing_files",
    ]
    assert json.loads(gv_json([row])) == [dict(row)]
    assert row.separating_fields == {"host": {"failing": ["x"], "passing": ["y"]}}


def test_fd_against_step_is_a_central_difference_that_weighs_only_what_u_weighs():
    import numpy as np

    def f(x):
        return np.concatenate([np.sin(x), np.array([np.inf])])  # an infinite output u gives no weight

    x = np.array([0.3, -1.2])
    from gradverify._check.evaluate import Evaluator

    ev = Evaluator.for_call(f, (x,))
    u = np.array([0.0, 2.0, 0.0])
    v = [np.array([0.0, 1.0])]
    (h, fd, err), (h2, fd2, _) = steps.fd_against_step(ev, u, v, ad=5.0, steps=[1e-3, 1e-6])
    expected = 2.0 * (np.sin(-1.2 + 1e-3) - np.sin(-1.2 - 1e-3)) / 2e-3
    assert (h, fd, err) == (1e-3, expected, abs(expected - 5.0))
    assert abs(fd2 - 2.0 * np.cos(-1.2)) < 1e-8 and abs(fd - 2.0 * np.cos(-1.2)) > 1e-8  # the h^2 term, seen
