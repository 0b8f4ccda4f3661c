"""bias_act over every activation and backend: gv.check passes on the fused
rules (at kinks too, by the convention), reference and fused agree in value,
JVP and VJP, the framework's own functions agree, and the fused torch rules
run one kernel and verify to order 2."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops

from .._helpers import make, precise
from ._helpers import ACTIVATION_NAMES, fused_fn, inputs

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_fused_passes_gv_check(name, backend):
    xn, bn = inputs()
    r = gv.check(fused_fn(backend, name), make(backend, xn), make(backend, bn))
    assert r.ok, str(r)
    assert r.modes["JVP"] == "checked" and r.modes["VJP"] == "checked"
    r = gv.check(fused_fn(backend, name, bias=False), make(backend, xn))
    assert r.ok, str(r)


@pytest.mark.parametrize("name", [a.name for a in ops.ACTIVATIONS if a.kink_points()])
def test_fused_at_kinks_follows_the_convention(name, backend):
    act = ops.activation(name)
    pts = np.array([at for at, _ in act.kink_points()] + [0.37])
    x, b = make(backend, pts - 0.25), make(backend, np.full(pts.shape, 0.25))
    r = gv.check(fused_fn(backend, name), x, b)
    assert r.ok, str(r)
    assert r.inconclusive


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_reference_and_fused_agree_in_value_jvp_vjp(name, backend):
    xn, bn = inputs(1)
    rng = np.random.default_rng(2)
    tx, tb, g = rng.standard_normal(xn.shape), rng.standard_normal(bn.shape), rng.standard_normal(xn.shape)
    out = {}
    for impl in ("reference", "fused"):
        with precise(backend):
            x, b = make(backend, xn), make(backend, bn)
            f = lambda x, b, impl=impl: ops.bias_act(name, x, b, impl=impl)  # noqa: E731
            if backend == "torch":
                import torch

                y, t = torch.func.jvp(f, (x, b), (torch.tensor(tx), torch.tensor(tb)))
                _, pull = torch.func.vjp(f, x, b)
                gx, gb = pull(torch.tensor(g))
            else:
                import jax

                y, t = jax.jvp(f, (x, b), (make("jax", tx), make("jax", tb)))
                _, pull = jax.vjp(f, x, b)
                gx, gb = pull(make("jax", g))
            out[impl] = [np.asarray(v) for v in (y, t, gx, gb)]
    for r, f in zip(out["reference"], out["fused"]):
        np.testing.assert_allclose(f, r, rtol=1e-12, atol=1e-14)


FRAMEWORK = [(a.name, a.torch, a.jax) for a in ops.ACTIVATIONS if a.torch or a.jax]


@pytest.mark.parametrize("name,torch_name,jax_name", FRAMEWORK)
def test_agrees_with_torch_and_jax_functions(name, torch_name, jax_name):
    """Away from kinks, the table and torch.nn.functional / jax.nn agree."""
    xn, _ = inputs(5, (50,))
    xn = xn[np.min([np.abs(xn - at) for at, _ in ops.activation(name).kink_points()] or [np.inf * xn], axis=0) > 1e-3]
    if torch_name:
        import torch

        x = torch.tensor(xn, requires_grad=True)
        y = getattr(torch.nn.functional, torch_name, None) or getattr(torch, torch_name)
        ref = y(x)
        ref.sum().backward()
        xt = torch.tensor(xn, requires_grad=True)
        mine = ops.bias_act(name, xt, impl="fused")
        mine.sum().backward()
        np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(xt.grad.numpy(), x.grad.numpy(), rtol=1e-11, atol=1e-14)
    if jax_name:
        import jax

        with jax.enable_x64(True):
            fn = getattr(jax.nn, jax_name, None) or getattr(jax.numpy, jax_name)
            x = jax.numpy.asarray(xn)
            np.testing.assert_allclose(ops.bias_act(name, x, impl="fused"), fn(x), rtol=1e-12, atol=1e-14)
            g_ref = jax.grad(lambda v: fn(v).sum())(x)
            g_mine = jax.grad(lambda v: ops.bias_act(name, v, impl="fused").sum())(x)
            np.testing.assert_allclose(g_mine, g_ref, rtol=1e-11, atol=1e-14)


#: The fused torch rules that hand g and what they saved to one torch kernel.
ONE_KERNEL = {
    "tanh": "aten::tanh_backward",
    "sigmoid": "aten::sigmoid_backward",
    "gelu_erf": "aten::gelu_backward",
    "swish": "aten::silu_backward",
    "mish": "aten::mish_backward",
    "elu": "aten::elu_backward",
    "selu": "aten::elu_backward",
    "celu": "aten::elu_backward",
}


@pytest.mark.parametrize(
    ("name", "params"),
    [(name, {}) for name in sorted(ONE_KERNEL)] + [("elu", {"alpha": 1.7}), ("celu", {"alpha": 1.7})],
    ids=[*sorted(ONE_KERNEL), "elu-alpha", "celu-alpha"],
)
def test_fused_torch_rules_run_one_kernel_and_verify_to_order_2(name, params):
    """Backward and JVP are one torch kernel over the array, not the table's
    formulas; that kernel is the same function (value, convention at 0) and as
    exact in float64: gv.check passes to order 2, the kink at 0 included."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    act = ops.activation(name, **params)
    xn, bn = inputs(11, (4, 5))
    xn[0, :2] = -bn[:2]  # z = 0 exactly: the elu family's kink for alpha != 1
    x, b = torch.tensor(xn, requires_grad=True), torch.tensor(bn, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y = ops.bias_act(act, x, b, impl="fused")
        y.backward(torch.ones_like(y))
    assert ONE_KERNEL[name] in {e.name for e in prof.events()}
    ref = torch.tensor(xn, requires_grad=True), torch.tensor(bn, requires_grad=True)
    ops.bias_act(act, *ref).backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, ref[0].grad, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(b.grad, ref[1].grad, rtol=1e-13, atol=1e-15)

    fn = lambda x, b: ops.bias_act(act, x, b, impl="fused")  # noqa: E731
    away = torch.tensor(inputs(12, (4, 5))[0]), torch.tensor(inputs(12, (4, 5))[1])
    for order in (1, 2):
        r = gv.check(fn, *away, order=order)
        assert r.ok and not r.inconclusive, str(r)
    assert gv.check(fn, torch.tensor(xn), torch.tensor(bn)).ok


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_every_fused_torch_rule_verifies_to_order_2(name):
    """The rule's own derivative reaches x and b whatever it keeps (bits, the
    output, x and b, or torch's own function): order 2 passes at points off
    the kinks, and the bias's gradient sums over the broadcast axis."""
    import torch

    xn, bn = inputs(13, (2, 3))
    r = gv.check(lambda x, b: ops.bias_act(name, x, b, impl="fused"), torch.tensor(xn), torch.tensor(bn), order=2)
    assert r.ok, str(r)
