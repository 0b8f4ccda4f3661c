"""The ``gradverify`` fixture in a real pytester project: a ``@given`` test
may take it (Hypothesis's function-scoped-fixture health check is handled
for it, and only for it), and it seeds the global generators from the
test's seed and puts them back."""

from __future__ import annotations

import re
from pathlib import Path

import hypothesis.strategies  # noqa: F401  (loaded once, before pytester's snapshots of sys.modules)
import numpy as np
import pytest

import gradverify.strategies  # noqa: F401

torch = pytest.importorskip("torch")

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow

GIVEN = """
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
import gradverify as gv
from gradverify import strategies as gst
from gradverify._sweep.examples import BUILDERS

CALLS = []


@given(gst.bias_act_args("swish", "numpy"))
@settings(max_examples=5)
def test_given_right_rule(gradverify, args):
    CALLS.append(gradverify.seed)
    gradverify.assert_gradients(BUILDERS["numpy"](False), *args)


@given(st.just((np.array([[-1.0]]), np.array([1.0]))))
def test_given_seed_bug(gradverify, args):
    gradverify.assert_gradients(BUILDERS["numpy"](True), *args)


@given(st.integers())
def test_given_with_tmp_path_still_reported(gradverify, tmp_path, n):
    pass


@given(st.integers())
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=3)
def test_given_keeps_its_own_settings(gradverify, n):
    pass


def test_every_example_saw_one_seed():
    assert len(CALLS) == 5 and len(set(CALLS)) == 1
"""


def test_given_tests_take_the_fixture(pytester):
    pytester.makepyfile(test_given=GIVEN)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    # the seed bug is a gradient failure, not a health check
    assert "test_given_seed_bug" in out and "gradverify FAILED" in out
    # with another function-scoped fixture, the health check is Hypothesis's as it was;
    # it names that test only (the summary may repeat it, depending on the terminal's width)
    flagged = set(re.findall(r"'test_given\.py::(\w+)' uses a function-scoped fixture", out))
    assert flagged == {"test_given_with_tmp_path_still_reported"}
    result.stdout.fnmatch_lines(["*FailedHealthCheck*test_given_with_tmp_path_still_reported*function-scoped fixture*"])


SEEDED = """
import random
import numpy as np
import torch
import pytest

DRAWN = {}


def _draw():
    return (random.random(), float(np.random.random()), float(torch.rand(())))


@pytest.mark.gradverify(seed=11)
def test_a(gradverify):
    DRAWN["a"] = _draw()


@pytest.mark.gradverify(seed=11)
def test_b(gradverify):
    DRAWN["b"] = _draw()


@pytest.mark.gradverify(seed=12)
def test_c(gradverify):
    DRAWN["c"] = _draw()


def test_restored_after_each():
    random.seed(5); np.random.seed(5); torch.manual_seed(5)
    expected = _draw()
    random.seed(5); np.random.seed(5); torch.manual_seed(5)
    # (a fixture set up and torn down in between leaves the states as they were)
    import gradverify.pytest_plugin.fixture as fx
    with fx.seeded_generators(99):
        _draw()
    assert _draw() == expected
    assert DRAWN["a"] == DRAWN["b"] != DRAWN["c"]
"""


def test_the_fixture_seeds_the_global_generators_from_the_tests_seed(pytester):
    pytester.makepyfile(test_seeded=SEEDED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


SAVED = """
import torch
import gradverify as gv


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x.cos()


def test_plain_check_fails():
    r = gv.check(Doubled.apply, torch.linspace(-1.0, 1.0, 100, dtype=torch.float64))
    assert r.ok, r


def test_failure_expected():
    assert not gv.check(Doubled.apply, torch.tensor([0.5], dtype=torch.float64)).ok
"""


def test_a_failing_check_in_a_failing_test_saves_its_inputs(pytester):
    pytester.makepyfile(test_saved=SAVED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gradverify-report=rep")
    result.assert_outcomes(passed=1, failed=1)
    saved = sorted((pytester.path / "rep" / "cases").glob("*.npz"))
    assert [p.name for p in saved] == ["Doubled.apply-seed0.npz"]  # (not the expected failure's)
    result.stdout.fnmatch_lines(["*inputs: rep/cases/Doubled.apply-seed0.npz*"])
    args = list(np.load(saved[0]).values())
    assert len(args) == 1 and np.array_equal(args[0], torch.linspace(-1.0, 1.0, 100, dtype=torch.float64).numpy())


SAVED_TWICE = (
    SAVED
    + """

def test_another_failing_check():
    r = gv.check(Doubled.apply, torch.linspace(-2.0, 2.0, 7, dtype=torch.float64), seed=3)
    assert r.ok, r
"""
)


def test_without_a_report_directory_the_inputs_go_to_one_directory_under_pytests_basetemp(pytester):
    pytester.makepyfile(test_saved=SAVED_TWICE)
    base = pytester.path / "base"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--basetemp={base}")
    result.assert_outcomes(passed=1, failed=2)
    saved = sorted(base.glob("*/*.npz"))
    # both failures in the session's one directory, pytest's own temporary root
    assert sorted(p.name for p in saved) == ["Doubled.apply-seed0.npz", "Doubled.apply-seed3.npz"]
    assert len({p.parent for p in saved}) == 1 and saved[0].parent.name == "gradverify-cases"
    shown = [line.split("inputs: ", 1)[1].strip() for line in result.outlines if line.startswith("    inputs: ")]
    assert len(shown) == 2 and all(Path(s).resolve().parent == saved[0].parent for s in shown)
