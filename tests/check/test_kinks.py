"""Kinks are detected, not flagged: correct rules pass a hair beside a kink
(checked on their own side); wrong rules near kinks are still caught, a jump
is a discontinuity, and rounding noise far above the model is measured."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._helpers import KINKED_OPS, numpy_rule


@pytest.mark.parametrize("name", sorted(KINKED_OPS))
def test_smooth_points_beside_kinks_are_not_inconclusive(name):
    """1e-9 beside a kink (float64) is resolved: checked on its own side."""
    delta = 1e-9
    pts = np.array([k + s * delta for k in KINKED_OPS[name][0] for s in (1, -1)])
    result = gv.check(numpy_rule(name), pts)
    assert result.ok, str(result)
    assert not result.inconclusive, str(result)


def test_ad_value_outside_one_sided_derivatives_is_a_mismatch():
    rule = numpy_rule("relu", derivative=lambda z: np.where(z > 0, 1.0, np.where(z == 0, 2.0, 0.0)))
    result = gv.check(rule, np.array([0.0, 1.0, -1.0]))
    assert not result.ok
    f = result.by_kind(gv.Kind.MISMATCH)[0]
    assert "outside the one-sided derivatives" in f.message
    assert f.input_index == (0,)
    assert f.values["JVP" if f.pair[0] == "JVP" else "VJP"] == 2.0


@pytest.mark.parametrize("dtype,delta", [("float64", 1e-9), ("float32", 1e-5)])
def test_wrong_rule_a_hair_beside_a_kink_is_caught(dtype, delta):
    """A rule whose cut-off sits at 1e-8 instead of 0 is wrong at x = delta > 0:
    the one-sided differences on x's own side say so."""
    rule = numpy_rule("relu", derivative=lambda z: (z > 2 * delta) * 1.0)
    result = gv.check(rule, np.array([delta, 1.0, -1.0], dtype=dtype))
    assert not result.ok, str(result)
    f = result.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index == (0,)
    assert f.values["FD"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_hardsigmoid_saturation_bug_is_caught(dtype):
    """NNlib's flaky test: slope 1 instead of 0 in the saturated region."""
    wrong = lambda z: np.where((z > -3) & (z < 3), 1 / 6, 1.0)  # noqa: E731
    x = np.array([4.0, -5.0, 0.5, 1.0], dtype=dtype)
    result = gv.check(numpy_rule("hardsigmoid", derivative=wrong), x)
    assert not result.ok
    f = result.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index in ((0,), (1,))
    assert f.values["FD"] == pytest.approx(0.0, abs=1e-6)
    assert gv.check(numpy_rule("hardsigmoid"), x).ok


def test_relu6_rule_ignoring_the_cap_is_caught():
    result = gv.check(numpy_rule("relu6", derivative=lambda z: (z > 0) * 1.0), np.array([7.0, 3.0]))
    assert not result.ok
    assert result.by_kind(gv.Kind.MISMATCH)[0].input_index == (0,)


def test_jump_is_reported_as_discontinuity():
    """Thresholded relu at theta = 1: a jump from 0 to 1, not a kink."""
    trelu = lambda z: np.where(z > 1.0, z, 0.0)  # noqa: E731
    rule = gv.Rule(trelu, jvp=lambda p, t: (p[0] > 1.0) * t[0], vjp=lambda p, g: ((p[0] > 1.0) * g,))
    result = gv.check(rule, np.array([1.0, 2.0, 0.5]))
    assert result.ok, str(result)
    (d,) = result.by_kind(gv.Kind.DISCONTINUITY)
    assert d.level == "warning"
    assert d.input_index == (0,)
    assert "jump" in d.message
    assert result.inconclusive


def test_torch_builtin_hardsigmoid_float64_derivative_is_only_float32_accurate():
    """A real finding: torch 2.13's hardsigmoid derivative in float64 is
    float32(1/6) = 0.16666667163, off by 5e-9 (3e-8 relative), which
    gradcheck's atol=1e-5 cannot see."""
    import torch

    result = gv.check(torch.nn.functional.hardsigmoid, torch.tensor([-2.0, 0.3, 2.5], dtype=torch.float64))
    assert not result.ok
    f = result.by_kind(gv.Kind.MISMATCH)[0]
    ad = f.values.get("JVP", f.values.get("VJP"))
    assert ad == pytest.approx(float(np.float32(1 / 6)), abs=1e-15)
    assert f.values["FD"] == pytest.approx(1 / 6, abs=1e-11)


def test_rounding_noise_far_above_the_model_is_measured_not_a_mismatch():
    """z/2 (1 + tanh(u)) - gelu's tanh form as first written - cancels inside
    fn for z << 0: at z = -4 its rounding noise is 1e4 times the
    output-relative model. `gradverify check all` once reported it as a false
    alarm on a correct rule; the noise is now measured from fourth differences
    of the stencil, the bound covers it and the check is conclusive - and a
    rule 1% wrong there is still caught. (The table's gelu uses z sigmoid(2u),
    which does not cancel.)"""
    c, k = 0.044715, np.sqrt(2 / np.pi)

    def f(x, b):
        z = x + b
        return 0.5 * z * (1 + np.tanh(k * (z + c * z**3)))

    def slope(p):
        z = p[0] + p[1]
        t = np.tanh(k * (z + c * z**3))
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * c * z * z)

    def rule(scale):
        return gv.Rule(
            f,
            jvp=lambda p, t: scale * slope(p) * (t[0] + t[1]),
            vjp=lambda p, g: (scale * slope(p) * g, (scale * slope(p) * g).sum(axis=0)),
        )

    x, b = np.array([[-4.0]]), np.array([0.0])
    r = gv.check(rule(1.0), x, b)
    assert r.ok and not r.inconclusive, str(r)
    assert not gv.check(rule(1.01), x, b).ok
    assert not gv.check(rule(1.01), np.array([[-1.0]]), b).ok


def test_fd_rounding_follows_the_stencil_values_at_a_minimum():
    """At x = 1e-45 logcosh's FD along b (b = 0, step ~4e-6) sees F(+-h) ~
    h^2/2 = 7e-12, not |F(0)| ~ 1e-90: the difference of two such values
    cannot resolve a slope of 1e-45. Found by `gradverify check all` as a
    'mismatch' of 1.4e-45; the rounding model now uses the stencil's values.
    A slope that is really wrong there is still caught."""
    from gradverify import ops

    x, b = np.array([[1.401298464324817e-45]]), np.array([0.0])
    assert gv.check(ops.bias_act_rule("logcosh"), x, b).ok
    rule = ops.bias_act_rule("logcosh")
    wrong = gv.Rule(
        rule.fn, jvp=lambda p, t: rule.jvp(p, t) + 1e-3, vjp=lambda p, g: tuple(c + 1e-3 for c in rule.vjp(p, g))
    )
    assert not gv.check(wrong, x, b).ok
