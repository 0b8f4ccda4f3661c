"""The activation table: names, conventions, kinks, stable forms."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops
from gradverify.ops import _xp

from .._helpers import make, precise

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
