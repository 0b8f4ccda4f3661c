"""gradverify triage rerun NODE_ID: a pytest test as the target, from real
pytest runs and the test's own gradient calls; a node id that does not exist
is a usage error."""

from __future__ import annotations

import json

import pytest

from gradverify import cli

from ._helpers import TableCells

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow


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
    assert gradverify.check(hardsigmoid(0.0), np.array([0.3, -1.2])).ok
    assert os.environ["OMP_NUM_THREADS"] != "1"


def test_no_gradient_call():
    assert os.environ["OMP_NUM_THREADS"] in ("1", "4")


def _wrong_at_three():
    def slope(x):
        return np.where(np.abs(x) == 3, 1.0, np.where(np.abs(x) < 3, 1 / 6, 0.0))  # the bug: exactly at +-3

    f = lambda x: np.clip((x + 3) / 6, 0, 1)
    return gv.Rule(f, jvp=lambda p, t: slope(p[0]) * t[0], vjp=lambda p, g: (slope(p[0]) * g,))


def test_wrong_at_three_on_one_seed(gradverify, request):
    x = 3.0 if request.config.getoption("gradverify_seed") == 1 else 2.0  # (the input seed 1 draws)
    assert gradverify.check(_wrong_at_three(), np.array([x])).ok
"""


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
        # fails on seed 1 on every thread count, passes on seed 0: a bug, not the environment
        "test_node.py::test_wrong_at_three_on_one_seed": "bug",
    }
    assert "failing seeds: 1 (passing: 0)" in out
    assert "a failing run: pytest 'test_node.py::test_wrong_at_three_on_one_seed' --gradverify-seed 1" in out
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
    cells = TableCells()
    cells.feed((tmp_path / "triage-rerun.html").read_text())
    assert sorted(r[1] for r in cells.rows[1:]) == [
        "bug",
        "bug in a region",
        "environment-specific",
        "passes",
        "passes",
    ]
    assert "no gv.check / gv.verify call in the test" in out


def test_cli_rerun_a_node_id_that_does_not_exist(pytester, capsys, monkeypatch):
    pytester.makepyfile(test_node="def test_a():\n    pass\n")
    monkeypatch.chdir(pytester.path)
    code = cli.main(["triage", "rerun", "test_node.py::test_missing", "--seeds", "1", "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "expected a pytest node id that collects and runs" in err
