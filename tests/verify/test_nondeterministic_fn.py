"""A fn whose rule is wrong on some calls only (a random augmentation, a
race): verify reports the failure it saw; Hypothesis's replay of that input,
which may then pass, does not turn it into a flaky-test error."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

import gradverify as gv
from gradverify.strategies import arrays


def test_a_rule_wrong_on_some_calls_is_reported_not_raised_as_flaky():
    calls = itertools.count()

    def vjp(p, g):
        scale = 3.0 if (next(calls) // 40) % 2 == 1 else 2.0  # (right on 40 calls, wrong on the next 40, ...)
        return (scale * p[0] * g,)

    sometimes = gv.Rule(lambda x: x * x, vjp=vjp)
    res = gv.verify(sometimes, st.tuples(arrays("numpy", shape=(3,), min_value=0.5, max_value=2)), max_examples=30)
    assert not res.ok and res.counterexample is not None
    assert res.result is not None and not res.result.ok


def test_an_interrupt_hypothesis_wraps_in_its_own_error_stays_an_interrupt():
    """A Ctrl-C (or a sweep's SIGTERM) that lands inside Hypothesis's own
    bookkeeping comes out as its internal AssertionError chaining the
    KeyboardInterrupt: verify re-raises the interrupt, and lets any other
    error through as it is."""
    import pytest

    from gradverify._verify import _run

    def interrupted_inside():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise AssertionError  # noqa: B904 -- (as Hypothesis's `assert state._runner is not None` does)

    with pytest.raises(KeyboardInterrupt):
        _run(interrupted_inside)

    def broken():
        raise ValueError("not an interrupt")

    with pytest.raises(ValueError, match="not an interrupt"):
        _run(broken)
