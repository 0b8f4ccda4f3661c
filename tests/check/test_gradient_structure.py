"""A gradient whose dtype, device, shape or layout is not its argument's is
its own finding, naming the rule, the argument, both values and the fix --
read where the rule returned it, before the framework cast or refused it."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


def sine(ret, name="Sine"):
    """sin with a hand-written backward whose gradient goes through ``ret``."""

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return ret(g * x.cos())

    F.__name__ = F.__qualname__ = name
    return F


X = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)


def test_a_float32_backward_for_a_float64_input_is_named_not_just_a_mismatch():
    r = gv.check(sine(lambda g: g.float()).apply, X)
    assert not r.ok
    f = r.findings[0]
    assert f.kind == gv.Kind.WRONG_DTYPE and f.level == "error" and f.argument == 0
    assert "the backward of Sine returned a float32 gradient for its input 0 (argument 0 of fn), a float64" in f.message
    assert "torch casts it to float64 afterwards" in f.message and "grad.to(x.dtype)" in f.message
    # the same rule in the input's dtype passes
    assert gv.check(sine(lambda g: g).apply, X).ok


def test_a_wrong_shape_is_named_in_place_of_the_engines_refusal():
    r = gv.check(sine(lambda g: g[:3]).apply, X)
    assert not r.ok
    (f,) = r.by_kind(gv.Kind.WRONG_SHAPE)
    assert "a gradient of shape (3,) for its input 0 (argument 0 of fn), of shape (5,)" in f.message
    assert not r.by_kind(gv.Kind.EXCEPTION), str(r)  # (the engine's "invalid gradient at index 0" said better)


def test_a_broadcast_gradient_torch_sums_down_is_not_a_finding():
    r = gv.check(sine(lambda g: g.reshape(1, 5).expand(2, 5) / 2).apply, X)
    assert r.ok, str(r)


def test_a_wrong_device_is_named():
    r = gv.check(sine(lambda g: g.to("meta")).apply, X)
    (f,) = r.by_kind(gv.Kind.WRONG_DEVICE)
    assert f.level == "error" and "a gradient on meta for its input 0 (argument 0 of fn), which is on cpu" in f.message
    assert "grad.to(x.device)" in f.message


def test_a_sparse_gradient_for_a_dense_input_is_a_layout_finding():
    r = gv.check(sine(lambda g: g.to_sparse()).apply, X)
    assert not r.ok
    (f,) = r.by_kind(gv.Kind.WRONG_LAYOUT)
    assert "returned a sparse_coo gradient for its input 0 (argument 0 of fn), a strided tensor" in f.message


def test_a_rule_deep_in_fn_and_its_second_input():
    class Mul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, (g * a).float()

    r = gv.check(lambda a, b: Mul.apply(a.exp(), b) * 2, X, X + 1)
    f = r.by_kind(gv.Kind.WRONG_DTYPE)
    assert len(f) == 1 and f[0].argument == 1, str(r)
    assert "the backward of Mul returned a float32 gradient for its input 1 (argument 1 of fn)" in f[0].message
    r2 = gv.check(lambda a, b: Mul.apply(a, b.exp()), X, X + 1)
    (g,) = r2.by_kind(gv.Kind.WRONG_DTYPE)
    assert g.argument is None and "for its input 1, a float64 tensor" in g.message  # (an intermediate, not fn's)


def test_jax_custom_vjp_of_the_wrong_dtype():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: ((jnp.cos(x) * g).astype(jnp.float32),))
    with jax.enable_x64(True):
        r = gv.check(f, jnp.linspace(0.1, 1.0, 5))
    (w,) = r.by_kind(gv.Kind.WRONG_DTYPE)
    assert w.argument == 0 and "has dtype float32; expected float64, as its argument has" in w.message
    assert "astype(x.dtype)" in w.message


def test_numpy_rule_of_the_wrong_dtype():
    rule = gv.Rule(
        np.sin, jvp=lambda p, t: np.cos(p[0]) * t[0], vjp=lambda p, g: ((np.cos(p[0]) * g).astype(np.float32),)
    )
    r = gv.check(rule, np.linspace(0.1, 1.0, 5))
    (w,) = r.by_kind(gv.Kind.WRONG_DTYPE)
    assert w.argument == 0 and w.level == "error"


def test_a_function_with_a_non_tensor_input_is_read_at_the_right_argument():
    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, scale, a, b):
            ctx.save_for_backward(a, b)
            return scale * a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return None, (2.0 * g * b).float(), 2.0 * g * a

    r = gv.check(lambda a, b: Scaled.apply(2.0, a, b), X, X + 1)
    (f,) = r.by_kind(gv.Kind.WRONG_DTYPE)
    assert f.argument == 0 and "for its input 1 (argument 0 of fn)" in f.message, str(r)
