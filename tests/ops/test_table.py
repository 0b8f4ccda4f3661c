"""The activation table: names, conventions, kinks, stable forms."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops
from gradverify.ops import _xp

from ._helpers import make, precise

NNLIB = [
    "sigmoid",
    "hardsigmoid",
    "logsigmoid",
    "hardtanh",
    "relu",
    "leakyrelu",
    "relu6",
    "rrelu",
    "elu",
    "gelu",
    "gelu_erf",
    "gelu_sigmoid",
    "swish",
    "hardswish",
    "lisht",
    "selu",
    "celu",
    "softplus",
    "softsign",
    "logcosh",
    "mish",
    "tanhshrink",
    "softshrink",
    "trelu",
]
NOT_FROM_OUTPUT = ["swish", "gelu", "gelu_erf", "gelu_sigmoid", "mish", "hardswish", "lisht", "logcosh", "tanhshrink"]


def test_table_holds_nnlibs_list_plus_tanh_and_identity():
    assert set(NNLIB + ["tanh", "identity"]) <= set(ops.names())


@pytest.mark.parametrize(
    "alias,name",
    [
        ("σ", "sigmoid"),
        ("hardσ", "hardsigmoid"),
        ("hard_sigmoid", "hardsigmoid"),
        ("logσ", "logsigmoid"),
        ("log_sigmoid", "logsigmoid"),
        ("silu", "swish"),
        ("leaky_relu", "leakyrelu"),
        ("threshold", "trelu"),
        ("SiLU", "swish"),
    ],
)
def test_aliases(alias, name):
    assert ops.activation(alias).name == name


def test_unknown_name_and_parameter_errors():
    with pytest.raises(ValueError, match=r"found 'rellu'. Fix: did you mean 'relu'"):
        ops.activation("rellu")
    with pytest.raises(TypeError, match=r"expected parameters from \['a'\]; found \['alpha'\]"):
        ops.activation("leakyrelu", alpha=0.2)
    assert ops.activation("leakyrelu", a=0.2).params == {"a": 0.2}


def test_elu_kink_only_when_alpha_is_not_one():
    assert not ops.activation("elu").kink_points()
    ((at, k),) = ops.activation("elu", alpha=2.0).kink_points()
    assert at == 0.0 and k.left({"alpha": 2.0}) == 2.0


def test_derivative_from_output_only_where_true():
    for name in NOT_FROM_OUTPUT:
        assert ops.output_rule(ops.activation(name)) is None, name
    for name in ["sigmoid", "tanh", "relu", "softplus", "softsign", "hardtanh", "softshrink"]:
        assert ops.output_rule(ops.activation(name)) is not None, name
    # true in real arithmetic, but y + alpha cancels for z << 0: the rules keep z
    for name in ["elu", "selu", "celu"]:
        act = ops.activation(name)
        assert act.from_output is not None and act.output_cancels and ops.output_rule(act) is None, name
    # only for a > 0 (leakyrelu) and theta >= 0 (trelu)
    assert ops.output_rule(ops.activation("leakyrelu", a=-0.5)) is None
    assert ops.output_rule(ops.activation("trelu", theta=-1.0)) is None
    assert ops.activation("rrelu").random


def _grid(act, dtype=np.float64):
    pts = [-7.0, -3.5, -1.2, -0.3, 0.2, 0.9, 2.2, 4.0, 8.0]
    for at, _ in act.kink_points():
        pts += [at, at - 1e-3, at + 1e-3]
    return np.array(sorted(pts), dtype=dtype)


@pytest.mark.slow
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


def test_elu_output_rule_cancels_in_float32_yet_is_no_false_alarm():
    """A fused elu reading its slope from the output (y + alpha) loses 2e-4 of
    relative accuracy at z = -9 in float32 - rounding relative to the
    function's own scale, as torch's tanh' = 1 - y^2 does near saturation.
    gv.check allows for that (the AD bound includes |f| / |x|), so neither
    rule is a false alarm; the fused op keeps z and is accurate to rounding."""
    import torch

    act = ops.activation("elu", alpha=0.5)
    xp = _xp.namespace(np.zeros(0))
    x = np.array([-9.0], dtype=np.float32)
    truth = 0.5 * np.exp(-9.0)
    y = act.forward(xp, x, **act.params)
    from_output = float(act.from_output(xp, y, **act.params)[0])
    from_z = float(act.derivative(xp, x, y, **act.params)[0])
    assert abs(from_output - truth) / truth > 1e-4 and abs(from_z - truth) / truth < 1e-6

    def slope(v):
        return act.from_output(xp, act.forward(xp, v, **act.params), **act.params)

    rule = gv.Rule(
        lambda v: act.forward(xp, v, **act.params),
        jvp=lambda p, t: slope(p[0]) * t[0],
        vjp=lambda p, g: (slope(p[0]) * g,),
    )
    assert gv.check(rule, x).ok
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(ops.bias_act(act, xt, impl="fused").sum(), xt)
    assert abs(float(g[0]) - truth) / truth < 1e-6


@pytest.mark.parametrize("backend", ["torch", "jax"])  # numpy has no AD
@pytest.mark.parametrize("name,at,want", [("sigmoid", 0.0, 0.25), ("softplus", 0.0, 0.5), ("logsigmoid", 0.0, 0.5)])
def test_stable_forms_differentiate_correctly_at_zero(backend, name, at, want):
    """The stable forms use exp(-|z|); AD takes |z|' = 0 at 0, which made the
    reference flat there (found by `gradverify check all`)."""
    act = ops.activation(name)
    with precise(backend):
        x = make(backend, np.array([at]))
        if backend == "torch":
            import torch

            xt = x.clone().requires_grad_()
            (g,) = torch.autograd.grad(act.forward(_xp.namespace(xt), xt).sum(), xt)
            got = float(g[0])
        else:
            import jax

            got = float(jax.grad(lambda v: act.forward(_xp.namespace(v), v).sum())(x)[0])
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("name", [a.name for a in ops.ACTIVATIONS if a.kink_points()])
def test_one_sided_derivatives_at_kinks(name):
    act = ops.activation(name)
    xp = _xp.namespace(np.zeros(1))
    for at, k in act.kink_points():
        h = 1e-6
        f = lambda z: float(act.forward(xp, np.array([z]), **act.params)[0])  # noqa: E731
        if k.jump:
            assert abs(f(at + h) - f(at)) > 0.1
            continue
        assert (f(at + h) - f(at)) / h == pytest.approx(k.right(act.params), abs=1e-5)
        assert (f(at) - f(at - h)) / h == pytest.approx(k.left(act.params), abs=1e-5)
        assert (
            min(k.left(act.params), k.right(act.params))
            <= k.chosen(act.params)
            <= max(k.left(act.params), k.right(act.params))
        )


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.parametrize("name", [a.name for a in ops.ACTIVATIONS])
def test_a_derivative_said_not_to_read_the_output_does_not(name):
    """The fused rules that keep z skip the forward where the row's derivative
    does not read y: it must then give the same slope, on torch as on numpy,
    and a derivative that does read y must be said to."""
    import torch

    from gradverify.ops._table import derivative_reads_output

    act = ops.activation(name)
    z = torch.linspace(-7.0, 7.0, 141, dtype=torch.float64)
    xp = _xp.namespace(z)
    with_y = act.derivative(xp, z, act.forward(xp, z, **act.params), **act.params)
    if derivative_reads_output(act):
        with pytest.raises(TypeError):
            act.derivative(xp, z, None, **act.params)
        return
    torch.testing.assert_close(act.derivative(xp, z, None, **act.params), with_y, rtol=0, atol=0)
