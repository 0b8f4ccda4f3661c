"""The activation table on every backend: the output rules and kink
conventions agree with the derivative, the stable forms neither overflow nor
cancel (their checks conclusive)."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops
from gradverify.ops import _xp

from .._helpers import make, precise

pytestmark = pytest.mark.slow


def _grid(act, dtype=np.float64):
    pts = [-7.0, -3.5, -1.2, -0.3, 0.2, 0.9, 2.2, 4.0, 8.0]
    for at, _ in act.kink_points():
        pts += [at, at - 1e-3, at + 1e-3]
    return np.array(sorted(pts), dtype=dtype)


@pytest.mark.parametrize("name", [a.name for a in ops.ACTIVATIONS])
def test_output_rule_and_kinks_agree_with_derivative(name, backend):
    with precise(backend):
        _output_rule_and_kinks(name, backend)


def _output_rule_and_kinks(name, backend):
    act = ops.activation(name)
    x = make(backend, _grid(act))
    xp = _xp.namespace(x)
    y = act.forward(xp, x, **act.params)
    d = np.asarray(act.derivative(xp, x, y, **act.params))
    rule = act.from_output if ops.output_rule(act) is None and act.output_cancels else ops.output_rule(act)
    if rule is not None:
        np.testing.assert_allclose(np.asarray(rule(xp, y, **act.params)), d, rtol=1e-12, atol=1e-15)
    for at, k in act.kink_points():
        z = make(backend, np.array([at]))
        yk = act.forward(xp, z, **act.params)
        assert float(np.asarray(act.derivative(xp, z, yk, **act.params))[0]) == pytest.approx(k.chosen(act.params))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["softplus", "logsigmoid", "logcosh", "sigmoid", "swish", "mish", "elu"])
def test_stable_forms_do_not_overflow(name, dtype, backend):
    with precise(backend):
        _stable(name, dtype, backend)


def _stable(name, dtype, backend):
    big = np.finfo(dtype).max
    x = make(backend, np.array([-big, -1e4, -100.0, 0.0, 100.0, 1e4, big], dtype=dtype))
    act = ops.activation(name)
    xp = _xp.namespace(x)
    y = np.asarray(act.forward(xp, x, **act.params), dtype=np.float64)
    d = np.asarray(act.derivative(xp, x, act.forward(xp, x, **act.params), **act.params), dtype=np.float64)
    assert np.isfinite(y[1:-1]).all() and np.isfinite(d).all(), (y, d)
    if name in ("softplus", "logcosh"):
        assert y[-1] == pytest.approx(float(big), rel=1e-6)  # (log cosh z = |z| - log 2 there)
    if name == "logsigmoid":
        assert y[0] == pytest.approx(-float(big), rel=1e-6) and y[-1] == 0.0


@pytest.mark.parametrize("name,at", [("gelu_erf", -4.0), ("gelu", -4.0), ("logcosh", 2.0**-8), ("logcosh", 0.0)])
def test_forms_that_cancelled_now_check_conclusively(name, at):
    """Found by `gradverify check all`: 1 + erf(z/sqrt 2) at z = -4 and
    |z| + log1p(exp(-2|z|)) - log 2 near 0 cancel, and their rounding noise
    made finite differences fail correct rules. The erfc and sinh forms do not."""
    import jax

    x = make("jax", np.array([[at]]))
    b = make("jax", np.array([0.0]))
    with jax.enable_x64(True):
        r = gv.check(lambda x, b: ops.bias_act(name, x, b, impl="fused"), x, b)
        r_ref = gv.check(lambda x, b: ops.bias_act(name, x, b), x, b)
    assert r.ok and not r.inconclusive, str(r)
    assert r_ref.ok and not r_ref.inconclusive, str(r_ref)
