"""gv.verify's shrink budget: shrinking stops when ``max_shrinks`` checks or
``max_shrinking_seconds`` have been spent after the first failure, the
result is the smallest counterexample found by then, and the report says
shrinking was cut. (The seconds are tested at 0, where no clock can differ.)"""

from __future__ import annotations

import inspect

import pytest
from hypothesis import strategies as st

import gradverify as gv
from gradverify.strategies import arrays


def _wrong_square():
    """x * x whose VJP says 2.5 x: wrong wherever x is not 0."""
    return gv.Rule(lambda x: x * x, vjp=lambda p, g: (2.5 * p[0] * g,))


def _strategy():
    return st.tuples(arrays("numpy", shape=(6,)))


def test_without_a_cut_shrinking_runs_to_its_end():
    r = gv.verify(_wrong_square(), _strategy(), max_examples=30, seed=1, max_shrinking_seconds=None)
    assert not r.ok and r.shrink_steps > 3 and r.shrink_cut is None
    assert "shrinking cut" not in str(r)


@pytest.mark.parametrize("budget", [0, 3])
def test_max_shrinks_stops_after_that_many_checks_and_keeps_the_smallest_failure(budget):
    full = gv.verify(_wrong_square(), _strategy(), max_examples=30, seed=1, max_shrinking_seconds=None)
    cut = gv.verify(_wrong_square(), _strategy(), max_examples=30, seed=1, max_shrinks=budget)
    assert not cut.ok and cut.shrink_steps == budget
    assert cut.shrink_cut == f"after {budget} step(s): max_shrinks={budget}"
    assert "shrinking cut after" in str(cut) and "the smallest counterexample found by then" in str(cut)
    # the result is a real failure, checked again as it stands
    again = gv.check(_wrong_square(), *cut.counterexample)
    assert not again.ok and again.errors[0].kind == gv.Kind.MISMATCH
    assert cut.result is not None and not cut.result.ok
    # the full shrink ran further
    assert full.shrink_steps > cut.shrink_steps
    assert cut.to_dict()["shrink_cut"] == cut.shrink_cut


def test_a_time_budget_of_zero_keeps_the_first_failure():
    r = gv.verify(_wrong_square(), _strategy(), max_examples=30, seed=1, max_shrinking_seconds=0)
    assert not r.ok and r.shrink_steps == 0 and r.shrink_cut == "after 0 step(s): max_shrinking_seconds=0"
    assert not gv.check(_wrong_square(), *r.counterexample).ok


def test_a_passing_verify_is_not_cut():
    right = gv.Rule(lambda x: x * x, vjp=lambda p, g: (2 * p[0] * g,))
    r = gv.verify(right, _strategy(), max_examples=10, seed=1, max_shrinks=0)
    assert r.ok and r.shrink_cut is None


def test_the_default_budget_is_bounded():
    default = inspect.signature(gv.verify).parameters["max_shrinking_seconds"].default
    assert default is not None and 0 < default <= 30


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_shrinks", -1),
        ("max_shrinks", 2.5),
        ("max_shrinks", True),
        ("max_shrinking_seconds", -1.0),
        ("max_shrinking_seconds", "10"),
        ("max_shrinking_seconds", float("nan")),
    ],
)
def test_a_bad_budget_is_refused_with_the_fix(option, value):
    with pytest.raises(gv.ArgumentValueError, match=rf"verify\({option}\).*expected.*found.*Fix"):
        gv.verify(_wrong_square(), _strategy(), max_examples=5, **{option: value})
