"""order=N for N > 2: the derivatives of the JVP and VJP checked to order
N - 1, nested. Right rules pass at orders 3 and 4 on torch and jax; a rule
whose second derivative is right and third wrong is caught at order 3 and
not at order 2."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy
pytestmark = pytest.mark.slow

X = np.linspace(-1.3, 1.1, 6)


class Tanh(torch.autograd.Function):
    """tanh with a backward written in differentiable torch operations."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1 - torch.tanh(x) ** 2)


def _exp_chain(third: float):
    """exp as three Functions, each one's backward the next: the first and
    second derivatives are right, the third is ``third`` times exp."""

    class Exp3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.exp(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * third * torch.exp(x)

    class Exp2(Exp3):
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * Exp3.apply(x)

    class Exp1(Exp3):
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * Exp2.apply(x)

    return Exp1.apply


@jax.custom_jvp
def _softplus(x):
    return jnp.logaddexp(x, 0.0)


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), jax.nn.sigmoid(x) * t


@pytest.mark.parametrize("order", [3, 4])
def test_right_rules_pass_at_orders_3_and_4(order):
    x = torch.tensor(X)
    for fn in (torch.tanh, torch.nn.functional.softplus, Tanh.apply, _exp_chain(1.0)):
        r = gv.check(fn, x, order=order)
        assert r.ok and r.second_order_checked, str(r)
        assert r.order == order and any(m.count(" of ") == order - 1 for m in r.modes), sorted(r.modes)
    with jax.enable_x64(True):
        for fn in (jnp.tanh, _softplus):
            r = gv.check(fn, jnp.asarray(X), order=order)
            assert r.ok and r.second_order_checked, str(r)


def test_a_wrong_third_derivative_is_caught_at_order_3_only():
    x = torch.tensor(X)
    wrong = _exp_chain(1.5)
    assert gv.check(wrong, x).ok
    assert gv.check(wrong, x, order=2).ok
    r = gv.check(wrong, x, order=3)
    assert not r.ok, str(r)
    f = r.errors[0]
    assert f.order == 3 and f.kind == gv.Kind.MISMATCH and f.pair[0].count(" of ") == 2, str(r)
    assert "[order 3]" in str(r)


def test_verify_and_the_command_take_any_order(tmp_path):
    from hypothesis import strategies as st

    from gradverify import strategies as gst
    from gradverify.cli import main

    wrong = _exp_chain(1.5)
    strategy = st.tuples(gst.arrays("torch", shape=(3,), min_value=-1.0, max_value=1.0))
    assert gv.verify(wrong, strategy, order=2, max_examples=3, seed=0).ok
    res = gv.verify(wrong, strategy, order=3, max_examples=3, seed=0)
    assert not res.ok and res.result.errors[0].order == 3, str(res)
    assert main(["check", "bias_act:tanh", "--backend", "torch", "--impl", "reference", "--order", "3",
                 "--max-examples", "2", "--no-report"]) == 0  # fmt: skip
    assert main(["check", "bias_act:tanh", "--order", "0", "--no-report"]) == 2


def test_orders_below_1_are_refused():
    for order in (0, -1, 1.5, True):
        with pytest.raises(gv.ArgumentValueError, match="order: expected an int >= 1"):
            gv.check(torch.tanh, torch.tensor(X), order=order)
