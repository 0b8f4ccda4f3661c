"""float32: the same bugs are still caught (a flipped element, located), and
rounding at the function's own scale (saturated tanh) is no false alarm."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from .._helpers import flipped_tanh_bias, make


@pytest.mark.standard_promotion
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_flipped_element_caught_in_float32(backend):
    rng = np.random.default_rng(11)
    flip_at = 777
    x = make(backend, rng.standard_normal((1000, 10)).astype(np.float32))
    b = make(backend, rng.standard_normal(10).astype(np.float32))
    r = gv.check(flipped_tanh_bias(backend, 10, flip_at), x, b)
    assert not r.ok
    f = r.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index == (77, 7)


def test_saturated_tanh_is_no_false_alarm():
    """1 - tanh(z)^2 near saturation rounds relative to 1, not to its tiny
    result: jax's forward and reverse mode differ by 1e-16 at z = -5 (found by
    `gradverify check all`), torch's float32 derivative at z = 9 is off by
    half its size. Both are rounding at the function's own scale, not bugs."""
    import jax
    import jax.numpy as jnp
    import torch

    with jax.enable_x64(True):
        r = gv.check(jnp.tanh, jnp.asarray([[-5.0]]))
    assert r.ok, str(r)
    r = gv.check(torch.tanh, torch.tensor([9.0], dtype=torch.float32))
    assert r.ok, str(r)
    # and a wrong slope at that point is still caught
    wrong = gv.Rule(np.tanh, jvp=lambda p, t: 2 * (1 - np.tanh(p[0]) ** 2) * t[0])
    assert not gv.check(wrong, np.array([-5.0])).ok


@pytest.mark.standard_promotion
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_cast_to_a_finer_dtype_is_judged_with_float64_inputs(framework):
    """fn that returns float32 whatever its inputs (a cast from bfloat16):
    its float64-input run is the reference, so finite differences step
    below bfloat16's spacing; a slope off by 1% is still caught."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(6)
    if framework == "torch":
        import torch

        x = torch.tensor(values, dtype=torch.bfloat16)
        cast = lambda v: v.to(torch.float32)  # noqa: E731

        class Off(torch.autograd.Function):
            @staticmethod
            def forward(ctx, v):
                return v.to(torch.float32)

            @staticmethod
            def backward(ctx, g):
                return (1.01 * g).to(torch.bfloat16)

        wrong = Off.apply
    else:
        import jax
        import jax.numpy as jnp

        x = jnp.asarray(values, jnp.bfloat16)
        cast = lambda v: jax.lax.convert_element_type(v, jnp.float32)  # noqa: E731
        wrong = jax.custom_jvp(cast)
        wrong.defjvp(lambda p, t: (cast(p[0]), 1.01 * cast(t[0])))
    r = gv.check(cast, x)
    assert r.ok and not r.by_kind(gv.Kind.NOTHING_COMPARED), str(r)
    assert "FD: float32 (fn returns float32 for float64 inputs)" in str(r), str(r)
    bad = gv.check(wrong, x)
    assert not bad.ok and bad.by_kind(gv.Kind.MISMATCH), str(bad)


def test_without_float64_a_bfloat16_argument_is_judged_on_float32_inputs():
    """jax with x64 off under strict promotion keeps fn out of float64; fn
    on float32 inputs is still finer than on bfloat16 ones."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(np.random.default_rng(4).standard_normal((2, 3)), jnp.bfloat16)
    cast = lambda v: jax.lax.convert_element_type(v, jnp.float32)  # noqa: E731
    wrong = jax.custom_jvp(cast)
    wrong.defjvp(lambda p, t: (cast(p[0]), 1.01 * cast(t[0])))
    with jax.numpy_dtype_promotion("strict"):
        r = gv.check(cast, x, order=2)
        assert r.ok and not r.by_kind(gv.Kind.MISMATCH), str(r)
        assert "FD: float32 (jax runs with strict dtype promotion" in str(r), str(r)
        bad = gv.check(wrong, x)
        assert not bad.ok and bad.by_kind(gv.Kind.MISMATCH), str(bad)
