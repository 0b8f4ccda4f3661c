"""``pytest --gradverify-replace``: a real temporary project whose tests call
torch's gradcheck/gradgradcheck and jax's check_grads, run through pytest
with the switch - a wrong rule fails, a correct one passes, and under
``=compare`` the original's verdict decides each test while the table shows
where the two checkers disagree."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

SUITE_TORCH = """
import pytest
import torch
from torch.autograd import gradcheck


def rule(scale):
    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return scale * g * x.cos()

    return Sin.apply


def x64():
    return torch.linspace(-1, 1, 5, dtype=torch.float64).requires_grad_()


def test_right_rule():
    assert gradcheck(rule(1.0), (x64(),))


def test_wrong_rule():
    assert gradcheck(rule(2.0), (x64(),), atol=1e-6)


def test_gradgradcheck_with_constants():
    w = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.autograd.gradgradcheck(lambda x, w, k: torch.tanh(x @ w) * k, (x64().reshape(1, 5), w, 2))


@pytest.mark.filterwarnings("ignore:Input #0 requires gradient")
def test_float32_at_float64_tolerances(early_gradcheck):
    # gradcheck's own step (1e-6) is below float32's resolution of these values
    x = torch.linspace(2.0, 30.0, 64, dtype=torch.float32).requires_grad_()
    assert early_gradcheck(lambda x: torch.exp(torch.log1p(x) * 3.0).sum(0, keepdim=True), (x,), fast_mode=True)
"""

# (a name bound when the conftest is imported, before any test module)
CONFTEST = """
import pytest
from torch.autograd import gradcheck as bound_early


@pytest.fixture
def early_gradcheck():
    return bound_early
"""

SUITE_JAX = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)


@jax.custom_vjp
def wrong(x):
    return jnp.sin(x)


wrong.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (2 * g * jnp.cos(x),))


def test_right_pytree():
    params = {"w": np.linspace(-1, 1, 6).reshape(2, 3), "b": np.zeros(2)}
    check_grads(lambda p, x: jnp.tanh(p["w"] @ x + p["b"]), (params, np.linspace(0, 1, 3)), order=2)


def test_wrong_rev():
    check_grads(wrong, (np.linspace(-1, 1, 4),), 1, modes=["rev"])
"""


def _outcomes(result):
    return {
        r.nodeid.split("::")[-1]: r.outcome
        for r in result.reprec.getreports("pytest_runtest_logreport")
        if r.when == "call"
    }


def test_replace_routes_a_suites_checks_through_gradverify(pytester):
    pytester.makepyfile(test_torch=SUITE_TORCH, test_jax=SUITE_JAX)
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest("--gradverify-replace", "--gradverify-report=gv", "-p", "no:cacheprovider")
    assert _outcomes(result) == {
        "test_right_rule": "passed",
        "test_wrong_rule": "failed",
        "test_gradgradcheck_with_constants": "passed",
        "test_float32_at_float64_tolerances": "passed",  # (gradverify's bound, though bound in the conftest)
        "test_right_pytree": "passed",
        "test_wrong_rev": "failed",
    }, result.stdout.str()
    out = result.stdout.str()
    assert "replace: torch.autograd.gradcheck" in out and "jax.test_util.check_grads" in out
    # torch's own exception type, carrying gradverify's report
    result.stdout.fnmatch_lines(["*GradcheckError: gradverify (gradcheck)*", "*gradverify FAILED: Sin.apply*"])
    result.stdout.fnmatch_lines(["*AssertionError: gradverify (check_grads)*"])
    result.stdout.fnmatch_lines(["* gradient check(s) in 6 test(s), 2 failed; of them *2 check_grads*gradcheck*"])
    records = json.loads((pytester.path / "gv" / "gradverify-pytest.json").read_text())["records"]
    assert {r["call"] for r in records} == {"gradcheck", "gradgradcheck", "check_grads"}


def test_compare_keeps_the_originals_verdicts_and_tables_the_disagreements(pytester):
    pytester.makepyfile(test_torch=SUITE_TORCH, test_jax=SUITE_JAX)
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest("--gradverify-replace=compare", "--junitxml=out.xml", "-p", "no:cacheprovider")
    outcomes = _outcomes(result)
    # the originals decide: gradcheck's float32 false alarm fails its test here
    assert outcomes["test_float32_at_float64_tolerances"] == "failed", result.stdout.str()
    assert outcomes["test_right_rule"] == outcomes["test_right_pytree"] == "passed"
    assert outcomes["test_wrong_rule"] == outcomes["test_wrong_rev"] == "failed"
    result.stdout.fnmatch_lines(
        [
            "compare: * call(s), 1 verdict(s) differ; time: original * s, gradverify * s (*x)",
            "  test | function | original | gradverify",
            "  test_torch.py::test_float32_at_float64_tolerances | gradcheck: * "
            "| failed (GradcheckError: Jacobian *) | passed",
        ]
    )
    props = {
        tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
        for tc in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")
    }
    assert props["test_float32_at_float64_tolerances"]["gradverify_compare"].endswith(
        "original failed, gradverify passed"
    )


