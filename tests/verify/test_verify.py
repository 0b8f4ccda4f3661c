"""gv.verify on the real Hypothesis engine: the report is exact and
paste-able; shrinking never lands on a kink; the usual normalization bugs
shrink to their smallest revealing shape; misuse says what to do."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops, strategies as gst
from gradverify._sweep.examples import BUILDERS
from gradverify.ops import _norm_fused as nf, _xp

from ._helpers import naive_bias_args, on_kinks


def test_shrinking_never_lands_on_a_kink():
    """relu with slope 2 on the positive side: a naive shrink heads for x = 0,
    the kink, where the check is inconclusive; the failure shrinks elsewhere."""
    act = ops.activation("relu")
    xp = _xp.namespace(np.zeros(0))
    rule = gv.Rule(
        lambda x: act.forward(xp, x),
        jvp=lambda p, t: np.where(p[0] > 0, 2.0, 0.0) * t[0],
        vjp=lambda p, g: (np.where(p[0] > 0, 2.0, 0.0) * g,),
    )
    r = gv.verify(rule, on_kinks(act, "numpy", "float64"), max_examples=100, seed=0)
    assert not r.ok
    (x,) = r.counterexample
    assert x.size == 1 and x.reshape(-1)[0] > 0, str(r)


# -- normalization bugs ------------------------------------------------------------------
def layer_rule(bug):
    spec_of = lambda x: nf.Spec((x.ndim - 1,), 1e-5)  # noqa: E731
    xp = _xp.namespace(np.zeros(0))

    def f(x, w, b):
        xhat, _, _, _ = nf.statistics(xp, x, spec_of(x))
        return xhat * w + b

    def vjp(p, g):
        x, w, b = p
        spec = spec_of(x)
        xhat, rstd, _, var = nf.statistics(xp, x, spec)
        gx, gw, gb = nf.cotangents(xp, xhat, rstd, w, b, g, spec)
        m = x.shape[-1]
        if bug == "constant statistics":
            gx = g * w * rstd
        elif bug == "unbiased variance in the backward":
            rstd_u = 1 / np.sqrt(var * m / (m - 1) + 1e-5)
            gx = nf.project(xp, (x - x.mean(-1, keepdims=True)) * rstd_u, rstd_u, g * w, spec)
        elif bug == "weight gradient not summed over the batch":
            gw = (g * xhat)[0]
        return gx, gw, gb

    f.__name__ = (bug or "correct").replace(" ", "_")
    return gv.Rule(f, vjp=vjp)


@pytest.mark.parametrize(
    "bug,smallest",
    [
        ("constant statistics", (1, 2)),
        ("unbiased variance in the backward", (1, 2)),
        ("weight gradient not summed over the batch", (2, 3)),  # a batch of 2; axes distinct
    ],
)
def test_normalization_bugs_shrink_to_their_smallest_revealing_shape(bug, smallest):
    strategy = gst.normalization_args("layer_norm", "numpy")
    assert gv.verify(layer_rule(None), strategy, max_examples=30, seed=0).ok
    r = gv.verify(layer_rule(bug), strategy, max_examples=100, seed=0)
    assert not r.ok
    assert tuple(r.counterexample[0].shape) == smallest, str(r)


def test_verify_misuse_says_what_to_do():
    fn = BUILDERS["numpy"](False)
    with pytest.raises(gv.ArgumentTypeError, match="a Hypothesis strategy of argument tuples"):
        gv.verify(fn, [np.ones(2)])
    with pytest.raises(gv.ArgumentValueError, match=r"verify\(max_examples\): expected an int >= 1"):
        gv.verify(fn, naive_bias_args("numpy"), max_examples=0)
    with pytest.raises(gv.ArgumentTypeError, match="a strategy that yields a tuple"):
        gv.verify(np.tanh, gst.arrays("numpy"))


# -- inputs outside fn's contract (except_) ----------------------------------------------
def _contracted(wrong: float = 1.0):
    """x^2 on vectors whose first element is positive (fn asserts it), with
    its rule ``wrong`` x right where x > 1."""

    def f(x):
        assert x[0] > 0, "the first element must be positive"
        return x * x

    def d(p):
        return np.where(p[0] > 1.0, wrong, 1.0) * 2.0 * p[0]

    return gv.Rule(f, jvp=lambda p, t: d(p) * t[0], vjp=lambda p, g: (d(p) * g,))


def _vectors():
    from hypothesis import strategies as st

    return st.tuples(gst.arrays("numpy", shape=(3,), min_value=-2.0, max_value=2.0))


def test_inputs_fn_refuses_are_rejected_and_counted_not_failures():
    r = gv.verify(_contracted(), _vectors(), max_examples=30, seed=1, except_=AssertionError)
    assert r.ok and r.refused > 0 and r.examples_run > 0, str(r)
    assert f"{r.refused} drawn input(s) refused by fn" in str(r) and r.to_dict()["refused"] == r.refused
    without = gv.verify(_contracted(), _vectors(), max_examples=30, seed=1)
    assert not without.ok and without.result.by_kind(gv.Kind.EXCEPTION), str(without)


def test_a_wrong_rule_is_still_caught_among_refused_inputs():
    r = gv.verify(_contracted(wrong=1.1), _vectors(), max_examples=50, seed=1, except_=(AssertionError,))
    assert not r.ok and r.result.by_kind(gv.Kind.MISMATCH), str(r)
    assert r.counterexample[0][0] > 0  # (a refused input is never the counterexample)


def test_a_given_example_fn_refuses_is_a_failure_not_a_rejection():
    x = np.array([-1.0, 0.5, 0.5])
    r = gv.verify(_contracted(), _vectors(), max_examples=5, seed=1, examples=[(x,)], except_=AssertionError)
    assert not r.ok and r.result.by_kind(gv.Kind.EXCEPTION) and r.counterexample[0][0] == -1.0, str(r)


def test_an_fn_that_refuses_every_drawn_input_is_a_clear_error():
    from hypothesis import strategies as st

    negative = st.tuples(gst.arrays("numpy", shape=(3,), min_value=-2.0, max_value=-0.5))
    with pytest.raises(gv.ArgumentValueError, match="raised one of them at every drawn input"):
        gv.verify(_contracted(), negative, max_examples=10, seed=1, except_=AssertionError)
    with pytest.raises(gv.ArgumentTypeError, match="exception types"):
        gv.verify(_contracted(), _vectors(), max_examples=10, except_="AssertionError")


def test_a_strategy_that_draws_nothing_is_hypothesiss_error_not_a_refusal():
    from hypothesis.errors import Unsatisfiable

    with pytest.raises(Unsatisfiable):
        gv.verify(_contracted(), _vectors().filter(lambda a: False), max_examples=5, seed=1)