def test_the_frameworks_get_their_own_checkers_back(pytester):
    import sys

    original = sys.modules["torch.autograd.gradcheck"].gradcheck
    pytester.makepyfile(test_torch=SUITE_TORCH)
    pytester.makeconftest(CONFTEST)
    pytester.runpytest("--gradverify-replace", "-k", "right_rule", "-p", "no:cacheprovider")
    assert sys.modules["torch.autograd.gradcheck"].gradcheck is original
    assert torch.autograd.gradcheck is original
    bad = pytester.runpytest("--gradverify-replace=both", "-p", "no:cacheprovider")
    assert bad.ret != 0
    bad.stderr.fnmatch_lines(["*--gradverify-replace*invalid choice*"])


def _calls(directory):
    return [json.loads(line) for f in sorted(directory.glob("calls-*.jsonl")) for line in f.read_text().splitlines()]


@pytest.mark.parametrize("workers", [0, 2])
def test_record_keeps_the_originals_verdicts_and_writes_each_call(pytester, workers):
    import numpy as np

    pytester.makepyfile(test_torch=SUITE_TORCH, test_jax=SUITE_JAX)
    pytester.makeconftest(CONFTEST)
    stale = pytester.path / "gradverify-records" / "calls-gw9.jsonl"
    stale.parent.mkdir()
    stale.write_text('{"stale": true}\n')  # (an earlier session's: not counted again)
    args = ["--gradverify-replace=record", "-p", "no:cacheprovider"] + (["-n", str(workers)] if workers else [])
    result = pytester.runpytest_subprocess(*args)
    outcomes = {
        "test_float32_at_float64_tolerances": "failed",  # (the original's false alarm: its verdict is kept)
        "test_wrong_rule": "failed",
        "test_wrong_rev": "failed",
    }
    result.assert_outcomes(passed=3, failed=len(outcomes))
    directory = pytester.path / "gradverify-records"
    calls = _calls(directory)
    assert not stale.exists()
    by_test = {c["nodeid"].split("::")[-1]: c for c in calls}
    assert set(by_test) == {
        "test_right_rule", "test_wrong_rule", "test_gradgradcheck_with_constants",
        "test_float32_at_float64_tolerances", "test_right_pytree", "test_wrong_rev",
    }  # fmt: skip
    result.stdout.fnmatch_lines([f"record: 6 checker call(s) of * function(s) (* importable) in {directory}"])
    assert {k for k, c in by_test.items() if c["verdict"] == "failed"} == set(outcomes)
    # the function: importable where it is, and why not where not
    wrong = by_test["test_wrong_rev"]
    assert wrong["function"] == {"path": "test_jax:wrong", "name": "wrong"}
    assert by_test["test_wrong_rule"]["function"]["why"].startswith("defined inside rule (a closure)")
    assert by_test["test_gradgradcheck_with_constants"]["function"]["why"] == "a lambda"
    # the arguments by path: what is differentiated, shapes, dtypes, ranges; the options and order
    constants = by_test["test_gradgradcheck_with_constants"]
    assert [(a["path"], a["kind"], a.get("shape"), a["differentiated"]) for a in constants["arguments"]] == [
        ("[0]", "array", [1, 5], True),
        ("[1]", "array", [5, 3], False),
        ("[2]", "scalar", None, False),
    ]
    assert constants["peer"] == "gradgradcheck" and constants["options"]["order"] == 2
    tree = by_test["test_right_pytree"]
    assert [a["path"] for a in tree["arguments"]] == ["[0]['b']", "[0]['w']", "[1]"]
    assert tree["arguments"][0]["zeros"] == 2 and tree["arguments"][1]["min"] == -1.0
    assert tree["options"] == {"order": 2}
    assert wrong["options"] == {"order": 1, "modes": ["rev"]}
    assert by_test["test_wrong_rule"]["options"] == {"atol": 1e-6, "order": 1}
    assert by_test["test_float32_at_float64_tolerances"]["options"]["fast_mode"] is True
    # the point, exactly as called
    saved = np.load(directory / tree["point"])
    np.testing.assert_array_equal(saved["[0]['w']"], np.linspace(-1, 1, 6).reshape(2, 3))
    assert saved["[0]['w']"].dtype == np.float64
